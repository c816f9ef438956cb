//! Opening files and directories: open (deferred where it may be, or not sent at all), opendir,
//! and the open fids kept after a close (`crate::known::idle`).
//!
//! While change events are followed in `auto` mode (and `--send-opens` is not
//! given), the first OPEN is answered ENOSYS: the kernel then opens and closes files without
//! asking, keeps their pages across opens (the events drop them when a file changes), keeps
//! POSIX locks itself, and sends the requests on open files with handle 0, which
//! [`MountState::open_file_for`] serves through per-node handles of the mount's own
//! (`crate::known::handle::Unannounced`). The first OPENDIR is answered ENOSYS too: the
//! kernel keeps every listing it reads until the directory changes, and reads listings
//! with handle 0, which [`MountState::listing_for`] serves from listings made per read
//! from offset 0 (the offsets are the server's cookies, so any listing continues after
//! any of them). They open a file on the server as the deferred
//! opens below do, so they promise what those promise, with two more differences from a
//! local file: a file the guest opened, then removed through the mount before its first
//! read or write is reached only because a removal walks every regular file's node first
//! (`keep_reachable` in `fs/entry.rs`); and an open for writing the server itself may not
//! make fails at the first write, not at the open.
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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::session::{Errno, FileHandle, FopenFlags, INodeNo};
use crossfs_client::ClientError;
use crossfs_wire::{open_flags as of, Rmessage, Tlopen, Tmessage, Twalkopen};

use super::reply::Opened;
use super::{errno, MountState};
use crate::fid::FidRef;
use crate::known::cache::CacheMode;
use crate::known::handle::{DirStream, OpenFile, Reopen, Unannounced};
use crate::known::idle::{IdleOpens, IDLE_FOR};
use crate::known::inode::NodeFid;
use crate::remote::{clone_fid, expect_reply, ATTR_MASK};
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

/// The Linux O_SYNC / O_DSYNC of 9P2000.L open flags.
fn sync_flags(wire: u32) -> i32 {
    if wire & of::SYNC == of::SYNC {
        libc::O_SYNC
    } else if wire & of::DSYNC != 0 {
        libc::O_DSYNC
    } else {
        0
    }
}

/// Whether an open with these Linux flags may change the file's data.
pub(super) fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl MountState {
    /// FOPEN flags for a newly opened file.
    pub(super) fn fopen_flags(&self, ino: u64, flags: i32) -> FopenFlags {
        use std::sync::atomic::Ordering::Relaxed;
        let mode = self.config.cache;
        if flags & libc::O_DIRECT != 0 {
            // Without PARALLEL_DIRECT_WRITES the kernel holds the inode lock across every
            // direct write, so one file takes one write at a time. Shared is safe here: it
            // still locks exclusively for O_APPEND, for a write past its EOF and while
            // the inode has cached opens; each write of at most max_write is one Twrite,
            // one pwrite on the host; and nothing in the mount assumes writes of one
            // file come one at a time (`ChangeInFlight`). Only for O_DIRECT: larger
            // writes are split into several Twrites, which may then interleave as local
            // file systems let O_DIRECT overwrites do, but not buffered write(2)s.
            return FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
        }
        if mode.direct_io() {
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
    pub(super) fn open_fid(
        &self,
        node: &FidRef,
        flags: i32,
    ) -> Result<(Arc<FidRef>, u32), ClientError> {
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
        let lopen = |f: u32| self.short_of_descriptors(|| lopen(f));
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

    /// Runs `open`, a request that makes the server open a file, again while the server
    /// refuses it for want of descriptors (`EMFILE`, `ENFILE`: this client's share of the
    /// open files it allows is used up). First at once after giving back the idle opens
    /// this mount keeps (`crate::known::idle`), which hold the server's descriptors only
    /// in case the same file is opened again; then, if it kept none, after waits growing
    /// from 10 ms to a second, for as long as other mounts' idle opens take to expire
    /// ([`IDLE_FOR`]). Past that the refusal stands: the server's files are really open.
    pub(super) fn short_of_descriptors<T>(
        &self,
        mut open: impl FnMut() -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            let refused = match open() {
                Err(ClientError::Errno(e @ (libc::EMFILE | libc::ENFILE))) => e,
                r => return r,
            };
            let gave_back = self.known.idle.clear() + self.known.handles.expire_unannounced(None);
            tracing::debug!(
                errno = refused,
                gave_back,
                "the server is short of descriptors"
            );
            if started.elapsed() > IDLE_FOR + Duration::from_secs(1) {
                return Err(ClientError::Errno(refused));
            }
            if gave_back == 0 {
                crossfs_client::before_wait();
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }

    /// Opens a fresh fid for node `ino`: with the crossfs extension one Twalkopen (from the
    /// node's fid, or for a node answered from a replica from its directory's, checking
    /// that the name still leads to the node's file), else [`MountState::open_fid`].
    pub(super) fn open_node(&self, ino: INodeNo, flags: i32) -> Result<(Arc<FidRef>, u32), Errno> {
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
        let walkopen = |wire: u32| self.short_of_descriptors(|| walkopen(wire));
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

    pub(super) fn open(&self, ino: INodeNo, flags: i32) -> Result<Opened, Errno> {
        let writes = writes(flags);
        if writes {
            self.writable()?;
        }
        if self.may_leave_opens_unannounced() {
            // From now on the kernel opens and closes files without asking (see
            // `crate::known::handle::Unannounced`); this open goes on as one of them.
            if !self
                .known
                .handles
                .opens_unannounced
                .swap(true, Ordering::Relaxed)
            {
                tracing::debug!("opens and closes of files no longer reach the mount");
            }
            self.ahead.no_opens.told();
            return Err(Errno::ENOSYS);
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
            return Ok(Opened(FileHandle(fh), self.fopen_flags(ino.0, flags)));
        }
        let (fid, wire) = reused.map_or_else(|| self.open_node(ino, flags), Ok)?;
        let fh = self.known.handles.insert(fid, Reopen::new(ino.0, wire));
        if writes {
            self.ahead.page_push.write_opened(fh, ino.0);
        }
        Ok(Opened(FileHandle(fh), self.fopen_flags(ino.0, flags)))
    }

    /// Whether the kernel keeps POSIX locks itself (FUSE without `FUSE_POSIX_LOCKS`), as it
    /// does when it may open and close files without asking the mount: a lock sent to the
    /// server is held by an open there, and the mount would not hear when its opener
    /// closes it. Decided by the config alone, at FUSE's INIT (see `--send-opens`).
    ///
    /// Only in `auto`: with the writeback cache (`always`), a write reaches the mount long
    /// after the program's open, and an unannounced open would then find the file by a
    /// name another client may have changed meanwhile; an announced open holds the file.
    pub(super) fn kernel_keeps_locks(&self) -> bool {
        self.config.cache == CacheMode::Auto && !self.config.send_opens
    }

    /// Whether the kernel may open and close files without asking the mount (FUSE's
    /// no-open mode, for good: it keeps every file's pages across opens, and sends the
    /// requests on open files with handle 0, `crate::known::handle::Unannounced`): while
    /// change events keep what the kernel holds exact, in `auto` mode (see
    /// [`MountState::kernel_keeps_locks`]), with the extension's Twalkread for first reads.
    pub(super) fn may_leave_opens_unannounced(&self) -> bool {
        self.kernel_keeps_locks()
            && self.client.has_extensions()
            && !self.server.no_walkread.load(Ordering::Relaxed)
            && self.follows_events()
            && self.client.is_connected()
    }

    /// The open file a request with handle `fh` on node `ino` acts on: the handle's, or
    /// for handle 0 while opens go unannounced, the node's handle for `what`.
    pub(super) fn open_file_for(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        what: Unannounced,
    ) -> Result<Arc<OpenFile>, Errno> {
        let handles = &self.known.handles;
        if fh.0 != 0 || !handles.opens_unannounced.load(Ordering::Relaxed) {
            return self.open_file(fh);
        }
        // The kernel may hold pages of this file the mount did not push.
        let changes = what != Unannounced::Read;
        self.ahead.page_push.touched(ino.0, changes);
        let (linux, wire) = match what {
            Unannounced::Read => (libc::O_RDONLY, of::RDONLY),
            Unannounced::Write(wire) => {
                let linux = if wire & of::APPEND != 0 {
                    libc::O_APPEND
                } else {
                    0
                };
                (linux | libc::O_WRONLY, wire)
            }
            // Directories are read through `listing_for`.
            Unannounced::List => return Err(Errno::EBADF),
        };
        let linux = linux | sync_flags(wire);
        Ok(handles.unannounced(ino.0, what, linux, Reopen::new(ino.0, wire)))
    }

    /// What an unannounced write with Linux open flags `flags` is sent through: a handle
    /// open for writing (read-write with the writeback cache, whose page writes come with
    /// no flags), appending and syncing as the open asked.
    pub(super) fn unannounced_write(&self, flags: i32) -> Unannounced {
        let keep = flags & (libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC);
        let wire = wire_open_flags(keep | libc::O_WRONLY, self.config.cache.writeback());
        Unannounced::Write(wire)
    }

    /// Whether an open for reading of node `ino` may wait for its first read (see the
    /// module doc): change events keep what the kernel holds exact, the extension's
    /// Twalkread can open and read at once, and anyone may read the file.
    pub(super) fn may_defer_open(&self, ino: u64) -> bool {
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

    /// The first step of an OPENDIR of `ino`: how it will be listed, and the directory
    /// claimed if its listing is to be fetched. The claim lasts as long as what this
    /// returns, which the caller holds until the kernel has the answer.
    pub(super) fn opening_dir(&self, ino: INodeNo) -> OpeningDir<'_> {
        let listing_only = self.client.has_extensions() && self.config.cache != CacheMode::Never;
        if listing_only {
            // Fetched ahead right now (`crate::ahead::tree_walk`): its replica will answer.
            self.ahead.tree_walk.wait_for(ino.0);
        }
        let listing = listing_only && !self.known.replicas.has(ino.0);
        OpeningDir {
            listing_only,
            listing,
            // Claimed, so that the walk ahead does not fetch it a second time meanwhile.
            _fetching: listing.then(|| self.ahead.tree_walk.fetch(ino.0)),
        }
    }

    /// Whether the kernel may open and close directories without asking the mount
    /// (FUSE's no-opendir mode, for good: it then keeps every listing it reads, and reads
    /// with handle 0, [`MountState::listing_for`]): when it may for files (see
    /// [`MountState::may_leave_opens_unannounced`]; the listings are the crossfs
    /// extension's, through the directory's own fid).
    pub(super) fn may_leave_dirs_unannounced(&self) -> bool {
        self.kernel_keeps_locks()
            && self.client.has_extensions()
            && self.follows_events()
            && self.client.is_connected()
    }

    /// OPENDIR. With the crossfs extension (outside `never` mode) a directory is listed
    /// through its node's own fid, so opening it sends nothing (and closing it neither);
    /// while [`MountState::may_leave_dirs_unannounced`], the kernel is told not to ask
    /// (ENOSYS). `opening`: from [`MountState::opening_dir`].
    pub(super) fn opendir(&self, ino: INodeNo, opening: &OpeningDir<'_>) -> Result<Opened, Errno> {
        if self.may_leave_dirs_unannounced() {
            if !self
                .known
                .handles
                .dirs_unannounced
                .swap(true, Ordering::Relaxed)
            {
                tracing::debug!("opens and closes of directories no longer reach the mount");
            }
            return Err(Errno::ENOSYS);
        }
        let fh = self.known.handles.add(self.open_dir(ino, opening)?);
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
        Ok(Opened(FileHandle(fh), flags))
    }

    /// The open directory a READDIR(PLUS) or FSYNCDIR with handle `fh` at `offset` reads:
    /// the handle's, or for handle 0 (no-opendir mode) the directory's unannounced
    /// listing (see `crate::known::handle::Unannounced::List`), made anew at offset 0 or
    /// when there is none: the offsets are the server's cookies, so a listing made anew
    /// continues after any of them as the old one would.
    pub(super) fn listing_for(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> Result<Arc<OpenFile>, Errno> {
        if fh.0 != 0 {
            return self.open_file(fh);
        }
        let handles = &self.known.handles;
        if offset != 0 {
            if let Some(file) = handles.listing(ino.0) {
                return Ok(file);
            }
        }
        let opening = self.opening_dir(ino);
        let file = self.open_dir(ino, &opening)?;
        handles.keep_listing(ino.0, file.clone());
        Ok(file)
    }

    /// A new open of directory `ino`, listed through its node's fid where the extension
    /// allows (then nothing is sent but the first entries' fetch, if no replica has them),
    /// its stream answered from the directory's replica where there is one.
    fn open_dir(&self, ino: INodeNo, opening: &OpeningDir<'_>) -> Result<Arc<OpenFile>, Errno> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let OpeningDir {
            listing_only,
            listing,
            ..
        } = *opening;
        // The listing's first entries may come with the directory's fid: as `fill` does,
        // the read is noted first, then the ticket and the time are taken.
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
        let (fid, wire) = opened?;
        let reopen = Reopen::new(ino.0, wire);
        let file = if listing_only {
            OpenFile::listing(fid, reopen)
        } else {
            OpenFile::with_fid(fid, reopen)
        };
        if self.replicas_usable() {
            // Taken first: directories listed are anchored with it (their own
            // replicas may then answer), unless the directory changed since.
            let ticket = self.known.replicas.ticket(ino.0);
            if let Some((listing, fetched)) = self.known.replicas.listing(ino.0) {
                // The listing is answered from the replica, as it is now.
                *lock(&file.dir) = DirStream::from_replica(listing, ticket, fetched);
                first = None;
            }
        }
        if let Some(listed) = first {
            self.take_listed(ino.0, &mut lock(&file.dir), listed, ticket, fetched);
        }
        Ok(file)
    }
}

/// An OPENDIR under way (see [`MountState::opening_dir`]).
pub(super) struct OpeningDir<'a> {
    /// Listed through the node's own fid: nothing is opened on the server.
    listing_only: bool,
    /// No replica answers the listing: it is fetched.
    listing: bool,
    _fetching: Option<Option<crate::ahead::tree_walk::Fetching<'a>>>,
}

impl MountState {
    /// Starts the thread that opens a created file through `mountpoint` once, so that the
    /// kernel stops sending OPEN and RELEASE (see `crate::ahead::no_opens`); it ends with
    /// the mount.
    pub(crate) fn start_no_opens(self: &Arc<Self>, mountpoint: std::path::PathBuf) {
        self.start_helper(
            "crossfs-noopen",
            &self.ahead.files_to_open,
            move |shared, ino| {
                if let Err(e) = shared.show_no_opens(&mountpoint, ino) {
                    tracing::debug!(ino, "created file not opened: {e}");
                    shared.ahead.no_opens.not_shown();
                }
            },
        );
    }

    /// A CREATE was answered as an unannounced open of node `ino`: has the thread above
    /// open it, if the kernel still sends OPEN.
    pub(super) fn created_unannounced(&self, ino: u64) {
        if !self.ahead.no_opens.should_show() {
            return;
        }
        match self.ahead.files_to_open.get() {
            Some(tx) if tx.try_send(ino).is_ok() => {}
            _ => self.ahead.no_opens.not_shown(),
        }
    }

    /// Opens node `ino`, a regular file, for reading through the mount point and closes
    /// it: the OPEN is answered ENOSYS (if opens may still go unannounced).
    fn show_no_opens(&self, mountpoint: &std::path::Path, ino: u64) -> std::io::Result<()> {
        use rustix::fs::{FileType, Mode, OFlags};
        let gone = || std::io::Error::from(std::io::ErrorKind::NotFound);
        if !self.may_leave_opens_unannounced() {
            return Err(std::io::Error::other("opens go to the mount"));
        }
        let rel = self.path_beneath(ino).ok_or_else(gone)?;
        // Named without opening it, then opened only if it is still that regular file: a
        // name replaced meanwhile by a device or a FIFO is not opened.
        let path = super::dir::open_beneath(mountpoint, &rel, OFlags::PATH)?;
        let st = rustix::fs::fstat(&path)?;
        if st.st_ino != ino || FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(gone());
        }
        let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&path));
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        drop(rustix::fs::open(proc_path.as_str(), flags, Mode::empty())?);
        Ok(())
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
