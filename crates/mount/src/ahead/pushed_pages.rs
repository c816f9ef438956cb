//! Small files fetched with their directory, pushed into the kernel's page cache
//! (`FUSE_NOTIFY_STORE`), so that their first read is no READ request at all.
//!
//! A READ answered from `crate::ahead::small_files` still costs a FUSE round trip, and makes the
//! kernel drop the file's access time, so that the program's next `fstat` is a GETATTR:
//! two requests a file that `grep -r` or a compiler pays on every first read. A file whose
//! pages the kernel holds costs neither (the open is deferred and never sent).
//!
//! What keeps it exact: pages are pushed only in `auto` mode (no writeback cache, so the
//! kernel holds no data the server lacks), only while nothing can have changed the file
//! since it was fetched (the change clock, checked before the push), and only for files
//! that no handle of this mount has open for writing (a write changes the kernel's pages
//! before the mount hears of it). Two things could still come between the check and the
//! push, and wait for it here:
//! - an open for writing of the file ([`PagePush::write_opened`]): it is answered once the
//!   push is done, so the kernel writes over the pushed pages, never the reverse;
//! - an event's invalidation of the file's pages ([`PagePush::settle`]): it is sent once
//!   the push is done, so it drops the pushed pages (the event moved the change clock
//!   before, so no later push passes the check).
//!
//! A push waits for the pages it writes, which a READ of the same file in flight holds
//! locked; in the unlikely case that such a READ cannot be served because every FUSE
//! thread waits here, a waiter gives up after [`MAX_WAIT`] and the push drops its pages
//! once done. What this module must not do: decide which files are pushed (the caller
//! checks the clock and the attributes), or talk to the server.

use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long an open or an invalidation waits for a push of its file.
const MAX_WAIT: Duration = Duration::from_secs(1);

/// The pushes in progress and the files open for writing (see the module doc).
#[derive(Default)]
pub(crate) struct PagePush {
    state: Mutex<State>,
    pushed: Condvar,
}

#[derive(Default)]
struct State {
    /// Node id -> handles open for writing.
    writers: HashMap<u64, u32>,
    /// Handle -> its node, for the handles counted in `writers`.
    writer_handles: HashMap<u64, u64>,
    /// Node ids being pushed -> whether a waiter gave up (the pages must go once pushed).
    pushing: HashMap<u64, bool>,
    /// Nodes read or written through opens the kernel did not announce
    /// (`crate::known::handle::Unannounced`): it may hold pages of them that the mount did
    /// not push, even dirty ones (a shared writable mapping), so none is pushed until the
    /// pages are dropped for a change ([`PagePush::pages_dropped`]).
    touched: HashSet<u64>,
}

/// A push in progress: end it with [`PagePush::end`].
#[must_use]
pub(crate) struct Pushing(u64);

impl PagePush {
    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    /// Starts a push of node `ino` if no handle has it open for writing and `still_exact`
    /// (called under the lock, so nothing counted here comes between it and the push).
    pub(crate) fn begin(&self, ino: u64, still_exact: impl FnOnce() -> bool) -> Option<Pushing> {
        let mut st = self.lock();
        if st.writers.contains_key(&ino)
            || st.touched.contains(&ino)
            || st.pushing.contains_key(&ino)
            || !still_exact()
        {
            return None;
        }
        st.pushing.insert(ino, false);
        Some(Pushing(ino))
    }

    /// Ends a push; true if a waiter gave up meanwhile, and the pages must be dropped.
    pub(crate) fn end(&self, p: Pushing) -> bool {
        let gave_up = self.lock().pushing.remove(&p.0).unwrap_or(false);
        self.pushed.notify_all();
        gave_up
    }

    /// Waits until no push of node `ino` is in progress (at most [`MAX_WAIT`]).
    fn wait_for_push<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        ino: u64,
    ) -> MutexGuard<'a, State> {
        let deadline = Instant::now() + MAX_WAIT;
        if st.pushing.contains_key(&ino) {
            crossfs_client::before_wait();
        }
        while st.pushing.contains_key(&ino) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                st.pushing.insert(ino, true);
                break;
            }
            st = self
                .pushed
                .wait_timeout(st, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        st
    }

    /// Call before the kernel drops node `ino`'s pages for a change: waits for a push of it.
    pub(crate) fn settle(&self, ino: u64) {
        let st = self.lock();
        drop(self.wait_for_push(st, ino));
    }

    /// Call before the kernel drops all of node `ino`'s pages for a change on the host: they
    /// take what [`PagePush::touched`] guards against with them (dirty pages of a mapping
    /// are written first), and what the kernel reads afterwards is touched again.
    pub(crate) fn pages_dropped(&self, ino: u64) {
        self.lock().touched.remove(&ino);
    }

    /// Call before answering an open for writing of node `ino` as handle `fh`: no push of
    /// the file starts until [`PagePush::closed`], and one in progress is waited for.
    pub(crate) fn write_opened(&self, fh: u64, ino: u64) {
        let mut st = self.lock();
        *st.writers.entry(ino).or_default() += 1;
        st.writer_handles.insert(fh, ino);
        drop(self.wait_for_push(st, ino));
    }

    /// Call when a request on an unannounced open of node `ino` comes: no push of it starts
    /// from now on; and if the request `changes` the file's data, one in progress drops its
    /// pages once done (not waited for: the kernel may hold the pages it needs locked
    /// until this request is answered). A read fills the pages with what a push would.
    pub(crate) fn touched(&self, ino: u64, changes: bool) {
        let mut st = self.lock();
        if !st.touched.contains(&ino) {
            st.touched.insert(ino);
        }
        if let Some(gave_up) = st.pushing.get_mut(&ino).filter(|_| changes) {
            *gave_up = true;
        }
    }

    /// The kernel forgot node `ino`.
    pub(crate) fn forget(&self, ino: u64) {
        self.lock().touched.remove(&ino);
    }

    /// Handle `fh` was released.
    pub(crate) fn closed(&self, fh: u64) {
        let mut st = self.lock();
        let Some(ino) = st.writer_handles.remove(&fh) else {
            return;
        };
        if let Some(n) = st.writers.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                st.writers.remove(&ino);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn files_open_for_writing_are_not_pushed_until_closed() {
        let p = PagePush::default();
        p.write_opened(10, 7);
        p.write_opened(11, 7);
        assert!(p.begin(7, || true).is_none());
        p.closed(10);
        assert!(p.begin(7, || true).is_none());
        p.closed(11);
        p.closed(11); // a handle closed twice, or never counted, changes nothing
        let push = p.begin(7, || true).expect("no writer left");
        assert!(!p.end(push));
        assert!(p.begin(8, || false).is_none(), "not exact any more");
    }

    #[test]
    fn an_open_for_writing_waits_for_the_push_of_its_file() {
        let p = Arc::new(PagePush::default());
        let push = p.begin(7, || true).unwrap();
        assert!(
            p.begin(7, || true).is_none(),
            "one push of a file at a time"
        );
        let opened = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = {
            let (p, opened) = (p.clone(), opened.clone());
            std::thread::spawn(move || {
                p.write_opened(1, 7);
                opened.store(true, std::sync::atomic::Ordering::SeqCst);
            })
        };
        // Other files do not wait.
        p.write_opened(2, 8);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!opened.load(std::sync::atomic::Ordering::SeqCst));
        assert!(!p.end(push));
        t.join().unwrap();
        assert!(opened.load(std::sync::atomic::Ordering::SeqCst));
        assert!(p.begin(7, || true).is_none());
    }

    #[test]
    fn a_waiter_that_gives_up_makes_the_push_drop_its_pages() {
        let p = PagePush::default();
        let push = p.begin(7, || true).unwrap();
        let start = Instant::now();
        p.settle(7);
        assert!(start.elapsed() >= MAX_WAIT);
        assert!(p.end(push), "the pages must go");
        p.settle(7); // nothing in progress: returns at once
    }
}
