//! From a decoded request to the file system's method, with its reply: the seam between the
//! session (bytes, channels, threads) and the mount's handlers (`crate::fs::face`).

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;

use crossfs_fuse_abi::{self as abi, fattr, Op, Opcode};

use super::reply::{
    self, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyLock, ReplyOpen, ReplySender, ReplyStatfs, ReplyWrite, ReplyXattr,
};
use super::types::{
    setattr_time, AccessFlags, BsdFileFlags, Errno, FileHandle, INodeNo, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, Request, TimeOrNow, WriteFlags,
};

/// The requests the mount serves, one method each; each answers through its reply, now or
/// from another thread. Requests not listed are answered ENOSYS by the session.
#[allow(clippy::too_many_arguments, missing_docs)]
pub(crate) trait Filesystem: Send + Sync + 'static {
    /// FUSE_INIT: what to ask of the kernel.
    ///
    /// # Errors
    /// An error refuses the session (the kernel is answered with its errno).
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> io::Result<()>;
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry);
    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64);
    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr);
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
        crtime: Option<SystemTime>,
        chgtime: Option<SystemTime>,
        bkuptime: Option<SystemTime>,
        flags: Option<BsdFileFlags>,
        kill_suidgid: bool,
        reply: ReplyAttr,
    );
    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData);
    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    );
    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    );
    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty);
    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty);
    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    );
    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    );
    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    );
    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen);
    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    );
    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    );
    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    );
    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    );
    fn fsync(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty);
    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    );
    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen);
    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    );
    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    );
    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        reply: ReplyEmpty,
    );
    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    );
    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs);
    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    );
    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr);
    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr);
    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty);
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty);
    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    );
    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    );
    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    );
}

/// Who may use the mount besides the kernel's own requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acl {
    /// Only the user who mounted (the kernel also enforces it without `allow_other`).
    Owner(u32),
    /// Anyone (`allow_other`).
    All,
}

/// Requests the kernel sends on its own behalf, whatever uid the header carries (writeback,
/// readahead, releases after the caller exited).
fn sent_by_kernel(op: Opcode) -> bool {
    use Opcode as O;
    matches!(
        op,
        O::INIT
            | O::DESTROY
            | O::READ
            | O::READDIR
            | O::READDIRPLUS
            | O::BATCH_FORGET
            | O::FORGET
            | O::WRITE
            | O::FSYNC
            | O::FSYNCDIR
            | O::RELEASE
            | O::RELEASEDIR
    )
}

fn name(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// Hands one request to `fs`, with its reply on `sender`. Requests without a handler, and
/// bodies that do not decode, are answered with an errno here.
pub(crate) fn dispatch<FS: Filesystem>(
    fs: &FS,
    req: &abi::Request<'_>,
    sender: &ReplySender,
    acl: Acl,
) {
    let h = req.header;
    let unique = h.unique;
    let error = |e: Errno| reply::send(&**sender, unique, -e.code(), &[]);
    let op = match &req.op {
        Ok(op) => op,
        Err(abi::DecodeError::UnknownOpcode(n)) => {
            tracing::debug!("FUSE opcode {n} unknown: ENOSYS");
            return error(Errno::ENOSYS);
        }
        Err(e) => {
            tracing::warn!("FUSE request {unique} does not decode: {e}");
            return error(Errno::EIO);
        }
    };
    if let (Acl::Owner(owner), Some(opcode)) = (acl, Opcode::from_u32(h.opcode)) {
        if h.uid != owner && !sent_by_kernel(opcode) {
            return error(Errno::EACCES);
        }
    }
    let r = &Request::from_header(&h);
    let ino = INodeNo(h.nodeid);
    let s = || sender.clone();
    match *op {
        Op::Init(_) => {
            tracing::warn!("FUSE_INIT after the session started: EIO");
            error(Errno::EIO)
        }
        // Nothing to tear down: the session ends when the device says ENODEV.
        Op::Destroy => reply::send(&**sender, unique, 0, &[]),
        Op::Lookup { name: n } => fs.lookup(r, ino, name(n), ReplyEntry::new(unique, s())),
        Op::Forget { nlookup } => fs.forget(r, ino, nlookup),
        Op::BatchForget(ref list) => {
            for &(node, nlookup) in list {
                fs.forget(r, INodeNo(node), nlookup);
            }
        }
        Op::Getattr { flags, fh } => {
            let fh = (flags & abi::GETATTR_FH != 0).then_some(FileHandle(fh));
            fs.getattr(r, ino, fh, ReplyAttr::new(unique, s()));
        }
        Op::Setattr(a) => {
            let has = |bit: u32| a.valid & bit != 0;
            let time = |bit, now, secs, nanos| {
                has(bit).then(|| match has(now) {
                    true => TimeOrNow::Now,
                    false => TimeOrNow::SpecificTime(setattr_time(secs, nanos)),
                })
            };
            fs.setattr(
                r,
                ino,
                has(fattr::MODE).then_some(a.mode),
                has(fattr::UID).then_some(a.uid),
                has(fattr::GID).then_some(a.gid),
                has(fattr::SIZE).then_some(a.size),
                time(fattr::ATIME, fattr::ATIME_NOW, a.atime, a.atimensec),
                time(fattr::MTIME, fattr::MTIME_NOW, a.mtime, a.mtimensec),
                has(fattr::CTIME).then(|| setattr_time(a.ctime, a.ctimensec)),
                has(fattr::FH).then_some(FileHandle(a.fh)),
                None,
                None,
                None,
                None,
                has(fattr::KILL_SUIDGID),
                ReplyAttr::new(unique, s()),
            );
        }
        Op::Readlink => fs.readlink(r, ino, ReplyData::new(unique, s())),
        Op::Symlink { name: n, target } => fs.symlink(
            r,
            ino,
            name(n),
            Path::new(name(target)),
            ReplyEntry::new(unique, s()),
        ),
        Op::Mknod {
            mode,
            rdev,
            umask,
            name: n,
        } => fs.mknod(
            r,
            ino,
            name(n),
            mode,
            umask,
            rdev,
            ReplyEntry::new(unique, s()),
        ),
        Op::Mkdir {
            mode,
            umask,
            name: n,
        } => fs.mkdir(r, ino, name(n), mode, umask, ReplyEntry::new(unique, s())),
        Op::Unlink { name: n } => fs.unlink(r, ino, name(n), ReplyEmpty::new(unique, s())),
        Op::Rmdir { name: n } => fs.rmdir(r, ino, name(n), ReplyEmpty::new(unique, s())),
        Op::Rename {
            newdir,
            flags,
            old,
            new,
        } => fs.rename(
            r,
            ino,
            name(old),
            INodeNo(newdir),
            name(new),
            RenameFlags::from_bits_retain(flags),
            ReplyEmpty::new(unique, s()),
        ),
        Op::Link { oldnodeid, name: n } => fs.link(
            r,
            INodeNo(oldnodeid),
            ino,
            name(n),
            ReplyEntry::new(unique, s()),
        ),
        Op::Open { flags } => fs.open(r, ino, OpenFlags(flags as i32), ReplyOpen::new(unique, s())),
        Op::Read(_) => match req.read_in_full() {
            Ok(a) => fs.read(
                r,
                ino,
                FileHandle(a.fh),
                a.offset,
                a.size,
                OpenFlags(a.flags as i32),
                (a.read_flags & abi::READ_LOCKOWNER != 0).then_some(LockOwner(a.lock_owner)),
                ReplyData::new(unique, s()),
            ),
            Err(_) => error(Errno::EIO),
        },
        Op::Write { data, .. } => match req.write_in() {
            Ok(w) => fs.write(
                r,
                ino,
                FileHandle(w.fh),
                w.offset,
                data,
                WriteFlags(w.write_flags),
                OpenFlags(w.flags as i32),
                (w.write_flags & abi::WRITE_LOCKOWNER != 0).then_some(LockOwner(w.lock_owner)),
                ReplyWrite::new(unique, s()),
            ),
            Err(_) => error(Errno::EIO),
        },
        Op::Statfs => fs.statfs(r, ino, ReplyStatfs::new(unique, s())),
        Op::Release { .. } | Op::Releasedir { .. } => match req.release_in() {
            Ok(rel) if h.opcode == Opcode::RELEASE as u32 => fs.release(
                r,
                ino,
                FileHandle(rel.fh),
                OpenFlags(rel.flags as i32),
                (rel.release_flags & abi::READ_LOCKOWNER != 0).then_some(LockOwner(rel.lock_owner)),
                rel.release_flags & abi::RELEASE_FLUSH != 0,
                ReplyEmpty::new(unique, s()),
            ),
            Ok(rel) => fs.releasedir(
                r,
                ino,
                FileHandle(rel.fh),
                OpenFlags(rel.flags as i32),
                ReplyEmpty::new(unique, s()),
            ),
            Err(_) => error(Errno::EIO),
        },
        Op::Fsync { fh, datasync } => fs.fsync(
            r,
            ino,
            FileHandle(fh),
            datasync,
            ReplyEmpty::new(unique, s()),
        ),
        Op::Fsyncdir { fh, datasync } => fs.fsyncdir(
            r,
            ino,
            FileHandle(fh),
            datasync,
            ReplyEmpty::new(unique, s()),
        ),
        Op::Setxattr {
            flags,
            name: n,
            value,
        } => fs.setxattr(
            r,
            ino,
            name(n),
            value,
            flags as i32,
            0,
            ReplyEmpty::new(unique, s()),
        ),
        Op::Getxattr { size, name: n } => {
            fs.getxattr(r, ino, name(n), size, ReplyXattr::new(unique, s()))
        }
        Op::Listxattr { size } => fs.listxattr(r, ino, size, ReplyXattr::new(unique, s())),
        Op::Removexattr { name: n } => {
            fs.removexattr(r, ino, name(n), ReplyEmpty::new(unique, s()))
        }
        Op::Flush { .. } => match req.flush_in() {
            Ok(f) => fs.flush(
                r,
                ino,
                FileHandle(f.fh),
                LockOwner(f.lock_owner),
                ReplyEmpty::new(unique, s()),
            ),
            Err(_) => error(Errno::EIO),
        },
        Op::Opendir { flags } => {
            fs.opendir(r, ino, OpenFlags(flags as i32), ReplyOpen::new(unique, s()))
        }
        Op::Readdir(a) => fs.readdir(
            r,
            ino,
            FileHandle(a.fh),
            a.offset,
            ReplyDirectory::new(unique, s(), a.size as usize),
        ),
        Op::Readdirplus(a) => fs.readdirplus(
            r,
            ino,
            FileHandle(a.fh),
            a.offset,
            ReplyDirectoryPlus::new(unique, s(), a.size as usize),
        ),
        Op::Access { mask } => fs.access(
            r,
            ino,
            AccessFlags(mask as i32),
            ReplyEmpty::new(unique, s()),
        ),
        Op::Create {
            flags,
            mode,
            umask,
            name: n,
        } => fs.create(
            r,
            ino,
            name(n),
            mode,
            umask,
            flags as i32,
            ReplyCreate::new(unique, s()),
        ),
        Op::Fallocate {
            fh,
            offset,
            length,
            mode,
        } => fs.fallocate(
            r,
            ino,
            FileHandle(fh),
            offset,
            length,
            mode as i32,
            ReplyEmpty::new(unique, s()),
        ),
        Op::Unsupported(o @ (Opcode::GETLK | Opcode::SETLK | Opcode::SETLKW)) => {
            let Ok(lk) = req.lk_in() else {
                return error(Errno::EIO);
            };
            if lk.lk_flags & abi::LK_FLOCK != 0 {
                // flock(2) is kept by the kernel (FUSE_FLOCK_LOCKS is not asked for).
                return error(Errno::ENOSYS);
            }
            let (fh, owner) = (FileHandle(lk.fh), LockOwner(lk.owner));
            let (start, end, typ) = (lk.start, lk.end, lk.typ as i32);
            if o == Opcode::GETLK {
                let reply = ReplyLock::new(unique, s());
                fs.getlk(r, ino, fh, owner, start, end, typ, lk.pid, reply);
            } else {
                let sleep = o == Opcode::SETLKW;
                let reply = ReplyEmpty::new(unique, s());
                fs.setlk(r, ino, fh, owner, start, end, typ, lk.pid, sleep, reply);
            }
        }
        // The caller's signal is noticed by polling its state instead
        // (`crate::fs::caller_signals`); ENOSYS tells the kernel to stop sending these.
        Op::Interrupt { .. } => error(Errno::ENOSYS),
        Op::Tmpfile { .. } | Op::Lseek { .. } | Op::Syncfs | Op::Unsupported(_) => {
            error(Errno::ENOSYS)
        }
    }
}
