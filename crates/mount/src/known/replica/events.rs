//! A replica's event handling: a change event from the server, or the mount's own change
//! (the answer to a request that made, removed, renamed or changed a file), applied to the
//! replicas before the kernel's caches are told (see the module doc for which keep what).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crossfs_events::{Event, EventKind, RelPath};
use crossfs_wire::Rgetattr;
use serde_json::{json, Value};

use super::*;

impl DirReplicas {
    /// Applies a change event (see the module doc), before the kernel's caches are told.
    /// `recent(dir, name)`: whether the name was changed through the mount lately; `echo`:
    /// whether the event is the echo of such a change. An echo, or a later change that
    /// left the directory's attributes as the mount's change left them (the event's stat
    /// of the directory says), keeps them.
    ///
    /// The removal of a name changed through the mount lately may be older than that
    /// change (the mount learns of its own change from the answer, before the events of
    /// changes made just before it), whatever the feed took it for: a name the replica
    /// shows is made unknown, asked of the server, rather than missing. Taken as missing,
    /// a directory renamed over the name a moment before was answered ENOENT (issue 24,
    /// the rename race).
    pub(crate) fn apply(&self, ev: &Event, echo: bool, recent: &dyn Fn(u64, &[u8]) -> bool) {
        let c = &self.counters;
        let own = |dir, name: &[u8]| echo && recent(dir, name);
        let removed = |inner: &mut Inner, dir, name: &[u8], as_left| {
            if recent(dir, name) && inner.shows(dir, name) {
                inner.changed((dir, name), None, as_left, c);
            } else {
                inner.removed(dir, name, as_left, c);
            }
        };
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
                    removed(&mut inner, dir, name, as_left);
                }
                inner.touch_container(&ev.path, recent);
            }
            EventKind::Created | EventKind::Modified | EventKind::Attrib => {
                if let Some(dir) = parent_of(&inner, &ev.path) {
                    let name = ev.path.file_name();
                    let as_left = !matches!(ev.kind, EventKind::Created)
                        || own(dir, name) && inner.as_left(dir, ev.dir.as_ref());
                    inner.changed((dir, name), ev.attrs.as_ref(), as_left, c);
                }
                if matches!(ev.kind, EventKind::Created) {
                    inner.touch_container(&ev.path, recent);
                }
            }
            EventKind::Renamed { from } => {
                if let Some(dir) = parent_of(&inner, from) {
                    let name = from.file_name();
                    let as_left = own(dir, name) && inner.as_left(dir, ev.from_dir.as_ref());
                    removed(&mut inner, dir, name, as_left);
                }
                // Whatever had the name goes, and a directory that comes with its old
                // subtree's knowledge too.
                if let Some(dir) = parent_of(&inner, &ev.path) {
                    let name = ev.path.file_name();
                    let as_left = own(dir, name) && inner.as_left(dir, ev.dir.as_ref());
                    inner.changed((dir, name), None, as_left, c);
                }
                inner.touch_container(from, recent);
                inner.touch_container(&ev.path, recent);
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
    /// If no event about a name in a subdirectory of `parent` the mount had not placed came
    /// either, nothing was made in the new directory as far as the mount can know, and
    /// it gets an empty replica (`filled`: taken before the request), complete: the
    /// lookups and creates that follow a mkdir need not list it first. Whatever the
    /// host makes in it from now on comes as events, applied to that replica.
    pub(crate) fn own_made_dir(
        &self,
        (parent, name): (u64, &[u8]),
        ino: u64,
        before: Ticket,
        filled: Fetched,
    ) {
        // `own_created` bumped both counts once.
        let made = Ticket {
            changes: Changes {
                names: before.changes.names + 1,
                entries: before.changes.entries + 1,
                ..before.changes
            },
            ..before
        };
        let mut inner = self.lock();
        if !inner.anchor_if((parent, name), ino, made, &self.counters)
            || !inner.nothing_unplaced_since(parent, made)
            || inner.dirs.contains_key(&ino)
        {
            return;
        }
        inner.insert_empty(ino, filled);
        self.counters.made_empty.fetch_add(1, Relaxed);
    }

    /// The directory `name` in `parent` (node `ino`), made behind (`fs/create_behind.rs`),
    /// is anchored with an empty, complete replica (`filled`: taken before the mkdir was
    /// sent): the server has not made it yet, so nothing can be in it but what the guest
    /// puts there, sent after the mkdir, and what the host puts there once it is made,
    /// which comes as events, applied to that replica. Only in an anchored `parent`,
    /// whose replica the mkdir was checked against.
    pub(crate) fn own_made_dir_behind(
        &self,
        (parent, name): (u64, &[u8]),
        ino: u64,
        filled: Fetched,
    ) {
        let mut inner = self.lock();
        if !inner.tree.is_anchored(parent) || inner.dirs.contains_key(&ino) {
            return;
        }
        let gone = inner.tree.anchor(parent, name, ino);
        let n = inner.drop_dirs(&gone);
        self.counters.dropped.fetch_add(n, Relaxed);
        inner.insert_empty(ino, filled);
        self.counters.made_empty.fetch_add(1, Relaxed);
    }

    /// `name` in `dir` was removed through the mount; `file`: the `qid.path` of the file it
    /// named, as the mount knew it (the replica may not: its other names have one link
    /// less); `left`: what the removal said of the directory, if it said anything.
    pub(crate) fn own_removed(
        &self,
        dir: u64,
        name: &[u8],
        file: Option<u64>,
        left: Option<DirLeft>,
    ) {
        let mut inner = self.lock();
        let kept = inner.keepable(dir, left);
        inner.removed(dir, name, false, &self.counters);
        if let Some(q) = file {
            inner.touch_links(q, None);
        }
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

    /// `name` in `dir` was renamed through the mount to `to_name` in `to_dir`; `files`: the
    /// `qid.path` of the file moved and of the file replaced, as the mount knew them (the
    /// replica may not: their other names changed, a change time and a link count).
    pub(crate) fn own_renamed(
        &self,
        (dir, name): (u64, &[u8]),
        (to_dir, to_name): (u64, &[u8]),
        files: (Option<u64>, Option<u64>),
        left: Option<(DirLeft, DirLeft)>,
    ) {
        let mut inner = self.lock();
        let (from_left, to_left) = left.map_or((None, None), |(f, t)| (Some(f), Some(t)));
        let kept = (
            inner.keepable(dir, from_left),
            inner.keepable(to_dir, to_left),
        );
        inner.own_renamed(dir, name, to_dir, to_name, &self.counters);
        for q in [files.0, files.1].into_iter().flatten() {
            inner.touch_links(q, None);
        }
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

    /// The file created behind as `name` in `dir`, shown meanwhile with attributes whose
    /// `qid.path` was `unmade`, was made by the server with attributes `made`: the entry
    /// takes them, unless something changed it since (then it is asked of the server).
    pub(crate) fn own_made(&self, dir: u64, name: &[u8], unmade: u64, made: &Rgetattr) {
        let mut inner = self.lock();
        let shown = match inner.dirs.get(&dir).and_then(|r| r.slots.get(name)) {
            Some(Slot::Known(a)) => a.qid.path == unmade,
            _ => false,
        };
        if shown {
            inner.set(dir, name, Some(Slot::Known(Arc::new(made.clone()))));
        }
    }

    /// The attributes a create sent behind left directory `dir` with, answered now: kept
    /// for its next GETATTR (see [`DirReplicas::left_attrs`]) if no name in it changed
    /// since `after`, taken as the mount showed the created name.
    pub(crate) fn own_left_behind(&self, dir: u64, after: Ticket, attrs: &Rgetattr) {
        let mut inner = self.lock();
        if attrs.valid != 0 && inner.names_still(dir, after) {
            inner.keep_left(dir, Some(attrs.clone()));
        }
    }

    /// `name` in `dir` did not lead where the replica said: ask the server from now on.
    pub(crate) fn stale(&self, dir: u64, name: &[u8]) {
        let mut inner = self.lock();
        // Nor may a lookup of the name answer with what a change left of the directory
        // the name led to (`DirReplicas::subdir`).
        if let Some(child) = inner.tree.child(dir, name) {
            inner.left.remove(&child);
        }
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
            "made_empty": c.made_empty.load(Relaxed),
            "evicted": c.evicted.load(Relaxed),
        })
    }
}
