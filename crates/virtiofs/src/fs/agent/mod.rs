//! The door's side of the guest agent (`crossfs agent MOUNTPOINT`, docs/virtiofs-agent.md):
//! the hidden control file the agent reads the change stream from (`stream.rs`), and the
//! agent's replays of those changes, answered here without touching the export.
//!
//! Which requests are replays: only those from the agent (the guest thread that opened the
//! control file and holds it open) that match a change the door handed it in its last batch
//! and that it has not yet replayed (`expected.rs`, keyed by host inodes and names). Every
//! other request, from any process, is served as always. What a replay is answered with is
//! what the host has: the file found at the name now, "missing" for a name a create or rename
//! is about to make (uncached), or a placeholder (zero timeouts) for a name already gone.
//! A request from the agent that would change the export without matching is refused
//! (`EPERM`): the agent never changes the host.
//!
//! The control name ([`AGENT_CONTROL_NAME`]) is one of the export core's reserved names: no
//! listing shows it, and only a root thread that may hold the stream (none holds it, or it
//! is the holder) finds it, with zero timeouts so that no other process's path walk can
//! reuse the agent's dentry.
//!
//! What this module must not do: call any export operation that changes something.

mod echoes;
mod expected;
mod stream;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossfs_export::{sys, ExportError, Statx, AGENT_CONTROL_NAME};
use rustix::fs::OFlags;
use rustix::io::Errno;

use super::{FuseFs, OpResult};
use crate::fuse::decode::InHeader;
use crate::fuse::encode::{Reply, Ttl};
use crate::fuse::{self, Op};
use expected::LookupAnswer;
pub use stream::LaterReplies;
pub(crate) use stream::StreamDoor;
use stream::{resolve, ReadAnswer};

/// The control file's node id: outside the range the node table gives out.
const CONTROL_NODE: u64 = 1 << 63;

/// Placeholder node ids (for names already gone from the host) start here; the node table
/// never reaches them, and every request on one but FORGET is `ESTALE`.
const GHOST_BASE: u64 = 1 << 62;

/// The root's extended attribute whose read is a sync (as on a `crossfs mount`).
const SYNC_XATTR: &[u8] = b"user.crossfs.sync";

/// SETATTR bits that set nothing but times (FATTR_CTIME, 1 << 10, and FATTR_LOCKOWNER,
/// 1 << 9, included).
const TIMES_ONLY: u32 = fuse::fattr::ATIME
    | fuse::fattr::MTIME
    | fuse::fattr::ATIME_NOW
    | fuse::fattr::MTIME_NOW
    | fuse::fattr::FH
    | (1 << 9)
    | (1 << 10);

/// `FOPEN_NONSEEKABLE`: the control file is a stream.
const FOPEN_NONSEEKABLE: u32 = 1 << 2;

/// What the door does with a request before the usual translation.
pub(super) enum Intercept {
    /// Answered here.
    Answer(OpResult<Option<Reply>>),
    /// Parked: answered later through [`LaterReplies`].
    Parked,
}

/// Placeholder node ids handed out so far.
static GHOSTS: AtomicU64 = AtomicU64::new(GHOST_BASE);

impl FuseFs {
    /// The agent's requests, the control file, syncs and interrupts; `None`: served as
    /// usual.
    pub(super) fn intercept(&self, h: &InHeader, op: &Op<'_>) -> Option<Intercept> {
        let n = h.nodeid;
        let answer = |r: OpResult<Reply>| Some(Intercept::Answer(r.map(Some)));
        match op {
            Op::Interrupt { unique } => {
                self.agent.interrupt(*unique);
                return None;
            }
            Op::Forget { .. } if n >= GHOST_BASE => return Some(Intercept::Answer(Ok(None))),
            _ if n == CONTROL_NODE => return Some(self.control(h, op)),
            _ if n >= GHOST_BASE => return answer(Err(Errno::STALE.into())),
            Op::Lookup { name } if n == fuse::ROOT_ID && *name == AGENT_CONTROL_NAME => {
                return answer(self.lookup_control(h));
            }
            Op::Getxattr { size, name } if n == fuse::ROOT_ID && *name == SYNC_XATTR => {
                return match self.agent.sync(h.unique, *size) {
                    Ok(()) => Some(Intercept::Parked),
                    Err(e) => answer(Err(Errno::from_raw_os_error(e).into())),
                };
            }
            _ => {}
        }
        if self.agent.agent_pid() != Some(h.pid) {
            return None;
        }
        self.replay(h, op).map(|r| {
            let counters = self.stats.agent();
            match &r {
                Err(ExportError::Os(Errno::PERM)) => counters.refused.fetch_add(1, Relaxed),
                _ => counters.replays.fetch_add(1, Relaxed),
            };
            Intercept::Answer(r.map(Some))
        })
    }

    /// A request of the agent: a replay answered here, a change refused, or `None` (served
    /// as anyone's: path walks, reads, listings).
    fn replay(&self, h: &InHeader, op: &Op<'_>) -> Option<OpResult<Reply>> {
        let n = h.nodeid;
        let key = match self.nodes.get(n) {
            Ok(handle) => handle.key(),
            Err(e) => return Some(Err(e)),
        };
        let pid = h.pid;
        let refused = || Some(Err(ExportError::Os(Errno::PERM)));
        match op {
            Op::Lookup { name } => {
                let found = self.agent.with_expected(pid, |x| x.lookup(key, name))??;
                Some(self.replayed_lookup(found))
            }
            Op::Mknod { name, .. } | Op::Mkdir { name, .. } | Op::Symlink { name, .. } => {
                if !self
                    .agent
                    .with_expected(pid, |x| x.take_create(key, name))?
                {
                    return refused();
                }
                // The host's file at the name, as a lookup finds it.
                let dir = match self.nodes.get(n) {
                    Ok(dir) => dir,
                    Err(e) => return Some(Err(e)),
                };
                let found = self.export.lookup(Self::dir(n, &dir), name);
                Some(found.and_then(|(file, st)| self.entry_in(file, &st, Some(&dir))))
            }
            Op::Unlink { name } | Op::Rmdir { name } => {
                if !self
                    .agent
                    .with_expected(pid, |x| x.take_remove(key, name))?
                {
                    return refused();
                }
                Some(Ok(Reply::new()))
            }
            Op::Rename {
                newdir, old, new, ..
            } => {
                let to = match self.nodes.get(*newdir) {
                    Ok(h) => h.key(),
                    Err(e) => return Some(Err(e)),
                };
                if !self
                    .agent
                    .with_expected(pid, |x| x.take_rename((key, old), (to, new)))?
                {
                    return refused();
                }
                Some(Ok(Reply::new()))
            }
            Op::Open { flags } if *flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32 => {
                if !self.agent.with_expected(pid, |x| x.expects_modify(key))? {
                    return refused();
                }
                Some(self.replayed_open(n))
            }
            // With writeback caching the kernel writes back the times a replay's truncate
            // set, on close: answered with the host's attributes, changing nothing.
            Op::Setattr(s) if s.valid & !TIMES_ONLY == 0 => Some(self.getattr(n)),
            Op::Setattr(_) => {
                if !self.agent.with_expected(pid, |x| x.take_setattr(key))? {
                    return refused();
                }
                // The host's attributes, whatever the agent asked for: nothing is changed.
                Some(self.getattr(n))
            }
            Op::Create { .. }
            | Op::Tmpfile { .. }
            | Op::Link { .. }
            | Op::Write { .. }
            | Op::Fallocate { .. }
            | Op::Setxattr { .. }
            | Op::Removexattr { .. } => refused(),
            _ => None,
        }
    }

    /// What a guest program's request (not the agent's) will have changed if it succeeds,
    /// while an agent follows; to be noted only once it did ([`FuseFs::note_own_changes`]).
    pub(super) fn own_changes(&self, h: &InHeader, op: &Op<'_>) -> Vec<echoes::Own> {
        use echoes::Own;
        match self.agent.agent_pid() {
            Some(pid) if pid != h.pid => {}
            _ => return Vec::new(),
        }
        let key = |id: u64| self.nodes.get(id).ok().map(|handle| handle.key());
        let n = h.nodeid;
        let named = |id: u64, x: &[u8]| key(id).map(|k| (k, x.to_vec()));
        let changed = match op {
            Op::Mknod { name, .. }
            | Op::Mkdir { name, .. }
            | Op::Symlink { name, .. }
            | Op::Create { name, .. }
            | Op::Link { name, .. } => vec![named(n, name).map(|(k, x)| Own::Created(k, x))],
            Op::Unlink { name } | Op::Rmdir { name } => {
                vec![named(n, name).map(|(k, x)| Own::Removed(k, x))]
            }
            Op::Rename {
                newdir, old, new, ..
            } => vec![named(n, old)
                .zip(named(*newdir, new))
                .map(|(from, to)| Own::Renamed(from, to))],
            // A truncate is a content change, a chmod an attribute change: which one this
            // is shows in the event.
            Op::Setattr(_) => vec![key(n).map(Own::Modified), key(n).map(Own::Attrib)],
            Op::Write { .. } | Op::Fallocate { .. } => vec![key(n).map(Own::Modified)],
            Op::Setxattr { .. } | Op::Removexattr { .. } => vec![key(n).map(Own::Attrib)],
            _ => Vec::new(),
        };
        changed.into_iter().flatten().collect()
    }

    /// Notes changes a guest program made (see [`FuseFs::own_changes`]).
    pub(super) fn note_own_changes(&self, changed: Vec<echoes::Own>) {
        self.agent.note_own(changed);
    }

    fn replayed_lookup(&self, found: LookupAnswer) -> OpResult<Reply> {
        let (mode, ino) = match found {
            // An error, not a negative entry: the guest caches nothing.
            LookupAnswer::Missing => return Err(Errno::NOENT.into()),
            LookupAnswer::Gone { mode, ino } => (mode, ino),
            LookupAnswer::Moved { to_path, mode } => match resolve(&self.export, &to_path) {
                Some((handle, Some(st))) => {
                    let id = self.nodes.remember(handle, &st);
                    let mut r = Reply::with_capacity(128);
                    r.entry(id, Some(&st), Ttl::ZERO, Ttl::ZERO);
                    return Ok(r);
                }
                _ => (mode, 0),
            },
        };
        let mut st = self.root_stat()?;
        st.stx_mode = (mode & 0o177777) as u16;
        st.stx_ino = ino;
        st.stx_nlink = 1;
        st.stx_size = 0;
        let id = GHOSTS.fetch_add(1, Relaxed);
        let mut r = Reply::with_capacity(128);
        r.entry(id, Some(&st), Ttl::ZERO, Ttl::ZERO);
        Ok(r)
    }

    /// The agent's open for writing of a changed file: opened read-only on the host, and
    /// answered without FOPEN_KEEP_CACHE, so the guest drops the file's pages.
    fn replayed_open(&self, id: u64) -> OpResult<Reply> {
        let handle = self.nodes.get(id)?;
        let charge = self.fds.charge()?;
        let (fd, _) = self.export.open_file(&handle, OFlags::RDONLY)?;
        let fh = self.add_file(fd, charge, false);
        let mut r = Reply::new();
        r.open_out(fh, 0);
        Ok(r)
    }

    fn root_stat(&self) -> OpResult<Statx> {
        use std::os::fd::AsFd;
        Ok(sys::stat(self.export.root.fd()?.as_fd())?)
    }

    fn control_stat(&self) -> OpResult<Statx> {
        let mut st = self.root_stat()?;
        st.stx_mode = (libc::S_IFREG | 0o400) as u16;
        st.stx_ino = CONTROL_NODE;
        st.stx_nlink = 1;
        st.stx_size = 0;
        st.stx_blocks = 0;
        Ok(st)
    }

    /// The control name, for a root thread that may hold the stream; `ENOENT` for anyone
    /// else, as for every other reserved name.
    fn lookup_control(&self, h: &InHeader) -> OpResult<Reply> {
        if h.uid != 0 || !self.agent.has_events() || !self.agent.may_open(h.pid) {
            return Err(Errno::NOENT.into());
        }
        let st = self.control_stat()?;
        let mut r = Reply::with_capacity(128);
        r.entry(CONTROL_NODE, Some(&st), Ttl::ZERO, Ttl::ZERO);
        Ok(r)
    }

    /// Requests on the control file's node.
    fn control(&self, h: &InHeader, op: &Op<'_>) -> Intercept {
        let reply = |r: OpResult<Reply>| Intercept::Answer(r.map(Some));
        match op {
            Op::Forget { .. } | Op::BatchForget(_) => Intercept::Answer(Ok(None)),
            Op::Getattr { .. } => reply(self.control_stat().map(|st| {
                let mut r = Reply::with_capacity(104);
                r.attr_out(&st, Ttl::ZERO);
                r
            })),
            Op::Open { .. } => {
                if h.uid != 0 || !self.agent.may_open(h.pid) {
                    return reply(Err(Errno::BUSY.into()));
                }
                let fh = self.next_control_fh();
                if !self.agent.open(h.pid, fh) {
                    return reply(Err(Errno::BUSY.into()));
                }
                let mut r = Reply::new();
                r.open_out(fh, fuse::fopen::DIRECT_IO | FOPEN_NONSEEKABLE);
                reply(Ok(r))
            }
            Op::Read(r) => match self.agent.read(h.pid, r.fh, h.unique, r.size) {
                Ok(ReadAnswer::Now(lines)) => {
                    let mut out = Reply::with_capacity(lines.len());
                    out.bytes(&lines);
                    reply(Ok(out))
                }
                Ok(ReadAnswer::Parked) => Intercept::Parked,
                Err(e) => reply(Err(Errno::from_raw_os_error(e).into())),
            },
            Op::Release { fh } => {
                self.agent.close(*fh);
                reply(Ok(Reply::new()))
            }
            Op::Flush { .. } => reply(Ok(Reply::new())),
            Op::Getxattr { .. } => reply(Err(Errno::NODATA.into())),
            Op::Listxattr { .. } => reply(Ok({
                let mut r = Reply::new();
                r.u32(0).u32(0);
                r
            })),
            _ => reply(Err(Errno::PERM.into())),
        }
    }

    /// A handle for the control file: numbered apart from the open files' (never reused
    /// while the stream lives, and never found by requests on other nodes).
    fn next_control_fh(&self) -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1 << 63);
        NEXT.fetch_add(1, Relaxed)
    }
}
