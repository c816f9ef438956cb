//! `/dev/fuse` as a channel: reading requests, writing replies, cloning the descriptor so
//! that each worker has its own queue of requests in processing (`FUSE_DEV_IOC_CLONE`), and
//! getting a descriptor from fusermount3 for a user who may not mount.
//!
//! The only `unsafe` of the crate is here: the clone ioctl, which rustix exposes only as a
//! raw pattern.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::reply::Channel;

/// One `/dev/fuse` descriptor of the session (the mount's own, or a clone of it).
pub(crate) struct DevFuse {
    fd: OwnedFd,
}

impl DevFuse {
    pub(crate) fn new(fd: OwnedFd) -> DevFuse {
        DevFuse { fd }
    }

    /// A new descriptor attached to the same connection, with its own processing queue:
    /// replies to what it reads must be written to it.
    ///
    /// # Errors
    /// Opening `/dev/fuse`, or the kernel refusing the clone.
    pub(crate) fn clone_channel(&self) -> io::Result<DevFuse> {
        let fd = rustix::fs::open("/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        clone_ioctl(&fd, &self.fd)?;
        Ok(DevFuse { fd })
    }

    /// Reads one request into `buf`, waiting for it.
    ///
    /// # Errors
    /// ENODEV once the connection is gone (unmounted or aborted); any other error of
    /// read(2) but those retried (EINTR, EAGAIN, and ENOENT: a request withdrawn by an
    /// interrupted caller before it was read).
    pub(crate) fn receive(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match rustix::io::read(&self.fd, &mut *buf) {
                Ok(n) => return Ok(n),
                Err(
                    rustix::io::Errno::INTR | rustix::io::Errno::AGAIN | rustix::io::Errno::NOENT,
                ) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl AsFd for DevFuse {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Channel for DevFuse {
    fn send(&self, message: &[IoSlice<'_>]) -> io::Result<()> {
        let total: usize = message.iter().map(|s| s.len()).sum();
        // The kernel takes a message whole or not at all.
        let n = rustix::io::writev(&self.fd, message)?;
        if n != total {
            return Err(io::Error::other(format!(
                "short write to /dev/fuse: {n} of {total}"
            )));
        }
        Ok(())
    }

    fn splice_target(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }
}

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`, whose argument is a pointer to the
/// descriptor to clone.
const FUSE_DEV_IOC_CLONE: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<u32>(229, 0);

/// Attaches `new` (a fresh `/dev/fuse` descriptor) to the connection of `existing`.
#[allow(unsafe_code)]
fn clone_ioctl(new: &OwnedFd, existing: &OwnedFd) -> io::Result<()> {
    let source: u32 = existing.as_raw_fd() as u32;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one `uint32_t` (a descriptor number) through the
    // pointer the Setter passes, which points at `source`, alive for the call.
    let ioctl = unsafe { rustix::ioctl::Setter::<FUSE_DEV_IOC_CLONE, u32>::new(source) };
    // SAFETY: the opcode and argument type match the kernel's definition above.
    unsafe { rustix::ioctl::ioctl(new.as_fd(), ioctl) }?;
    Ok(())
}

/// Mounts through fusermount3 (set-user-ID root) for a user who may not mount: it opens
/// `/dev/fuse`, mounts with `options` (`-o` syntax) and passes the descriptor back over a
/// socket pair named in `_FUSE_COMMFD` (libfuse's protocol). Tries `fusermount` too.
///
/// # Errors
/// Neither program runs, or it fails (its message is the error's), or sends no descriptor.
pub(crate) fn fusermount(mountpoint: &Path, options: &str) -> io::Result<OwnedFd> {
    let mut last = io::Error::from(io::ErrorKind::NotFound);
    for program in ["fusermount3", "fusermount"] {
        match fusermount_with(program, mountpoint, options) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => last = e,
            r => return r,
        }
    }
    Err(last)
}

fn fusermount_with(program: &str, mountpoint: &Path, options: &str) -> io::Result<OwnedFd> {
    use rustix::net::{
        recvmsg, socketpair, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
        SocketFlags, SocketType,
    };
    // The child's end stays open across exec (no CLOEXEC); ours does not.
    let (ours, theirs) = socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::empty(),
        None,
    )?;
    rustix::io::fcntl_setfd(&ours, rustix::io::FdFlags::CLOEXEC)?;
    let child = std::process::Command::new(program)
        .arg("-o")
        .arg(options)
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    drop(theirs);
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let received = recvmsg(
        &ours,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    );
    let mut fd = None;
    if received.is_ok() {
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(mut fds) = message {
                fd = fd.or_else(|| fds.next());
            }
        }
    }
    let out = child.wait_with_output()?;
    match fd {
        Some(fd) if out.status.success() => Ok(fd),
        _ => {
            // fusermount3 names itself in its messages.
            let why = String::from_utf8_lossy(&out.stderr);
            Err(io::Error::other(match why.trim_end() {
                "" => format!("{program} sent no /dev/fuse descriptor ({})", out.status),
                why => why.to_string(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fusermount3 (run here as root, as it runs set-user-ID for a user) mounts and hands
    /// back the mount's descriptor: it appears in the table as `fuse.crossfs` with the
    /// source given, and the kernel's INIT is read from the descriptor received.
    #[test]
    fn fusermount_hands_back_the_mounts_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let fd = fusermount(
            dir.path(),
            "fsname=fusermount\\,test,subtype=crossfs,nodev,nosuid",
        )
        .expect("fusermount3");
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let at = dir.path().to_str().unwrap();
        let line = mounts.lines().find(|l| l.split(' ').nth(1) == Some(at));
        let unmount = || rustix::mount::unmount(dir.path(), rustix::mount::UnmountFlags::DETACH);
        let dev = DevFuse::new(fd);
        let mut buf = vec![0u8; 1 << 16];
        let init = dev.receive(&mut buf).map(|n| buf[..n].to_vec());
        let _ = unmount();
        let fields: Vec<&str> = line
            .expect("the mount is in the table")
            .split(' ')
            .collect();
        assert_eq!((fields[0], fields[2]), ("fusermount,test", "fuse.crossfs"));
        let init = init.expect("reading INIT");
        let req = crossfs_fuse_abi::decode(&init).expect("INIT decodes");
        assert!(matches!(req.op, Ok(crossfs_fuse_abi::Op::Init(_))));
    }
}
