//! Directory replicas: whole directories, every entry with its attributes, kept in the mount
//! while the server's change events are followed, so that lookups (of names present and
//! missing alike), stats and listings in a directory seen once cost no round trip.
//!
//! A replica is filled by the crossfs extension's Treaddirattr (a listing with attributes,
//! as many entries per message as msize allows), the first time a name is looked up in the
//! directory or the directory is listed from its start. What makes each answer exact:
//! - **Filled only while events are followed** and only for a directory whose path the
//!   events can name (anchored, see `tree.rs`), and kept only if no event and no change
//!   through the mount touched the directory while the listing was in flight (a
//!   [`Ticket`]: the directory's change count and the replicas' epoch, taken before the
//!   request is sent).
//! - **Every event updates or drops what it names**, before the kernel is told: a
//!   creation, modification or attribute change keeps an entry only if the event's
//!   attributes (inode, mode, size, mtime, ctime) equal the entry's, else the entry becomes
//!   unknown (asked of the server, and learnt again from the answer); a removal removes it;
//!   a rename does both; the directory's own entry in its parent becomes unknown (its
//!   times changed), and so does every other name of a file whose link count changed. A
//!   directory removed, renamed or replaced loses its replica and its subtree's.
//! - **A rescan drops** the replicas of its subtree (of everything, at the top); so do a
//!   lost event stream, a reconnect (both end "following"), and a clear of the mount's
//!   name table.
//! - **Changes through the mount** update the replica once the server has answered:
//!   the created entry with the attributes the server returned, a removal, a rename (the
//!   target unknown, as its ctime moved), and attribute changes make the file's entries
//!   unknown. A create, removal or rename that returned its directory's attributes
//!   (Tcreateattrdir, Tunlinkatattr, Trenameatattr) leaves them here for the kernel's
//!   next GETATTR of the directory, under the same ticket rule
//!   ([`DirReplicas::left_attrs`]); a change to the directory itself, or one that adds,
//!   removes or renames a name in it, drops them (a change to a file in it, which leaves
//!   the directory's own attributes alone, does not), except the event of the mount's own
//!   change when the stat of the directory it carries equals them: then nothing else has
//!   changed the directory's attributes since (a later change shows in its own event).
//!   Anchors found meanwhile likewise hold across changes to entries' attributes: tickets
//!   count changes of names apart from changes of entries.
//! - **Names over 255 bytes** are never answered "missing": the server says ENAMETOOLONG.
//!
//! So after `crossfs sync` (every host change before it applied) a replica answers what
//! the server would. Between a host change and its event (20 ms to 200 ms of coalescing on
//! the server) it may answer the older state, as every cache that events keep does.
//!
//! Memory is bounded: at most [`DirReplicas::limit`] entries in all; past it, the least
//! recently used directories are dropped first. A directory larger than the limit is not
//! replicated whole (lookups in it ask the server, as without replicas).
//!
//! What this module must not do: send anything (the callers fill it), or answer for a
//! directory it has no complete knowledge of (a missing name is "missing" only in a
//! complete replica).

mod listing;
mod tree;

pub(crate) use listing::{listing_snapshot, Listed};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use crossfs_events::{Attrs, DirAttrs, Event, EventKind, RelPath};
use crossfs_wire::Rgetattr;
use serde_json::{json, Value};

use tree::DirTree;

use crate::known::listed_attrs::Fetched;

/// Entries kept in all replicas by default (about 300 bytes each).
pub const DEFAULT_REPLICA_ENTRIES: usize = 1 << 18;

/// A directory's entries as listed: names, attributes ("." and ".." with none: `valid` 0)
/// and the server's cookies, in the server's order.
pub(crate) type Listing = Vec<(Vec<u8>, Rgetattr, u64)>;

/// A name in a replica and its attributes if known (see [`DirReplicas::names`]).
pub(crate) type NameKnown = (Vec<u8>, Option<Arc<Rgetattr>>);

/// The longest name Linux file systems take: a replica answers "missing" only for names
/// that could exist (a longer one is the server's to refuse).
const NAME_MAX: usize = 255;

/// What a replica says about one name.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    /// The name exists, with these attributes.
    Found(Arc<Rgetattr>),
    /// The directory has no such name.
    Missing,
    /// No replica, or it cannot say: ask the server.
    Ask,
}

enum Slot {
    Known(Arc<Rgetattr>),
    /// Changed since it was listed: the server knows.
    Unknown,
}

struct Replica {
    slots: HashMap<Vec<u8>, Slot>,
    unknown: usize,
    /// Every name of the directory is in `slots` (absent: missing).
    complete: bool,
    /// The replicas' clock when it was last used (least recently used go first).
    used: u64,
    /// The listing made from `slots` for the last opendir, shared by every opendir until
    /// a name changes (then made again when next asked for).
    listing: Option<Arc<[Listed]>>,
    /// The names as the server listed them, "." and ".." included, with its cookies.
    order: Vec<(Vec<u8>, u64)>,
    /// Every name in `slots` is in `order`: no name came since the listing (a creation or
    /// a rename here has no cookie of the server's), so listings can be answered here.
    cookied: bool,
    /// When the listing it was made from was fetched: a file the mount's change clock
    /// says nothing touched since has the attributes it was listed with (its access time
    /// included: the server's reads for the mount count as touches).
    filled: Fetched,
}

/// What a change through the mount says of a directory it changed: the directory's
/// attributes afterwards (from the crossfs compounds), and the directory's ticket from
/// before the change was sent.
#[derive(Clone, Debug)]
pub(crate) struct DirLeft {
    pub before: Ticket,
    pub attrs: Rgetattr,
}

/// A directory's state when a fill or a lookup was sent: what it learns is kept only if
/// nothing touched the directory since.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    epoch: u64,
    changes: Changes,
}

/// The changes routed to a directory so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Changes {
    /// Changes to its names, and anything else that may have changed the directory's own
    /// attributes.
    names: u64,
    /// Those, and changes to its entries' attributes (a file's, a subdirectory's times).
    entries: u64,
}

#[derive(Default)]
struct Inner {
    following: bool,
    /// Moves on with every change that counts for every directory.
    epoch: u64,
    /// Directory node -> changes routed to it so far.
    changes: HashMap<u64, Changes>,
    tree: DirTree,
    dirs: HashMap<u64, Replica>,
    /// `qid.path` of a non-directory -> the entries naming it (hard links share one).
    by_qid: HashMap<u64, Vec<(u64, Vec<u8>)>>,
    entries: usize,
    clock: u64,
    /// Directory node -> its attributes as a change through the mount left them (see
    /// [`DirReplicas::left_attrs`]), with its ticket right after.
    left: HashMap<u64, (Rgetattr, Ticket)>,
}

/// Counters shown by `crossfs stats` under `"replicas"`.
#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    negative_hits: AtomicU64,
    asked: AtomicU64,
    fills: AtomicU64,
    filled_entries: AtomicU64,
    fills_discarded: AtomicU64,
    dropped: AtomicU64,
    evicted: AtomicU64,
}

/// The mount's directory replicas (see the module doc).
pub(crate) struct DirReplicas {
    inner: Mutex<Inner>,
    limit: AtomicUsize,
    counters: Counters,
}

fn same_as_event(a: &Rgetattr, e: &Attrs) -> bool {
    let ns = |s: u64, n: u64| (s as i64).saturating_mul(1_000_000_000) + n as i64;
    a.qid.path == e.ino
        && a.mode == e.mode
        && a.size == e.size
        && ns(a.mtime_sec, a.mtime_nsec) == e.mtime_ns
        && ns(a.ctime_sec, a.ctime_nsec) == e.ctime_ns
}

/// Whether `a` shows every attribute a directory's stat `d` gives (what a GETATTR tells the
/// kernel but the access time, which no event follows).
fn same_dir_attrs(a: &Rgetattr, d: &DirAttrs) -> bool {
    let ns = |s: u64, n: u64| (s as i64).saturating_mul(1_000_000_000) + n as i64;
    a.qid.path == d.ino
        && a.mode == d.mode
        && (a.uid, a.gid) == (d.uid, d.gid)
        && a.nlink == d.nlink
        && a.size == d.size
        && a.blocks == d.blocks
        && ns(a.mtime_sec, a.mtime_nsec) == d.mtime_ns
        && ns(a.ctime_sec, a.ctime_nsec) == d.ctime_ns
}

fn is_dot_name(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

fn is_dir(a: &Rgetattr) -> bool {
    a.mode & libc::S_IFMT == libc::S_IFDIR
}

impl Inner {
    fn bump(&mut self, dir: u64) {
        let c = self.changes.entry(dir).or_default();
        c.names += 1;
        c.entries += 1;
    }

    /// As [`Self::bump`], for a change to an entry of `dir` that leaves its names and the
    /// directory's own attributes as they were (a file's attributes or link count, a
    /// subdirectory's times): what a change through the mount left of the directory's
    /// attributes stays good, and so do anchors found meanwhile.
    fn bump_entry(&mut self, dir: u64) {
        self.changes.entry(dir).or_default().entries += 1;
    }

    fn ticket(&self, dir: u64) -> Ticket {
        Ticket {
            epoch: self.epoch,
            changes: self.changes.get(&dir).copied().unwrap_or_default(),
        }
    }

    /// Whether nothing touched `dir` since `t` (nor anything that counts for every
    /// directory), while events were followed.
    fn still(&self, dir: u64, t: Ticket) -> bool {
        self.names_still(dir, t)
            && t.changes.entries == self.changes.get(&dir).map_or(0, |c| c.entries)
    }

    /// As [`Self::still`], for `dir`'s names and own attributes only.
    fn names_still(&self, dir: u64, t: Ticket) -> bool {
        self.following
            && self.tree.is_anchored(dir)
            && t.epoch == self.epoch
            && t.changes.names == self.changes.get(&dir).map_or(0, |c| c.names)
    }

    fn unindex(&mut self, dir: u64, name: &[u8], slot: &Slot) {
        let Slot::Known(a) = slot else { return };
        if is_dir(a) {
            return;
        }
        if let Some(names) = self.by_qid.get_mut(&a.qid.path) {
            names.retain(|(d, n)| !(*d == dir && n == name));
            if names.is_empty() {
                self.by_qid.remove(&a.qid.path);
            }
        }
    }

    /// Sets `name` in `dir`'s replica, if there is one: `Some(slot)`, or absent.
    fn set(&mut self, dir: u64, name: &[u8], slot: Option<Slot>) {
        let Some(r) = self.dirs.get_mut(&dir) else {
            return;
        };
        // In a partial replica an absent name already means "ask the server".
        let slot = match slot {
            Some(Slot::Unknown) if !r.complete => None,
            slot => slot,
        };
        r.listing = None;
        let indexed = match &slot {
            Some(Slot::Known(a)) if !is_dir(a) => Some(a.qid.path),
            _ => None,
        };
        let old = match slot {
            Some(slot) => {
                r.unknown += usize::from(matches!(slot, Slot::Unknown));
                r.slots.insert(name.to_vec(), slot)
            }
            None => r.slots.remove(name),
        };
        let present = r.slots.contains_key(name);
        if let Some(Slot::Unknown) = old {
            r.unknown -= 1;
        }
        match (old.is_some(), present) {
            (false, true) => {
                self.entries += 1;
                r.cookied = false;
            }
            (true, false) => self.entries -= 1,
            _ => {}
        }
        if let Some(old) = old {
            self.unindex(dir, name, &old);
        }
        if let Some(q) = indexed {
            self.by_qid.entry(q).or_default().push((dir, name.to_vec()));
        }
    }

    /// An event or a change says `name` in `dir` may now be other than the replica says.
    fn touch(&mut self, dir: u64, name: &[u8], now: Option<&Attrs>) {
        let keep = match self.dirs.get(&dir).and_then(|r| r.slots.get(name)) {
            Some(Slot::Known(a)) => now.is_some_and(|e| same_as_event(a, e)),
            _ => false,
        };
        if !keep {
            self.set(dir, name, Some(Slot::Unknown));
        }
    }

    /// The entry of the directory holding `path`, in its own parent's replica: an entry
    /// was added or removed in it, so its times, size and link count changed. Found by
    /// path, so it holds whether the directory itself is anchored or not.
    fn touch_container(&mut self, path: &RelPath) {
        let Some(dir) = path.parent().filter(|d| !d.is_root()) else {
            return;
        };
        let grandparent = dir.parent().and_then(|g| self.tree.resolve(g.components()));
        if let Some(g) = grandparent {
            self.touch(g, dir.file_name(), None);
            self.bump_entry(g);
        }
    }

    /// The directory's own entry in its parent's replica: its times changed.
    fn touch_self(&mut self, dir: u64) {
        if let Some((parent, name)) = self.tree.parent(dir) {
            let name = name.to_vec();
            self.touch(parent, &name, None);
            self.bump_entry(parent);
        }
    }

    /// Every other name of the file with `qid_path`: its link count or attributes changed.
    fn touch_links(&mut self, qid_path: u64, now: Option<&Attrs>) {
        for (dir, name) in self.by_qid.get(&qid_path).cloned().unwrap_or_default() {
            self.touch(dir, &name, now);
            self.bump_entry(dir);
        }
    }

    /// Drops the replicas of `dirs`; returns how many there were. (A fill in flight for
    /// one of them is refused by what made it go: a detach, an event's count, an epoch.)
    fn drop_dirs(&mut self, dirs: &[u64]) -> u64 {
        let mut dropped = 0;
        for dir in dirs {
            if let Some(r) = self.dirs.remove(dir) {
                dropped += 1;
                self.entries -= r.slots.len();
                for (name, slot) in &r.slots {
                    self.unindex(*dir, name, slot);
                }
            }
        }
        dropped
    }

    /// A directory named `name` in `dir`, if anchored, goes with its subtree.
    fn detach_child(&mut self, dir: u64, name: &[u8], counters: &Counters) {
        if let Some(child) = self.tree.child(dir, name) {
            let gone = self.tree.detach(child);
            let n = self.drop_dirs(&gone);
            counters.dropped.fetch_add(n, Relaxed);
        }
    }

    /// `name` in `dir` is gone; a directory of that name goes with its subtree.
    /// `dir_as_left`: the directory is known to be as what a change through the mount left
    /// of it says (see [`Inner::as_left`]).
    fn removed(&mut self, dir: u64, name: &[u8], dir_as_left: bool, counters: &Counters) {
        self.detach_child(dir, name, counters);
        let qid = match self.dirs.get(&dir).and_then(|r| r.slots.get(name)) {
            Some(Slot::Known(a)) if !is_dir(a) => Some(a.qid.path),
            _ => None,
        };
        self.set(dir, name, None);
        if let Some(q) = qid {
            self.touch_links(q, None);
        }
        self.touch_self(dir);
        if dir_as_left {
            self.bump_entry(dir);
        } else {
            self.bump(dir);
        }
    }

    /// Whether directory `dir`'s attributes `now` (a stat of it taken after the change an
    /// event tells) are what a change through the mount left of them: then that change's
    /// echo, or a later change in the directory that changed nothing of it, leaves them.
    fn as_left(&self, dir: u64, now: Option<&DirAttrs>) -> bool {
        let (Some(now), Some((attrs, ticket))) = (now, self.left.get(&dir)) else {
            return false;
        };
        self.names_still(dir, *ticket) && same_dir_attrs(attrs, now)
    }

    /// `name` in `dir` may be new or changed (`now`: its attributes, if known);
    /// `dir_as_left`: the directory's own attributes are as a change through the mount
    /// left them (only the file's content or attributes changed, not the name, or a stat
    /// of the directory says so: see [`Inner::as_left`]).
    /// A directory of that name keeps its place only if the event says it is still one
    /// (its attributes then tell whether it is the same one: see `touch`).
    fn changed(
        &mut self,
        (dir, name): (u64, &[u8]),
        now: Option<&Attrs>,
        dir_as_left: bool,
        counters: &Counters,
    ) {
        if !now.is_some_and(|a| a.is_dir()) {
            self.detach_child(dir, name, counters);
        }
        // A file the name no longer leads to (a rename or a creation replaced it): its
        // other names have one link less.
        let replaced = match self.dirs.get(&dir).and_then(|r| r.slots.get(name)) {
            Some(Slot::Known(a)) if !is_dir(a) && now.map(|n| n.ino) != Some(a.qid.path) => {
                Some(a.qid.path)
            }
            _ => None,
        };
        if let Some(q) = replaced {
            self.touch_links(q, None);
        }
        self.touch(dir, name, now);
        if dir_as_left {
            self.bump_entry(dir);
        } else {
            self.bump(dir);
        }
    }

    /// `name` in `dir` was renamed through the mount to `to_name` in `to_dir`.
    fn own_renamed(&mut self, dir: u64, name: &[u8], to_dir: u64, to_name: &[u8], c: &Counters) {
        let moved = match self.dirs.get(&dir).and_then(|r| r.slots.get(name)) {
            Some(Slot::Known(a)) if !is_dir(a) => Some(a.qid.path),
            _ => None,
        };
        self.removed(dir, name, false, c);
        self.changed((to_dir, to_name), None, false, c);
        self.touch_self(to_dir);
        if let Some(q) = moved {
            self.touch_links(q, None);
        }
    }

    fn clear(&mut self, counters: &Counters) {
        counters.dropped.fetch_add(self.dirs.len() as u64, Relaxed);
        self.dirs.clear();
        self.by_qid.clear();
        self.changes.clear();
        self.tree.clear();
        self.entries = 0;
        self.left.clear();
        self.epoch += 1;
    }

    /// The attributes in `left` if they may be kept for `dir`: nothing but the change
    /// they came with touched the directory's names or attributes since its ticket was
    /// taken (checked before the change is applied).
    fn keepable(&self, dir: u64, left: Option<DirLeft>) -> Option<Rgetattr> {
        left.filter(|l| l.attrs.valid != 0 && self.names_still(dir, l.before))
            .map(|l| l.attrs)
    }

    /// Keeps `attrs` as `dir`'s, good until the next change of its names or attributes
    /// (once the change they came with has been applied).
    fn keep_left(&mut self, dir: u64, attrs: Option<Rgetattr>) {
        if let Some(attrs) = attrs {
            let ticket = self.ticket(dir);
            self.left.insert(dir, (attrs, ticket));
        }
    }

    /// Drops least recently used replicas until `room` more entries fit under `limit`.
    fn make_room(&mut self, room: usize, limit: usize, counters: &Counters) {
        while self.entries + room > limit {
            let Some((&oldest, _)) = self.dirs.iter().min_by_key(|(_, r)| r.used) else {
                break;
            };
            let n = self.drop_dirs(&[oldest]);
            counters.evicted.fetch_add(n, Relaxed);
        }
    }
}

impl DirReplicas {
    /// Replicas of at most `limit` entries in all (0: none are kept).
    pub(crate) fn new(limit: usize) -> Self {
        DirReplicas {
            inner: Mutex::default(),
            limit: AtomicUsize::new(limit),
            counters: Counters::default(),
        }
    }

    /// Entries kept at most (see the module doc).
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::sync::lock(&self.inner)
    }

    /// Whether replicas may be used at all.
    pub(crate) fn enabled(&self) -> bool {
        self.limit() > 0 && self.lock().following
    }

    /// Whether change events are followed from now on. A change either way drops every
    /// replica: stopping may have lost events, and nothing was followed before starting.
    pub(crate) fn set_following(&self, following: bool) {
        let mut inner = self.lock();
        if inner.following != following {
            inner.following = following;
            inner.clear(&self.counters);
        }
    }

    /// No more replicas for this mount (it can no longer follow every name).
    pub(crate) fn set_limit_zero(&self) {
        self.limit.store(0, Relaxed);
        self.lock().clear(&self.counters);
    }

    /// What `dir`'s replica says about `name`.
    pub(crate) fn lookup(&self, dir: u64, name: &[u8]) -> Answer {
        let mut inner = self.lock();
        inner.clock += 1;
        let clock = inner.clock;
        let Some(r) = inner.dirs.get_mut(&dir) else {
            return Answer::Ask;
        };
        r.used = clock;
        let answer = match r.slots.get(name) {
            Some(Slot::Known(a)) => Answer::Found(a.clone()),
            // A name too long for the host is not missing: the server says ENAMETOOLONG.
            None if r.complete && name.len() <= NAME_MAX => Answer::Missing,
            _ => Answer::Ask,
        };
        let c = &self.counters;
        match answer {
            Answer::Found(_) => c.hits.fetch_add(1, Relaxed),
            Answer::Missing => c.negative_hits.fetch_add(1, Relaxed),
            Answer::Ask => c.asked.fetch_add(1, Relaxed),
        };
        answer
    }

    /// When the listing `dir`'s replica was made from was fetched, if it has one.
    pub(crate) fn filled(&self, dir: u64) -> Option<Fetched> {
        self.lock().dirs.get(&dir).map(|r| r.filled)
    }

    /// Whether `dir` has a replica.
    pub(crate) fn has(&self, dir: u64) -> bool {
        self.lock().dirs.contains_key(&dir)
    }

    /// How many entries `dir` has, if its replica is complete.
    pub(crate) fn entries(&self, dir: u64) -> Option<usize> {
        let inner = self.lock();
        let r = inner.dirs.get(&dir).filter(|r| r.complete)?;
        Some(r.slots.len())
    }

    /// The entries of `dir`'s replica, if it is complete, knows every entry and has no
    /// name the server did not list (a listing can then be answered from it): in the
    /// server's order, with its cookies (see [`listing_snapshot`]).
    pub(crate) fn listing(&self, dir: u64) -> Option<(Arc<[Listed]>, Fetched)> {
        let mut inner = self.lock();
        inner.clock += 1;
        let clock = inner.clock;
        let r = inner.dirs.get_mut(&dir)?;
        if !r.complete || r.unknown > 0 || !r.cookied {
            return None;
        }
        r.used = clock;
        let (slots, order) = (&r.slots, &r.order);
        let listing = r.listing.get_or_insert_with(|| {
            let present = order.iter().filter_map(|(name, cookie)| {
                let attr = match slots.get(name) {
                    Some(Slot::Known(a)) => Some(a.clone()),
                    _ if is_dot_name(name) => None,
                    // Removed since.
                    _ => return None,
                };
                Some((name.clone(), attr, *cookie))
            });
            listing_snapshot(present)
        });
        Some((listing.clone(), r.filled))
    }

    /// Every name in `dir`'s complete replica with its attributes if known (`None`: changed
    /// since listed), in the order of its listing if one is at hand, else by name: which
    /// files a directory has, for fetching its small files (`crate::ahead::small_files`).
    pub(crate) fn names(&self, dir: u64) -> Option<Vec<NameKnown>> {
        let inner = self.lock();
        let r = inner.dirs.get(&dir).filter(|r| r.complete)?;
        if let Some(listing) = &r.listing {
            let files = listing.iter().filter(|l| l.attr.is_some());
            return Some(
                files
                    .map(|l| (l.entry.name.clone(), l.attr.clone()))
                    .collect(),
            );
        }
        let mut names: Vec<_> = r
            .slots
            .iter()
            .map(|(n, s)| match s {
                Slot::Known(a) => (n.clone(), Some(a.clone())),
                Slot::Unknown => (n.clone(), None),
            })
            .collect();
        names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Some(names)
    }

    /// A ticket for a fill of, or a lookup in, `dir`; `None` if its replica could not be
    /// kept (not following, or the directory is not anchored).
    pub(crate) fn ticket(&self, dir: u64) -> Option<Ticket> {
        if self.limit() == 0 {
            return None;
        }
        let inner = self.lock();
        (inner.following && inner.tree.is_anchored(dir)).then(|| inner.ticket(dir))
    }

    /// Keeps a listing of `dir` fetched under `ticket` (`filled`: taken before its first
    /// request), if nothing touched the directory since and it fits: `complete` when it
    /// runs to the directory's end. Returns whether it was kept.
    pub(crate) fn install(
        &self,
        dir: u64,
        ticket: Ticket,
        listed: Listing,
        complete: bool,
        filled: Fetched,
    ) -> bool {
        let c = &self.counters;
        let mut inner = self.lock();
        let n = listed
            .iter()
            .filter(|(name, ..)| !is_dot_name(name))
            .count();
        if !inner.still(dir, ticket) || n > self.limit() {
            c.fills_discarded.fetch_add(1, Relaxed);
            return false;
        }
        inner.drop_dirs(&[dir]);
        inner.make_room(n, self.limit(), c);
        inner.clock += 1;
        let used = inner.clock;
        let order = listed.iter().map(|(n, _, c)| (n.clone(), *c)).collect();
        inner.dirs.insert(
            dir,
            Replica {
                slots: HashMap::with_capacity(n),
                unknown: 0,
                complete,
                used,
                listing: None,
                order,
                cookied: true,
                filled,
            },
        );
        let listed: Vec<(Vec<u8>, Option<Arc<Rgetattr>>, u64)> = listed
            .into_iter()
            .map(|(n, a, c)| {
                let attr = (!is_dot_name(&n)).then(|| Arc::new(a));
                (n, attr, c)
            })
            .collect();
        for (name, a, _) in &listed {
            if let Some(a) = a {
                inner.set(dir, name, Some(Slot::Known(a.clone())));
            }
        }
        // The listing for the next opendir, made now rather than from the slots then
        // (milliseconds for a large directory, on the first `ls` after a stat pass).
        if let Some(r) = inner.dirs.get_mut(&dir) {
            r.cookied = true;
            if complete {
                r.listing = Some(listing_snapshot(listed.into_iter()));
            }
        }
        c.fills.fetch_add(1, Relaxed);
        c.filled_entries.fetch_add(n as u64, Relaxed);
        true
    }

    /// What a lookup sent under `ticket` found for `name` in `dir` (`None`: missing).
    pub(crate) fn learned(&self, dir: u64, ticket: Ticket, name: &[u8], found: Option<&Rgetattr>) {
        let mut inner = self.lock();
        if !inner.still(dir, ticket) || !inner.dirs.contains_key(&dir) {
            return;
        }
        match found {
            Some(a) => inner.set(dir, name, Some(Slot::Known(Arc::new(a.clone())))),
            None => inner.set(dir, name, None),
        }
    }

    /// Directory node `ino` was found as `name` in `parent` by a request sent under
    /// `ticket` (of `parent`): it is anchored there if no name of `parent` changed since.
    pub(crate) fn anchor(&self, parent: u64, name: &[u8], ino: u64, ticket: Ticket) {
        let mut inner = self.lock();
        if !inner.names_still(parent, ticket) {
            return;
        }
        let gone = inner.tree.anchor(parent, name, ino);
        let n = inner.drop_dirs(&gone);
        self.counters.dropped.fetch_add(n, Relaxed);
    }

    /// The kernel forgot directory node `ino`: its replica and subtree go.
    pub(crate) fn forget(&self, ino: u64) {
        let mut inner = self.lock();
        if inner.tree.parent(ino).is_some() || inner.dirs.contains_key(&ino) {
            let gone = inner.tree.detach(ino);
            let n = inner.drop_dirs(&gone);
            self.counters.dropped.fetch_add(n, Relaxed);
            for dir in gone {
                inner.changes.remove(&dir);
                inner.left.remove(&dir);
            }
        }
        inner.left.remove(&ino);
    }

    /// Applies a change event (see the module doc), before the kernel's caches are told.
    /// `own(dir, name)`: whether the name was changed through the mount lately; the echo
    /// of such a change, or a later change that left the directory's attributes as the
    /// mount's change left them (the event's stat of the directory says), keeps them.
    pub(crate) fn apply(&self, ev: &Event, own: &dyn Fn(u64, &[u8]) -> bool) {
        let c = &self.counters;
        let mut inner = self.lock();
        let parent_of = |inner: &Inner, p: &RelPath| -> Option<u64> {
            inner.tree.resolve(p.parent()?.components())
        };
        // An event about a directory itself (its mode, its times) changes no ticket of
        // its own: what a change through the mount left of it goes.
        let from = match &ev.kind {
            EventKind::Renamed { from } => Some(from),
            _ => None,
        };
        for path in [Some(&ev.path), from].into_iter().flatten() {
            if let Some(node) = inner.tree.resolve(path.components()) {
                inner.left.remove(&node);
            }
        }
        match &ev.kind {
            EventKind::Sync { .. } | EventKind::Warning { .. } => {}
            EventKind::Rescan { .. } => {
                if ev.path.is_root() {
                    inner.clear(c);
                    return;
                }
                if let Some(dir) = parent_of(&inner, &ev.path) {
                    inner.changed((dir, ev.path.file_name()), None, false, c);
                }
            }
            EventKind::Removed => {
                if let Some(dir) = parent_of(&inner, &ev.path) {
                    let name = ev.path.file_name();
                    let as_left = own(dir, name) && inner.as_left(dir, ev.dir.as_ref());
                    inner.removed(dir, name, as_left, c);
                }
                inner.touch_container(&ev.path);
            }
            EventKind::Created | EventKind::Modified | EventKind::Attrib => {
                if let Some(dir) = parent_of(&inner, &ev.path) {
                    let name = ev.path.file_name();
                    let as_left = !matches!(ev.kind, EventKind::Created)
                        || own(dir, name) && inner.as_left(dir, ev.dir.as_ref());
                    inner.changed((dir, name), ev.attrs.as_ref(), as_left, c);
                }
                if matches!(ev.kind, EventKind::Created) {
                    inner.touch_container(&ev.path);
                }
            }
            EventKind::Renamed { from } => {
                if let Some(dir) = parent_of(&inner, from) {
                    let name = from.file_name();
                    let as_left = own(dir, name) && inner.as_left(dir, ev.from_dir.as_ref());
                    inner.removed(dir, name, as_left, c);
                }
                // Whatever had the name goes, and a directory that comes with its old
                // subtree's knowledge too.
                if let Some(dir) = parent_of(&inner, &ev.path) {
                    let name = ev.path.file_name();
                    let as_left = own(dir, name) && inner.as_left(dir, ev.dir.as_ref());
                    inner.changed((dir, name), None, as_left, c);
                }
                inner.touch_container(from);
                inner.touch_container(&ev.path);
            }
        }
        if let Some(q) = ev.qid {
            let now = ev.attrs.filter(|_| !matches!(ev.kind, EventKind::Removed));
            inner.touch_links(q, now.as_ref());
        }
    }

    /// A file was created through the mount as `name` in `dir`, with attributes `a`;
    /// `left`: what the creation said of the directory, if it said anything.
    pub(crate) fn own_created(&self, dir: u64, name: &[u8], a: &Rgetattr, left: Option<DirLeft>) {
        let mut inner = self.lock();
        let kept = inner.keepable(dir, left);
        inner.detach_child(dir, name, &self.counters);
        if !is_dir(a) {
            // A hard link: the file's other names have a new link count.
            inner.touch_links(a.qid.path, None);
        }
        inner.set(dir, name, Some(Slot::Known(Arc::new(a.clone()))));
        inner.touch_self(dir);
        inner.bump(dir);
        inner.keep_left(dir, kept);
    }

    /// The directory `name` in `parent` (node `ino`), made through the mount, is anchored
    /// (lookups in it may then fill and use its replica), if nothing but that creation
    /// ([`DirReplicas::own_created`], one change) touched `parent` since `before`, taken
    /// before the request was sent: an event about the name meanwhile may have moved it.
    pub(crate) fn own_made_dir(&self, parent: u64, name: &[u8], ino: u64, before: Ticket) {
        let made = Ticket {
            changes: Changes {
                names: before.changes.names + 1,
                ..before.changes
            },
            ..before
        };
        self.anchor(parent, name, ino, made);
    }

    /// `name` in `dir` was removed through the mount; `left`: what the removal said of
    /// the directory, if it said anything.
    pub(crate) fn own_removed(&self, dir: u64, name: &[u8], left: Option<DirLeft>) {
        let mut inner = self.lock();
        let kept = inner.keepable(dir, left);
        inner.removed(dir, name, false, &self.counters);
        inner.keep_left(dir, kept);
    }

    /// The attributes of directory `dir` as the last change through the mount left them,
    /// if nothing changed them since (no change of its names through the mount that did
    /// not say, no event about it or of a name in it but the echo of that change with the
    /// directory as it left it, events followed all the while): what the server
    /// would answer, so a GETATTR (the kernel asks one after every change in a directory,
    /// to check permissions for the next) need not ask.
    pub(crate) fn left_attrs(&self, dir: u64) -> Option<Rgetattr> {
        let mut inner = self.lock();
        let (attrs, ticket) = inner.left.get(&dir)?;
        if inner.names_still(dir, *ticket) {
            return Some(attrs.clone());
        }
        inner.left.remove(&dir);
        None
    }

    /// `name` in `dir` was renamed through the mount to `to_name` in `to_dir`.
    pub(crate) fn own_renamed(
        &self,
        (dir, name): (u64, &[u8]),
        (to_dir, to_name): (u64, &[u8]),
        left: Option<(DirLeft, DirLeft)>,
    ) {
        let mut inner = self.lock();
        let (from_left, to_left) = left.map_or((None, None), |(f, t)| (Some(f), Some(t)));
        let kept = (
            inner.keepable(dir, from_left),
            inner.keepable(to_dir, to_left),
        );
        inner.own_renamed(dir, name, to_dir, to_name, &self.counters);
        inner.keep_left(dir, kept.0);
        inner.keep_left(to_dir, kept.1);
    }
    /// The file with `qid_path` (node `ino`) was changed through the mount: its entries
    /// are unknown until looked up again.
    pub(crate) fn own_changed(&self, ino: u64, qid_path: u64) {
        let mut inner = self.lock();
        // A directory's own attributes changed: what an earlier change left of them goes.
        inner.left.remove(&ino);
        inner.touch_links(qid_path, None);
        if inner.tree.is_anchored(ino) {
            inner.touch_self(ino);
        }
    }

    /// `name` in `dir` did not lead where the replica said: ask the server from now on.
    pub(crate) fn stale(&self, dir: u64, name: &[u8]) {
        let mut inner = self.lock();
        inner.touch(dir, name, None);
        inner.bump(dir);
    }

    /// The counters, for `crossfs stats`.
    pub(crate) fn stats_json(&self) -> Value {
        let c = &self.counters;
        let inner = self.lock();
        json!({
            "limit": self.limit(),
            "following": inner.following,
            "directories": inner.dirs.len(),
            "entries": inner.entries,
            "anchored": inner.tree.len(),
            "hits": c.hits.load(Relaxed),
            "negative_hits": c.negative_hits.load(Relaxed),
            "asked": c.asked.load(Relaxed),
            "fills": c.fills.load(Relaxed),
            "filled_entries": c.filled_entries.load(Relaxed),
            "fills_discarded": c.fills_discarded.load(Relaxed),
            "dropped": c.dropped.load(Relaxed),
            "evicted": c.evicted.load(Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::known::inode::ROOT;

    fn file(ino: u64) -> Rgetattr {
        let mut a = Rgetattr {
            mode: libc::S_IFREG | 0o644,
            ..Rgetattr::default()
        };
        a.qid.path = ino;
        a
    }

    fn names(listing: &[Listed]) -> Vec<&[u8]> {
        listing.iter().map(|l| &l.entry.name[..]).collect()
    }

    fn now() -> Fetched {
        crate::known::listed_attrs::ListedAttrs::default().before_fetch()
    }

    /// Replicas following events, the root's complete with one file "a" (node 10).
    fn root_listing_one_file() -> DirReplicas {
        let r = DirReplicas::new(100);
        r.set_following(true);
        let ticket = r.ticket(ROOT).unwrap();
        let listed = vec![(b"a".to_vec(), file(10), 5)];
        assert!(r.install(ROOT, ticket, listed, true, now()));
        r
    }

    #[test]
    fn opendirs_share_one_listing_with_the_servers_cookies_until_a_name_comes() {
        let r = DirReplicas::new(100);
        r.set_following(true);
        let ticket = r.ticket(ROOT).expect("the root is anchored");
        let dot = |name: &[u8], cookie| (name.to_vec(), Rgetattr::default(), cookie);
        let listed = vec![
            dot(b".", 7),
            dot(b"..", 3),
            (b"b".to_vec(), file(11), 90),
            (b"a".to_vec(), file(10), 12),
        ];
        assert!(r.install(ROOT, ticket, listed, true, now()));

        let (first, _) = r.listing(ROOT).expect("complete");
        assert_eq!(
            names(&first),
            [&b"."[..], b"..", b"b", b"a"],
            "as the server listed them"
        );
        let cookies: Vec<u64> = first.iter().map(|l| l.entry.offset).collect();
        assert_eq!(cookies, [7, 3, 90, 12], "the server's cookies");
        assert!(Arc::ptr_eq(&first, &r.listing(ROOT).unwrap().0), "shared");

        // A removal keeps every other cookie: the listing stays.
        r.own_removed(ROOT, b"b", None);
        assert_eq!(names(&r.listing(ROOT).unwrap().0), [&b"."[..], b"..", b"a"]);
        assert_eq!(names(&first).len(), 4, "an open listing keeps what it had");
        // A new name has no cookie of the server's: listings go to the server.
        r.own_created(ROOT, b"c", &file(12), None);
        assert!(r.listing(ROOT).is_none());
        assert_eq!(r.lookup(ROOT, b"c"), Answer::Found(Arc::new(file(12))));
    }

    #[test]
    fn a_name_too_long_for_the_host_is_not_answered_missing() {
        let r = root_listing_one_file();
        assert_eq!(r.lookup(ROOT, &[b'x'; 255]), Answer::Missing);
        assert_eq!(
            r.lookup(ROOT, &[b'x'; 256]),
            Answer::Ask,
            "ENAMETOOLONG is the server's"
        );
    }

    #[test]
    fn what_a_change_left_of_a_directory_answers_until_anything_touches_it() {
        let r = DirReplicas::new(100);
        r.set_following(true);
        let dir_attrs = |mtime: u64| Rgetattr {
            valid: 0x7ff,
            mode: libc::S_IFDIR | 0o755,
            mtime_sec: mtime,
            ..Rgetattr::default()
        };
        // Kept: nothing but the removal touched the directory.
        let before = r.ticket(ROOT).unwrap();
        let left = DirLeft {
            before,
            attrs: dir_attrs(1),
        };
        r.own_removed(ROOT, b"a", Some(left));
        assert_eq!(r.left_attrs(ROOT).map(|a| a.mtime_sec), Some(1));
        // Any other change in it (here one through the mount that said nothing) ends it.
        r.own_created(ROOT, b"b", &file(11), None);
        assert_eq!(r.left_attrs(ROOT), None);
        // Not kept: something touched the directory while the change was on its way.
        let before = r.ticket(ROOT).unwrap();
        r.own_created(ROOT, b"c", &file(12), None);
        let left = DirLeft {
            before,
            attrs: dir_attrs(2),
        };
        r.own_removed(ROOT, b"c", Some(left));
        assert_eq!(r.left_attrs(ROOT), None);
        // Nor without attributes (`valid` 0: the server could not read them).
        let before = r.ticket(ROOT).unwrap();
        let left = DirLeft {
            before,
            attrs: Rgetattr::default(),
        };
        r.own_removed(ROOT, b"b", Some(left));
        assert_eq!(r.left_attrs(ROOT), None);
        // Losing the events ends all of it.
        let before = r.ticket(ROOT).unwrap();
        let left = DirLeft {
            before,
            attrs: dir_attrs(3),
        };
        r.own_removed(ROOT, b"x", Some(left));
        assert!(r.left_attrs(ROOT).is_some());
        r.set_following(false);
        assert_eq!(r.left_attrs(ROOT), None);
    }

    #[test]
    fn what_a_change_left_of_a_directory_outlives_changes_to_its_files_not_to_its_names() {
        let r = root_listing_one_file();
        let left = |r: &DirReplicas| DirLeft {
            before: r.ticket(ROOT).unwrap(),
            attrs: Rgetattr {
                valid: 0x7ff,
                mode: libc::S_IFDIR | 0o755,
                ..Rgetattr::default()
            },
        };
        r.own_created(ROOT, b"b", &file(11), Some(left(&r)));
        assert!(r.left_attrs(ROOT).is_some());
        let event = |kind: EventKind, name: &str, ino: u64| Event {
            epoch: 1,
            seq: 1,
            kind,
            path: RelPath::new(name).unwrap(),
            qid: Some(ino),
            attrs: None,
            dir: None,
            from_dir: None,
        };
        // A file's attributes and content: the directory's stay.
        r.own_changed(100, 11);
        r.apply(&event(EventKind::Attrib, "a", 10), &|_, _| false);
        r.apply(&event(EventKind::Modified, "b", 11), &|_, _| false);
        assert!(r.left_attrs(ROOT).is_some());
        assert_eq!(r.lookup(ROOT, b"a"), Answer::Ask, "the file's entry goes");
        // The directory's own change: they go.
        r.own_changed(ROOT, 1);
        assert_eq!(r.left_attrs(ROOT), None);
        // A name: they go.
        r.own_removed(ROOT, b"x", Some(left(&r)));
        assert!(r.left_attrs(ROOT).is_some());
        r.apply(&event(EventKind::Created, "c", 12), &|_, _| false);
        assert_eq!(r.left_attrs(ROOT), None);
    }

    #[test]
    fn the_echo_of_the_mounts_own_change_keeps_what_it_left_only_if_the_directory_is_so() {
        let r = DirReplicas::new(100);
        r.set_following(true);
        let ticket = r.ticket(ROOT).unwrap();
        assert!(r.install(ROOT, ticket, vec![], true, now()));
        let attrs = |mtime: u64| Rgetattr {
            valid: 0x7ff,
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
            size: 4096,
            mtime_sec: mtime,
            ctime_sec: mtime,
            ..Rgetattr::default()
        };
        let stat = |mtime: i64| DirAttrs {
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
            size: 4096,
            mtime_ns: mtime * 1_000_000_000,
            ctime_ns: mtime * 1_000_000_000,
            ..DirAttrs::default()
        };
        let created = |name: &str, dir: DirAttrs| Event {
            epoch: 1,
            seq: 1,
            kind: EventKind::Created,
            path: RelPath::new(name).unwrap(),
            qid: Some(20),
            attrs: None,
            dir: Some(dir),
            from_dir: None,
        };
        let make = |r: &DirReplicas, name: &[u8], mtime: u64| {
            let left = DirLeft {
                before: r.ticket(ROOT).unwrap(),
                attrs: attrs(mtime),
            };
            r.own_created(ROOT, name, &file(20), Some(left));
        };
        let own = |_: u64, name: &[u8]| name == b"mine";
        make(&r, b"mine", 5);
        // Its echo, the directory as the creation left it: kept.
        r.apply(&created("mine", stat(5)), &own);
        assert_eq!(r.left_attrs(ROOT).map(|a| a.mtime_sec), Some(5));
        // The echo, but the directory changed since (its stat says): gone.
        r.apply(&created("mine", stat(6)), &own);
        assert_eq!(r.left_attrs(ROOT), None);
        // The host's creation, whatever the stat says: gone.
        make(&r, b"mine", 7);
        r.apply(&created("theirs", stat(7)), &own);
        assert_eq!(r.left_attrs(ROOT), None);
        // An event without the directory's stat (an older server): gone.
        make(&r, b"mine", 8);
        let mut old = created("mine", stat(8));
        old.dir = None;
        r.apply(&old, &own);
        assert_eq!(r.left_attrs(ROOT), None);
    }
}
