//! A replica's state kept exact: setting and removing entries, the tickets that tell a
//! fetch whether anything touched its directory since, and the bound on memory (the least
//! recently used replicas go first). The rules here are the module doc's (`replica/mod.rs`);
//! nothing here sends or answers anything.

use std::sync::atomic::Ordering::Relaxed;

use crossfs_events::{Attrs, DirAttrs, RelPath};
use crossfs_wire::Rgetattr;

use super::*;

pub(super) fn same_as_event(a: &Rgetattr, e: &Attrs) -> bool {
    let ns = |s: u64, n: u64| (s as i64).saturating_mul(1_000_000_000) + n as i64;
    a.qid.path == e.ino
        && a.mode == e.mode
        && a.size == e.size
        && ns(a.mtime_sec, a.mtime_nsec) == e.mtime_ns
        && ns(a.ctime_sec, a.ctime_nsec) == e.ctime_ns
}

/// Whether `a` shows every attribute a directory's stat `d` gives (what a GETATTR tells the
/// kernel but the access time, which no event follows).
pub(super) fn same_dir_attrs(a: &Rgetattr, d: &DirAttrs) -> bool {
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

pub(super) fn is_dot_name(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

pub(super) fn is_dir(a: &Rgetattr) -> bool {
    a.mode & libc::S_IFMT == libc::S_IFDIR
}

impl Inner {
    pub(super) fn bump(&mut self, dir: u64) {
        let c = self.changes.entry(dir).or_default();
        c.names += 1;
        c.entries += 1;
    }

    /// As [`Self::bump`], for a change to an entry of `dir` that leaves its names and the
    /// directory's own attributes as they were (a file's attributes or link count, a
    /// subdirectory's times): what a change through the mount left of the directory's
    /// attributes stays good, and so do anchors found meanwhile.
    pub(super) fn bump_entry(&mut self, dir: u64) {
        self.changes.entry(dir).or_default().entries += 1;
    }

    pub(super) fn ticket(&self, dir: u64) -> Ticket {
        Ticket {
            epoch: self.epoch,
            changes: self.changes.get(&dir).copied().unwrap_or_default(),
        }
    }

    /// Whether nothing touched `dir` since `t` (nor anything that counts for every
    /// directory), while events were followed.
    pub(super) fn still(&self, dir: u64, t: Ticket) -> bool {
        self.names_still(dir, t)
            && t.changes.entries == self.changes.get(&dir).map_or(0, |c| c.entries)
    }

    /// Whether no event about a name in a subdirectory of `dir` that was not anchored came
    /// since `t` (see [`Self::touch_container`]).
    pub(super) fn nothing_unplaced_since(&self, dir: u64, t: Ticket) -> bool {
        t.changes.unplaced == self.changes.get(&dir).map_or(0, |c| c.unplaced)
    }

    /// As [`Self::still`], for `dir`'s names and own attributes only.
    pub(super) fn names_still(&self, dir: u64, t: Ticket) -> bool {
        self.following
            && self.tree.is_anchored(dir)
            && t.epoch == self.epoch
            && t.changes.names == self.changes.get(&dir).map_or(0, |c| c.names)
    }

    pub(super) fn unindex(&mut self, dir: u64, name: &[u8], slot: &Slot) {
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
    pub(super) fn set(&mut self, dir: u64, name: &[u8], slot: Option<Slot>) {
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

    /// Whether `dir`'s replica has an entry for `name`, known or not.
    pub(super) fn shows(&self, dir: u64, name: &[u8]) -> bool {
        self.dirs
            .get(&dir)
            .is_some_and(|r| r.slots.contains_key(name))
    }

    /// An event or a change says `name` in `dir` may now be other than the replica says.
    pub(super) fn touch(&mut self, dir: u64, name: &[u8], now: Option<&Attrs>) {
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
    /// path, so it holds whether the directory itself is anchored or not. Not where the
    /// replica shows no such directory and it was removed through the mount lately
    /// (`recent`): the event is older than that removal (one made in a directory a host
    /// program made again under the name follows the event of its creation, which the
    /// replica shows), and would only make a name the replica knows gone "ask the server".
    pub(super) fn touch_container(&mut self, path: &RelPath, recent: &dyn Fn(u64, &[u8]) -> bool) {
        let Some(dir) = path.parent().filter(|d| !d.is_root()) else {
            return;
        };
        let grandparent = dir.parent().and_then(|g| self.tree.resolve(g.components()));
        if let Some(g) = grandparent {
            if !self.shows(g, dir.file_name()) && recent(g, dir.file_name()) {
                return;
            }
            self.touch(g, dir.file_name(), None);
            self.bump_entry(g);
            // An event about a name in a directory made a moment ago, before the mount
            // anchored it: the new directory is not empty as far as the mount knows. (In
            // one it placed, the event updates its replica, if it has one.)
            if self.tree.child(g, dir.file_name()).is_none() {
                self.changes.entry(g).or_default().unplaced += 1;
            }
        }
    }

    /// An empty, complete replica for directory node `ino` (one the mount made).
    pub(super) fn insert_empty(&mut self, ino: u64, filled: Fetched) {
        self.clock += 1;
        let used = self.clock;
        self.dirs.insert(
            ino,
            Replica {
                slots: HashMap::new(),
                unknown: 0,
                complete: true,
                used,
                listing: None,
                // No cookies of the server's: its listings are still asked for.
                order: Vec::new(),
                cookied: false,
                filled,
            },
        );
    }

    /// Anchors directory node `ino` as `name` in `parent`, found under `ticket` (of
    /// `parent`), if no name of `parent` changed since; returns whether it did.
    pub(super) fn anchor_if(
        &mut self,
        (parent, name): (u64, &[u8]),
        ino: u64,
        ticket: Ticket,
        counters: &Counters,
    ) -> bool {
        if !self.names_still(parent, ticket) {
            return false;
        }
        let gone = self.tree.anchor(parent, name, ino);
        let n = self.drop_dirs(&gone);
        counters.dropped.fetch_add(n, Relaxed);
        true
    }

    /// The directory's own entry in its parent's replica: its times changed.
    pub(super) fn touch_self(&mut self, dir: u64) {
        if let Some((parent, name)) = self.tree.parent(dir) {
            let name = name.to_vec();
            self.touch(parent, &name, None);
            self.bump_entry(parent);
        }
    }

    /// Every other name of the file with `qid_path`: its link count or attributes changed.
    pub(super) fn touch_links(&mut self, qid_path: u64, now: Option<&Attrs>) {
        for (dir, name) in self.by_qid.get(&qid_path).cloned().unwrap_or_default() {
            self.touch(dir, &name, now);
            self.bump_entry(dir);
        }
    }

    /// Drops the replicas of `dirs`; returns how many there were. (A fill in flight for
    /// one of them is refused by what made it go: a detach, an event's count, an epoch.)
    pub(super) fn drop_dirs(&mut self, dirs: &[u64]) -> u64 {
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
    pub(super) fn detach_child(&mut self, dir: u64, name: &[u8], counters: &Counters) {
        if let Some(child) = self.tree.child(dir, name) {
            let gone = self.tree.detach(child);
            let n = self.drop_dirs(&gone);
            counters.dropped.fetch_add(n, Relaxed);
        }
    }

    /// `name` in `dir` is gone; a directory of that name goes with its subtree.
    /// `dir_as_left`: the directory is known to be as what a change through the mount left
    /// of it says (see [`Inner::as_left`]).
    pub(super) fn removed(
        &mut self,
        dir: u64,
        name: &[u8],
        dir_as_left: bool,
        counters: &Counters,
    ) {
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
    pub(super) fn as_left(&self, dir: u64, now: Option<&DirAttrs>) -> bool {
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
    pub(super) fn changed(
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
    pub(super) fn own_renamed(
        &mut self,
        dir: u64,
        name: &[u8],
        to_dir: u64,
        to_name: &[u8],
        c: &Counters,
    ) {
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

    pub(super) fn clear(&mut self, counters: &Counters) {
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
    pub(super) fn keepable(&self, dir: u64, left: Option<DirLeft>) -> Option<Rgetattr> {
        left.filter(|l| l.attrs.valid != 0 && self.names_still(dir, l.before))
            .map(|l| l.attrs)
    }

    /// Keeps `attrs` as `dir`'s, good until the next change of its names or attributes
    /// (once the change they came with has been applied).
    pub(super) fn keep_left(&mut self, dir: u64, attrs: Option<Rgetattr>) {
        if let Some(attrs) = attrs {
            let ticket = self.ticket(dir);
            self.left.insert(dir, (attrs, ticket));
        }
    }

    /// Drops least recently used replicas until `room` more entries fit under `limit`.
    pub(super) fn make_room(&mut self, room: usize, limit: usize, counters: &Counters) {
        while self.entries + room > limit {
            let Some((&oldest, _)) = self.dirs.iter().min_by_key(|(_, r)| r.used) else {
                break;
            };
            let n = self.drop_dirs(&[oldest]);
            counters.evicted.fetch_add(n, Relaxed);
        }
    }
}
