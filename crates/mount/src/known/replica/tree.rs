//! Where each directory node is, as the change events name it: the path of every directory
//! that may hold a replica.
//!
//! Events name paths; replicas are kept per directory node. A directory is *anchored* when
//! the mount knows the name it has now in an anchored parent (the root is always
//! anchored), so that an event's path leads to it. Anything that may have moved a
//! directory (a rename or removal of it or of an ancestor, through the mount or by an
//! event, a rescan, a lookup finding another node under its name) detaches it with
//! everything beneath it; a later lookup anchors it again.

use std::collections::HashMap;

use crate::known::inode::ROOT;

/// Directory nodes and the names they have in their anchored parents.
#[derive(Default)]
pub(crate) struct DirTree {
    up: HashMap<u64, (u64, Vec<u8>)>,
    down: HashMap<u64, HashMap<Vec<u8>, u64>>,
}

impl DirTree {
    pub(crate) fn is_anchored(&self, ino: u64) -> bool {
        ino == ROOT || self.up.contains_key(&ino)
    }

    /// The directory node named `name` in `parent`, if anchored.
    pub(crate) fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.down.get(&parent)?.get(name).copied()
    }

    /// The anchored parent of `ino` and its name there.
    pub(crate) fn parent(&self, ino: u64) -> Option<(u64, &[u8])> {
        self.up.get(&ino).map(|(p, n)| (*p, n.as_slice()))
    }

    /// The directory node at the path made of `components`, from the root.
    pub(crate) fn resolve<'a>(&self, components: impl Iterator<Item = &'a [u8]>) -> Option<u64> {
        let mut dir = ROOT;
        for name in components {
            dir = self.child(dir, name)?;
        }
        Some(dir)
    }

    /// Notes that directory `ino` is `name` in `parent`; returns the nodes detached on the
    /// way (another directory that had the name, or `ino`'s subtree if it was elsewhere).
    /// Nothing is anchored beneath a parent that is not anchored itself.
    pub(crate) fn anchor(&mut self, parent: u64, name: &[u8], ino: u64) -> Vec<u64> {
        let mut detached = Vec::new();
        if ino == ROOT || !self.is_anchored(parent) {
            return detached;
        }
        if let Some(old) = self.child(parent, name) {
            if old == ino {
                return detached;
            }
            detached.extend(self.detach(old));
        }
        if self.up.contains_key(&ino) {
            // Moved: what was known beneath it may have missed events on the way.
            detached.extend(self.detach(ino));
        }
        if !self.is_anchored(parent) {
            // The parent was beneath `ino` (a cycle the server cannot really have).
            return detached;
        }
        self.up.insert(ino, (parent, name.to_vec()));
        self.down
            .entry(parent)
            .or_default()
            .insert(name.to_vec(), ino);
        detached
    }

    /// Detaches `ino` and every directory beneath it (for the root: everything beneath
    /// it); returns the nodes detached, `ino` included.
    pub(crate) fn detach(&mut self, ino: u64) -> Vec<u64> {
        let mut gone = vec![ino];
        if let Some((parent, name)) = self.up.remove(&ino) {
            if let Some(siblings) = self.down.get_mut(&parent) {
                siblings.remove(&name);
                if siblings.is_empty() {
                    self.down.remove(&parent);
                }
            }
        }
        let mut i = 0;
        while i < gone.len() {
            if let Some(children) = self.down.remove(&gone[i]) {
                for child in children.into_values() {
                    self.up.remove(&child);
                    gone.push(child);
                }
            }
            i += 1;
        }
        gone
    }

    /// Forgets everything (the root stays anchored).
    pub(crate) fn clear(&mut self) {
        self.up.clear();
        self.down.clear();
    }

    /// Directories anchored, the root not counted.
    pub(crate) fn len(&self) -> usize {
        self.up.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_through_anchored_parents_only() {
        let mut t = DirTree::default();
        assert!(t.anchor(ROOT, b"a", 2).is_empty());
        assert!(t.anchor(2, b"b", 3).is_empty());
        assert!(t.anchor(9, b"c", 4).is_empty(), "9 is not anchored");
        assert_eq!(t.resolve([&b"a"[..], b"b"].into_iter()), Some(3));
        assert_eq!(t.resolve(std::iter::empty()), Some(ROOT));
        assert_eq!(t.resolve([&b"c"[..]].into_iter()), None);
        assert!(!t.is_anchored(4));
        assert_eq!(t.parent(3), Some((2, &b"b"[..])));
    }

    #[test]
    fn detaching_takes_the_subtree_and_a_new_owner_of_a_name_detaches_the_old() {
        let mut t = DirTree::default();
        t.anchor(ROOT, b"a", 2);
        t.anchor(2, b"b", 3);
        t.anchor(3, b"c", 4);
        t.anchor(ROOT, b"x", 5);
        let mut gone = t.detach(3);
        gone.sort();
        assert_eq!(gone, vec![3, 4]);
        assert_eq!(t.child(2, b"b"), None);
        assert!(t.is_anchored(2) && t.is_anchored(5));
        // Another directory under the name "a": the old one and its subtree go.
        t.anchor(2, b"b", 3);
        let mut gone = t.anchor(ROOT, b"a", 7);
        gone.sort();
        assert_eq!(gone, vec![2, 3]);
        assert_eq!(t.resolve([&b"a"[..]].into_iter()), Some(7));
        // A directory that moves loses what was beneath it.
        t.anchor(7, b"k", 8);
        let mut gone = t.anchor(5, b"y", 7);
        gone.sort();
        assert_eq!(gone, vec![7, 8]);
        assert_eq!(t.resolve([&b"x"[..], b"y"].into_iter()), Some(7));
        assert_eq!(t.len(), 2);
        t.detach(ROOT);
        assert_eq!(t.len(), 0);
    }
}
