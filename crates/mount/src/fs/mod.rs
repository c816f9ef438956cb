//! The FUSE filesystem: kernel requests in, 9P requests out.
//!
//! [`CrossFs`] (`face.rs`) implements [`crate::session::Filesystem`] by counting each request and
//! handing it to [`MountState`], defined here: the mount's state in its parts (what the
//! server supports, `crate::remote::support`; what the mount knows, `crate::known`; what
//! it fetches ahead, `crate::ahead`; the change-event state, `crate::changes`). Its
//! request methods live beside the requests they serve: `entry.rs` (names), `open.rs`,
//! `create.rs`, `read_write.rs`, `pushes.rs` (small files fetched ahead and pushed),
//! `dir.rs`, `attr.rs`, `xattr.rs`, `lock.rs`, and `replayed.rs` (the change feed's own
//! requests).
//!
//! What this part must not do: decide what a cache may answer (the modules in
//! `crate::known` and `crate::ahead` say that), or send anything on the event connection.
//!
//! Threading: the session (`crate::session`) runs several worker threads, each on its own
//! cloned `/dev/fuse` fd.
//! Requests that need a single 9P message (read, write, getattr, readlink, fsync, unlink,
//! rename, statfs) are sent with [`crossfs_client::Client::call_async`] and answered from
//! the completion, so the worker is free at once and a slow reply holds up nothing else.
//! Requests that need several dependent messages (lookup: walk, then getattr) run them on
//! the worker, pipelining whatever is independent.

mod attr;
mod behind;
mod caller_signals;
mod dir;
mod entry;
mod face;

pub(crate) use face::CrossFs;
mod create;
mod create_behind;
mod lock;
mod open;
mod pushes;
mod read_write;
mod rename_behind;
mod replayed;
mod reply;
mod unlink_behind;
mod xattr;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::session::{Errno, FileHandle, FileType, INodeNo};
use crossfs_client::{Client, ClientError};
use crossfs_wire::Qid;

use crate::ahead::Ahead;
use crate::attr::IdMap;
use crate::changes::ChangeState;
use crate::config::{MountConfig, RequestSize};
use crate::fid::FidRef;
use crate::known::cache::CacheMode;
use crate::known::handle::OpenFile;
use crate::known::inode::{InodeTable, NodeFid};
use crate::known::Known;
use crate::remote::support::ServerSupport;
use crate::stats::Stats;

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
    /// Changes answered here and sent to the server after (`--changes behind`).
    pub behind: Arc<crate::behind::ChangesBehind>,
    /// Tells the kernel about changes (set with the FUSE session).
    pub notifier: std::sync::OnceLock<crate::session::Notifier>,
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
            changes: Arc::new(ChangeState::coming(config.change_events_coming)),
            behind: Arc::default(),
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
        work: impl Fn(&Arc<MountState>, T) + Send + 'static,
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

    pub(super) fn open_file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
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
///
/// Every EIO is logged with its cause and counted (see [`crate::stats::io_error`]).
pub(crate) fn errno(e: &ClientError) -> Errno {
    match e {
        ClientError::Errno(libc::EBADF) => Errno::ESTALE,
        ClientError::Errno(libc::EIO) => {
            crate::stats::io_error(&format_args!("the server answered EIO"));
            Errno::EIO
        }
        e if e.errno() == libc::EIO => {
            crate::stats::io_error(e);
            Errno::EIO
        }
        e => Errno::from_i32(e.errno()),
    }
}

/// A time the session decoded from the kernel, as 9P carries it (unsigned seconds holding
/// Linux's signed ones).
///
/// The session (`crate::session::types::setattr_time`) decodes a kernel time (s, ns) before
/// the epoch as `EPOCH - (|s| + ns)`, as fuser 0.18 did, rather than `EPOCH - |s| + ns`;
/// this is the exact inverse of that, so pre-1970 times with nanoseconds survive. Change
/// both together.
pub(crate) fn wire_time(t: SystemTime) -> (u64, u64) {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), u64::from(d.subsec_nanos())),
        Err(e) => {
            let d = e.duration();
            ((-(d.as_secs() as i64)) as u64, u64::from(d.subsec_nanos()))
        }
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
