//! The only unsafe code in the crate: what rustix does not cover.
//!
//! rustix 1.x knows `AF_VSOCK` but has no `sockaddr_vm` type, no vsock socket
//! options and no vsock ioctl, and adopting an inherited descriptor number is
//! inherently unsafe. Each `unsafe` block states why it is sound.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use rustix::net::addr::{SocketAddrArg, SocketAddrLen, SocketAddrOpaque};
use rustix::net::{AddressFamily, SocketAddrAny};

/// `SO_VM_SOCKETS_BUFFER_SIZE` from `<linux/vm_sockets.h>` (not in libc).
const SO_VM_SOCKETS_BUFFER_SIZE: libc::c_int = 0;
/// `SO_VM_SOCKETS_BUFFER_MAX_SIZE` from `<linux/vm_sockets.h>`.
const SO_VM_SOCKETS_BUFFER_MAX_SIZE: libc::c_int = 2;
/// `IOCTL_VM_SOCKETS_GET_LOCAL_CID`, `_IO(7, 0xb9)`, from `<linux/vm_sockets.h>`.
const IOCTL_VM_SOCKETS_GET_LOCAL_CID: libc::c_ulong = 0x7b9;

/// A vsock socket address, passable to rustix's `bind` and `connect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VsockAddr {
    pub(crate) cid: u32,
    pub(crate) port: u32,
}

impl VsockAddr {
    fn to_raw(self) -> libc::sockaddr_vm {
        libc::sockaddr_vm {
            svm_family: libc::AF_VSOCK as libc::sa_family_t,
            svm_reserved1: 0,
            svm_port: self.port,
            svm_cid: self.cid,
            svm_zero: [0; 4],
        }
    }

    /// Decodes a vsock address returned by `getsockname`/`getpeername`/`accept`.
    pub(crate) fn from_any(any: &SocketAddrAny) -> Option<VsockAddr> {
        if any.address_family() != AddressFamily::VSOCK
            || (any.addr_len() as usize) < size_of::<libc::sockaddr_vm>()
        {
            return None;
        }
        // SAFETY: `as_ptr` points at a `sockaddr_storage`-sized buffer, of
        // which the kernel filled at least `size_of::<sockaddr_vm>()` bytes
        // (checked above) for an `AF_VSOCK` address; `sockaddr_vm` is plain
        // old data, and `read_unaligned` imposes no alignment requirement.
        let raw = unsafe { any.as_ptr().cast::<libc::sockaddr_vm>().read_unaligned() };
        Some(VsockAddr {
            cid: raw.svm_cid,
            port: raw.svm_port,
        })
    }
}

// SAFETY: `with_sockaddr` passes `f` a pointer to a fully initialised
// `sockaddr_vm` on the stack, valid for the whole call, together with exactly
// its size; that is a valid `AF_VSOCK` address for `bind`/`connect`.
unsafe impl SocketAddrArg for VsockAddr {
    unsafe fn with_sockaddr<R>(
        &self,
        f: impl FnOnce(*const SocketAddrOpaque, SocketAddrLen) -> R,
    ) -> R {
        let raw = self.to_raw();
        f(
            (&raw as *const libc::sockaddr_vm).cast(),
            size_of::<libc::sockaddr_vm>() as SocketAddrLen,
        )
    }
}

/// Sets the vsock receive buffer size: raises the maximum first, as the
/// kernel clamps `SO_VM_SOCKETS_BUFFER_SIZE` to it.
pub(crate) fn set_vsock_buffer_size(fd: BorrowedFd<'_>, size: u64) -> io::Result<()> {
    // The kernel clamps the maximum to no less than the current size, so
    // raising it first is always safe.
    set_vsock_opt(fd, SO_VM_SOCKETS_BUFFER_MAX_SIZE, size)?;
    set_vsock_opt(fd, SO_VM_SOCKETS_BUFFER_SIZE, size)
}

/// Reads the vsock receive buffer size (`SO_VM_SOCKETS_BUFFER_SIZE`).
pub(crate) fn vsock_buffer_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut value: u64 = 0;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: `fd` is a live descriptor for the duration of the borrow;
    // `value` and `len` are valid, writable, and `len` is `value`'s size.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::AF_VSOCK,
            SO_VM_SOCKETS_BUFFER_SIZE,
            (&mut value as *mut u64).cast(),
            &mut len,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

fn set_vsock_opt(fd: BorrowedFd<'_>, name: libc::c_int, value: u64) -> io::Result<()> {
    // SAFETY: `fd` is a live descriptor for the duration of the borrow;
    // `value` is a readable `u64`, and the length passed is its size, which
    // is what the kernel expects for these vsock options.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::AF_VSOCK,
            name,
            (&value as *const u64).cast(),
            size_of::<u64>() as libc::socklen_t,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This machine's own vsock CID, from `/dev/vsock`.
pub(crate) fn vsock_local_cid() -> io::Result<u32> {
    let dev = std::fs::File::open("/dev/vsock")?;
    let mut cid: libc::c_uint = 0;
    // SAFETY: `dev` is open for the duration of the call, and this ioctl
    // writes one `unsigned int` through the pointer, which points at `cid`.
    let ret = unsafe {
        libc::ioctl(
            dev.as_raw_fd(),
            IOCTL_VM_SOCKETS_GET_LOCAL_CID as _,
            &mut cid as *mut libc::c_uint,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(cid)
}

/// Adopts inherited descriptor `raw` if `check` accepts it.
///
/// `check` sees the descriptor borrowed; if it returns `Err`, the descriptor
/// is left open and unowned. Returns `Ok(None)` if `raw` is not open.
///
/// Soundness rests on the contract of [`Addr::Fd`](crate::Addr::Fd):
/// naming `fd:N` hands descriptor N to this crate, and the caller
/// (`inherited.rs`) guarantees under a lock that no other `fd:N` user in
/// this process holds it.
pub(crate) fn adopt_fd<T, E>(
    raw: RawFd,
    check: impl FnOnce(BorrowedFd<'_>) -> Result<T, E>,
) -> Result<Option<(OwnedFd, T)>, E> {
    if raw < 0 {
        return Ok(None);
    }
    // SAFETY: F_GETFD only reads the descriptor flags of `raw`; it touches
    // no memory, and on a number that is not open it just fails with EBADF.
    if unsafe { libc::fcntl(raw, libc::F_GETFD) } == -1 {
        return Ok(None);
    }
    // SAFETY: `raw` is open (checked just above) and, by the `fd:N` contract,
    // owned by us and closed by nothing else, so it stays open while borrowed.
    let borrowed = unsafe { BorrowedFd::borrow_raw(raw) };
    let value = check(borrowed)?;
    // SAFETY: as above, `raw` is open and by the `fd:N` contract ours alone;
    // the caller's registry ensures we create at most one owner for it.
    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
    Ok(Some((owned, value)))
}

/// Runs `f` on descriptor `raw` borrowed, if it is open; `None` if it is not.
///
/// Soundness as for [`adopt_fd`]: by the `fd:N` contract nothing else in this process
/// closes `raw` while it is borrowed.
pub(crate) fn with_borrowed<T>(raw: RawFd, f: impl FnOnce(BorrowedFd<'_>) -> T) -> Option<T> {
    if raw < 0 {
        return None;
    }
    // SAFETY: F_GETFD only reads the descriptor flags of `raw`; on a number that is not
    // open it fails with EBADF.
    if unsafe { libc::fcntl(raw, libc::F_GETFD) } == -1 {
        return None;
    }
    // SAFETY: `raw` is open (checked just above) and, by the `fd:N` contract, closed by
    // nothing else while borrowed.
    Some(f(unsafe { BorrowedFd::borrow_raw(raw) }))
}
