//! The crate's only `unsafe`: the fanotify and file-handle system calls rustix does not wrap.
//! Each wrapper turns raw return values into `io::Result` and owned fds.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `fanotify_init(flags, event_f_flags)`.
///
/// # Errors
/// `EPERM` without `CAP_SYS_ADMIN`; `EINVAL` for flags this kernel does not know.
pub(crate) fn fanotify_init(flags: u32, event_f_flags: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain integer arguments; the kernel returns a new fd or -1.
    let fd = unsafe { libc::fanotify_init(flags, event_f_flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fanotify_mark(fd, flags, mask, dirfd, NULL)`: marks the object `dirfd` refers to (with
/// `FAN_MARK_FILESYSTEM`, the whole filesystem it is on).
///
/// # Errors
/// `EXDEV`/`EOPNOTSUPP`/`ENODEV` when the filesystem cannot report file ids, `EINVAL` for an
/// unsupported mask.
pub(crate) fn fanotify_mark(
    fd: BorrowedFd<'_>,
    flags: u32,
    mask: u64,
    dirfd: BorrowedFd<'_>,
) -> io::Result<()> {
    // SAFETY: both fds are valid for the call; a NULL pathname means "dirfd itself".
    let rc = unsafe {
        libc::fanotify_mark(
            fd.as_raw_fd(),
            flags,
            mask,
            dirfd.as_raw_fd(),
            std::ptr::null(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The largest file handle the kernel hands out (`MAX_HANDLE_SZ`).
pub(crate) const MAX_HANDLE_BYTES: usize = 128;

/// `struct file_handle` with its flexible array sized to the maximum, so it lives on the
/// stack and resolving a handle allocates nothing.
#[repr(C)]
struct FileHandle {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; MAX_HANDLE_BYTES],
}

/// `open_by_handle_at(mount_fd, handle, flags)`.
///
/// # Errors
/// `ESTALE` when the object is gone, `EINVAL` for a handle longer than `MAX_HANDLE_BYTES`.
pub(crate) fn open_by_handle_at(
    mount_fd: BorrowedFd<'_>,
    handle_type: i32,
    handle: &[u8],
    flags: i32,
) -> io::Result<OwnedFd> {
    if handle.len() > MAX_HANDLE_BYTES {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut fh = FileHandle {
        handle_bytes: handle.len() as libc::c_uint,
        handle_type,
        f_handle: [0; MAX_HANDLE_BYTES],
    };
    fh.f_handle[..handle.len()].copy_from_slice(handle);
    // SAFETY: `fh` is a properly aligned `struct file_handle` whose `handle_bytes` matches the
    // initialised bytes that follow it; the kernel only reads it.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            std::ptr::addr_of_mut!(fh).cast::<libc::file_handle>(),
            flags,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a freshly opened descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
