//! FUSE requests answered from the export core: node ids for `O_PATH` handles, file handles
//! for open descriptors, and one function per opcode that translates, asks
//! `crossfs-export`, and encodes the answer. Confinement, names, policy and the descriptor
//! budget are the core's; nothing here decides them.
//!
//! Node ids are `nodes.rs`'s, cache modes and limits `config.rs`'s.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crossfs_export::budget::{FdAccount, OpenFd};
use crossfs_export::handles::PathHandle;
use crossfs_export::{lock, sys, Caller, Dir, Export, ExportError, Made, SetAttr, Statx};
use rustix::fs::{FileType, OFlags};
use rustix::io::Errno;

use crate::fuse::decode::{InHeader, InitIn, ReadIn, SetattrIn};
use crate::fuse::encode::{self, Reply, Ttl};
use crate::fuse::{self, fattr, fopen, init, Op, Opcode};
use crate::stats::{DataPath, Negotiated, Stats};

mod agent;
mod config;
mod in_guest;
mod nodes;

pub use agent::LaterReplies;

pub use config::{CacheMode, FsConfig};
pub(crate) use in_guest::Answer;
use in_guest::{InGuest, Outcome};
use nodes::NodeTable;

/// An open file or directory.
struct OpenFile {
    fd: OpenFd,
    /// Whether this is the export root opened as a directory (reserved names are hidden).
    root: bool,
    /// Directory listings seek the descriptor: one at a time.
    dir: Mutex<()>,
}

/// A FUSE file system over an export, for one guest connection.
pub struct FuseFs {
    export: Arc<Export>,
    config: FsConfig,
    fds: Arc<FdAccount>,
    stats: Arc<Stats>,
    nodes: NodeTable,
    files: Mutex<(HashMap<u64, Arc<OpenFile>>, u64)>,
    /// The request queue's size, as the VMM set it (caps max_pages).
    queue_size: AtomicU32,
    /// Whether writeback caching was negotiated.
    writeback: std::sync::atomic::AtomicBool,
    /// Whether FUSE_SUBMOUNTS was negotiated.
    submounts: std::sync::atomic::AtomicBool,
    /// The guest agent's stream and replays (`agent/`).
    agent: Arc<agent::StreamDoor>,
}

/// What became of one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Handled {
    /// Its reply, to be written now.
    Reply(Vec<u8>),
    /// No reply is due (FORGET, BATCH_FORGET, INTERRUPT), or the header could not be
    /// decoded.
    Nothing,
    /// Parked: the reply comes later, through the [`LaterReplies`] given to
    /// [`FuseFs::set_later_replies`] (a control-file READ waiting for events, a sync
    /// waiting for the agent).
    Later,
}

impl std::fmt::Debug for FuseFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FuseFs")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

type OpResult<T> = Result<T, ExportError>;

/// Largest READ, WRITE or listing any guest may ask for, whatever it negotiated: 256 pages
/// is Linux's ceiling before 6.18; allow a generous multiple, never unbounded.
const MAX_REQUEST_DATA: u32 = 16 << 20;

impl FuseFs {
    /// A file system over `export` for one guest; counters go to `stats`.
    pub fn new(export: Arc<Export>, config: FsConfig, stats: Arc<Stats>) -> FuseFs {
        let fds = FdAccount::new(export.fds.clone());
        let nodes = NodeTable::new(export.root.clone());
        let agent = agent::StreamDoor::new(export.clone(), None, stats.clone());
        FuseFs {
            agent,
            export,
            config,
            fds,
            stats,
            nodes,
            files: Mutex::new((HashMap::new(), 1)),
            queue_size: AtomicU32::new(0),
            writeback: false.into(),
            submounts: false.into(),
        }
    }

    /// Streams `hub`'s events (the same export's) to a guest agent through the control
    /// file, and answers its replays (see docs/virtiofs-agent.md).
    pub fn with_events(mut self, hub: Option<Arc<crossfs_events::EventHub>>) -> FuseFs {
        self.agent = agent::StreamDoor::new(self.export.clone(), hub, self.stats.clone());
        self
    }

    /// Where parked requests are answered (the device; tests give their own).
    pub fn set_later_replies(&self, later: std::sync::Weak<dyn LaterReplies>) {
        self.agent.set_later(later);
    }

    /// Tells the file system the request queue's size (FUSE_MAX_PAGES is capped by it).
    pub fn set_queue_size(&self, size: u32) {
        self.queue_size.store(size, Relaxed);
    }

    /// The counters this file system records into.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Node ids the guest holds (the root included).
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Answers one request. `None`: no reply is due (FORGET, BATCH_FORGET, INTERRUPT), the
    /// header itself could not be decoded (logged; the caller returns the chain empty), or
    /// the request was parked (see [`FuseFs::handle_request`]).
    pub fn handle(&self, request: &[u8]) -> Option<Vec<u8>> {
        match self.handle_request(request) {
            Handled::Reply(reply) => Some(reply),
            Handled::Nothing | Handled::Later => None,
        }
    }

    /// Answers one request now, or parks it ([`Handled::Later`]).
    pub fn handle_request(&self, request: &[u8]) -> Handled {
        match self.decode_and_answer(request, None) {
            Answer::Reply { bytes, .. } => Handled::Reply(bytes),
            Answer::Nothing => Handled::Nothing,
            Answer::Later(_) => Handled::Later,
        }
    }

    /// Answers a decoded request of `len_in` bytes; with `guest`, a READ's data goes
    /// straight into the chain's room and a WRITE's comes straight from its buffers.
    fn answer(
        &self,
        h: InHeader,
        op: Result<Op<'_>, fuse::DecodeError>,
        len_in: usize,
        guest: Option<InGuest<'_, '_>>,
    ) -> Answer {
        let data = match (&op, &guest) {
            (Ok(Op::Read(r)), _) => u64::from(r.size),
            (
                Ok(Op::Write { .. }),
                Some(InGuest {
                    write_data: Some(d),
                    ..
                }),
            ) => d.len() as u64,
            (Ok(Op::Write { data, .. }), _) => data.len() as u64,
            _ => 0,
        };
        let result = match op {
            Ok(op) => match self.intercept(&h, &op) {
                Some(agent::Intercept::Answer(r)) => r.map(Outcome::from),
                Some(agent::Intercept::Parked) => {
                    self.stats.record(h.opcode, len_in, 0, false, data);
                    return Answer::Later(h.unique);
                }
                None => {
                    let own = self.own_changes(&h, &op);
                    let r = self.dispatch_in(&h, op, guest);
                    if r.is_ok() {
                        self.note_own_changes(own);
                    }
                    r
                }
            },
            Err(e) => {
                tracing::debug!(unique = h.unique, opcode = h.opcode, "virtiofs: {e}");
                Err(match e {
                    fuse::DecodeError::UnknownOpcode(_) => ExportError::Os(Errno::NOSYS),
                    _ => ExportError::Os(Errno::INVAL),
                })
            }
        };
        let (reply, in_guest, error) = match result {
            Ok(Outcome::Reply(Some(reply))) => (Some(reply.finish(h.unique)), 0, false),
            Ok(Outcome::Reply(None)) => (None, 0, false),
            Ok(Outcome::InGuest(n)) => (Some(encode::header(h.unique, n).to_vec()), n, false),
            Err(e) => {
                tracing::debug!(
                    unique = h.unique,
                    opcode = h.opcode,
                    node = h.nodeid,
                    "virtiofs: {e}"
                );
                (Some(encode::error(h.unique, e.errno())), 0, true)
            }
        };
        let out = reply.as_ref().map_or(0, Vec::len) + in_guest;
        self.stats.record(h.opcode, len_in, out, error, data);
        match reply {
            Some(bytes) => Answer::Reply { bytes, in_guest },
            None => Answer::Nothing,
        }
    }

    fn dispatch(&self, h: &InHeader, op: Op<'_>) -> OpResult<Option<Reply>> {
        let n = h.nodeid;
        let reply = match op {
            Op::Init(i) => self.init(i),
            Op::Destroy => {
                self.agent.close_all();
                self.nodes.forget_all();
                lock(&self.files).0.clear();
                Ok(Reply::new())
            }
            Op::Lookup { name } => self.lookup(n, name),
            Op::Forget { nlookup } => {
                self.nodes.forget(n, nlookup);
                return Ok(None);
            }
            Op::BatchForget(list) => {
                for (node, nlookup) in list {
                    self.nodes.forget(node, nlookup);
                }
                return Ok(None);
            }
            Op::Interrupt { .. } => return Ok(None),
            Op::Getattr { .. } => self.getattr(n),
            Op::Setattr(s) => self.setattr(n, &s),
            Op::Readlink => {
                let target = sys::readlink(self.nodes.get(n)?.fd()?.as_fd())?;
                let mut r = Reply::new();
                r.bytes(&target);
                Ok(r)
            }
            Op::Symlink { name, target } => self.symlink(h, name, target),
            Op::Mknod {
                mode, rdev, name, ..
            } => self.mknod(h, mode, rdev, name),
            Op::Mkdir { mode, name, .. } => self.mkdir(h, mode, name),
            Op::Unlink { name } => self.unlink(n, name, false),
            Op::Rmdir { name } => self.unlink(n, name, true),
            Op::Rename {
                newdir,
                flags,
                old,
                new,
            } => self.rename(n, old, newdir, new, flags),
            Op::Link { oldnodeid, name } => self.link(oldnodeid, n, name),
            Op::Open { flags } => self.open(n, flags),
            Op::Read(r) => self.read(&r),
            Op::Write { fh, offset, data } => self.write(fh, offset, data),
            Op::Statfs => self.statfs(),
            Op::Release { fh } | Op::Releasedir { fh } => {
                lock(&self.files).0.remove(&fh);
                Ok(Reply::new())
            }
            Op::Fsync { fh, datasync } | Op::Fsyncdir { fh, datasync } => {
                sys::fsync(self.file(fh)?.fd.as_fd(), datasync)?;
                Ok(Reply::new())
            }
            Op::Flush { fh } => self.file(fh).map(|_| Reply::new()),
            Op::Fallocate {
                fh,
                offset,
                length,
                mode,
            } => {
                let file = self.file(fh)?;
                self.export
                    .fallocate(file.fd.as_fd(), mode, offset, length)?;
                Ok(Reply::new())
            }
            Op::Opendir { .. } => self.opendir(n),
            Op::Readdir(r) => self.readdir(n, &r, false),
            Op::Readdirplus(r) => self.readdir(n, &r, true),
            Op::Create {
                flags, mode, name, ..
            } => self.create(h, flags, mode, name),
            Op::Tmpfile { flags, mode, .. } => self.tmpfile(h, flags, mode),
            Op::Getxattr { .. }
            | Op::Listxattr { .. }
            | Op::Setxattr { .. }
            | Op::Removexattr { .. }
                if !self.config.xattr =>
            {
                Err(Errno::NOSYS.into())
            }
            Op::Getxattr { size, name } => self.getxattr(n, name, size),
            Op::Listxattr { size } => self.listxattr(n, size),
            Op::Setxattr { flags, name, value } => {
                if value.len() > self.config.max_xattr_size {
                    return Err(Errno::TOOBIG.into());
                }
                let node = self.nodes.get(n)?;
                self.export.set_xattr(&node, name, value, flags)?;
                Ok(Reply::new())
            }
            Op::Removexattr { name } => {
                self.export.remove_xattr(&self.nodes.get(n)?, name)?;
                Ok(Reply::new())
            }
            // The kernel then checks permissions itself, from the attributes we report.
            Op::Access { .. } => Err(Errno::NOSYS.into()),
            Op::Lseek { .. } | Op::Syncfs | Op::Unsupported(_) => Err(Errno::NOSYS.into()),
        };
        reply.map(Some)
    }

    fn init(&self, i: InitIn) -> OpResult<Reply> {
        if i.major < fuse::KERNEL_VERSION {
            return Err(Errno::PROTO.into());
        }
        let mut r = Reply::new();
        if i.major > fuse::KERNEL_VERSION {
            // The guest will ask again with our major version.
            r.u32(fuse::KERNEL_VERSION).u32(fuse::KERNEL_MINOR_VERSION);
            return Ok(r);
        }
        let minor = i.minor.min(fuse::KERNEL_MINOR_VERSION);
        let mut offered = init::ASYNC_READ
            | init::BIG_WRITES
            | init::ATOMIC_O_TRUNC
            | init::PARALLEL_DIROPS
            | init::AUTO_INVAL_DATA
            | init::MAX_PAGES
            | init::CACHE_SYMLINKS;
        if self.config.readdirplus {
            offered |= init::DO_READDIRPLUS | init::READDIRPLUS_AUTO;
        }
        if self.config.announce_submounts {
            offered |= init::SUBMOUNTS;
        }
        if self.config.writeback && self.config.cache == CacheMode::Always {
            offered |= init::WRITEBACK_CACHE;
        }
        let flags = offered & i.flags;
        self.writeback
            .store(flags & init::WRITEBACK_CACHE != 0, Relaxed);
        self.submounts.store(flags & init::SUBMOUNTS != 0, Relaxed);
        let queue_size = self.queue_size.load(Relaxed);
        // The kernel's own cap for virtio-fs is the queue size less the header descriptors.
        let mut max_pages = self.config.max_pages.clamp(1, u32::from(u16::MAX));
        if queue_size > 4 {
            max_pages = max_pages.min(queue_size - 4);
        }
        let pages = if flags & init::MAX_PAGES != 0 {
            max_pages
        } else {
            32
        };
        let max_write = pages * 4096;
        let negotiated = Negotiated {
            guest_major: i.major,
            guest_minor: i.minor,
            guest_flags: i.flags,
            flags,
            max_pages: pages,
            configured_max_pages: self.config.max_pages,
            queue_size,
            max_write,
            max_readahead: i.max_readahead,
        };
        tracing::info!(
            guest = format!("{}.{}", i.major, i.minor),
            guest_flags = format!("{:#x}", i.flags),
            accepted = format!("{:#x}", flags),
            max_pages_flag = flags & init::MAX_PAGES != 0,
            max_pages = pages,
            configured_max_pages = self.config.max_pages,
            queue_size,
            max_write,
            cache = ?self.config.cache,
            "virtiofs FUSE_INIT"
        );
        self.stats.set_negotiated(negotiated);
        r.u32(fuse::KERNEL_VERSION)
            .u32(minor)
            .u32(i.max_readahead)
            .u32(flags)
            .u16(64) // max_background
            .u16(48) // congestion_threshold
            .u32(max_write)
            .u32(1); // time_gran
        if minor >= 23 {
            r.u16(max_pages.min(u32::from(u16::MAX)) as u16)
                .u16(0) // map_alignment
                .u32(0) // flags2
                .bytes(&[0; 28]);
        }
        Ok(r)
    }

    fn entry(&self, handle: Arc<PathHandle>, st: &Statx) -> OpResult<Reply> {
        self.entry_in(handle, st, None)
    }

    /// An entry found in the directory `parent` (a lookup's, or a listing's): a directory
    /// on another device than its parent's is announced as a submount, if agreed.
    fn entry_in(
        &self,
        handle: Arc<PathHandle>,
        st: &Statx,
        parent: Option<&PathHandle>,
    ) -> OpResult<Reply> {
        let mut r = Reply::with_capacity(128);
        self.push_entry(&mut r, handle, st, parent);
        Ok(r)
    }

    fn push_entry(
        &self,
        r: &mut Reply,
        handle: Arc<PathHandle>,
        st: &Statx,
        parent: Option<&PathHandle>,
    ) {
        let flags = match parent {
            Some(dir) if self.submounts.load(Relaxed) && is_submount(dir, st) => {
                fuse::ATTR_SUBMOUNT
            }
            _ => 0,
        };
        let id = self.nodes.remember(handle, st);
        let ttl = self.config.ttl();
        r.entry_with_flags(id, Some(st), ttl, ttl, flags);
    }

    fn lookup(&self, parent: u64, name: &[u8]) -> OpResult<Reply> {
        let dir = self.nodes.get(parent)?;
        match self.export.lookup(Self::dir(parent, &dir), name) {
            Ok((fd, st)) => self.entry_in(fd, &st, Some(&dir)),
            Err(ExportError::Os(Errno::NOENT)) if self.config.negative_ttl() != Ttl::ZERO => {
                // A negative entry: the guest answers this name itself until it times out.
                let mut r = Reply::with_capacity(128);
                r.entry(0, None, self.config.negative_ttl(), Ttl::ZERO);
                Ok(r)
            }
            Err(e) => Err(e),
        }
    }

    fn getattr(&self, id: u64) -> OpResult<Reply> {
        let st = sys::stat(self.nodes.get(id)?.fd()?.as_fd())?;
        let mut r = Reply::with_capacity(104);
        r.attr_out(&st, self.config.ttl());
        Ok(r)
    }

    fn setattr(&self, id: u64, s: &SetattrIn) -> OpResult<Reply> {
        let given = |bit: u32| s.valid & bit != 0;
        let time = |set: u32, now: u32, sec: u64, nsec: u32| {
            if !given(set) {
                sys::Time::Omit
            } else if given(now) {
                sys::Time::Now
            } else {
                sys::Time::At(sec as i64, i64::from(nsec))
            }
        };
        let set = SetAttr {
            mode: given(fattr::MODE).then_some(s.mode),
            uid: given(fattr::UID).then_some(s.uid),
            gid: given(fattr::GID).then_some(s.gid),
            size: given(fattr::SIZE).then_some(s.size),
            atime: time(fattr::ATIME, fattr::ATIME_NOW, s.atime, s.atimensec),
            mtime: time(fattr::MTIME, fattr::MTIME_NOW, s.mtime, s.mtimensec),
            // The virtio door does not offer HANDLE_KILLPRIV_V2: the kernel clears them.
            kill_suidgid: false,
        };
        let open = if given(fattr::FH) {
            self.file(s.fh).ok()
        } else {
            None
        };
        let handle = self.nodes.get(id)?;
        let open_fd = open.as_ref().map(|f| f.fd.as_fd());
        self.export.setattr(&handle, open_fd, &set)?;
        self.getattr(id)
    }

    // --- making and removing names ---------------------------------------------------------

    /// The directory behind node `id`, for the export core.
    fn dir(id: u64, handle: &Arc<PathHandle>) -> Dir<'_> {
        Dir {
            handle,
            is_root: id == fuse::ROOT_ID,
        }
    }

    /// Who asks: a root server gives new files to the caller, as a local create would.
    fn caller(h: &InHeader) -> Caller {
        Caller {
            uid: Some(h.uid),
            gid: Some(h.gid),
        }
    }

    fn made(&self, made: Made) -> OpResult<Reply> {
        self.entry(made.handle, &made.stat)
    }

    fn symlink(&self, h: &InHeader, name: &[u8], target: &[u8]) -> OpResult<Reply> {
        let dir = self.nodes.get(h.nodeid)?;
        let made = self
            .export
            .symlink(Self::dir(h.nodeid, &dir), name, target, Self::caller(h))?;
        self.made(made)
    }

    fn mknod(&self, h: &InHeader, mode: u32, rdev: u32, name: &[u8]) -> OpResult<Reply> {
        let dir = self.nodes.get(h.nodeid)?;
        // The old 32-bit device encoding FUSE carries.
        let major = (rdev >> 8) & 0xfff;
        let minor = (rdev & 0xff) | ((rdev >> 12) & 0xfff00);
        let made = self.export.mknod(
            Self::dir(h.nodeid, &dir),
            name,
            mode,
            sys::makedev(major, minor),
            Self::caller(h),
        )?;
        self.made(made)
    }

    fn mkdir(&self, h: &InHeader, mode: u32, name: &[u8]) -> OpResult<Reply> {
        let dir = self.nodes.get(h.nodeid)?;
        let made = self
            .export
            .mkdir(Self::dir(h.nodeid, &dir), name, mode, Self::caller(h))?;
        self.made(made)
    }

    fn unlink(&self, parent: u64, name: &[u8], is_dir: bool) -> OpResult<Reply> {
        let dir = self.nodes.get(parent)?;
        self.export.unlink(Self::dir(parent, &dir), name, is_dir)?;
        Ok(Reply::new())
    }

    fn rename(&self, from: u64, old: &[u8], to: u64, new: &[u8], flags: u32) -> OpResult<Reply> {
        // RENAME_NOREPLACE, RENAME_EXCHANGE and RENAME_WHITEOUT are not carried.
        if flags != 0 {
            return Err(Errno::INVAL.into());
        }
        let (old_dir, new_dir) = (self.nodes.get(from)?, self.nodes.get(to)?);
        self.export
            .rename(Self::dir(from, &old_dir), old, Self::dir(to, &new_dir), new)?;
        Ok(Reply::new())
    }

    fn link(&self, target: u64, parent: u64, name: &[u8]) -> OpResult<Reply> {
        let handle = self.nodes.get(target)?;
        let dir = self.nodes.get(parent)?;
        let dir = Self::dir(parent, &dir);
        self.export.link(&handle, dir, name)?;
        let (fd, st) = self.export.lookup(dir, name)?;
        self.entry(fd, &st)
    }

    // --- open files ---------------------------------------------------------------------

    fn file(&self, fh: u64) -> OpResult<Arc<OpenFile>> {
        lock(&self.files)
            .0
            .get(&fh)
            .cloned()
            .ok_or(ExportError::Os(Errno::BADF))
    }

    fn add_file(&self, fd: OwnedFd, charge: crossfs_export::budget::FdCharge, root: bool) -> u64 {
        let mut files = lock(&self.files);
        let fh = files.1;
        files.1 += 1;
        files.0.insert(
            fh,
            Arc::new(OpenFile {
                fd: OpenFd::new(fd, charge),
                root,
                dir: Mutex::new(()),
            }),
        );
        fh
    }

    /// Flags a guest's open becomes on the host: no creation here, no controlling tty; with
    /// writeback caching the kernel reads pages of files opened write-only and appends
    /// itself, so those become read-write and lose `O_APPEND` (as virtiofsd does).
    fn host_flags(&self, flags: u32) -> OFlags {
        let mut f = OFlags::from_bits_retain(flags as _)
            & !(OFlags::CREATE | OFlags::EXCL | OFlags::NOCTTY | OFlags::PATH);
        if self.writeback.load(Relaxed) {
            if f & OFlags::ACCMODE == OFlags::WRONLY {
                f = (f & !OFlags::ACCMODE) | OFlags::RDWR;
            }
            f &= !OFlags::APPEND;
        }
        // No O_NOFOLLOW: reopening goes through the /proc magic link, which lands on the
        // inode (a symlink is refused before), and create_at adds it itself.
        f
    }

    fn open_flags(&self) -> u32 {
        match self.config.cache {
            CacheMode::Never | CacheMode::Metadata => fopen::DIRECT_IO,
            CacheMode::Auto => 0,
            CacheMode::Always => fopen::KEEP_CACHE,
        }
    }

    fn open(&self, id: u64, flags: u32) -> OpResult<Reply> {
        let handle = self.nodes.get(id)?;
        let charge = self.fds.charge()?;
        let (fd, _) = self.export.open_file(&handle, self.host_flags(flags))?;
        let fh = self.add_file(fd, charge, false);
        let mut r = Reply::new();
        r.open_out(fh, self.open_flags());
        Ok(r)
    }

    fn create(&self, h: &InHeader, flags: u32, mode: u32, name: &[u8]) -> OpResult<Reply> {
        let dir = self.nodes.get(h.nodeid)?;
        let charge = self.fds.charge()?;
        let created = self.export.create(
            Self::dir(h.nodeid, &dir),
            name,
            self.host_flags(flags),
            flags & libc::O_EXCL as u32 != 0,
            mode,
            Self::caller(h),
        )?;
        let mut r = self.entry(created.handle, &created.stat)?;
        let fh = self.add_file(created.file, charge, false);
        r.open_out(fh, self.open_flags());
        Ok(r)
    }

    /// FUSE_TMPFILE (open(2) with `O_TMPFILE` in the guest): an unnamed file in the
    /// directory, made by [`Export::tmpfile`] and answered as FUSE_CREATE is, with a node
    /// and an open file. A later FUSE_LINK of the node gives it a name; the guest's
    /// `O_EXCL` (never to be linked) goes to the host with it.
    fn tmpfile(&self, h: &InHeader, flags: u32, mode: u32) -> OpResult<Reply> {
        let dir = self.nodes.get(h.nodeid)?;
        let charge = self.fds.charge()?;
        let mut host = self.host_flags(flags);
        if flags & libc::O_EXCL as u32 != 0 {
            host |= OFlags::EXCL;
        }
        let made = self
            .export
            .tmpfile(Self::dir(h.nodeid, &dir), host, mode, Self::caller(h))?;
        let mut r = self.entry(made.handle, &made.stat)?;
        let fh = self.add_file(made.file, charge, false);
        r.open_out(fh, self.open_flags());
        Ok(r)
    }

    fn read(&self, r: &ReadIn) -> OpResult<Reply> {
        if r.size > MAX_REQUEST_DATA {
            return Err(Errno::INVAL.into());
        }
        let file = self.file(r.fh)?;
        let mut reply = Reply::with_capacity(r.size as usize);
        let buf = reply.tail(r.size as usize);
        let mut done = 0;
        // A short read only at end of file: the kernel takes a short reply as EOF.
        while done < buf.len() {
            match sys::pread(file.fd.as_fd(), &mut buf[done..], r.offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(Errno::INTR) => {}
                Err(e) if done == 0 => return Err(e.into()),
                Err(_) => break,
            }
        }
        reply.truncate_body(done);
        self.stats.record_data(DataPath::ReadCopied, done);
        Ok(reply)
    }

    fn write(&self, fh: u64, offset: u64, data: &[u8]) -> OpResult<Reply> {
        self.export.policy.check_writable()?;
        let file = self.file(fh)?;
        let mut done = 0;
        while done < data.len() {
            match sys::pwrite(file.fd.as_fd(), &data[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(Errno::INTR) => {}
                Err(e) if done == 0 => return Err(e.into()),
                Err(_) => break,
            }
        }
        self.stats.record_data(DataPath::WriteCopied, done);
        let mut r = Reply::new();
        r.u32(done as u32).u32(0);
        Ok(r)
    }

    fn statfs(&self) -> OpResult<Reply> {
        let s = sys::statfs(self.export.root.fd()?.as_fd())?;
        let mut r = Reply::with_capacity(80);
        r.statfs_out(&encode::Statfs {
            blocks: s.blocks,
            bfree: s.bfree,
            bavail: s.bavail,
            files: s.files,
            ffree: s.ffree,
            bsize: s.bsize,
            namelen: s.namelen,
            frsize: s.bsize,
        });
        Ok(r)
    }

    fn opendir(&self, id: u64) -> OpResult<Reply> {
        let handle = self.nodes.get(id)?;
        let charge = self.fds.charge()?;
        let (fd, _) = self
            .export
            .open_file(&handle, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let fh = self.add_file(fd, charge, id == fuse::ROOT_ID);
        let mut r = Reply::new();
        r.open_out(fh, 0);
        Ok(r)
    }

    fn readdir(&self, node: u64, r: &ReadIn, plus: bool) -> OpResult<Reply> {
        if r.size > MAX_REQUEST_DATA {
            return Err(Errno::INVAL.into());
        }
        let file = self.file(r.fh)?;
        let _listing = lock(&file.dir);
        let size = r.size as usize;
        let mut reply = Reply::with_capacity(size.min(1 << 20));
        let handle = self.nodes.get(node)?;
        let dir = Self::dir(node, &handle);
        let fd = file.fd.as_fd();
        self.export
            .list(fd, file.root, r.offset, size.min(64 << 10), |e| {
                let dirent = encode::dirent_len(e.name.len());
                let need = if plus { 128 + dirent } else { dirent };
                if reply.body_len() + need > size {
                    return false;
                }
                let ty = u32::from(e.ty);
                if plus {
                    let dots = e.name == b"." || e.name == b"..";
                    // "." and "..", and names gone since the listing, go without an entry
                    // (node id 0: the kernel then links nothing and counts no lookup).
                    let found = if dots {
                        None
                    } else {
                        self.export.lookup(dir, e.name).ok()
                    };
                    match found {
                        Some((found, st)) => {
                            self.push_entry(&mut reply, found, &st, Some(&handle));
                        }
                        None => {
                            reply.entry(0, None, Ttl::ZERO, Ttl::ZERO);
                        }
                    }
                }
                encode::dirent(&mut reply, e.ino, e.next, ty, e.name);
                true
            })?;
        Ok(reply)
    }

    // --- extended attributes -------------------------------------------------------------

    fn xattr_reply(value: Vec<u8>, size: u32) -> OpResult<Reply> {
        let mut r = Reply::new();
        if size == 0 {
            r.u32(value.len() as u32).u32(0);
        } else if value.len() > size as usize {
            return Err(Errno::RANGE.into());
        } else {
            r.bytes(&value);
        }
        Ok(r)
    }

    fn getxattr(&self, id: u64, name: &[u8], size: u32) -> OpResult<Reply> {
        let node = self.nodes.get(id)?;
        let value = self
            .export
            .get_xattr(&node, name, self.config.max_xattr_size)?;
        Self::xattr_reply(value, size)
    }

    fn listxattr(&self, id: u64, size: u32) -> OpResult<Reply> {
        let node = self.nodes.get(id)?;
        let list = self.export.list_xattr(&node, self.config.max_xattr_size)?;
        Self::xattr_reply(list, size)
    }
}

impl Drop for FuseFs {
    fn drop(&mut self) {
        // The stream thread holds the stream's state, not the file system: end it.
        self.agent.close_all();
    }
}

/// The opcode of a request's first bytes, for logs (`None` if too short or unknown).
pub fn opcode_of(request: &[u8]) -> Option<Opcode> {
    let b = request.get(4..8)?;
    Opcode::from_u32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Whether `st` is a directory on another device than `parent`: the root of a file system
/// mounted inside the export. (virtiofsd compares mount ids, and so also announces a bind
/// mount of the same file system; its inode numbers cannot repeat those around it.)
fn is_submount(parent: &PathHandle, st: &Statx) -> bool {
    let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
    FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::Directory && dev != parent.key().0
}
