//! What the mount counts: FUSE requests by opcode and the work the caches saved.
//!
//! The 9P side is counted and timed by the client ([`crossfs_client::Client::counters`],
//! [`crossfs_client::Client::latency`]); this module puts both into one JSON document for
//! `crossfs stats`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use crossfs_wire::{CounterSnapshot, LatencySnapshot};
use serde_json::{json, Map, Value};

macro_rules! ops {
    ($($variant:ident = $name:literal,)*) => {
        /// The FUSE requests the mount handles, by kernel opcode name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub(crate) enum Op { $($variant,)* }

        const OP_NAMES: &[&str] = &[$($name,)*];
        const OP_COUNT: usize = OP_NAMES.len();
    };
}

ops! {
    Lookup = "LOOKUP",
    Forget = "FORGET",
    Getattr = "GETATTR",
    Setattr = "SETATTR",
    Readlink = "READLINK",
    Symlink = "SYMLINK",
    Mknod = "MKNOD",
    Mkdir = "MKDIR",
    Unlink = "UNLINK",
    Rmdir = "RMDIR",
    Rename = "RENAME",
    Link = "LINK",
    Open = "OPEN",
    Read = "READ",
    Write = "WRITE",
    Statfs = "STATFS",
    Release = "RELEASE",
    Fsync = "FSYNC",
    Setxattr = "SETXATTR",
    Getxattr = "GETXATTR",
    Listxattr = "LISTXATTR",
    Removexattr = "REMOVEXATTR",
    Flush = "FLUSH",
    Opendir = "OPENDIR",
    Readdir = "READDIR",
    Releasedir = "RELEASEDIR",
    Fsyncdir = "FSYNCDIR",
    Getlk = "GETLK",
    Setlk = "SETLK",
    Create = "CREATE",
    Readdirplus = "READDIRPLUS",
    Fallocate = "FALLOCATE",
}

/// Counters of cache behaviour, named as they appear under "caches".
#[derive(Default)]
pub(crate) struct CacheCounters {
    /// Missing names answered with a cacheable inode-0 entry.
    pub negative_entries_sent: AtomicU64,
    /// Missing names answered with ENOENT (negative caching off).
    pub enoent_sent: AtomicU64,
    /// Opens that let the kernel keep its cached pages.
    pub keep_cache_opens: AtomicU64,
    /// Opens for reading deferred to their first read (see `OpenFile::deferred`).
    pub opens_deferred: AtomicU64,
    /// Of those, opens that a read then sent to the server.
    pub deferred_opens_sent: AtomicU64,
    /// Small files fetched with their directory's (see `crate::ahead::small_files`).
    pub small_files_fetched: AtomicU64,
    /// First reads answered from them.
    pub small_file_reads: AtomicU64,
    /// Of those files, the ones pushed into the kernel's page cache (see
    /// `crate::ahead::pushed_pages`): their first reads send no request at all.
    pub pages_pushed: AtomicU64,
    /// Directories the mount listed itself so that the kernel holds their names (see
    /// `crate::ahead::primed_dirs`).
    pub dirs_primed: AtomicU64,
    /// Replicas of subdirectories fetched ahead during a tree walk (see
    /// `crate::ahead::tree_walk`).
    pub subdirs_fetched_ahead: AtomicU64,
    /// GETATTRs answered with attributes fetched earlier that nothing changed since (see
    /// `crate::known::listed_attrs`), while change events are followed.
    pub unchanged_attrs_sent: AtomicU64,
    /// Readdir requests answered from entries already fetched.
    pub readdir_buffer_hits: AtomicU64,
    /// Entries returned with attributes by readdirplus (each saves a LOOKUP).
    pub readdirplus_entries: AtomicU64,
    /// Of those, entries whose attributes were fetched earlier, not asked for again (see
    /// `crate::known::listed_attrs`).
    pub listed_attrs_reused: AtomicU64,
    /// Reads the kernel asked for that were larger than one Tread may carry.
    pub split_reads: AtomicU64,
    /// `never` mode: GETATTRs answered with the attributes the same thread's LOOKUP had
    /// just fetched (the second half of a `stat`).
    pub lookup_attrs_reused: AtomicU64,
    /// GETATTRs of a directory answered with the attributes a change through the mount
    /// left it with (Tunlinkatattr, Trenameatattr; see `DirReplicas::left_attrs`).
    pub dir_attrs_left: AtomicU64,
    /// LOOKUPs of a directory answered the same way (see `changed_subdir_attrs`).
    pub subdir_lookups_left: AtomicU64,
    /// GETXATTRs answered "no such attribute" from what is known missing
    /// (`crate::known::missing_xattrs`): the kernel's question before each write, mostly.
    pub missing_xattrs_answered: AtomicU64,
}

/// Bytes of file data the mount moved, by path (one mount per process, as `IO_ERRORS`):
/// a READ's reply received from the socket into the mount's memory, then written from
/// there into `/dev/fuse` (or the FUSE ring): compound reads (`Twalkread`, small files
/// fetched ahead), READLINK, reads split over several Treads, the io_uring transport, and
/// any reply the kernel would not splice. A WRITE's bytes are counted by the client
/// ([`crossfs_client::WriteData`]): `write_vectored`, written to the socket from the buffer
/// the FUSE request was read into, behind the 9P head in one `writev`; `write_copied`,
/// copied into a buffer first (a write sent behind keeps a copy until it is answered).
pub(crate) static DATA_READ_COPIED: AtomicU64 = AtomicU64::new(0);
/// A READ's Rread payload spliced from the 9P socket into `/dev/fuse`
/// (`crate::session::splice`), never in the mount's memory.
pub(crate) static DATA_READ_SPLICED: AtomicU64 = AtomicU64::new(0);

/// EIOs given to programs since the mount started (one mount per process).
static IO_ERRORS: AtomicU64 = AtomicU64::new(0);

/// The I/O errors logged in the current second, and how many more were not.
static IO_ERRORS_LOGGED: Mutex<Option<(Instant, u32, u64)>> = Mutex::new(None);

/// Most EIOs logged one by one in a second; the rest are counted and summed up.
const IO_ERRORS_LOGGED_PER_SECOND: u32 = 10;

/// Notes an EIO given to a program, with its cause: every one is counted (`crossfs stats`:
/// `io_errors`) and logged, ten a second at most (a lost connection fails every request
/// at once), the rest summed up in the next second's first line.
pub(crate) fn io_error(cause: &dyn std::fmt::Display) {
    IO_ERRORS.fetch_add(1, Relaxed);
    let now = Instant::now();
    let mut logged = crate::sync::lock(&IO_ERRORS_LOGGED);
    let (since, shown, hidden) = logged.get_or_insert((now, 0, 0));
    if now.duration_since(*since).as_secs() >= 1 {
        if *hidden > 0 {
            tracing::warn!("{hidden} more I/O errors given to programs in the last second");
        }
        (*since, *shown, *hidden) = (now, 0, 0);
    }
    if *shown < IO_ERRORS_LOGGED_PER_SECOND {
        *shown += 1;
        tracing::warn!("I/O error (EIO) given to a program: {cause}");
    } else {
        *hidden += 1;
    }
}

/// All of the mount's own counters.
pub(crate) struct Stats {
    fuse: [AtomicU64; OP_COUNT],
    pub caches: CacheCounters,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            fuse: std::array::from_fn(|_| AtomicU64::new(0)),
            caches: CacheCounters::default(),
        }
    }
}

/// Figures fixed at mount time, reported beside the counters.
pub(crate) struct StatsContext<'a> {
    pub mountpoint: &'a str,
    pub cache: &'a str,
    pub negative_ttl_ms: i64,
    pub max_pages: u32,
    pub max_write: u32,
    pub readahead_kb: Option<u32>,
    pub inodes: usize,
    pub handles: usize,
}

impl Stats {
    pub(crate) fn count(&self, op: Op) {
        self.fuse[op as usize].fetch_add(1, Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn fuse_count(&self, op: Op) -> u64 {
        self.fuse[op as usize].load(Relaxed)
    }

    /// The document `crossfs stats` prints for a mount. `latency.reply` times the client's
    /// requests, from the first byte written to the reply read whole, in the server's shape
    /// (`{"Twalk": {"count", "p50_us", "p90_us", "p99_us", "max_us", "mean_us"}, ...}`).
    pub(crate) fn to_json(
        &self,
        ctx: &StatsContext<'_>,
        negotiation: crossfs_client::MsizeNegotiation,
        ninep: &CounterSnapshot,
        latency: &LatencySnapshot,
        written: crossfs_client::WriteData,
    ) -> Value {
        let mut fuse = Map::new();
        for (i, name) in OP_NAMES.iter().enumerate() {
            let n = self.fuse[i].load(Relaxed);
            if n > 0 {
                fuse.insert((*name).to_string(), json!({ "count": n }));
            }
        }
        let mut p9 = Map::new();
        for (name, c) in &ninep.messages {
            p9.insert(
                (*name).to_string(),
                json!({ "count": c.count, "bytes": c.bytes, "errors": c.errors }),
            );
        }
        // The client sends T-messages and receives R-messages.
        p9.insert("bytes_out".into(), json!(ninep.bytes_in));
        p9.insert("bytes_in".into(), json!(ninep.bytes_out));
        let mut reply = Map::new();
        for (name, h) in &latency.types {
            let s = h.summary();
            reply.insert(
                (*name).to_string(),
                json!({
                    "count": s.count,
                    "p50_us": s.p50_us,
                    "p90_us": s.p90_us,
                    "p99_us": s.p99_us,
                    "max_us": s.max_us,
                    "mean_us": s.mean_us,
                }),
            );
        }
        let c = &self.caches;
        json!({
            "role": "client",
            "mountpoint": ctx.mountpoint,
            "msize": {
                "requested": negotiation.requested,
                "transport_max": negotiation.transport_max,
                "server": negotiation.server,
                "effective": negotiation.effective,
            },
            "max_pages": ctx.max_pages,
            "max_write": ctx.max_write,
            "read_ahead_kb": ctx.readahead_kb,
            "cache": ctx.cache,
            "negative_ttl_ms": ctx.negative_ttl_ms,
            "inodes": ctx.inodes,
            "open_handles": ctx.handles,
            "fuse": fuse,
            "9p": p9,
            "latency": { "reply": reply },
            "io_errors": IO_ERRORS.load(Relaxed),
            "data": {
                "read_copied": DATA_READ_COPIED.load(Relaxed),
                "read_spliced": DATA_READ_SPLICED.load(Relaxed),
                "write_vectored": written.from_caller,
                "write_copied": written.copied,
            },
            "caches": {
                "negative_entries_sent": c.negative_entries_sent.load(Relaxed),
                "enoent_sent": c.enoent_sent.load(Relaxed),
                "keep_cache_opens": c.keep_cache_opens.load(Relaxed),
                "opens_deferred": c.opens_deferred.load(Relaxed),
                "deferred_opens_sent": c.deferred_opens_sent.load(Relaxed),
                "unchanged_attrs_sent": c.unchanged_attrs_sent.load(Relaxed),
                "small_files_fetched": c.small_files_fetched.load(Relaxed),
                "small_file_reads": c.small_file_reads.load(Relaxed),
                "pages_pushed": c.pages_pushed.load(Relaxed),
                "dirs_primed": c.dirs_primed.load(Relaxed),
                "subdirs_fetched_ahead": c.subdirs_fetched_ahead.load(Relaxed),
                "readdir_buffer_hits": c.readdir_buffer_hits.load(Relaxed),
                "readdirplus_entries": c.readdirplus_entries.load(Relaxed),
                "listed_attrs_reused": c.listed_attrs_reused.load(Relaxed),
                "split_reads": c.split_reads.load(Relaxed),
                "lookup_attrs_reused": c.lookup_attrs_reused.load(Relaxed),
                "dir_attrs_left": c.dir_attrs_left.load(Relaxed),
                "subdir_lookups_left": c.subdir_lookups_left.load(Relaxed),
                "missing_xattrs_answered": c.missing_xattrs_answered.load(Relaxed),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_names_line_up() {
        assert_eq!(OP_NAMES[Op::Lookup as usize], "LOOKUP");
        assert_eq!(OP_NAMES[Op::Readdirplus as usize], "READDIRPLUS");
        let s = Stats::default();
        s.count(Op::Lookup);
        s.count(Op::Lookup);
        assert_eq!(s.fuse_count(Op::Lookup), 2);
    }
}
