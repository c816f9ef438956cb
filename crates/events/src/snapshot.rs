//! Snapshots of a subtree (path → attributes) and the differences between two of them.
//!
//! The engine keeps one snapshot of the whole export: it is exactly what subscribers have
//! been told. Every published change is a transition of that snapshot, so a subscriber that
//! applies the events it receives holds the same picture; rescans compare the snapshot with a
//! fresh scan and publish only the real differences.

use std::collections::BTreeMap;
use std::io;
use std::ops::Bound;
use std::path::Path;

use rustix::fs::{AtFlags, Dir};

use crate::beneath::{gone, Root};
use crate::event::{Attrs, Change, EventKind};
use crate::path::{valid_name, RelPath};

/// Path → attributes for a subtree (the root itself is never an entry).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    entries: BTreeMap<RelPath, Attrs>,
}

impl Snapshot {
    /// Scans `sub` beneath `root` (never following symlinks), leaving out the top-level
    /// entries whose names start with `exclude` (sync cookies). Entries that vanish mid-scan
    /// are skipped.
    ///
    /// # Errors
    /// Opening `root` failed.
    pub fn scan(root: &Path, sub: &RelPath, exclude: &[u8]) -> io::Result<Snapshot> {
        Ok(Self::scan_root(&Root::open(root)?, sub, exclude))
    }

    pub(crate) fn scan_root(root: &Root, sub: &RelPath, exclude: &[u8]) -> Snapshot {
        let mut snap = Snapshot::default();
        if !sub.is_root() {
            if sub.first_component().starts_with(exclude) {
                return snap;
            }
            match root.lstat(sub) {
                Ok(Some(a)) => {
                    snap.entries.insert(sub.clone(), a);
                    if !a.is_dir() {
                        return snap;
                    }
                }
                _ => return snap,
            }
        }
        let mut work = vec![sub.clone()];
        while let Some(dir) = work.pop() {
            let Ok(Some(fd)) = root.open_dir(&dir) else {
                continue;
            };
            let Ok(entries) = Dir::read_from(&fd) else {
                continue;
            };
            for entry in entries {
                let Ok(entry) = entry else { break };
                let name = entry.file_name().to_bytes();
                if !valid_name(name) || (dir.is_root() && name.starts_with(exclude)) {
                    continue;
                }
                let attrs = match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => Attrs::from_stat(&st),
                    Err(e) if gone(e) => continue,
                    Err(_) => continue,
                };
                let Some(path) = dir.join(name) else { continue };
                if attrs.is_dir() {
                    work.push(path.clone());
                }
                snap.entries.insert(path, attrs);
            }
        }
        snap
    }

    /// The attributes recorded for `path`.
    pub fn get(&self, path: &RelPath) -> Option<&Attrs> {
        self.entries.get(path)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All entries in path order.
    pub fn iter(&self) -> impl Iterator<Item = (&RelPath, &Attrs)> {
        self.entries.iter()
    }

    /// Records `path`.
    pub fn insert(&mut self, path: RelPath, attrs: Attrs) {
        if !path.is_root() {
            self.entries.insert(path, attrs);
        }
    }

    fn descendant_keys(&self, path: &RelPath) -> Vec<RelPath> {
        let (lo, hi) = path.descendant_range();
        let hi = hi.as_ref().map_or(Bound::Unbounded, Bound::Excluded);
        self.entries
            .range((Bound::Included(&lo), hi))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Removes `path` and everything beneath it.
    pub fn remove_subtree(&mut self, path: &RelPath) {
        for k in self.descendant_keys(path) {
            self.entries.remove(&k);
        }
        self.entries.remove(path);
    }

    /// `path` and everything beneath it.
    pub fn subtree(&self, path: &RelPath) -> Snapshot {
        let mut out = Snapshot::default();
        for k in self.descendant_keys(path) {
            if let Some(a) = self.entries.get(&k) {
                out.entries.insert(k, *a);
            }
        }
        if let Some(a) = self.entries.get(path) {
            out.entries.insert(path.clone(), *a);
        }
        out
    }

    /// Replaces `path` and everything beneath it with `new` (a scan of that subtree).
    pub fn replace_subtree(&mut self, path: &RelPath, new: Snapshot) {
        self.remove_subtree(path);
        self.entries.extend(new.entries);
    }

    /// Moves `from` and everything beneath it to `to`, replacing whatever was at `to`.
    pub fn move_subtree(&mut self, from: &RelPath, to: &RelPath) {
        if to.is_within(from) {
            return; // the kernel refuses this (EINVAL); never corrupt the map over it
        }
        let mut moved = Vec::new();
        for k in self.descendant_keys(from) {
            if let Some(a) = self.entries.remove(&k) {
                moved.push((k, a));
            }
        }
        let top = self.entries.remove(from);
        self.remove_subtree(to);
        if let Some(a) = top {
            self.entries.insert(to.clone(), a);
        }
        for (k, a) in moved {
            if let Some(nk) = k.rebase(from, to) {
                self.entries.insert(nk, a);
            }
        }
    }
}

/// How `old` became `new` (two snapshots of the same subtree), in an order a subscriber can
/// apply: a removed directory is one `Removed` (it takes its subtree along); an entry whose
/// inode or type changed is `Removed` then `Created`; parents are created before children.
/// Renames show as a removal plus a creation.
pub fn diff(old: &Snapshot, new: &Snapshot) -> Vec<Change> {
    let mut out = Vec::new();
    let mut dead: Option<RelPath> = None; // an old subtree already reported removed
    let mut o = old.entries.iter().peekable();
    let mut n = new.entries.iter().peekable();
    loop {
        let (key, before, after) = match (o.peek(), n.peek()) {
            (None, None) => break,
            (Some((ok, _)), Some((nk, _))) if ok == nk => {
                let (k, a) = o.next().unwrap_or_else(|| unreachable!());
                let (_, b) = n.next().unwrap_or_else(|| unreachable!());
                (k, Some(a), Some(b))
            }
            (Some((ok, _)), Some((nk, _))) if ok < nk => {
                let (k, a) = o.next().unwrap_or_else(|| unreachable!());
                (k, Some(a), None)
            }
            (Some(_), None) => {
                let (k, a) = o.next().unwrap_or_else(|| unreachable!());
                (k, Some(a), None)
            }
            _ => {
                let (k, b) = n.next().unwrap_or_else(|| unreachable!());
                (k, None, Some(b))
            }
        };
        if dead.as_ref().is_some_and(|d| !key.is_within(d)) {
            dead = None;
        }
        let before = if dead.is_some() { None } else { before };
        match (before, after) {
            (None, None) => {}
            (Some(a), None) => {
                out.push(Change::new(EventKind::Removed, key.clone(), Some(*a)));
                if a.is_dir() {
                    dead = Some(key.clone());
                }
            }
            (None, Some(b)) => out.push(Change::new(EventKind::Created, key.clone(), Some(*b))),
            (Some(a), Some(b)) => {
                if a.ino != b.ino || a.file_type() != b.file_type() {
                    out.push(Change::new(EventKind::Removed, key.clone(), Some(*a)));
                    if a.is_dir() {
                        dead = Some(key.clone());
                    }
                    out.push(Change::new(EventKind::Created, key.clone(), Some(*b)));
                } else if let Some(kind) = compare(a, b, false, false) {
                    out.push(Change::new(kind, key.clone(), Some(*b)));
                }
            }
        }
    }
    out
}

/// What changed between two states of the same inode, given what the kernel told us.
///
/// Directories are never "modified" (their entries have events of their own), but any
/// change of their own attributes is an `Attrib`: a chmod to the same mode, and a utimes
/// that sets only the modification time (which the kernel reports as IN_MODIFY, not
/// IN_ATTRIB), change nothing but the times. The change time catches those a rescan
/// finds; it also moves with the directory's entries, so a rescan may report a directory
/// whose children it reports too, which costs a message and hides nothing.
pub(crate) fn compare(a: &Attrs, b: &Attrs, modified: bool, attrib: bool) -> Option<EventKind> {
    if b.is_dir() {
        let changed = modified || attrib || a.mode != b.mode || a.ctime_ns != b.ctime_ns;
        return changed.then_some(EventKind::Attrib);
    }
    if modified || a.size != b.size || a.mtime_ns != b.mtime_ns {
        Some(EventKind::Modified)
    } else if attrib || a.mode != b.mode || a.ctime_ns != b.ctime_ns {
        Some(EventKind::Attrib)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    fn file(ino: u64, size: u64) -> Attrs {
        Attrs {
            ino,
            mode: libc::S_IFREG | 0o644,
            size,
            mtime_ns: 0,
            ctime_ns: 0,
        }
    }

    fn dir(ino: u64) -> Attrs {
        Attrs {
            mode: libc::S_IFDIR | 0o755,
            ..file(ino, 0)
        }
    }

    fn kinds(changes: &[Change]) -> Vec<(String, String)> {
        changes
            .iter()
            .map(|c| (format!("{:?}", c.kind), c.path.to_string()))
            .collect()
    }

    #[test]
    fn diff_reports_each_kind_once() {
        let mut old = Snapshot::default();
        old.insert(p("d"), dir(1));
        old.insert(p("d/x"), file(2, 1));
        old.insert(p("d/y"), file(3, 1));
        old.insert(p("f"), file(4, 1));
        old.insert(p("g"), file(5, 1));
        let mut new = Snapshot::default();
        new.insert(p("f"), file(4, 2));
        new.insert(p("g"), file(6, 1));
        new.insert(p("h"), file(7, 1));
        let d = diff(&old, &new);
        assert_eq!(
            kinds(&d),
            vec![
                ("Removed".into(), "d".into()),
                ("Modified".into(), "f".into()),
                ("Removed".into(), "g".into()),
                ("Created".into(), "g".into()),
                ("Created".into(), "h".into()),
            ]
        );
    }

    #[test]
    fn replaced_directory_recreates_children() {
        let mut old = Snapshot::default();
        old.insert(p("d"), dir(1));
        old.insert(p("d/x"), file(2, 1));
        let mut new = Snapshot::default();
        new.insert(p("d"), dir(9));
        new.insert(p("d/x"), file(2, 1));
        assert_eq!(
            kinds(&diff(&old, &new)),
            vec![
                ("Removed".into(), "d".into()),
                ("Created".into(), "d".into()),
                ("Created".into(), "d/x".into()),
            ]
        );
    }

    #[test]
    fn subtree_ops_respect_component_boundaries() {
        let mut s = Snapshot::default();
        for (k, i) in [("a", 1), ("a/b", 2), ("a.b", 3), ("ab", 4), ("a/b/c", 5)] {
            s.insert(p(k), if k == "a/b/c" { file(i, 0) } else { dir(i) });
        }
        assert_eq!(s.subtree(&p("a")).len(), 3);
        s.move_subtree(&p("a"), &p("z"));
        assert!(s.get(&p("z/b/c")).is_some());
        assert!(s.get(&p("a.b")).is_some() && s.get(&p("ab")).is_some());
        s.remove_subtree(&p("z"));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn scan_sees_real_files_and_skips_cookies() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::write(t.path().join("a/b/f"), b"xyz").unwrap();
        std::fs::write(t.path().join(".crossfs-sync-1-2"), b"").unwrap();
        std::os::unix::fs::symlink("/etc", t.path().join("a/link")).unwrap();
        let s = Snapshot::scan(t.path(), &RelPath::root(), b".crossfs-sync-").unwrap();
        let keys: Vec<String> = s.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(keys, ["a", "a/b", "a/b/f", "a/link"]);
        assert_eq!(s.get(&p("a/b/f")).unwrap().size, 3);
        let sub = Snapshot::scan(t.path(), &p("a/link"), b".crossfs-sync-").unwrap();
        assert_eq!(sub.len(), 1, "a symlink is an entry, never followed");
    }
}
