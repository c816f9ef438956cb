//! Replaying a host change on the mount: the system call a local program would have made,
//! issued by the feed thread so that the FUSE handlers answer it locally (see the module
//! doc of `changes`) and the guest kernel raises the matching inotify events.
//!
//! Every call is made relative to a directory opened on the mount with `O_PATH`, and never
//! follows a symlink in the last component, so a replay acts on the mount's own names only.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use crossfs_events::{Attrs, RelPath};
use rustix::fs::{AtFlags, FileType as RawType, Mode, OFlags};

use super::{FeedTarget, Intent, Present};
use crate::attr;

/// A directory of the mount, opened `O_PATH`, and its node id (its `st_ino` on the mount).
pub(crate) struct DirOnMount {
    fd: OwnedFd,
    pub ino: u64,
}

pub(crate) struct Replayer<'a> {
    pub mount: &'a FeedTarget,
    pub mountpoint: PathBuf,
}

/// What a replayed symlink points to: never read (the kernel asks the server when it needs
/// the target), it only has to be valid.
const PLACEHOLDER_TARGET: &str = "crossfs-replay";

impl Replayer<'_> {
    fn open(&self, path: &RelPath, flags: OFlags) -> io::Result<OwnedFd> {
        let flags = flags | OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        Ok(rustix::fs::open(
            path.to_path(&self.mountpoint),
            flags,
            Mode::empty(),
        )?)
    }

    /// The node id of `path` on the mount, if it can be reached there.
    pub(super) fn node_of(&self, path: &RelPath) -> Option<u64> {
        let fd = self.open(path, OFlags::empty()).ok()?;
        Some(rustix::fs::fstat(&fd).ok()?.st_ino)
    }

    /// The directory holding `path`, opened on the mount; `None` for the root, or when the
    /// directory is not there (then the kernel holds nothing beneath it either).
    pub(super) fn parent_of(&self, path: &RelPath) -> Option<DirOnMount> {
        let parent = path.parent()?;
        let fd = self.open(&parent, OFlags::DIRECTORY).ok()?;
        let ino = rustix::fs::fstat(&fd).ok()?.st_ino;
        Some(DirOnMount { fd, ino })
    }

    /// Runs `call` with `intent` in force for the feed thread's LOOKUPs.
    fn with_intent(&self, intent: Intent, call: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let changes = &self.mount.changes;
        changes.set_intent(intent);
        let r = call();
        changes.set_intent(Intent::default());
        r
    }

    /// A creation: the name is answered "missing", then the create request is answered
    /// with the file the server has.
    pub(super) fn create(&self, dir: &DirOnMount, name: &[u8], mode: u32) -> io::Result<()> {
        let intent = Intent {
            missing: Some((dir.ino, name.to_vec())),
            present: None,
        };
        self.with_intent(intent, || {
            let perm = Mode::from_raw_mode(0o644);
            match mode & libc::S_IFMT {
                libc::S_IFDIR => rustix::fs::mkdirat(&dir.fd, name, Mode::from_raw_mode(0o755))?,
                libc::S_IFLNK => rustix::fs::symlinkat(PLACEHOLDER_TARGET, &dir.fd, name)?,
                fmt => rustix::fs::mknodat(&dir.fd, name, RawType::from_raw_mode(fmt), perm, 0)?,
            }
            Ok(())
        })
    }

    /// What the kernel should be told `name` in `dir` is, for a replay that removes or
    /// renames it: the node it knows, else the file the server has at `fallback`, else a
    /// placeholder of type `mode`.
    fn present(
        &self,
        dir: &DirOnMount,
        name: &[u8],
        fallback: Option<(&DirOnMount, &[u8])>,
        mode: u32,
    ) -> Present {
        let s = self.mount;
        let known = s
            .known
            .inodes
            .child(dir.ino, name)
            .and_then(|ino| s.known.inodes.fid(ino));
        if let Some(fid) = known {
            if let Ok(a) = s.client.getattr(fid.fid(), crate::remote::ATTR_MASK) {
                return Present::Found(fid, Box::new(a));
            }
        }
        if let Some((to_dir, to_name)) = fallback {
            if let Some(dir_fid) = s.known.inodes.fid(to_dir.ino) {
                if let Ok((fid, a)) = crate::remote::resolve_one(&s.client, &dir_fid, to_name, None)
                {
                    return Present::Found(fid, Box::new(a));
                }
            }
        }
        Present::Gone(attr::kind(mode), mode & libc::S_IFMT)
    }

    /// A removal: the name is answered with its node, the unlink or rmdir with success.
    pub(super) fn remove(
        &self,
        dir: &DirOnMount,
        name: &[u8],
        mode: u32,
        is_dir: bool,
    ) -> io::Result<()> {
        let intent = Intent {
            missing: None,
            present: Some((dir.ino, name.to_vec(), self.present(dir, name, None, mode))),
        };
        let flags = if is_dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        self.with_intent(intent, || Ok(rustix::fs::unlinkat(&dir.fd, name, flags)?))
    }

    /// A rename: the old name is answered with the file, the new one "missing", the
    /// rename with success.
    pub(super) fn rename(
        &self,
        (from_dir, from_name): (&DirOnMount, &[u8]),
        (to_dir, to_name): (&DirOnMount, &[u8]),
        attrs: Option<Attrs>,
    ) -> io::Result<()> {
        let mode = attrs.map_or(libc::S_IFREG, |a| a.mode);
        let present = self.present(from_dir, from_name, Some((to_dir, to_name)), mode);
        let intent = Intent {
            missing: Some((to_dir.ino, to_name.to_vec())),
            present: Some((from_dir.ino, from_name.to_vec(), present)),
        };
        self.with_intent(intent, || {
            Ok(rustix::fs::renameat(
                &from_dir.fd,
                from_name,
                &to_dir.fd,
                to_name,
            )?)
        })
    }

    /// A content change (`modified`: open for writing and truncate to the current size,
    /// giving IN_MODIFY and IN_CLOSE_WRITE) or an attribute change (chmod to the current
    /// mode: IN_ATTRIB). The attribute change is answered with the server's attributes.
    /// Symlinks are left alone (they cannot be chmod'ed, and their content never changes).
    pub(super) fn touch(&self, dir: &DirOnMount, name: &[u8], modified: bool) -> io::Result<()> {
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
                let file =
                    rustix::fs::open(&inode, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
                rustix::fs::ftruncate(&file, st.st_size as u64)?;
                Ok(())
            }
            _ => Ok(rustix::fs::chmod(
                &inode,
                Mode::from_raw_mode(st.st_mode & 0o7777),
            )?),
        }
    }
}
