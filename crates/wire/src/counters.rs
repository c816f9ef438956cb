//! Per-message-type counters, shared by the server and the client so both report the same
//! shape: for each message name, how many, how many bytes, and (for requests) how many were
//! answered with Rlerror.
//!
//! Recording is lock-free (relaxed atomics): counters are statistics, not synchronisation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::frame::message_name;

/// Counters for one connection (or a total over many).
pub struct MessageCounters {
    count: [AtomicU64; 256],
    bytes: [AtomicU64; 256],
    errors: [AtomicU64; 256],
}

/// One message type's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageCount {
    /// Messages seen.
    pub count: u64,
    /// Bytes of those messages, headers included.
    pub bytes: u64,
    /// Requests of this type answered with Rlerror (always 0 for replies).
    pub errors: u64,
}

/// A point-in-time copy of [`MessageCounters`], keyed by message name ("Twalk", "Rread", and
/// "unknown" for type numbers 9P2000.L does not define).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterSnapshot {
    /// Figures per message name; only types seen at least once appear.
    pub messages: BTreeMap<&'static str, MessageCount>,
    /// Bytes of all requests (T-messages).
    pub bytes_in: u64,
    /// Bytes of all replies (R-messages).
    pub bytes_out: u64,
}

impl Default for MessageCounters {
    fn default() -> Self {
        MessageCounters {
            count: std::array::from_fn(|_| AtomicU64::new(0)),
            bytes: std::array::from_fn(|_| AtomicU64::new(0)),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl MessageCounters {
    /// Counts one message of type `ty` that was `bytes` long on the wire.
    pub fn record(&self, ty: u8, bytes: usize) {
        self.count[ty as usize].fetch_add(1, Relaxed);
        self.bytes[ty as usize].fetch_add(bytes as u64, Relaxed);
    }

    /// Counts an Rlerror answer to a request of type `request_ty`.
    pub fn record_error(&self, request_ty: u8) {
        self.errors[request_ty as usize].fetch_add(1, Relaxed);
    }

    /// Copies the counters out.
    pub fn snapshot(&self) -> CounterSnapshot {
        let mut snap = CounterSnapshot::default();
        for ty in 0..=255u8 {
            let figures = MessageCount {
                count: self.count[ty as usize].load(Relaxed),
                bytes: self.bytes[ty as usize].load(Relaxed),
                errors: self.errors[ty as usize].load(Relaxed),
            };
            if figures.count == 0 && figures.errors == 0 {
                continue;
            }
            let name = message_name(ty).unwrap_or("unknown");
            if name.starts_with('R') {
                snap.bytes_out += figures.bytes;
            } else {
                snap.bytes_in += figures.bytes;
            }
            let slot = snap.messages.entry(name).or_default();
            slot.count += figures.count;
            slot.bytes += figures.bytes;
            slot.errors += figures.errors;
        }
        snap
    }
}

impl CounterSnapshot {
    /// Adds another snapshot into this one (for totals over connections).
    pub fn add(&mut self, other: &CounterSnapshot) {
        for (name, c) in &other.messages {
            let slot = self.messages.entry(name).or_default();
            slot.count += c.count;
            slot.bytes += c.bytes;
            slot.errors += c.errors;
        }
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_name_and_direction() {
        let c = MessageCounters::default();
        c.record(110, 30);
        c.record(110, 32);
        c.record(111, 22);
        c.record_error(110);
        c.record(250, 7);
        let s = c.snapshot();
        assert_eq!(
            s.messages["Twalk"],
            MessageCount {
                count: 2,
                bytes: 62,
                errors: 1
            }
        );
        assert_eq!(s.messages["Rwalk"].count, 1);
        assert_eq!(s.messages["unknown"].count, 1);
        assert_eq!(s.bytes_in, 62 + 7);
        assert_eq!(s.bytes_out, 22);
        let mut total = CounterSnapshot::default();
        total.add(&s);
        total.add(&s);
        assert_eq!(total.messages["Twalk"].count, 4);
        assert_eq!(total.bytes_out, 44);
    }
}
