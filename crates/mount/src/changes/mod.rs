//! Change events pushed by the server: keeping the kernel's caches coherent with the host,
//! and replaying each change on this mount so that watchers in the guest see it.
//!
//! The server streams its export's changes as JSON lines ([`crossfs_events::Event`]) on a
//! second 9P connection, attached with the aname `crossfs:events`. One thread, the *feed*
//! (`feed.rs`), reads them and, for each event:
//! 1. invalidates exactly the kernel state it touches: the entry of a name created, removed
//!    or renamed (negative entries included), the attributes and pages of a modified file,
//!    the attributes of one whose metadata changed, and everything known beneath a path
//!    for a rescan;
//! 2. replays it on the mount with the matching system call (`replay.rs`): mknod, mkdir or
//!    symlink for a creation, unlink or rmdir, rename, truncate to the current size for a
//!    modification, chmod for an attribute change. The FUSE handlers recognise the feed
//!    thread by its thread id and answer its requests locally ([`ChangeState::is_replay`],
//!    `MountState::replay_lookup` in `fs/replayed.rs`): nothing is created, removed or renamed on the server a
//!    second time; a replayed creation costs one lookup, a modification or attribute change
//!    one Tgetattr. The guest kernel sees the calls succeed and raises IN_CREATE,
//!    IN_DELETE, IN_MOVED_FROM/IN_MOVED_TO, IN_MODIFY and IN_ATTRIB, as for a local change.
//!    FUSE's own invalidation calls raise none.
//!
//! Replaying is only done where some program in the guest watches (an inotify watch on the
//! directory or file, a fanotify mark on it, the mount or the file system: `watchers.rs`
//! reads them from /proc when they may have changed); elsewhere the invalidation is all,
//! except that with the writeback cache a file whose content changed gets a new node id (the
//! kernel takes a server's size only into a new inode; open files keep the old one).
//!
//! Changes made through this mount come back as events too. They are recognised (the same
//! name or node was changed through this mount within [`OWN_WINDOW`]) and not replayed: the
//! guest kernel raised their events already.
//!
//! A rescan (the server's kernel queue overflowed, or this client fell behind) cannot be
//! replayed change by change: it invalidates the subtree, so the next access re-reads it.
//! A sync ([`ChangeState::sync`], the `user.crossfs.sync` attribute of the mount's root)
//! returns once every change made on the host before it has been applied here.
//!
//! What this module must not do: send anything on the main connection but lookups and
//! getattrs, or act on a path outside the mount.

pub mod calls;
mod feed;
mod replay;
mod watchers;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::session::{Errno, FileType};
use crossfs_client::{Client, ClientError, Fid, Rgetattr};
use serde_json::{json, Value};

use crate::ahead::pushed_pages::PagePush;
use crate::fid::FidRef;
use crate::known::Known;
use crate::sync::lock;

pub(crate) use feed::Feed;

/// How long after a change made through this mount its event is taken for that change.
pub(crate) const OWN_WINDOW: Duration = Duration::from_secs(2);

/// The extended attribute of the mount's root whose read is a sync.
pub(crate) const SYNC_XATTR: &[u8] = b"user.crossfs.sync";

/// How long a sync waits for the server and the feed (documented in the README and in
/// `crossfs sync --help`).
pub(crate) const SYNC_TIMEOUT: Duration = Duration::from_secs(20);

/// The first number this mount gives its sync markers. The stream also carries the server's
/// own sync cookies, `Sync` events numbered 1, 2, ... for every client's sync, which look
/// exactly like a marker; numbering markers from 1 too made a cookie of another client's
/// sync, applied before this mount asked for its marker of the same number, end that sync
/// at once, whatever the feed still had to apply (issue 24). The server's numbers never get
/// here (one per sync, per server start); below 2^53, the number stays exact in JSON
/// readers that use doubles.
const FIRST_MARKER: u64 = 1 << 52;

/// Most syncs waiting at once (each on a thread of its own); past it, a sync fails with
/// EAGAIN.
const SYNCS_WAITING_LIMIT: u32 = 256;

/// Most names remembered as answered "missing" (what a rescan must invalidate).
const NEGATIVE_NAMES_LIMIT: usize = 1 << 17;

/// What a LOOKUP of one name by the feed thread is answered with.
pub(crate) enum Present {
    /// The file, found on the server (or known to the kernel already).
    Found(Arc<FidRef>, Box<Rgetattr>),
    /// A file already gone from the server: a placeholder node of this type.
    Gone(FileType, u32),
}

/// What the feed thread's LOOKUP of the name it is replaying a change to is answered with
/// (see [`ChangeState::intended`]).
pub(crate) enum Intended {
    /// "Missing", uncached.
    Missing,
    /// This file.
    Present(Present),
}

/// What the feed may touch of the mount: what it knows, the change-event state, the page
/// pushes it must let finish before it drops pages, and the main connection (for lookups
/// and getattrs only). Not the FUSE handlers' state: the feed answers nothing itself.
pub(crate) struct FeedTarget {
    /// The main connection.
    pub client: Arc<Client>,
    pub known: Arc<Known>,
    pub changes: Arc<ChangeState>,
    pub page_push: Arc<PagePush>,
    /// The writeback cache is on: the kernel keeps its own idea of a file's size.
    pub writeback: bool,
}

/// What the feed thread is replaying now: how LOOKUPs from it are answered.
#[derive(Default)]
pub(crate) struct Intent {
    /// This (directory, name) is answered "missing", uncached.
    pub missing: Option<(u64, Vec<u8>)>,
    /// This (directory, name) is answered with this file.
    pub present: Option<(u64, Vec<u8>, Present)>,
}

/// Names and nodes changed through this mount lately (see [`OWN_WINDOW`]).
#[derive(Default)]
struct OwnChanges {
    names: Mutex<RecentKeys<(u64, Vec<u8>)>>,
    nodes: Mutex<RecentKeys<u64>>,
    /// Names changed through the mount that no event has named since (at most
    /// [`OWN_CHANGES_LIMIT`]; past it they are forgotten). The server's engine tells what
    /// a name is now, against what it told before: a change of the mount's that the host
    /// undid within one of its windows (a directory renamed, then renamed back) shows
    /// only as the directory's new change time, and with coarse timestamps (4 ms here) not
    /// even that, while the guest keeps the mount's change. A sync checks these names
    /// with the server.
    unechoed: Mutex<HashSet<(u64, Vec<u8>)>>,
}

/// Most changes remembered as the mount's own: past it (over 32,000 changes a second for
/// [`OWN_WINDOW`]) the oldest are forgotten, and their echoes replayed like a host's change.
const OWN_CHANGES_LIMIT: usize = 1 << 16;

/// Keys noted within [`OWN_WINDOW`], with the time each was noted last. Expiry walks the
/// notes in the order they were made, so noting costs O(1) however many are recent.
struct RecentKeys<K> {
    latest: HashMap<K, Instant>,
    order: VecDeque<(Instant, K)>,
}

impl<K> Default for RecentKeys<K> {
    fn default() -> Self {
        RecentKeys {
            latest: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone> RecentKeys<K> {
    fn note(&mut self, key: K, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) < OWN_WINDOW && self.order.len() < OWN_CHANGES_LIMIT {
                break;
            }
            let (at, old) = self.order.pop_front().expect("front was just seen");
            // A later note of the same key keeps it.
            if self.latest.get(&old) == Some(&at) {
                self.latest.remove(&old);
            }
        }
        self.latest.insert(key.clone(), now);
        self.order.push_back((now, key));
    }

    fn is_recent(&self, key: &K, now: Instant) -> bool {
        self.latest
            .get(key)
            .is_some_and(|t| now.duration_since(*t) < OWN_WINDOW)
    }
}

fn note<K: std::hash::Hash + Eq + Clone>(map: &Mutex<RecentKeys<K>>, key: K) {
    lock(map).note(key, Instant::now());
}

fn is_recent<K: std::hash::Hash + Eq + Clone>(map: &Mutex<RecentKeys<K>>, key: &K) -> bool {
    lock(map).is_recent(key, Instant::now())
}

/// Counters shown by `crossfs stats` under `"changes"`.
#[derive(Default)]
pub(crate) struct ChangeStats {
    pub received: AtomicU64,
    pub replayed: AtomicU64,
    pub own: AtomicU64,
    pub rescans: AtomicU64,
    pub invalidations: AtomicU64,
    pub replay_failures: AtomicU64,
    pub syncs: AtomicU64,
}

/// The change-event state every FUSE handler can see.
#[derive(Default)]
pub(crate) struct ChangeState {
    /// Whether a feed runs (before it does, nothing is recorded).
    enabled: AtomicBool,
    /// The feed thread's id (0: none).
    replay_tid: AtomicU32,
    intent: Mutex<Intent>,
    own: OwnChanges,
    /// Directory node -> names answered "missing" while events run.
    negative: Mutex<HashMap<u64, HashSet<Vec<u8>>>>,
    negative_count: AtomicU64,
    /// Markers of the syncs waiting now: false until the feed applies the marker. Only
    /// these are recorded: the server's cookies of other syncs come through too, and
    /// recording them all grew without bound.
    synced: Mutex<HashMap<u64, bool>>,
    synced_cv: Condvar,
    /// Where sync requests go: the event connection and its fid.
    link: OnceLock<(Arc<Client>, Fid)>,
    /// The event connection is being made: a sync waits for `link`.
    link_coming: AtomicBool,
    next_marker: AtomicU64,
    syncs_running: AtomicU32,
    /// The last event applied, "EPOCH:SEQ": where a new event connection resumes.
    pub position: Mutex<Option<(u64, u64)>>,
    pub stats: ChangeStats,
}

impl ChangeState {
    /// The state of a mount whose event connection is made after it is mounted
    /// (`coming`), or that has none yet.
    pub(crate) fn coming(coming: bool) -> ChangeState {
        ChangeState {
            link_coming: AtomicBool::new(coming),
            ..ChangeState::default()
        }
    }

    /// The event connection is made (`link` set), or will not be: syncs stop waiting for it.
    pub(crate) fn link_decided(&self) {
        self.link_coming.store(false, Relaxed);
    }

    /// The event connection, waited for while it is being made (a sync right after the
    /// mount appeared), within `deadline`.
    fn link_by(&self, deadline: Instant) -> Result<&(Arc<Client>, Fid), Errno> {
        loop {
            if let Some(link) = self.link.get() {
                return Ok(link);
            }
            if !self.link_coming.load(Relaxed) {
                return Err(Errno::EOPNOTSUPP);
            }
            if Instant::now() >= deadline {
                return Err(Errno::ETIMEDOUT);
            }
            if crossfs_client::caller_gave_up() {
                return Err(Errno::EINTR);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether a FUSE request from thread `pid` comes from the feed replaying a change.
    pub(crate) fn is_replay(&self, pid: u32) -> bool {
        pid != 0 && self.replay_tid.load(Relaxed) == pid
    }

    /// Notes that `name` in `parent` was changed through this mount.
    pub(crate) fn note_name(&self, parent: u64, name: &[u8]) {
        if self.enabled.load(Relaxed) {
            note(&self.own.names, (parent, name.to_vec()));
            let mut unechoed = lock(&self.own.unechoed);
            if unechoed.len() >= OWN_CHANGES_LIMIT {
                unechoed.clear();
            }
            unechoed.insert((parent, name.to_vec()));
        }
    }

    /// An event named `name` in `parent`.
    fn echoed(&self, parent: u64, name: &[u8]) {
        let mut unechoed = lock(&self.own.unechoed);
        if !unechoed.is_empty() {
            unechoed.remove(&(parent, name.to_vec()));
        }
    }

    /// The names changed through the mount that no event has named since.
    fn take_unechoed(&self) -> HashSet<(u64, Vec<u8>)> {
        std::mem::take(&mut lock(&self.own.unechoed))
    }

    /// Notes that node `ino` was written or its attributes set through this mount.
    pub(crate) fn note_node(&self, ino: u64) {
        if self.enabled.load(Relaxed) {
            note(&self.own.nodes, ino);
        }
    }

    /// Notes a name answered "missing", so that its creation on the host, or a rescan of
    /// its directory, can invalidate it. Returns whether it is tracked: not without a feed,
    /// nor past [`NEGATIVE_NAMES_LIMIT`] (the kernel then gets the mode's short timeout).
    pub(crate) fn note_missing(&self, parent: u64, name: &[u8]) -> bool {
        if !self.enabled.load(Relaxed) {
            return false;
        }
        let mut neg = lock(&self.negative);
        if let Some(set) = neg.get(&parent) {
            if set.contains(name) {
                return true;
            }
        }
        if self.negative_count.load(Relaxed) as usize >= NEGATIVE_NAMES_LIMIT {
            return false;
        }
        if neg.entry(parent).or_default().insert(name.to_vec()) {
            self.negative_count.fetch_add(1, Relaxed);
        }
        true
    }

    fn take_missing(&self, dir: u64) -> Vec<Vec<u8>> {
        let names: Vec<_> = lock(&self.negative)
            .remove(&dir)
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
        self.negative_count.fetch_sub(names.len() as u64, Relaxed);
        names
    }

    fn was_missing(&self, dir: u64, name: &[u8]) -> bool {
        lock(&self.negative)
            .get(&dir)
            .is_some_and(|set| set.contains(name))
    }

    fn forget_missing(&self, dir: u64, name: &[u8]) {
        if let Some(set) = lock(&self.negative).get_mut(&dir) {
            if set.remove(name) {
                self.negative_count.fetch_sub(1, Relaxed);
            }
        }
    }

    /// How a LOOKUP of `name` in `parent` from the feed thread is answered: `None` when it
    /// is not the name being replayed (the ordinary lookup answers it). A present file is
    /// handed over once.
    pub(crate) fn intended(&self, parent: u64, name: &[u8]) -> Option<Intended> {
        let mut intent = lock(&self.intent);
        if intent
            .missing
            .as_ref()
            .is_some_and(|(d, n)| *d == parent && n == name)
        {
            return Some(Intended::Missing);
        }
        let matches = intent
            .present
            .as_ref()
            .is_some_and(|(d, n, _)| *d == parent && n == name);
        if !matches {
            return None;
        }
        let (_, _, present) = intent.present.take()?;
        Some(Intended::Present(present))
    }

    fn set_intent(&self, intent: Intent) {
        *lock(&self.intent) = intent;
    }

    fn marker_applied(&self, marker: u64) {
        if let Some(applied) = lock(&self.synced).get_mut(&marker) {
            *applied = true;
            self.synced_cv.notify_all();
        }
    }

    /// Returns once every change made on the host before the call has been applied to the
    /// kernel's caches and replayed; returns the marker of this sync. The feed applies
    /// events in order, and the server queues the marker behind every change the sync
    /// covers (behind a rescan owed for them, when this mount fell behind), so the marker
    /// applied means they are.
    ///
    /// The caller waits on a thread of its own, never a FUSE thread (see
    /// `MountState::sync_xattr`): replaying a change needs the FUSE threads, and syncs
    /// holding them all made every further sync fail with EAGAIN under load.
    ///
    /// # Errors
    /// `EOPNOTSUPP` without a feed (after waiting for one being connected), `EAGAIN` past
    /// [`SYNCS_WAITING_LIMIT`] syncs waiting at once, `ETIMEDOUT` when the feed was not
    /// connected, the server did not take the marker, or the feed did not apply it, within
    /// [`SYNC_TIMEOUT`] (never an early return), `EINTR` once the caller got a signal (see
    /// `crossfs_client::caller_gave_up`), or the event connection's error.
    pub(crate) fn sync(&self) -> Result<u64, Errno> {
        let deadline = Instant::now() + SYNC_TIMEOUT;
        let (client, fid) = self.link_by(deadline)?;
        let running = self.syncs_running.fetch_add(1, Relaxed);
        let _running = DecrementOnDrop(&self.syncs_running);
        if running >= SYNCS_WAITING_LIMIT {
            tracing::warn!("{running} syncs are waiting already: this one fails with EAGAIN");
            return Err(Errno::EAGAIN);
        }
        let marker = FIRST_MARKER + self.next_marker.fetch_add(1, Relaxed);
        // Awaited before it is asked for: the feed may apply it before the write returns.
        lock(&self.synced).insert(marker, false);
        let _awaited = ForgetMarker(&self.synced, marker);
        // Sent, not waited for as a plain call: a server that stopped answering (but kept
        // the connection) must not hold the caller past a signal or the timeout.
        let (written, answer) = std::sync::mpsc::sync_channel(1);
        let done = Box::new(move |r| {
            let _ = written.send(r);
        });
        client.write_async(*fid, 0, format!("sync {marker}").as_bytes(), done);
        crossfs_client::before_wait();
        let written = loop {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!("sync {marker}: the server did not answer within {SYNC_TIMEOUT:?}");
                return Err(Errno::ETIMEDOUT);
            }
            if crossfs_client::caller_gave_up() {
                return Err(Errno::EINTR);
            }
            match answer.recv_timeout((deadline - now).min(crossfs_client::GIVE_UP_POLL)) {
                Ok(r) => break r,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(ClientError::Protocol("the sync's write was dropped".into()))
                }
            }
        };
        written.map_err(|e: ClientError| {
            tracing::warn!("sync {marker}: the server did not sync: {e}");
            crate::fs::errno(&e)
        })?;
        let mut synced = lock(&self.synced);
        while synced.get(&marker) != Some(&true) {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    "sync {marker}: the feed did not apply the marker within {SYNC_TIMEOUT:?}"
                );
                return Err(Errno::ETIMEDOUT);
            }
            if crossfs_client::caller_gave_up() {
                return Err(Errno::EINTR);
            }
            synced = self
                .synced_cv
                .wait_timeout(synced, (deadline - now).min(crossfs_client::GIVE_UP_POLL))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        self.stats.syncs.fetch_add(1, Relaxed);
        Ok(marker)
    }

    /// The counters, for `crossfs stats`.
    pub(crate) fn stats_json(&self) -> Value {
        let s = &self.stats;
        json!({
            "enabled": self.enabled.load(Relaxed),
            "received": s.received.load(Relaxed),
            "replayed": s.replayed.load(Relaxed),
            "own": s.own.load(Relaxed),
            "rescans": s.rescans.load(Relaxed),
            "invalidations": s.invalidations.load(Relaxed),
            "replay_failures": s.replay_failures.load(Relaxed),
            "syncs": s.syncs.load(Relaxed),
        })
    }
}

/// Stops awaiting a marker however its sync ends.
struct ForgetMarker<'a>(&'a Mutex<HashMap<u64, bool>>, u64);

impl Drop for ForgetMarker<'_> {
    fn drop(&mut self) {
        lock(self.0).remove(&self.1);
    }
}

struct DecrementOnDrop<'a>(&'a AtomicU32);

impl Drop for DecrementOnDrop<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_keys_expire_after_the_window_and_a_later_note_keeps_a_key() {
        let t0 = Instant::now();
        let mut keys = RecentKeys::default();
        keys.note(1u64, t0);
        keys.note(2, t0 + Duration::from_millis(500));
        keys.note(1, t0 + Duration::from_millis(1500));
        let later = t0 + OWN_WINDOW + Duration::from_millis(100);
        assert!(keys.is_recent(&1, later));
        assert!(keys.is_recent(&2, later));
        // Noting expires what the window left behind: 1's first note, not 1 itself.
        keys.note(3, later);
        assert_eq!(keys.latest.len(), 3);
        let much_later = t0 + OWN_WINDOW + Duration::from_millis(1000);
        assert!(keys.is_recent(&1, much_later));
        assert!(!keys.is_recent(&2, much_later));
        keys.note(4, much_later);
        assert!(!keys.latest.contains_key(&2));
        assert_eq!(keys.order.len(), 3);
    }

    #[test]
    fn a_cookie_of_another_sync_is_not_taken_for_a_marker() {
        let c = ChangeState::default();
        // The server's cookies of other clients' syncs, numbered from 1.
        for cookie in 1..100 {
            c.marker_applied(cookie);
        }
        assert!(lock(&c.synced).is_empty(), "nothing awaited, nothing kept");
        let first = FIRST_MARKER + c.next_marker.load(Relaxed);
        lock(&c.synced).insert(first, false);
        c.marker_applied(1);
        assert_eq!(lock(&c.synced).get(&first), Some(&false));
        c.marker_applied(first);
        assert_eq!(lock(&c.synced).get(&first), Some(&true));
    }

    #[test]
    fn recent_keys_stay_bounded_however_fast_they_come() {
        let now = Instant::now();
        let mut keys = RecentKeys::default();
        for k in 0..OWN_CHANGES_LIMIT as u64 + 10 {
            keys.note(k, now);
        }
        assert_eq!(keys.order.len(), OWN_CHANGES_LIMIT);
        assert_eq!(keys.latest.len(), OWN_CHANGES_LIMIT);
        assert!(!keys.is_recent(&0, now));
        assert!(keys.is_recent(&(OWN_CHANGES_LIMIT as u64 + 9), now));
    }
}
