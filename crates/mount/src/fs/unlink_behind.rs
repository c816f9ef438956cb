//! UNLINK sent behind (`--changes behind`, see `crate::behind`): the removal of a file's
//! only name, answered by the mount and made on the server after, with `Tunlinkbehind`.
//!
//! Only where the mount can tell the server will remove the file it shows: the
//! directory's replica holds the name with its attributes (events keep them exact) or a
//! change sent behind predicted them, the file is a regular file or a symbolic link of
//! at most [`UNLINK_BEHIND_MAX`] bytes (the server removes it on the
//! connection's reader, before the next request), and the kernel has checked the caller's
//! permission (the directory's write and search bits, its sticky bit) against exact
//! attributes. Everything else waits, as in the exact mode.
//!
//! The server removes the name only while it is the file the mount saw, as the mount saw
//! it or as the mount's own changes left it. A file a host program changed or put under
//! the name first stays: the removal is refused (`ESTALE`), reported as any refused
//! change is (`crate::behind`), and the kernel is told the name again. A node the mount
//! reaches through its name only (answered from a replica) is bound by the removal
//! itself (`newfid`), so that the guest's open files of it read on.

use std::sync::Arc;
use std::time::SystemTime;

use crate::session::INodeNo;
use crossfs_wire::{features, BehindBase, Tmessage, Tunlinkbehind, NOFID};

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
    /// UNLINK of `name` in `parent` from thread `pid` sent behind, if it may be (see the
    /// module doc): `true` if sent, and the mount has taken the name out.
    pub(super) fn unlink_behind(
        self: &Arc<Self>,
        (parent, name): (INodeNo, &[u8]),
        pid: u32,
        change: &ChangeInFlight,
    ) -> bool {
        if !self.sends_behind()
            || self.client.negotiation().features & features::UNLINK_BEHIND == 0
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
        let (old, base) = match self.behind.predicted(ino) {
            Some(a) => (a, BehindBase::after_previous()),
            None => match self.known.replicas.lookup(parent.0, name) {
                Answer::Found(a) => ((*a).clone(), BehindBase::seen(&a)),
                _ => return false,
            },
        };
        let format = old.mode & libc::S_IFMT;
        if !matches!(format, libc::S_IFREG | libc::S_IFLNK)
            || old.nlink == 0
            || old.size > UNLINK_BEHIND_MAX
            || self.known.inodes.qid_path(ino) != Some(old.qid.path)
        {
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
        // Its other names, if any, are asked of the server from now on (`own_removed`).
        predicted.nlink -= 1;
        (predicted.ctime_sec, predicted.ctime_nsec) = now;
        let dir_after = self.dir_after_name_change(parent.0, change, now);
        let msg = Tmessage::Unlinkbehind(Tunlinkbehind {
            base,
            path: old.qid.path,
            dirfd: dir.fid(),
            name: name.to_vec(),
            newfid,
            request_mask: ATTR_MASK,
        });
        self.changing_behind(ino, &predicted);
        self.known.inodes.removed(parent.0, name);
        self.known
            .replicas
            .own_removed(parent.0, name, Some(old.qid.path), None);
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
                    // The host kept the file: the guest sees it again, through a new node
                    // if this one's fid was to be bound by the removal.
                    if binds {
                        shared.known.inodes.never_bound(ino);
                    }
                    shared.known.replicas.stale(parent, &name);
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
