//! The operations both doors carry, each written once: a door translates its protocol into
//! one of these calls and the answer back, and decides nothing on its own.
//!
//! Every operation that takes a name checks, in this order: the export is writable (for
//! changes; `EROFS`), the name is one component (`EINVAL`, or `ENAMETOOLONG`), the name is
//! not reserved (`EPERM` to make or remove one, `ENOENT` to look one up), the policy allows
//! what is asked (devices, set-id bits), then it makes the system call and, for anything it
//! creates, sets the owner and exact permission bits ([`policy::finish_create`]) and reads
//! the new file's attributes.
//!
//! Files are named by [`PathHandle`]s, whose `O_PATH` descriptors are the export's cache
//! ([`crate::handles`]): an operation pins the descriptors it uses for its duration. Open
//! files are charged by the door, before the call, to the client's share of the one
//! [`crate::budget::FdPool`]: the share belongs to the client's connection, which only the
//! door knows.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::OFlags;
use rustix::io::Errno;

use crate::handles::PathHandle;
use crate::sys::{self, RawEntry, Time};
use crate::{names, policy, Export, ExportError, ExportResult, Statx};

/// A directory a client names, as its door knows it: its handle, and whether it is the
/// export's root (where the reserved names live).
#[derive(Clone, Copy, Debug)]
pub struct Dir<'a> {
    /// The directory's handle.
    pub handle: &'a Arc<PathHandle>,
    /// Whether this is the export root.
    pub is_root: bool,
}

/// Who asks for a new file, as the door was told: a root server gives what it makes to this
/// user and group, as a local create by that user would. `None` keeps the server's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The caller's user id, when the protocol says it.
    pub uid: Option<u32>,
    /// The group the new file should have, when the protocol says it.
    pub gid: Option<u32>,
}

/// A file system object just made (or found): its handle and its attributes.
#[derive(Debug)]
pub struct Made {
    /// The new object's handle.
    pub handle: Arc<PathHandle>,
    /// Its attributes after ownership and mode were set.
    pub stat: Statx,
}

/// What [`Export::create`] opened.
#[derive(Debug)]
pub struct Created {
    /// The open file.
    pub file: OwnedFd,
    /// The handle of the same inode.
    pub handle: Arc<PathHandle>,
    /// Its attributes.
    pub stat: Statx,
    /// Whether this call made it (false: an existing file was opened).
    pub made: bool,
}

/// The changes of one setattr. Empty (all `None`, both times [`Time::Omit`]) changes
/// nothing and succeeds even on a read-only export.
#[derive(Clone, Copy, Debug)]
pub struct SetAttr {
    /// Permission bits (`07777`); set-id bits as [`policy::Policy::setattr_perm`] allows.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (regular files only).
    pub size: Option<u64>,
    /// Access time.
    pub atime: Time,
    /// Modification time.
    pub mtime: Time,
    /// After the changes above, clear the set-id bits a write or truncate by a caller
    /// without `CAP_FSETID` clears ([`policy::dropped_on_change`]): the client's kernel
    /// leaves that to the file system (FUSE's `HANDLE_KILLPRIV_V2`), and this server's
    /// own writes keep them when it runs as root.
    pub kill_suidgid: bool,
}

impl Default for SetAttr {
    fn default() -> Self {
        SetAttr {
            mode: None,
            uid: None,
            gid: None,
            size: None,
            atime: Time::Omit,
            mtime: Time::Omit,
            kill_suidgid: false,
        }
    }
}

impl SetAttr {
    fn is_empty(&self) -> bool {
        self.mode.is_none()
            && self.uid.is_none()
            && self.gid.is_none()
            && self.size.is_none()
            && matches!(self.atime, Time::Omit)
            && matches!(self.mtime, Time::Omit)
            && !self.kill_suidgid
    }
}

/// Whether an open with these host flags may change the file (then the export must be
/// writable and set-id bits go first).
pub fn open_writes(flags: OFlags) -> bool {
    flags & OFlags::ACCMODE != OFlags::RDONLY || flags.contains(OFlags::TRUNC)
}

impl Export {
    /// A name in `dir` checked for a change: the export is writable, the name is one
    /// component, and not reserved.
    fn name_to_change(&self, dir: Dir<'_>, name: &[u8]) -> ExportResult<std::ffi::CString> {
        self.policy.check_writable()?;
        let c = names::component(name)?;
        self.check_not_reserved(dir.is_root, name)?;
        Ok(c)
    }

    /// One confined lookup step: `name` (one component; a reserved name is `ENOENT`) beneath
    /// `dir`, as an `O_PATH|O_NOFOLLOW` handle (a symlink is returned as itself, never
    /// followed), with its attributes.
    ///
    /// # Errors
    /// [`ExportError::InvalidName`], otherwise what the kernel says (`ENOENT`, `ENOTDIR`,
    /// `EXDEV` for an escape `openat2` caught, ...).
    pub fn lookup(&self, dir: Dir<'_>, name: &[u8]) -> ExportResult<(Arc<PathHandle>, Statx)> {
        let c = names::component(name)?;
        if self.is_reserved(dir.is_root, name) {
            return Err(Errno::NOENT.into());
        }
        self.lookup_checked(dir.handle, c)
    }

    fn lookup_checked(
        &self,
        dir: &Arc<PathHandle>,
        name: CString,
    ) -> ExportResult<(Arc<PathHandle>, Statx)> {
        let fd = sys::walk_one(dir.fd()?.as_fd(), &name, self.openat2)?;
        let st = sys::stat(fd.as_fd())?;
        Ok((self.handles.adopt(fd, &st, dir, name), st))
    }

    /// Reads the directory open at `fd` from cookie `offset`, handing each entry but the
    /// reserved ones to `each` until it returns `false` (see [`sys::read_dir`]).
    ///
    /// # Errors
    /// As [`sys::read_dir`].
    pub fn list(
        &self,
        fd: BorrowedFd<'_>,
        is_root: bool,
        offset: u64,
        buf_len: usize,
        mut each: impl FnMut(RawEntry<'_>) -> bool,
    ) -> ExportResult<()> {
        Ok(sys::read_dir(fd, offset, buf_len, |e| {
            self.is_reserved(is_root, e.name) || each(e)
        })?)
    }

    /// Looks up what was just made as `name` in `dir`, gives it to the caller and sets its
    /// exact permission bits.
    fn created(
        &self,
        dir: Dir<'_>,
        at: BorrowedFd<'_>,
        name: CString,
        perm: u32,
        caller: Caller,
    ) -> ExportResult<Made> {
        let fd = match sys::walk_one(at, &name, self.openat2) {
            Err(Errno::NOENT) => return Err(ExportError::Vanished),
            r => r?,
        };
        policy::finish_create(self.proc_fd(), fd.as_fd(), perm, self.owner(caller))?;
        let stat = sys::stat(fd.as_fd())?;
        let handle = self.handles.adopt(fd, &stat, dir.handle, name);
        Ok(Made { handle, stat })
    }

    /// The owner a new file gets: the caller's, when the server runs as root; without root
    /// the server keeps ownership (it cannot give files away, and pretending would lie).
    fn owner(&self, caller: Caller) -> Option<(Option<u32>, Option<u32>)> {
        self.is_root.then_some((caller.uid, caller.gid))
    }

    /// mkdir. As mkdir(2), the mode's set-id bits are ignored (a directory inherits
    /// `S_ISGID` from a setgid parent, nothing else).
    ///
    /// # Errors
    /// The name checks, then what `mkdirat`, `chown` or `chmod` say.
    pub fn mkdir(
        &self,
        dir: Dir<'_>,
        name: &[u8],
        mode: u32,
        caller: Caller,
    ) -> ExportResult<Made> {
        let c = self.name_to_change(dir, name)?;
        let perm = mode & 0o1777;
        let at = dir.handle.fd()?;
        sys::mkdir(at.as_fd(), &c, perm)?;
        self.created(dir, at.as_fd(), c, perm, caller)
    }

    /// symlink: the target is stored as given; it is data, never resolved by the server.
    ///
    /// # Errors
    /// The name checks, [`ExportError::Nul`] for a target holding NUL, then what
    /// `symlinkat` or `chown` say.
    pub fn symlink(
        &self,
        dir: Dir<'_>,
        name: &[u8],
        target: &[u8],
        caller: Caller,
    ) -> ExportResult<Made> {
        let c = self.name_to_change(dir, name)?;
        let target = names::c_string(target)?;
        let at = dir.handle.fd()?;
        sys::symlink(&target, at.as_fd(), &c)?;
        self.created(dir, at.as_fd(), c, 0o777, caller)
    }

    /// mknod: fifos, sockets and regular files (type 0 is a regular file, as mknod(2)
    /// says); device nodes only where the policy allows them.
    ///
    /// # Errors
    /// The name checks, `EPERM` for a device the policy refuses, `EINVAL` for another type,
    /// then what `mknodat` says.
    pub fn mknod(
        &self,
        dir: Dir<'_>,
        name: &[u8],
        mode: u32,
        rdev: rustix::fs::Dev,
        caller: Caller,
    ) -> ExportResult<Made> {
        let c = self.name_to_change(dir, name)?;
        self.policy.check_device(mode)?;
        let kind = match mode & libc::S_IFMT {
            0 => libc::S_IFREG,
            k
            @ (libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFREG) => k,
            _ => return Err(Errno::INVAL.into()),
        };
        let perm = self.policy.client_perm(mode);
        let at = dir.handle.fd()?;
        sys::mknod(at.as_fd(), &c, kind | perm, rdev)?;
        self.created(dir, at.as_fd(), c, perm, caller)
    }

    /// A hard link named `name` in `dir` to the inode behind `file`, made through its magic
    /// link (no privilege needed, unlike `AT_EMPTY_PATH`; a symlink links itself). A file
    /// made by [`Export::tmpfile`] gets its first name this way.
    ///
    /// # Errors
    /// The name checks, then what `linkat` says (`ENOENT` for a file removed meanwhile, or
    /// a tmpfile made with `O_EXCL`; `ENOTDIR` when `dir` is not a directory).
    pub fn link(&self, file: &Arc<PathHandle>, dir: Dir<'_>, name: &[u8]) -> ExportResult<()> {
        let c = self.name_to_change(dir, name)?;
        let (file, at) = (file.fd()?, dir.handle.fd()?);
        sys::link(self.proc_fd(), file.as_fd(), at.as_fd(), &c)?;
        Ok(())
    }

    /// rename(2): within or across directories, replacing an existing target.
    ///
    /// # Errors
    /// The name checks (both names), then what `renameat` says.
    pub fn rename(&self, from: Dir<'_>, old: &[u8], to: Dir<'_>, new: &[u8]) -> ExportResult<()> {
        let old = self.name_to_change(from, old)?;
        let new = self.name_to_change(to, new)?;
        let (from, to) = (from.handle.fd()?, to.handle.fd()?);
        sys::rename(from.as_fd(), &old, to.as_fd(), &new)?;
        Ok(())
    }

    /// rename(2) that never replaces: a taken `new` is `EEXIST`. Where the file system
    /// lacks `RENAME_NOREPLACE`, the name is looked at first, and a file another program
    /// makes under it between the look and the rename (microseconds) is replaced.
    ///
    /// # Errors
    /// As [`Export::rename`], and `EEXIST`.
    pub fn rename_no_replace(
        &self,
        from: Dir<'_>,
        old: &[u8],
        to: Dir<'_>,
        new: &[u8],
    ) -> ExportResult<()> {
        let old = self.name_to_change(from, old)?;
        let new = self.name_to_change(to, new)?;
        let (from, to) = (from.handle.fd()?, to.handle.fd()?);
        match sys::rename_no_replace(from.as_fd(), &old, to.as_fd(), &new) {
            Err(Errno::INVAL) => match sys::stat_at(to.as_fd(), &new) {
                Ok(_) => Err(Errno::EXIST.into()),
                Err(Errno::NOENT) => {
                    sys::rename(from.as_fd(), &old, to.as_fd(), &new)?;
                    Ok(())
                }
                Err(e) => Err(e.into()),
            },
            r => Ok(r?),
        }
    }

    /// Removes a name; `is_dir` for a directory (rmdir).
    ///
    /// # Errors
    /// The name checks, then what `unlinkat` says.
    pub fn unlink(&self, dir: Dir<'_>, name: &[u8], is_dir: bool) -> ExportResult<()> {
        let c = self.name_to_change(dir, name)?;
        sys::unlink(dir.handle.fd()?.as_fd(), &c, is_dir)?;
        Ok(())
    }

    /// Opens the inode behind `handle` (an `O_PATH` handle) with the host `flags`, through
    /// `/proc/self/fd`, which lands on the inode and follows nothing. A symlink is `ELOOP`
    /// (as `O_NOFOLLOW` gives locally), a device `EPERM` unless allowed; an open that may
    /// change the file needs a writable export and clears set-id bits (see [`policy`]).
    /// Returns the open descriptor and the attributes from before the open.
    ///
    /// # Errors
    /// As said, then what `open` says.
    pub fn open_file(
        &self,
        handle: &Arc<PathHandle>,
        flags: OFlags,
    ) -> ExportResult<(OwnedFd, Statx)> {
        let pinned = handle.fd()?;
        let handle = pinned.as_fd();
        let st = sys::stat(handle)?;
        let mode = u32::from(st.stx_mode);
        if mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(Errno::LOOP.into());
        }
        self.policy.check_device(mode)?;
        let writes = open_writes(flags);
        if writes {
            self.policy.check_writable()?;
        }
        let fd = sys::reopen(self.proc_fd(), handle, flags)?;
        if writes {
            self.policy.before_write(self.proc_fd(), handle, mode)?;
        }
        Ok((fd, st))
    }

    /// `fallocate(2)` on a file a client holds open (`open`, opened by
    /// [`Export::open_file`] or [`Export::create`]): `mode` (`FALLOC_FL_*`: keep-size,
    /// punch-hole, zero-range, collapse-range, insert-range, unshare) goes to the host as it
    /// is, so a client gets exactly the modes the host's file system supports.
    ///
    /// # Errors
    /// `EROFS` on a read-only export, then what `fallocate` says (`EOPNOTSUPP` for a mode
    /// the file system lacks or a bit Linux does not know, `EBADF` for a file not open for
    /// writing, `EINVAL`, `ENOSPC`, ...).
    pub fn fallocate(
        &self,
        open: BorrowedFd<'_>,
        mode: u32,
        offset: u64,
        len: u64,
    ) -> ExportResult<()> {
        self.policy.check_writable()?;
        sys::fallocate(open, mode, offset, len)?;
        Ok(())
    }

    /// Creates `name` in `dir` and opens it with `flags` (host flags; creation flags are
    /// added here). The create is exclusive first, so that only a file this call made gets
    /// the caller's owner and mode. Unless `exclusive`, an existing file is opened as
    /// [`Export::open_file`] opens one (a directory is `EISDIR`, as open(2) says).
    ///
    /// # Errors
    /// The name checks, `EEXIST` when `exclusive` and the name exists, then what the kernel
    /// says.
    pub fn create(
        &self,
        dir: Dir<'_>,
        name: &[u8],
        flags: OFlags,
        exclusive: bool,
        mode: u32,
        caller: Caller,
    ) -> ExportResult<Created> {
        let c = self.name_to_change(dir, name)?;
        let perm = self.policy.client_perm(mode);
        let flags = flags & !(OFlags::CREATE | OFlags::EXCL);
        // The name may come and go between the two tries; a local open(O_CREAT) never
        // fails for that, so try again a few times.
        let at = dir.handle.fd()?;
        for _ in 0..4 {
            match sys::create_at(at.as_fd(), &c, flags | OFlags::CREATE | OFlags::EXCL, perm) {
                Ok(file) => {
                    let fd = sys::path_handle(self.proc_fd(), file.as_fd())?;
                    policy::finish_create(self.proc_fd(), fd.as_fd(), perm, self.owner(caller))?;
                    let stat = sys::stat(fd.as_fd())?;
                    let handle = self.handles.adopt(fd, &stat, dir.handle, c);
                    return Ok(Created {
                        file,
                        handle,
                        stat,
                        made: true,
                    });
                }
                Err(Errno::EXIST) if !exclusive => {}
                Err(e) => return Err(e.into()),
            }
            let (handle, st) = match self.lookup_checked(dir.handle, c.clone()) {
                Ok(found) => found,
                Err(ExportError::Os(Errno::NOENT)) => continue,
                Err(e) => return Err(e),
            };
            if u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR {
                return Err(Errno::ISDIR.into());
            }
            let (file, _) = self.open_file(&handle, flags)?;
            let stat = sys::stat(file.as_fd())?;
            return Ok(Created {
                file,
                handle,
                stat,
                made: false,
            });
        }
        Err(Errno::NOENT.into())
    }

    /// A copy of the regular file behind `source`, made as `name` in `dir` (which must not
    /// exist: the create is exclusive) with the source's permission bits and owner, and
    /// open for writing: where a change the client predicted goes when a host program
    /// changed the file first (changes sent behind), so that neither is lost. The checks
    /// are [`Export::create`]'s; set-id bits are not copied.
    ///
    /// # Errors
    /// `EINVAL` when `source` is not a regular file, then [`Export::create`]'s and the
    /// copy's (`ENOSPC`, ...): a copy that fails is removed.
    pub fn copy_beside(
        &self,
        source: &Arc<PathHandle>,
        dir: Dir<'_>,
        name: &[u8],
    ) -> ExportResult<Created> {
        let (from, st) = self.open_file(source, OFlags::RDONLY | OFlags::CLOEXEC)?;
        if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFREG {
            return Err(Errno::INVAL.into());
        }
        let owner = Caller {
            uid: Some(st.stx_uid),
            gid: Some(st.stx_gid),
        };
        let perm = u32::from(st.stx_mode) & 0o777;
        let created = self.create(dir, name, OFlags::RDWR | OFlags::CLOEXEC, true, perm, owner)?;
        if let Err(e) = sys::copy_file(from.as_fd(), created.file.as_fd()) {
            // Nothing half made is left under the name.
            let _ = self.unlink(dir, name, false);
            return Err(e.into());
        }
        let stat = sys::stat(created.file.as_fd())?;
        Ok(Created { stat, ..created })
    }

    /// A regular file without a name in `dir`, open with `flags`, as open(2) with
    /// `O_TMPFILE` makes one: gone when its last descriptor closes, unless
    /// [`Export::link`] of its handle first gives it a name (beneath a directory of the
    /// export, checked as any link). `flags` are host flags: the access mode, which must
    /// allow writing, `O_EXCL` for a file never to be linked, and the flags an open keeps;
    /// creation flags are dropped. The rules are [`Export::create`]'s but for the name: the
    /// writable check, set-id bits only where the policy allows them, the caller's owner
    /// (when the server runs as root) and exactly the mode asked for. The handle has no
    /// name to walk again: once the handle cache has closed its descriptor, only a file
    /// handle finds it (see [`crate::handles`]). `made` is always true.
    ///
    /// # Errors
    /// `EROFS` on a read-only export, then what the kernel says: `EOPNOTSUPP` where the
    /// export's file system has no `O_TMPFILE`, `EINVAL` for a read-only access mode,
    /// `ENOTDIR` when `dir` is not a directory, `EACCES`, `ENOSPC`, ...
    pub fn tmpfile(
        &self,
        dir: Dir<'_>,
        flags: OFlags,
        mode: u32,
        caller: Caller,
    ) -> ExportResult<Created> {
        self.policy.check_writable()?;
        let perm = self.policy.client_perm(mode);
        let flags = flags & !(OFlags::CREATE | OFlags::TMPFILE | OFlags::TRUNC | OFlags::PATH);
        let file = sys::tmpfile(dir.handle.fd()?.as_fd(), flags, perm)?;
        let fd = sys::path_handle(self.proc_fd(), file.as_fd())?;
        policy::finish_create(self.proc_fd(), fd.as_fd(), perm, self.owner(caller))?;
        let stat = sys::stat(fd.as_fd())?;
        let handle = self.handles.adopt_anonymous(fd, &stat);
        Ok(Created {
            file,
            handle,
            stat,
            made: true,
        })
    }

    /// setattr of the inode behind `handle`, in the order that keeps each change: owner
    /// first (a chown clears set-id bits, made sure of here), then mode, then size (which
    /// moves mtime; through `open` when that is a writable descriptor of the file), then
    /// times, then the set-id bits `kill_suidgid` clears.
    ///
    /// # Errors
    /// `EROFS` on a read-only export, `EISDIR`/`EINVAL` to truncate a directory or anything
    /// else not a regular file, then what the kernel says.
    pub fn setattr(
        &self,
        handle: &Arc<PathHandle>,
        open: Option<BorrowedFd<'_>>,
        set: &SetAttr,
    ) -> ExportResult<()> {
        if set.is_empty() {
            return Ok(());
        }
        self.policy.check_writable()?;
        let pinned = handle.fd()?;
        let handle = pinned.as_fd();
        let proc_fd = self.proc_fd();
        if set.uid.is_some() || set.gid.is_some() {
            sys::chown(handle, set.uid, set.gid)?;
            // As the kernel does, checked rather than trusted to the exported file system.
            policy::drop_bits(proc_fd, handle)?;
        }
        if let Some(mode) = set.mode {
            let perm = if mode & policy::SETID != 0 {
                let current = u32::from(sys::stat(handle)?.stx_mode);
                self.policy.setattr_perm(mode, current)
            } else {
                mode & 0o7777
            };
            sys::chmod(proc_fd, handle, perm)?;
        }
        if let Some(size) = set.size {
            self.truncate(handle, open, size)?;
        }
        if !matches!((set.atime, set.mtime), (Time::Omit, Time::Omit)) {
            sys::set_times(proc_fd, handle, set.atime, set.mtime)?;
        }
        if set.kill_suidgid {
            policy::drop_bits(proc_fd, handle)?;
        }
        Ok(())
    }

    /// Truncation through `open` when it is writable, otherwise by reopening the inode for
    /// writing (which needs write permission, as truncate(2) does). Only regular files: a
    /// fifo reopened for writing would block. Set-id bits go first.
    fn truncate(
        &self,
        handle: BorrowedFd<'_>,
        open: Option<BorrowedFd<'_>>,
        size: u64,
    ) -> ExportResult<()> {
        let mode = u32::from(sys::stat(handle)?.stx_mode);
        if mode & libc::S_IFMT == libc::S_IFREG {
            self.policy.before_write(self.proc_fd(), handle, mode)?;
        }
        if let Some(fd) = open {
            match sys::truncate(fd, size) {
                Ok(()) => return Ok(()),
                // Opened read-only (or a directory): as without a descriptor.
                Err(Errno::BADF | Errno::INVAL) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match mode & libc::S_IFMT {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(Errno::ISDIR.into()),
            _ => return Err(Errno::INVAL.into()),
        }
        let w = sys::reopen(self.proc_fd(), handle, OFlags::WRONLY)?;
        sys::truncate(w.as_fd(), size)?;
        Ok(())
    }

    /// Sets extended attribute `name` of the inode behind `handle` (`flags`: `XATTR_CREATE`,
    /// `XATTR_REPLACE`).
    ///
    /// # Errors
    /// `EROFS`, [`ExportError::Nul`] for a name holding NUL, then what `setxattr` says.
    pub fn set_xattr(
        &self,
        handle: &Arc<PathHandle>,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> ExportResult<()> {
        self.policy.check_writable()?;
        let name = names::c_string(name)?;
        sys::set_xattr(handle.fd()?.as_fd(), &name, value, flags)?;
        Ok(())
    }

    /// Removes extended attribute `name` of the inode behind `handle`.
    ///
    /// # Errors
    /// `EROFS`, [`ExportError::Nul`], then what `removexattr` says.
    pub fn remove_xattr(&self, handle: &Arc<PathHandle>, name: &[u8]) -> ExportResult<()> {
        self.policy.check_writable()?;
        let name = names::c_string(name)?;
        sys::remove_xattr(handle.fd()?.as_fd(), &name)?;
        Ok(())
    }

    /// The value of extended attribute `name`, at most `max` bytes.
    ///
    /// # Errors
    /// `ERANGE` for an empty name (as getxattr(2) says), [`ExportError::Nul`], then what
    /// `getxattr` says.
    pub fn get_xattr(
        &self,
        handle: &Arc<PathHandle>,
        name: &[u8],
        max: usize,
    ) -> ExportResult<Vec<u8>> {
        if name.is_empty() {
            return Err(Errno::RANGE.into());
        }
        let name = names::c_string(name)?;
        Ok(sys::get_xattr(handle.fd()?.as_fd(), &name, max)?)
    }

    /// The NUL-separated names of the extended attributes, at most `max` bytes.
    ///
    /// # Errors
    /// What `listxattr` says.
    pub fn list_xattr(&self, handle: &Arc<PathHandle>, max: usize) -> ExportResult<Vec<u8>> {
        Ok(sys::list_xattr(handle.fd()?.as_fd(), max)?)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::policy::Policy;

    fn opened(export: &Export, name: &[u8]) -> OwnedFd {
        let root = Dir {
            handle: &export.root,
            is_root: true,
        };
        let (handle, _) = export.lookup(root, name).unwrap();
        export.open_file(&handle, OFlags::RDWR).unwrap().0
    }

    #[test]
    fn fallocate_passes_modes_through_and_refuses_on_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 64 << 10]).unwrap();
        let export = Export::open(dir.path(), Policy::default(), None).unwrap();
        let fd = opened(&export, b"f");

        // Keep-size: blocks beyond the end, size unchanged (where the file system has it).
        let keep = libc::FALLOC_FL_KEEP_SIZE as u32;
        match export.fallocate(fd.as_fd(), keep, 0, 1 << 20) {
            Ok(()) => assert_eq!(std::fs::metadata(&path).unwrap().size(), 64 << 10),
            Err(e) => assert_eq!(e.errno(), libc::EOPNOTSUPP),
        }
        // Plain: the file grows.
        export.fallocate(fd.as_fd(), 0, 0, 128 << 10).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().size(), 128 << 10);
        // Punch-hole: zeros where data was, size unchanged.
        let punch = (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) as u32;
        match export.fallocate(fd.as_fd(), punch, 4096, 8192) {
            Ok(()) => {
                let data = std::fs::read(&path).unwrap();
                assert_eq!(data.len(), 128 << 10);
                assert!(data[4096..12288].iter().all(|&b| b == 0));
                assert_eq!(data[0], 7);
                assert_eq!(data[12288], 7);
            }
            Err(e) => assert_eq!(e.errno(), libc::EOPNOTSUPP),
        }
        // A bit Linux does not know.
        let err = export.fallocate(fd.as_fd(), 1 << 30, 0, 4096).unwrap_err();
        assert_eq!(err.errno(), libc::EOPNOTSUPP);
        // A descriptor open only for reading.
        let ro = std::fs::File::open(&path).unwrap();
        let err = export.fallocate(ro.as_fd(), 0, 0, 4096).unwrap_err();
        assert_eq!(err.errno(), libc::EBADF);

        let read_only = Policy {
            read_only: true,
            ..Policy::default()
        };
        let export = Export::open(dir.path(), read_only, None).unwrap();
        let err = export.fallocate(fd.as_fd(), 0, 0, 1 << 20).unwrap_err();
        assert_eq!(err.errno(), libc::EROFS);
        assert_eq!(std::fs::metadata(&path).unwrap().size(), 128 << 10);
    }

    fn root(export: &Export) -> Dir<'_> {
        Dir {
            handle: &export.root,
            is_root: true,
        }
    }

    fn names_in(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_tmpfile_is_written_then_linked_and_the_name_shows_the_data() {
        let base = tempfile::tempdir().unwrap();
        let top = base.path().join("export");
        std::fs::create_dir_all(top.join("d")).unwrap();
        let export = Export::open(&top, Policy::default(), None).unwrap();
        let (d, _) = export.lookup(root(&export), b"d").unwrap();
        let d = Dir {
            handle: &d,
            is_root: false,
        };

        let made = export
            .tmpfile(d, OFlags::RDWR, 0o6640, Caller::default())
            .unwrap();
        assert!(made.made);
        assert_eq!(made.stat.stx_nlink, 0);
        // As create: set-id bits dropped, exactly the mode asked for (no umask).
        assert_eq!(u32::from(made.stat.stx_mode), libc::S_IFREG | 0o640);
        assert!(names_in(&top.join("d")).is_empty());
        assert_eq!(sys::pwrite(made.file.as_fd(), b"data", 0).unwrap(), 4);

        export.link(&made.handle, d, b"named").unwrap();
        assert_eq!(std::fs::read(top.join("d/named")).unwrap(), b"data");
        let st = std::fs::metadata(top.join("d/named")).unwrap();
        assert_eq!((st.ino(), st.nlink()), (made.stat.stx_ino, 1));
        // Still the same open file: a write now shows under the name.
        sys::pwrite(made.file.as_fd(), b"!", 4).unwrap();
        assert_eq!(std::fs::read(top.join("d/named")).unwrap(), b"data!");

        // One never linked leaves nothing behind.
        let gone = export
            .tmpfile(root(&export), OFlags::WRONLY, 0o600, Caller::default())
            .unwrap();
        sys::pwrite(gone.file.as_fd(), b"never seen", 0).unwrap();
        drop(gone);
        assert_eq!(names_in(&top), ["d"]);
        assert_eq!(names_in(&top.join("d")), ["named"]);

        // O_EXCL: never to be linked, as open(2) says.
        let excl = export
            .tmpfile(d, OFlags::RDWR | OFlags::EXCL, 0o600, Caller::default())
            .unwrap();
        let e = export.link(&excl.handle, d, b"excl").unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT);
        // O_TMPFILE needs an access mode that writes.
        let e = export
            .tmpfile(d, OFlags::RDONLY, 0o600, Caller::default())
            .unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        assert_eq!(names_in(&top.join("d")), ["named"]);
    }

    #[test]
    fn a_tmpfile_is_linked_only_beneath_the_export() {
        let base = tempfile::tempdir().unwrap();
        let (top, outside) = (base.path().join("export"), base.path().join("outside"));
        std::fs::create_dir(&top).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, top.join("out")).unwrap();
        std::fs::write(top.join("f"), "f").unwrap();
        let export = Export::open(&top, Policy::default(), None).unwrap();
        let made = export
            .tmpfile(root(&export), OFlags::RDWR, 0o644, Caller::default())
            .unwrap();
        for name in [
            &b"../escape"[..],
            b"/tmp/escape",
            b"out/x",
            b"..",
            b".",
            b"",
        ] {
            let e = export.link(&made.handle, root(&export), name).unwrap_err();
            assert_eq!(
                e.errno(),
                libc::EINVAL,
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
        // A symlink to a directory outside is a symlink, never a directory to link into;
        // nor is a file a directory.
        for name in [&b"out"[..], b"f"] {
            let (handle, _) = export.lookup(root(&export), name).unwrap();
            let into = Dir {
                handle: &handle,
                is_root: false,
            };
            let e = export.link(&made.handle, into, b"x").unwrap_err();
            assert_eq!(e.errno(), libc::ENOTDIR);
            // Nor is it a directory to make a tmpfile in.
            let e = export
                .tmpfile(into, OFlags::RDWR, 0o644, Caller::default())
                .unwrap_err();
            assert_eq!(e.errno(), libc::ENOTDIR);
        }
        assert!(names_in(&outside).is_empty());
        assert_eq!(names_in(&top), ["f", "out"]);
    }

    #[test]
    fn a_read_only_export_makes_no_tmpfile() {
        let dir = tempfile::tempdir().unwrap();
        let read_only = Policy {
            read_only: true,
            ..Policy::default()
        };
        let export = Export::open(dir.path(), read_only, None).unwrap();
        let e = export
            .tmpfile(root(&export), OFlags::RDWR, 0o644, Caller::default())
            .unwrap_err();
        assert_eq!(e.errno(), libc::EROFS);
    }

    #[test]
    fn a_file_system_without_o_tmpfile_says_eopnotsupp() {
        // procfs has no O_TMPFILE; a server that is not root may not write there first.
        let export = Export::open(std::path::Path::new("/proc"), Policy::default(), None).unwrap();
        let e = export
            .tmpfile(root(&export), OFlags::RDWR, 0o600, Caller::default())
            .unwrap_err();
        let expected = if export.is_root {
            libc::EOPNOTSUPP
        } else {
            libc::EACCES
        };
        assert_eq!(e.errno(), expected);
    }
}
