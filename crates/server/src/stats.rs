//! Message counters per connection and in total, request latencies in total, what each live
//! connection holds (fids, descriptors and memory), and their JSON form for `crossfs stats`.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use crossfs_wire::{CounterSnapshot, LatencyHistograms, LatencySnapshot, MessageCounters};
use serde_json::{json, Map, Value};

use crossfs_export::budget::{ByteBudget, FdAccount};
use crossfs_export::memory::arc_bytes;

use crate::config::ServerConfig;
use crate::fid::FidTable;

/// Figures of one live connection.
pub(crate) struct ConnStats {
    /// Server-wide connection number, from 1.
    pub id: u64,
    /// The peer, as the transport described it.
    pub peer: String,
    /// Negotiated msize (0 before Tversion).
    pub msize: AtomicU32,
    /// This connection's counters.
    pub counters: MessageCounters,
    /// The connection's fids.
    pub fids: Arc<FidTable>,
    /// The connection's share of the server's descriptors, and what it holds now.
    pub fds: Arc<FdAccount>,
    /// What this connection's xattr fids may hold, and hold now.
    pub xattr_bytes: Arc<ByteBudget>,
    /// Its buffers and queued requests, kept up to date by the session.
    pub memory: ConnMemory,
    /// Bytes of file data by the path they took (`crate::splice`).
    pub data: crate::splice::DataPaths,
    /// Threads serving it: the reader and the workers.
    threads: usize,
}

/// Bytes of one connection's buffers and requests, as the session last reported them
/// (the rest of [`ConnStats::memory_json`] is counted when asked).
#[derive(Debug, Default)]
pub(crate) struct ConnMemory {
    /// Capacities of the connection's buffers, each kept for the connection's life and
    /// grown to the largest message it carried: the reader's read buffer (64 KiB), its
    /// frame buffer and reply buffer, and each worker's reply buffer.
    pub buffers: AtomicUsize,
    /// Requests queued for or running on workers: the in-flight table, the queue, and each
    /// request by its frame's length (a decoded request holds copies of its frame's names
    /// and data; a write spliced into pipes holds the socket's pages of its payload, which
    /// are counted so too, though they are the kernel's, not the server's heap).
    pub requests: AtomicUsize,
}

impl ConnStats {
    pub(crate) fn new(id: u64, peer: String, fds: Arc<FdAccount>, config: &ServerConfig) -> Self {
        ConnStats {
            id,
            peer,
            msize: AtomicU32::new(0),
            counters: MessageCounters::default(),
            fids: Arc::new(FidTable::new(config.max_fids)),
            fds,
            xattr_bytes: ByteBudget::new(config.max_pending_xattr_bytes),
            memory: ConnMemory::default(),
            data: Default::default(),
            threads: 1 + config.workers_per_connection,
        }
    }

    /// Bytes this connection holds in the server's own memory, by what holds them:
    /// - `buffers`, `requests`: see [`ConnMemory`];
    /// - `fids`: the fid table, each fid's allocation and what it holds of its own (the
    ///   name it was found by, an attribute's name, an auth fid's token);
    /// - `event_queues`: the queues of its event streams (the events in them are shared
    ///   with the hub and every other subscriber, and not counted);
    /// - `xattrs`: extended attribute values its xattr fids hold (charged to
    ///   `--max-pending-xattr-bytes`);
    /// - `structs`: the connection's own structures (its counters, 6 KiB, most of it);
    /// - `bytes`: their sum.
    ///
    /// Not counted, because no connection owns them: the export's handle cache (the handle
    /// each fid holds on its file, with its name and file handle, is shared by the fid's
    /// clones and by the fids found beneath it; the server reports the cache once, in
    /// `live.handles`), the event hub's snapshot and history, the open-file pool. Not
    /// counted either: transient allocations while a request runs (a listing's entries, a
    /// reply before it is encoded), the kernel's socket buffers, and the threads' stacks
    /// (`threads` of them, reserved virtually; only the pages a thread touched are
    /// resident). Counts are what Rust asked the allocator for: its rounding and
    /// per-block overhead come on top.
    pub(crate) fn memory_json(&self) -> Value {
        let fids = self.fids.memory();
        let buffers = self.memory.buffers.load(Relaxed);
        let requests = self.memory.requests.load(Relaxed);
        let xattrs = self.xattr_bytes.held();
        let structs = arc_bytes::<ConnStats>()
            + arc_bytes::<FidTable>()
            + arc_bytes::<FdAccount>()
            + arc_bytes::<ByteBudget>();
        json!({
            "bytes": buffers + requests + fids.fids + fids.event_queues + xattrs + structs,
            "buffers": buffers,
            "requests": requests,
            "fids": fids.fids,
            "event_queues": fids.event_queues,
            "xattrs": xattrs,
            "structs": structs,
            "threads": self.threads,
        })
    }

    /// The connection's entry in the `connections` array.
    pub(crate) fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("id".into(), json!(self.id));
        obj.insert("peer".into(), json!(self.peer));
        obj.insert("msize".into(), json!(self.msize.load(Relaxed)));
        obj.insert("fids".into(), json!(self.fids.bound()));
        obj.insert("fds".into(), json!(self.fds.held()));
        obj.insert("memory".into(), self.memory_json());
        obj.insert("data".into(), self.data.to_json());
        add_counters(&mut obj, &self.counters.snapshot());
        Value::Object(obj)
    }
}

/// Adds `"Twalk": {"count", "bytes", "errors"}` per message name, then `bytes_in` and
/// `bytes_out`, to `obj`.
pub(crate) fn add_counters(obj: &mut Map<String, Value>, snap: &CounterSnapshot) {
    for (name, c) in &snap.messages {
        obj.insert(
            (*name).to_string(),
            json!({"count": c.count, "bytes": c.bytes, "errors": c.errors}),
        );
    }
    obj.insert("bytes_in".into(), json!(snap.bytes_in));
    obj.insert("bytes_out".into(), json!(snap.bytes_out));
}

/// How long requests take in the server, over every connection since the start (closed
/// ones included). Not kept per connection: a set is about 35 KiB, and these are three.
#[derive(Default)]
pub(crate) struct RequestLatency {
    /// From a request's frame read off the socket to its reply's write beginning, under the
    /// writer lock (flushed requests, and a Tflush answered only after its target, are not
    /// timed).
    pub reply: LatencyHistograms,
    /// Of requests handed to a worker, from the frame read to a worker taking it.
    pub queued: LatencyHistograms,
    /// The handler's own time, on the reader or a worker.
    pub exec: LatencyHistograms,
}

impl RequestLatency {
    /// `{"reply": {"Twalk": {...}, ...}, "queued": {...}, "exec": {...}}`, each entry as
    /// [`latency_json`] writes it.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "reply": latency_json(&self.reply.snapshot()),
            "queued": latency_json(&self.queued.snapshot()),
            "exec": latency_json(&self.exec.snapshot()),
        })
    }
}

/// `{"Twalk": {"count": N, "p50_us": F, "p90_us": F, "p99_us": F, "max_us": F, "mean_us": F},
/// ...}` (see [`crossfs_wire::LatencySummary`]). The mount writes the same shape for its
/// client.
pub(crate) fn latency_json(snap: &LatencySnapshot) -> Value {
    let mut obj = Map::new();
    for (name, h) in &snap.types {
        let s = h.summary();
        obj.insert(
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
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_json_has_the_documented_shape() {
        let pool = crossfs_export::budget::FdPool::new(16);
        let config = ServerConfig::default();
        let c = ConnStats::new(3, "unix:peer".into(), FdAccount::new(pool), &config);
        let _charge = c.fds.charge().unwrap();
        let budget = c.xattr_bytes.clone();
        for fid in [1, 2] {
            let mut charge = budget.empty();
            charge.grow(100).unwrap();
            let value = crate::fid::XattrValue {
                bytes: Vec::new(),
                charge,
            };
            let state = crate::fid::FidState::XattrRead(value);
            c.fids.insert_new(crossfs_wire::Fid(fid), state).unwrap();
        }
        c.memory.buffers.store(1000, Relaxed);
        c.msize.store(8192, Relaxed);
        c.counters.record(110, 20);
        c.counters.record_error(110);
        let v = c.to_json();
        assert_eq!(v["id"], 3);
        assert_eq!(v["peer"], "unix:peer");
        assert_eq!(v["msize"], 8192);
        assert_eq!(v["fids"], 2);
        assert_eq!(v["fds"], 1);
        let memory = &v["memory"];
        assert_eq!(memory["buffers"], 1000);
        assert_eq!(memory["xattrs"], 200);
        assert_eq!(memory["event_queues"], 0);
        assert_eq!(memory["threads"], 5);
        let fids = memory["fids"].as_u64().unwrap();
        assert!(fids >= 2 * arc_bytes::<crate::fid::FidState>() as u64);
        let parts: u64 = [
            "buffers",
            "requests",
            "fids",
            "event_queues",
            "xattrs",
            "structs",
        ]
        .iter()
        .map(|k| memory[*k].as_u64().unwrap())
        .sum();
        assert_eq!(memory["bytes"], parts);
        assert!(memory["structs"].as_u64().unwrap() > 6 * 1024, "{memory}");
        assert_eq!(v["Twalk"], json!({"count": 1, "bytes": 20, "errors": 1}));
        assert_eq!(v["bytes_in"], 20);
        assert_eq!(v["bytes_out"], 0);
    }

    #[test]
    fn latency_json_is_in_microseconds() {
        let l = RequestLatency::default();
        l.reply.record(110, std::time::Duration::from_nanos(12_345));
        l.exec.record(110, std::time::Duration::from_nanos(2_000));
        let v = l.to_json();
        let walk = &v["reply"]["Twalk"];
        assert_eq!(walk["count"], 1);
        assert_eq!(walk["max_us"], 12.3);
        assert_eq!(walk["mean_us"], 12.3);
        let p50 = walk["p50_us"].as_f64().unwrap();
        assert!((11.0..=12.3).contains(&p50), "{v}");
        assert_eq!(v["exec"]["Twalk"]["count"], 1);
        assert_eq!(v["queued"], json!({}));
    }
}
