//! The replays the door expects from the agent: one entry per change of the last batch of
//! events it handed out, keyed by host inodes (device, inode number) and names, never by
//! guest node ids (which the guest chooses). Pure bookkeeping: no I/O.
//!
//! An entry is taken by the request that completes its replay (the create, the unlink or
//! rmdir, the rename, the SETATTR); LOOKUPs only consult it. The whole set is replaced when
//! the agent reads the next batch, so it never holds more than one batch.

use crossfs_events::RelPath;

/// A host inode: (device, inode number).
pub(crate) type Key = (u64, u64);

/// One change the agent is to replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expected {
    /// `name` appeared in the directory `dir`.
    Create { dir: Key, name: Vec<u8> },
    /// `name` went from `dir`; it was a file of this mode and inode number.
    Remove {
        dir: Key,
        name: Vec<u8>,
        mode: u32,
        ino: u64,
    },
    /// `from` in `from_dir` is now `to` in `to_dir`.
    Rename {
        from_dir: Key,
        from: Vec<u8>,
        to_dir: Key,
        to: Vec<u8>,
        /// The new path, from the export's root (where the door finds the file).
        to_path: RelPath,
        mode: u32,
    },
    /// The file's contents changed (open for writing and truncate).
    Modify { node: Key },
    /// The file's metadata changed (chmod to its own mode).
    Attrib { node: Key },
}

/// How an agent's LOOKUP of a name under replay is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LookupAnswer {
    /// "Missing", uncached: the name a create or rename is about to make.
    Missing,
    /// A name already gone from the host: a placeholder of this mode and inode number, so
    /// that the guest's unlink has something to remove.
    Gone { mode: u32, ino: u64 },
    /// A rename's old name: the file now at `to_path` (or, if the host no longer has it
    /// there, a placeholder of `mode`).
    Moved { to_path: RelPath, mode: u32 },
}

/// The replays of one batch.
#[derive(Debug, Default)]
pub(crate) struct ExpectedReplays {
    list: Vec<Expected>,
}

impl ExpectedReplays {
    /// Starts a new batch: whatever the agent did not replay of the last one is dropped.
    pub(crate) fn replace(&mut self, list: Vec<Expected>) {
        self.list = list;
    }

    /// Entries not yet replayed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// What the agent's LOOKUP of `name` in `dir` is answered with; `None`: as anyone's.
    pub(crate) fn lookup(&self, dir: Key, name: &[u8]) -> Option<LookupAnswer> {
        self.list.iter().find_map(|e| match e {
            Expected::Create { dir: d, name: n } if *d == dir && n == name => {
                Some(LookupAnswer::Missing)
            }
            Expected::Rename { to_dir, to, .. } if *to_dir == dir && to == name => {
                Some(LookupAnswer::Missing)
            }
            Expected::Remove {
                dir: d,
                name: n,
                mode,
                ino,
            } if *d == dir && n == name => Some(LookupAnswer::Gone {
                mode: *mode,
                ino: *ino,
            }),
            Expected::Rename {
                from_dir,
                from,
                to_path,
                mode,
                ..
            } if *from_dir == dir && from == name => Some(LookupAnswer::Moved {
                to_path: to_path.clone(),
                mode: *mode,
            }),
            _ => None,
        })
    }

    fn take(&mut self, found: impl Fn(&Expected) -> bool) -> bool {
        match self.list.iter().position(found) {
            Some(i) => {
                self.list.remove(i);
                true
            }
            None => false,
        }
    }

    /// Takes the create of `name` in `dir`, if expected.
    pub(crate) fn take_create(&mut self, dir: Key, name: &[u8]) -> bool {
        self.take(|e| matches!(e, Expected::Create { dir: d, name: n } if *d == dir && n == name))
    }

    /// Takes the removal of `name` in `dir`, if expected.
    pub(crate) fn take_remove(&mut self, dir: Key, name: &[u8]) -> bool {
        self.take(
            |e| matches!(e, Expected::Remove { dir: d, name: n, .. } if *d == dir && n == name),
        )
    }

    /// Takes the rename of `from` in `from_dir` to `to` in `to_dir`, if expected.
    pub(crate) fn take_rename(&mut self, from: (Key, &[u8]), to: (Key, &[u8])) -> bool {
        self.take(|e| {
            matches!(e, Expected::Rename { from_dir, from: f, to_dir, to: t, .. }
                if *from_dir == from.0 && f == from.1 && *to_dir == to.0 && t == to.1)
        })
    }

    /// Whether a content change of `node` is expected (the agent's open for writing).
    pub(crate) fn expects_modify(&self, node: Key) -> bool {
        self.list
            .iter()
            .any(|e| matches!(e, Expected::Modify { node: n } if *n == node))
    }

    /// Takes the content or metadata change of `node`, if expected (the agent's SETATTR).
    pub(crate) fn take_setattr(&mut self, node: Key) -> bool {
        self.take(|e| matches!(e, Expected::Modify { node: n } | Expected::Attrib { node: n } if *n == node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Key = (1, 10);
    const E: Key = (1, 11);

    #[test]
    fn each_replay_is_taken_once_and_only_as_expected() {
        let mut x = ExpectedReplays::default();
        x.replace(vec![
            Expected::Create {
                dir: D,
                name: b"new".to_vec(),
            },
            Expected::Rename {
                from_dir: D,
                from: b"old".to_vec(),
                to_dir: E,
                to: b"moved".to_vec(),
                to_path: RelPath::new("e/moved").unwrap(),
                mode: libc::S_IFREG,
            },
            Expected::Modify { node: (1, 99) },
        ]);
        assert_eq!(x.lookup(D, b"new"), Some(LookupAnswer::Missing));
        assert_eq!(x.lookup(E, b"moved"), Some(LookupAnswer::Missing));
        assert!(matches!(
            x.lookup(D, b"old"),
            Some(LookupAnswer::Moved { .. })
        ));
        assert_eq!(x.lookup(E, b"new"), None, "another directory");
        assert!(!x.take_create(E, b"new"));
        assert!(x.take_create(D, b"new"));
        assert!(!x.take_create(D, b"new"), "taken once");
        assert_eq!(x.lookup(D, b"new"), None);
        assert!(
            !x.take_rename((D, b"old"), (D, b"moved")),
            "the wrong target"
        );
        assert!(x.take_rename((D, b"old"), (E, b"moved")));
        assert!(x.expects_modify((1, 99)));
        assert!(!x.take_setattr((1, 98)));
        assert!(x.take_setattr((1, 99)));
        assert_eq!(x.len(), 0);
        x.replace(vec![Expected::Attrib { node: (1, 5) }]);
        x.replace(Vec::new());
        assert!(!x.take_setattr((1, 5)), "a new batch drops the last one's");
    }
}
