//! Attributes: getattr, setattr (chmod, chown, truncate, utimens), statfs.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::session::{Errno, FileHandle, INodeNo, ReplyAttr, ReplyStatfs, TimeOrNow};
use crossfs_wire::{setattr as valid, Tgetattr, Tmessage, Tsetattr, Tsetattrget, Tstatfs};

use super::reply::{answer, Attr, Later, NowOrLater};
use super::{errno, wire_time, MountState};
use crate::attr;
use crate::fid::FidRef;
use crate::known::cache::CacheMode;
use crate::known::listed_attrs::{ChangeInFlight, Fetched};
use crate::remote::{expect_reply, ATTR_MASK};

/// The attribute changes of one SETATTR.
pub(crate) struct Change {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    /// The kernel asks for ctime to be updated (it cannot be set to a value).
    pub ctime: bool,
    /// The kernel asks the file system to clear the set-id bits afterwards
    /// (`FATTR_KILL_SUIDGID`: a truncate by a caller without `CAP_FSETID`, or a chown),
    /// for this caller.
    pub kill_suidgid: Option<Caller>,
}

/// Who made a request the kernel flagged to clear set-id bits: Linux also clears
/// `S_ISGID` without group execute when the caller is not in the file's group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller {
    pub gid: u32,
    pub pid: u32,
}

impl Caller {
    /// Whether the caller is in group `gid`: its own, or one of its supplementary groups
    /// (`/proc/PID/status`; a caller that has gone is taken as not in it).
    fn in_group(self, gid: u32) -> bool {
        if self.gid == gid {
            return true;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", self.pid)) else {
            return false;
        };
        status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .is_some_and(|groups| groups.split_whitespace().any(|g| g == gid.to_string()))
    }
}

impl Change {
    pub(super) fn to_wire(&self, fid: crossfs_wire::Fid) -> Tsetattr {
        let mut m = Tsetattr::unchanged(fid);
        if let Some(mode) = self.mode {
            m.valid |= valid::MODE;
            m.mode = mode & 0o7777;
        }
        if let Some(uid) = self.uid {
            m.valid |= valid::UID;
            m.uid = uid;
        }
        if let Some(gid) = self.gid {
            m.valid |= valid::GID;
            m.gid = gid;
        }
        if let Some(size) = self.size {
            m.valid |= valid::SIZE;
            m.size = size;
        }
        match self.atime {
            Some(TimeOrNow::Now) => m.valid |= valid::ATIME,
            Some(TimeOrNow::SpecificTime(t)) => {
                m.valid |= valid::ATIME | valid::ATIME_SET;
                (m.atime_sec, m.atime_nsec) = wire_time(t);
            }
            None => {}
        }
        match self.mtime {
            Some(TimeOrNow::Now) => m.valid |= valid::MTIME,
            Some(TimeOrNow::SpecificTime(t)) => {
                m.valid |= valid::MTIME | valid::MTIME_SET;
                (m.mtime_sec, m.mtime_nsec) = wire_time(t);
            }
            None => {}
        }
        if self.ctime {
            m.valid |= valid::CTIME;
        }
        if self.kill_suidgid.is_some() {
            m.valid |= valid::KILL_SUIDGID;
        }
        m
    }
}

impl MountState {
    /// The fid to stat or change through: the open handle's if there is one (an unlinked
    /// but open file can still be reached through it), else the node's.
    fn attr_fid(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<Arc<FidRef>, Errno> {
        // A deferred open has no fid yet: the node's names the same file.
        if let Some(fid) = fh.and_then(|fh| self.known.handles.get(fh.0)?.fid().cloned()) {
            return Ok(fid);
        }
        self.node(ino)
    }

    /// Node `ino`'s attributes as the kernel is given them, after they were seen.
    fn attr_answer(
        &self,
        ino: INodeNo,
        a: &crossfs_wire::Rgetattr,
        fetched: Option<Fetched>,
    ) -> Attr {
        self.known.inodes.observe(ino.0, a, fetched);
        self.attr_now(ino, a)
    }

    /// Node `ino`'s attributes as the kernel is given them.
    fn attr_now(&self, ino: INodeNo, a: &crossfs_wire::Rgetattr) -> Attr {
        Attr {
            attr: attr::file_attr(ino.0, a, self.ids),
            ttl: self.attr_ttl(),
        }
    }

    /// Fetches attributes, answered from the completion.
    fn fetch_attr(self: &Arc<Self>, ino: INodeNo, fid: Arc<FidRef>) -> Later<'static, ReplyAttr> {
        let shared = self.clone();
        Later::new(move |reply| {
            let fetched = shared.known.listed.before_fetch();
            let msg = Tmessage::Getattr(Tgetattr {
                fid: fid.fid(),
                request_mask: ATTR_MASK,
            });
            let client = shared.client.clone();
            client.call_async(
                msg,
                Box::new(move |r| {
                    drop(fid);
                    let a = expect_reply!(r, Getattr).map_err(|e| errno(&e));
                    answer(reply, a.map(|a| shared.attr_answer(ino, &a, Some(fetched))));
                }),
            );
        })
    }

    /// GETATTR from thread `pid`. In `never` mode, the GETATTR a `stat` sends right after
    /// its LOOKUP is answered with the attributes that LOOKUP just fetched (see
    /// [`crate::CacheMode::Never`]).
    pub(super) fn getattr(
        self: &Arc<Self>,
        pid: u32,
        ino: INodeNo,
        fh: Option<FileHandle>,
    ) -> Result<NowOrLater<'static, Attr, ReplyAttr>, Errno> {
        use NowOrLater::Now;
        // A file created behind shows the server's times once made, not the guest's
        // clock, which would move when the answer came: its stat waits for its creation
        // (less than a round trip: the create went first).
        self.behind
            .wait_made(ino.0, pid)
            .map_err(|_| Errno::EINTR)?;
        if let Some(a) = self.behind.predicted(ino.0) {
            // A change sent behind is not answered yet.
            return Ok(Now(self.predicted_answer(ino.0, &a)));
        }
        if self.config.cache == CacheMode::Never && fh.is_none() {
            if let Some(fa) = self.known.recent.take(pid, ino.0) {
                self.stats
                    .caches
                    .lookup_attrs_reused
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(Now(Attr {
                    attr: fa,
                    ttl: self.attr_ttl(),
                }));
            }
        }
        if fh.is_none() && self.config.cache != CacheMode::Never {
            // After a change in a directory the kernel asks for its attributes before the
            // next change (to check permissions): the change's own reply may answer.
            if let Some(a) = self.known.replicas.left_attrs(ino.0) {
                self.stats
                    .caches
                    .dir_attrs_left
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(Now(self.attr_answer(ino, &a, None)));
            }
        }
        if let Some(a) = self.unchanged_attrs(ino.0) {
            self.stats
                .caches
                .unchanged_attrs_sent
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(Now(self.attr_now(ino, &a)));
        }
        if fh.is_none() {
            if let Some(crate::known::inode::NodeFid::Lazy {
                dir_ino,
                name,
                qid_path,
            }) = self.known.inodes.node_fid(ino.0)
            {
                return self.getattr_lazy(ino, (dir_ino, &name, qid_path)).map(Now);
            }
        }
        let fid = self.attr_fid(ino, fh)?;
        Ok(NowOrLater::Later(self.fetch_attr(ino, fid)))
    }

    /// While change events are followed, the node's newest fetched attributes if nothing
    /// can have changed them since (see `crate::known::listed_attrs`): the kernel asks again after
    /// its own reads (for the access time), which this mount's reads account for.
    fn unchanged_attrs(&self, ino: u64) -> Option<crossfs_wire::Rgetattr> {
        if !self.follows_events() {
            return None;
        }
        let fetched = self.known.inodes.fetched_attrs(ino)?;
        let (a, when) = *fetched;
        self.known
            .listed
            .reusable_for(a.qid.path, &when, self.attr_ttl())
            .map(|_| a)
    }

    /// What to give the kernel for a file a replica lists with attributes `a`: the ones
    /// the mount fetched for the file since, if nothing can have changed them (they show
    /// what the mount's own reads did to its access time, which a replica does not
    /// follow), with when they were fetched; else `a`.
    pub(super) fn freshest_listed(
        &self,
        a: &crossfs_wire::Rgetattr,
    ) -> (
        crossfs_wire::Rgetattr,
        Option<crate::known::listed_attrs::Fetched>,
    ) {
        let newer = (self.follows_events())
            .then(|| self.known.inodes.ino_of(a.qid.path))
            .flatten()
            .and_then(|ino| self.known.inodes.fetched_attrs(ino))
            .filter(|f| {
                f.0.qid.path == a.qid.path
                    && self
                        .known
                        .listed
                        .reusable_for(a.qid.path, &f.1, self.attr_ttl())
                        .is_some()
            });
        match newer {
            Some(f) => (f.0, Some(f.1)),
            None => (a.clone(), None),
        }
    }

    /// GETATTR of a node answered from a replica, which has no fid yet: one Twalkgetattr
    /// from its directory gives it one and the attributes.
    fn getattr_lazy(
        self: &Arc<Self>,
        ino: INodeNo,
        (dir_ino, name, qid_path): (u64, &[u8], u64),
    ) -> Result<Attr, Errno> {
        let dir = self.node(INodeNo(dir_ino))?;
        let fetched = self.known.listed.before_fetch();
        match crate::remote::resolve_one(&self.client, &dir, name, None) {
            Ok((fid, a)) if a.qid.path == qid_path => {
                self.known.inodes.bind(ino.0, fid);
                Ok(self.attr_answer(ino, &a, Some(fetched)))
            }
            _ => Err(self.lazy_failed(dir_ino, name)),
        }
    }

    /// SETATTR from thread `pid`; `in_flight` marks the file changed until the server has answered. It is
    /// taken from the caller when the server's answer ends it; else it ends with the
    /// caller's hold of it, after the kernel has the answer.
    pub(super) fn setattr(
        self: &Arc<Self>,
        ino: INodeNo,
        fh: Option<FileHandle>,
        change: Change,
        pid: u32,
        in_flight: &mut Option<ChangeInFlight>,
    ) -> Result<NowOrLater<'static, Attr, ReplyAttr>, Errno> {
        self.writable()?;
        let unannounced = self.known.handles.opens_unannounced.load(Relaxed);
        if change.size.is_some() && unannounced {
            // A truncation changes pages the kernel may hold through an unannounced open.
            self.ahead.page_push.touched(ino.0, true);
        }
        let fid = self.attr_fid(ino, fh)?;
        let change = self.kill_as_server_can(&fid, change)?;
        if let Some(attr) = self.setattr_behind((ino, pid), &fid, &change, in_flight) {
            return Ok(NowOrLater::Now(attr));
        }
        if self.client.has_extensions() {
            // Both in one round trip (Tsetattrget).
            let msg = Tmessage::Setattrget(Tsetattrget {
                set: change.to_wire(fid.fid()),
                request_mask: ATTR_MASK,
            });
            let mut r = expect_reply!(self.client.call(msg), Setattrget).map_err(|e| errno(&e))?;
            if let (Some(caller), Some(_)) = (change.kill_suidgid, change.size) {
                // A truncate: S_ISGID without group execute, cleared for a caller outside
                // the file's group, which the server cannot judge.
                if let Some(kill) = self.kill_after_write(fid.fid(), Some(&r.attr), caller) {
                    r = expect_reply!(self.client.call(kill), Setattrget).map_err(|e| errno(&e))?;
                }
            }
            // The kernel asks for them again before a chown (to drop set-user-ID
            // bits): the answer may give them, as a fetch would.
            let fetched = in_flight.take().and_then(|c| c.end_with_answer(&r.attr));
            return Ok(NowOrLater::Now(self.attr_answer(ino, &r.attr, fetched)));
        }
        // The getattr must see the change, and a server may run two requests in either
        // order: wait for Rsetattr before asking.
        let msg = Tmessage::Setattr(change.to_wire(fid.fid()));
        self.client.call(msg).map_err(|e| errno(&e))?;
        Ok(NowOrLater::Later(self.fetch_attr(ino, fid)))
    }

    /// Whether the server on the connection in use clears set-id bits when a Tsetattr asks
    /// ([`crossfs_wire::features::KILL_SUIDGID`]). The mount negotiates
    /// `FUSE_HANDLE_KILLPRIV_V2` only then.
    pub(crate) fn server_kills_suidgid(&self) -> bool {
        self.client.negotiation().features & crossfs_wire::features::KILL_SUIDGID != 0
    }

    /// `change` as the server on the connection in use can make it. One that asks for the
    /// set-id bits to be cleared, to a server that cannot (one reached by a reconnect
    /// after the kernel agreed to `HANDLE_KILLPRIV_V2`), clears them with a mode instead,
    /// from the attributes the server gives now: what the kernel does without the flag.
    fn kill_as_server_can(&self, fid: &FidRef, mut change: Change) -> Result<Change, Errno> {
        let Some(caller) = change.kill_suidgid else {
            return Ok(change);
        };
        if self.server_kills_suidgid() {
            return Ok(change);
        }
        change.kill_suidgid = None;
        if change.mode.is_none() {
            let msg = Tmessage::Getattr(Tgetattr {
                fid: fid.fid(),
                request_mask: ATTR_MASK,
            });
            let a = expect_reply!(self.client.call(msg), Getattr).map_err(|e| errno(&e))?;
            change.mode = killed_mode(a.mode, || caller.in_group(a.gid));
        }
        Ok(change)
    }

    /// After a write the kernel flagged `FUSE_WRITE_KILL_SUIDGID`, which left the file
    /// with attributes `after` (`None`: not known): the request that clears its set-id
    /// bits, if it needs one. To a server that clears them itself, a Tsetattrget asking for
    /// that alone (when `after` shows bits to clear, or is not known); to one that cannot, a
    /// mode without them, when `after` shows some.
    ///
    /// `S_ISGID` without group execute, which Linux clears only for a caller outside the
    /// file's group, the server cannot judge: the mode is sent for that case.
    pub(super) fn kill_after_write(
        &self,
        fid: crossfs_wire::Fid,
        after: Option<&crossfs_wire::Rgetattr>,
        caller: Caller,
    ) -> Option<Tmessage> {
        let mut set = Tsetattr::unchanged(fid);
        match after {
            Some(a) => {
                let mode = killed_mode(a.mode, || caller.in_group(a.gid))?;
                if self.server_kills_suidgid() && killed_mode(a.mode, || true) == Some(mode) {
                    set.valid = valid::KILL_SUIDGID;
                } else {
                    set.mode = mode;
                    set.valid = valid::MODE;
                }
            }
            None if self.server_kills_suidgid() => set.valid = valid::KILL_SUIDGID,
            None => return None,
        }
        Some(Tmessage::Setattrget(Tsetattrget {
            set,
            request_mask: ATTR_MASK,
        }))
    }

    pub(super) fn statfs(&self, ino: INodeNo) -> Result<Later<'static, ReplyStatfs>, Errno> {
        let fid = self.node(ino).or_else(|_| self.node(INodeNo::ROOT))?;
        let msg = Tmessage::Statfs(Tstatfs { fid: fid.fid() });
        let client = self.client.clone();
        Ok(Later::new(move |reply| {
            client.call_async(
                msg,
                Box::new(move |r| {
                    drop(fid);
                    answer(reply, expect_reply!(r, Statfs).map_err(|e| errno(&e)));
                }),
            );
        }))
    }
}

/// The permission bits of a file with mode `mode` once a write or truncate by a caller
/// without `CAP_FSETID` has cleared its set-id bits, or `None` if it has none to clear:
/// `S_ISUID`, and `S_ISGID` with group execute or where `in_group` says the caller is not
/// in the file's group (Linux's `setattr_should_drop_sgid`); none on a directory or
/// symlink.
pub(super) fn killed_mode(mode: u32, in_group: impl FnOnce() -> bool) -> Option<u32> {
    if matches!(mode & libc::S_IFMT, libc::S_IFDIR | libc::S_IFLNK) {
        return None;
    }
    let mut bits = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !in_group()) {
        bits |= libc::S_ISGID;
    }
    (bits != 0).then_some(mode & 0o7777 & !bits)
}

#[cfg(test)]
mod tests {
    use super::killed_mode;

    #[test]
    fn killed_mode_clears_what_linux_clears_for_a_caller_without_cap_fsetid() {
        let reg = libc::S_IFREG;
        assert_eq!(killed_mode(reg | 0o4755, || true), Some(0o755));
        assert_eq!(killed_mode(reg | 0o2775, || true), Some(0o775));
        assert_eq!(killed_mode(reg | 0o6775, || true), Some(0o775));
        // S_ISGID without group execute: only for a caller outside the file's group.
        assert_eq!(killed_mode(reg | 0o2765, || true), None);
        assert_eq!(killed_mode(reg | 0o2765, || false), Some(0o765));
        assert_eq!(killed_mode(reg | 0o0777, || false), None);
        // Never a directory's (a set-group-ID directory stays one) nor a symlink's.
        assert_eq!(killed_mode(libc::S_IFDIR | 0o2775, || false), None);
        assert_eq!(killed_mode(libc::S_IFLNK | 0o4777, || false), None);
    }
}
