//! Small files' contents fetched a directory at a time, for the first reads of files
//! opened for reading (see `fs/open.rs`, `fs/pushes.rs`).
//!
//! Programs that read a tree (`grep -r`, `git status`, a compiler reading headers) read
//! one file after another in a directory, each costing a round trip (Twalkread). When a
//! second file of a directory is read within [`RECENT`] of another and neither was here,
//! the mount asks for the next small files of the directory whole (Treadfiles, read on the
//! host without moving access times), in listing order after the file being read, and
//! answers their first reads here. A read that arrives while its file is on the way waits
//! for it. In `auto` mode the files also go into the kernel's page cache as they come
//! (`crate::ahead::pushed_pages`), and most first reads never reach the mount. When the
//! read is the first in a directory soon after the mount asked in another
//! ([`Asking::TreeWalk`]), the small files of the directories the walk reads next are
//! asked for too (`fetch_small_files` in `fs/pushes.rs` picks them).
//!
//! What keeps it exact: a file is kept by `qid.path` with the change clock's stamp taken
//! before it was asked for (`crate::known::listed_attrs`), and used only while nothing can have
//! changed the file since (an event, a change through this mount, events not followed).
//! Only the clock lives elsewhere; this module keeps the bytes, the waiting reads and its
//! memory bound. It must not decide which files to fetch (the caller picks from a replica).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossfs_wire::Rgetattr;

use crate::known::listed_attrs::Fetched;

/// Largest file fetched whole.
pub(crate) const MAX_FILE: u32 = 64 * 1024;
/// Bytes kept at most, all files together.
const MAX_BYTES: usize = 32 << 20;
/// Directories whose reads are counted, beyond which the counts start again.
const MAX_DIRS: usize = 4096;
/// Files asked for at a time, after the file being read in listing order.
pub(crate) const WINDOW: usize = 256;
/// How close two reads of files not here must come to ask for more.
const RECENT: Duration = Duration::from_secs(2);

/// Whether a first read makes it time to ask for a directory's small files (see
/// [`SmallFiles::read_in`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Asking {
    No,
    /// A second read in this directory.
    ThisDirectory,
    /// The first read in a directory soon after the mount asked in another: a program
    /// reads a tree, and the directories it reads next may be asked for too.
    TreeWalk,
}

/// A file's whole content, its attributes after the read, and when it was asked for.
#[derive(Clone)]
pub(crate) struct SmallFile {
    pub data: Arc<[u8]>,
    pub attr: Arc<Rgetattr>,
    pub fetched: Fetched,
}

/// A read waiting for a file on the way: called with the file, or `None` if it did not
/// come (the read then goes to the server).
pub(crate) type Waiter = Box<dyn FnOnce(Option<SmallFile>) + Send>;

enum Slot {
    /// With the number it was kept as (see `Inner::order`).
    Kept(SmallFile, u64),
    Coming(Vec<Waiter>),
}

#[derive(Default)]
struct Inner {
    files: HashMap<u64, Slot>,
    /// Kept files in the order they came (`qid.path` and the number it was kept as, which
    /// tells a file kept again from its older copy), for dropping the oldest first.
    order: VecDeque<(u64, u64)>,
    kept: u64,
    bytes: usize,
    /// Directory node -> when a file not here was last read in it, and whether asking
    /// for more then found nothing to ask for.
    dirs: HashMap<u64, (Instant, bool)>,
    /// When [`SmallFiles::read_in`] last said to ask.
    asked: Option<Instant>,
}

/// The mount's small files (see the module doc).
#[derive(Default)]
pub(crate) struct SmallFiles {
    inner: Mutex<Inner>,
}

impl SmallFiles {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::sync::lock(&self.inner)
    }

    /// The file `qid_path`: if on the way, `waiter` is queued for it (`None`); else the
    /// waiter is given back with the file if kept.
    pub(crate) fn find(
        &self,
        qid_path: u64,
        waiter: Waiter,
    ) -> Option<(Waiter, Option<SmallFile>)> {
        match self.lock().files.get_mut(&qid_path) {
            Some(Slot::Kept(f, _)) => Some((waiter, Some(f.clone()))),
            Some(Slot::Coming(waiters)) => {
                waiters.push(waiter);
                None
            }
            None => Some((waiter, None)),
        }
    }

    /// Notes a first read of a file in directory `dir` that was not here; says whether the
    /// files after it should now be asked for: another such read came within [`RECENT`],
    /// in this directory or, if that made the mount ask, in another (a program reading a
    /// tree: [`Asking::TreeWalk`]), and the last time asking did not find this directory
    /// without small files.
    pub(crate) fn read_in(&self, dir: u64) -> Asking {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.dirs.len() >= MAX_DIRS {
            inner.dirs.clear();
        }
        let recent = |at: Instant| now.duration_since(at) < RECENT;
        let last = inner.dirs.insert(dir, (now, false));
        let ask = match last {
            Some((at, barren)) if recent(at) && !barren => Asking::ThisDirectory,
            None if inner.asked.is_some_and(recent) => Asking::TreeWalk,
            _ => Asking::No,
        };
        if let (Some((at, true)), Asking::No) = (last, ask) {
            // Still without small files: keep that in mind until it is old.
            inner.dirs.insert(dir, (at, true));
        }
        if ask != Asking::No {
            inner.asked = Some(now);
        }
        ask
    }

    /// Asking for more in `dir` found nothing to ask for: not again for [`RECENT`].
    pub(crate) fn barren(&self, dir: u64) {
        self.lock().dirs.insert(dir, (Instant::now(), true));
    }

    /// Marks these files as on the way; returns those that were neither coming nor kept
    /// (a kept file that is `stale` counts as not kept).
    pub(crate) fn coming(
        &self,
        qid_paths: impl IntoIterator<Item = u64>,
        stale: impl Fn(&SmallFile) -> bool,
    ) -> Vec<u64> {
        let mut inner = self.lock();
        qid_paths
            .into_iter()
            .filter(|q| {
                let new = match inner.files.get(q) {
                    None => true,
                    Some(Slot::Kept(f, _)) => stale(f),
                    Some(Slot::Coming(_)) => false,
                };
                if new {
                    if let Some(Slot::Kept(f, _)) = inner.files.insert(*q, Slot::Coming(Vec::new()))
                    {
                        inner.bytes -= f.data.len();
                    }
                }
                new
            })
            .collect()
    }

    /// The answer for files marked coming: those in `arrived` are kept (if they fit), the
    /// rest of `asked` are forgotten. Returns the reads that waited, each with its file if
    /// it came, for the caller to answer (outside this lock).
    #[must_use]
    pub(crate) fn arrived(
        &self,
        asked: &[u64],
        arrived: Vec<(u64, SmallFile)>,
    ) -> Vec<(Waiter, Option<SmallFile>)> {
        let mut woken: Vec<(Vec<Waiter>, Option<SmallFile>)> = Vec::new();
        {
            let mut inner = self.lock();
            let mut arrived: HashMap<u64, SmallFile> = arrived.into_iter().collect();
            for q in asked {
                let waiters = match inner.files.remove(q) {
                    Some(Slot::Coming(w)) => w,
                    // Kept meanwhile, or dropped: leave it.
                    Some(kept) => {
                        inner.files.insert(*q, kept);
                        continue;
                    }
                    None => Vec::new(),
                };
                let file = arrived.remove(q);
                if let Some(f) = &file {
                    inner.keep(*q, f.clone());
                }
                woken.push((waiters, file));
            }
        }
        woken
            .into_iter()
            .flat_map(|(waiters, file)| waiters.into_iter().map(move |w| (w, file.clone())))
            .collect()
    }

    /// Files kept, and their bytes.
    pub(crate) fn size(&self) -> (usize, usize) {
        let inner = self.lock();
        let files = inner.files.values();
        (
            files.filter(|s| matches!(s, Slot::Kept(..))).count(),
            inner.bytes,
        )
    }
}

impl Inner {
    fn keep(&mut self, qid_path: u64, file: SmallFile) {
        self.kept += 1;
        self.bytes += file.data.len();
        self.files.insert(qid_path, Slot::Kept(file, self.kept));
        self.order.push_back((qid_path, self.kept));
        while self.bytes > MAX_BYTES {
            let Some((old, n)) = self.order.pop_front() else {
                break;
            };
            if let Some(Slot::Kept(f, kept_as)) = self.files.get(&old) {
                if *kept_as == n {
                    self.bytes -= f.data.len();
                    self.files.remove(&old);
                }
            }
        }
        // Entries of files kept again or dropped since: forgotten with the oldest.
        if self.order.len() > 2 * self.files.len() + 1024 {
            let files = &self.files;
            self.order
                .retain(|(q, n)| matches!(files.get(q), Some(Slot::Kept(_, k)) if k == n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::known::listed_attrs::ListedAttrs;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn file(bytes: &[u8]) -> SmallFile {
        SmallFile {
            data: bytes.into(),
            attr: Arc::new(Rgetattr::default()),
            fetched: ListedAttrs::default().before_fetch(),
        }
    }

    #[test]
    fn a_second_read_in_a_directory_asks_for_more_unless_it_had_nothing() {
        use Asking::*;
        let s = SmallFiles::default();
        assert_eq!(s.read_in(7), No, "one read tells nothing");
        assert_eq!(s.read_in(8), No, "nor does one in another directory");
        assert_eq!(s.read_in(7), ThisDirectory);
        s.barren(7);
        assert_eq!(s.read_in(7), No, "nothing to ask for a moment ago");
        assert_eq!(s.read_in(7), No);
        // Reading a tree: having just asked, a first read in another directory asks.
        assert_eq!(s.read_in(9), TreeWalk);
        s.barren(9);
        assert_eq!(s.read_in(9), No);
    }

    #[test]
    fn reads_wait_for_files_on_the_way_and_go_on_without_those_that_do_not_come() {
        let s = SmallFiles::default();
        assert_eq!(s.coming([1, 2, 3], |_| false), [1, 2, 3]);
        assert_eq!(s.coming([3, 4], |_| false), [4], "already coming");
        let answered = Arc::new(AtomicUsize::new(0));
        let waiter = |want: Option<&'static [u8]>| -> Waiter {
            let answered = answered.clone();
            Box::new(move |f: Option<SmallFile>| {
                assert_eq!(f.map(|f| f.data.to_vec()), want.map(<[u8]>::to_vec));
                answered.fetch_add(1, Ordering::SeqCst);
            })
        };
        assert!(s.find(1, waiter(Some(b"one"))).is_none(), "waits");
        assert!(s.find(2, waiter(None)).is_none(), "waits");
        assert!(matches!(s.find(9, waiter(None)), Some((_, None))));
        let woken = s.arrived(&[1, 2, 3], vec![(1, file(b"one")), (3, file(b"three"))]);
        assert_eq!(woken.len(), 2);
        for (w, f) in woken {
            w(f);
        }
        assert_eq!(answered.load(Ordering::SeqCst), 2);
        assert!(matches!(s.find(3, waiter(None)), Some((_, Some(f))) if &*f.data == b"three"));
        assert!(matches!(s.find(2, waiter(None)), Some((_, None))));
        assert_eq!(s.size(), (2, 8));
        // A kept file is asked for again only if it is stale.
        assert!(s.coming([3], |_| false).is_empty());
        assert_eq!(s.coming([3], |_| true), [3]);
        assert_eq!(s.size(), (1, 3));
        assert!(s.arrived(&[3], vec![(3, file(b"THREE"))]).is_empty());
        assert!(matches!(s.find(3, waiter(None)), Some((_, Some(f))) if &*f.data == b"THREE"));
    }

    #[test]
    fn memory_is_bounded_oldest_first() {
        let s = SmallFiles::default();
        let big = vec![0u8; MAX_FILE as usize];
        let n = MAX_BYTES / big.len() + 10;
        let all: Vec<u64> = (0..n as u64).collect();
        s.coming(all.clone(), |_| false);
        let woken = s.arrived(&all, all.iter().map(|&q| (q, file(&big))).collect());
        assert!(woken.is_empty());
        let (files, bytes) = s.size();
        assert!(bytes <= MAX_BYTES && files == MAX_BYTES / big.len());
        assert!(matches!(s.find(0, Box::new(|_| {})), Some((_, None))));
        assert!(matches!(
            s.find(n as u64 - 1, Box::new(|_| {})),
            Some((_, Some(_)))
        ));
    }
}
