//! Coalescing: raw changes gathered per path until the path has been quiet for `quiet`
//! (20 ms) or pending for `max_delay` (200 ms), whichever comes first.
//!
//! The first change after a quiet period (nothing pushed for `quiet`) is due after only
//! `settle` (0.5 ms; `HubConfig::first_at_once`): a single change, the common case for an
//! editor's save seen by a guest's watcher, is not held for a window that has nothing to
//! merge it with. The engine reads the kernel queue once more before it flushes such a
//! change, so that one program's create, write and close still make one event. Only what
//! follows within the window is coalesced as before (a burst pays one early flush).
//!
//! The coalescer only merges *hints* (created / removed / modified / attrib); the engine turns
//! a flushed path into at most one event by comparing what subscribers were last told (the
//! snapshot) with what is on disk now. That comparison realises the rules:
//! - created + modified → `Created` (with the final attributes);
//! - created + removed → `Removed` without attributes, even if the create was never
//!   published: a subscriber may have seen the file meanwhile (looked it up on the server,
//!   or made it itself). If the create was published by an earlier flush, the snapshot has
//!   the path and the removal carries its attributes.
//! - created + renamed → `Removed` of the source (once: the engine remembers that it said
//!   so when the rename comes) and `Created` of the destination;
//! - modified × N → one `Modified`;
//! - a rename keeps its source and destination: it is an entry of its own, and changes to either
//!   name after it start new entries behind it, so they are applied in the order they happened.
//!   A rename is also a barrier: nothing queued behind it is flushed before it.
//!
//! More than `limit` pending entries is a burst: everything pending collapses into one rescan
//! of the deepest directory containing all of it, which absorbs further changes until it is
//! flushed. A kernel queue overflow collapses the same way, to a rescan of the root.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::path::RelPath;

/// What the kernel (or a 9P handler) said happened to a path, merged over the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hints(u8);

impl Hints {
    pub(crate) const CREATED: Hints = Hints(1);
    pub(crate) const REMOVED: Hints = Hints(2);
    pub(crate) const MODIFIED: Hints = Hints(4);
    pub(crate) const ATTRIB: Hints = Hints(8);

    pub(crate) fn contains(self, other: Hints) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether the kernel told the name made or removed (not only a change of what it
    /// names).
    pub(crate) fn names(self) -> bool {
        self.0 & (Hints::CREATED.0 | Hints::REMOVED.0) != 0
    }
}

impl std::ops::BitOr for Hints {
    type Output = Hints;
    fn bitor(self, rhs: Hints) -> Hints {
        Hints(self.0 | rhs.0)
    }
}

/// What a flush hands the engine, in the order to apply it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Compare `path` with the snapshot and publish the difference.
    Path { path: RelPath, hints: Hints },
    /// `from` was renamed to `to`.
    Rename { from: RelPath, to: RelPath },
    /// Re-read the subtree. `announce`: publish one `Rescan` event (a burst) rather than the
    /// differences (a kernel overflow, where the differences are the honest answer).
    Rescan {
        path: RelPath,
        reason: String,
        announce: bool,
    },
}

#[derive(Debug)]
enum Item {
    Path { path: RelPath, hints: Hints },
    Rename { from: RelPath, to: RelPath },
}

#[derive(Debug)]
struct Entry {
    item: Item,
    first: Instant,
    last: Instant,
    /// The first change after a quiet period: due `settle` after it came.
    leading: bool,
}

#[derive(Debug)]
struct Collapsed {
    path: RelPath,
    reason: String,
    announce: bool,
    first: Instant,
    last: Instant,
}

/// Timing and bounds of coalescing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub(crate) quiet: Duration,
    /// How long the first change after a quiet period waits for what comes with it
    /// (`None`: it waits for the quiet window like any other).
    pub(crate) settle: Option<Duration>,
    pub(crate) max_delay: Duration,
    pub(crate) limit: usize,
}

/// Pending changes, per path, in arrival order.
#[derive(Debug)]
pub(crate) struct Coalescer {
    window: Window,
    next_id: u64,
    entries: BTreeMap<u64, Entry>,
    index: HashMap<RelPath, u64>,
    collapsed: Option<Collapsed>,
    /// When the last change was pushed (`None`: never), to tell a quiet period's end.
    last_push: Option<Instant>,
}

fn dir_of(path: &RelPath) -> RelPath {
    path.parent().unwrap_or_default()
}

impl Coalescer {
    pub(crate) fn new(window: Window) -> Self {
        Self {
            window,
            next_id: 0,
            entries: BTreeMap::new(),
            index: HashMap::new(),
            collapsed: None,
            last_push: None,
        }
    }

    /// Number of pending entries (a collapsed rescan counts as one).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len() + usize::from(self.collapsed.is_some())
    }

    fn widen(&mut self, path: &RelPath, now: Instant) -> bool {
        match &mut self.collapsed {
            Some(c) => {
                if !path.is_within(&c.path) {
                    c.path = c.path.common_ancestor(&dir_of(path));
                }
                c.last = now;
                true
            }
            None => false,
        }
    }

    /// Whether a change pushed at `now` ends a quiet period (and records the push).
    fn ends_quiet(&mut self, now: Instant) -> bool {
        let quiet = self.window.settle.is_some()
            && self.entries.is_empty()
            && self.collapsed.is_none()
            && self
                .last_push
                .is_none_or(|t| now.saturating_duration_since(t) >= self.window.quiet);
        self.last_push = Some(now);
        quiet
    }

    /// Records `hints` for `path`.
    pub(crate) fn push(&mut self, path: RelPath, hints: Hints, now: Instant) {
        let leading = self.ends_quiet(now);
        if self.widen(&path, now) {
            return;
        }
        if let Some(e) = self
            .index
            .get(&path)
            .and_then(|id| self.entries.get_mut(id))
        {
            if let Item::Path { hints: h, .. } = &mut e.item {
                *h = *h | hints;
                e.last = now;
                return;
            }
        }
        let id = self.add(
            Item::Path {
                path: path.clone(),
                hints,
            },
            now,
            leading,
        );
        self.index.insert(path, id);
        self.check_limit(now);
    }

    /// Records a rename.
    pub(crate) fn push_rename(&mut self, from: RelPath, to: RelPath, now: Instant) {
        let leading = self.ends_quiet(now);
        if self.widen(&from, now) {
            self.widen(&to, now);
            return;
        }
        // Later changes to either name happened after the rename: they get new entries.
        self.index.remove(&from);
        self.index.remove(&to);
        self.add(Item::Rename { from, to }, now, leading);
        self.check_limit(now);
    }

    /// Replaces everything pending with one rescan covering it and `path`.
    pub(crate) fn collapse(&mut self, path: RelPath, reason: &str, announce: bool, now: Instant) {
        let mut common = path;
        for e in self.entries.values() {
            match &e.item {
                Item::Path { path, .. } => common = common.common_ancestor(&dir_of(path)),
                Item::Rename { from, to } => {
                    common = common.common_ancestor(&dir_of(from));
                    common = common.common_ancestor(&dir_of(to));
                }
            }
        }
        let first = self.entries.values().map(|e| e.first).min().unwrap_or(now);
        self.entries.clear();
        self.index.clear();
        match &mut self.collapsed {
            Some(c) => {
                c.path = c.path.common_ancestor(&common);
                c.announce |= announce;
                c.last = now;
            }
            None => {
                self.collapsed = Some(Collapsed {
                    path: common,
                    reason: reason.to_owned(),
                    announce,
                    first,
                    last: now,
                });
            }
        }
    }

    fn add(&mut self, item: Item, now: Instant, leading: bool) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.entries.insert(
            id,
            Entry {
                item,
                first: now,
                last: now,
                leading,
            },
        );
        id
    }

    fn check_limit(&mut self, now: Instant) {
        if self.entries.len() > self.window.limit {
            let deepest = match self.entries.values().next().map(|e| &e.item) {
                Some(Item::Path { path, .. }) => dir_of(path),
                Some(Item::Rename { from, .. }) => dir_of(from),
                None => RelPath::root(),
            };
            self.collapse(deepest, "burst", true, now);
        }
    }

    fn due_at(&self, first: Instant, last: Instant) -> Instant {
        (last + self.window.quiet).min(first + self.window.max_delay)
    }

    fn entry_due_at(&self, e: &Entry) -> Instant {
        match self.window.settle {
            Some(settle) if e.leading => e.first + settle,
            _ => self.due_at(e.first, e.last),
        }
    }

    /// Whether a quiet period's first change is due at `now`.
    pub(crate) fn first_change_due(&self, now: Instant) -> bool {
        self.entries
            .values()
            .any(|e| e.leading && self.entry_due_at(e) <= now)
    }

    /// When the next entry becomes due, if anything is pending.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let c = self
            .collapsed
            .as_ref()
            .map(|c| self.due_at(c.first, c.last));
        let e = self.entries.values().map(|e| self.entry_due_at(e)).min();
        match (c, e) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes what is due at `now` (everything, if `force`), in application order.
    pub(crate) fn take_due(&mut self, now: Instant, force: bool) -> Vec<Flushed> {
        let mut out = Vec::new();
        if let Some(c) = &self.collapsed {
            if force || self.due_at(c.first, c.last) <= now {
                let c = self.collapsed.take().unwrap_or_else(|| unreachable!());
                out.push(Flushed::Rescan {
                    path: c.path,
                    reason: c.reason,
                    announce: c.announce,
                });
            }
        }
        // A rename goes only once everything queued before it has gone, and nothing queued
        // after it goes before it.
        let mut taken = Vec::new();
        let mut held_back = false;
        for (&id, e) in &self.entries {
            let due = force || self.entry_due_at(e) <= now;
            match &e.item {
                Item::Path { .. } if due => taken.push(id),
                Item::Path { .. } => held_back = true,
                Item::Rename { .. } if due && !held_back => taken.push(id),
                Item::Rename { .. } => break,
            }
        }
        for id in taken {
            let Some(e) = self.entries.remove(&id) else {
                continue;
            };
            out.push(match e.item {
                Item::Path { path, hints } => {
                    if self.index.get(&path) == Some(&id) {
                        self.index.remove(&path);
                    }
                    Flushed::Path { path, hints }
                }
                Item::Rename { from, to } => Flushed::Rename { from, to },
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    fn window(limit: usize) -> Window {
        Window {
            quiet: Duration::from_millis(20),
            settle: Some(Duration::from_millis(3)),
            max_delay: Duration::from_millis(200),
            limit,
        }
    }

    /// A coalescer in the middle of a busy period (a change was pushed at `t0`), so that
    /// the next change is not the first after a quiet one.
    fn busy(limit: usize, t0: Instant) -> Coalescer {
        let mut c = Coalescer::new(window(limit));
        c.last_push = Some(t0);
        c
    }

    #[test]
    fn the_first_change_after_a_quiet_period_waits_only_to_settle() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = Coalescer::new(window(100));
        c.push(p("a"), Hints::CREATED, ms(0));
        assert_eq!(c.next_deadline(), Some(ms(3)));
        // The write that came with the create joins it.
        c.push(p("a"), Hints::MODIFIED, ms(2));
        assert!(c.take_due(ms(2), false).is_empty());
        assert_eq!(
            c.take_due(ms(3), false),
            vec![Flushed::Path {
                path: p("a"),
                hints: Hints::CREATED | Hints::MODIFIED
            }]
        );
        // What follows within the window is coalesced as before.
        c.push(p("a"), Hints::MODIFIED, ms(4));
        c.push(p("a"), Hints::MODIFIED, ms(8));
        assert!(c.take_due(ms(27), false).is_empty());
        assert_eq!(c.take_due(ms(28), false).len(), 1);
        // Quiet again for a whole window: the next change goes after the settle.
        c.push(p("b"), Hints::REMOVED, ms(48));
        assert_eq!(c.take_due(ms(51), false).len(), 1);
        // A rename after a quiet period too.
        c.push_rename(p("b"), p("c"), ms(100));
        assert_eq!(
            c.take_due(ms(103), false),
            vec![Flushed::Rename {
                from: p("b"),
                to: p("c")
            }]
        );
    }

    #[test]
    fn a_change_while_others_are_pending_waits_for_the_window() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = Coalescer::new(window(100));
        c.push(p("a"), Hints::MODIFIED, ms(0));
        // Quiet for longer than the window, but `a` has not been taken yet: `b` joins the
        // pending changes rather than starting a quiet period's first.
        c.push(p("b"), Hints::MODIFIED, ms(30));
        assert_eq!(c.take_due(ms(30), false).len(), 1, "a is due");
        assert!(c.take_due(ms(49), false).is_empty());
        assert_eq!(c.take_due(ms(50), false).len(), 1);
    }

    #[test]
    fn writes_merge_until_quiet() {
        let t0 = Instant::now();
        let mut c = busy(100, t0);
        for i in 0..10 {
            c.push(p("f"), Hints::MODIFIED, t0 + Duration::from_millis(i));
        }
        c.push(p("f"), Hints::ATTRIB, t0 + Duration::from_millis(10));
        assert!(c.take_due(t0 + Duration::from_millis(25), false).is_empty());
        assert_eq!(c.next_deadline(), Some(t0 + Duration::from_millis(30)));
        let out = c.take_due(t0 + Duration::from_millis(30), false);
        assert_eq!(
            out,
            vec![Flushed::Path {
                path: p("f"),
                hints: Hints::MODIFIED | Hints::ATTRIB
            }]
        );
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_hot_path_is_flushed_by_the_max_delay() {
        let t0 = Instant::now();
        let mut c = busy(100, t0);
        for i in 0..=300 {
            c.push(p("hot"), Hints::MODIFIED, t0 + Duration::from_millis(i));
            let out = c.take_due(t0 + Duration::from_millis(i), false);
            if !out.is_empty() {
                assert_eq!(i, 200);
                return;
            }
        }
        panic!("never flushed");
    }

    #[test]
    fn rename_is_ordered_and_a_barrier() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = busy(100, t0);
        c.push(p("b"), Hints::MODIFIED, ms(0));
        c.push_rename(p("a"), p("b"), ms(1));
        c.push(p("b"), Hints::MODIFIED, ms(2));
        c.push(p("x"), Hints::CREATED, ms(2));
        // b's first entry is due; the rename is not yet, so b's second entry and x wait.
        c.push(p("b"), Hints::MODIFIED, ms(15));
        let out = c.take_due(ms(20), false);
        assert_eq!(out.len(), 1);
        let out = c.take_due(ms(40), false);
        assert_eq!(
            out,
            vec![
                Flushed::Rename {
                    from: p("a"),
                    to: p("b")
                },
                Flushed::Path {
                    path: p("b"),
                    hints: Hints::MODIFIED
                },
                Flushed::Path {
                    path: p("x"),
                    hints: Hints::CREATED
                },
            ]
        );
    }

    #[test]
    fn burst_collapses_to_deepest_common_directory() {
        let t0 = Instant::now();
        let mut c = busy(4, t0);
        for i in 0..6 {
            c.push(p(&format!("src/gen/f{i}")), Hints::CREATED, t0);
        }
        c.push(p("src/gen/sub/g"), Hints::CREATED, t0);
        assert_eq!(c.len(), 1);
        c.push(p("src/other/h"), Hints::CREATED, t0);
        let out = c.take_due(t0, true);
        assert_eq!(
            out,
            vec![Flushed::Rescan {
                path: p("src"),
                reason: "burst".into(),
                announce: true
            }]
        );
    }
}
