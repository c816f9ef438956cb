//! Replaying a host change on the mount: the system call a local program would have made,
//! issued by the feed thread so that the FUSE handlers answer it locally (see the module
//! doc of `changes`) and the guest kernel raises the matching inotify events.
//!
//! The calls themselves are `calls.rs`'s (shared with `crossfs agent`); this module sets
//! what the feed thread's requests are answered with around each.

use std::io;
use std::path::PathBuf;

use crossfs_events::{Attrs, RelPath};
use rustix::fs::OFlags;

pub(crate) use super::calls::DirOnMount;
use super::calls::{self, open_on_mount};
use super::{FeedTarget, Intent, Present};
use crate::attr;

pub(crate) struct Replayer<'a> {
    pub mount: &'a FeedTarget,
    pub mountpoint: PathBuf,
}

impl Replayer<'_> {
    /// The node id of `path` on the mount, if it can be reached there.
    pub(super) fn node_of(&self, path: &RelPath) -> Option<u64> {
        let fd = open_on_mount(&self.mountpoint, path, OFlags::empty()).ok()?;
        Some(rustix::fs::fstat(&fd).ok()?.st_ino)
    }

    /// The directory holding `path`, opened on the mount; `None` for the root, or when the
    /// directory is not there (then the kernel holds nothing beneath it either).
    pub(super) fn parent_of(&self, path: &RelPath) -> Option<DirOnMount> {
        DirOnMount::open(&self.mountpoint, &path.parent()?).ok()
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
        self.with_intent(intent, || calls::create(dir, name, mode))
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
        self.with_intent(intent, || calls::remove(dir, name, is_dir))
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
            calls::rename((from_dir, from_name), (to_dir, to_name))
        })
    }

    /// A content change (`modified`: open for writing and truncate to the current size,
    /// giving IN_MODIFY and IN_CLOSE_WRITE) or an attribute change (chmod to the current
    /// mode: IN_ATTRIB). The attribute change is answered with the server's attributes.
    /// Symlinks are left alone (they cannot be chmod'ed, and their content never changes).
    pub(super) fn touch(&self, dir: &DirOnMount, name: &[u8], modified: bool) -> io::Result<()> {
        calls::touch(dir, name, modified)
    }
}
