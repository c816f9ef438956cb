//! Socket plumbing shared by every transport: creation with `SOCK_CLOEXEC`,
//! EINTR-safe `connect`/`accept`, and naming peers for logs.

use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::addr::SocketAddrArg;
use rustix::net::{AddressFamily, SocketAddrAny, SocketAddrUnix, SocketFlags, SocketType};

use crate::addr::Addr;
use crate::sys::VsockAddr;

/// Backlog for every listening socket.
pub(crate) const BACKLOG: i32 = 128;

/// Creates a close-on-exec stream socket.
pub(crate) fn stream_socket(family: AddressFamily) -> rustix::io::Result<OwnedFd> {
    rustix::net::socket_with(family, SocketType::STREAM, SocketFlags::CLOEXEC, None)
}

/// Runs `f` until it fails with something other than `EINTR`.
pub(crate) fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match f() {
            Err(Errno::INTR) => continue,
            other => return other,
        }
    }
}

/// `connect(2)`, completing a connection that a signal interrupted.
///
/// After `EINTR`, a TCP connect carries on in the background (retrying
/// reports `EALREADY`), so wait for it and collect its result via
/// `SO_ERROR`; unix and vsock connects are simply restarted.
pub(crate) fn connect(fd: BorrowedFd<'_>, addr: &impl SocketAddrArg) -> rustix::io::Result<()> {
    let mut interrupted = false;
    loop {
        match rustix::net::connect(fd, addr) {
            Ok(()) => return Ok(()),
            Err(Errno::INTR) => interrupted = true,
            Err(Errno::ALREADY | Errno::INPROGRESS) if interrupted => {
                let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
                retry(|| poll(&mut fds, None))?;
                return rustix::net::sockopt::socket_error(fd)?;
            }
            Err(Errno::ISCONN) if interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// `accept4(2)` with `SOCK_CLOEXEC`, retrying `EINTR` and `ECONNABORTED`
/// (a client that gave up while queued is not the listener's failure).
pub(crate) fn accept(fd: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    loop {
        match rustix::net::accept_with(fd, SocketFlags::CLOEXEC) {
            Err(Errno::INTR | Errno::CONNABORTED) => continue,
            other => return other,
        }
    }
}

/// Converts a kernel socket address into an [`Addr`], if it has a form.
pub(crate) fn to_addr(any: &SocketAddrAny) -> Option<Addr> {
    match any.address_family() {
        AddressFamily::INET | AddressFamily::INET6 => {
            let sa = SocketAddr::try_from(any.clone()).ok()?;
            Some(Addr::Tcp(sa.ip().to_string(), sa.port()))
        }
        AddressFamily::VSOCK => VsockAddr::from_any(any).map(|v| Addr::Vsock {
            cid: v.cid,
            port: v.port,
        }),
        AddressFamily::UNIX => {
            let unix = SocketAddrUnix::try_from(any.clone()).ok()?;
            let path = unix.path_bytes()?;
            use std::os::unix::ffi::OsStrExt;
            Some(Addr::Unix(std::ffi::OsStr::from_bytes(path).into()))
        }
        _ => None,
    }
}

/// Describes the far end of a connected socket for logs.
///
/// TCP and vsock peers are named by address; unix peers (usually unnamed)
/// by the `fallback` address plus the peer's pid and uid.
pub(crate) fn peer_name(fd: BorrowedFd<'_>, fallback: &Addr) -> String {
    let peer = rustix::net::getpeername(fd).ok().flatten();
    match peer.as_ref().map(|p| (p.address_family(), to_addr(p))) {
        Some((AddressFamily::UNIX, named)) => {
            let base = named.unwrap_or_else(|| fallback.clone());
            match rustix::net::sockopt::socket_peercred(fd) {
                Ok(cred) => format!(
                    "{base} (pid {}, uid {})",
                    cred.pid.as_raw_pid(),
                    cred.uid.as_raw()
                ),
                Err(_) => base.to_string(),
            }
        }
        Some((_, Some(addr))) => addr.to_string(),
        _ => fallback.to_string(),
    }
}

/// The socket's domain, for deciding which options apply.
pub(crate) fn family_of(fd: impl AsFd) -> AddressFamily {
    rustix::net::sockopt::socket_domain(fd).unwrap_or(AddressFamily::UNSPEC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_repeats_only_eintr() {
        let mut calls = 0;
        let result = retry(|| {
            calls += 1;
            if calls < 3 {
                Err(Errno::INTR)
            } else {
                Ok(calls)
            }
        });
        assert_eq!(result, Ok(3));
        let mut calls = 0;
        let result: rustix::io::Result<()> = retry(|| {
            calls += 1;
            Err(Errno::AGAIN)
        });
        assert_eq!((result, calls), (Err(Errno::AGAIN), 1));
    }

    #[test]
    fn public_types_are_thread_safe() {
        fn check<T: Send + Sync>() {}
        check::<crate::Stream>();
        check::<crate::Listener>();
        check::<crate::TransportError>();
    }
}
