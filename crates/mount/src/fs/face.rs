//! The FUSE face: [`CrossFs`] implements [`crate::session::Filesystem`] by counting each request,
//! noting the changes a request makes (for the change feed and the attribute caches),
//! answering the change feed's replays locally, and handing the rest to [`MountState`],
//! whose methods live beside the requests they serve.
//!
//! What this must not do: talk to the server itself, or keep state of its own.

use std::ffi::OsStr;
use std::io as stdio;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use crate::session::{
    AccessFlags, Errno, FileHandle, Filesystem, INodeNo, InitFlags, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};

use super::reply::{answer, Entry, Then};
use super::{attr, lock, Caller, MountState};
use crate::changes::SYNC_XATTR;
use crate::known::cache::CacheMode;
use crate::known::handle::{OpenFile, Reopen, Unannounced};
use crate::known::listed_attrs::ChangeInFlight;
use crate::stats::Op;

fn bytes(name: &OsStr) -> &[u8] {
    use std::os::unix::ffi::OsStrExt;
    name.as_bytes()
}

/// The `crate::session::Filesystem` over a 9P client.
pub(crate) struct CrossFs {
    pub state: Arc<MountState>,
}

impl CrossFs {
    /// Who will own what `req` creates in directory `parent`.
    /// A call that makes `name` in `parent` (mkdir, mknod, symlink): the change feed's
    /// replay of a host change is answered with what the server has; otherwise `make` asks
    /// the server, for the caller.
    fn make_name<'a>(
        &'a self,
        req: &Request,
        op: Op,
        parent: INodeNo,
        name: &'a [u8],
        reply: ReplyEntry,
        make: impl FnOnce(
            &'a Arc<MountState>,
            Caller,
            &ChangeInFlight,
        ) -> Result<Then<'a, Entry>, Errno>,
    ) {
        let (s, change) = self.s_changing(req, op, &[], &[(parent.0, name)]);
        if s.changes.is_replay(req.pid()) {
            return answer(reply, s.lookup_existing(parent, name));
        }
        s.changes.note_name(parent.0, name);
        answer(reply, make(s, self.caller(req, parent), &change));
    }

    /// unlink or rmdir (`flags`): a replay only tells the inode table the name is gone.
    fn remove_name(
        &self,
        req: &Request,
        op: Op,
        parent: INodeNo,
        name: &[u8],
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let (s, change) = self.s_changing(req, op, &[], &[(parent.0, name)]);
        if s.changes.is_replay(req.pid()) {
            s.known.inodes.removed(parent.0, name);
            return answer(reply, Ok(()));
        }
        s.changes.note_name(parent.0, name);
        answer(reply, s.unlink((parent, name), flags, req.pid(), &change));
    }

    fn caller(&self, req: &Request, parent: INodeNo) -> Caller {
        let dir_group = self.state.known.inodes.setgid_group(parent.0);
        Caller {
            uid: req.uid(),
            gid: dir_group.unwrap_or(req.gid()),
        }
    }

    /// Counts request `op` of `req` and hands over the shared state. Every request passes
    /// here first: a wait for the server on this thread from now on is for `req`'s caller,
    /// and ends with EINTR if that caller gets a signal (`caller_signals.rs`).
    fn s(&self, req: &Request, op: Op) -> &Arc<MountState> {
        crossfs_client::give_up_when(super::caller_signals::give_up_for(req.pid()));
        let s = &self.state;
        s.stats.count(op);
        if s.config.cache == CacheMode::Never && !matches!(op, Op::Getattr | Op::Forget) {
            // Only the very next request of a thread may reuse its LOOKUP's attributes.
            s.known.recent.clear(req.pid());
        }
        s
    }

    /// [`Self::s`] for a request that changes files on the server: nodes `nodes`, the
    /// directories of `names` and the files they name now. Their fetched attributes are
    /// not reused from now on; hold the guard until the server has answered (see
    /// `crate::known::listed_attrs`).
    fn s_changing(
        &self,
        req: &Request,
        op: Op,
        nodes: &[u64],
        names: &[(u64, &[u8])],
    ) -> (&Arc<MountState>, ChangeInFlight) {
        let s = self.s(req, op);
        let named = names.iter().flat_map(|&(dir, name)| {
            let file = s
                .known
                .inodes
                .expected(dir, name)
                .map(|(_, qid_path)| qid_path);
            [s.known.inodes.qid_path(dir), file]
        });
        let changed: Vec<(u64, u64)> = nodes
            .iter()
            .filter_map(|&ino| Some((ino, s.known.inodes.qid_path(ino)?)))
            .collect();
        let files = changed
            .iter()
            .map(|&(_, q)| Some(q))
            .chain(named)
            .flatten()
            .collect();
        let mut dirs: Vec<u64> = names.iter().map(|&(dir, _)| dir).collect();
        dirs.dedup();
        let shared = s.clone();
        let change = s.known.listed.change(files).also_at_end(move || {
            // The files' entries in directory replicas are asked of the server again once
            // the change is done (entry changes update replicas in their handlers).
            for (ino, qid_path) in changed {
                shared.known.replicas.own_changed(ino, qid_path);
            }
            shared.dirs_changed(&dirs);
        });
        (s, change)
    }
}

/// Background requests the kernel may have outstanding (FUSE's default is 12).
const MAX_BACKGROUND: u16 = 64;

/// Kernel features asked for in every mode.
const ALWAYS_WANTED: InitFlags = InitFlags::FUSE_MAX_PAGES
    .union(InitFlags::FUSE_CACHE_SYMLINKS)
    .union(InitFlags::FUSE_PARALLEL_DIROPS)
    .union(InitFlags::FUSE_ASYNC_DIO)
    .union(InitFlags::FUSE_ASYNC_READ)
    .union(InitFlags::FUSE_BIG_WRITES)
    // MountState mmap of `direct_io` files (`never`, `metadata`): the kernel keeps the mapped
    // pages coherent with direct reads and writes (Linux 6.6+; ENODEV without it).
    .union(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);

impl Filesystem for CrossFs {
    fn init(&mut self, _req: &Request, kc: &mut KernelConfig) -> stdio::Result<()> {
        let s = &self.state;
        let sizes = s.sizes;
        if let Err(max) = kc.set_max_write(sizes.max_write) {
            let _ = kc.set_max_write(max);
        }
        // The kernel offers at most its default readahead here (128 KiB); the mount raises
        // the bdi's read_ahead_kb once it is up.
        if let Err(max) = kc.set_max_readahead(sizes.readahead) {
            let _ = kc.set_max_readahead(max);
        }
        // Background requests (readahead, async direct I/O, writeback): enough in flight
        // that several 1 MiB reads or writes overlap with the server's work. The kernel
        // throttles new ones past the congestion threshold.
        let _ = kc.set_max_background(MAX_BACKGROUND);
        let _ = kc.set_congestion_threshold(MAX_BACKGROUND * 3 / 4);
        let mode = s.config.cache;
        let mut wanted = ALWAYS_WANTED;
        if mode.readdirplus() {
            wanted |= InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO;
        }
        if mode.writeback() {
            wanted |= InitFlags::FUSE_WRITEBACK_CACHE;
        }
        if !s.kernel_keeps_locks() {
            wanted |= InitFlags::FUSE_POSIX_LOCKS;
        }
        if mode == crate::CacheMode::Auto {
            wanted |= InitFlags::FUSE_AUTO_INVAL_DATA;
        }
        if s.server_kills_suidgid() {
            // The server clears set-id bits when asked (the kernel then flags writes,
            // truncates and chowns instead of asking for the mode and security.capability
            // before each and clearing them with a SETATTR of its own).
            wanted |= InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        }
        let missing = wanted & !kc.capabilities();
        if !missing.is_empty() {
            tracing::warn!(?missing, "the kernel lacks FUSE features crossfs asks for");
        }
        let _ = kc.add_capabilities(wanted & kc.capabilities());
        tracing::info!(
            max_write = sizes.max_write,
            max_pages = sizes.max_pages,
            cache = %mode,
            "FUSE session initialised"
        );
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let s = self.s(req, Op::Lookup);
        match s.replay_lookup(req.pid(), parent, bytes(name)) {
            Some(replayed) => answer(reply, replayed),
            None => answer(reply, s.lookup(req.pid(), parent, bytes(name))),
        }
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        let s = self.s(req, Op::Forget);
        let pending = |ino| s.behind.has_pending(ino);
        if s.known.inodes.forget_unless(ino.0, nlookup, pending) {
            s.forgotten(ino.0);
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        answer(reply, self.s(req, Op::Getattr).getattr(req.pid(), ino, fh));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<crate::session::BsdFileFlags>,
        kill_suidgid: bool,
        reply: ReplyAttr,
    ) {
        let change = attr::Change {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            ctime: ctime.is_some(),
            kill_suidgid: kill_suidgid.then_some(attr::Caller {
                gid: req.gid(),
                pid: req.pid(),
            }),
        };
        let (s, in_flight) = self.s_changing(req, Op::Setattr, &[ino.0], &[]);
        if s.changes.is_replay(req.pid()) {
            // A replayed change: the kernel is told what the server has, nothing is sent.
            return answer(reply, s.getattr(req.pid(), ino, None));
        }
        s.changes.note_node(ino.0);
        if size.is_some() {
            // The kernel cuts its pages once answered: after a push of them in progress
            // (`crate::ahead::pushed_pages`; the change clock moved above, so no other starts).
            s.ahead.page_push.settle(ino.0);
        }
        // Held here until answered unless the server's answer ends it first.
        let mut in_flight = Some(in_flight);
        answer(reply, s.setattr(ino, fh, change, req.pid(), &mut in_flight));
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        answer(reply, Ok(self.s(req, Op::Readlink).readlink(ino)));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.make_name(
            req,
            Op::Mknod,
            parent,
            bytes(name),
            reply,
            |s, caller, _| s.mknod(parent, bytes(name), mode, rdev, caller),
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let pid = req.pid();
        self.make_name(
            req,
            Op::Mkdir,
            parent,
            bytes(name),
            reply,
            |s, caller, change| s.mkdir(parent, bytes(name), mode, (caller, pid), change),
        );
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove_name(req, Op::Unlink, parent, bytes(name), 0, reply);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let flags = crossfs_wire::AT_REMOVEDIR;
        self.remove_name(req, Op::Rmdir, parent, bytes(name), flags, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.make_name(
            req,
            Op::Symlink,
            parent,
            bytes(link_name),
            reply,
            |s, caller, _| s.symlink(parent, bytes(link_name), bytes(target.as_os_str()), caller),
        );
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if parent == newparent && name == newname {
            // The kernel renames a name onto itself without asking unless its two lookups
            // of the name found two files: its entry was stale (the host replaced the
            // file). Renamed as asked, it would move the stale entry over the fresh one
            // and keep it. ESTALE makes renameat(2) look both up again, once, and find one
            // file, which is nothing to rename.
            let stale: Result<(), Errno> = Err(Errno::ESTALE);
            return answer(reply, stale);
        }
        let (s, change) = self.s_changing(
            req,
            Op::Rename,
            &[],
            &[(parent.0, bytes(name)), (newparent.0, bytes(newname))],
        );
        if s.changes.is_replay(req.pid()) {
            // The kernel moves its entry: a node without a fid is walked from there now.
            s.known
                .inodes
                .renamed((parent.0, bytes(name)), (newparent.0, bytes(newname)));
            return answer(reply, Ok(()));
        }
        s.changes.note_name(parent.0, bytes(name));
        s.changes.note_name(newparent.0, bytes(newname));
        let renamed = s.rename(
            (parent, bytes(name)),
            (newparent, bytes(newname)),
            flags,
            (req.pid(), &change),
        );
        answer(reply, renamed);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (s, _change) =
            self.s_changing(req, Op::Link, &[ino.0], &[(newparent.0, bytes(newname))]);
        s.changes.note_name(newparent.0, bytes(newname));
        answer(reply, s.link(ino, newparent, bytes(newname)));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        answer(reply, self.s(req, Op::Open).open(ino, flags.0));
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        answer(reply, self.s(req, Op::Read).read(ino, fh, offset, size));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill_suidgid =
            (write_flags.0 & crossfs_fuse_abi::WRITE_KILL_SUIDGID != 0).then_some(attr::Caller {
                gid: req.gid(),
                pid: req.pid(),
            });
        let (s, change) = self.s_changing(req, Op::Write, &[ino.0], &[]);
        s.changes.note_node(ino.0);
        // Held here until answered unless handed to the write's completion.
        let mut change = Some(change);
        let file = s.open_file_for(ino, fh, s.unannounced_write(flags.0));
        answer(
            reply,
            file.and_then(|f| {
                let caller = (req.pid(), flags.0, kill_suidgid);
                s.write(f, (offset, data), caller, &mut change)
            }),
        );
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        answer(
            reply,
            self.s(req, Op::Flush).flush(ino, fh, req.pid(), lock_owner),
        );
    }

    fn release(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let s = self.s(req, Op::Release);
        if let Some(file) = s.known.handles.remove(fh.0) {
            s.keep_idle(&file);
        }
        s.ahead.page_push.closed(fh.0);
        answer(reply, Ok(()));
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let s = self.s(req, Op::Fsync);
        let file = s.open_file_for(ino, fh, Unannounced::Read);
        // A file whose create the server refused has no open file left to sync: the
        // refusal is what the fsync reports.
        let synced = file
            .and_then(|f| s.fsync(f, datasync))
            .map_err(|e| s.behind.take_refused(ino.0).map_or(e, Errno::from_i32));
        answer(reply, synced);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let (s, change) = self.s_changing(req, Op::Fallocate, &[ino.0], &[]);
        s.changes.note_node(ino.0);
        let file = s.open_file_for(ino, fh, s.unannounced_write(0));
        answer(
            reply,
            file.and_then(|f| s.fallocate(f, (offset, length, mode), change)),
        );
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let s = self.s(req, Op::Opendir);
        let opening = s.opening_dir(ino);
        answer(reply, s.opendir(ino, &opening));
        // The claim ends only now that the kernel has the answer.
        drop(opening);
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listed = self
            .s(req, Op::Readdir)
            .readdir(ino, fh, offset, &mut reply);
        answer(reply, listed);
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let s = self.s(req, Op::Readdirplus);
        let priming = s.is_priming(req.pid());
        let listed = s.readdirplus(ino, fh, offset, priming, &mut reply);
        answer(reply, listed);
    }

    fn releasedir(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.s(req, Op::Releasedir).known.handles.remove(fh.0);
        answer(reply, Ok(()));
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let s = self.s(req, Op::Fsyncdir);
        let file = match fh.0 {
            // No-opendir mode: the directory is opened for the fsync alone.
            0 => s
                .node(ino)
                .map(|fid| OpenFile::listing(fid, Reopen::new(ino.0, 0))),
            _ => s.open_file(fh),
        };
        answer(reply, file.and_then(|f| s.fsync(f, datasync)));
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        answer(reply, self.s(req, Op::Statfs).statfs(ino));
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let (s, _change) = self.s_changing(req, Op::Setxattr, &[ino.0], &[]);
        answer(reply, s.setxattr(ino, bytes(name), value, flags));
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let s = self.s(req, Op::Getxattr);
        if ino.0 == crate::known::inode::ROOT && bytes(name) == SYNC_XATTR {
            return answer(reply, s.sync_xattr(size));
        }
        answer(reply, s.getxattr(ino, bytes(name), size));
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        answer(reply, self.s(req, Op::Listxattr).getxattr(ino, b"", size));
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (s, _change) = self.s_changing(req, Op::Removexattr, &[ino.0], &[]);
        answer(reply, s.removexattr(ino, bytes(name)));
    }

    /// No 9P request answers access(2); the server checks permissions on every operation
    /// instead. ENOSYS tells the kernel to stop asking (access(2) then succeeds for any file
    /// that exists, as with other FUSE file systems without `default_permissions`).
    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let unsupported: Result<(), Errno> = Err(Errno::ENOSYS);
        answer(reply, unsupported);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (s, change) = self.s_changing(req, Op::Create, &[], &[(parent.0, bytes(name))]);
        s.changes.note_name(parent.0, bytes(name));
        let caller = (self.caller(req, parent), req.pid());
        let created = s.create(parent, bytes(name), mode, flags, caller, &change);
        answer(reply, created);
    }

    fn getlk(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let l = lock::Range {
            owner: lock_owner.0,
            start,
            end,
            typ,
            pid,
        };
        let s = self.s(req, Op::Getlk);
        answer(reply, s.open_file(fh).and_then(|f| s.getlk(f, l)));
    }

    fn setlk(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let l = lock::Range {
            owner: lock_owner.0,
            start,
            end,
            typ,
            pid,
        };
        let s = self.s(req, Op::Setlk);
        answer(reply, s.open_file(fh).and_then(|f| s.setlk(f, l, sleep)));
    }
}
