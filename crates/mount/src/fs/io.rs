//! Open files: open, create, read, write, flush, fsync.
//!
//! Reads and writes are handed to the client and answered from their completions. A FUSE
//! write never exceeds one Twrite (max_write is at most msize - 24, in whole pages); a read
//! larger than one Tread can carry is split into concurrent Treads and reassembled.
//!
//! While change events are followed, an open for reading of a regular file anyone may
//! read is deferred: OPEN is answered at once, and the first READ that reaches the mount
//! opens and reads in one round trip (the crossfs extension's Twalkread). An open whose
//! data the kernel's page cache holds (a repeated `grep -r`, a build reading the same
//! headers) then costs no round trip at all, and a first read one instead of two. What it
//! promises, and what it does not: the file is the one the name led to at the open
//! (checked by its `qid.path`, or held by the node's fid); a removal or rename of it
//! through the mount first walks its node if it has no fid yet (`keep_reachable` in
//! `fs/entry.rs`), and a rename on the host moves where the node is walked from once its
//! event has come. But if it is removed or replaced on the host before that first read
//! (or renamed there before the event comes, or into a directory the guest never looked
//! at), the read fails with `ESTALE` where a local open would still read the old file; and a server that may not open the file
//! after all (its own credentials, an ACL, a security module) fails the read, not the
//! open. Both need a change on the host in the microseconds between a program's open and
//! its first read, or a file readable by others that the server cannot read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossfs_client::ClientError;
use crossfs_wire::{
    open_flags as of, Rmessage, Tcreateattr, Tcreateattrdir, Tfsync, Tlcreate, Tlopen, Tmessage,
    Treadfiles, Twalkopen, Twalkread,
};
use fuser::{
    Errno, FileHandle, FopenFlags, Generation, INodeNo, ReplyCreate, ReplyData, ReplyEmpty,
    ReplyOpen, ReplyWrite,
};

use super::{errno, Caller, MountState};
use crate::ahead::small_files::{SmallFile, Waiter};
use crate::fid::FidRef;
use crate::known::cache::CacheMode;
use crate::known::handle::{DirStream, OpenFile, Reopen};
use crate::known::idle::IdleOpens;
use crate::known::inode::NodeFid;
use crate::known::listed_attrs::ChangeInFlight;
use crate::known::replica::DirLeft;
use crate::remote::{clone_fid, expect_reply, resolve_one, ATTR_MASK};
use crate::sync::lock;

/// Tlopen/Tlcreate flags for a Linux open(2) `flags`.
///
/// With the writeback cache the kernel owns the file size and may read pages of a file
/// opened write-only, so write-only becomes read-write and O_APPEND is left to the kernel
/// (as libfuse's passthrough does). Without it, O_APPEND goes to the server, whose append
/// ignores the offset: appends land at the true end even if the kernel's size is stale.
/// O_DIRECT stays local (the server's buffers need no alignment); O_NOATIME, O_CLOEXEC and
/// O_NOFOLLOW concern the local side only.
pub(crate) fn wire_open_flags(flags: i32, writeback: bool) -> u32 {
    let mut out = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => of::RDONLY,
        libc::O_WRONLY if writeback => of::RDWR,
        libc::O_WRONLY => of::WRONLY,
        _ => of::RDWR,
    };
    let pairs = [
        (libc::O_TRUNC, of::TRUNC),
        (libc::O_EXCL, of::EXCL),
        (libc::O_NONBLOCK, of::NONBLOCK),
        (libc::O_DIRECTORY, of::DIRECTORY),
        (libc::O_DSYNC, of::DSYNC),
    ];
    for (linux, wire) in pairs {
        if flags & linux != 0 {
            out |= wire;
        }
    }
    if flags & libc::O_SYNC == libc::O_SYNC {
        out |= of::SYNC;
    }
    if flags & libc::O_APPEND != 0 && !writeback {
        out |= of::APPEND;
    }
    out
}

/// Whether an open with these Linux flags may change the file's data.
fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

/// A file created and opened: the open fid, the node's fid, its attributes, and what the
/// creation left of its directory, if the server said.
type Created = (
    Arc<FidRef>,
    Arc<FidRef>,
    crossfs_wire::Rgetattr,
    Option<DirLeft>,
);

impl MountState {
    /// FOPEN flags for a newly opened file.
    fn fopen_flags(&self, ino: u64, flags: i32) -> FopenFlags {
        use std::sync::atomic::Ordering::Relaxed;
        let mode = self.config.cache;
        if mode.direct_io() || flags & libc::O_DIRECT != 0 {
            return FopenFlags::FOPEN_DIRECT_IO;
        }
        let keep = match mode {
            CacheMode::Always => true,
            CacheMode::Auto => self.known.inodes.reopen_unchanged(ino),
            CacheMode::Never | CacheMode::Metadata => false,
        };
        let mut f = if keep {
            self.stats.caches.keep_cache_opens.fetch_add(1, Relaxed);
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        };
        // A close sends FLUSH only to drop the POSIX locks taken through the handle (no
        // write is buffered here): a handle that cannot write drops them at RELEASE,
        // which saves a FUSE request per close (README, differences). The kernel
        // ignores this with the writeback cache, which flushes at every close.
        if !writes(flags) {
            f |= FopenFlags::FOPEN_NOFLUSH;
        }
        f
    }

    /// Opens a fresh fid for node `ino`, promoting write-only to read-write for the
    /// writeback cache if the server allows it.
    /// Returns the fid and the Tlopen flags it was opened with.
    fn open_fid(&self, node: &FidRef, flags: i32) -> Result<(Arc<FidRef>, u32), ClientError> {
        let writeback = self.config.cache.writeback();
        let fid = clone_fid(&self.client, node)?;
        let lopen = |f: u32| {
            expect_reply!(
                self.client.call(Tmessage::Lopen(Tlopen {
                    fid: fid.fid(),
                    flags: f
                })),
                Lopen
            )
        };
        let wanted = wire_open_flags(flags, writeback);
        match lopen(wanted) {
            Err(ClientError::Errno(libc::EACCES))
                if writeback && flags & libc::O_ACCMODE == libc::O_WRONLY =>
            {
                let plain = wire_open_flags(flags, false) & !of::APPEND;
                lopen(plain).map(|_| (fid, plain))
            }
            r => r.map(|_| (fid, wanted)),
        }
    }

    /// Opens a fresh fid for node `ino`: with the crossfs extension one Twalkopen (from the
    /// node's fid, or for a node answered from a replica from its directory's, checking
    /// that the name still leads to the node's file), else [`MountState::open_fid`].
    fn open_node(&self, ino: INodeNo, flags: i32) -> Result<(Arc<FidRef>, u32), Errno> {
        if !self.client.has_extensions() {
            let node = self.node(ino)?;
            return self.open_fid(&node, flags).map_err(|e| errno(&e));
        }
        let (base, wnames, lazy) = match self.known.inodes.node_fid(ino.0) {
            Some(NodeFid::Bound(fid)) => (fid, vec![], None),
            Some(NodeFid::Lazy {
                dir_ino,
                name,
                qid_path,
            }) => (
                self.node(INodeNo(dir_ino))?,
                vec![name.clone()],
                Some((dir_ino, name, qid_path)),
            ),
            None => return Err(Errno::ESTALE),
        };
        let walkopen = |wire: u32| {
            let newfid = self.client.alloc_fid();
            let msg = Tmessage::Walkopen(Twalkopen {
                fid: base.fid(),
                newfid,
                wnames: wnames.clone(),
                flags: wire,
                request_mask: ATTR_MASK,
            });
            match self.client.call(msg) {
                Ok(Rmessage::Walkopen(o)) => Ok((FidRef::new(&self.client, newfid), o.attr)),
                Ok(other) => Err(crate::remote::unexpected(other)),
                Err(e) => {
                    self.client.free_fid(newfid);
                    Err(e)
                }
            }
        };
        let writeback = self.config.cache.writeback();
        let wanted = wire_open_flags(flags, writeback);
        let opened = match walkopen(wanted) {
            Err(ClientError::Errno(libc::EACCES))
                if writeback && flags & libc::O_ACCMODE == libc::O_WRONLY =>
            {
                let plain = wire_open_flags(flags, false) & !of::APPEND;
                walkopen(plain).map(|o| (o, plain))
            }
            r => r.map(|o| (o, wanted)),
        };
        let ((fid, a), wire) = match opened {
            Ok(o) => o,
            Err(ClientError::Errno(libc::ENOENT)) if lazy.is_some() => {
                let (dir_ino, name, _) = lazy.unwrap_or_default();
                return Err(self.lazy_failed(dir_ino, &name));
            }
            Err(e) => return Err(errno(&e)),
        };
        if let Some((dir_ino, name, qid_path)) = lazy {
            if a.qid.path != qid_path {
                return Err(self.lazy_failed(dir_ino, &name));
            }
        }
        // The attributes are not recorded as seen: with the writeback cache, what the
        // kernel was last told is what a rescan compares with (see `changes/feed.rs`).
        Ok((fid, wire))
    }

    pub(super) fn open(&self, ino: INodeNo, flags: i32, reply: ReplyOpen) {
        let writes = writes(flags);
        if writes {
            if let Err(e) = self.writable() {
                return reply.error(e);
            }
        }
        let wanted = wire_open_flags(flags, self.config.cache.writeback());
        // Not while the connection is down: the node may not be bound again afterwards,
        // and an open that waits for the server finds that out.
        let reused = (IdleOpens::keeps(wanted) && self.client.is_connected())
            .then(|| self.known.idle.take(ino.0, wanted))
            .flatten()
            .map(|fid| (fid, wanted));
        if reused.is_none() && IdleOpens::keeps(wanted) && self.may_defer_open(ino.0) {
            self.stats
                .caches
                .opens_deferred
                .fetch_add(1, Ordering::Relaxed);
            let fh = self
                .known
                .handles
                .insert_deferred(Reopen::new(ino.0, wanted), flags);
            return reply.opened(FileHandle(fh), self.fopen_flags(ino.0, flags));
        }
        match reused.map_or_else(|| self.open_node(ino, flags), Ok) {
            Ok((fid, wire)) => {
                let fh = self.known.handles.insert(fid, Reopen::new(ino.0, wire));
                if writes {
                    self.ahead.page_push.write_opened(fh, ino.0);
                }
                reply.opened(FileHandle(fh), self.fopen_flags(ino.0, flags));
            }
            Err(e) => reply.error(e),
        }
    }

    /// Whether an open for reading of node `ino` may wait for its first read (see the
    /// module doc): change events keep what the kernel holds exact, the extension's
    /// Twalkread can open and read at once, and anyone may read the file.
    fn may_defer_open(&self, ino: u64) -> bool {
        self.client.has_extensions()
            && self.follows_events()
            && self.client.is_connected()
            && self.known.inodes.readable_by_anyone(ino)
    }

    /// The handle's open fid, opening a deferred open on the server now.
    pub(super) fn file_fid(&self, file: &OpenFile) -> Result<Arc<FidRef>, Errno> {
        if let Some(fid) = file.fid() {
            return Ok(fid.clone());
        }
        let flags = file.deferred.unwrap_or(libc::O_RDONLY);
        let (fid, _) = self.open_node(INodeNo(file.reopen.node), flags)?;
        self.stats
            .caches
            .deferred_opens_sent
            .fetch_add(1, Ordering::Relaxed);
        Ok(file.opened(fid))
    }

    /// The first read of a deferred open: from the file's content fetched with its
    /// directory's small files if that is here (or on the way) and nothing changed the
    /// file since, else [`MountState::walk_and_read`], which may start fetching the files after
    /// it in its directory.
    fn open_and_read(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        offset: u64,
        size: u32,
        reply: ReplyData,
    ) {
        let ino = file.reopen.node;
        let shared = self.clone();
        self.with_small_file(
            ino,
            Box::new(move |found: Option<SmallFile>| {
                let Some(f) = found else {
                    return shared.walk_and_read(file, offset, size, reply);
                };
                // The kernel asks for the access time after a read: these answer it.
                shared.known.inodes.observe(ino, &f.attr, Some(f.fetched));
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(f.data.len());
                let end = start.saturating_add(size as usize).min(f.data.len());
                reply.data(&f.data[start..end]);
            }),
        );
    }

    /// Calls `then` with node `ino`'s content fetched with its directory's small files
    /// (`crate::ahead::small_files`) if that is here and nothing changed the file since, or once
    /// it comes if it is on the way; else with `None`, which the caller then asks the
    /// server for (on a thread that may wait: `then` may be called on the client's reader
    /// thread only with the file). Starts fetching the directory's next small files when
    /// this read makes it time to.
    pub(super) fn with_small_file(self: &Arc<Self>, ino: u64, then: Waiter) {
        let Some(qid_path) = self
            .known
            .inodes
            .qid_path(ino)
            .filter(|_| self.follows_events())
        else {
            return then(None);
        };
        let Some((then, found)) = self.ahead.small_files.find(qid_path, then) else {
            return; // on the way
        };
        let found = found.filter(|f| self.small_file_usable(f));
        if found.is_none() {
            self.fetch_small_files(ino);
        } else {
            self.stats
                .caches
                .small_file_reads
                .fetch_add(1, Ordering::Relaxed);
        }
        then(found);
    }

    /// Whether a small file fetched earlier still holds what the file holds: nothing can
    /// have changed it since it was asked for, events followed all the while.
    ///
    /// And it is the file the kernel knows by that number: with the attributes its node was
    /// last seen with. The host may give a removed file's number to a new one before the
    /// events of either come (a link removed and another made: the kernel would keep the
    /// old link's target for the new one).
    fn small_file_usable(&self, f: &SmallFile) -> bool {
        let status = |s: crate::known::inode::Status| (s.mode, s.size, s.mtime_ns);
        let known = self
            .known
            .inodes
            .ino_of(f.attr.qid.path)
            .and_then(|ino| self.known.inodes.status(ino));
        self.follows_events()
            && known.is_none_or(|k| status(k) == status(crate::known::inode::Status::of(&f.attr)))
            && self
                .known
                .listed
                .reusable_for(f.attr.qid.path, &f.fetched, self.attr_ttl())
                .is_some()
    }

    /// Whether a small file that came may go into the kernel's page cache
    /// (`crate::ahead::pushed_pages`): a regular file with content, in `auto` mode.
    fn may_push(&self, f: &SmallFile) -> bool {
        self.config.cache == CacheMode::Auto
            && f.attr.mode & libc::S_IFMT == libc::S_IFREG
            && !f.data.is_empty()
    }

    /// Starts the thread that pushes small files into the kernel's page cache through
    /// `notifier` (see `crate::ahead::pushed_pages`); it ends with the mount.
    pub(crate) fn start_page_push(self: &Arc<Self>, notifier: fuser::Notifier) {
        self.start_helper(
            "crossfs-pages",
            &self.ahead.pages_to_push,
            move |shared, files| {
                files.iter().for_each(|f| shared.push_pages(&notifier, f));
            },
        );
    }

    /// Pushes a small file's content into the kernel's page cache if nothing changed it
    /// since it was fetched, and the kernel's attributes for it are the ones it came with
    /// (so the kernel's size is its length); its next open then keeps the pages.
    fn push_pages(&self, notifier: &fuser::Notifier, f: &SmallFile) {
        let Some(ino) = self.known.inodes.ino_of(f.attr.qid.path) else {
            return;
        };
        let stamp = crate::attr::stamp(&f.attr);
        let Some(push) = self.ahead.page_push.begin(ino, || {
            self.small_file_usable(f) && self.known.inodes.pages_pushed(ino, stamp)
        }) else {
            return;
        };
        let stored = notifier.store(INodeNo(ino), 0, &f.data);
        if self.ahead.page_push.end(push) {
            let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
        } else if stored.is_ok() {
            self.stats
                .caches
                .pages_pushed
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks for the small regular files after node `ino` in its directory's listing (see
    /// `crate::ahead::small_files`), if this read makes it time to, while events are followed.
    fn fetch_small_files(self: &Arc<Self>, ino: u64) {
        use crate::ahead::small_files::{MAX_FILE, WINDOW};
        if self.server.no_readfiles.load(Ordering::Relaxed) || !self.follows_events() {
            return;
        }
        let Some((dir_ino, name)) = self.known.inodes.found_in(ino) else {
            return;
        };
        if !self.ahead.small_files.read_in(dir_ino) {
            return;
        }
        let (Some(names), Ok(dir)) = (
            self.known.replicas.names(dir_ino),
            self.node(INodeNo(dir_ino)),
        ) else {
            return;
        };
        // Files a deferred open may read, and symbolic links.
        let small = |a: &crossfs_wire::Rgetattr| {
            let link = a.mode & libc::S_IFMT == libc::S_IFLNK;
            (link || crate::attr::stamp(a).readable_by_anyone) && a.size <= u64::from(MAX_FILE)
        };
        // The files after this one, then those before it: a small directory whole.
        let at = names
            .iter()
            .position(|(n, _)| *n == name)
            .map_or(0, |i| i + 1);
        let (before, after) = names.split_at(at);
        let candidates: Vec<(&[u8], u64)> = after
            .iter()
            .chain(before)
            .filter_map(|(n, a)| {
                let qid_path = match a {
                    Some(a) if small(a) => a.qid.path,
                    Some(_) => return None,
                    // Changed since listed: the file the kernel knows by that name, if a
                    // regular one or a link (the server leaves out what is too large now).
                    None => match self.known.inodes.named(dir_ino, n)? {
                        (q, libc::S_IFREG | libc::S_IFLNK) => q,
                        _ => return None,
                    },
                };
                Some((&n[..], qid_path))
            })
            .take(WINDOW)
            .collect();
        let fresh: std::collections::HashSet<u64> = self
            .ahead
            .small_files
            .coming(candidates.iter().map(|c| c.1), |f| {
                !self.small_file_usable(f)
            })
            .into_iter()
            .collect();
        let wanted: Vec<&(&[u8], u64)> =
            candidates.iter().filter(|c| fresh.contains(&c.1)).collect();
        if wanted.is_empty() {
            return self.ahead.small_files.barren(dir_ino);
        }
        for batch in wanted.chunks(crossfs_wire::MAX_WALK_ELEMENTS) {
            let asked: Vec<u64> = batch.iter().map(|c| c.1).collect();
            let msg = Tmessage::Readfiles(Treadfiles {
                fid: dir.fid(),
                names: batch.iter().map(|c| c.0.to_vec()).collect(),
                max_each: MAX_FILE,
            });
            let fetched = self.known.listed.before_fetch();
            let (shared, dir) = (self.clone(), dir.clone());
            self.client.call_async(
                msg,
                Box::new(move |r| {
                    drop(dir);
                    let files = match r {
                        Ok(Rmessage::Readfiles(r)) => r.data.0,
                        Err(ClientError::Errno(libc::EOPNOTSUPP)) => {
                            shared.server.no_readfiles.store(true, Ordering::Relaxed);
                            Vec::new()
                        }
                        _ => Vec::new(),
                    };
                    let arrived: Vec<(u64, SmallFile)> = crossfs_wire::FileData::iter(&files)
                        .map_while(Result::ok)
                        .map(|f| {
                            let file = SmallFile {
                                data: f.data.into(),
                                attr: Arc::new(f.attr),
                                fetched,
                            };
                            (file.attr.qid.path, file)
                        })
                        .collect();
                    shared
                        .stats
                        .caches
                        .small_files_fetched
                        .fetch_add(arrived.len() as u64, Ordering::Relaxed);
                    let to_push: Vec<SmallFile> = arrived
                        .iter()
                        .map(|(_, f)| f)
                        .filter(|f| shared.may_push(f))
                        .cloned()
                        .collect();
                    let woken = shared.ahead.small_files.arrived(&asked, arrived);
                    // A read whose file did not come (or changed since) goes to the server,
                    // which may mean a walk that waits for a reply: not on the client's
                    // reader thread, where this runs.
                    let (here, to_server): (Vec<_>, Vec<_>) = woken
                        .into_iter()
                        .map(|(w, f)| (w, f.filter(|f| shared.small_file_usable(f))))
                        .partition(|(_, f)| f.is_some());
                    for (w, f) in here {
                        shared
                            .stats
                            .caches
                            .small_file_reads
                            .fetch_add(1, Ordering::Relaxed);
                        w(f);
                    }
                    // Not here: a push waits for pages that a read in flight holds, and
                    // that read may wait for a reply this thread must deliver.
                    if let (false, Some(push)) =
                        (to_push.is_empty(), shared.ahead.pages_to_push.get())
                    {
                        let _ = push.try_send(to_push);
                    }
                    if to_server.is_empty() {
                        return;
                    }
                    let spawned = std::thread::Builder::new()
                        .name("crossfs-read".into())
                        .spawn(move || to_server.into_iter().for_each(|(w, _)| w(None)));
                    if let Err(e) = spawned {
                        tracing::warn!("cannot start a thread to read files: {e}");
                    }
                }),
            );
        }
    }

    /// Twalkread opens the file and reads it in one round trip, from the node's fid or,
    /// for a node answered from a replica, from its directory's by name, checking that
    /// the name still leads to the node's file.
    fn walk_and_read(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        offset: u64,
        size: u32,
        reply: ReplyData,
    ) {
        let (base, wnames, lazy) = match self.known.inodes.node_fid(file.reopen.node) {
            Some(NodeFid::Bound(fid)) => (fid, vec![], None),
            Some(NodeFid::Lazy {
                dir_ino,
                name,
                qid_path,
            }) => match self.node(INodeNo(dir_ino)) {
                Ok(dir) => (dir, vec![name.clone()], Some((dir_ino, name, qid_path))),
                Err(e) => return reply.error(e),
            },
            None => return reply.error(Errno::ESTALE),
        };
        let ino = file.reopen.node;
        self.reading(ino);
        let fetched = self.known.listed.before_fetch();
        let newfid = self.client.alloc_fid();
        let msg = Tmessage::Walkread(Twalkread {
            fid: base.fid(),
            newfid,
            wnames,
            flags: file.reopen.flags,
            offset,
            count: size,
            request_mask: ATTR_MASK,
        });
        let shared = self.clone();
        self.client.call_async(
            msg,
            Box::new(move |r| {
                drop(base);
                let read = match r {
                    Ok(Rmessage::Walkread(r)) => r,
                    Ok(other) => {
                        shared.client.free_fid(newfid);
                        return reply.error(errno(&crate::remote::unexpected(other)));
                    }
                    Err(ClientError::Errno(libc::EOPNOTSUPP)) => {
                        shared.client.free_fid(newfid);
                        shared.server.no_walkread.store(true, Ordering::Relaxed);
                        // Opening waits for the server: not on the client's reader thread.
                        let again = shared.clone();
                        let spawned = std::thread::Builder::new()
                            .name("crossfs-open".into())
                            .spawn(move || again.read_open(file, offset, size, reply));
                        if let Err(e) = spawned {
                            tracing::warn!("cannot start a thread to open a file: {e}");
                        }
                        return;
                    }
                    Err(ClientError::Errno(libc::ENOENT)) if lazy.is_some() => {
                        shared.client.free_fid(newfid);
                        let (dir_ino, name, _) = lazy.unwrap_or_default();
                        return reply.error(shared.lazy_failed(dir_ino, &name));
                    }
                    Err(e) => {
                        shared.client.free_fid(newfid);
                        return reply.error(errno(&e));
                    }
                };
                // Bound now: clunked when dropped, here or with the handle.
                let fid = FidRef::new(&shared.client, newfid);
                if let Some((dir_ino, name, qid_path)) = lazy {
                    if read.wqids.last().map(|q| q.path) != Some(qid_path) {
                        return reply.error(shared.lazy_failed(dir_ino, &name));
                    }
                }
                shared
                    .stats
                    .caches
                    .deferred_opens_sent
                    .fetch_add(1, Ordering::Relaxed);
                // The kernel asks for the access time after a read: these answer it.
                shared.known.inodes.observe(ino, &read.attr, Some(fetched));
                file.opened(fid);
                reply.data(&read.data.0);
            }),
        );
    }

    /// A file closed: its fid is kept for the next open of the file, if it was opened for
    /// reading only (see `crate::known::idle`), outside `never` mode.
    pub(crate) fn keep_idle(&self, file: &crate::known::handle::OpenFile) {
        use std::sync::atomic::Ordering::Relaxed;
        let keep = self.config.cache != CacheMode::Never
            && !file.listing_only
            && !file.stale.load(Relaxed)
            && IdleOpens::keeps(file.reopen.flags)
            && lock(&file.lock_owners).is_empty();
        match file.fid() {
            Some(fid) if keep => {
                self.known
                    .idle
                    .put(file.reopen.node, file.reopen.flags, fid.clone())
            }
            _ => {}
        }
    }

    /// With the crossfs extension (outside `never` mode) a directory is listed through its
    /// node's own fid, so opening it sends nothing (and closing it neither).
    pub(super) fn opendir(&self, ino: INodeNo, reply: ReplyOpen) {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let listing_only = self.client.has_extensions() && self.config.cache != CacheMode::Never;
        if listing_only {
            // Fetched ahead right now (`crate::ahead::tree_walk`): its replica will answer.
            self.ahead.tree_walk.wait_for(ino.0);
        }
        // The listing's first entries may come with the directory's fid: as `fill` does,
        // the read is noted first, then the ticket and the time are taken.
        let listing = listing_only && !self.known.replicas.has(ino.0);
        // Claimed, so that the walk ahead does not fetch it a second time meanwhile.
        let _fetching = listing.then(|| self.ahead.tree_walk.fetch(ino.0));
        if listing {
            self.reading(ino.0);
        }
        let (ticket, fetched) = (
            self.known.replicas.ticket(ino.0),
            self.known.listed.before_fetch(),
        );
        let mut first = None;
        let opened = if listing_only {
            self.dir_fid(ino.0, listing).map(|(fid, listed)| {
                first = listed;
                (fid, wire_open_flags(flags, false))
            })
        } else {
            self.open_node(ino, flags)
        };
        match opened {
            Ok((fid, wire)) => {
                let reopen = Reopen::new(ino.0, wire);
                let fh = if listing_only {
                    self.known.handles.insert_listing(fid, reopen)
                } else {
                    self.known.handles.insert(fid, reopen)
                };
                if self.replicas_usable() {
                    // Taken first: directories listed are anchored with it (their own
                    // replicas may then answer), unless the directory changed since.
                    let ticket = self.known.replicas.ticket(ino.0);
                    if let (Some((listing, fetched)), Some(file)) = (
                        self.known.replicas.listing(ino.0),
                        self.known.handles.get(fh),
                    ) {
                        // The listing is answered from the replica, as it is now.
                        *lock(&file.dir) = DirStream::from_replica(listing, ticket, fetched);
                        first = None;
                    }
                }
                if let (Some(listed), Some(file)) = (first, self.known.handles.get(fh)) {
                    self.take_listed(ino.0, &mut lock(&file.dir), listed, ticket, fetched);
                }
                // Directory listings may stay in the page cache where names do too; the
                // kernel drops them when the directory changes through this mount, and
                // the change events drop them when it changes on the host.
                let flags = match self.config.cache {
                    CacheMode::Metadata | CacheMode::Always => {
                        FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
                    }
                    CacheMode::Auto if self.follows_events() => {
                        FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
                    }
                    CacheMode::Never | CacheMode::Auto => FopenFlags::empty(),
                };
                reply.opened(FileHandle(fh), flags);
            }
            Err(e) => reply.error(e),
        }
    }

    /// Tlcreate on a clone of the directory's fid (which then names the new, open file),
    /// then a walk for the node's own fid and a getattr, in one round trip.
    ///
    /// The kernel sends CREATE only for a name it believes missing; with negative caching
    /// the name may have appeared on the host since. Without O_EXCL that must open the
    /// existing file, so EEXIST falls back to lookup + open.
    pub(super) fn create(
        &self,
        parent: INodeNo,
        name: &[u8],
        mode: u32,
        flags: i32,
        caller: Caller,
        reply: ReplyCreate,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        let dir = match self.node(parent) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        let wire = wire_open_flags(flags, self.config.cache.writeback());
        if self.client.has_extensions() {
            match self.create_in_one((parent.0, &dir), name, wire, mode, caller) {
                Ok((fid, node, a, left)) => {
                    let created = (fid, node, a, left);
                    return self.reply_created((parent, name), created, (flags, wire), reply);
                }
                Err(ClientError::Errno(libc::EEXIST)) if flags & libc::O_EXCL == 0 => {}
                Err(e) => return reply.error(errno(&e)),
            }
        }
        let created = clone_fid(&self.client, &dir).and_then(|fid| {
            let msg = Tmessage::Lcreate(Tlcreate {
                fid: fid.fid(),
                name: name.to_vec(),
                flags: wire,
                mode: mode & 0o7777,
                gid: caller.gid,
            });
            expect_reply!(self.client.call(msg), Lcreate).map(|_| fid)
        });
        let opened = match created {
            Ok(fid) => Ok((fid, Some(caller), wire)),
            Err(ClientError::Errno(libc::EEXIST)) if flags & libc::O_EXCL == 0 => {
                resolve_one(&self.client, &dir, name, None)
                    .and_then(|(node, _)| self.open_fid(&node, flags & !libc::O_CREAT))
                    .map(|(fid, wire)| (fid, None, wire))
            }
            Err(e) => Err(e),
        };
        let (fid, created_for, wire) = match opened {
            Ok(f) => f,
            Err(e) => return reply.error(errno(&e)),
        };
        let found =
            resolve_one(&self.client, &dir, name, None).and_then(|(node, a)| match created_for {
                Some(c) => Ok((node.clone(), self.give_to(c, &node, a)?)),
                None => Ok((node, a)),
            });
        match found {
            Ok((node, a)) => {
                self.reply_created((parent, name), (fid, node, a, None), (flags, wire), reply)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// The crossfs extension's Tcreateattr: the file created and opened, a fid for its
    /// node and its attributes, in one round trip; as Tcreateattrdir where the server has
    /// it, also what the creation left of the directory (see
    /// [`crate::known::replica::DirReplicas::left_attrs`]). Returns (open fid, node fid,
    /// attributes, what it left of the directory).
    fn create_in_one(
        &self,
        (parent, dir): (u64, &FidRef),
        name: &[u8],
        wire: u32,
        mode: u32,
        caller: Caller,
    ) -> Result<Created, ClientError> {
        let (nodefid, openfid) = (self.client.alloc_fid(), self.client.alloc_fid());
        let create = Tcreateattr {
            dfid: dir.fid(),
            nodefid,
            openfid,
            name: name.to_vec(),
            flags: wire,
            mode: mode & 0o7777,
            gid: caller.gid,
            request_mask: ATTR_MASK,
        };
        let before = self.ticket_for_left(parent);
        let asked = self.known.listed.before_fetch();
        let sent = match before {
            Some(_) => self.call_left(Tmessage::Createattrdir(Tcreateattrdir {
                create: create.clone(),
            })),
            None => None,
        };
        let answer = match sent {
            Some(r) => r,
            None => self.client.call(Tmessage::Createattr(create)),
        };
        let (created, left) = match answer {
            Ok(Rmessage::Createattr(c)) => (c, None),
            Ok(Rmessage::Createattrdir(c)) => {
                let left = before.map(|before| DirLeft {
                    before,
                    attrs: c.dir,
                });
                (c.created, left)
            }
            Ok(other) => return Err(crate::remote::unexpected(other)),
            Err(e) => {
                self.client.free_fid(nodefid);
                self.client.free_fid(openfid);
                return Err(e);
            }
        };
        let (fid, node) = (
            FidRef::new(&self.client, openfid),
            FidRef::new(&self.client, nodefid),
        );
        if self.follows_events() {
            // A new file has no capability: the kernel's question before the first write
            // is answered here.
            let capability = crate::known::missing_xattrs::CAPABILITY;
            let qid_path = created.attr.qid.path;
            self.known.missing_xattrs.found_missing(
                &self.known.listed,
                qid_path,
                capability,
                asked,
            );
        }
        let a = self.give_to(caller, &node, created.attr)?;
        Ok((fid, node, a, left))
    }

    /// Answers a CREATE: the new file's node, and its open handle.
    fn reply_created(
        &self,
        (parent, name): (INodeNo, &[u8]),
        (fid, node, a, left): Created,
        (flags, wire): (i32, u32),
        reply: ReplyCreate,
    ) {
        // A new file (see `create_entry` in `fs/entry.rs`).
        self.known.listed.changed([a.qid.path]);
        self.known.replicas.own_created(parent.0, name, &a, left);
        let fa = self.remember((parent, name), node, &a, None);
        let fh = self.known.handles.insert(fid, Reopen::new(fa.ino.0, wire));
        if writes(flags) {
            self.ahead.page_push.write_opened(fh, fa.ino.0);
        }
        let open_flags = self.fopen_flags(fa.ino.0, flags);
        reply.created(
            &self.entry_ttl(),
            &fa,
            Generation(0),
            FileHandle(fh),
            open_flags,
        );
    }

    pub(super) fn read(self: &Arc<Self>, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        match self.open_file(fh) {
            Ok(file) => self.read_open(file, offset, size, reply),
            Err(e) => reply.error(e),
        }
    }

    fn read_open(self: &Arc<Self>, file: Arc<OpenFile>, offset: u64, size: u32, reply: ReplyData) {
        let max = self.sizes.max_io;
        let walkread = !self.server.no_walkread.load(Ordering::Relaxed);
        if file.fid().is_none() && size <= max && walkread {
            return self.open_and_read(file, offset, size, reply);
        }
        let fid = match self.file_fid(&file) {
            Ok(f) => f.fid(),
            Err(e) => return reply.error(e),
        };
        self.reading(file.reopen.node);
        if size <= max {
            return self.client.read_async(
                fid,
                offset,
                size,
                Box::new(move |r| {
                    drop(file);
                    match r {
                        Ok(data) => reply.data(&data),
                        Err(e) => reply.error(errno(&e)),
                    }
                }),
            );
        }
        self.stats
            .caches
            .split_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let parts = size.div_ceil(max) as usize;
        let gather = Arc::new(Gather {
            parts: Mutex::new((0..parts).map(|_| None).collect()),
            left: AtomicUsize::new(parts),
            reply: Mutex::new(Some(reply)),
            chunk: max as usize,
        });
        for i in 0..parts {
            let start = i as u32 * max;
            let count = max.min(size - start);
            let (gather, file) = (gather.clone(), file.clone());
            self.client.read_async(
                fid,
                offset + u64::from(start),
                count,
                Box::new(move |r| {
                    drop(file);
                    gather.done(i, r);
                }),
            );
        }
    }

    /// `change`: held until the server has answered (see `crate::known::listed_attrs`).
    pub(super) fn write(
        self: &Arc<Self>,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        change: ChangeInFlight,
        reply: ReplyWrite,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        let file = match self.open_file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let max = self.sizes.max_io as usize;
        if data.len() > max {
            // max_write keeps the kernel below this; stay correct if it ever is not.
            return self.write_split(file, offset, data, reply);
        }
        let fid = match self.file_fid(&file) {
            Ok(f) => f.fid(),
            Err(e) => return reply.error(e),
        };
        if self.client.has_extensions() && !self.server.no_writeattr.load(Ordering::Relaxed) {
            return self.write_attr(file, fid, (offset, data), change, reply);
        }
        self.client.write_async(
            fid,
            offset,
            data,
            Box::new(move |r| {
                drop((file, change));
                match r {
                    Ok(n) => reply.written(n),
                    Err(e) => reply.error(errno(&e)),
                }
            }),
        );
    }

    /// A write as Twriteattr: the attributes it returns answer the kernel's next GETATTR
    /// (it asks after every write) if nothing else changed the file meanwhile. Until the
    /// server has answered one, each keeps its data, to be sent as a Twrite if the server
    /// predates it.
    fn write_attr(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        fid: crossfs_wire::Fid,
        (offset, data): (u64, &[u8]),
        change: ChangeInFlight,
        reply: ReplyWrite,
    ) {
        let again =
            (!self.server.writeattr_answered.load(Ordering::Relaxed)).then(|| data.to_vec());
        let shared = self.clone();
        self.client.write_attr_async(
            fid,
            offset,
            data,
            Box::new(move |r| match r {
                Ok((n, attr)) => {
                    shared
                        .server
                        .writeattr_answered
                        .store(true, Ordering::Relaxed);
                    if attr.valid != 0 {
                        let fetched = change.end_with_answer(attr.qid.path);
                        shared
                            .known
                            .inodes
                            .observe(file.reopen.node, &attr, fetched);
                    }
                    reply.written(n);
                }
                Err(e) if e.errno() == libc::EOPNOTSUPP && again.is_some() => {
                    shared.server.no_writeattr.store(true, Ordering::Relaxed);
                    let data = again.unwrap_or_default();
                    shared.client.write_async(
                        fid,
                        offset,
                        &data,
                        Box::new(move |r| {
                            drop((file, change));
                            match r {
                                Ok(n) => reply.written(n),
                                Err(e) => reply.error(errno(&e)),
                            }
                        }),
                    );
                }
                Err(e) => {
                    drop((file, change));
                    reply.error(errno(&e));
                }
            }),
        );
    }

    fn write_split(
        &self,
        file: Arc<crate::known::handle::OpenFile>,
        offset: u64,
        data: &[u8],
        reply: ReplyWrite,
    ) {
        let max = self.sizes.max_io as usize;
        let fid = match self.file_fid(&file) {
            Ok(f) => f.fid(),
            Err(e) => return reply.error(e),
        };
        let mut written = 0usize;
        for chunk in data.chunks(max) {
            match self.client.write(fid, offset + written as u64, chunk) {
                Ok(n) => {
                    written += n as usize;
                    if (n as usize) < chunk.len() {
                        break;
                    }
                }
                Err(e) if written == 0 => return reply.error(errno(&e)),
                Err(_) => break,
            }
        }
        reply.written(written as u32);
    }

    /// On close of a handle that can write (see `fopen_flags`). Nothing is buffered here,
    /// but POSIX says closing any descriptor drops the process's locks on the file:
    /// release those the closing owner took.
    pub(super) fn flush(&self, fh: FileHandle, owner: fuser::LockOwner, reply: ReplyEmpty) {
        let Ok(file) = self.open_file(fh) else {
            return reply.ok();
        };
        if !lock(&file.lock_owners).remove(&owner.0) {
            return reply.ok();
        }
        match self.unlock_all(&file, owner.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn fsync(&self, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let file = match self.open_file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // A directory listed through its node's fid is opened for the fsync alone.
        let fid = if file.listing_only {
            let dir = INodeNo(file.reopen.node);
            match self.open_node(dir, libc::O_RDONLY | libc::O_DIRECTORY) {
                Ok((fid, _)) => fid,
                Err(e) => return reply.error(e),
            }
        } else {
            match self.file_fid(&file) {
                Ok(f) => f,
                Err(e) => return reply.error(e),
            }
        };
        let msg = Tmessage::Fsync(Tfsync {
            fid: fid.fid(),
            datasync: u32::from(datasync),
        });
        self.client.call_async(
            msg,
            Box::new(move |r| {
                drop((file, fid));
                match r {
                    Ok(_) => reply.ok(),
                    Err(e) => reply.error(errno(&e)),
                }
            }),
        );
    }
}

/// One piece of a split read, once its Rread (or error) is in.
type Part = Option<Result<Vec<u8>, ClientError>>;

/// The pieces of one split read, answered when the last arrives.
struct Gather {
    parts: Mutex<Vec<Part>>,
    left: AtomicUsize,
    reply: Mutex<Option<ReplyData>>,
    chunk: usize,
}

impl Gather {
    fn done(&self, i: usize, r: Result<Vec<u8>, ClientError>) {
        lock(&self.parts)[i] = Some(r);
        if self.left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let Some(reply) = lock(&self.reply).take() else {
            return;
        };
        let parts = std::mem::take(&mut *lock(&self.parts));
        let mut out = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            match part {
                Some(Ok(data)) => {
                    let short = data.len() < self.chunk;
                    out.extend_from_slice(&data);
                    if short {
                        break;
                    }
                }
                Some(Err(e)) if i == 0 => return reply.error(errno(&e)),
                _ => break,
            }
        }
        reply.data(&out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_flags_translate() {
        assert_eq!(wire_open_flags(libc::O_RDONLY, false), of::RDONLY);
        assert_eq!(
            wire_open_flags(libc::O_WRONLY | libc::O_APPEND, false),
            of::WRONLY | of::APPEND
        );
        assert_eq!(
            wire_open_flags(libc::O_WRONLY | libc::O_APPEND, true),
            of::RDWR
        );
        assert_eq!(
            wire_open_flags(libc::O_RDWR | libc::O_DIRECT | libc::O_CLOEXEC, false),
            of::RDWR
        );
        assert_eq!(
            wire_open_flags(libc::O_WRONLY | libc::O_SYNC, false),
            of::WRONLY | of::SYNC | of::DSYNC
        );
    }
}
