//! The FUSE filesystem: kernel requests in, 9P requests out.
//!
//! [`CrossFs`] implements [`fuser::Filesystem`] by counting each request and handing it to
//! [`MountState`], whose methods live beside the requests they serve: `entry.rs` (names),
//! `io.rs` (open files), `dir.rs`, `attr.rs`, `xattr.rs`, `lock.rs`.
//!
//! Threading: fuser runs several worker threads, each on its own cloned `/dev/fuse` fd.
//! Requests that need a single 9P message (read, write, getattr, readlink, fsync, unlink,
//! rename, statfs) are sent with [`crossfs_client::Client::call_async`] and answered from
//! the completion, so the worker is free at once and a slow reply holds up nothing else.
//! Requests that need several dependent messages (lookup: walk, then getattr) run them on
//! the worker, pipelining whatever is independent.

mod attr;
mod dir;
mod entry;
mod io;
mod lock;
mod replayed;
mod xattr;

use std::ffi::OsStr;
use std::io as stdio;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossfs_client::{Client, ClientError};
use crossfs_wire::Qid;
use fuser::{
    AccessFlags, Errno, FileHandle, FileType, Filesystem, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::ahead::Ahead;
use crate::attr::IdMap;
use crate::changes::{ChangeState, SYNC_XATTR};
use crate::config::{MountConfig, RequestSize};
use crate::fid::FidRef;
use crate::known::cache::CacheMode;
use crate::known::handle::OpenFile;
use crate::known::inode::{InodeTable, NodeFid};
use crate::known::listed_attrs::ChangeInFlight;
use crate::known::Known;
use crate::remote::support::ServerSupport;
use crate::stats::{Op, Stats};

/// The mount's state: what every FUSE request handler shares (and the mount handle reads
/// for stats), in its parts.
pub(crate) struct MountState {
    pub client: Arc<Client>,
    pub config: MountConfig,
    pub sizes: RequestSize,
    pub ids: IdMap,
    pub stats: Stats,
    /// Names this mount as a lock holder to the server (with the lock owner appended).
    pub lock_client: String,
    /// What the server supports, as learned from its answers.
    pub server: ServerSupport,
    /// What the mount knows of the server's files; the change feed holds it too.
    pub known: Arc<Known>,
    /// What the mount fetches ahead, and the threads doing it.
    pub ahead: Ahead,
    /// Change events from the server: replay recognition, own changes, syncs.
    pub changes: Arc<ChangeState>,
    /// Tells the kernel about changes (set with the FUSE session).
    pub notifier: std::sync::OnceLock<fuser::Notifier>,
    /// No `--negative-ttl` was given: while events are followed, missing names the mount
    /// tracks are kept long too.
    pub negative_by_mode: bool,
}

/// The owner and group of a file a request creates: the caller's, or for the group, the
/// directory's if it is set-group-ID, as on a local file system.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller {
    pub uid: u32,
    pub gid: u32,
}

impl MountState {
    pub(crate) fn new(
        client: Arc<Client>,
        root: (crossfs_wire::Fid, Qid),
        config: &MountConfig,
        sizes: RequestSize,
    ) -> Self {
        let root_fid = FidRef::new(&client, root.0);
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        let replica_entries = if config.cache == CacheMode::Never {
            0
        } else {
            config.replica_entries
        };
        MountState {
            known: Arc::new(Known::new(
                InodeTable::new(root_fid, root.1),
                replica_entries,
            )),
            config: MountConfig {
                negative_ttl: config.negative_ttl.in_mode(config.cache),
                ..config.clone()
            },
            sizes,
            ids: IdMap {
                uid: config.uid,
                gid: config.gid,
            },
            stats: Stats::default(),
            lock_client: format!("crossfs@{host}"),
            server: ServerSupport::default(),
            changes: Arc::default(),
            ahead: Ahead::default(),
            notifier: Default::default(),
            negative_by_mode: config.negative_ttl == crate::NegativeTtl::ByCacheMode,
            client,
        }
    }

    /// The unopened fid of node `ino`, walked now if the node was answered from a
    /// directory replica and has none yet.
    fn node(&self, ino: INodeNo) -> Result<Arc<FidRef>, Errno> {
        match self.known.inodes.node_fid(ino.0) {
            Some(NodeFid::Bound(fid)) => Ok(fid),
            Some(NodeFid::Lazy {
                dir_ino,
                name,
                qid_path,
            }) => {
                // The directory outlives its entries in the kernel, so it is known; it may
                // be lazy itself (walked first, then).
                let dir = self.node(INodeNo(dir_ino))?;
                match self.walk_name(&dir, &name) {
                    Ok((fid, qid)) if qid.path == qid_path => {
                        Ok(self.known.inodes.bind(ino.0, fid))
                    }
                    _ => Err(self.lazy_failed(dir_ino, &name)),
                }
            }
            None => Err(Errno::ESTALE),
        }
    }

    /// A node answered from a replica is not where the replica said (the host changed it
    /// and its event has not come yet): the replica asks the server about that name from
    /// now on, and the kernel gets ESTALE, which makes it look the path up again.
    pub(crate) fn lazy_failed(&self, dir_ino: u64, name: &[u8]) -> Errno {
        tracing::debug!(
            "'{}' in node {dir_ino} no longer leads where its replica said",
            String::from_utf8_lossy(name)
        );
        self.known.replicas.stale(dir_ino, name);
        Errno::ESTALE
    }

    /// Whether the kernel may keep what it is told for long: change events are followed
    /// (and the mount can still name everything the kernel holds), and the cache mode
    /// caches at all. What the events change is invalidated as they come.
    pub(crate) fn follows_events(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.config.cache != CacheMode::Never
            && self.known.listed.is_following()
            && !self.known.untracked.load(Relaxed)
    }

    /// Starts a thread named `name` that runs `work` for each item sent to the sender it
    /// leaves in `slot` (64 may wait; a sender finding them full drops the item: the work
    /// only saves requests). The thread holds the mount weakly and ends with it.
    pub(crate) fn start_helper<T: Send + 'static>(
        self: &Arc<Self>,
        name: &str,
        slot: &std::sync::OnceLock<std::sync::mpsc::SyncSender<T>>,
        work: impl Fn(&MountState, T) + Send + 'static,
    ) {
        let (tx, rx) = std::sync::mpsc::sync_channel::<T>(64);
        if slot.set(tx).is_err() {
            return;
        }
        let shared = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Ok(item) = rx.recv() {
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    work(&shared, item);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the mount's thread {name}: {e}");
        }
    }

    /// What the change feed may touch of the mount (see `crate::changes`).
    pub(crate) fn feed_target(&self) -> crate::changes::FeedTarget {
        crate::changes::FeedTarget {
            client: self.client.clone(),
            known: self.known.clone(),
            changes: self.changes.clone(),
            page_push: self.ahead.page_push.clone(),
            writeback: self.config.cache.writeback(),
        }
    }

    /// Whether directory replicas may answer for now.
    pub(crate) fn replicas_usable(&self) -> bool {
        self.client.has_extensions() && self.known.replicas.enabled()
    }

    /// Notes that the server is about to read node `ino` for the mount (a file's data, a
    /// directory's entries, a link's target), which may move its access time: attributes
    /// fetched before are not reused (see `crate::known::listed_attrs`).
    pub(crate) fn reading(&self, ino: u64) {
        if let Some(qid_path) = self.known.inodes.qid_path(ino) {
            self.known.listed.reading(qid_path);
        }
    }

    fn open_file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
        match self.known.handles.get(fh.0) {
            Some(file) if file.stale.load(std::sync::atomic::Ordering::Relaxed) => {
                Err(Errno::ESTALE)
            }
            Some(file) => Ok(file),
            None => Err(Errno::EBADF),
        }
    }

    fn entry_ttl(&self) -> Duration {
        if self.follows_events() {
            return crate::known::cache::FOLLOWED;
        }
        self.config.cache.entry_ttl()
    }

    /// The entry timeout for a name leading to a file of `kind`.
    fn entry_ttl_for(&self, kind: FileType) -> Duration {
        match kind {
            FileType::Directory if !self.follows_events() => self.config.cache.dir_entry_ttl(),
            _ => self.entry_ttl(),
        }
    }

    fn attr_ttl(&self) -> Duration {
        self.entry_ttl()
    }

    fn writable(&self) -> Result<(), Errno> {
        if self.config.read_only {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }
}

/// The errno the kernel gets for a failed 9P request (EIO once the connection is gone).
///
/// The server's EBADF becomes ESTALE: the kernel never sends a request that is wrong for
/// how a file was opened, so it means the server does not know the fid, which happens to a
/// fid the mount held across a reconnect and could not bind again (see `crate::restore`).
/// On ESTALE the kernel walks a path again with revalidation, reaching the file anew.
pub(crate) fn errno(e: &ClientError) -> Errno {
    match e {
        ClientError::Errno(libc::EBADF) => Errno::ESTALE,
        e => Errno::from_i32(e.errno()),
    }
}

/// A time fuser decoded from the kernel, as 9P carries it (unsigned seconds holding Linux's
/// signed ones).
///
/// fuser 0.18 decodes a kernel time (s, ns) before the epoch as `EPOCH - (|s| + ns)`
/// (`system_time_from_time`, marked TODO there) rather than `EPOCH - |s| + ns`; this is the
/// exact inverse of what it does, so pre-1970 times with nanoseconds survive. Revisit if
/// fuser fixes its decoding.
pub(crate) fn wire_time(t: SystemTime) -> (u64, u64) {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), u64::from(d.subsec_nanos())),
        Err(e) => {
            let d = e.duration();
            ((-(d.as_secs() as i64)) as u64, u64::from(d.subsec_nanos()))
        }
    }
}

fn bytes(name: &OsStr) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    name.as_bytes()
}

/// The `fuser::Filesystem` over a 9P client.
pub(crate) struct CrossFs {
    pub state: Arc<MountState>,
}

impl CrossFs {
    /// Who will own what `req` creates in directory `parent`.
    fn caller(&self, req: &Request, parent: INodeNo) -> Caller {
        let dir_group = self.state.known.inodes.setgid_group(parent.0);
        Caller {
            uid: req.uid(),
            gid: dir_group.unwrap_or(req.gid()),
        }
    }

    /// Counts request `op` of `req` and hands over the shared state.
    fn s(&self, req: &Request, op: Op) -> &Arc<MountState> {
        let s = &self.state;
        s.stats.count(op);
        if s.config.cache == CacheMode::Never && !matches!(op, Op::Getattr | Op::Forget) {
            // Only the very next request of a thread may reuse its LOOKUP's attributes.
            s.known.recent.clear(req.pid());
        }
        s
    }

    /// [`Self::s`] for a request that changes files on the server: nodes `nodes`, the
    /// directories of `names` and the files they name now. Their fetched attributes are
    /// not reused from now on; hold the guard until the server has answered (see
    /// `crate::known::listed_attrs`).
    fn s_changing(
        &self,
        req: &Request,
        op: Op,
        nodes: &[u64],
        names: &[(u64, &[u8])],
    ) -> (&Arc<MountState>, ChangeInFlight) {
        let s = self.s(req, op);
        let named = names.iter().flat_map(|&(dir, name)| {
            let file = s
                .known
                .inodes
                .expected(dir, name)
                .map(|(_, qid_path)| qid_path);
            [s.known.inodes.qid_path(dir), file]
        });
        let changed: Vec<(u64, u64)> = nodes
            .iter()
            .filter_map(|&ino| Some((ino, s.known.inodes.qid_path(ino)?)))
            .collect();
        let files = changed
            .iter()
            .map(|&(_, q)| Some(q))
            .chain(named)
            .flatten()
            .collect();
        let mut dirs: Vec<u64> = names.iter().map(|&(dir, _)| dir).collect();
        dirs.dedup();
        let shared = s.clone();
        let change = s.known.listed.change(files).also_at_end(move || {
            // The files' entries in directory replicas are asked of the server again once
            // the change is done (entry changes update replicas in their handlers).
            for (ino, qid_path) in changed {
                shared.known.replicas.own_changed(ino, qid_path);
            }
            shared.dirs_changed(&dirs);
        });
        (s, change)
    }
}

impl MountState {
    /// After a change of names in directories `dirs`: the kernel dropped their attributes
    /// when it got the answer, but a listing of their parent in flight (READDIRPLUS: a
    /// program's, or the mount's own ahead of one) may bring older ones after that, and the
    /// kernel would keep those. Telling it to drop them moves their attribute version on,
    /// and the kernel then takes nothing from a reply to a request sent before.
    fn dirs_changed(&self, dirs: &[u64]) {
        let Some(notifier) = self.notifier.get() else {
            return;
        };
        for &dir in dirs {
            // ENOENT: the kernel holds no such inode, nothing to drop.
            let _ = notifier.inval_inode(INodeNo(dir), -1, 0);
        }
    }
}

/// Background requests the kernel may have outstanding (FUSE's default is 12).
const MAX_BACKGROUND: u16 = 64;

/// Kernel features asked for in every mode.
const ALWAYS_WANTED: InitFlags = InitFlags::FUSE_MAX_PAGES
    .union(InitFlags::FUSE_CACHE_SYMLINKS)
    .union(InitFlags::FUSE_POSIX_LOCKS)
    .union(InitFlags::FUSE_PARALLEL_DIROPS)
    .union(InitFlags::FUSE_ASYNC_DIO)
    .union(InitFlags::FUSE_ASYNC_READ)
    .union(InitFlags::FUSE_BIG_WRITES)
    // MountState mmap of `direct_io` files (`never`, `metadata`): the kernel keeps the mapped
    // pages coherent with direct reads and writes (Linux 6.6+; ENODEV without it).
    .union(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);

impl Filesystem for CrossFs {
    fn init(&mut self, _req: &Request, kc: &mut KernelConfig) -> stdio::Result<()> {
        let s = &self.state;
        let sizes = s.sizes;
        if let Err(max) = kc.set_max_write(sizes.max_write) {
            let _ = kc.set_max_write(max);
        }
        // The kernel offers at most its default readahead here (128 KiB); the mount raises
        // the bdi's read_ahead_kb once it is up.
        if let Err(max) = kc.set_max_readahead(sizes.readahead) {
            let _ = kc.set_max_readahead(max);
        }
        // Background requests (readahead, async direct I/O, writeback): enough in flight
        // that several 1 MiB reads or writes overlap with the server's work. The kernel
        // throttles new ones past the congestion threshold.
        let _ = kc.set_max_background(MAX_BACKGROUND);
        let _ = kc.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        let mode = s.config.cache;
        let mut wanted = ALWAYS_WANTED;
        if mode.readdirplus() {
            wanted |= InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO;
        }
        if mode.writeback() {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        if mode == crate::CacheMode::Auto {
            wanted |= InitFlags::FUSE_AUTO_INVAL_DATA;
        }
        let missing = wanted & !kc.capabilities();
        if !missing.is_empty() {
            tracing::warn!(?missing, "the kernel lacks FUSE features crossfs asks for");
        }
        let _ = kc.add_capabilities(wanted & kc.capabilities());
        tracing::info!(
            max_write = sizes.max_write,
            max_pages = sizes.max_pages,
            cache = %mode,
            "FUSE session initialised"
        );
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let s = self.s(req, Op::Lookup);
        if let Some(reply) = s.replay_lookup(req.pid(), parent, bytes(name), reply) {
            s.lookup(req.pid(), parent, bytes(name), reply);
        }
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        let s = self.s(req, Op::Forget);
        if s.known.inodes.forget(ino.0, nlookup) {
            s.known.replicas.forget(ino.0);
            s.known.idle.forget(ino.0);
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.s(req, Op::Getattr).getattr(req.pid(), ino, fh, reply);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = attr::Change {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            ctime: ctime.is_some(),
        };
        let (s, in_flight) = self.s_changing(req, Op::Setattr, &[ino.0], &[]);
        if s.changes.is_replay(req.pid()) {
            // A replayed change: the kernel is told what the server has, nothing is sent.
            return s.getattr(req.pid(), ino, None, reply);
        }
        s.changes.note_node(ino.0);
        if size.is_some() {
            // The kernel cuts its pages once answered: after a push of them in progress
            // (`crate::ahead::pushed_pages`; the change clock moved above, so no other starts).
            s.ahead.page_push.settle(ino.0);
        }
        s.setattr(ino, fh, (change, in_flight), reply);
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.s(req, Op::Readlink).readlink(ino, reply);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (s, _change) = self.s_changing(req, Op::Mknod, &[], &[(parent.0, bytes(name))]);
        if s.changes.is_replay(req.pid()) {
            return s.lookup_existing(parent, bytes(name), reply);
        }
        s.changes.note_name(parent.0, bytes(name));
        s.mknod(
            parent,
            bytes(name),
            mode,
            rdev,
            self.caller(req, parent),
            reply,
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let (s, _change) = self.s_changing(req, Op::Mkdir, &[], &[(parent.0, bytes(name))]);
        if s.changes.is_replay(req.pid()) {
            return s.lookup_existing(parent, bytes(name), reply);
        }
        s.changes.note_name(parent.0, bytes(name));
        s.mkdir(parent, bytes(name), mode, self.caller(req, parent), reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (s, _change) = self.s_changing(req, Op::Unlink, &[], &[(parent.0, bytes(name))]);
        if s.changes.is_replay(req.pid()) {
            s.known.inodes.removed(parent.0, bytes(name));
            return reply.ok();
        }
        s.changes.note_name(parent.0, bytes(name));
        s.unlink(parent, bytes(name), 0, reply);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (s, _change) = self.s_changing(req, Op::Rmdir, &[], &[(parent.0, bytes(name))]);
        if s.changes.is_replay(req.pid()) {
            s.known.inodes.removed(parent.0, bytes(name));
            return reply.ok();
        }
        s.changes.note_name(parent.0, bytes(name));
        s.unlink(parent, bytes(name), crossfs_wire::AT_REMOVEDIR, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (s, _change) = self.s_changing(req, Op::Symlink, &[], &[(parent.0, bytes(link_name))]);
        if s.changes.is_replay(req.pid()) {
            return s.lookup_existing(parent, bytes(link_name), reply);
        }
        s.changes.note_name(parent.0, bytes(link_name));
        s.symlink(
            parent,
            bytes(link_name),
            bytes(target.as_os_str()),
            self.caller(req, parent),
            reply,
        );
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if parent == newparent && name == newname {
            // The kernel renames a name onto itself without asking unless its two lookups
            // of the name found two files: its entry was stale (the host replaced the
            // file). Renamed as asked, it would move the stale entry over the fresh one
            // and keep it. ESTALE makes renameat(2) look both up again, once, and find one
            // file, which is nothing to rename.
            return reply.error(Errno::ESTALE);
        }
        let (s, _change) = self.s_changing(
            req,
            Op::Rename,
            &[],
            &[(parent.0, bytes(name)), (newparent.0, bytes(newname))],
        );
        if s.changes.is_replay(req.pid()) {
            // The kernel moves its entry: a node without a fid is walked from there now.
            s.known
                .inodes
                .renamed((parent.0, bytes(name)), (newparent.0, bytes(newname)));
            return reply.ok();
        }
        s.changes.note_name(parent.0, bytes(name));
        s.changes.note_name(newparent.0, bytes(newname));
        s.rename(parent, bytes(name), newparent, bytes(newname), flags, reply);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (s, _change) =
            self.s_changing(req, Op::Link, &[ino.0], &[(newparent.0, bytes(newname))]);
        s.changes.note_name(newparent.0, bytes(newname));
        s.link(ino, newparent, bytes(newname), reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.s(req, Op::Open).open(ino, flags.0, reply);
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.s(req, Op::Read).read(fh, offset, size, reply);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let (s, change) = self.s_changing(req, Op::Write, &[ino.0], &[]);
        s.changes.note_node(ino.0);
        s.write(fh, offset, data, change, reply);
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.s(req, Op::Flush).flush(fh, lock_owner, reply);
    }

    fn release(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let s = self.s(req, Op::Release);
        if let Some(file) = s.known.handles.remove(fh.0) {
            s.keep_idle(&file);
        }
        s.ahead.page_push.closed(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.s(req, Op::Fsync).fsync(fh, datasync, reply);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.s(req, Op::Opendir).opendir(ino, reply);
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.s(req, Op::Readdir).readdir(ino, fh, offset, reply);
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let s = self.s(req, Op::Readdirplus);
        let priming = s.is_priming(req.pid());
        s.readdirplus(ino, fh, offset, priming, reply);
    }

    fn releasedir(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.s(req, Op::Releasedir).known.handles.remove(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.s(req, Op::Fsyncdir).fsync(fh, datasync, reply);
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.s(req, Op::Statfs).statfs(ino, reply);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let (s, _change) = self.s_changing(req, Op::Setxattr, &[ino.0], &[]);
        s.setxattr(ino, bytes(name), value, flags, reply);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let s = self.s(req, Op::Getxattr);
        if ino.0 == crate::known::inode::ROOT && bytes(name) == SYNC_XATTR {
            return s.sync_xattr(size, reply);
        }
        s.getxattr(ino, bytes(name), size, reply);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.s(req, Op::Listxattr).getxattr(ino, b"", size, reply);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (s, _change) = self.s_changing(req, Op::Removexattr, &[ino.0], &[]);
        s.removexattr(ino, bytes(name), reply);
    }

    /// No 9P request answers access(2); the server checks permissions on every operation
    /// instead. ENOSYS tells the kernel to stop asking (access(2) then succeeds for any file
    /// that exists, as with other FUSE file systems without `default_permissions`).
    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (s, _change) = self.s_changing(req, Op::Create, &[], &[(parent.0, bytes(name))]);
        s.changes.note_name(parent.0, bytes(name));
        s.create(
            parent,
            bytes(name),
            mode,
            flags,
            self.caller(req, parent),
            reply,
        );
    }

    fn getlk(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let l = lock::Range {
            owner: lock_owner.0,
            start,
            end,
            typ,
            pid,
        };
        self.s(req, Op::Getlk).getlk(fh, l, reply);
    }

    fn setlk(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let l = lock::Range {
            owner: lock_owner.0,
            start,
            end,
            typ,
            pid,
        };
        self.s(req, Op::Setlk).setlk(fh, l, sleep, reply);
    }
}
