//! The system calls that replay a host change on a mount, as a local program would make
//! them, so that the kernel raises the matching inotify and fanotify events: mknod, mkdir or
//! symlink for a creation, unlink or rmdir for a removal, rename, open for writing and
//! truncate to the current size for a content change, chmod to the current mode for an
//! attribute change.
//!
//! Shared by this mount's feed (`replay.rs`, which sets what its FUSE handlers answer
//! around each call) and by `crossfs agent` on a virtiofs mount (whose door answers the
//! calls itself). Only the calls live here: who answers them is the caller's business.
//!
//! Every call is made relative to a directory opened on the mount with `O_PATH`, and never
//! follows a symlink in the last component, so a replay acts on the mount's own names only.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use crossfs_events::RelPath;
use rustix::fs::{AtFlags, FileType as RawType, Mode, OFlags};

/// A directory of the mount, opened `O_PATH`, and its inode number on the mount (for
/// `crossfs mount`, its node id).
pub struct DirOnMount {
    fd: OwnedFd,
    /// `st_ino` of the directory on the mount.
    pub ino: u64,
}

/// What a replayed symlink points to: never read (the kernel asks the server when it needs
/// the target), it only has to be valid.
const PLACEHOLDER_TARGET: &str = "crossfs-replay";

/// Opens `path` (relative to the mount's root) on the mount at `mountpoint`, `O_PATH`,
/// never following a symlink in its last component.
///
/// # Errors
/// The open's.
pub fn open_on_mount(mountpoint: &Path, path: &RelPath, flags: OFlags) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::open(
        path.to_path(mountpoint),
        flags,
        Mode::empty(),
    )?)
}

impl DirOnMount {
    /// The directory `dir` (relative to the mount's root) of the mount at `mountpoint`.
    ///
    /// # Errors
    /// The open's or the fstat's (`ENOENT`: the kernel holds nothing beneath it either).
    pub fn open(mountpoint: &Path, dir: &RelPath) -> io::Result<DirOnMount> {
        let fd = open_on_mount(mountpoint, dir, OFlags::DIRECTORY)?;
        let ino = rustix::fs::fstat(&fd)?.st_ino;
        Ok(DirOnMount { fd, ino })
    }
}

/// A creation of `name` in `dir`, of the type in `mode`.
///
/// # Errors
/// The call's.
pub fn create(dir: &DirOnMount, name: &[u8], mode: u32) -> io::Result<()> {
    let perm = Mode::from_raw_mode(0o644);
    match mode & libc::S_IFMT {
        libc::S_IFDIR => rustix::fs::mkdirat(&dir.fd, name, Mode::from_raw_mode(0o755))?,
        libc::S_IFLNK => rustix::fs::symlinkat(PLACEHOLDER_TARGET, &dir.fd, name)?,
        fmt => rustix::fs::mknodat(&dir.fd, name, RawType::from_raw_mode(fmt), perm, 0)?,
    }
    Ok(())
}

/// A removal of `name` from `dir` (rmdir for a directory).
///
/// # Errors
/// The call's.
pub fn remove(dir: &DirOnMount, name: &[u8], is_dir: bool) -> io::Result<()> {
    let flags = if is_dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    Ok(rustix::fs::unlinkat(&dir.fd, name, flags)?)
}

/// A rename of `from` to `to`.
///
/// # Errors
/// The call's.
pub fn rename(
    (from_dir, from_name): (&DirOnMount, &[u8]),
    (to_dir, to_name): (&DirOnMount, &[u8]),
) -> io::Result<()> {
    Ok(rustix::fs::renameat(
        &from_dir.fd,
        from_name,
        &to_dir.fd,
        to_name,
    )?)
}

/// A content change (`modified`: open for writing and truncate to the size the mount
/// reports, giving IN_MODIFY and IN_CLOSE_WRITE) or an attribute change (chmod to the mode
/// the mount reports: IN_ATTRIB). Symlinks are left alone (they cannot be chmod'ed, and
/// their content never changes), and so are directories' content changes.
///
/// # Errors
/// The calls'.
pub fn touch(dir: &DirOnMount, name: &[u8], modified: bool) -> io::Result<()> {
    let fd = rustix::fs::openat(
        &dir.fd,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    // The magic link lands on the inode itself and follows nothing further.
    let inode = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match (st.st_mode & libc::S_IFMT, modified) {
        (libc::S_IFLNK, _) | (libc::S_IFDIR, true) => Ok(()),
        (libc::S_IFREG, true) => {
            let file = rustix::fs::open(&inode, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
            rustix::fs::ftruncate(&file, st.st_size as u64)?;
            Ok(())
        }
        _ => Ok(rustix::fs::chmod(
            &inode,
            Mode::from_raw_mode(st.st_mode & 0o7777),
        )?),
    }
}

/// Sets the modification time of `name` to `mtime_ns` (nanoseconds since the epoch),
/// leaving its access time, never following a symlink. For `crossfs agent` after a content
/// replay: with the guest's writeback cache the kernel keeps its own times for a regular
/// file rather than the server's, and the replay's truncate set them to the guest's clock.
/// (Its door answers this call with the host's attributes and changes nothing there.)
///
/// # Errors
/// utimensat's.
pub fn set_mtime(dir: &DirOnMount, name: &[u8], mtime_ns: i64) -> io::Result<()> {
    use rustix::fs::{Timespec, Timestamps, UTIME_OMIT};
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: mtime_ns.div_euclid(1_000_000_000),
            tv_nsec: mtime_ns.rem_euclid(1_000_000_000),
        },
    };
    Ok(rustix::fs::utimensat(
        &dir.fd,
        name,
        &times,
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}
