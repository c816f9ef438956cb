//! Changes guest programs made through the door: the host's watcher reports them back, and
//! the guest kernel raised their inotify events already, so the agent is not handed them
//! (a replayed create of a name the guest just made would make the guest kernel drop its
//! dentry and make it again, raising IN_CREATE twice). As `crossfs mount` does
//! (`OWN_WINDOW`), an event is taken for the guest's own when a request that succeeded
//! through the door made the same change (the same kind, to the same name or file) within
//! [`WINDOW`]. A request that failed notes nothing, so no guest program can hide a host
//! change by asking for one it cannot make. A host change of the same kind to the same name
//! or file within the window is not replayed either (the guest sees it at its next lookup,
//! or after the cache timeout). Pure bookkeeping: no I/O.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::expected::Key;

/// How long after a change made through the door its event is taken for that change.
pub(crate) const WINDOW: Duration = Duration::from_secs(2);

/// Most changes remembered; past it the older than [`WINDOW`] go, then all.
const LIMIT: usize = 1 << 16;

/// What a guest program changed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Own {
    /// Made a name in a directory.
    Created(Key, Vec<u8>),
    /// Removed a name from a directory.
    Removed(Key, Vec<u8>),
    /// Renamed (directory, name) to (directory, name).
    Renamed((Key, Vec<u8>), (Key, Vec<u8>)),
    /// Changed a file's contents.
    Modified(Key),
    /// Changed a file's attributes.
    Attrib(Key),
}

/// The changes made through the door lately.
#[derive(Debug, Default)]
pub(crate) struct OwnChanges {
    at: HashMap<Own, Instant>,
}

impl OwnChanges {
    /// Notes a change made now.
    pub(crate) fn note(&mut self, own: Own) {
        if self.at.len() >= LIMIT {
            self.at.retain(|_, t| t.elapsed() < WINDOW);
            if self.at.len() >= LIMIT {
                self.at.clear();
            }
        }
        self.at.insert(own, Instant::now());
    }

    /// Whether `own` was changed through the door within [`WINDOW`].
    pub(crate) fn recent(&self, own: &Own) -> bool {
        self.at.get(own).is_some_and(|t| t.elapsed() < WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_each_kind_of_change_apart() {
        let mut o = OwnChanges::default();
        o.note(Own::Created((1, 2), b"a".to_vec()));
        assert!(o.recent(&Own::Created((1, 2), b"a".to_vec())));
        assert!(
            !o.recent(&Own::Removed((1, 2), b"a".to_vec())),
            "another kind"
        );
        assert!(!o.recent(&Own::Created((1, 3), b"a".to_vec())));
        assert!(!o.recent(&Own::Attrib((1, 2))));
    }
}
