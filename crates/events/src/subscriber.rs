//! One subscriber's bounded ring, and the handle a reader (a long-poll 9P read) holds.
//!
//! The producer never waits for a subscriber: pushing into a full ring clears it and leaves a
//! single `Rescan` of the root ("subscriber fell behind"). Until the subscriber takes that
//! rescan, further events are absorbed into it (its `seq` advances to the newest absorbed
//! event), because re-reading the tree after taking it shows their effects. Nothing is lost
//! silently: every dropped event is covered by the one rescan the subscriber will see. A
//! `Sync` marker is never absorbed nor dropped (a caller is waiting for it): it follows the
//! rescan, and so do the markers the ring held when it overflowed.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::event::{Event, EventKind};
use crate::path::RelPath;

/// The smallest `max_bytes` [`Subscriber::read_blocking`] can always serve.
pub const MIN_READ_BYTES: usize = 160;

#[derive(Debug)]
struct Ring {
    events: VecDeque<Arc<Event>>,
    capacity: usize,
    /// The ring holds exactly one "fell behind" rescan that absorbs new events.
    behind: bool,
    closed: bool,
}

/// The shared half of a subscriber: the hub pushes, the [`Subscriber`] pops.
#[derive(Debug)]
pub(crate) struct SubQueue {
    ring: Mutex<Ring>,
    ready: Condvar,
}

fn lock(m: &Mutex<Ring>) -> MutexGuard<'_, Ring> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn rescan(epoch: u64, seq: u64, reason: &str) -> Arc<Event> {
    Arc::new(Event {
        epoch,
        seq,
        kind: EventKind::Rescan {
            reason: reason.to_owned(),
        },
        path: RelPath::root(),
        qid: None,
        attrs: None,
        dir: None,
        from_dir: None,
    })
}

/// `ev` numbered `seq`.
fn renumbered(ev: &Arc<Event>, seq: u64) -> Arc<Event> {
    Arc::new(Event {
        seq,
        ..(**ev).clone()
    })
}

impl SubQueue {
    pub(crate) fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            ring: Mutex::new(Ring {
                events: VecDeque::with_capacity(capacity.min(1024)),
                capacity: capacity.max(1),
                behind: false,
                closed: false,
            }),
            ready: Condvar::new(),
        })
    }

    /// Queues `ev`; never blocks beyond the ring's own short lock.
    pub(crate) fn push(&self, ev: &Arc<Event>) {
        let mut r = lock(&self.ring);
        if r.closed {
            return;
        }
        if r.behind && matches!(ev.kind, EventKind::Sync { .. }) {
            // Someone is waiting for this marker: it is never absorbed. The rescan before it
            // is sealed (it covers everything up to the marker) and delivery resumes.
            r.events.push_back(Arc::clone(ev));
            r.behind = false;
        } else if r.behind {
            if let Some(front) = r.events.front_mut() {
                *front = rescan(ev.epoch, ev.seq, "subscriber fell behind");
            }
            for marker in r.events.iter_mut().skip(1) {
                *marker = renumbered(marker, ev.seq);
            }
        } else if r.events.len() >= r.capacity {
            // Markers already queued stay, behind the rescan: each has a sync waiting for it,
            // and the rescan covers every change before each of them (and more). Clearing
            // them too lost the marker, and the sync waiting for it timed out (ETIMEDOUT)
            // under a load that kept the ring overflowing (issue 24).
            // They take the rescan's number, here and as it absorbs more, so the numbers a
            // client resumes from still only grow.
            let markers: Vec<Arc<Event>> = std::mem::take(&mut r.events)
                .into_iter()
                .filter(|e| matches!(e.kind, EventKind::Sync { .. }))
                .map(|e| renumbered(&e, ev.seq))
                .collect();
            r.events
                .push_back(rescan(ev.epoch, ev.seq, "subscriber fell behind"));
            r.events.extend(markers);
            if matches!(ev.kind, EventKind::Sync { .. }) {
                // The marker follows the rescan that covers everything before it.
                r.events.push_back(Arc::clone(ev));
            } else {
                r.behind = true;
            }
        } else {
            r.events.push_back(Arc::clone(ev));
        }
        drop(r);
        self.ready.notify_all();
    }

    /// Queues a rescan meant for this subscriber only (a resume that cannot be served).
    pub(crate) fn push_rescan(&self, epoch: u64, seq: u64, reason: &str) {
        let mut r = lock(&self.ring);
        r.events.push_back(rescan(epoch, seq, reason));
    }

    pub(crate) fn close(&self) {
        lock(&self.ring).closed = true;
        self.ready.notify_all();
    }
}

/// A subscription to a hub's events. Dropping it unsubscribes.
#[derive(Debug)]
pub struct Subscriber {
    queue: Arc<SubQueue>,
}

impl Subscriber {
    pub(crate) fn new(queue: Arc<SubQueue>) -> Self {
        Self { queue }
    }

    /// Waits until an event is queued, the hub is gone, or `deadline` passes.
    fn wait(&self, deadline: Instant) -> MutexGuard<'_, Ring> {
        let mut r = lock(&self.queue.ring);
        while r.events.is_empty() && !r.closed {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            r = match self.queue.ready.wait_timeout(r, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
        r
    }

    fn pop(r: &mut Ring) -> Option<Arc<Event>> {
        let ev = r.events.pop_front()?;
        r.behind = false;
        Some(ev)
    }

    /// The next event, if one is queued.
    pub fn try_next(&self) -> Option<Event> {
        Self::pop(&mut lock(&self.queue.ring)).map(|e| (*e).clone())
    }

    /// The next event, waiting up to `timeout`.
    pub fn next_timeout(&self, timeout: Duration) -> Option<Event> {
        let mut r = self.wait(Instant::now() + timeout);
        Self::pop(&mut r).map(|e| (*e).clone())
    }

    /// Number of events queued (a "fell behind" rescan counts as one).
    pub fn pending(&self) -> usize {
        lock(&self.queue.ring).events.len()
    }

    /// Bytes this subscription holds of its own: its queue and the queue's buffer of event
    /// pointers. The events themselves are shared with the hub's history and with every
    /// other subscriber, and are not counted.
    pub fn memory_bytes(&self) -> usize {
        let slots = lock(&self.queue.ring).events.capacity();
        // The `Arc<SubQueue>`'s allocation: two counts and the queue.
        let queue = std::mem::size_of::<[usize; 2]>() + std::mem::size_of::<SubQueue>();
        queue + slots * std::mem::size_of::<Arc<Event>>()
    }

    /// Queues a `Sync { cookie: marker }` for this subscriber alone (see
    /// [`crate::EventHub::sync_subscriber`]); like every marker it is never absorbed.
    pub(crate) fn push_marker(&self, epoch: u64, seq: u64, marker: u64) {
        self.queue.push(&Arc::new(Event {
            epoch,
            seq,
            kind: EventKind::Sync { cookie: marker },
            path: RelPath::root(),
            qid: None,
            attrs: None,
            dir: None,
            from_dir: None,
        }));
    }

    /// Ends the subscription now: a [`Subscriber::read_blocking`] waiting on another thread
    /// returns at once (with whatever is queued), and nothing more is queued. For a server
    /// whose client has gone while a long-poll read is parked.
    pub fn close(&self) {
        self.queue.close();
    }

    /// Whether the hub has shut down (queued events can still be read).
    pub fn is_closed(&self) -> bool {
        lock(&self.queue.ring).closed
    }

    /// A long-poll read: waits up to `timeout` for at least one event, then returns as many
    /// whole JSON lines as fit in `max_bytes` (empty on timeout or when the hub is gone).
    ///
    /// An event whose line alone exceeds `max_bytes` (a very long path in a small read) is
    /// replaced by a rescan of the root, so a reader can never be stuck behind it; any
    /// `max_bytes` of at least [`MIN_READ_BYTES`] makes progress.
    pub fn read_blocking(&self, max_bytes: usize, timeout: Duration) -> Vec<u8> {
        let mut r = self.wait(Instant::now() + timeout);
        let mut out = Vec::new();
        while let Some(front) = r.events.front() {
            let start = out.len();
            front.write_json_line(&mut out);
            if out.len() <= max_bytes {
                Self::pop(&mut r);
                continue;
            }
            out.truncate(start);
            if start == 0 {
                let stand_in = rescan(front.epoch, front.seq, "event too large for read");
                stand_in.write_json_line(&mut out);
                if out.len() <= max_bytes {
                    Self::pop(&mut r);
                } else {
                    out.clear();
                }
            }
            break;
        }
        out
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.queue.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    fn ev(seq: u64, path: &str) -> Arc<Event> {
        Arc::new(Event {
            epoch: 1,
            seq,
            kind: EventKind::Modified,
            path: RelPath::new(path).unwrap(),
            qid: None,
            attrs: None,
            dir: None,
            from_dir: None,
        })
    }

    #[test]
    fn full_ring_leaves_exactly_one_rescan() {
        let q = SubQueue::new(16);
        let s = Subscriber::new(Arc::clone(&q));
        for i in 1..=100 {
            q.push(&ev(i, "f"));
        }
        assert_eq!(s.pending(), 1);
        let e = s.try_next().unwrap();
        assert!(matches!(e.kind, EventKind::Rescan { .. }));
        assert_eq!(e.seq, 100, "the rescan covers everything it absorbed");
        assert!(s.try_next().is_none());
        q.push(&ev(101, "g"));
        assert_eq!(s.try_next().unwrap().seq, 101, "normal delivery resumes");
        for i in 102..=200 {
            q.push(&ev(i, "f"));
        }
        let mut marker = (*ev(201, "")).clone();
        marker.kind = EventKind::Sync { cookie: 1 };
        q.push(&Arc::new(marker));
        q.push(&ev(202, "f"));
        let got: Vec<u64> = std::iter::from_fn(|| s.try_next()).map(|e| e.seq).collect();
        assert_eq!(
            got,
            vec![200, 201, 202],
            "rescan, the marker, then normal delivery"
        );
    }

    #[test]
    fn memory_follows_the_queue_buffer_up_to_the_ring_capacity() {
        let q = SubQueue::new(4096);
        let s = Subscriber::new(Arc::clone(&q));
        let slot = std::mem::size_of::<Arc<Event>>();
        let empty = s.memory_bytes();
        assert!(empty >= 1024 * slot, "{empty}");
        let one = ev(1, "f");
        for _ in 0..3000 {
            q.push(&one);
        }
        let full = s.memory_bytes();
        assert!(full >= empty + (3000 - 1024) * slot, "{empty} then {full}");
        // Events are shared: pushing the same event many times grows only the buffer.
        assert!(full <= empty + 4096 * slot, "{empty} then {full}");
    }

    #[test]
    fn a_marker_reaching_a_full_ring_is_kept_behind_the_rescan() {
        let q = SubQueue::new(4);
        let s = Subscriber::new(Arc::clone(&q));
        for i in 1..=4 {
            q.push(&ev(i, "f"));
        }
        let mut marker = (*ev(5, "")).clone();
        marker.kind = EventKind::Sync { cookie: 9 };
        q.push(&Arc::new(marker));
        let got: Vec<_> = std::iter::from_fn(|| s.try_next())
            .map(|e| e.kind)
            .collect();
        assert!(matches!(got[0], EventKind::Rescan { .. }), "{got:?}");
        assert_eq!(got[1..], [EventKind::Sync { cookie: 9 }]);
    }

    #[test]
    fn a_queued_marker_survives_the_ring_overflowing_behind_it() {
        let q = SubQueue::new(4);
        let s = Subscriber::new(Arc::clone(&q));
        q.push(&ev(1, "f"));
        let mut marker = (*ev(2, "")).clone();
        marker.kind = EventKind::Sync { cookie: 7 };
        q.push(&Arc::new(marker));
        // The reader is slow: the ring overflows with the marker still in it.
        for i in 3..=20 {
            q.push(&ev(i, "f"));
        }
        let got: Vec<_> = std::iter::from_fn(|| s.try_next())
            .map(|e| (e.seq, e.kind))
            .collect();
        assert!(
            matches!(got[0], (20, EventKind::Rescan { .. })),
            "one rescan covering everything: {got:?}"
        );
        assert_eq!(got[1..], [(20, EventKind::Sync { cookie: 7 })]);
    }

    #[test]
    fn read_blocking_returns_whole_lines_within_the_limit() {
        let q = SubQueue::new(16);
        let s = Subscriber::new(Arc::clone(&q));
        let mut one = Vec::new();
        ev(1, "aaaa").write_json_line(&mut one);
        for i in 1..=5 {
            q.push(&ev(i, "aaaa"));
        }
        let got = s.read_blocking(one.len() * 2 + 3, Duration::ZERO);
        assert_eq!(got.iter().filter(|&&b| b == b'\n').count(), 2);
        assert_eq!(got.last(), Some(&b'\n'));
        let long = "x".repeat(255) + "/" + &"y".repeat(255);
        q.push(&ev(6, &long));
        let rest = s.read_blocking(MIN_READ_BYTES, Duration::ZERO);
        assert!(!rest.is_empty());
        for line in rest.split_inclusive(|&b| b == b'\n') {
            Event::from_json_line(line).unwrap();
        }
        let t = Instant::now();
        assert!(s.read_blocking(4096, Duration::ZERO).len() < 4096);
        assert!(s.read_blocking(4096, Duration::from_millis(30)).is_empty());
        assert!(t.elapsed() >= Duration::from_millis(30));
    }
}
