//! CREATE and MKDIR sent behind (`--changes behind`, see `crate::behind`): a new regular
//! file the mount answers itself, with a node, attributes and an open handle, and makes on
//! the server after, with `Tcreatebehind`; a new directory likewise, with `Tmkdirbehind`.
//!
//! Only where the mount can tell the server will make the file as predicted: the
//! directory's replica is complete and has no such name (the kernel checked the caller's
//! permission against the directory's attributes, which events keep), the mode has no
//! set-ID bits, and the last file the server made for the same caller and group showed
//! the owner it gets (a root server makes files as itself: the chown that gives one to its
//! creator, as the exact mode's `give_to`, goes behind right after it). Everything else
//! waits, as in the exact mode. A host change
//! the events have not brought yet (a directory made read-only a moment ago) makes the
//! server refuse: reported as any refused change (`crate::behind`).
//!
//! Until the server has answered, the file is known by a `qid.path` of the mount's own
//! (`InodeTable::unmade_path`): its fids, chosen by the mount, are bound by the create,
//! which the server runs before the connection's next request, so changes to the file
//! sent behind after it, or waiting for the server, find it made. Where a host program
//! took the name meanwhile, the server makes the file beside it as
//! `NAME.crossfs-conflict-N` and the node moves there; the host's file is left alone.
//! A create refused (ENOSPC, EACCES, ...) leaves a node that answers ESTALE, and its
//! errno is reported as any refused change's (`crate::behind`).
//!
//! A MKDIR goes behind the same way, as `Tmkdirbehind`, where the same holds, the
//! directory is not set-group-ID (its new directory would inherit the bit), and the mount
//! has seen what a new directory looks like on this export (its size, blocks and links
//! differ between file systems: the first mkdir waits and shows it). The new
//! directory's node gets an empty, complete replica at once (nothing can be in it but what
//! the guest puts there, sent after it, and what a host program puts there once it is
//! made, which events bring), and its fid, chosen by the mount and bound by the mkdir, is
//! the one the creates sent into it use. Its GETATTRs wait for its mkdir's answer, as a
//! new file's stats do (`ChangesBehind::wait_made`), the kernel's as it walks a path
//! through it included. Where a host program took the name meanwhile, the server makes
//! the directory beside it as `NAME.crossfs-conflict-N`, and what the guest sent into it
//! goes there with it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::session::INodeNo;
use crossfs_wire::{
    features, open_flags, BehindBase, Qid, Rgetattr, Tcreateattr, Tcreatebehind,
    Tcreatebehindmarked, Tmessage, Tmkdirattr, Tmkdirbehind, Tsetattr, Tsetattrbehind, Tsetattrget,
    QID_TYPE_DIR, QID_TYPE_FILE,
};

use super::behind::SET_ID;
use super::reply::{Created, Entry};
use super::{wire_time, Caller, MountState};
use crate::behind::{self, Answered, OnAnswer};
use crate::fid::FidRef;
use crate::known::listed_attrs::{ChangeInFlight, Fetched};
use crate::known::replica::{Answer, Ticket};
use crate::remote::support::{NewDirShape, NewFileOwner};
use crate::remote::ATTR_MASK;

impl MountState {
    /// CREATE of `name` in `parent` from thread `pid` sent behind, if it may be (see the
    /// module doc). `wire`: the open flags for the server.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_behind(
        self: &Arc<Self>,
        (parent, dir): (INodeNo, &Arc<FidRef>),
        name: &[u8],
        (mode, flags, wire): (u32, i32, u32),
        (caller, pid): (Caller, u32),
        change: &ChangeInFlight,
    ) -> Option<Created> {
        if !self.sends_behind()
            || mode & SET_ID != 0
            || !self.replicas_usable()
            || self.known.replicas.lookup(parent.0, name) != Answer::Missing
        {
            return None;
        }
        let owner = self.behind_owner(caller)?;
        let now = wire_time(SystemTime::now());
        let unmade = self.known.inodes.unmade_path();
        let predicted = predict_created(unmade, mode, owner.owner, now);
        let dir_after = self.dir_after_name_change(parent.0, change, now);

        let (nodefid, openfid) = (self.client.alloc_fid(), self.client.alloc_fid());
        let create = Tcreateattr {
            dfid: dir.fid(),
            nodefid,
            openfid,
            name: name.to_vec(),
            // The guest saw no such name: a host program's file there is never opened.
            flags: wire | open_flags::EXCL,
            mode: mode & 0o7777,
            gid: caller.gid,
            request_mask: ATTR_MASK,
        };
        // Marked with the access time predicted (to the nanosecond, no host file's), so
        // that sent again after a lost connection it finds its own file, not a host's.
        let msg = if self.client.negotiation().features & features::MARKED_CREATE != 0 {
            Tmessage::Createbehindmarked(Tcreatebehindmarked {
                atime_sec: predicted.atime_sec,
                atime_nsec: predicted.atime_nsec,
                create,
            })
        } else {
            Tmessage::Createbehind(Tcreatebehind { create })
        };
        let (node, fid) = (
            FidRef::new(&self.client, nodefid),
            FidRef::new(&self.client, openfid),
        );
        let made = (predicted.clone(), unmade);
        let fa = self.send_made((parent, name), node.clone(), made, dir_after, (pid, msg));
        if owner.give {
            self.give_behind((fa.ino.0, pid), node, &predicted);
        }
        let mut created = self.open_created(fa, fid, (flags, wire));
        created.attr_ttl = Duration::ZERO;
        Some(created)
    }

    /// MKDIR of `name` in `parent` from thread `pid` sent behind, if it may be (see the
    /// module doc).
    pub(super) fn mkdir_behind(
        self: &Arc<Self>,
        (parent, dir): (INodeNo, &Arc<FidRef>),
        name: &[u8],
        mode: u32,
        (caller, pid): (Caller, u32),
        change: &ChangeInFlight,
    ) -> Option<Entry> {
        if !self.sends_behind()
            || self.client.negotiation().features & features::MKDIR_BEHIND == 0
            || mode & SET_ID != 0
            || self.known.inodes.setgid_group(parent.0).is_some()
            || !self.replicas_usable()
            || self.known.replicas.lookup(parent.0, name) != Answer::Missing
        {
            return None;
        }
        let owner = self.behind_owner(caller)?;
        // The first mkdir of a mount waits, and shows what a new directory looks like.
        let shape = (*crate::sync::lock(&self.server.new_dir_shape))?;
        let now = wire_time(SystemTime::now());
        let unmade = self.known.inodes.unmade_path();
        let mut predicted = predict_created(unmade, mode, owner.owner, now);
        predicted.mode = libc::S_IFDIR | (mode & 0o7777);
        predicted.qid.ty = QID_TYPE_DIR;
        (predicted.size, predicted.blocks) = (shape.size, shape.blocks);
        (predicted.blksize, predicted.nlink) = (shape.blksize, shape.nlink);
        let mut dir_after = self.dir_after_name_change(parent.0, change, now);
        if let Some((_, d)) = &mut dir_after {
            // Its `..`, where directories count their subdirectories (not on btrfs).
            if shape.nlink >= 2 {
                d.nlink += 1;
            }
        }
        let newfid = self.client.alloc_fid();
        let msg = Tmessage::Mkdirbehind(Tmkdirbehind {
            atime_sec: predicted.atime_sec,
            atime_nsec: predicted.atime_nsec,
            mkdir: Tmkdirattr {
                dfid: dir.fid(),
                newfid,
                name: name.to_vec(),
                mode: mode & 0o7777,
                gid: caller.gid,
                request_mask: ATTR_MASK,
            },
        });
        let node = FidRef::new(&self.client, newfid);
        let made = (predicted.clone(), unmade);
        let attr = self.send_made((parent, name), node.clone(), made, dir_after, (pid, msg));
        if owner.give {
            self.give_behind((attr.ino.0, pid), node, &predicted);
        }
        Some(Entry {
            attr,
            // For no time, as a file created behind's: every GETATTR reaches the mount,
            // and waits for the mkdir's answer.
            attr_ttl: Duration::ZERO,
            entry_ttl: self.entry_ttl_for(crate::session::FileType::Directory),
        })
    }

    /// Shows the file or directory `name` in `parent` that `msg` from thread `pid` creates
    /// behind, with the attributes predicted for it (`qid.path` `unmade`) and node fid
    /// `node`, which the create binds, and sends `msg`; `dir_after`: the directory's
    /// attributes predicted. A new directory is anchored with an empty, complete replica
    /// first, so that events about it find it.
    fn send_made(
        self: &Arc<Self>,
        (parent, name): (INodeNo, &[u8]),
        node: Arc<FidRef>,
        (predicted, unmade): (Rgetattr, u64),
        dir_after: Option<(u64, Rgetattr)>,
        (pid, msg): (u32, Tmessage),
    ) -> crate::session::FileAttr {
        let asked = self.known.listed.before_fetch();
        self.known
            .replicas
            .own_created(parent.0, name, &predicted, None);
        let shown = self.ticket_for_left(parent.0);
        let attr = self.remember((parent, name), node.clone(), &predicted, None);
        let ino = attr.ino.0;
        if predicted.mode & libc::S_IFMT == libc::S_IFDIR {
            self.known
                .replicas
                .own_made_dir_behind((parent.0, name), ino, asked);
        }
        let on_answer = self.on_made((parent.0, name), (ino, unmade), node, (asked, shown));
        let sent = behind::Change {
            ino,
            pid,
            msg,
            predicted: Some(predicted),
            also: dir_after,
            removes: None,
        };
        self.behind.send(&self.client, sent, on_answer);
        attr
    }

    /// What the mount learns from the answer to node `ino`'s create or mkdir, sent behind
    /// as `name` in `parent` with `qid.path` `unmade`; `asked`: when it was sent; `shown`:
    /// the directory's ticket once the replica showed the name.
    fn on_made(
        self: &Arc<Self>,
        (parent, name): (u64, &[u8]),
        (ino, unmade): (u64, u64),
        node: Arc<FidRef>,
        (asked, shown): (Fetched, Option<Ticket>),
    ) -> OnAnswer {
        let shared = self.clone();
        let name = name.to_vec();
        Box::new(move |r: Result<&Answered, i32>| {
            let made = match r {
                Ok(Answered {
                    attrs,
                    made_as: Some(made_as),
                    dir: Some(dir),
                }) => Some((attrs, made_as, dir)),
                _ => None,
            };
            let Some((a, made_as, dir)) = made else {
                shared.known.inodes.never_bound(ino);
                // A directory's replica: what the guest made in it is not on the host.
                shared.known.replicas.forget(ino);
                shared.known.replicas.stale(parent, &name);
                shared.forget_refused(ino);
                shared.drop_kernel_entry(parent, &name);
                return;
            };
            // A new file has no capability (as for a create that waits): known as of the
            // create, before the marks of later changes move to the file's `qid.path`.
            let capability = crate::known::missing_xattrs::CAPABILITY;
            let (listed, missing) = (&shared.known.listed, &shared.known.missing_xattrs);
            missing.found_missing(listed, a.qid.path, capability, asked);
            // The marks next: a change starting now still marks `unmade`, and only loses
            // its answer's reuse (it is asked again), never gains a stale one.
            let fetched = listed.made(Some(unmade), a, &asked);
            shared.known.inodes.made(ino, unmade, a);
            shared.known.inodes.observe(ino, a, fetched);
            // A directory: empty as the server answered its mkdir, before what came next.
            shared.note_new_dir(a);
            if *made_as == name {
                shared.known.replicas.own_made(parent, &name, unmade, a);
                if let Some(shown) = shown {
                    shared.known.replicas.own_left_behind(parent, shown, dir);
                }
            } else {
                // The name is the host's file: the guest's is found beside it. A
                // directory's replica goes: host events under the name may have reached it.
                shared.known.replicas.forget(ino);
                shared.known.replicas.stale(parent, &name);
                shared.known.replicas.own_created(parent, made_as, a, None);
                shared.known.inodes.made_as(ino, parent, &name, made_as);
                shared.drop_kernel_entry(parent, &name);
            }
            // The node's fid stayed with the create until the server had bound it.
            drop(node);
            shared.release_after_changes(ino);
        })
    }

    /// The attributes directory `parent` will have once a name in it changes at `now`
    /// (made or removed behind), predicted from the newest the mount has (exact where it
    /// can tell): the kernel asks for them before the next change in it, to check
    /// permissions, which events keep exact; without them the server would answer, after
    /// the change, and the next change there would wait for it.
    pub(super) fn dir_after_name_change(
        &self,
        parent: u64,
        change: &ChangeInFlight,
        now: (u64, u64),
    ) -> Option<(u64, Rgetattr)> {
        let mut d = self
            .behind
            .predicted(parent)
            .or_else(|| self.known.replicas.left_attrs(parent))
            .or_else(|| self.exact_attrs(parent, Some(change)))
            .or_else(|| self.known.inodes.fetched_attrs(parent).map(|f| f.0))
            .filter(|d| d.mode & libc::S_IFMT == libc::S_IFDIR)?;
        // A directory made behind and answered since: known by its file's `qid.path`.
        if let Some(qid_path) = self.known.inodes.qid_path(parent) {
            d.qid.path = qid_path;
        }
        (d.mtime_sec, d.mtime_nsec) = now;
        (d.ctime_sec, d.ctime_nsec) = now;
        Some((parent, d))
    }

    /// Drops the kernel's entry for `name` in `parent` (it leads to a file created behind
    /// that the server made elsewhere, or not at all, or removed behind and kept by the
    /// host), on a thread of its own: the kernel
    /// takes the directory's lock for it, which a lookup waiting for the thread that reads
    /// answers may hold. A sync waits for it.
    pub(super) fn drop_kernel_entry(&self, parent: u64, name: &[u8]) {
        let Some(notifier) = self.notifier.get().cloned() else {
            return;
        };
        let hold = self.behind.hold();
        let name = name.to_vec();
        let spawned = std::thread::Builder::new()
            .name("crossfs-unmade".into())
            .spawn(move || {
                use std::os::unix::ffi::OsStrExt;
                let _ = notifier.inval_entry(INodeNo(parent), std::ffi::OsStr::from_bytes(&name));
                drop(hold);
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot drop the kernel's entry of a file created behind: {e}");
        }
    }

    /// Notes what a directory the server has just made (empty) looks like, for mkdirs sent
    /// behind to predict.
    pub(super) fn note_new_dir(&self, a: &Rgetattr) {
        if a.valid != 0 && a.mode & libc::S_IFMT == libc::S_IFDIR {
            *crate::sync::lock(&self.server.new_dir_shape) = Some(NewDirShape {
                size: a.size,
                blocks: a.blocks,
                blksize: a.blksize,
                nlink: a.nlink,
            });
        }
    }

    /// Notes who the server made a new file for and the owner (uid, gid) `made` it made
    /// it with, before the mount gave it to the caller, for creates sent behind to predict.
    pub(super) fn note_new_file_owner(&self, caller: Caller, made: (u32, u32)) {
        *crate::sync::lock(&self.server.new_file_owner) = Some(NewFileOwner {
            asked: (caller.uid, caller.gid),
            got: made,
        });
    }

    /// The owner (uid, gid) a file or directory made now for `caller` ends up with, as
    /// the last create that waited for the same caller and group showed, if a create sent
    /// behind may predict it, and whether the mount gives it to the caller after making
    /// it ([`BehindOwner::give`]), as the exact mode does (`give_to`).
    fn behind_owner(&self, caller: Caller) -> Option<BehindOwner> {
        use std::sync::atomic::Ordering::Relaxed;
        let o = (*crate::sync::lock(&self.server.new_file_owner))
            .filter(|o| o.asked == (caller.uid, caller.gid))?;
        if o.got.0 == caller.uid || self.server.chown_refused.load(Relaxed) {
            return Some(BehindOwner {
                owner: o.got,
                give: false,
            });
        }
        Some(BehindOwner {
            owner: (caller.uid, o.got.1),
            give: true,
        })
    }

    /// Sends behind, after the create or mkdir of node `ino` (fid `node`, attributes
    /// `made` predicted, its owner the caller already), the chown that gives it to its
    /// creator, as `give_to` does after a create that waits: a root server makes every
    /// file as itself. Part of making the node: its stats wait for this too. Refused with
    /// `EPERM` (the server may no longer give files away), the file stays the server's,
    /// is reported as any refused change, and later creates are not given.
    fn give_behind(self: &Arc<Self>, (ino, pid): (u64, u32), node: Arc<FidRef>, made: &Rgetattr) {
        use crossfs_wire::setattr as valid;
        let set = Tsetattr {
            valid: valid::UID,
            uid: made.uid,
            ..Tsetattr::unchanged(node.fid())
        };
        let request_mask = ATTR_MASK;
        let msg = if self.conditional_behind(made) {
            Tmessage::Setattrbehind(Tsetattrbehind {
                base: BehindBase::after_previous(),
                set,
                request_mask,
            })
        } else {
            Tmessage::Setattrget(Tsetattrget { set, request_mask })
        };
        // A change of the file as any other sent behind after its create: its answer is
        // what the server has then (tar's next change starts from it without asking).
        let mut in_flight = self.known.listed.change(vec![made.qid.path]);
        in_flight.sent_behind();
        let on_answer = self.on_behind_answer(ino, node, Some(in_flight));
        let shared = self.clone();
        let on_answer: OnAnswer = Box::new(move |r: Result<&Answered, i32>| {
            if r.is_err_and(|e| e == libc::EPERM) {
                use std::sync::atomic::Ordering::Relaxed;
                shared.server.chown_refused.store(true, Relaxed);
            }
            on_answer(r);
        });
        let change = behind::Change {
            ino,
            pid,
            msg,
            predicted: Some(made.clone()),
            also: None,
            removes: None,
        };
        self.behind.send_making(&self.client, change, on_answer);
    }
}

/// Who a file created behind belongs to once made.
struct BehindOwner {
    /// (uid, gid).
    owner: (u32, u32),
    /// Whether the mount gives it to that uid after the server made it (as its own).
    give: bool,
}

/// The attributes of a regular file the server will make at time `now`, with mode bits
/// `mode`, owned by (uid, gid) `owner`, known by `qid.path` `unmade` until it is made
/// (the block size is a guess the answer corrects).
fn predict_created(unmade: u64, mode: u32, (uid, gid): (u32, u32), now: (u64, u64)) -> Rgetattr {
    Rgetattr {
        valid: ATTR_MASK,
        qid: Qid {
            ty: QID_TYPE_FILE,
            version: 0,
            path: unmade,
        },
        mode: libc::S_IFREG | (mode & 0o7777),
        uid,
        gid,
        nlink: 1,
        rdev: 0,
        size: 0,
        blksize: 4096,
        blocks: 0,
        atime_sec: now.0,
        atime_nsec: now.1,
        mtime_sec: now.0,
        mtime_nsec: now.1,
        ctime_sec: now.0,
        ctime_nsec: now.1,
        btime_sec: now.0,
        btime_nsec: now.1,
        gen: 0,
        data_version: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_file_is_predicted_empty_with_its_mode_owner_and_the_time() {
        let a = predict_created(77, 0o640, (1000, 100), (1_700_000_000, 5));
        assert_eq!(a.mode, libc::S_IFREG | 0o640);
        assert_eq!((a.uid, a.gid, a.size, a.nlink), (1000, 100, 0, 1));
        assert_eq!((a.qid.path, a.qid.ty), (77, QID_TYPE_FILE));
        assert_eq!((a.mtime_sec, a.ctime_nsec), (1_700_000_000, 5));
        assert_eq!(a.valid, ATTR_MASK);
    }
}
