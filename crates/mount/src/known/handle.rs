//! Open files and directories: FUSE file handles -> opened fids.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::known::listed_attrs::Fetched;
use crate::known::replica::{Listed, Ticket};
use crate::sync::lock;

use crate::fid::FidRef;

/// One FUSE open (or opendir): a fid of its own, opened with Tlopen/Tlcreate.
pub(crate) struct OpenFile {
    /// The open fid; unset while the open is deferred (see [`OpenFile::deferred`]).
    fid: OnceLock<Arc<FidRef>>,
    /// An open for reading that the server has not seen yet, with its Linux open flags:
    /// the first read that the kernel's page cache cannot answer opens it (see
    /// `fs/open.rs`), so an open whose data the kernel already holds costs no round trip.
    pub deferred: Option<i32>,
    /// How to open it again on a new connection (see `crate::restore`).
    pub reopen: Reopen,
    /// It could not be opened again on a new connection: calls on it fail with ESTALE.
    pub stale: AtomicBool,
    /// Lock owners that took a POSIX lock through this handle: their locks are released
    /// when they close it (FLUSH), as POSIX requires.
    pub lock_owners: Mutex<HashSet<u64>>,
    /// Directory entries read ahead of the kernel (directories only).
    pub dir: Mutex<DirStream>,
    /// A directory handle that lists through its node's own fid, unopened (the crossfs
    /// extension's Treaddirattr needs no open fid): opening and closing it cost nothing.
    pub listing_only: bool,
}

/// What an open file was opened as: its node and the Tlopen flags (without create,
/// exclusive or truncate, which happened once).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reopen {
    pub node: u64,
    pub flags: u32,
}

impl OpenFile {
    /// An open of `fid`, not yet in any table.
    pub(crate) fn with_fid(fid: Arc<FidRef>, reopen: Reopen) -> Arc<OpenFile> {
        OpenFile::new(OnceLock::from(fid), reopen, None, false)
    }

    /// A directory's open that lists through its node's fid (see
    /// [`OpenFile::listing_only`]), not yet in any table.
    pub(crate) fn listing(node_fid: Arc<FidRef>, reopen: Reopen) -> Arc<OpenFile> {
        OpenFile::new(OnceLock::from(node_fid), reopen, None, true)
    }

    fn new(
        fid: OnceLock<Arc<FidRef>>,
        reopen: Reopen,
        deferred: Option<i32>,
        listing_only: bool,
    ) -> Arc<OpenFile> {
        Arc::new(OpenFile {
            fid,
            deferred,
            reopen,
            stale: AtomicBool::new(false),
            lock_owners: Mutex::default(),
            dir: Mutex::default(),
            listing_only,
        })
    }

    /// The open fid, unless the open is still deferred.
    pub(crate) fn fid(&self) -> Option<&Arc<FidRef>> {
        self.fid.get()
    }

    /// Sets the fid of a deferred open, or, if a concurrent read set one first, keeps that
    /// one (`fid` is then dropped, and clunked). Returns the fid to use.
    pub(crate) fn opened(&self, fid: Arc<FidRef>) -> Arc<FidRef> {
        self.fid.get_or_init(|| fid).clone()
    }
}

impl Reopen {
    pub(crate) fn new(node: u64, flags: u32) -> Reopen {
        use crossfs_wire::open_flags as of;
        Reopen {
            node,
            flags: flags & !(of::CREATE | of::EXCL | of::TRUNC),
        }
    }
}

/// Entries fetched by one Treaddir but not yet handed to the kernel, which asks for a page
/// at a time while one Treaddir returns many pages' worth.
#[derive(Default)]
pub(crate) struct DirStream {
    /// The cookie after which `entries` continue.
    pub from: u64,
    pub entries: VecDeque<Listed>,
    /// The server said there is nothing after `from` + `entries`.
    pub eof: bool,
    /// The whole listing, taken from a directory replica when the directory was opened,
    /// with the server's cookies: nothing is fetched while the kernel asks for what
    /// follows a cookie in it.
    pub snapshot: Option<Arc<[Listed]>>,
    /// The index in `snapshot` of the entry after cookie `from`.
    pub next: usize,
    /// A listing with attributes read from the start so far, to become the directory's
    /// replica if it runs to the end with nothing touching the directory meanwhile.
    pub gathered: Option<(Ticket, crate::known::replica::Listing)>,
    /// The directory's replica ticket taken before the listing was fetched (what a
    /// directory listed in it is anchored with).
    pub ticket: Option<Ticket>,
    /// When the listing was fetched (from the start): a file nothing touched since has
    /// the attributes it was listed with (see `MountState::readdirplus`).
    pub fetched: Option<Fetched>,
}

impl DirStream {
    /// Entries continuing after cookie `offset`: the buffer if it continues there, else
    /// nothing (the caller fetches from `offset`).
    ///
    /// A stream over a replica's listing continues after the entry with cookie `offset`;
    /// a cookie not in it (the kernel's cache of another listing, the directory changed
    /// since) is the server's to continue after: the stream reads from the server then.
    pub(crate) fn seek(&mut self, offset: u64) {
        if let Some(all) = &self.snapshot {
            let after = match offset {
                0 => Some(0),
                _ => all
                    .iter()
                    .position(|l| l.entry.offset == offset)
                    .map(|i| i + 1),
            };
            if let Some(next) = after {
                self.next = next;
                self.from = offset;
                return;
            }
            self.snapshot = None;
            self.from = offset;
            self.entries.clear();
            self.eof = false;
            self.gathered = None;
            return;
        }
        if offset != self.from {
            self.from = offset;
            self.entries.clear();
            self.eof = false;
            // Not a listing from the start any more.
            self.gathered = None;
        }
    }

    /// Whether a read from cookie `offset` found nothing: the listing ends there.
    pub(crate) fn ended_at(&self, offset: u64) -> bool {
        self.eof && self.front().is_none() && self.from == offset
    }

    /// The next entry to hand to the kernel, if one is at hand.
    pub(crate) fn front(&self) -> Option<&Listed> {
        match &self.snapshot {
            Some(all) => all.get(self.next),
            None => self.entries.front(),
        }
    }

    /// Up to `n` of the next entries.
    pub(crate) fn upcoming(&self, n: usize) -> Vec<Listed> {
        match &self.snapshot {
            Some(all) => {
                let rest = all.get(self.next..).unwrap_or_default();
                rest.iter().take(n).cloned().collect()
            }
            None => self.entries.iter().take(n).cloned().collect(),
        }
    }

    /// Marks the first entry as handed to the kernel.
    pub(crate) fn consume(&mut self) {
        let Some(offset) = self.front().map(|e| e.entry.offset) else {
            return;
        };
        match self.snapshot {
            Some(_) => self.next += 1,
            None => {
                self.entries.pop_front();
            }
        }
        self.from = offset;
    }

    /// A stream over a replica's listing (see [`listing_snapshot`]), shared, not copied:
    /// opening a directory of any size costs the same.
    pub(crate) fn from_replica(
        all: Arc<[Listed]>,
        ticket: Option<Ticket>,
        fetched: Fetched,
    ) -> DirStream {
        DirStream {
            from: 0,
            entries: VecDeque::new(),
            eof: true,
            snapshot: Some(all),
            next: 0,
            gathered: None,
            ticket,
            fetched: Some(fetched),
        }
    }
}

/// File handles in use.
#[derive(Default)]
pub(crate) struct HandleTable {
    open: Mutex<HashMap<u64, Arc<OpenFile>>>,
    next: AtomicU64,
    /// Handles for the opens the kernel no longer sends (see [`Unannounced`]).
    unannounced: Mutex<HashMap<(u64, Unannounced), Kept>>,
    /// The kernel sends no OPEN any more (see [`Unannounced`]).
    pub opens_unannounced: AtomicBool,
    /// The kernel sends no OPENDIR any more (see [`Unannounced::List`]).
    pub dirs_unannounced: AtomicBool,
}

/// Once the mount has answered an OPEN with ENOSYS (`fs/open.rs`), the kernel sends no
/// OPEN or RELEASE for any file again, and every request on an open file comes with handle
/// 0. The mount then keeps handles of its own, one per node and per what the requests
/// need, shared by every open of the node: opened on the server at their first use and
/// closed once unused for [`IDLE_FOR`](crate::known::idle::IDLE_FOR), or when more than
/// [`UNANNOUNCED_KEPT`] are unused. The kernel keeps POSIX locks itself meanwhile (see
/// `MountState::kernel_keeps_locks`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Unannounced {
    /// Reads (and fsync): opened read-only by the first read that needs the server.
    Read,
    /// Writes, opened with these 9P2000.L flags (access, append, sync).
    Write(u32),
    /// A directory's listing as the kernel reads it from offset 0 to its end, once the
    /// mount has answered an OPENDIR with ENOSYS (`fs/open.rs`): made anew by each read
    /// from offset 0, closed by the read that finds nothing more.
    List,
}

/// Unused unannounced handles kept at most: each may hold one of the server's
/// descriptors, which it shares between all its clients.
const UNANNOUNCED_KEPT: usize = 64;
/// How long a file's handle from its create is spared while nothing used it yet: a
/// program writes the file it created next, but one that extracts many files at once
/// (npm, 400 packages) has more than [`UNANNOUNCED_KEPT`] created and not yet written, and
/// each handle closed before its write cost a round trip to open the file again.
const CREATED_SPARED_FOR: std::time::Duration = std::time::Duration::from_secs(1);
/// Unannounced handles kept at most, those spared included.
const UNANNOUNCED_MOST: usize = 1024;

struct Kept {
    file: Arc<OpenFile>,
    used: std::time::Instant,
    /// A created file's handle no request has used yet.
    awaiting_first_use: bool,
}

impl Kept {
    /// Nothing but the table holds it.
    fn unused(&self) -> bool {
        Arc::strong_count(&self.file) == 1
    }

    /// Closed to make room (see [`CREATED_SPARED_FOR`]).
    fn may_make_room(&self, now: std::time::Instant) -> bool {
        self.unused() && !(self.awaiting_first_use && now - self.used < CREATED_SPARED_FOR)
    }
}

impl HandleTable {
    pub(crate) fn insert(&self, fid: Arc<FidRef>, reopen: Reopen) -> u64 {
        self.add(OpenFile::with_fid(fid, reopen))
    }

    /// An open for reading deferred to its first read (see [`OpenFile::deferred`]).
    pub(crate) fn insert_deferred(&self, reopen: Reopen, flags: i32) -> u64 {
        self.add(OpenFile::new(OnceLock::new(), reopen, Some(flags), false))
    }

    /// Gives `file` a handle (never 0).
    pub(crate) fn add(&self, file: Arc<OpenFile>) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.open).insert(fh, file);
        fh
    }

    pub(crate) fn get(&self, fh: u64) -> Option<Arc<OpenFile>> {
        lock(&self.open).get(&fh).cloned()
    }

    /// Forgets `fh`; its fid is clunked when the last request using it is answered.
    pub(crate) fn remove(&self, fh: u64) -> Option<Arc<OpenFile>> {
        lock(&self.open).remove(&fh)
    }

    /// Handles in use: the kernel's, and the mount's own for unannounced opens.
    pub(crate) fn len(&self) -> usize {
        lock(&self.open).len() + lock(&self.unannounced).len()
    }

    /// Whether an open of node `node` still waits for its first read to reach the server
    /// (see [`OpenFile::deferred`]).
    pub(crate) fn has_deferred(&self, node: u64) -> bool {
        let waits =
            |f: &OpenFile| f.reopen.node == node && f.deferred.is_some() && f.fid().is_none();
        lock(&self.open).values().any(|f| waits(f))
            || lock(&self.unannounced).values().any(|k| waits(&k.file))
    }

    /// Every open file, for restoring them on a new connection (the unannounced handles
    /// too: a request may be on its way with one's fid).
    pub(crate) fn all(&self) -> Vec<Arc<OpenFile>> {
        let unannounced: Vec<_> = lock(&self.unannounced)
            .values()
            .map(|k| k.file.clone())
            .collect();
        let mut all: Vec<_> = lock(&self.open).values().cloned().collect();
        all.extend(unannounced);
        all
    }

    /// The unannounced handle `what` of node `node`; if there is none, a deferred open
    /// (opened by its first use, with Linux flags `deferred`, see [`OpenFile::deferred`]).
    pub(crate) fn unannounced(
        &self,
        node: u64,
        what: Unannounced,
        deferred: i32,
        reopen: Reopen,
    ) -> Arc<OpenFile> {
        if let Some(k) = lock(&self.unannounced).get_mut(&(node, what)) {
            // One that could not be opened again on a new connection is opened anew.
            if !k.file.stale.load(Ordering::Relaxed) {
                k.used = std::time::Instant::now();
                k.awaiting_first_use = false;
                return k.file.clone();
            }
        }
        let file = OpenFile::new(OnceLock::new(), reopen, Some(deferred), false);
        self.keep_unannounced(node, what, file.clone(), false);
        file
    }

    /// Directory `node`'s unannounced listing (see [`Unannounced::List`]), if one is
    /// under way.
    pub(crate) fn listing(&self, node: u64) -> Option<Arc<OpenFile>> {
        let mut kept = lock(&self.unannounced);
        let k = kept.get_mut(&(node, Unannounced::List))?;
        k.used = std::time::Instant::now();
        Some(k.file.clone()).filter(|f| !f.stale.load(Ordering::Relaxed))
    }

    /// Makes `file` directory `node`'s unannounced listing, in place of any before.
    pub(crate) fn keep_listing(&self, node: u64, file: Arc<OpenFile>) {
        self.keep_unannounced(node, Unannounced::List, file, false);
    }

    /// Closes directory `node`'s unannounced listing `file`: the kernel has read it all.
    pub(crate) fn end_listing(&self, node: u64, file: &Arc<OpenFile>) {
        let mut kept = lock(&self.unannounced);
        let key = (node, Unannounced::List);
        if kept.get(&key).is_some_and(|k| Arc::ptr_eq(&k.file, file)) {
            kept.remove(&key);
        }
    }

    /// Makes `fid` (a file just created and opened) node `node`'s unannounced handle `what`.
    pub(crate) fn adopt_unannounced(
        &self,
        node: u64,
        what: Unannounced,
        fid: Arc<FidRef>,
        reopen: Reopen,
    ) {
        self.keep_unannounced(node, what, OpenFile::with_fid(fid, reopen), true);
    }

    fn keep_unannounced(
        &self,
        node: u64,
        what: Unannounced,
        file: Arc<OpenFile>,
        awaiting_first_use: bool,
    ) {
        let mut kept = lock(&self.unannounced);
        let mut gone: Vec<Kept> = Vec::new();
        let now = std::time::Instant::now();
        if kept.len() >= UNANNOUNCED_KEPT {
            // The least recently used half of the unused ones, sparing created files'
            // handles not used yet, unless there are too many of them too.
            let all = kept.len() >= UNANNOUNCED_MOST;
            let mut unused: Vec<_> = kept
                .iter()
                .filter(|(_, k)| {
                    if all {
                        k.unused()
                    } else {
                        k.may_make_room(now)
                    }
                })
                .map(|(&key, k)| (k.used, key))
                .collect();
            unused.sort_unstable_by_key(|(used, _)| *used);
            let drop = unused.iter().take(UNANNOUNCED_KEPT / 2);
            gone.extend(drop.filter_map(|(_, key)| kept.remove(key)));
        }
        let replaced = kept.insert(
            (node, what),
            Kept {
                file,
                used: now,
                awaiting_first_use,
            },
        );
        drop(kept);
        drop((gone, replaced)); // clunked outside the lock
    }

    /// Closes node `node`'s unannounced handles that no request is using: it was removed
    /// or forgotten, and the server's open of it would keep a removed file's space.
    pub(crate) fn forget_unannounced(&self, node: u64) {
        self.close_unannounced(|&(n, _), _| n == node);
    }

    /// Closes the unannounced handles unused since `before` (all unused ones for `None`);
    /// returns how many.
    pub(crate) fn expire_unannounced(&self, before: Option<std::time::Instant>) -> usize {
        self.close_unannounced(|_, used| before.is_none_or(|b| used < b))
    }

    /// Closes the unannounced handles that no request is using and `which` picks (by key
    /// and time of last use); returns how many.
    fn close_unannounced(
        &self,
        which: impl Fn(&(u64, Unannounced), std::time::Instant) -> bool,
    ) -> usize {
        let gone: Vec<Kept> = {
            let mut kept = lock(&self.unannounced);
            let keys: Vec<_> = kept
                .iter()
                .filter(|(key, k)| k.unused() && which(key, k.used))
                .map(|(&key, _)| key)
                .collect();
            keys.iter().filter_map(|k| kept.remove(k)).collect()
        };
        gone.len() // clunked here, outside the lock
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::known::replica::listing_snapshot;
    use crossfs_wire::Qid;
    use crossfs_wire::{DirEntry, Rgetattr};

    fn reopen(node: u64) -> Reopen {
        Reopen::new(node, crossfs_wire::open_flags::RDONLY)
    }

    fn unannounced(t: &HandleTable, node: u64, what: Unannounced) -> Arc<OpenFile> {
        t.unannounced(node, what, libc::O_RDONLY, reopen(node))
    }

    fn kept(t: &HandleTable) -> usize {
        lock(&t.unannounced).len()
    }

    #[test]
    fn unannounced_handles_are_shared_per_node_and_use() {
        let t = HandleTable::default();
        let a = unannounced(&t, 1, Unannounced::Read);
        assert!(Arc::ptr_eq(&a, &unannounced(&t, 1, Unannounced::Read)));
        assert!(!Arc::ptr_eq(&a, &unannounced(&t, 2, Unannounced::Read)));
        let w = unannounced(&t, 1, Unannounced::Write(1));
        assert!(!Arc::ptr_eq(&a, &w));
        assert_eq!(a.deferred, Some(libc::O_RDONLY), "opened by its first use");
        // One that could not be opened again on a new connection is replaced.
        a.stale.store(true, Ordering::Relaxed);
        assert!(!Arc::ptr_eq(&a, &unannounced(&t, 1, Unannounced::Read)));
    }

    #[test]
    fn unannounced_handles_in_use_stay_and_the_unused_are_bounded() {
        let t = HandleTable::default();
        let held = unannounced(&t, 0, Unannounced::Read);
        for node in 1..=(3 * UNANNOUNCED_KEPT as u64) {
            drop(unannounced(&t, node, Unannounced::Read));
        }
        assert!(kept(&t) <= UNANNOUNCED_KEPT, "{}", kept(&t));
        assert!(Arc::ptr_eq(&held, &unannounced(&t, 0, Unannounced::Read)));
        // Forgetting a node closes its unused handles only.
        let last = 3 * UNANNOUNCED_KEPT as u64;
        t.forget_unannounced(last);
        t.forget_unannounced(0);
        assert!(Arc::ptr_eq(&held, &unannounced(&t, 0, Unannounced::Read)));
        assert!(lock(&t.unannounced).keys().all(|&(n, _)| n != last));
        // Expiry closes every unused one, never one in use.
        let before = kept(&t);
        assert_eq!(t.expire_unannounced(None), before - 1);
        assert_eq!(kept(&t), 1);
        drop(held);
        let later = std::time::Instant::now() + std::time::Duration::from_secs(1);
        assert_eq!(t.expire_unannounced(Some(later)), 1);
    }

    #[test]
    fn created_files_handles_are_spared_until_first_used_within_a_bound() {
        let t = HandleTable::default();
        let created = |node: u64| {
            let file = OpenFile::new(OnceLock::new(), reopen(node), Some(libc::O_WRONLY), false);
            t.keep_unannounced(node, Unannounced::Write(1), file, true);
        };
        // More created files than are kept unused, none written yet: all stay.
        for node in 1..=(3 * UNANNOUNCED_KEPT as u64) {
            created(node);
        }
        assert_eq!(kept(&t), 3 * UNANNOUNCED_KEPT);
        // Once used, they are unused handles like any other, and make room.
        for node in 1..=(3 * UNANNOUNCED_KEPT as u64) {
            drop(t.unannounced(node, Unannounced::Write(1), libc::O_WRONLY, reopen(node)));
        }
        drop(unannounced(&t, 0, Unannounced::Read));
        assert!(kept(&t) <= 3 * UNANNOUNCED_KEPT - UNANNOUNCED_KEPT / 2 + 1);
        // Never more than UNANNOUNCED_MOST, spared or not.
        for node in 1_000..(1_000 + 2 * UNANNOUNCED_MOST as u64) {
            created(node);
        }
        assert!(kept(&t) <= UNANNOUNCED_MOST, "{}", kept(&t));
    }

    fn entry(offset: u64) -> DirEntry {
        DirEntry {
            qid: Qid::default(),
            offset,
            ty: 8,
            name: format!("f{offset}").into_bytes(),
        }
    }

    #[test]
    fn dir_stream_continues_or_restarts() {
        let mut s = DirStream::default();
        s.seek(0);
        s.entries
            .extend([entry(10), entry(20), entry(30)].map(|entry| Listed { entry, attr: None }));
        s.consume();
        assert_eq!(s.from, 10);
        s.seek(10);
        assert_eq!(s.entries.len(), 2, "continuing keeps the buffer");
        s.seek(0);
        assert!(s.entries.is_empty(), "rewinding drops it");
        assert_eq!(s.from, 0);
    }

    #[test]
    fn a_replica_stream_walks_its_shared_listing_by_the_servers_cookies() {
        let listed = |name: &str, offset: u64| {
            let a = Rgetattr {
                mode: libc::S_IFREG | 0o644,
                ..Rgetattr::default()
            };
            let attr = (!name.starts_with('.')).then(|| Arc::new(a));
            (name.as_bytes().to_vec(), attr, offset)
        };
        let entries = [
            listed(".", 70),
            listed("..", 900),
            listed("a", 40),
            listed("b", 5000),
        ];
        let all = listing_snapshot(entries.into_iter());
        let now = crate::known::listed_attrs::ListedAttrs::default().before_fetch();
        let mut s = DirStream::from_replica(all.clone(), None, now);
        let names =
            |v: Vec<Listed>| -> Vec<Vec<u8>> { v.into_iter().map(|l| l.entry.name).collect() };
        assert_eq!(names(s.upcoming(3)), [&b"."[..], b"..", b"a"]);
        s.consume();
        s.consume();
        assert_eq!(s.from, 900);
        assert_eq!(s.front().map(|l| l.entry.name.clone()), Some(b"a".to_vec()));
        assert_eq!(s.front().unwrap().entry.ty, libc::DT_REG);
        s.consume();
        s.consume();
        assert!(s.front().is_none() && s.eof, "the end of the listing");
        s.seek(70);
        assert_eq!(
            names(s.upcoming(9)),
            [&b".."[..], b"a", b"b"],
            "seeking back re-reads"
        );
        assert!(
            Arc::ptr_eq(s.snapshot.as_ref().unwrap(), &all),
            "shared, not copied"
        );
        // A cookie the listing never gave (another listing's): the server continues.
        s.seek(41);
        assert!(s.snapshot.is_none() && !s.eof && s.front().is_none());
        assert_eq!(s.from, 41);
    }
}
