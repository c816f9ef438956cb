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
//!   count changes of names apart from changes of entries. Those attributes (or, with
//!   `--changes behind`, the prediction) also answer a lookup of the directory by name
//!   while its entry in its parent is unknown for that change (`DirReplicas::subdir`):
//!   `mkdir -p` before each file, as npm does, asks nothing. A directory made through the
//!   mount gets an empty, complete replica when no event about a name in a directory of its
//!   parent that the mount had not placed came since the mkdir was sent (`own_made_dir`):
//!   nothing can be in it that no event will bring.
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
//!
//! Layout: this file is the face the mount asks (lookups, listings, filling, tickets);
//! `state.rs` keeps the state exact (entries, tickets, the memory bound); `events.rs`
//! applies change events and the mount's own changes; `tree.rs` places directories by
//! path; `listing.rs` is a directory's entries as the kernel lists them.

mod events;
mod listing;
mod state;
mod tree;

pub(crate) use listing::{listing_snapshot, Listed};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use crossfs_wire::Rgetattr;

use state::{is_dir, is_dot_name};
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
    /// Events about names in a subdirectory of it the mount has not placed (one made a
    /// moment ago, not anchored yet): see [`DirReplicas::own_made_dir`].
    unplaced: u64,
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
    /// Empty replicas of directories made through the mount (`own_made_dir`).
    made_empty: AtomicU64,
}

/// The mount's directory replicas (see the module doc).
pub(crate) struct DirReplicas {
    inner: Mutex<Inner>,
    limit: AtomicUsize,
    counters: Counters,
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

    /// The node of the directory `name` in `dir`, where the mount follows it there
    /// (anchored): its entry in `dir` says "ask" once a change in it moved its times, but
    /// what the mount knows of the directory itself (its GETATTR's answer, such as
    /// [`DirReplicas::left_attrs`]) may then answer a lookup of the name as well.
    pub(crate) fn subdir(&self, dir: u64, name: &[u8]) -> Option<u64> {
        self.lock().tree.child(dir, name)
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
        self.lock()
            .anchor_if((parent, name), ino, ticket, &self.counters);
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
}

#[cfg(test)]
mod tests;
