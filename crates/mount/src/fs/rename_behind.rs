//! RENAME sent behind (`--changes behind`, see `crate::behind`): a rename within one
//! directory onto a free name, answered by the mount and made on the server after, with
//! `Trenamebehind`.
//!
//! Only where the mount can tell the server will move the file it shows: the
//! directory's replica shows the new name free, the file is a regular file or a symbolic
//! link the mount holds a fid of (so that it reaches the file whatever its name on the
//! server), and the kernel has checked the caller's permission against exact attributes
//! (the directory's). Everything else waits, as in the exact mode: renames across
//! directories, over another file, of directories, and of files known only from a
//! replica (the next walk of such a file goes by its name, which a refused rename would
//! leave wrong).
//!
//! The server renames only while the old name leads to the file the mount saw, and never
//! over a file: a file a host program put under either name first stays as the host has
//! it; the rename is refused (`ESTALE`, `EEXIST`), reported as any refused change is
//! (`crate::behind`), and the kernel is told both names again. The file's attributes
//! after the rename are predicted where the mount knows them exactly, and asked of the
//! server (which answers after the rename) where it does not.

use std::sync::Arc;
use std::time::SystemTime;

use crate::session::INodeNo;
use crossfs_wire::{features, Tmessage, Trenamebehind};

use super::{wire_time, MountState};
use crate::behind::{self, Answered, OnAnswer};
use crate::fid::FidRef;
use crate::known::inode::NodeFid;
use crate::known::listed_attrs::ChangeInFlight;
use crate::known::replica::{Answer, Ticket};
use crate::remote::ATTR_MASK;

impl MountState {
    /// RENAME of `name` to `newname` in `parent` from thread `pid` sent behind, if it may
    /// be (see the module doc): `true` if sent, and the mount shows the file renamed.
    pub(super) fn rename_behind(
        self: &Arc<Self>,
        (parent, name, newname): (INodeNo, &[u8], &[u8]),
        pid: u32,
        change: &ChangeInFlight,
    ) -> bool {
        if !self.sends_behind()
            || self.config.read_only
            || self.client.negotiation().features & features::RENAME_BEHIND == 0
            || !self.replicas_usable()
        {
            return false;
        }
        let Some(ino) = self.known.inodes.child(parent.0, name) else {
            return false;
        };
        // A file created behind is known by a `qid.path` of the mount's own until made.
        if self.behind.is_creating(ino)
            || !matches!(self.known.inodes.node_fid(ino), Some(NodeFid::Bound(_)))
            || self.known.inodes.child(parent.0, newname).is_some()
            || !matches!(
                self.known.replicas.lookup(parent.0, newname),
                Answer::Missing
            )
        {
            return false;
        }
        let Some(qid_path) = self.known.inodes.qid_path(ino) else {
            return false;
        };
        let exact = self.exact_attrs(ino, Some(change));
        let format = match (&exact, self.known.inodes.status(ino)) {
            (Some(a), _) => a.mode & libc::S_IFMT,
            (None, Some(status)) => status.mode & libc::S_IFMT,
            (None, None) => return false,
        };
        if !matches!(format, libc::S_IFREG | libc::S_IFLNK)
            || exact.as_ref().is_some_and(|a| a.qid.path != qid_path)
        {
            return false;
        }
        let Ok(dir) = self.node(parent) else {
            return false;
        };
        let now = wire_time(SystemTime::now());
        let predicted = exact.map(|mut a| {
            (a.ctime_sec, a.ctime_nsec) = now;
            a
        });
        let dir_after = self.dir_after_name_change(parent.0, change, now);
        let msg = Tmessage::Renamebehind(Trenamebehind {
            path: qid_path,
            dirfd: dir.fid(),
            oldname: name.to_vec(),
            newname: newname.to_vec(),
            request_mask: ATTR_MASK,
        });
        self.known.replicas.own_changed(ino, qid_path);
        self.known
            .inodes
            .renamed((parent.0, name), (parent.0, newname));
        self.known.replicas.own_renamed(
            (parent.0, name),
            (parent.0, newname),
            (Some(qid_path), None),
            None,
        );
        let shown = self.ticket_for_left(parent.0);
        let on_answer = self.on_renamed((parent.0, name, newname), ino, dir, shown);
        let sent = behind::Change {
            ino,
            pid,
            msg,
            predicted,
            also: dir_after,
            // Until answered, the server has the file under its old name: a reconnect
            // binds it through either.
            removes: Some((parent.0, name.to_vec())),
        };
        self.behind.send(&self.client, sent, on_answer);
        true
    }

    /// What the mount learns from the answer to the rename of `name` to `newname` in
    /// `parent`, node `ino`, sent behind through directory fid `dir`; `shown`: the
    /// directory's ticket once the replica showed the rename.
    fn on_renamed(
        self: &Arc<Self>,
        (parent, name, newname): (u64, &[u8], &[u8]),
        ino: u64,
        dir: Arc<FidRef>,
        shown: Option<Ticket>,
    ) -> OnAnswer {
        let shared = self.clone();
        let (name, newname) = (name.to_vec(), newname.to_vec());
        Box::new(move |r: Result<&Answered, i32>| {
            match r {
                Ok(answered) => {
                    if let (Some(shown), Some(d)) = (shown, &answered.dir) {
                        shared.known.replicas.own_left_behind(parent, shown, d);
                    }
                }
                Err(_) => {
                    // The host kept its files under both names: the guest sees them again
                    // (the node keeps its fid, and is found by its name no more).
                    shared.known.inodes.removed(parent, &newname);
                    shared.known.replicas.stale(parent, &name);
                    shared.known.replicas.stale(parent, &newname);
                    shared.forget_refused(ino);
                    shared.drop_kernel_entry(parent, &name);
                    shared.drop_kernel_entry(parent, &newname);
                }
            }
            // The directory's fid stayed bound until the server had used it.
            drop(dir);
            shared.release_after_changes(ino);
        })
    }
}
