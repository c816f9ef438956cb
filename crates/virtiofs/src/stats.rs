//! Counters per FUSE opcode: requests, errors, bytes in and out, and the data size of READ
//! and WRITE requests (what FUSE_MAX_PAGES changes); and the bytes of file data by the path
//! they took (copied through the door's memory, or straight between the file and the
//! guest's), for `crossfs stats`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use serde_json::{json, Map, Value};

use crate::fuse::Opcode;

/// Slots: opcodes up to this number, plus one for unknown ones.
const SLOTS: usize = 64;

#[derive(Default)]
struct Counter {
    count: AtomicU64,
    errors: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    data: AtomicU64,
    max_data: AtomicU64,
    /// READ and WRITE payloads by size: bucket `i` counts sizes in `(2^(i-1), 2^i]`.
    sizes: [AtomicU64; 32],
}

struct Slots([Counter; SLOTS]);

impl Default for Slots {
    fn default() -> Self {
        Slots(std::array::from_fn(|_| Counter::default()))
    }
}

impl std::ops::Index<usize> for Slots {
    type Output = Counter;
    fn index(&self, i: usize) -> &Counter {
        &self.0[i]
    }
}

/// What FUSE_INIT settled, for the log and the stats.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Negotiated {
    /// The guest's FUSE version.
    pub guest_major: u32,
    /// The guest's minor version.
    pub guest_minor: u32,
    /// Flags the guest offered.
    pub guest_flags: u32,
    /// Flags both sides use.
    pub flags: u32,
    /// Pages per request: `min(--max-pages, queue size - 4)`.
    pub max_pages: u32,
    /// `--max-pages` as configured.
    pub configured_max_pages: u32,
    /// The request queue's size.
    pub queue_size: u32,
    /// Largest WRITE.
    pub max_write: u32,
    /// The guest's readahead limit.
    pub max_readahead: u32,
}

/// The guest agent's counters (`fs/agent`): its requests are in the opcode counters too;
/// these say which of them were replays, answered by the door without touching the export.
#[derive(Default, Debug)]
pub struct AgentCounters {
    /// Agent streams opened (an agent started, or restarted).
    pub streams: AtomicU64,
    /// Event lines handed to the agent.
    pub events: AtomicU64,
    /// Of those, rescans: one as each stream starts, one each time the agent's queue
    /// overflowed (`--event-queue`), and the hub's own (a burst, a kernel queue overflow).
    pub rescans: AtomicU64,
    /// Control-file READs parked to wait for events.
    pub parked: AtomicU64,
    /// Parked READs or syncs answered `EINTR` after a FUSE_INTERRUPT.
    pub interrupted: AtomicU64,
    /// The agent's requests answered as replays: LOOKUPs of names under replay, and the
    /// creates, removals, renames, opens for writing and SETATTRs that replay a change.
    pub replays: AtomicU64,
    /// The agent's requests that would have changed the export without replaying a change
    /// handed to it: refused (`EPERM`), never passed on.
    pub refused: AtomicU64,
}

impl AgentCounters {
    fn to_json(&self) -> Value {
        json!({
            "streams": self.streams.load(Relaxed),
            "events": self.events.load(Relaxed),
            "rescans": self.rescans.load(Relaxed),
            "parked_reads": self.parked.load(Relaxed),
            "interrupted": self.interrupted.load(Relaxed),
            "replays": self.replays.load(Relaxed),
            "refused": self.refused.load(Relaxed),
        })
    }
}

/// The path a READ's or WRITE's file data took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPath {
    /// A READ's data read into the door's memory, then copied into the guest's: a request
    /// that did not come from a chain (tests), or whose chain left less room than the
    /// READ asked for.
    ReadCopied,
    /// A READ's data read from the file straight into the guest's buffers.
    ReadIntoGuest,
    /// A WRITE's data copied out of the guest's memory, then written: a WRITE that did not
    /// come from a chain, or whose head did not decode on its own.
    WriteCopied,
    /// A WRITE's data written to the file straight from the guest's buffers.
    WriteFromGuest,
}

/// Bytes of file data by [`DataPath`] (the guest agent's control file carries none).
#[derive(Default, Debug)]
struct DataPaths {
    read_copied: AtomicU64,
    read_into_guest: AtomicU64,
    write_copied: AtomicU64,
    write_from_guest: AtomicU64,
}

impl DataPaths {
    fn counter(&self, path: DataPath) -> &AtomicU64 {
        match path {
            DataPath::ReadCopied => &self.read_copied,
            DataPath::ReadIntoGuest => &self.read_into_guest,
            DataPath::WriteCopied => &self.write_copied,
            DataPath::WriteFromGuest => &self.write_from_guest,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "read_copied": self.read_copied.load(Relaxed),
            "read_into_guest": self.read_into_guest.load(Relaxed),
            "write_copied": self.write_copied.load(Relaxed),
            "write_from_guest": self.write_from_guest.load(Relaxed),
        })
    }
}

/// Counters of one virtio-fs device, over every guest connection it served.
#[derive(Default)]
pub struct Stats {
    slots: Slots,
    data: DataPaths,
    agent: AgentCounters,
    /// Requests whose header could not be decoded, or chains that could not be read.
    malformed: AtomicU64,
    connections: AtomicU64,
    negotiated: Mutex<Option<Negotiated>>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats").finish_non_exhaustive()
    }
}

fn slot(opcode: u32) -> usize {
    usize::try_from(opcode)
        .ok()
        .filter(|&o| o < SLOTS - 1 && Opcode::from_u32(opcode).is_some())
        .unwrap_or(SLOTS - 1)
}

impl Stats {
    /// Counts one request and its reply; `data` is the READ or WRITE payload size asked for.
    pub fn record(&self, opcode: u32, bytes_in: usize, bytes_out: usize, error: bool, data: u64) {
        let c = &self.slots[slot(opcode)];
        c.count.fetch_add(1, Relaxed);
        c.bytes_in.fetch_add(bytes_in as u64, Relaxed);
        c.bytes_out.fetch_add(bytes_out as u64, Relaxed);
        if error {
            c.errors.fetch_add(1, Relaxed);
        }
        if data > 0 {
            c.data.fetch_add(data, Relaxed);
            c.max_data.fetch_max(data, Relaxed);
            let bucket = (64 - (data - 1).leading_zeros()).min(31) as usize;
            c.sizes[bucket].fetch_add(1, Relaxed);
        }
    }

    /// Counts `bytes` of file data that took `path`.
    pub fn record_data(&self, path: DataPath, bytes: usize) {
        self.data.counter(path).fetch_add(bytes as u64, Relaxed);
    }

    /// Bytes of file data that took `path` so far.
    pub fn data(&self, path: DataPath) -> u64 {
        self.data.counter(path).load(Relaxed)
    }

    /// Counts a request that could not be decoded or a chain that could not be read.
    pub fn record_malformed(&self) {
        self.malformed.fetch_add(1, Relaxed);
    }

    /// Counts a guest connection (a VMM that connected).
    pub fn record_connection(&self) {
        self.connections.fetch_add(1, Relaxed);
    }

    /// Records what FUSE_INIT settled.
    pub fn set_negotiated(&self, n: Negotiated) {
        *self.negotiated.lock().unwrap_or_else(|e| e.into_inner()) = Some(n);
    }

    /// The guest agent's counters.
    pub fn agent(&self) -> &AgentCounters {
        &self.agent
    }

    /// Requests of `opcode` so far.
    pub fn count(&self, opcode: Opcode) -> u64 {
        self.slots[slot(opcode as u32)].count.load(Relaxed)
    }

    /// `{"ops":{"FUSE_LOOKUP":{"count","errors","bytes_in","bytes_out"[,"data","max_data",
    /// "sizes":{"1048576":N,...}]},...,"unknown":{...}},"data":{"read_copied",
    /// "read_into_guest","write_copied","write_from_guest"},"malformed":N,"connections":N,
    /// "init":{...},"agent":{...}}`; opcodes never seen are left out.
    pub fn to_json(&self) -> Value {
        let mut ops = Map::new();
        let mut add = |name: &str, c: &Counter| {
            let count = c.count.load(Relaxed);
            if count == 0 {
                return;
            }
            let mut v = json!({
                "count": count,
                "errors": c.errors.load(Relaxed),
                "bytes_in": c.bytes_in.load(Relaxed),
                "bytes_out": c.bytes_out.load(Relaxed),
            });
            let data = c.data.load(Relaxed);
            if data > 0 {
                v["data"] = json!(data);
                v["max_data"] = json!(c.max_data.load(Relaxed));
                // "up to N bytes": count, for the sizes seen.
                let sizes: Map<String, Value> = c
                    .sizes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.load(Relaxed) > 0)
                    .map(|(i, n)| ((1u64 << i).to_string(), json!(n.load(Relaxed))))
                    .collect();
                v["sizes"] = Value::Object(sizes);
            }
            ops.insert(name.to_owned(), v);
        };
        for &op in Opcode::ALL {
            add(op.name(), &self.slots[slot(op as u32)]);
        }
        add("unknown", &self.slots[SLOTS - 1]);
        let init = self
            .negotiated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        json!({
            "ops": ops,
            "data": self.data.to_json(),
            "malformed": self.malformed.load(Relaxed),
            "connections": self.connections.load(Relaxed),
            "init": init,
            "agent": self.agent.to_json(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fall_in_power_of_two_buckets() {
        let s = Stats::default();
        s.record(15, 80, 16 + 4096, false, 4096);
        s.record(15, 80, 16 + 4097, false, 4097);
        s.record(15, 80, 16, false, 1 << 20);
        s.record(4242, 40, 16, true, 0);
        let j = s.to_json();
        let read = &j["ops"]["FUSE_READ"];
        assert_eq!(read["count"], 3);
        assert_eq!(read["max_data"], 1 << 20);
        assert_eq!(read["sizes"]["4096"], 1);
        assert_eq!(read["sizes"]["8192"], 1);
        assert_eq!(read["sizes"]["1048576"], 1);
        assert_eq!(j["ops"]["unknown"]["errors"], 1);
    }
}
