//! The only module that makes system calls on files, and the only one allowed `unsafe`.
//!
//! Every function here takes file descriptors, never paths built from the export root: a fid's
//! inode is reached through its `O_PATH` descriptor, either directly (`*at` calls with
//! `AT_EMPTY_PATH`) or through the magic link `/proc/self/fd/N`, reached from a descriptor of
//! `/proc/self/fd` opened once at startup. A magic link lands on the inode itself and is never
//! followed further: opening one that names a symlink fails with `ELOOP`, `chmod` through it
//! acts on the symlink (and fails), `linkat(AT_SYMLINK_FOLLOW)` links the symlink itself.
//!
//! Most wrappers are thin layers over rustix; libc is used where rustix lacks the call
//! (open file description locks, file handles, vectored I/O on guest memory: `volatile_io`).

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{
    AtFlags, Dev, FileType, Mode, OFlags, RawDir, ResolveFlags, SeekFrom, StatFs, Statx,
    StatxFlags, Timespec, Timestamps, XattrFlags,
};
use rustix::io::{Errno, Result};
use rustix::path::DecInt;

mod file_handle;
mod volatile_io;
pub use file_handle::{file_handle, open_by_handle, open_dir_for_handles, FileHandle};
pub use volatile_io::{preadv_volatile, pwritev_volatile, MAX_IOVECS};

/// Flags of every descriptor that stands for a fid: a handle on the inode, not an open file,
/// and never the target of a symlink.
const PATH_FLAGS: OFlags = OFlags::PATH.union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Opens the export root as an `O_PATH` directory descriptor.
///
/// # Errors
/// Whatever `open(2)` reports (`ENOENT`, `ENOTDIR`, `EACCES`, ...).
pub fn open_root(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Opens `/proc/self/fd` (`O_PATH`), through which fids are reopened.
///
/// # Errors
/// `ENOENT` when /proc is not mounted; `EXDEV`-like failures are reported as `ENOENT` too,
/// since a /proc that is not procfs cannot be trusted.
pub fn open_proc_fd_dir() -> Result<OwnedFd> {
    let fd = rustix::fs::open(
        "/proc/self/fd",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // A bind mount or tmpfs pretending to be /proc would make reopening meaningless.
    let fs = rustix::fs::fstatfs(&fd)?;
    if fs.f_type != rustix::fs::PROC_SUPER_MAGIC {
        return Err(Errno::NOENT);
    }
    Ok(fd)
}

/// Whether `openat2(2)` works here (Linux >= 5.6 and not filtered by a seccomp policy).
pub fn has_openat2(dir: BorrowedFd<'_>) -> bool {
    rustix::fs::openat2(dir, c".", PATH_FLAGS, Mode::empty(), ResolveFlags::BENEATH).is_ok()
}

/// Opens one name beneath `dir` as a new `O_PATH|O_NOFOLLOW` handle: a walk step.
///
/// The name has been validated (no "/", not "." or ".."), so this can neither climb nor
/// traverse; with `openat2` the kernel enforces it again (`RESOLVE_BENEATH`,
/// `RESOLVE_NO_SYMLINKS`, `RESOLVE_NO_MAGICLINKS`). A final symlink yields a handle on the
/// symlink itself; using that handle as `dir` in the next step fails with `ENOTDIR`.
///
/// # Errors
/// `ENOENT`, `ENOTDIR`, `EACCES`, `ELOOP`, ... as the kernel reports them.
pub fn walk_one(dir: BorrowedFd<'_>, name: &CStr, openat2: bool) -> Result<OwnedFd> {
    if openat2 {
        rustix::fs::openat2(
            dir,
            name,
            PATH_FLAGS,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_SYMLINKS,
        )
    } else {
        rustix::fs::openat(dir, name, PATH_FLAGS, Mode::empty())
    }
}

/// Opens the inode behind `fd` with `flags` through `/proc/self/fd/N`. The caller has checked
/// that the inode is not a symlink (the kernel would refuse with `ELOOP` anyway).
///
/// # Errors
/// Whatever `open(2)` reports for the inode (`EACCES`, `EISDIR`, `ELOOP`, ...).
pub fn reopen(proc_fd: BorrowedFd<'_>, fd: BorrowedFd<'_>, flags: OFlags) -> Result<OwnedFd> {
    rustix::fs::openat(
        proc_fd,
        DecInt::from_fd(fd),
        flags | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// A new `O_PATH` handle on the inode behind any descriptor (used after creating a file, so
/// the fid's handle names exactly the inode that was created).
///
/// Without `O_NOFOLLOW`: with it, `O_PATH` would return a handle on the magic link itself.
/// Following the magic link lands on the inode and goes no further.
///
/// # Errors
/// `EMFILE`, `ENOMEM`.
pub fn path_handle(proc_fd: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    rustix::fs::openat(
        proc_fd,
        DecInt::from_fd(fd),
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`: creates (or opens) a name.
///
/// # Errors
/// `EEXIST`, `ELOOP` (the name is a symlink), `EACCES`, `ENOSPC`, ...
pub fn create_at(dir: BorrowedFd<'_>, name: &CStr, flags: OFlags, mode: u32) -> Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
}

/// `openat(dir, ".", flags | O_TMPFILE | O_CLOEXEC, mode)`: a regular file with no name in
/// the directory `dir` (an `O_PATH` handle will do), gone when its last descriptor closes
/// unless it is linked first. `flags` carries the access mode (which must allow writing)
/// and `O_EXCL` for a file never to be linked.
///
/// # Errors
/// `EOPNOTSUPP` (the file system has no `O_TMPFILE`), `EINVAL` (read-only access mode),
/// `ENOTDIR`, `EACCES`, `ENOSPC`, ...
pub fn tmpfile(dir: BorrowedFd<'_>, flags: OFlags, mode: u32) -> Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        c".",
        flags | OFlags::TMPFILE | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
}

/// Attributes of the inode behind any descriptor, `O_PATH` ones included, without following
/// a symlink.
///
/// # Errors
/// `EBADF`, `ENOMEM`; `ENOSYS` never escapes (falls back to `fstat`).
pub fn stat(fd: BorrowedFd<'_>) -> Result<Statx> {
    rustix::fs::statx(
        fd,
        c"",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
}

/// What Rstatfs reports about a file system.
#[derive(Clone, Copy, Debug)]
pub struct FsStats {
    /// `f_type` (the file system's magic number).
    pub ty: u32,
    /// `f_bsize`.
    pub bsize: u32,
    /// Totals and free counts, in blocks and inodes.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks available to unprivileged users.
    pub bavail: u64,
    /// Inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// `f_fsid` as one number.
    pub fsid: u64,
    /// Longest name.
    pub namelen: u32,
}

/// `fstatfs(2)` of the file system holding the inode (works on `O_PATH` descriptors).
/// rustix keeps `f_fsid` opaque in `statfs` and exposes it only through `fstatvfs`, so both
/// are asked.
///
/// # Errors
/// `EBADF`, `EIO`, `ENOSYS` (file systems without statfs).
pub fn statfs(fd: BorrowedFd<'_>) -> Result<FsStats> {
    let s: StatFs = rustix::fs::fstatfs(fd)?;
    let v = rustix::fs::fstatvfs(fd)?;
    Ok(FsStats {
        ty: s.f_type as u32,
        bsize: s.f_bsize as u32,
        blocks: s.f_blocks,
        bfree: s.f_bfree,
        bavail: s.f_bavail,
        files: s.f_files,
        ffree: s.f_ffree,
        fsid: v.f_fsid,
        namelen: s.f_namelen as u32,
    })
}

/// A symlink's target, read through its `O_PATH` handle.
///
/// # Errors
/// `EINVAL` when the inode is not a symlink, as readlink(2) says locally (readlinkat with an
/// empty path says `ENOENT` instead, which would suggest the file is gone).
pub fn readlink(fd: BorrowedFd<'_>) -> Result<Vec<u8>> {
    match rustix::fs::readlinkat(fd, c"", Vec::new()) {
        Ok(target) => Ok(target.into_bytes()),
        Err(Errno::NOENT) => Err(Errno::INVAL),
        Err(e) => Err(e),
    }
}

/// `pread(2)` into `buf`.
///
/// # Errors
/// `EBADF` (not open for reading), `EISDIR`, `EIO`, ...
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> Result<usize> {
    rustix::io::pread(fd, buf, offset)
}

/// `preadv2(2)` with `RWF_NOWAIT`: reads only what the page cache holds, never waiting for
/// the disk (nor for a lock the file system would take).
///
/// # Errors
/// `EAGAIN` (the data is not cached, or the read would block), `EOPNOTSUPP` (the file
/// system cannot tell), and what [`pread`] fails with.
pub fn pread_cached(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> Result<usize> {
    use rustix::io::{preadv2, ReadWriteFlags};
    preadv2(
        fd,
        &mut [std::io::IoSliceMut::new(buf)],
        offset,
        ReadWriteFlags::NOWAIT,
    )
}

/// Whether every page of the `len` bytes of `fd` from `offset` (cut at the end of the file,
/// whose size the caller gives) is in the page cache, by `cachestat(2)` (Linux 6.5): a
/// read of them then waits for no disk. `None` where the kernel lacks the call or the
/// file system cannot tell. Pages are counted as 4 KiB: on a system with larger pages the
/// answer errs towards "not all cached".
pub fn all_cached(fd: BorrowedFd<'_>, offset: u64, len: u64, size: u64) -> Option<bool> {
    /// `struct cachestat_range` of <linux/mman.h>.
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    /// `struct cachestat` of <linux/mman.h>.
    #[repr(C)]
    #[derive(Default)]
    struct Cachestat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    /// The same number on every architecture (the syscall tables were unified before it).
    const SYS_CACHESTAT: libc::c_long = 451;
    const PAGE: u64 = 4096;
    let end = offset.saturating_add(len).min(size);
    if end <= offset {
        return Some(true);
    }
    let pages = end.div_ceil(PAGE) - offset / PAGE;
    let range = Range {
        off: offset / PAGE * PAGE,
        len: pages * PAGE,
    };
    let mut st = Cachestat::default();
    // SAFETY: `range` and `st` are live, properly laid out (repr(C), as the kernel's
    // structs) for the duration of the call, which reads the one and writes the other;
    // `fd` is a valid descriptor borrowed for the call.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const Range,
            &mut st as *mut Cachestat,
            0u32,
        )
    };
    (rc == 0).then_some(st.nr_cache >= pages)
}

/// `pwrite(2)` of `buf`; on an `O_APPEND` descriptor Linux appends whatever the offset.
///
/// # Errors
/// `EBADF` (not open for writing), `ENOSPC`, `EFBIG`, ...
pub fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> Result<usize> {
    rustix::io::pwrite(fd, buf, offset)
}

/// Copies every byte of `from` (open for reading, from its start) into `to` (open for
/// writing, from its start), `copy_file_range(2)` first (which lets the file system share
/// the blocks), read and write where the file system cannot.
///
/// # Errors
/// `ENOSPC`, `EIO`, `EBADF`, ...
pub fn copy_file(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<u64> {
    let mut copied = 0u64;
    loop {
        match rustix::fs::copy_file_range(from, None, to, None, 1 << 30) {
            Ok(0) => return Ok(copied),
            Ok(n) => copied += n as u64,
            Err(Errno::INTR) => {}
            // Not between these files here (an older kernel, a file system without it):
            // the same by hand, from where the copy got to.
            Err(Errno::XDEV | Errno::INVAL | Errno::OPNOTSUPP | Errno::NOSYS) => break,
            Err(e) => return Err(e),
        }
    }
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match rustix::io::pread(from, &mut buf, copied) {
            Ok(0) => return Ok(copied),
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        };
        let mut done = 0;
        while done < n {
            match rustix::io::pwrite(to, &buf[done..n], copied + done as u64) {
                Ok(0) => return Err(Errno::NOSPC),
                Ok(w) => done += w,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
        copied += n as u64;
    }
}

/// `splice(2)` of up to `len` bytes waiting in the pipe `from` into `file` at `offset`, as
/// `pwrite` writes them: the pipe holds references to pages (a socket's buffers, say), and
/// the kernel copies them into the file without their passing through the caller's memory.
/// Never waits for the pipe: an empty one is `EAGAIN`. Returns the bytes written, which
/// may be fewer than `len` (a full file system after some, a pipe holding fewer).
///
/// # Errors
/// `EINVAL` (a descriptor opened with `O_APPEND`, which splice refuses, or a file system
/// that cannot take a splice), `EBADF` (not open for writing), `ENOSPC`, `EFBIG`, `EAGAIN`.
pub fn splice_to_file(
    from: BorrowedFd<'_>,
    file: BorrowedFd<'_>,
    offset: u64,
    len: usize,
) -> Result<usize> {
    use rustix::pipe::{splice, SpliceFlags};
    let mut off = offset;
    splice(from, None, file, Some(&mut off), len, SpliceFlags::NONBLOCK)
}

/// `fsync(2)` or, with `datasync`, `fdatasync(2)`.
///
/// # Errors
/// `EIO`, `EBADF`, `EROFS`/`EINVAL` for files that cannot be synced.
pub fn fsync(fd: BorrowedFd<'_>, datasync: bool) -> Result<()> {
    if datasync {
        rustix::fs::fdatasync(fd)
    } else {
        rustix::fs::fsync(fd)
    }
}

/// `fallocate(2)` with `mode` as Linux takes it (`FALLOC_FL_*`): every bit is passed
/// through, so the host's file system decides which modes it supports.
///
/// # Errors
/// `EOPNOTSUPP` (a mode the file system lacks, or an unknown bit), `EINVAL`, `EBADF` (not
/// open for writing), `ENOSPC`, `EFBIG`, `ENODEV`/`ESPIPE` (not a regular file), `EPERM`.
pub fn fallocate(fd: BorrowedFd<'_>, mode: u32, offset: u64, len: u64) -> Result<()> {
    let flags = rustix::fs::FallocateFlags::from_bits_retain(mode);
    rustix::fs::fallocate(fd, flags, offset, len)
}

/// `ftruncate(2)` on an open, writable descriptor.
///
/// # Errors
/// `EBADF`/`EINVAL` (not writable), `EFBIG`, `EPERM`.
pub fn truncate(fd: BorrowedFd<'_>, size: u64) -> Result<()> {
    rustix::fs::ftruncate(fd, size)
}

/// `chmod` of the inode behind `fd`, through its magic link (`fchmod` refuses `O_PATH`).
///
/// # Errors
/// `EPERM` (not the owner), `EOPNOTSUPP` (a symlink), `EROFS`.
pub fn chmod(proc_fd: BorrowedFd<'_>, fd: BorrowedFd<'_>, mode: u32) -> Result<()> {
    rustix::fs::chmodat(
        proc_fd,
        DecInt::from_fd(fd),
        Mode::from_raw_mode(mode),
        AtFlags::empty(),
    )
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH)`: changes owner and/or group of the inode itself
/// (a symlink's own, never its target's). `None`, or `-1` as chown(2) takes it, leaves a
/// field unchanged (rustix's `Uid` must not hold `-1`: found by the `serve_stream` fuzzer).
///
/// # Errors
/// `EPERM` when the server may not make the change, `EROFS`.
pub fn chown(fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> Result<()> {
    rustix::fs::chownat(
        fd,
        c"",
        uid.filter(|&u| u != !0).map(rustix::fs::Uid::from_raw),
        gid.filter(|&g| g != !0).map(rustix::fs::Gid::from_raw),
        AtFlags::EMPTY_PATH,
    )
}

/// A timestamp for [`set_times`]: leave it, set it to now, or set it to a value.
#[derive(Clone, Copy, Debug)]
pub enum Time {
    /// `UTIME_OMIT`.
    Omit,
    /// `UTIME_NOW`.
    Now,
    /// Seconds and nanoseconds.
    At(i64, i64),
}

impl Time {
    fn timespec(self) -> Timespec {
        match self {
            Time::Omit => Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_OMIT,
            },
            Time::Now => Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_NOW,
            },
            Time::At(sec, nsec) => Timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            },
        }
    }
}

/// `utimensat` on the inode behind `fd`, through its magic link (which lands on a symlink
/// itself rather than following it, so symlinks get their own times set).
///
/// # Errors
/// `EPERM`/`EACCES` (not the owner), `EINVAL` (nanoseconds out of range), `EROFS`.
pub fn set_times(
    proc_fd: BorrowedFd<'_>,
    fd: BorrowedFd<'_>,
    atime: Time,
    mtime: Time,
) -> Result<()> {
    let times = Timestamps {
        last_access: atime.timespec(),
        last_modification: mtime.timespec(),
    };
    rustix::fs::utimensat(proc_fd, DecInt::from_fd(fd), &times, AtFlags::empty())
}

/// `mkdirat(2)`.
///
/// # Errors
/// `EEXIST`, `ENOSPC`, `EACCES`, ...
pub fn mkdir(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<()> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode))
}

/// `symlinkat(2)`: `name` in `dir` pointing at `target` (the target is only data).
///
/// # Errors
/// `EEXIST`, `ENOSPC`, `EACCES`, ...
pub fn symlink(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    rustix::fs::symlinkat(target, dir, name)
}

/// `mknodat(2)` of a fifo, socket or (when the caller allows it) a device node.
///
/// # Errors
/// `EEXIST`, `EPERM` (devices without privilege), `EINVAL` (bad type).
pub fn mknod(dir: BorrowedFd<'_>, name: &CStr, mode: u32, dev: Dev) -> Result<()> {
    let ty = FileType::from_raw_mode(mode);
    rustix::fs::mknodat(dir, name, ty, Mode::from_raw_mode(mode & 0o7777), dev)
}

/// Makes a device number from major and minor.
pub fn makedev(major: u32, minor: u32) -> Dev {
    rustix::fs::makedev(major, minor)
}

/// `linkat(2)` of the inode behind `fd` (through its magic link, which needs no privilege,
/// unlike `AT_EMPTY_PATH`) as `name` in `dir`. A file made by [`tmpfile`] (without
/// `O_EXCL`) gets its first name this way.
///
/// # Errors
/// `EEXIST`, `EXDEV`, `EMLINK`, `ENOENT` (the inode was unlinked, or is a tmpfile made with
/// `O_EXCL`), ...
pub fn link(
    proc_fd: BorrowedFd<'_>,
    fd: BorrowedFd<'_>,
    dir: BorrowedFd<'_>,
    name: &CStr,
) -> Result<()> {
    rustix::fs::linkat(
        proc_fd,
        DecInt::from_fd(fd),
        dir,
        name,
        AtFlags::SYMLINK_FOLLOW,
    )
}

/// `renameat(2)` (replaces an existing target, as rename(2) does).
///
/// # Errors
/// `ENOENT`, `EXDEV`, `ENOTEMPTY`, `EISDIR`, `ENOTDIR`, `EINVAL`, ...
pub fn rename(
    old_dir: BorrowedFd<'_>,
    old: &CStr,
    new_dir: BorrowedFd<'_>,
    new: &CStr,
) -> Result<()> {
    rustix::fs::renameat(old_dir, old, new_dir, new)
}

/// `renameat2(2)` with `RENAME_NOREPLACE`: fails with `EEXIST` rather than replace `new`.
///
/// # Errors
/// As [`rename`], and `EEXIST`; `EINVAL` where the file system lacks the flag.
pub fn rename_no_replace(
    old_dir: BorrowedFd<'_>,
    old: &CStr,
    new_dir: BorrowedFd<'_>,
    new: &CStr,
) -> Result<()> {
    rustix::fs::renameat_with(
        old_dir,
        old,
        new_dir,
        new,
        rustix::fs::RenameFlags::NOREPLACE,
    )
}

/// `unlinkat(2)`; `dir_only` means `AT_REMOVEDIR`.
///
/// # Errors
/// `ENOENT`, `EISDIR`, `ENOTDIR`, `ENOTEMPTY`, `EBUSY`, ...
pub fn unlink(dir: BorrowedFd<'_>, name: &CStr, remove_dir: bool) -> Result<()> {
    let flags = if remove_dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(dir, name, flags)
}

/// Attributes of `name` in `dir`, not following a final symlink.
///
/// # Errors
/// `ENOENT`, `EACCES`, ...
pub fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Statx> {
    // The same fields as [`stat`], so a listing's attributes equal a getattr's.
    rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )
}

/// One directory entry as `getdents64(2)` reports it.
pub struct RawEntry<'a> {
    /// `d_ino`.
    pub ino: u64,
    /// `d_off`: the cookie that continues after this entry.
    pub next: u64,
    /// `d_type`.
    pub ty: u8,
    /// The name, without NUL.
    pub name: &'a [u8],
}

/// Reads the directory open at `fd` from cookie `offset` (0 = the start), handing each entry
/// to `each` until it returns `false` or the directory ends. Reads through a buffer of at most
/// `buf_len` bytes per `getdents64(2)` call.
///
/// The descriptor's position is moved; callers serialise access to one open directory.
///
/// # Errors
/// `EBADF` (not an open directory), `ENOTDIR`, `EINVAL` (bad cookie), `EIO`.
pub fn read_dir(
    fd: BorrowedFd<'_>,
    offset: u64,
    buf_len: usize,
    mut each: impl FnMut(RawEntry<'_>) -> bool,
) -> Result<()> {
    // Cookies are opaque 63-bit values (ext4 uses hashes); lseek takes them as they are.
    let offset = i64::try_from(offset).map_err(|_| Errno::INVAL)?;
    rustix::fs::seek(fd, SeekFrom::Start(offset as u64))?;
    let mut buf = Vec::with_capacity(buf_len.max(512));
    let mut dir = RawDir::new(fd, buf.spare_capacity_mut());
    while let Some(entry) = dir.next() {
        let entry = entry?;
        let raw = RawEntry {
            ino: entry.ino(),
            next: entry.next_entry_cookie(),
            ty: (entry.file_type().as_raw_mode() >> 12) as u8,
            name: entry.file_name().to_bytes(),
        };
        if !each(raw) {
            break;
        }
    }
    Ok(())
}

/// The path string `/proc/self/fd/N` for `fd`, for calls that only take paths (xattrs).
fn proc_path(fd: BorrowedFd<'_>) -> Vec<u8> {
    let mut p = b"/proc/self/fd/".to_vec();
    p.extend_from_slice(DecInt::from_fd(fd).as_bytes());
    p
}

/// The value of extended attribute `name`, at most `max` bytes.
///
/// # Errors
/// `ENODATA` (absent), `ERANGE`/`E2BIG` (larger than `max`), `EOPNOTSUPP`.
pub fn get_xattr(fd: BorrowedFd<'_>, name: &CStr, max: usize) -> Result<Vec<u8>> {
    let path = proc_path(fd);
    let size = rustix::fs::getxattr_query(path.as_slice(), name)?;
    if size > max {
        return Err(Errno::TOOBIG);
    }
    let mut buf = vec![0u8; size];
    let n = rustix::fs::getxattr(path.as_slice(), name, &mut buf[..])?;
    buf.truncate(n);
    Ok(buf)
}

/// The NUL-separated list of extended attribute names, at most `max` bytes.
///
/// # Errors
/// `ERANGE`/`E2BIG` (larger than `max`), `EOPNOTSUPP`.
pub fn list_xattr(fd: BorrowedFd<'_>, max: usize) -> Result<Vec<u8>> {
    let path = proc_path(fd);
    let size = rustix::fs::listxattr_query(path.as_slice())?;
    if size > max {
        return Err(Errno::TOOBIG);
    }
    let mut buf = vec![0u8; size];
    let n = rustix::fs::listxattr(path.as_slice(), &mut buf[..])?;
    buf.truncate(n);
    Ok(buf)
}

/// Sets extended attribute `name`; `flags` are Linux `XATTR_CREATE`/`XATTR_REPLACE`.
///
/// # Errors
/// `EEXIST`, `ENODATA`, `ENOSPC`, `EPERM`, `EOPNOTSUPP`, ...
pub fn set_xattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8], flags: u32) -> Result<()> {
    let flags = XattrFlags::from_bits(flags).ok_or(Errno::INVAL)?;
    rustix::fs::setxattr(proc_path(fd).as_slice(), name, value, flags)
}

/// Removes extended attribute `name`.
///
/// # Errors
/// `ENODATA` (absent), `EPERM`, `EOPNOTSUPP`.
pub fn remove_xattr(fd: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    rustix::fs::removexattr(proc_path(fd).as_slice(), name)
}

/// A POSIX byte-range lock request: `F_RDLCK`, `F_WRLCK` or `F_UNLCK` over `len` bytes from
/// `start` (`len` 0: to the end of the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockRange {
    /// `libc::F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub ty: i16,
    /// First byte.
    pub start: i64,
    /// Length; 0 means "to the end".
    pub len: i64,
    /// The holder's pid as the kernel reports it (-1 for open file description locks).
    pub pid: i32,
}

fn flock_of(r: &LockRange) -> libc::flock {
    // SAFETY: `flock` is plain old data; all-zero is a valid value, and every field the kernel
    // reads is set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = r.ty;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = r.start;
    fl.l_len = r.len;
    // Open file description locks require l_pid 0.
    fl.l_pid = 0;
    fl
}

/// Takes or releases an open file description lock (`F_OFD_SETLK`), never waiting.
/// Returns `false` when a conflicting lock is held.
///
/// # Errors
/// `EBADF` (not open with the needed access), `EINVAL`, `ENOLCK`.
pub fn ofd_setlk(fd: BorrowedFd<'_>, range: LockRange) -> Result<bool> {
    let fl = flock_of(&range);
    // SAFETY: `fd` is a live descriptor for the duration of the call; `fl` is a valid, fully
    // initialised `struct flock` that outlives the call.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if rc == 0 {
        return Ok(true);
    }
    match last_errno() {
        Errno::AGAIN | Errno::ACCESS => Ok(false),
        e => Err(e),
    }
}

/// Tests for a lock conflicting with `range` (`F_OFD_GETLK`); `None` when there is none.
///
/// # Errors
/// `EBADF`, `EINVAL`.
pub fn ofd_getlk(fd: BorrowedFd<'_>, range: LockRange) -> Result<Option<LockRange>> {
    let mut fl = flock_of(&range);
    // SAFETY: as in `ofd_setlk`; the kernel writes back into `fl`, which we own mutably.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc != 0 {
        return Err(last_errno());
    }
    if fl.l_type == libc::F_UNLCK as i16 {
        return Ok(None);
    }
    Ok(Some(LockRange {
        ty: fl.l_type,
        start: fl.l_start,
        len: fl.l_len,
        pid: fl.l_pid,
    }))
}

/// The errno of the libc call that just failed.
fn last_errno() -> Errno {
    Errno::from_raw_os_error(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

/// The effective uid of the server process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Raises the soft limit on open descriptors to the hard limit: every fid holds a descriptor,
/// and Linux clients keep thousands of fids. Returns the new soft limit.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        lim.current = lim.maximum;
        // Failure only means we keep the old limit; EMFILE will then surface per request.
        let _ = setrlimit(Resource::Nofile, lim);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_file_just_written_is_all_cached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 3 * 4096 + 5]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let size = 3 * 4096 + 5;
        // None only on kernels before 6.5 (or a file system that cannot tell).
        if let Some(cached) = all_cached(f.as_fd(), 1, 1 << 20, size) {
            assert!(cached);
            assert_eq!(all_cached(f.as_fd(), 4095, 2, size), Some(true));
        }
        // Nothing to read past the end: nothing to wait for.
        assert_eq!(all_cached(f.as_fd(), size, 10, size), Some(true));
    }

    #[test]
    fn magic_link_reopen_refuses_symlinks_and_never_follows() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("sl")).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let root = open_root(dir.path()).unwrap();
        let proc_fd = open_proc_fd_dir().unwrap();
        // Where openat2 is filtered (old kernels, seccomp), only the fallback can be checked.
        let modes: &[bool] = if has_openat2(root.as_fd()) {
            &[true, false]
        } else {
            &[false]
        };
        for &o2 in modes {
            check_walks(&root, &proc_fd, o2);
        }
    }

    /// The same guarantees with `openat2` and with the per-component `openat` fallback.
    fn check_walks(root: &OwnedFd, proc_fd: &OwnedFd, o2: bool) {
        let sl = walk_one(root.as_fd(), c"sl", o2).unwrap();
        let f = walk_one(root.as_fd(), c"f", o2).unwrap();
        assert_eq!(
            reopen(proc_fd.as_fd(), sl.as_fd(), OFlags::RDONLY).unwrap_err(),
            Errno::LOOP
        );
        assert!(reopen(proc_fd.as_fd(), f.as_fd(), OFlags::RDONLY).is_ok());
        assert_eq!(readlink(sl.as_fd()).unwrap(), b"/etc/passwd");
        assert_eq!(readlink(f.as_fd()).unwrap_err(), Errno::INVAL);
        // A handle made from an open descriptor names the file, not the magic link.
        let open = reopen(proc_fd.as_fd(), f.as_fd(), OFlags::RDONLY).unwrap();
        let h = path_handle(proc_fd.as_fd(), open.as_fd()).unwrap();
        assert_eq!(
            stat(h.as_fd()).unwrap().stx_ino,
            stat(f.as_fd()).unwrap().stx_ino
        );
        // Walking through the symlink fails: it is not a directory to the kernel.
        assert_eq!(
            walk_one(sl.as_fd(), c"passwd", o2).unwrap_err(),
            Errno::NOTDIR
        );
    }

    #[test]
    fn ofd_locks_conflict_between_open_descriptions() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let a = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join("f"))
            .unwrap();
        let b = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join("f"))
            .unwrap();
        let w = LockRange {
            ty: libc::F_WRLCK as i16,
            start: 0,
            len: 10,
            pid: 0,
        };
        assert!(ofd_setlk(a.as_fd(), w).unwrap());
        assert!(!ofd_setlk(b.as_fd(), w).unwrap());
        let held = ofd_getlk(b.as_fd(), w).unwrap().unwrap();
        assert_eq!(held.ty, libc::F_WRLCK as i16);
        assert_eq!(ofd_getlk(a.as_fd(), w).unwrap(), None);
    }
}
