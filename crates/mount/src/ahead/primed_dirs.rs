//! Directories the mount lists itself, on its own mount point, so that the kernel holds
//! every name of them before a program looks them up one by one.
//!
//! A program that stats the files of a directory by name (`git status`, `make`, a stat
//! loop) costs one FUSE LOOKUP a name on its first pass, even when the directory's replica
//! answers each in the guest: the request's round trip through the kernel is the cost
//! (two wake-ups, each often of an idle vCPU). A READDIRPLUS reply, answered from the
//! replica, gives the kernel a whole page of names with their attributes at once, and the
//! kernel keeps each as a name it knows. So once names of a directory with a replica are
//! looked up [`LOOKUPS`] times within [`RECENT`], a thread of the mount reads the
//! directory through the mount point (open, getdents, close), and the program's next
//! names are found in the kernel's cache. The kernel keeps that listing too
//! (`FOPEN_CACHE_DIR`), so the program's own listing of the directory is read from it.
//! The thread makes each request one with attributes (see `MountState::prime_dir` in
//! `fs/dir.rs`); if the kernel already keeps a listing of the directory, the thread
//! reads that one and gives it no names.
//!
//! What it costs and shows: the listing is answered from the replica (no message to the
//! server); directories of more than [`MAX_ENTRIES`] entries are left alone (the kernel
//! would hold an inode for each); a watcher in the guest that asks for open, access and
//! close events of a directory sees the mount's own read of it. What this module must not
//! do: decide what the listing says (the READDIRPLUS handler does, as for any program).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lookups answered from a replica that make the mount list the directory.
const LOOKUPS: u32 = 2;
/// How close those lookups must come.
const RECENT: Duration = Duration::from_secs(2);
/// How long after listing a directory the mount does not list it again (the kernel may
/// have dropped names since, under memory pressure).
const AGAIN_AFTER: Duration = Duration::from_secs(30);
/// Largest directory listed.
pub(crate) const MAX_ENTRIES: usize = 16_384;
/// Directories tracked, beyond which tracking starts again.
const MAX_DIRS: usize = 4096;

#[derive(Clone, Copy)]
struct Lookups {
    count: u32,
    last: Instant,
    listed: Option<Instant>,
}

/// Lookups per directory, and when each was last listed (see the module doc).
#[derive(Default)]
pub(crate) struct DirPriming {
    dirs: Mutex<HashMap<u64, Lookups>>,
}

impl DirPriming {
    /// Notes a lookup in directory `dir` answered from its replica; true when the mount
    /// should now list the directory.
    pub(crate) fn looked_up(&self, dir: u64) -> bool {
        let now = Instant::now();
        let mut dirs = crate::sync::lock(&self.dirs);
        if dirs.len() >= MAX_DIRS && !dirs.contains_key(&dir) {
            dirs.clear();
        }
        let d = dirs.entry(dir).or_insert(Lookups {
            count: 0,
            last: now,
            listed: None,
        });
        if now.duration_since(d.last) >= RECENT {
            d.count = 0;
        }
        d.count += 1;
        d.last = now;
        let due = d.count >= LOOKUPS
            && d.listed
                .is_none_or(|at| now.duration_since(at) >= AGAIN_AFTER);
        if due {
            d.listed = Some(now);
            d.count = 0;
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_listed_at_its_second_lookup_and_not_again_soon() {
        let p = DirPriming::default();
        assert!(!p.looked_up(7));
        assert!(!p.looked_up(8), "another directory counts apart");
        assert!(p.looked_up(7));
        for _ in 0..10 {
            assert!(!p.looked_up(7), "listed a moment ago");
        }
        assert!(p.looked_up(8));
    }
}
