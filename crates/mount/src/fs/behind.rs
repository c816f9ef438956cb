//! The FUSE side of changes sent behind (`--changes behind`, see `crate::behind`): which
//! setattrs and writes go behind, and the attributes the kernel is given for them.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::session::{INodeNo, TimeOrNow};
use crossfs_wire::{
    BehindBase, Rgetattr, Tmessage, Tsetattrbehind, Tsetattrget, Twriteattr, Twritebehind,
};

use super::attr::Change;
use super::reply::Attr;
use super::{wire_time, MountState};
use crate::behind::{self, OnAnswer};
use crate::config::ChangeMode;
use crate::fid::FidRef;
use crate::known::handle::OpenFile;
use crate::known::listed_attrs::ChangeInFlight;
use crate::remote::ATTR_MASK;

/// Bits the host's kernel may take off a file on a change (on a chown or a write by
/// another user): a file with them, or a change setting them, waits for the server.
pub(super) const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;

impl MountState {
    /// Whether changes may go behind now: asked for, and the mount's knowledge is exact
    /// (events followed, the crossfs extension spoken).
    pub(super) fn sends_behind(&self) -> bool {
        self.config.changes == ChangeMode::Behind
            && self.client.has_extensions()
            && self.follows_events()
    }

    /// The attributes of node `ino` exactly as the server has them as `change` starts, or
    /// will once the changes sent behind are done.
    pub(super) fn exact_attrs(
        &self,
        ino: u64,
        change: Option<&ChangeInFlight>,
    ) -> Option<Rgetattr> {
        self.exact_base(ino, change).map(|(a, _)| a)
    }

    /// [`Self::exact_attrs`], and what a change predicted from them is based on: the
    /// newest unanswered change sent behind, or the attributes as the server gave them.
    fn exact_base(
        &self,
        ino: u64,
        change: Option<&ChangeInFlight>,
    ) -> Option<(Rgetattr, BehindBase)> {
        if let Some(a) = self.behind.predicted(ino) {
            return Some((a, BehindBase::after_previous()));
        }
        let (a, when) = *self.known.inodes.fetched_attrs(ino)?;
        change
            .is_some_and(|c| c.found_unchanged(a.qid.path, &when))
            .then(|| (a.clone(), BehindBase::seen(&a)))
    }

    /// Whether changes of a file of attributes `a` sent behind are made only onto the
    /// file as the mount saw it (Tsetattrbehind, Twritebehind): regular files, where the
    /// server can keep the guest's version beside a host's, and a server that does so.
    pub(super) fn conditional_behind(&self, a: &Rgetattr) -> bool {
        a.mode & libc::S_IFMT == libc::S_IFREG
            && self.client.negotiation().features & crossfs_wire::features::CONDITIONAL_BEHIND != 0
    }

    /// A SETATTR from thread `pid` sent behind, if it may be (see `crate::behind`): the
    /// attributes it leaves, to be given to the kernel.
    pub(super) fn setattr_behind(
        self: &Arc<Self>,
        (ino, pid): (INodeNo, u32),
        fid: &Arc<FidRef>,
        change: &Change,
        in_flight: &mut Option<ChangeInFlight>,
    ) -> Option<Attr> {
        if !self.sends_behind() {
            return None;
        }
        let (old, base) = self.exact_base(ino.0, in_flight.as_ref())?;
        let new = predict_setattr(&old, change, SystemTime::now())?;
        let (set, request_mask) = (change.to_wire(fid.fid()), ATTR_MASK);
        let msg = if self.conditional_behind(&old) {
            Tmessage::Setattrbehind(Tsetattrbehind {
                base,
                set,
                request_mask,
            })
        } else {
            Tmessage::Setattrget(Tsetattrget { set, request_mask })
        };
        self.changing_behind(ino.0, &new);
        let on_answer = self.on_behind_answer(ino.0, fid.clone(), sent_behind(in_flight));
        let change = behind::Change {
            ino: ino.0,
            pid,
            msg,
            predicted: Some(new.clone()),
            also: None,
            removes: None,
        };
        self.behind.send(&self.client, change, on_answer);
        Some(self.predicted_answer(ino.0, &new))
    }

    /// A WRITE from thread `pid` through an open with (Linux) `flags` sent behind, if it
    /// may be: `true` if sent. Only a small write ([`crossfs_wire::INLINE_WRITE_MAX`])
    /// through an open without `O_SYNC` or `O_DSYNC` (which ask for the server) or
    /// `O_APPEND` (the server, not the offset, decides where it lands). `O_DIRECT` asks
    /// to bypass caches, not for the server: its writes go behind too (the kernel sends
    /// one file's writes in parallel only when they do not extend it, so their
    /// predictions agree on the size).
    pub(super) fn write_behind(
        self: &Arc<Self>,
        (file, pid, flags): (&Arc<OpenFile>, u32, i32),
        fid: &Arc<FidRef>,
        (offset, data): (u64, &[u8]),
        change: &mut Option<ChangeInFlight>,
    ) -> bool {
        const NOT_BEHIND: i32 = libc::O_SYNC | libc::O_DSYNC | libc::O_APPEND;
        if !self.sends_behind()
            || data.len() > crossfs_wire::INLINE_WRITE_MAX
            || flags & NOT_BEHIND != 0
        {
            return false;
        }
        let ino = file.reopen.node;
        let Some((old, base)) = self.exact_base(ino, change.as_ref()) else {
            return false;
        };
        if old.mode & SET_ID != 0 || old.mode & libc::S_IFMT != libc::S_IFREG {
            return false;
        }
        let new = predict_write(&old, offset, data.len() as u64, SystemTime::now());
        let data = crossfs_wire::Data(data.to_vec());
        let msg = if self.conditional_behind(&old) {
            Tmessage::Writebehind(Twritebehind {
                base,
                fid: fid.fid(),
                offset,
                data,
            })
        } else {
            Tmessage::Writeattr(Twriteattr {
                fid: fid.fid(),
                offset,
                data,
            })
        };
        self.changing_behind(ino, &new);
        let on_answer = self.on_behind_answer(ino, fid.clone(), sent_behind(change));
        let change = behind::Change {
            ino,
            pid,
            msg,
            predicted: Some(new),
            also: None,
            removes: None,
        };
        self.behind.send(&self.client, change, on_answer);
        true
    }

    /// As a change sent behind starts: the names of the file in directory replicas are
    /// asked of the server from now on (which answers after the change, sent first), so
    /// that nothing read from a replica before the answer outlives the prediction.
    pub(super) fn changing_behind(&self, ino: u64, new: &Rgetattr) {
        self.known.replicas.own_changed(ino, new.qid.path);
    }

    /// What the kernel is given for node `fa.ino` with attributes `fa` for `ttl`, from a
    /// lookup or a listing: while a change sent behind is unanswered, its prediction (a
    /// replica or the server may still show the file as it was before).
    pub(super) fn unless_predicted(
        &self,
        fa: crate::session::FileAttr,
        ttl: Duration,
    ) -> (crate::session::FileAttr, Duration) {
        match self.behind.predicted(fa.ino.0) {
            Some(a) => {
                let predicted = self.predicted_answer(fa.ino.0, &a);
                (predicted.attr, predicted.ttl)
            }
            None => (fa, ttl),
        }
    }

    /// Attributes predicted by a change sent behind, for the kernel to keep as any others:
    /// once the server has answered, the kernel is told to drop them
    /// (`ChangesBehind::tell_kernel`), and then gets the server's own. Those of a file
    /// created behind and not made yet are for no time: its stats wait for it to be made
    /// (`ChangesBehind::wait_made`), so that its times never move under a stat.
    pub(super) fn predicted_answer(&self, ino: u64, a: &Rgetattr) -> Attr {
        let ttl = if self.behind.is_being_made(ino) {
            Duration::ZERO
        } else {
            self.attr_ttl()
        };
        Attr {
            attr: crate::attr::file_attr(ino, a, self.ids),
            ttl,
        }
    }

    /// What the mount learns from the answer to a change sent behind: the server's
    /// attributes, fetched as of the change's end. A refusal leaves nothing reusable (the
    /// change's end marks the file), so the server is asked again.
    pub(super) fn on_behind_answer(
        self: &Arc<Self>,
        ino: u64,
        fid: Arc<FidRef>,
        change: Option<ChangeInFlight>,
    ) -> OnAnswer {
        let shared = self.clone();
        Box::new(move |r| {
            match r.map(|answered| &answered.attrs) {
                Ok(a) if a.valid != 0 => {
                    let fetched = change.and_then(|c| c.end_with_answer(a));
                    shared.known.inodes.observe(ino, a, fetched);
                }
                Ok(_) => drop(change),
                Err(_) => {
                    drop(change);
                    shared.forget_refused(ino);
                }
            }
            // The fid stayed bound until the server had used it.
            drop(fid);
            shared.release_after_changes(ino);
        })
    }

    /// Node `ino`, forgotten by the kernel while changes of it were unanswered, goes once
    /// none is.
    pub(super) fn release_after_changes(&self, ino: u64) {
        if self
            .known
            .inodes
            .release(ino, |ino| self.behind.has_pending(ino))
        {
            self.forgotten(ino);
        }
    }

    /// What the mount holds of node `ino`, which the kernel forgot, goes.
    pub(super) fn forgotten(&self, ino: u64) {
        self.known.replicas.forget(ino);
        self.known.idle.forget(ino);
        self.known.handles.forget_unannounced(ino);
        self.ahead.page_push.forget(ino);
    }
}

impl MountState {
    /// After a refused change the kernel drops what it holds of the file (attributes
    /// and pages) and asks the server. The pages go on a thread of their own: dropping
    /// them waits for reads in progress, which may wait for the thread answering this.
    pub(super) fn forget_refused(&self, ino: u64) {
        let Some(notifier) = self.notifier.get().cloned() else {
            return;
        };
        let _ = notifier.inval_inode(INodeNo(ino), -1, 0);
        // A sync waits for this too.
        let hold = self.behind.hold();
        let spawned = std::thread::Builder::new()
            .name("crossfs-refused".into())
            .spawn(move || {
                let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
                drop(hold);
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot drop the pages of node {ino} after a refused change: {e}");
        }
    }
}

/// The change in flight `change`, noted as sent behind.
fn sent_behind(change: &mut Option<ChangeInFlight>) -> Option<ChangeInFlight> {
    let mut change = change.take();
    if let Some(c) = &mut change {
        c.sent_behind();
    }
    change
}

/// The attributes a setattr leaves a file with attributes `old`, at time `now`, if the
/// mount can tell them and the server will accept it: no size change (the kernel's pages
/// and the host's blocks follow it), no set-ID bits, ownership unchanged.
fn predict_setattr(old: &Rgetattr, change: &Change, now: SystemTime) -> Option<Rgetattr> {
    if change.size.is_some() || old.mode & SET_ID != 0 {
        return None;
    }
    let mut new = old.clone();
    if let Some(mode) = change.mode {
        if mode & SET_ID != 0 {
            return None;
        }
        new.mode = (old.mode & libc::S_IFMT) | (mode & 0o7777);
    }
    if change.uid.is_some_and(|uid| uid != old.uid) || change.gid.is_some_and(|gid| gid != old.gid)
    {
        return None;
    }
    let at = |t: TimeOrNow| match t {
        TimeOrNow::Now => wire_time(now),
        TimeOrNow::SpecificTime(t) => wire_time(t),
    };
    if let Some(t) = change.atime {
        (new.atime_sec, new.atime_nsec) = at(t);
    }
    if let Some(t) = change.mtime {
        (new.mtime_sec, new.mtime_nsec) = at(t);
    }
    // Every setattr moves the change time, even one that changes nothing.
    (new.ctime_sec, new.ctime_nsec) = wire_time(now);
    Some(new)
}

/// The attributes a write of `len` bytes at `offset` leaves a regular file with
/// attributes `old`, at time `now` (the block count is a guess the answer corrects).
fn predict_write(old: &Rgetattr, offset: u64, len: u64, now: SystemTime) -> Rgetattr {
    let mut new = old.clone();
    new.size = old.size.max(offset.saturating_add(len));
    new.blocks = old.blocks.max(new.size.div_ceil(512));
    (new.mtime_sec, new.mtime_nsec) = wire_time(now);
    (new.ctime_sec, new.ctime_nsec) = wire_time(now);
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(mode: u32) -> Rgetattr {
        Rgetattr {
            mode: libc::S_IFREG | mode,
            uid: 1000,
            gid: 100,
            size: 10,
            ..Rgetattr::default()
        }
    }

    fn change() -> Change {
        Change {
            mode: None,
            uid: None,
            gid: None,
            size: None,
            atime: None,
            mtime: None,
            ctime: false,
            kill_suidgid: None,
        }
    }

    #[test]
    fn chmod_and_utimens_are_predicted_exactly() {
        let now = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        let then = SystemTime::UNIX_EPOCH + Duration::new(1_000, 7);
        let c = Change {
            mode: Some(0o640),
            mtime: Some(TimeOrNow::SpecificTime(then)),
            atime: Some(TimeOrNow::Now),
            ..change()
        };
        let new = predict_setattr(&file(0o644), &c, now).unwrap();
        assert_eq!(new.mode, libc::S_IFREG | 0o640);
        assert_eq!((new.mtime_sec, new.mtime_nsec), (1_000, 7));
        assert_eq!((new.atime_sec, new.atime_nsec), (1_700_000_000, 5));
        assert_eq!((new.ctime_sec, new.ctime_nsec), (1_700_000_000, 5));
        assert_eq!((new.uid, new.gid, new.size), (1000, 100, 10));
    }

    #[test]
    fn what_the_host_may_refuse_or_change_is_not_predicted() {
        let now = SystemTime::now();
        // Truncation, a new owner or group, set-ID bits set or already there.
        for c in [
            Change {
                size: Some(0),
                ..change()
            },
            Change {
                uid: Some(0),
                ..change()
            },
            Change {
                gid: Some(0),
                ..change()
            },
            Change {
                mode: Some(0o4755),
                ..change()
            },
        ] {
            assert!(predict_setattr(&file(0o644), &c, now).is_none());
        }
        assert!(predict_setattr(&file(0o2755), &change(), now).is_none());
        // The owner it already has: a chown tar makes after creating the file.
        let same = Change {
            uid: Some(1000),
            gid: Some(100),
            ..change()
        };
        assert!(predict_setattr(&file(0o644), &same, now).is_some());
    }

    #[test]
    fn a_write_grows_the_file_to_its_end() {
        let now = SystemTime::now();
        assert_eq!(predict_write(&file(0o644), 4096, 100, now).size, 4196);
        assert_eq!(predict_write(&file(0o644), 0, 5, now).size, 10);
        assert!(predict_write(&file(0o644), 0, 5000, now).blocks >= 10);
    }
}
