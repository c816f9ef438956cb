//! The server: the export, process-wide state, and statistics over connections.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crossfs_wire::{
    CounterSnapshot, MessageCounters, Qid, MIN_MSIZE, QID_TYPE_DIR, QID_TYPE_FILE, QID_TYPE_SYMLINK,
};
use rustix::fs::Statx;
use serde_json::{json, Map, Value};

use crossfs_events::EventHub;

use crossfs_export::budget::FdAccount;
use crossfs_export::handles::PathHandle;
use crossfs_export::policy::Policy;
use crossfs_export::{Dir, Export, OpenError};

use crate::config::ServerConfig;
use crate::error::ServerError;
use crate::fid::{lock, FileFid};
use crate::session;
use crate::sink::{Plain, ReplySink, RequestSource, Spliceable};
use crate::splice::DataPaths;
use crate::stats::{add_counters, ConnStats, RequestLatency};

/// A directory exported over 9P2000.L. Create one with [`Server::new`], then hand each
/// accepted connection to [`Server::serve_connection`] on its own thread.
pub struct Server {
    pub(crate) config: ServerConfig,
    root_dev: u64,
    /// Change events of the export, when watched (see [`Server::with_events`]).
    pub(crate) events: Option<Arc<EventHub>>,
    /// The export core: every operation on exported files goes through it (shared with
    /// the virtio door when both serve one export).
    pub(crate) export: Arc<Export>,
    /// Devices other than the root's met so far, numbered from 1 (qid path mixing).
    devices: Mutex<HashMap<u64, u64>>,
    /// Counters over every connection, closed ones included.
    totals: MessageCounters,
    /// Request latencies over every connection, closed ones included.
    pub(crate) latency: RequestLatency,
    /// Bytes of file data by the path they took, closed connections included.
    data: DataPaths,
    connections: Mutex<BTreeMap<u64, Arc<ConnStats>>>,
    next_connection: AtomicU64,
    /// Connections being served (at most `max_connections`).
    live: AtomicUsize,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("export", &self.export.path)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Opens the export root and `/proc/self/fd`, and raises the open-file limit to its hard
    /// maximum (every fid holds a descriptor).
    ///
    /// # Errors
    /// [`ServerError::Config`] for an empty export or limits that make no sense,
    /// [`ServerError::Export`] when the export cannot be opened as a directory,
    /// [`ServerError::NoProc`] when `/proc/self/fd` is not procfs.
    pub fn new(config: ServerConfig) -> Result<Arc<Server>, ServerError> {
        Self::with_events(config, None)
    }

    /// As [`Server::new`], and serves `events` (a hub watching the same export) to clients
    /// that attach with the aname [`EVENTS_ANAME`](crate::EVENTS_ANAME): each such attach gets a fid whose
    /// Tread is a long poll returning whole JSON lines (one event each), and whose Twrite
    /// of `sync N` returns once every change made before it is in the stream, followed by
    /// `{"kind":"sync","cookie":N}`. The hub's sync cookies, files at the top of the export
    /// that exist only during a sync, are hidden from every client (walks get `ENOENT`,
    /// listings skip them, making one is `EPERM`).
    /// Plain 9P2000.L clients see no other difference.
    ///
    /// # Errors
    /// As [`Server::new`].
    pub fn with_events(
        config: ServerConfig,
        events: Option<Arc<EventHub>>,
    ) -> Result<Arc<Server>, ServerError> {
        let mut export = open_export(&config)?;
        // The hub's sync cookies are not the clients'.
        export.reserved_prefix = events.as_ref().map(|hub| hub.cookie_prefix().to_vec());
        Self::with_export(config, Arc::new(export), events)
    }

    /// As [`Server::with_events`], over an export already opened (and shared, say, with the
    /// virtio door): its policy, descriptor budget and reserved names apply, and
    /// `config`'s `export`, `read_only`, `allow_devices`, `allow_setuid` and `fd_budget`
    /// are not read.
    ///
    /// # Errors
    /// [`ServerError::Config`] for limits that make no sense.
    pub fn with_export(
        config: ServerConfig,
        export: Arc<Export>,
        events: Option<Arc<EventHub>>,
    ) -> Result<Arc<Server>, ServerError> {
        if config.max_msize < MIN_MSIZE {
            return Err(ServerError::Config("max_msize is below 4096"));
        }
        if config.workers_per_connection == 0
            || config.max_in_flight == 0
            || config.max_connections == 0
        {
            return Err(ServerError::Config(
                "workers_per_connection, max_in_flight and max_connections must be at least 1",
            ));
        }
        let root_dev = export.root_dev_ino.0;
        Ok(Arc::new(Server {
            config,
            root_dev,
            events,
            export,
            devices: Mutex::new(HashMap::new()),
            totals: MessageCounters::default(),
            latency: RequestLatency::default(),
            data: DataPaths::default(),
            connections: Mutex::new(BTreeMap::new()),
            next_connection: AtomicU64::new(1),
            live: AtomicUsize::new(0),
        }))
    }

    /// Serves one connection on the calling thread until the client disconnects or sends a
    /// frame that cannot be framed (then the connection is closed with a warning). When
    /// [`ServerConfig::max_connections`] are already being served, returns at once (which
    /// closes the connection) after logging a warning.
    ///
    /// `reader` and `writer` are the two directions of one byte stream (for a socket, the
    /// socket and a clone of it). Requests that cannot block for long run on the calling
    /// thread, the others on `workers_per_connection` threads (see the crate's Concurrency
    /// section); replies are written whole, one at a time. Returns when every request read
    /// has been answered or abandoned; dropping `reader` and `writer` then closes the stream.
    ///
    /// A write to a peer that has gone must fail with `EPIPE` rather than kill the process:
    /// Rust programs ignore `SIGPIPE` by default, and a caller that changes that must keep it
    /// ignored (or hand in a writer that sends with `MSG_NOSIGNAL`).
    pub fn serve_connection(
        self: &Arc<Self>,
        reader: impl Read + Send + 'static,
        writer: impl Write + Send + 'static,
        peer: String,
    ) {
        self.serve(Plain(reader), Box::new(Plain(writer)), peer);
    }

    /// As [`Server::serve_connection`], over a reader and a writer that are a socket (or
    /// pipes) with no buffer of their own: replies may then be written to the writer's
    /// descriptor directly, Rread payloads of regular files spliced into it from the file
    /// ([`ServerConfig::splice_reads`](crate::ServerConfig::splice_reads)), and large
    /// Twrite payloads spliced from the reader's descriptor into the file
    /// ([`ServerConfig::splice_writes`](crate::ServerConfig::splice_writes)).
    pub fn serve_socket(
        self: &Arc<Self>,
        reader: impl Read + AsFd + Send + 'static,
        writer: impl Write + AsFd + Send + 'static,
        peer: String,
    ) {
        self.serve(Spliceable(reader), Box::new(Spliceable(writer)), peer);
    }

    fn serve(
        self: &Arc<Self>,
        reader: impl RequestSource + 'static,
        writer: Box<dyn ReplySink>,
        peer: String,
    ) {
        let Some(slot) = self.admit(&peer) else {
            return;
        };
        let id = self.next_connection.fetch_add(1, Relaxed);
        let fds = FdAccount::new(self.export.fds.clone());
        let stats = Arc::new(ConnStats::new(id, peer, fds, &self.config));
        lock(&self.connections).insert(id, stats.clone());
        session::run(self, &stats, reader, writer);
        // Free before the connection leaves the list: whoever sees it gone may connect again.
        drop(slot);
        lock(&self.connections).remove(&id);
    }

    /// Takes one of the `max_connections` slots, or refuses `peer` with a warning.
    fn admit(&self, peer: &str) -> Option<Slot<'_>> {
        let max = self.config.max_connections;
        match self
            .live
            .fetch_update(Relaxed, Relaxed, |n| (n < max).then_some(n + 1))
        {
            Ok(_) => Some(Slot(&self.live)),
            Err(_) => {
                tracing::warn!(%peer, max_connections = max, "refusing connection: server full");
                None
            }
        }
    }

    /// Counters over all connections, closed ones included.
    pub fn message_totals(&self) -> CounterSnapshot {
        self.totals.snapshot()
    }

    /// Statistics as JSON:
    /// `{"role":"server","export":"/path","total":{"Twalk":{"count":N,"bytes":N,"errors":N},
    /// ...,"bytes_in":N,"bytes_out":N},"live":{"connections":N,"fids":N,"fds":N,"handles":{...},
    /// "open_files":{...},"memory":{...}},
    /// "connections":[{"id":1,"peer":"...","msize":N,"fids":N,"fds":N,"memory":{...},
    /// "data":{...},"Twalk":{...},...,"bytes_in":N,"bytes_out":N}],"data":{"read_copied":N,
    /// "read_spliced":N,"write_copied":N,"write_spliced":N}}`. `data` counts bytes of file
    /// data by the path they took (`crate::splice` for reads, `crate::piped` for writes),
    /// over every connection and per live one. `total` includes closed
    /// connections; `connections` lists the live ones, each with the bytes it holds in the
    /// server's memory (`memory`: what is counted is `ConnStats::memory_json`'s doc), and
    /// `live` what they hold now: fids bound, and descriptors kept open for them (`fds`: the
    /// handle cache's and open files; the export root is not counted), the handle cache
    /// (`capacity`, descriptors `open` now, `closed` to make room and `reopened` since the
    /// start, whether reopening goes `by_file_handle`, the `handles` alive and their
    /// `bytes`), open files (`budget`, `held`, opens `refused` with EMFILE since the start),
    /// and memory: the sum over live connections (`connections`) and the handle cache's,
    /// shared by every client of both doors (`handles`). A
    /// connection leaves the list only after its fids are gone, so once a client is gone
    /// from it, everything it held (descriptors, and with them its locks) is released.
    /// `latency` times requests over every connection since the start: `reply` from a frame
    /// read to its reply's write beginning, `queued` (requests run on workers) until a
    /// worker takes it, `exec` the handler alone; each `{"Twalk":{"count":N,"p50_us":F,
    /// "p90_us":F,"p99_us":F,"max_us":F,"mean_us":F},...}`.
    pub fn stats_json(&self) -> Value {
        let handles = self.export.handles.stats();
        let mut total = Map::new();
        add_counters(&mut total, &self.totals.snapshot());
        // Counted outside the list's lock: each connection's count takes its fid table's.
        let live: Vec<Arc<ConnStats>> = lock(&self.connections).values().cloned().collect();
        let connections: Vec<Value> = live.iter().map(|c| c.to_json()).collect();
        let fids: usize = live.iter().map(|c| c.fids.bound()).sum();
        let memory: u64 = connections
            .iter()
            .filter_map(|c| c["memory"]["bytes"].as_u64())
            .sum();
        let events = self.events.as_ref().map(|hub| {
            let st = hub.stats();
            json!({
                "backend": hub.backend(),
                "epoch": hub.epoch(),
                "published": st.published,
                "overflows": st.overflows,
                "rescans": st.rescans,
                "backoffs": st.backoffs,
            })
        });
        json!({
            "role": "server",
            "export": self.export.path.to_string_lossy(),
            "total": Value::Object(total),
            "live": {
                "connections": connections.len(),
                "fids": fids,
                "fds": self.export.fds.held() + handles.open,
                "handles": {
                    "capacity": handles.capacity,
                    "open": handles.open,
                    "closed": handles.closed,
                    "reopened": handles.reopened,
                    "by_file_handle": handles.by_file_handle,
                    "handles": handles.handles,
                    "bytes": handles.bytes,
                },
                "open_files": {
                    "budget": self.export.fds.budget(),
                    "held": self.export.fds.held(),
                    "refused": self.export.fds.refused(),
                },
                "memory": {
                    "connections": memory,
                    "handles": handles.bytes,
                },
            },
            "connections": connections,
            "events": events,
            "latency": self.latency.to_json(),
            "data": self.data.to_json(),
        })
    }

    /// The directory a fid names, for the export core's operations.
    pub(crate) fn dir<'a>(&self, f: &'a FileFid) -> Dir<'a> {
        self.dir_of(&f.handle)
    }

    /// The directory behind `handle`. Every handle on the export root is the export's own
    /// (attaches share it, walks start from it), so the root is told by identity.
    pub(crate) fn dir_of<'a>(&self, handle: &'a Arc<PathHandle>) -> Dir<'a> {
        Dir {
            handle,
            is_root: Arc::ptr_eq(handle, &self.export.root),
        }
    }

    /// Counts a message on a connection and in the totals.
    pub(crate) fn record(&self, conn: &ConnStats, ty: u8, bytes: usize) {
        conn.counters.record(ty, bytes);
        self.totals.record(ty, bytes);
    }

    /// Counts `bytes` of Rread payload sent by splicing (`spliced`) or copying.
    pub(crate) fn count_read(&self, conn: &ConnStats, spliced: bool, bytes: usize) {
        let pick = |d: &DataPaths| {
            let c = if spliced {
                &d.read_spliced
            } else {
                &d.read_copied
            };
            c.fetch_add(bytes as u64, Relaxed);
        };
        pick(&conn.data);
        pick(&self.data);
    }

    /// Counts `bytes` of Twrite payload written to a file by splicing (`spliced`) or copying.
    pub(crate) fn count_write(&self, conn: &ConnStats, spliced: bool, bytes: usize) {
        for d in [&conn.data, &self.data] {
            let c = if spliced {
                &d.write_spliced
            } else {
                &d.write_copied
            };
            c.fetch_add(bytes as u64, Relaxed);
        }
    }

    /// Counts an Rlerror answer to a request of type `request_ty`.
    pub(crate) fn record_error(&self, conn: &ConnStats, request_ty: u8) {
        conn.counters.record_error(request_ty);
        self.totals.record_error(request_ty);
    }

    /// The qid of a file from its attributes. Version is always 0: the qid names the inode,
    /// and a version that changed with every write would make Linux's v9fs treat a modified
    /// file as a different inode; freshness comes from Tgetattr instead.
    pub(crate) fn qid(&self, st: &Statx) -> Qid {
        let ty = match u32::from(st.stx_mode) & libc::S_IFMT {
            libc::S_IFDIR => QID_TYPE_DIR,
            libc::S_IFLNK => QID_TYPE_SYMLINK,
            _ => QID_TYPE_FILE,
        };
        Qid {
            ty,
            version: 0,
            path: self.qid_path(dev_of(st), st.stx_ino),
        }
    }

    /// The qid of a directory entry (`d_type` is a DT_* value) on device `dev`.
    pub(crate) fn entry_qid(&self, dev: u64, ino: u64, d_type: u8) -> Qid {
        let ty = match d_type {
            libc::DT_DIR => QID_TYPE_DIR,
            libc::DT_LNK => QID_TYPE_SYMLINK,
            _ => QID_TYPE_FILE,
        };
        Qid {
            ty,
            version: 0,
            path: self.qid_path(dev, ino),
        }
    }

    /// The inode number, unique across devices: inodes on the export root's device keep their
    /// number; those on other devices (mounts inside the export) get the device's index (from
    /// 1) XORed into bits 48..63, where real inode numbers do not reach in practice.
    fn qid_path(&self, dev: u64, ino: u64) -> u64 {
        if dev == self.root_dev {
            return ino;
        }
        let mut devices = lock(&self.devices);
        let next = devices.len() as u64 + 1;
        let index = *devices.entry(dev).or_insert(next);
        ino ^ (index << 48)
    }
}

/// Opens the export `config` names, with its policy and descriptor budget, and logs it.
fn open_export(config: &ServerConfig) -> Result<Export, ServerError> {
    if config.export.as_os_str().is_empty() {
        return Err(ServerError::Config("the export path is empty"));
    }
    let policy = Policy {
        read_only: config.read_only,
        allow_devices: config.allow_devices,
        allow_setuid: config.allow_setuid,
    };
    let export = Export::open(&config.export, policy, config.fd_budget).map_err(|e| match e {
        OpenError::Export { path, source } => ServerError::Export { path, source },
        OpenError::NoProc(e) => ServerError::NoProc(e),
    })?;
    tracing::info!(
        export = %config.export.display(),
        openat2 = export.openat2,
        fd_limit = export.fd_limit,
        fd_budget = export.fds.budget(),
        read_only = config.read_only,
        "export opened"
    );
    Ok(export)
}

/// A connection slot, given back when the connection ends.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// The device number and file type (`S_IFMT` bits) of a statx result.
pub(crate) fn dev_and_kind(st: &Statx) -> (u64, u32) {
    (dev_of(st), u32::from(st.stx_mode) & libc::S_IFMT)
}

/// The device number of a statx result.
pub(crate) fn dev_of(st: &Statx) -> u64 {
    rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor)
}
