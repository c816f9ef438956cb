//! Descriptors as a cache, not a wall: every file a client holds (a 9P fid, a FUSE node) is
//! an `Arc<PathHandle>`, which keeps an `O_PATH` descriptor only while the export's
//! [`HandleCache`] has room for it.
//!
//! Guests hold thousands of files (every directory and file their kernel caches), far more
//! than a user's open-file limit of 1,024. So the cache keeps at most `capacity` descriptors;
//! when a handle needs one past that, the descriptor least recently used by any operation
//! (a clock sweep: each use marks it, the sweep clears marks and closes the first unmarked)
//! and not in use right now is closed. A handle whose descriptor was closed opens it again
//! on its next use:
//! - by file handle (`open_by_handle_at`), when the server may (`CAP_DAC_READ_SEARCH`) and
//!   the file system gives handles: the handle is taken from the descriptor as it is
//!   closed, so the same inode comes back wherever it was renamed to, as a kept descriptor
//!   would have followed it;
//! - otherwise by walking its name again beneath its parent (itself a handle, reopened the
//!   same way) with the export's confined walk, and only if that finds the same inode
//!   (device and inode number); a file renamed or removed meanwhile is `ESTALE`.
//!
//! A file made without a name (`O_TMPFILE`, [`HandleCache::adopt_anonymous`]) has no name to
//! walk: closed, it comes back by file handle alone, where the file system finds an unnamed
//! inode by its handle (ext4 and tmpfs do, while something holds the file open), and is
//! `ESTALE` otherwise, as a removed file is.
//!
//! Confinement holds through every reopen: a walk is the same `openat2` step as any lookup,
//! and a file handle is only ever one the server took from a descriptor it had reached
//! confined (clients never send handles).
//!
//! A descriptor in use ([`PathHandle::fd`] returns it pinned) is never closed under its
//! user: the cache may hold a few more than `capacity` while operations run.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

use rustix::fs::OFlags;
use rustix::io::Errno;

use crate::sys::{self, FileHandle};
use crate::{lock, ExportResult, Statx};

/// A descriptor pinned for one operation: it stays open while this lives.
pub type PinnedFd = Arc<OwnedFd>;

/// Reopening by file handle: a descriptor on the export's mount, and that mount's id.
#[derive(Debug)]
struct ByHandle {
    mount_fd: OwnedFd,
    mount_id: i32,
}

/// The export's descriptors of handles, at most `capacity` at a time (see the module doc).
#[derive(Debug)]
pub struct HandleCache {
    capacity: usize,
    openat2: bool,
    by_handle: Option<ByHandle>,
    /// Handles holding a descriptor (and dead ones, removed as the sweep meets them).
    ring: Mutex<Ring>,
    /// Handles holding a descriptor now.
    open: AtomicUsize,
    /// Handles alive, descriptor or not (the root included).
    handles: AtomicUsize,
    /// Bytes of their allocations (see [`PathHandle::heap_bytes`]).
    handle_bytes: AtomicUsize,
    /// Handles dropped while holding a descriptor, whose `Weak` is still in the ring (which
    /// keeps their `Arc`'s allocation until a sweep or [`HandleCache::compact`] removes
    /// it). Changed with wrapping arithmetic: a sweep may remove an entry just before the
    /// drop that counts it, so read it through [`HandleCache::dead_in_ring`].
    dead: AtomicUsize,
    closed: AtomicU64,
    reopened: AtomicU64,
}

#[derive(Debug, Default)]
struct Ring {
    entries: Vec<Weak<PathHandle>>,
    hand: usize,
}

/// What the cache did, for `crossfs stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandleStats {
    /// The most descriptors the cache keeps.
    pub capacity: usize,
    /// Descriptors kept now.
    pub open: usize,
    /// Handles alive (each a file some client holds, with or without a descriptor; the
    /// export root included).
    pub handles: usize,
    /// Bytes the handles and the cache's own table hold: each handle's allocation, its
    /// name (to walk again) and, once its descriptor was closed, its file handle; and the
    /// clock's table of handles holding a descriptor. Shared by every client of both doors
    /// (a handle is held by the fids or nodes that reached it, clones and children
    /// included), so counted here once, not per connection.
    pub bytes: usize,
    /// Descriptors closed to make room, since the start.
    pub closed: u64,
    /// Descriptors opened again, since the start.
    pub reopened: u64,
    /// Whether reopening goes by file handle (otherwise by walking the name again).
    pub by_file_handle: bool,
}

impl HandleCache {
    /// A cache of `capacity` descriptors (at least 4) for the export whose root is `root`
    /// (an `O_PATH` descriptor; `proc_fd` reopens it as the mount descriptor file handles
    /// need). With `file_handles`, they are used if a round trip through one works on the
    /// root; otherwise (and without) closed handles are walked again.
    pub fn new(
        root: &OwnedFd,
        proc_fd: &OwnedFd,
        capacity: usize,
        openat2: bool,
        file_handles: bool,
    ) -> Arc<HandleCache> {
        Arc::new(HandleCache {
            capacity: capacity.max(4),
            openat2,
            by_handle: file_handles.then(|| by_handle(root, proc_fd)).flatten(),
            ring: Mutex::default(),
            open: AtomicUsize::new(0),
            handles: AtomicUsize::new(0),
            handle_bytes: AtomicUsize::new(0),
            dead: AtomicUsize::new(0),
            closed: AtomicU64::new(0),
            reopened: AtomicU64::new(0),
        })
    }

    /// The handle of the export root: its descriptor is never closed.
    pub fn root(self: &Arc<Self>, fd: OwnedFd, st: &Statx) -> Arc<PathHandle> {
        let handle = Arc::new(PathHandle {
            cache: self.clone(),
            key: key_of(st),
            origin: Origin::Root,
            file_handle: Mutex::new(None),
            fd: Mutex::new(Some(Arc::new(fd))),
            used: AtomicBool::new(true),
        });
        self.born(&handle);
        handle
    }

    /// Takes `fd`, found as `name` beneath `parent`, into the cache.
    pub fn adopt(
        self: &Arc<Self>,
        fd: OwnedFd,
        st: &Statx,
        parent: &Arc<PathHandle>,
        name: CString,
    ) -> Arc<PathHandle> {
        self.adopt_from(fd, st, Origin::Named(parent.clone(), name))
    }

    /// Takes `fd`, a file that has no name (made with `O_TMPFILE`), into the cache. Its
    /// descriptor counts and may be closed like any other; only a file handle finds the
    /// file again (see the module doc).
    pub fn adopt_anonymous(self: &Arc<Self>, fd: OwnedFd, st: &Statx) -> Arc<PathHandle> {
        self.adopt_from(fd, st, Origin::Anonymous)
    }

    fn adopt_from(self: &Arc<Self>, fd: OwnedFd, st: &Statx, origin: Origin) -> Arc<PathHandle> {
        let handle = Arc::new(PathHandle {
            cache: self.clone(),
            key: key_of(st),
            origin,
            file_handle: Mutex::new(None),
            fd: Mutex::new(Some(Arc::new(fd))),
            used: AtomicBool::new(true),
        });
        self.born(&handle);
        self.register(&handle);
        handle
    }

    /// Counts a new handle and its bytes.
    fn born(&self, handle: &PathHandle) {
        self.handles.fetch_add(1, Relaxed);
        self.handle_bytes.fetch_add(handle.heap_bytes(), Relaxed);
    }

    /// What the cache holds and did.
    pub fn stats(&self) -> HandleStats {
        let (ring, dead) = {
            let ring = lock(&self.ring);
            (ring.entries.capacity(), self.dead_in_ring(&ring))
        };
        let handles = self.handles.load(Relaxed);
        let open = self.open.load(Relaxed);
        // A handle's descriptor is an `Arc` of its own: one per handle in `open`, and the
        // root's, which `open` leaves out.
        let descriptors = open + usize::from(handles > 0);
        HandleStats {
            capacity: self.capacity,
            open,
            handles,
            bytes: self.handle_bytes.load(Relaxed)
                + dead * crate::memory::arc_bytes::<PathHandle>()
                + descriptors * crate::memory::arc_bytes::<OwnedFd>()
                + crate::memory::buffer_bytes::<Weak<PathHandle>>(ring),
            closed: self.closed.load(Relaxed),
            reopened: self.reopened.load(Relaxed),
            by_file_handle: self.by_handle.is_some(),
        }
    }

    /// Counts a handle that now holds a descriptor, closing others past the capacity.
    fn register(&self, handle: &Arc<PathHandle>) {
        let mut ring = lock(&self.ring);
        ring.entries.push(Arc::downgrade(handle));
        let open = self.open.fetch_add(1, Relaxed) + 1;
        if open > self.capacity {
            self.sweep(&mut ring, open - self.capacity);
        }
        if self.dead_in_ring(&ring) > open + 64 {
            self.compact(&mut ring);
        }
    }

    /// Removes the entries of dropped handles. The sweep removes those it passes, but it
    /// runs only past the capacity: without this, a server below its capacity (the usual
    /// case with a large open-file limit) kept one entry, and the dropped handle's
    /// allocation with it, for every walk its clients ever made. Run when the dead entries
    /// outnumber the live ones (and 64), so its cost is constant per dropped handle.
    fn compact(&self, ring: &mut Ring) {
        let before = ring.entries.len();
        ring.entries.retain(|h| h.strong_count() > 0);
        self.dead.fetch_sub(before - ring.entries.len(), Relaxed);
        if ring.hand >= ring.entries.len() {
            ring.hand = 0;
        }
    }

    /// Entries in `ring` whose handle was dropped (as counted; see `dead`).
    fn dead_in_ring(&self, ring: &Ring) -> usize {
        let dead = self.dead.load(Relaxed) as isize;
        dead.clamp(0, ring.entries.len() as isize) as usize
    }

    /// Closes up to `n` descriptors that were not used since the sweep last passed them
    /// and are not in use now. Gives up after two turns (everything is in use).
    fn sweep(&self, ring: &mut Ring, mut n: usize) {
        let mut steps = 2 * ring.entries.len();
        while n > 0 && steps > 0 && !ring.entries.is_empty() {
            steps -= 1;
            if ring.hand >= ring.entries.len() {
                ring.hand = 0;
            }
            let at = ring.hand;
            let Some(handle) = ring.entries[at].upgrade() else {
                // Dropped: its descriptor went with it (and was uncounted then).
                ring.entries.swap_remove(at);
                self.dead.fetch_sub(1, Relaxed);
                continue;
            };
            if handle.used.swap(false, Relaxed) {
                ring.hand += 1;
                continue;
            }
            // A handle busy reopening, or pinned by an operation, is passed over.
            let Ok(mut slot) = handle.fd.try_lock() else {
                ring.hand += 1;
                continue;
            };
            match slot.as_ref() {
                Some(fd) if Arc::strong_count(fd) == 1 => {
                    if self.by_handle.is_some() {
                        handle.remember_file_handle(fd, self);
                    }
                    *slot = None;
                    self.open.fetch_sub(1, Relaxed);
                    self.closed.fetch_add(1, Relaxed);
                    ring.entries.swap_remove(at);
                    n -= 1;
                }
                Some(_) => ring.hand += 1,
                None => {
                    ring.entries.swap_remove(at);
                }
            }
        }
    }
}

/// Whether file handles work here: the root's handle opens the root again.
fn by_handle(root: &OwnedFd, proc_fd: &OwnedFd) -> Option<ByHandle> {
    let (handle, mount_id) = sys::file_handle(root.as_fd()).ok()?;
    let mount_fd = sys::open_dir_for_handles(proc_fd.as_fd(), root.as_fd()).ok()?;
    let again = sys::open_by_handle(mount_fd.as_fd(), &handle, OFlags::PATH).ok()?;
    let (a, b) = (
        sys::stat(root.as_fd()).ok()?,
        sys::stat(again.as_fd()).ok()?,
    );
    (key_of(&a) == key_of(&b)).then_some(ByHandle { mount_fd, mount_id })
}

fn key_of(st: &Statx) -> (u64, u64) {
    (
        rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
        st.stx_ino,
    )
}

/// How a handle whose descriptor was closed is found again (besides its file handle).
#[derive(Debug)]
enum Origin {
    /// The export root, whose descriptor is never closed.
    Root,
    /// Found as this name beneath this directory: walked again.
    Named(Arc<PathHandle>, CString),
    /// Made without a name (`O_TMPFILE`): nothing to walk.
    Anonymous,
}

/// A file a client holds: its inode, and an `O_PATH` descriptor while the cache keeps one.
#[derive(Debug)]
pub struct PathHandle {
    cache: Arc<HandleCache>,
    /// Device and inode number: what a reopen must find.
    key: (u64, u64),
    /// Where it was found, to walk again.
    origin: Origin,
    /// Its file handle, taken when its descriptor was first closed.
    file_handle: Mutex<Option<FileHandle>>,
    fd: Mutex<Option<PinnedFd>>,
    /// Used since the sweep last passed it.
    used: AtomicBool,
}

impl PathHandle {
    /// The `O_PATH` descriptor, opened again if the cache closed it, pinned until the
    /// returned value is dropped.
    ///
    /// # Errors
    /// `ESTALE` when the file cannot be reached again (removed, or renamed where only a
    /// walk could find it); what the reopen says otherwise.
    pub fn fd(self: &Arc<Self>) -> ExportResult<PinnedFd> {
        self.used.store(true, Relaxed);
        let mut slot = lock(&self.fd);
        if let Some(fd) = &*slot {
            return Ok(fd.clone());
        }
        let fd = Arc::new(self.reopen()?);
        *slot = Some(fd.clone());
        drop(slot);
        self.cache.reopened.fetch_add(1, Relaxed);
        self.cache.register(self);
        Ok(fd)
    }

    /// Device and inode number.
    pub fn key(&self) -> (u64, u64) {
        self.key
    }

    /// Whether the file was made without a name ([`HandleCache::adopt_anonymous`]), so that
    /// a handle found by name for the same inode, once it has one, is the better to keep.
    pub fn is_anonymous(&self) -> bool {
        matches!(self.origin, Origin::Anonymous)
    }

    /// Bytes of this handle's allocations: the `Arc` holding it, its name and its file
    /// handle when it has one (what the cache counts as it was made, and as it is dropped).
    fn heap_bytes(&self) -> usize {
        let name = match &self.origin {
            Origin::Named(_, name) => name.as_bytes_with_nul().len(),
            Origin::Root | Origin::Anonymous => 0,
        };
        let file_handle = lock(&self.file_handle)
            .as_ref()
            .map_or(0, FileHandle::heap_bytes);
        crate::memory::arc_bytes::<PathHandle>() + name + file_handle
    }

    fn remember_file_handle(&self, fd: &OwnedFd, cache: &HandleCache) {
        let mut known = lock(&self.file_handle);
        if known.is_some() {
            return;
        }
        if let (Ok((handle, mount_id)), Some(by)) = (sys::file_handle(fd.as_fd()), &cache.by_handle)
        {
            if mount_id == by.mount_id {
                cache.handle_bytes.fetch_add(handle.heap_bytes(), Relaxed);
                *known = Some(handle);
            }
        }
    }

    fn reopen(&self) -> ExportResult<OwnedFd> {
        let by_handle = lock(&self.file_handle).clone();
        let fd = match (by_handle, &self.cache.by_handle, &self.origin) {
            (Some(handle), Some(by), _) => sys::open_by_handle(
                by.mount_fd.as_fd(),
                &handle,
                OFlags::PATH | OFlags::NOFOLLOW,
            )
            .map_err(|e| if e == Errno::NOENT { Errno::STALE } else { e })?,
            (_, _, Origin::Named(parent, name)) => {
                let dir = parent.fd()?;
                sys::walk_one(dir.as_fd(), name, self.cache.openat2).map_err(|e| match e {
                    Errno::NOENT | Errno::NOTDIR => Errno::STALE,
                    e => e,
                })?
            }
            // The root's descriptor is never closed; an unnamed file has no name to walk.
            (_, _, Origin::Root | Origin::Anonymous) => return Err(Errno::STALE.into()),
        };
        if key_of(&sys::stat(fd.as_fd())?) != self.key {
            return Err(Errno::STALE.into());
        }
        Ok(fd)
    }
}

impl Drop for PathHandle {
    fn drop(&mut self) {
        let held = match self.fd.get_mut() {
            Ok(slot) => slot.is_some(),
            Err(poisoned) => poisoned.into_inner().is_some(),
        };
        // The root is never counted.
        if held && !matches!(self.origin, Origin::Root) {
            self.cache.open.fetch_sub(1, Relaxed);
            // Its entry stays in the ring until a sweep or a compaction meets it.
            self.cache.dead.fetch_add(1, Relaxed);
        }
        self.cache.handles.fetch_sub(1, Relaxed);
        self.cache
            .handle_bytes
            .fetch_sub(self.heap_bytes(), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys;

    fn setup(capacity: usize) -> (tempfile::TempDir, Arc<HandleCache>, Arc<PathHandle>) {
        setup_with(capacity, true)
    }

    fn setup_with(
        capacity: usize,
        file_handles: bool,
    ) -> (tempfile::TempDir, Arc<HandleCache>, Arc<PathHandle>) {
        let dir = tempfile::tempdir().unwrap();
        let root = sys::open_root(dir.path()).unwrap();
        let proc_fd = sys::open_proc_fd_dir().unwrap();
        let o2 = sys::has_openat2(root.as_fd());
        let cache = HandleCache::new(&root, &proc_fd, capacity, o2, file_handles);
        let st = sys::stat(root.as_fd()).unwrap();
        let root = cache.root(root, &st);
        (dir, cache, root)
    }

    fn lookup(cache: &Arc<HandleCache>, dir: &Arc<PathHandle>, name: &str) -> Arc<PathHandle> {
        let name = CString::new(name).unwrap();
        let fd = sys::walk_one(dir.fd().unwrap().as_fd(), &name, true).unwrap();
        let st = sys::stat(fd.as_fd()).unwrap();
        cache.adopt(fd, &st, dir, name)
    }

    #[test]
    fn closes_past_capacity_and_reopens_the_same_inode() {
        let (dir, cache, root) = setup(4);
        for i in 0..20 {
            std::fs::write(dir.path().join(format!("f{i}")), format!("{i}")).unwrap();
        }
        let handles: Vec<_> = (0..20)
            .map(|i| lookup(&cache, &root, &format!("f{i}")))
            .collect();
        assert!(cache.stats().open <= 4, "{:?}", cache.stats());
        assert!(cache.stats().closed >= 16);
        for (i, h) in handles.iter().enumerate() {
            let st = sys::stat(h.fd().unwrap().as_fd()).unwrap();
            assert_eq!(st.stx_size, format!("{i}").len() as u64);
            assert_eq!(key_of(&st), h.key());
        }
        assert!(cache.stats().reopened >= 16);
        assert!(cache.stats().open <= 4);
    }

    #[test]
    fn the_bytes_reported_are_the_bytes_allocated() {
        use crate::memory::tests::held_by_this_thread;
        let (dir, cache, root) = setup(4);
        for i in 0..20 {
            std::fs::write(dir.path().join(format!("f{i}")), format!("{i}")).unwrap();
        }
        let mut handles = Vec::with_capacity(20);
        let (bytes, held) = (cache.stats().bytes, held_by_this_thread());
        let grown = |cache: &HandleCache| {
            (
                cache.stats().bytes as isize - bytes as isize,
                held_by_this_thread() - held,
            )
        };
        for i in 0..20 {
            handles.push(lookup(&cache, &root, &format!("f{i}")));
        }
        // Past the capacity: descriptors closed, file handles kept to reopen them.
        assert!(cache.stats().closed >= 16);
        let (counted, allocated) = grown(&cache);
        assert!(counted > 20 * 100, "{counted}");
        assert_eq!(counted, allocated);
        for h in &handles {
            h.fd().unwrap();
        }
        assert_eq!(grown(&cache).0, grown(&cache).1);
        // Dropped, some still in the ring (which keeps their allocation), some not.
        handles.clear();
        assert_eq!(cache.stats().handles, 1);
        let (counted, allocated) = grown(&cache);
        assert_eq!(counted, allocated);
    }

    #[test]
    fn handles_dropped_below_capacity_do_not_pile_up_in_the_ring() {
        let (dir, cache, root) = setup(10_000);
        std::fs::write(dir.path().join("f"), "").unwrap();
        let kept: Vec<_> = (0..10).map(|_| lookup(&cache, &root, "f")).collect();
        for _ in 0..5000 {
            drop(lookup(&cache, &root, "f"));
        }
        let ring = lock(&cache.ring).entries.len();
        assert!(
            ring <= 2 * kept.len() + 66,
            "{ring} ring entries for {} handles",
            kept.len()
        );
        assert_eq!(cache.stats().open, kept.len());
    }

    #[test]
    fn a_pinned_descriptor_is_never_closed() {
        let (dir, cache, root) = setup(4);
        for i in 0..10 {
            std::fs::write(dir.path().join(format!("f{i}")), "").unwrap();
        }
        let first = lookup(&cache, &root, "f0");
        let pin = first.fd().unwrap();
        let _rest: Vec<_> = (1..10)
            .map(|i| lookup(&cache, &root, &format!("f{i}")))
            .collect();
        assert!(
            Arc::ptr_eq(&pin, &first.fd().unwrap()),
            "the pinned descriptor was replaced"
        );
    }

    #[test]
    fn a_file_renamed_while_closed_is_found_or_stale_never_another() {
        let (dir, cache, root) = setup(4);
        std::fs::write(dir.path().join("a"), "a").unwrap();
        let a = lookup(&cache, &root, "a");
        let mut others = Vec::new();
        for i in 0..10 {
            std::fs::write(dir.path().join(format!("f{i}")), "").unwrap();
            others.push(lookup(&cache, &root, &format!("f{i}")));
        }
        assert!(
            lock(&a.fd).is_none(),
            "a's descriptor should have been closed"
        );
        std::fs::rename(dir.path().join("a"), dir.path().join("b")).unwrap();
        std::fs::write(dir.path().join("a"), "another file").unwrap();
        match a.fd() {
            // By file handle: the renamed file itself.
            Ok(fd) => assert_eq!(sys::stat(fd.as_fd()).unwrap().stx_size, 1),
            // By walking: "a" is now another inode.
            Err(e) => assert_eq!(e.errno(), libc::ESTALE),
        }
    }

    #[test]
    fn walking_again_never_follows_a_directory_swapped_for_a_symlink() {
        let (dir, cache, root) = setup_with(4, false);
        assert!(!cache.stats().by_file_handle);
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), "inside").unwrap();
        let d = lookup(&cache, &root, "d");
        let f = lookup(&cache, &d, "f");
        let mut others = Vec::new();
        for i in 0..10 {
            std::fs::write(dir.path().join(format!("o{i}")), "").unwrap();
            others.push(lookup(&cache, &root, &format!("o{i}")));
        }
        assert!(lock(&d.fd).is_none() && lock(&f.fd).is_none());
        // While closed, "d" becomes a symlink to a directory outside with an "f" of its own.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f"), "outside").unwrap();
        std::fs::rename(dir.path().join("d"), dir.path().join("old")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("d")).unwrap();
        assert_eq!(f.fd().unwrap_err().errno(), libc::ESTALE);
        assert_eq!(d.fd().unwrap_err().errno(), libc::ESTALE);
        // Renamed back, the same inodes are found again.
        std::fs::remove_file(dir.path().join("d")).unwrap();
        std::fs::rename(dir.path().join("old"), dir.path().join("d")).unwrap();
        let st = sys::stat(f.fd().unwrap().as_fd()).unwrap();
        assert_eq!((st.stx_size, key_of(&st)), (6, f.key()));
    }

    #[test]
    fn an_unnamed_file_comes_back_by_file_handle_or_is_stale_never_another() {
        for file_handles in [true, false] {
            let (dir, cache, root) = setup_with(4, file_handles);
            let proc_fd = sys::open_proc_fd_dir().unwrap();
            let open = sys::tmpfile(root.fd().unwrap().as_fd(), OFlags::RDWR, 0o600).unwrap();
            sys::pwrite(open.as_fd(), b"unnamed", 0).unwrap();
            let fd = sys::path_handle(proc_fd.as_fd(), open.as_fd()).unwrap();
            let st = sys::stat(fd.as_fd()).unwrap();
            let t = cache.adopt_anonymous(fd, &st);
            assert!(t.is_anonymous() && !root.is_anonymous());
            let mut others = Vec::new();
            for i in 0..10 {
                std::fs::write(dir.path().join(format!("o{i}")), "").unwrap();
                others.push(lookup(&cache, &root, &format!("o{i}")));
            }
            assert!(
                lock(&t.fd).is_none(),
                "its descriptor should have been closed"
            );
            match t.fd() {
                // By file handle (ext4 and tmpfs find an unnamed inode that is still open).
                Ok(fd) => {
                    assert!(cache.stats().by_file_handle);
                    let st = sys::stat(fd.as_fd()).unwrap();
                    assert_eq!((key_of(&st), st.stx_size), (t.key(), 7));
                    let at = root.fd().unwrap();
                    sys::link(proc_fd.as_fd(), fd.as_fd(), at.as_fd(), c"named").unwrap();
                    assert_eq!(std::fs::read(dir.path().join("named")).unwrap(), b"unnamed");
                }
                // No name to walk.
                Err(e) => {
                    assert_eq!(e.errno(), libc::ESTALE);
                    assert!(!file_handles || !cache.stats().by_file_handle);
                }
            }
        }
    }
}
