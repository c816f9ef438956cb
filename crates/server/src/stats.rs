//! Message counters per connection and in total, what each live connection holds (fids and
//! descriptors), and their JSON form for `crossfs stats`.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use crossfs_wire::{CounterSnapshot, MessageCounters};
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
}
