//! Extended attributes known to be missing, while change events are followed: the
//! question the kernel asks before every write it passes on ("has the file a
//! `security.capability`?", to drop it as a local file system would) is answered here.
//!
//! Without this, each WRITE through the page cache's write-through path costs two round
//! trips, a Txattrwalk that fails with ENODATA and the Twrite. A name is known missing:
//! - once the server answered ENODATA for it, if nothing changed the file between the
//!   request and the answer (the change clock of `crate::known::listed_attrs`);
//! - for `security.capability` of a file this mount has just created (no file is created
//!   with one: only a setxattr adds it).
//!
//! What is known is dropped by any change event naming the file (its qid or a name of it),
//! by a change of the file's attributes through this mount, and wholesale by anything that
//! counts for every file (a rescan, losing the events, a reconnect). A write can only remove
//! the attribute, so writes through the mount keep what is known. Values are never kept:
//! an attribute that exists is always read from the server. Not for the mount's root
//! (the server publishes no attribute change of the export's top) nor in `never` mode.
//!
//! What this module must not do: answer for a name the server was not asked about (but the
//! one above) or keep anything while events are not followed.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::known::listed_attrs::{Fetched, ListedAttrs};

/// The name the kernel asks about before every write.
pub(crate) const CAPABILITY: &[u8] = b"security.capability";

/// Names remembered at most, all files together; past it all are forgotten.
const LIMIT: usize = 1 << 16;

/// Missing attribute names by file `qid.path`, each with when it was found missing.
#[derive(Default)]
pub(crate) struct MissingXattrs {
    files: Mutex<Files>,
}

/// A name found missing, and when it was asked about.
type MissingName = (Box<[u8]>, Fetched);

#[derive(Default)]
struct Files {
    by_file: HashMap<u64, Vec<MissingName>>,
    names: usize,
}

impl MissingXattrs {
    fn files(&self) -> std::sync::MutexGuard<'_, Files> {
        crate::sync::lock(&self.files)
    }

    /// Whether attribute `name` of file `qid_path` is known to be missing now.
    pub(crate) fn is_missing(&self, listed: &ListedAttrs, qid_path: u64, name: &[u8]) -> bool {
        self.files().by_file.get(&qid_path).is_some_and(|names| {
            names
                .iter()
                .any(|(n, since)| &**n == name && listed.followed_since(since))
        })
    }

    /// The server answered that `name` of `qid_path` is missing, to a request sent at
    /// `asked`. Kept unless the file may have changed meanwhile.
    pub(crate) fn found_missing(
        &self,
        listed: &ListedAttrs,
        qid_path: u64,
        name: &[u8],
        asked: Fetched,
    ) {
        if !listed.unchanged_since(qid_path, &asked) {
            return;
        }
        let mut files = self.files();
        if files.names >= LIMIT {
            *files = Files::default();
        }
        let names = files.by_file.entry(qid_path).or_default();
        if let Some(known) = names.iter_mut().find(|(n, _)| &**n == name) {
            known.1 = asked;
            return;
        }
        names.push((name.into(), asked));
        files.names += 1;
    }

    /// Files whose attributes may have changed: what is known of them goes.
    pub(crate) fn forget(&self, files: impl IntoIterator<Item = u64>) {
        let mut all = self.files();
        for file in files {
            if let Some(names) = all.by_file.remove(&file) {
                all.names -= names.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn following() -> ListedAttrs {
        let l = ListedAttrs::default();
        l.set_following(true);
        l
    }

    #[test]
    fn a_missing_name_is_known_until_an_event_names_its_file() {
        let l = following();
        let m = MissingXattrs::default();
        m.found_missing(&l, 7, CAPABILITY, l.before_fetch());
        assert!(m.is_missing(&l, 7, CAPABILITY));
        assert!(
            !m.is_missing(&l, 7, b"user.other"),
            "only the name asked about"
        );
        assert!(!m.is_missing(&l, 8, CAPABILITY));
        m.forget([7]);
        assert!(!m.is_missing(&l, 7, CAPABILITY));
    }

    #[test]
    fn an_answer_the_file_changed_under_is_not_kept() {
        let l = following();
        let m = MissingXattrs::default();
        let asked = l.before_fetch();
        l.changed([7]);
        m.found_missing(&l, 7, CAPABILITY, asked);
        assert!(!m.is_missing(&l, 7, CAPABILITY));
    }

    #[test]
    fn nothing_is_kept_without_events_or_past_a_change_for_every_file() {
        let l = ListedAttrs::default();
        let m = MissingXattrs::default();
        m.found_missing(&l, 7, CAPABILITY, l.before_fetch());
        assert!(!m.is_missing(&l, 7, CAPABILITY), "not following");
        l.set_following(true);
        m.found_missing(&l, 7, CAPABILITY, l.before_fetch());
        assert!(m.is_missing(&l, 7, CAPABILITY));
        l.all_changed();
        assert!(!m.is_missing(&l, 7, CAPABILITY), "a rescan");
        m.found_missing(&l, 7, CAPABILITY, l.before_fetch());
        l.set_following(false);
        assert!(!m.is_missing(&l, 7, CAPABILITY), "events lost");
    }

    #[test]
    fn memory_stays_bounded() {
        let l = following();
        let m = MissingXattrs::default();
        for f in 0..LIMIT as u64 + 5 {
            m.found_missing(&l, f, CAPABILITY, l.before_fetch());
        }
        assert!(m.files().names <= LIMIT);
        assert!(m.is_missing(&l, LIMIT as u64 + 4, CAPABILITY));
    }
}
