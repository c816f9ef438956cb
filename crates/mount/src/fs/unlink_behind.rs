//! UNLINK and RMDIR sent behind (`--changes behind`, see `crate::behind`): the removal of
//! a file's only name, or of an empty directory, answered by the mount and made on the
//! server after, with `Tunlinkbehind` or `Trmdirbehind`.
//!
//! Only where the mount can tell the server will remove what it shows: the kernel has
//! checked the caller's permission (the directory's write and search bits, its sticky
//! bit) against exact attributes, and
//! - for a file: the directory's replica holds the name with its attributes (events keep
//!   them exact) or a change sent behind predicted them, and the file is a regular file or
//!   a symbolic link of at most [`UNLINK_BEHIND_MAX`] bytes (the server removes it on the
//!   connection's reader, before the next request);
//! - for a directory: the mount knows its attributes exactly, and its own replica is
//!   complete and empty (the guest's removals in it may still be on their way: they reach
//!   the server first).
//!
//! Everything else waits, as in the exact mode.
//!
//! The server removes the name only while it is what the mount saw, as the mount saw it
//! or as the mount's own changes left it. A file a host program changed or put under the
//! name first stays, and so does a directory a host program put something in: the
//! removal is refused (`ESTALE`, `ENOTEMPTY`), reported as any refused change is
//! (`crate::behind`), and the kernel is told the name again. A node the mount reaches
//! through its name only (answered from a replica) is bound by the removal itself
//! (`newfid`), so that the guest's open files of it read on.

use std::sync::Arc;
use std::time::SystemTime;

use crate::session::INodeNo;
use crossfs_wire::{features, BehindBase, Rgetattr, Tmessage, Trmdirbehind, Tunlinkbehind, NOFID};

use super::{wire_time, MountState};
use crate::behind::{self, Answered, OnAnswer};
use crate::fid::FidRef;
use crate::known::inode::NodeFid;
use crate::known::listed_attrs::ChangeInFlight;
use crate::known::replica::{Answer, Ticket};
use crate::remote::ATTR_MASK;

/// The largest file removed behind: the server removes it on the connection's reader,
/// and freeing a larger one's blocks may hold up the requests after it (the server's
/// own bound for a quick removal).
const UNLINK_BEHIND_MAX: u64 = 1 << 20;

impl MountState {
    /// UNLINK (or RMDIR, `is_dir`) of `name` in `parent` from thread `pid` sent behind, if
    /// it may be (see the module doc): `true` if sent, and the mount has taken the name out.
    pub(super) fn unlink_behind(
        self: &Arc<Self>,
        (parent, name, is_dir): (INodeNo, &[u8], bool),
        pid: u32,
        change: &ChangeInFlight,
    ) -> bool {
        let feature = if is_dir {
            features::RMDIR_BEHIND
        } else {
            features::UNLINK_BEHIND
        };
        if !self.sends_behind()
            || self.client.negotiation().features & feature == 0
            || !self.replicas_usable()
        {
            return false;
        }
        let Some(ino) = self.known.inodes.child(parent.0, name) else {
            return false;
        };
        // A file created behind is known by a `qid.path` of the mount's own until made.
        if self.behind.is_creating(ino) {
            return false;
        }
        let seen = if is_dir {
            self.empty_dir_seen(ino, (parent.0, name), change)
        } else {
            self.file_seen(ino, (parent.0, name))
        };
        let Some((old, base)) = seen else {
            return false;
        };
        if old.nlink == 0 || self.known.inodes.qid_path(ino) != Some(old.qid.path) {
            return false;
        }
        let Ok(dir) = self.node(parent) else {
            return false;
        };
        // A node without a fid gets one from the removal: it is reached by its name now.
        let newfid = match self.known.inodes.node_fid(ino) {
            Some(NodeFid::Lazy { .. }) => {
                let fid = FidRef::new(&self.client, self.client.alloc_fid());
                let bound = self.known.inodes.bind(ino, fid.clone());
                if Arc::ptr_eq(&bound, &fid) {
                    fid.fid()
                } else {
                    // Another thread walked it meanwhile; this fid was never bound.
                    fid.forget_clunked();
                    NOFID
                }
            }
            Some(NodeFid::Bound(_)) => NOFID,
            None => return false,
        };
        let now = wire_time(SystemTime::now());
        let mut predicted = old.clone();
        // A file's other names, if any, are asked of the server from now on
        // (`own_removed`); a directory has none, and its `.` goes with it.
        predicted.nlink = if is_dir { 0 } else { old.nlink - 1 };
        (predicted.ctime_sec, predicted.ctime_nsec) = now;
        let mut dir_after = self.dir_after_name_change(parent.0, change, now);
        let (path, dirfd, name_sent) = (old.qid.path, dir.fid(), name.to_vec());
        let msg = if is_dir {
            // Its `..` goes too.
            if let Some((_, d)) = &mut dir_after {
                d.nlink = d.nlink.saturating_sub(1);
            }
            Tmessage::Rmdirbehind(Trmdirbehind {
                path,
                dirfd,
                name: name_sent,
                newfid,
                request_mask: ATTR_MASK,
            })
        } else {
            Tmessage::Unlinkbehind(Tunlinkbehind {
                base,
                path,
                dirfd,
                name: name_sent,
                newfid,
                request_mask: ATTR_MASK,
            })
        };
        self.changing_behind(ino, &predicted);
        self.known.inodes.removed(parent.0, name);
        let file = (!is_dir).then_some(old.qid.path);
        self.known.replicas.own_removed(parent.0, name, file, None);
        let shown = self.ticket_for_left(parent.0);
        let binds = newfid != NOFID;
        let on_answer = self.on_unlinked((parent.0, name), (ino, binds), dir, shown);
        let sent = behind::Change {
            ino,
            pid,
            msg,
            predicted: Some(predicted),
            also: dir_after,
            removes: Some((parent.0, name.to_vec())),
        };
        self.behind.send(&self.client, sent, on_answer);
        true
    }

    /// The attributes of file `ino`, `name` in `parent`, as the mount saw them, and what a
    /// removal of it is based on, if the server would remove it on its reader.
    fn file_seen(&self, ino: u64, (parent, name): (u64, &[u8])) -> Option<(Rgetattr, BehindBase)> {
        let (old, base) = match self.behind.predicted(ino) {
            Some(a) => (a, BehindBase::after_previous()),
            None => match self.known.replicas.lookup(parent, name) {
                Answer::Found(a) => ((*a).clone(), BehindBase::seen(&a)),
                _ => return None,
            },
        };
        let format = old.mode & libc::S_IFMT;
        (matches!(format, libc::S_IFREG | libc::S_IFLNK) && old.size <= UNLINK_BEHIND_MAX)
            .then_some((old, base))
    }

    /// The attributes of directory `ino`, `name` in `parent`, exactly as the server has
    /// them (or will once the changes sent behind are made), if its replica says it is
    /// empty then; the base is unused (the server checks that it is empty).
    fn empty_dir_seen(
        &self,
        ino: u64,
        (parent, name): (u64, &[u8]),
        change: &ChangeInFlight,
    ) -> Option<(Rgetattr, BehindBase)> {
        if self.known.replicas.entries(ino) != Some(0) {
            return None;
        }
        let old = self
            .behind
            .predicted(ino)
            .or_else(|| self.known.replicas.left_attrs(ino))
            .or_else(|| self.exact_attrs(ino, Some(change)))
            .or_else(|| match self.known.replicas.lookup(parent, name) {
                Answer::Found(a) => Some((*a).clone()),
                _ => None,
            })
            .filter(|a| a.mode & libc::S_IFMT == libc::S_IFDIR)?;
        Some((old, BehindBase::after_previous()))
    }

    /// What the mount learns from the answer to the removal of `name` in `parent`, node
    /// `ino`, sent behind through directory fid `dir`; `binds`: whether the removal was to
    /// bind the node's fid; `shown`: the directory's ticket once the replica showed the
    /// name gone.
    fn on_unlinked(
        self: &Arc<Self>,
        (parent, name): (u64, &[u8]),
        (ino, binds): (u64, bool),
        dir: Arc<FidRef>,
        shown: Option<Ticket>,
    ) -> OnAnswer {
        let shared = self.clone();
        let name = name.to_vec();
        Box::new(move |r: Result<&Answered, i32>| {
            match r {
                Ok(answered) => {
                    if answered.attrs.valid != 0 {
                        shared.known.inodes.observe(ino, &answered.attrs, None);
                    }
                    if let (Some(shown), Some(d)) = (shown, &answered.dir) {
                        shared.known.replicas.own_left_behind(parent, shown, d);
                    }
                }
                Err(_) => {
                    // The host kept it: the guest sees it again, through a new node if
                    // this one's fid was to be bound by the removal.
                    if binds {
                        shared.known.inodes.never_bound(ino);
                    }
                    shared.known.replicas.stale(parent, &name);
                    // A directory's replica showed it empty: the host's is not.
                    shared.known.replicas.forget(ino);
                    shared.forget_refused(ino);
                    shared.drop_kernel_entry(parent, &name);
                }
            }
            // The directory's fid stayed bound until the server had used it.
            drop(dir);
            shared.release_after_changes(ino);
        })
    }
}
