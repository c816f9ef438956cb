//! Replicas of subdirectories fetched ahead while a program walks a tree.
//!
//! `find`, `grep -r`, `git status` and `make`'s directory scans list one directory after
//! another, and the first listing of each costs the program two round trips to the
//! server (a walk to the directory, then its Treaddirattr). Once a program lists two
//! directories from their start within [`RECENT`] of each other, the subdirectories of
//! each directory listed from then on are fetched into replicas by a thread of the mount
//! (`MountState::fetch_subdir_ahead` in `fs/dir.rs`: a walk and a listing with attributes, as
//! the first lookup in a directory fetches it), so that when the program gets to them
//! their listings and lookups are answered in the guest. At most 64 directories wait; a
//! directory beyond that is listed by the program as before. A program that opens or
//! looks up in a directory whose fetch is under way waits for it (at most [`MAX_WAIT`])
//! rather than fetching it a second time, and the thread leaves alone a directory that
//! a program is fetching itself.
//!
//! What it costs and shows: the server reads directories the program may never reach
//! (on the host their access times move as a listing moves them); the replicas are kept
//! within the same bound as any other (`--replica-entries`, least recently used first),
//! and are exact as any other (a change between a fetch's start and its end discards
//! it). What this module must not do: fetch anything (it only says when to).

use std::collections::HashSet;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How close two listings must come for the mount to take them for a walk.
const RECENT: Duration = Duration::from_secs(2);
/// How long a program waits for a fetch under way of the directory it opens.
const MAX_WAIT: Duration = Duration::from_secs(1);

/// The last directory a program listed from its start, and when; the directories being
/// fetched ahead (see the module doc).
#[derive(Default)]
pub(crate) struct TreeWalk {
    last: Mutex<Option<(u64, Instant)>>,
    fetching: Mutex<HashSet<u64>>,
    fetched: Condvar,
}

/// A fetch ahead of one directory under way: others wait for it until it is dropped.
pub(crate) struct Fetching<'a> {
    walk: &'a TreeWalk,
    dir: u64,
}

impl Drop for Fetching<'_> {
    fn drop(&mut self) {
        let mut fetching = self
            .walk
            .fetching
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        fetching.remove(&self.dir);
        self.walk.fetched.notify_all();
    }
}

impl TreeWalk {
    /// Starts fetching directory `dir` (ahead, or for a program); `None` if a fetch of it
    /// is under way already.
    pub(crate) fn fetch(&self, dir: u64) -> Option<Fetching<'_>> {
        let mut fetching = crate::sync::lock(&self.fetching);
        // Made only if inserted (not with `then_some`): a Fetching dropped unused would
        // end the fetch under way, and lock what is locked here.
        if fetching.insert(dir) {
            Some(Fetching { walk: self, dir })
        } else {
            None
        }
    }

    /// Waits until no fetch ahead of directory `dir` is under way, for at most
    /// [`MAX_WAIT`].
    pub(crate) fn wait_for(&self, dir: u64) {
        let fetching = crate::sync::lock(&self.fetching);
        if fetching.contains(&dir) {
            crossfs_client::before_wait();
            let _ = self
                .fetched
                .wait_timeout_while(fetching, MAX_WAIT, |f| f.contains(&dir));
        }
    }

    /// Notes that a program lists directory `dir` from its start; true if another
    /// directory was listed so within [`RECENT`]: the subdirectories it shows should be
    /// fetched ahead.
    pub(crate) fn listing(&self, dir: u64) -> bool {
        let now = Instant::now();
        let mut last = crate::sync::lock(&self.last);
        let walking = last.is_some_and(|(d, at)| d != dir && now - at <= RECENT);
        *last = Some((dir, now));
        walking
    }

    /// Whether a walk is on: a listing came within [`RECENT`] (for the rest of a listing
    /// read in several requests).
    pub(crate) fn active(&self) -> bool {
        let last = crate::sync::lock(&self.last);
        last.is_some_and(|(_, at)| at.elapsed() <= RECENT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_directory_listed_again_is_no_walk_and_a_second_one_is() {
        let w = TreeWalk::default();
        assert!(!w.active());
        assert!(!w.listing(1));
        assert!(!w.listing(1), "the same directory again");
        assert!(w.active());
        assert!(w.listing(2), "another directory soon after");
        assert!(w.listing(3));
        assert!(!w.listing(3), "the same directory again");
    }

    #[test]
    fn a_wait_ends_when_the_fetch_does() {
        let w = std::sync::Arc::new(TreeWalk::default());
        w.wait_for(7); // nothing under way: no wait
        let started = Instant::now();
        let fetch = w.fetch(7).unwrap();
        assert!(w.fetch(7).is_none(), "one fetch of a directory at a time");
        let waiter = {
            let w = w.clone();
            std::thread::spawn(move || {
                w.wait_for(7);
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(fetch);
        let waited = waiter.join().unwrap();
        assert!(w.fetch(7).is_some(), "over: another may start");
        assert!(
            waited >= Duration::from_millis(50) && waited < MAX_WAIT,
            "{waited:?}"
        );
    }

    #[test]
    fn listings_far_apart_are_no_walk() {
        let w = TreeWalk::default();
        *w.last.lock().unwrap() = Some((1, Instant::now() - RECENT - Duration::from_millis(1)));
        assert!(!w.active());
        assert!(!w.listing(2));
        assert!(w.listing(3));
    }
}
