//! The hub: the public handle (report, subscribe, sync) and the fan-out to subscriber rings.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;

use rustix::pipe::{pipe_with, PipeFlags};

use crate::beneath::Root;
use crate::cookie::{CookieDir, SyncWaiters};
use crate::engine::Engine;
use crate::event::{Change, Event, EventKind};
use crate::path::RelPath;
use crate::snapshot::Snapshot;
use crate::subscriber::{SubQueue, Subscriber};
use crate::watch::fanotify::Fanotify;
use crate::watch::inotify::Inotify;
use crate::watch::poll::Poll;
use crate::watch::{Raw, Watcher};
use crate::{BackendKind, EventError, HubConfig};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Numbering, history and the subscriber list.
#[derive(Debug)]
pub(crate) struct Fanout {
    epoch: u64,
    next_seq: u64,
    history: VecDeque<Arc<Event>>,
    history_cap: usize,
    subs: Vec<Weak<SubQueue>>,
}

impl Fanout {
    fn new(epoch: u64, history_cap: usize) -> Self {
        Self {
            epoch,
            next_seq: 1,
            history: VecDeque::new(),
            history_cap,
            subs: Vec::new(),
        }
    }

    /// Numbers `changes` and queues them for every subscriber. Never waits on a subscriber.
    pub(crate) fn publish(&mut self, changes: Vec<Change>) {
        if changes.is_empty() {
            return;
        }
        let subs: Vec<Arc<SubQueue>> = self.subs.iter().filter_map(Weak::upgrade).collect();
        self.subs.retain(|w| w.strong_count() > 0);
        for c in changes {
            let ev = Arc::new(Event::from_change(self.epoch, self.next_seq, c));
            self.next_seq += 1;
            for s in &subs {
                s.push(&ev);
            }
            if self.history_cap > 0 {
                if self.history.len() >= self.history_cap {
                    self.history.pop_front();
                }
                self.history.push_back(ev);
            }
        }
    }

    fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    fn subscribe(&mut self, capacity: usize, since: Option<(u64, u64)>) -> Subscriber {
        let q = SubQueue::new(capacity);
        let last = self.last_seq();
        match since {
            None => {}
            Some((epoch, _)) if epoch != self.epoch => {
                q.push_rescan(self.epoch, last, "fresh start")
            }
            Some((_, seq)) if seq == last => {}
            Some((_, seq)) => {
                let oldest = self.history.front().map_or(self.next_seq, |e| e.seq);
                if seq > last || seq + 1 < oldest {
                    q.push_rescan(self.epoch, last, "history lost");
                } else {
                    for ev in self.history.iter().filter(|e| e.seq > seq) {
                        q.push(ev);
                    }
                }
            }
        }
        self.subs.push(Arc::downgrade(&q));
        Subscriber::new(q)
    }

    fn close(&mut self) {
        for s in self.subs.iter().filter_map(Weak::upgrade) {
            s.close();
        }
        self.subs.clear();
    }
}

/// Counters behind [`HubStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) overflows: AtomicU64,
    pub(crate) rescans: AtomicU64,
    pub(crate) backoffs: AtomicU64,
}

/// What the hub has done so far (for `crossfs stats` and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HubStats {
    /// Events published.
    pub published: u64,
    /// Kernel queue overflows seen.
    pub overflows: u64,
    /// Subtree rescans performed (overflow, burst, poll, sync without a cookie event).
    pub rescans: u64,
    /// Times the watcher backed off to polling.
    pub backoffs: u64,
}

/// Things handed to the event thread by other threads.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    pub(crate) raws: Vec<Raw>,
    pub(crate) cookies: Vec<u64>,
}

/// State shared by the hub handle and the event thread.
#[derive(Debug)]
pub(crate) struct HubState {
    pub(crate) epoch: u64,
    pub(crate) config: HubConfig,
    pub(crate) fanout: Mutex<Fanout>,
    pub(crate) inbox: Mutex<Inbox>,
    pub(crate) paused: AtomicBool,
    pub(crate) stop: AtomicBool,
    pub(crate) syncs: SyncWaiters,
    pub(crate) stats: Counters,
    pub(crate) cookies: CookieDir,
    wake_w: OwnedFd,
}

impl HubState {
    /// Nudges the event thread; never blocks (a full pipe already means "wake up").
    pub(crate) fn wake(&self) {
        let _ = rustix::io::write(&self.wake_w, &[1]);
    }

    pub(crate) fn publish(&self, changes: Vec<Change>) {
        lock(&self.fanout).publish(changes);
    }
}

/// Watches one exported tree and fans its changes out to subscribers.
///
/// Shareable across threads (`Arc<EventHub>`); dropping it stops the event thread and closes
/// every subscriber.
#[derive(Debug)]
pub struct EventHub {
    shared: Arc<HubState>,
    backend: BackendKind,
    next_cookie: AtomicU64,
    thread: Option<JoinHandle<()>>,
}

/// A new epoch: random, and below 2^53 so JSON readers that use doubles keep it exact.
fn new_epoch() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.write_u128(now.as_nanos());
    h.write_u32(std::process::id());
    (h.finish() & ((1 << 53) - 1)).max(1)
}

fn start_watcher(
    kind: BackendKind,
    root: &Root,
    cfg: &HubConfig,
) -> Result<Box<dyn Watcher>, EventError> {
    let mut w: Box<dyn Watcher> = match kind {
        BackendKind::Auto => {
            // inotify first: it watches the export's directories only, where a fanotify
            // mark covers the whole file system, so every program on the host writing
            // anywhere on it would feed the server's queue (lesson 5: watching must not
            // slow producers, least of all unrelated ones). Past the watch budget inotify
            // polls the rest; fanotify is there when inotify cannot start.
            for choice in [BackendKind::Inotify, BackendKind::Fanotify] {
                match start_watcher(choice, root, cfg) {
                    Ok(w) => return Ok(w),
                    Err(e) => tracing::debug!("{e}; trying the next watcher"),
                }
            }
            return start_watcher(BackendKind::Poll, root, cfg);
        }
        BackendKind::Fanotify => Box::new(Fanotify::new(root)),
        BackendKind::Inotify => Box::new(Inotify::new(cfg.watch_budget)),
        BackendKind::Poll => Box::new(Poll),
    };
    w.arm(root).map_err(|source| EventError::Backend {
        backend: kind,
        source,
    })?;
    Ok(w)
}

impl EventHub {
    /// Starts watching the directory `root`: opens it, arms the watcher, takes the first
    /// snapshot and starts the event thread.
    ///
    /// # Errors
    /// The root cannot be opened, the requested watcher is unavailable (`Auto` falls back
    /// instead), or the thread cannot start.
    pub fn start(root: &Path, config: HubConfig) -> Result<Self, EventError> {
        let root_fd = Root::open(root).map_err(|source| EventError::Root {
            path: root.to_path_buf(),
            source,
        })?;
        let cookies =
            CookieDir::open(&root_fd, &config.cookie_prefix).map_err(EventError::Cookies)?;
        let watcher = start_watcher(config.backend, &root_fd, &config)?;
        let backend = watcher.kind();
        let snapshot = Snapshot::scan_root(&root_fd, &RelPath::root(), &config.cookie_prefix);
        let (wake_r, wake_w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
            .map_err(|e| EventError::Thread(e.into()))?;
        let epoch = new_epoch();
        let shared = Arc::new(HubState {
            epoch,
            fanout: Mutex::new(Fanout::new(epoch, config.history)),
            config,
            inbox: Mutex::new(Inbox::default()),
            paused: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            syncs: SyncWaiters::default(),
            stats: Counters::default(),
            cookies,
            wake_w,
        });
        tracing::info!(
            root = %root_fd.path().display(),
            ?backend,
            entries = snapshot.len(),
            epoch,
            "watching"
        );
        let engine = Engine::new(Arc::clone(&shared), root_fd, watcher, snapshot, wake_r);
        let thread = std::thread::Builder::new()
            .name("crossfs-events".into())
            .spawn(move || engine.run())
            .map_err(EventError::Thread)?;
        Ok(Self {
            shared,
            backend,
            next_cookie: AtomicU64::new(1),
            thread: Some(thread),
        })
    }

    /// This hub's epoch (new every start).
    pub fn epoch(&self) -> u64 {
        self.shared.epoch
    }

    /// The prefix of the sync cookies' names: top-level names of the export that start
    /// with it belong to the hub, exist only during a sync, and are never reported.
    pub fn cookie_prefix(&self) -> &[u8] {
        &self.shared.config.cookie_prefix
    }

    /// The watcher actually in use.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// The newest published sequence number (0 before the first event).
    pub fn last_seq(&self) -> u64 {
        lock(&self.shared.fanout).last_seq()
    }

    /// Counters.
    pub fn stats(&self) -> HubStats {
        let c = &self.shared.stats;
        HubStats {
            published: self.last_seq(),
            overflows: c.overflows.load(Ordering::Relaxed),
            rescans: c.rescans.load(Ordering::Relaxed),
            backoffs: c.backoffs.load(Ordering::Relaxed),
        }
    }

    /// A subscriber that receives every event published from now on.
    pub fn subscribe(&self) -> Subscriber {
        lock(&self.shared.fanout).subscribe(self.shared.config.ring_capacity, None)
    }

    /// A subscriber resuming after event `seq` of `epoch`: the retained events after it, or a
    /// rescan of the root ("fresh start" for another epoch, "history lost" when they are gone).
    pub fn subscribe_since(&self, epoch: u64, seq: u64) -> Subscriber {
        lock(&self.shared.fanout).subscribe(self.shared.config.ring_capacity, Some((epoch, seq)))
    }

    /// Reports a change made through 9P, straight from the handler that made it. It is
    /// coalesced with whatever the kernel reports for the same path, so the event is published
    /// once, with attributes read after the change. `Renamed { from }` reports a rename to
    /// `path`; `Rescan` asks for the subtree to be compared with the snapshot; `Sync` and
    /// `Warning` are ignored. Never blocks on the event thread or on subscribers.
    pub fn report(&self, kind: EventKind, path: RelPath) {
        use crate::coalesce::Hints;
        let raw = match kind {
            EventKind::Created => Raw::Change {
                path,
                hints: Hints::CREATED,
            },
            EventKind::Removed => Raw::Change {
                path,
                hints: Hints::REMOVED,
            },
            EventKind::Modified => Raw::Change {
                path,
                hints: Hints::MODIFIED,
            },
            EventKind::Attrib => Raw::Change {
                path,
                hints: Hints::ATTRIB,
            },
            EventKind::Renamed { from } => Raw::Rename { from, to: path },
            EventKind::Rescan { .. } => Raw::Rescan { path },
            EventKind::Sync { .. } | EventKind::Warning { .. } => return,
        };
        let mut inbox = lock(&self.shared.inbox);
        if inbox.raws.len() >= self.shared.config.burst_limit {
            // The event thread is behind on reports: one root rescan stands for all of them.
            inbox.raws.clear();
            inbox.raws.push(Raw::Rescan {
                path: RelPath::root(),
            });
        }
        inbox.raws.push(raw);
        drop(inbox);
        self.shared.wake();
    }

    /// Returns once every change made before the call has been published, followed by a
    /// `Sync { cookie }` marker; returns the cookie.
    ///
    /// # Errors
    /// The cookie file cannot be created, or the marker was not published within
    /// [`HubConfig::sync_timeout`].
    pub fn sync_cookie(&self) -> Result<u64, EventError> {
        let id = self.next_cookie.fetch_add(1, Ordering::Relaxed);
        self.shared
            .cookies
            .create(self.shared.epoch, id)
            .map_err(EventError::Cookie)?;
        // The event thread may see the file before this request: it remembers cookies seen.
        self.shared.syncs.register(id);
        lock(&self.shared.inbox).cookies.push(id);
        self.shared.wake();
        let timeout = self.shared.config.sync_timeout;
        if self.shared.syncs.wait(id, timeout) {
            Ok(id)
        } else {
            Err(EventError::SyncTimeout(timeout))
        }
    }

    /// As [`EventHub::sync_cookie`], then queues `Sync { cookie: marker }` for `sub` alone,
    /// behind every change the sync covers. A remote client names its own marker (a number it
    /// chose) and waits for it in its stream. The hub's own cookies reach every subscriber
    /// too, as `Sync` events numbered from 1 for every client's sync, and look the same: a
    /// client must number its markers out of their way (`crossfs mount` starts at 2^52).
    ///
    /// # Errors
    /// As [`EventHub::sync_cookie`].
    pub fn sync_subscriber(&self, sub: &Subscriber, marker: u64) -> Result<(), EventError> {
        self.sync_cookie()?;
        sub.push_marker(self.shared.epoch, self.last_seq(), marker);
        Ok(())
    }

    /// Test and benchmark hook: stop reading the kernel queue (it fills, and overflows)
    /// until [`EventHub::resume_reader`].
    pub fn pause_reader(&self) {
        self.shared.paused.store(true, Ordering::SeqCst);
        self.shared.wake();
    }

    /// Undoes [`EventHub::pause_reader`].
    pub fn resume_reader(&self) {
        self.shared.paused.store(false, Ordering::SeqCst);
        self.shared.wake();
    }
}

impl Drop for EventHub {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        lock(&self.shared.fanout).close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str) -> Change {
        Change::new(EventKind::Modified, RelPath::new(path).unwrap(), None)
    }

    #[test]
    fn resume_replays_or_rescans() {
        let mut f = Fanout::new(9, 4);
        f.publish((0..6).map(|i| change(&format!("f{i}"))).collect());
        // History holds seq 3..=6.
        let s = f.subscribe(16, Some((9, 4)));
        assert_eq!(s.try_next().unwrap().seq, 5);
        assert_eq!(s.try_next().unwrap().seq, 6);
        assert!(s.try_next().is_none());
        let s = f.subscribe(16, Some((9, 1)));
        let e = s.try_next().unwrap();
        assert_eq!(
            e.kind,
            EventKind::Rescan {
                reason: "history lost".into()
            }
        );
        let s = f.subscribe(16, Some((8, 6)));
        let e = s.try_next().unwrap();
        assert_eq!(
            e.kind,
            EventKind::Rescan {
                reason: "fresh start".into()
            }
        );
        let s = f.subscribe(16, Some((9, 2)));
        assert_eq!(
            s.try_next().unwrap().seq,
            3,
            "oldest retained follows directly"
        );
    }

    #[test]
    fn epochs_differ() {
        assert_ne!(new_epoch(), new_epoch());
    }
}
