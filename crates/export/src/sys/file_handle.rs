//! File handles (`name_to_handle_at(2)`, `open_by_handle_at(2)`): how the handle cache
//! (`crate::handles`) opens again an inode whose descriptor it closed, wherever the inode
//! was renamed to. Part of the `sys` module, the only one allowed `unsafe`.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::OFlags;
use rustix::io::Result;

use super::{last_errno, reopen};

/// Longest file handle Linux gives (`MAX_HANDLE_SZ`).
const MAX_HANDLE_SZ: usize = 128;

/// What the kernel calls a file handle: an inode named without a path, as NFS servers
/// name files (`name_to_handle_at(2)`). Opened again with [`open_by_handle`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHandle {
    ty: i32,
    bytes: Vec<u8>,
}

impl FileHandle {
    /// Bytes of the handle's own allocation (its opaque bytes).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }
}

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawFileHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// The file handle of the inode behind `fd` and the id of the mount it lies on.
///
/// # Errors
/// `EOPNOTSUPP` where the file system gives none (procfs, some FUSE file systems),
/// `EOVERFLOW` for a handle longer than Linux's maximum.
pub fn file_handle(fd: BorrowedFd<'_>) -> Result<(FileHandle, i32)> {
    let mut raw = RawFileHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mount_id = 0;
    // SAFETY: `raw` is a `struct file_handle` whose `handle_bytes` says how much room
    // follows it; the empty path with AT_EMPTY_PATH names `fd` itself; both out-pointers
    // outlive the call.
    let rc = unsafe {
        libc::name_to_handle_at(
            fd.as_raw_fd(),
            c"".as_ptr(),
            (&raw mut raw).cast::<libc::file_handle>(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(last_errno());
    }
    let len = (raw.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok((
        FileHandle {
            ty: raw.handle_type,
            bytes: raw.f_handle[..len].to_vec(),
        },
        mount_id,
    ))
}

/// Opens the inode `handle` names, on the mount `mount_fd` (an open descriptor of any file
/// there) lies on, with `flags`. Needs `CAP_DAC_READ_SEARCH`.
///
/// # Errors
/// `ESTALE` when the inode is gone, `EPERM` without the capability, `EINVAL` for a handle
/// of another file system.
pub fn open_by_handle(
    mount_fd: BorrowedFd<'_>,
    handle: &FileHandle,
    flags: OFlags,
) -> Result<OwnedFd> {
    let mut raw = RawFileHandle {
        handle_bytes: handle.bytes.len() as u32,
        handle_type: handle.ty,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    raw.f_handle[..handle.bytes.len()].copy_from_slice(&handle.bytes);
    // SAFETY: `raw` is a valid `struct file_handle` of `handle_bytes` bytes; the kernel
    // reads it only during the call.
    let rc = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            (&raw mut raw).cast::<libc::file_handle>(),
            (flags | OFlags::CLOEXEC).bits() as i32,
        )
    };
    if rc < 0 {
        return Err(last_errno());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(rc) })
}

/// Opens `fd`'s inode (a directory) for reading, as the mount descriptor
/// [`open_by_handle`] takes (it refuses `O_PATH` descriptors on some kernels).
///
/// # Errors
/// What `open` says.
pub fn open_dir_for_handles(proc_fd: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    reopen(proc_fd, fd, OFlags::RDONLY | OFlags::DIRECTORY)
}
