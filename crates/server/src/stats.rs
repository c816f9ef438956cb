//! Message counters per connection and in total, request latencies in total, what each live
//! connection holds (fids and descriptors), and their JSON form for `crossfs stats`.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use crossfs_wire::{CounterSnapshot, LatencyHistograms, LatencySnapshot, MessageCounters};
use serde_json::{json, Map, Value};

use crossfs_export::budget::FdAccount;

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
    /// Fids bound now (kept up to date by the connection's fid table).
    pub fids: Arc<AtomicUsize>,
    /// The connection's share of the server's descriptors, and what it holds now.
    pub fds: Arc<FdAccount>,
}

impl ConnStats {
    pub(crate) fn new(id: u64, peer: String, fds: Arc<FdAccount>) -> Self {
        ConnStats {
            id,
            peer,
            msize: AtomicU32::new(0),
            counters: MessageCounters::default(),
            fids: Arc::new(AtomicUsize::new(0)),
            fds,
        }
    }

    /// The connection's entry in the `connections` array.
    pub(crate) fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("id".into(), json!(self.id));
        obj.insert("peer".into(), json!(self.peer));
        obj.insert("msize".into(), json!(self.msize.load(Relaxed)));
        obj.insert("fids".into(), json!(self.fids.load(Relaxed)));
        obj.insert("fds".into(), json!(self.fds.held()));
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
        let c = ConnStats::new(3, "unix:peer".into(), FdAccount::new(pool));
        let _charge = c.fds.charge().unwrap();
        c.fids.store(2, Relaxed);
        c.msize.store(8192, Relaxed);
        c.counters.record(110, 20);
        c.counters.record_error(110);
        let v = c.to_json();
        assert_eq!(v["id"], 3);
        assert_eq!(v["peer"], "unix:peer");
        assert_eq!(v["msize"], 8192);
        assert_eq!(v["fids"], 2);
        assert_eq!(v["fds"], 1);
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
