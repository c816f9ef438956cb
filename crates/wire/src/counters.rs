//! Per-message-type counters, shared by the server and the client so both report the same
//! shape: for each message name, how many, how many bytes, and (for requests) how many were
//! answered with Rlerror.
//!
//! [`LatencyHistograms`] times requests the same way on both sides: per request type, how
//! long from the request to its reply (what "request" and "reply" mean is the recorder's
//! choice: the server times a frame read to its reply written, the client a request written
//! to its reply read).
//!
//! Recording is lock-free (relaxed atomics): counters are statistics, not synchronisation.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::frame::message_name;
use crate::messages::Tmessage;

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

/// Sub-buckets per power of two are `1 << SUB_BITS`: 4, so a bucket spans a quarter of its
/// octave, 20 to 25% of its lower bound.
const SUB_BITS: u32 = 2;
const SUBS: usize = 1 << SUB_BITS;
/// Durations under `1 << MIN_EXP` ns (1.024 us) share the first bucket.
const MIN_EXP: u32 = 10;
/// Durations from `1 << MAX_EXP` ns (68.7 s) on share the last bucket.
const MAX_EXP: u32 = 36;
/// Buckets per request type: one below 1 us, four per octave up to 68.7 s, one above.
pub const LATENCY_BUCKETS: usize = 2 + (MAX_EXP - MIN_EXP) as usize * SUBS;

/// Request types, in [`Tmessage::TABLE`] order: a histogram exists for each, and for nothing
/// else (a type number that is no request is not timed).
const REQUEST_TYPES: usize = Tmessage::TABLE.len();
const NO_SLOT: u8 = u8::MAX;
const _: () = assert!(REQUEST_TYPES < NO_SLOT as usize);
/// Type number to histogram index.
const SLOTS: [u8; 256] = {
    let mut slots = [NO_SLOT; 256];
    let mut i = 0;
    while i < REQUEST_TYPES {
        slots[Tmessage::TABLE[i].number as usize] = i as u8;
        i += 1;
    }
    slots
};

/// The bucket a duration of `ns` nanoseconds falls in.
fn bucket_of(ns: u64) -> usize {
    if ns < 1 << MIN_EXP {
        return 0;
    }
    if ns >= 1 << MAX_EXP {
        return LATENCY_BUCKETS - 1;
    }
    let exp = 63 - ns.leading_zeros();
    let sub = (ns >> (exp - SUB_BITS)) as usize & (SUBS - 1);
    1 + (exp - MIN_EXP) as usize * SUBS + sub
}

/// The durations bucket `i` holds, in ns: `low..high` (the last bucket's `high` is `u64::MAX`).
fn bucket_bounds(i: usize) -> (u64, u64) {
    if i == 0 {
        return (0, 1 << MIN_EXP);
    }
    if i >= LATENCY_BUCKETS - 1 {
        return (1 << MAX_EXP, u64::MAX);
    }
    let exp = MIN_EXP + ((i - 1) / SUBS) as u32;
    let step = 1u64 << (exp - SUB_BITS);
    let low = (1u64 << exp) + ((i - 1) % SUBS) as u64 * step;
    (low, low + step)
}

/// One request type's live histogram.
struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS],
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }
}

/// Latency histograms, one per request type (Twalk, Tgetattr, ...; 9P2000.L's and the
/// crossfs extension's requests, nothing else).
///
/// Buckets are log-linear in nanoseconds: 4 per power of two from 1.024 us to 68.7 s, one
/// below and one above, [`LATENCY_BUCKETS`] (106) in all. A percentile is reported as the
/// middle of its bucket, so it is within 12.5% of an exact one (a bucket is at most 25% of
/// its lower bound wide); count, sum and max are exact. One set takes (106 + 2) x 8 bytes
/// per request type, about 35 KiB for the 41 of today: keep sets per process or per
/// connection, not per file.
///
/// Recording is three relaxed atomic operations (bucket, sum, max) and no lock.
pub struct LatencyHistograms {
    types: Box<[Histogram]>,
}

impl Default for LatencyHistograms {
    fn default() -> Self {
        LatencyHistograms {
            types: (0..REQUEST_TYPES).map(|_| Histogram::default()).collect(),
        }
    }
}

impl LatencyHistograms {
    /// Records that a request of type `request_ty` took `elapsed`. A type number that is no
    /// request is ignored; a duration past 68.7 s lands in the last bucket (its max is kept).
    pub fn record(&self, request_ty: u8, elapsed: Duration) {
        let Some(h) = self.types.get(SLOTS[request_ty as usize] as usize) else {
            return;
        };
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        h.buckets[bucket_of(ns)].fetch_add(1, Relaxed);
        h.sum_ns.fetch_add(ns, Relaxed);
        h.max_ns.fetch_max(ns, Relaxed);
    }

    /// Copies the histograms out; only request types timed at least once appear.
    pub fn snapshot(&self) -> LatencySnapshot {
        let mut snap = LatencySnapshot::default();
        for (info, h) in Tmessage::TABLE.iter().zip(self.types.iter()) {
            let buckets: Vec<u64> = h.buckets.iter().map(|b| b.load(Relaxed)).collect();
            let count = buckets.iter().sum();
            if count == 0 {
                continue;
            }
            let hist = LatencyHistogram {
                count,
                sum_ns: h.sum_ns.load(Relaxed),
                max_ns: h.max_ns.load(Relaxed),
                buckets,
            };
            snap.types.insert(info.name, hist);
        }
        snap
    }
}

/// A point-in-time copy of one request type's histogram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Requests timed.
    pub count: u64,
    /// Their durations added up, in ns.
    pub sum_ns: u64,
    /// The longest, in ns.
    pub max_ns: u64,
    /// Requests per bucket (see [`LatencyHistograms`]); `count` is their sum.
    buckets: Vec<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            count: 0,
            sum_ns: 0,
            max_ns: 0,
            buckets: vec![0; LATENCY_BUCKETS],
        }
    }
}

impl LatencyHistogram {
    /// An estimate of the duration (ns) that a fraction `q` (0.5 for the median) of the
    /// requests did not exceed: the middle of the bucket holding it, never above the max.
    /// `q` of 1 or more is the max; 0 for an empty histogram.
    pub fn percentile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        if q >= 1.0 {
            return self.max_ns;
        }
        // The rank-th smallest duration, from 1.
        let rank = ((q.max(0.0) * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (low, high) = bucket_bounds(i);
                let middle = if high == u64::MAX {
                    low
                } else {
                    low + (high - low) / 2
                };
                return middle.min(self.max_ns);
            }
        }
        self.max_ns
    }

    /// What `crossfs stats` reports of it.
    pub fn summary(&self) -> LatencySummary {
        // Microseconds to 0.1: finer than that is below the buckets' resolution anyway.
        let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
        LatencySummary {
            count: self.count,
            p50_us: us(self.percentile_ns(0.5)),
            p90_us: us(self.percentile_ns(0.9)),
            p99_us: us(self.percentile_ns(0.99)),
            max_us: us(self.max_ns),
            mean_us: us(self.mean_ns()),
        }
    }

    /// The mean duration in ns (0 when empty).
    pub fn mean_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.count).unwrap_or(0)
    }

    /// Adds another histogram's requests into this one.
    pub fn add(&mut self, other: &LatencyHistogram) {
        self.count += other.count;
        self.sum_ns = self.sum_ns.wrapping_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
    }
}

/// One request type's latency as `crossfs stats` shows it: microseconds to 0.1, percentiles
/// within 12.5% (see [`LatencyHistograms`]), count and max exact.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencySummary {
    /// Requests timed.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Longest.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

/// A point-in-time copy of [`LatencyHistograms`], keyed by request name ("Twalk").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencySnapshot {
    /// Histograms per request name; only types timed at least once appear.
    pub types: BTreeMap<&'static str, LatencyHistogram>,
}

impl LatencySnapshot {
    /// Adds another snapshot into this one (for totals over connections).
    pub fn add(&mut self, other: &LatencySnapshot) {
        for (name, h) in &other.types {
            self.types.entry(name).or_default().add(h);
        }
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

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// Within the bucket resolution: 12.5% of the exact figure.
    fn close(estimate_ns: u64, exact_ns: u64) -> bool {
        estimate_ns.abs_diff(exact_ns) as f64 <= exact_ns as f64 * 0.125
    }

    #[test]
    fn buckets_tile_the_range() {
        for i in 0..LATENCY_BUCKETS - 1 {
            let (low, high) = bucket_bounds(i);
            assert_eq!(bucket_of(low), i, "bucket {i}");
            assert_eq!(bucket_of(high - 1), i, "bucket {i}");
            assert_eq!(bucket_bounds(i + 1).0, high, "bucket {i}");
            assert!(low == 0 || (high - low) * 4 <= low, "bucket {i} too wide");
        }
        assert_eq!(bucket_of(u64::MAX), LATENCY_BUCKETS - 1);
        assert_eq!(SLOTS[crate::Twalk::TYPE as usize] as usize, {
            let i = Tmessage::TABLE.iter().position(|m| m.name == "Twalk");
            i.unwrap()
        });
        assert_eq!(SLOTS[crate::Rwalk::TYPE as usize], NO_SLOT);
    }

    #[test]
    fn percentiles_of_known_durations_are_within_a_bucket() {
        let h = LatencyHistograms::default();
        // 1..=1000 us, in a scrambled order.
        for i in 0..1000u64 {
            h.record(crate::Tgetattr::TYPE, us(1 + (i * 617) % 1000));
        }
        h.record(crate::Rgetattr::TYPE, us(5)); // no request: not timed
        let s = h.snapshot();
        assert_eq!(s.types.len(), 1);
        let g = &s.types["Tgetattr"];
        assert_eq!(g.count, 1000);
        assert_eq!(g.max_ns, 1_000_000);
        assert_eq!(g.sum_ns, 500_500_000);
        assert_eq!(g.mean_ns(), 500_500);
        for (q, exact_us) in [(0.5, 500), (0.9, 900), (0.99, 990), (0.01, 10)] {
            let p = g.percentile_ns(q);
            assert!(close(p, exact_us * 1000), "p{q}: {p} ns for {exact_us} us");
        }
        assert_eq!(g.percentile_ns(1.0), 1_000_000);
        assert!(g.percentile_ns(0.5) <= g.percentile_ns(0.9));
        assert!(g.percentile_ns(0.99) <= g.max_ns);
    }

    #[test]
    fn one_duration_is_its_own_percentiles() {
        let h = LatencyHistograms::default();
        h.record(crate::Twalk::TYPE, us(37));
        let w = &h.snapshot().types["Twalk"];
        for q in [0.0, 0.5, 0.99] {
            assert!(close(w.percentile_ns(q), 37_000));
            assert!(w.percentile_ns(q) <= w.max_ns);
        }
    }

    #[test]
    fn zero_and_huge_durations_do_not_panic() {
        let h = LatencyHistograms::default();
        h.record(crate::Tread::TYPE, Duration::ZERO);
        h.record(crate::Tread::TYPE, Duration::from_nanos(1));
        h.record(crate::Tread::TYPE, Duration::MAX);
        h.record(crate::Tread::TYPE, Duration::from_secs(3600));
        h.record(0, us(1));
        h.record(255, us(1));
        let r = &h.snapshot().types["Tread"];
        assert_eq!(r.count, 4);
        assert_eq!(r.max_ns, u64::MAX);
        assert!(r.percentile_ns(0.25) < 1024);
        assert_eq!(r.percentile_ns(0.99), 1 << MAX_EXP);
        assert_eq!(r.percentile_ns(1.0), u64::MAX);
        assert_eq!(LatencyHistogram::default().percentile_ns(0.5), 0);
        assert_eq!(LatencyHistogram::default().mean_ns(), 0);
    }

    #[test]
    fn snapshots_add_up() {
        let (a, b) = (LatencyHistograms::default(), LatencyHistograms::default());
        for _ in 0..3 {
            a.record(crate::Twalk::TYPE, us(10));
        }
        b.record(crate::Twalk::TYPE, us(1000));
        b.record(crate::Tclunk::TYPE, us(2));
        let mut total = LatencySnapshot::default();
        total.add(&a.snapshot());
        total.add(&b.snapshot());
        let w = &total.types["Twalk"];
        assert_eq!(w.count, 4);
        assert_eq!(w.sum_ns, 1_030_000);
        assert_eq!(w.max_ns, 1_000_000);
        assert!(close(w.percentile_ns(0.5), 10_000));
        assert!(close(w.percentile_ns(0.9), 1_000_000));
        assert_eq!(total.types["Tclunk"].count, 1);
        // Recording both into one set gives the same histograms.
        let one = LatencyHistograms::default();
        for _ in 0..3 {
            one.record(crate::Twalk::TYPE, us(10));
        }
        one.record(crate::Twalk::TYPE, us(1000));
        one.record(crate::Tclunk::TYPE, us(2));
        assert_eq!(one.snapshot(), total);
    }
}
