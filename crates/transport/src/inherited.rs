//! `fd:N`: adopting socket descriptors inherited from the parent process.
//!
//! A process-wide registry makes sure each number is adopted by at most one
//! [`Stream`](crate::Stream) or [`Listener`](crate::Listener) at a time, so
//! naming the same `fd:N` twice fails cleanly instead of closing the
//! descriptor twice.

use std::os::fd::{BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::sync::{Mutex, MutexGuard};

use rustix::io::{Errno, FdFlags};
use rustix::net::{sockopt, AddressFamily, SocketType};

use crate::addr::Addr;
use crate::error::TransportError;
use crate::sys;

/// Descriptor numbers currently adopted through `fd:N`.
static CLAIMED: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

fn claimed() -> MutexGuard<'static, Vec<RawFd>> {
    // The list stays consistent even if a holder panicked.
    CLAIMED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reserves an adopted descriptor number until dropped.
#[derive(Debug)]
pub(crate) struct FdClaim(RawFd);

impl Drop for FdClaim {
    fn drop(&mut self) {
        claimed().retain(|&fd| fd != self.0);
    }
}

/// What an inherited stream socket is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FdState {
    /// Listening: accept connections on it.
    Listening,
    /// Connected: it is itself the one connection.
    Connected,
}

/// An adopted inherited socket.
#[derive(Debug)]
pub(crate) struct Adopted {
    pub(crate) fd: OwnedFd,
    pub(crate) claim: FdClaim,
    pub(crate) state: FdState,
}

/// Adopts `fd:N` if it is an open stream socket that is listening (only if
/// `allow_listening`) or connected. On error the descriptor is left open
/// and unowned. The adopted descriptor is made close-on-exec.
pub(crate) fn adopt(raw: RawFd, allow_listening: bool) -> Result<Adopted, TransportError> {
    let addr = Addr::Fd(raw);
    let mut claimed = claimed();
    if claimed.contains(&raw) {
        return Err(TransportError::FdInUse {
            addr: addr.to_string(),
        });
    }
    let check = |fd: BorrowedFd<'_>| {
        let state = inspect(fd, &addr)?;
        if state == FdState::Listening && !allow_listening {
            return Err(TransportError::FdIsListening {
                addr: addr.to_string(),
            });
        }
        Ok(state)
    };
    let Some((fd, state)) = sys::adopt_fd(raw, check)? else {
        return Err(TransportError::FdNotOpen {
            addr: addr.to_string(),
        });
    };
    claimed.push(raw);
    let claim = FdClaim(raw);
    rustix::io::fcntl_setfd(&fd, FdFlags::CLOEXEC)
        .map_err(|e| TransportError::sys(&addr, "fcntl(F_SETFD, FD_CLOEXEC)", e))?;
    Ok(Adopted { fd, claim, state })
}

/// A listening unix socket adopted from `fd:N`, as a vhost-user backend is handed one
/// (virtiofsd's `--fd`, from libvirt or Kata). The number stays claimed while it lives.
#[derive(Debug)]
pub struct InheritedUnixListener {
    listener: UnixListener,
    // Dropped after the listener, so the number is not given up while still open.
    _claim: FdClaim,
}

impl InheritedUnixListener {
    /// Adopts `fd:N` if it is a listening unix socket.
    ///
    /// # Errors
    /// As `fd:N` listeners ([`TransportError::FdNotOpen`], [`TransportError::FdInUse`]),
    /// and [`TransportError::FdNotListeningUnix`] for anything but a listening unix socket
    /// (the descriptor is then left open).
    pub fn adopt(raw: RawFd) -> Result<InheritedUnixListener, TransportError> {
        let addr = Addr::Fd(raw);
        let wrong = |what: &str| TransportError::FdNotListeningUnix {
            addr: addr.to_string(),
            what: what.to_owned(),
        };
        // Checked before adopting, so that a refused descriptor stays open and unowned.
        let family = sys::with_borrowed(raw, |fd| {
            rustix::net::getsockname(fd).map(|a| a.address_family())
        });
        match family {
            None => {
                return Err(TransportError::FdNotOpen {
                    addr: addr.to_string(),
                })
            }
            Some(Ok(AddressFamily::UNIX)) => {}
            Some(Ok(_)) => return Err(wrong("a socket of another family")),
            Some(Err(Errno::NOTSOCK)) => return Err(wrong("not a socket")),
            Some(Err(e)) => return Err(TransportError::sys(&addr, "getsockname", e)),
        }
        let adopted = adopt(raw, true)?;
        if adopted.state != FdState::Listening {
            // Handed back open, as the caller passed it.
            let _ = adopted.fd.into_raw_fd();
            return Err(wrong("a connected socket"));
        }
        let listener = UnixListener::from(adopted.fd);
        // A parent may have left it non-blocking; the backend waits in accept.
        listener
            .set_nonblocking(false)
            .map_err(|e| TransportError::Sys {
                addr: addr.to_string(),
                op: "fcntl(F_SETFL)",
                source: e,
            })?;
        Ok(InheritedUnixListener {
            listener,
            _claim: adopted.claim,
        })
    }

    /// The listening socket.
    pub fn listener(&self) -> &UnixListener {
        &self.listener
    }
}

/// Describes the far end of an inherited connected socket, e.g.
/// `fd:3 (tcp:10.0.0.2:40022)` or `fd:3 (pid 812, uid 1000)`.
pub(crate) fn peer(fd: BorrowedFd<'_>, raw: RawFd) -> String {
    let me = Addr::Fd(raw);
    let name = crate::socket::peer_name(fd, &me);
    if name.starts_with(&me.to_string()) {
        name
    } else {
        format!("{me} ({name})")
    }
}

fn inspect(fd: BorrowedFd<'_>, addr: &Addr) -> Result<FdState, TransportError> {
    let not_stream = |what: String| TransportError::FdNotStreamSocket {
        addr: addr.to_string(),
        what,
    };
    match sockopt::socket_type(fd) {
        Ok(SocketType::STREAM) => {}
        Ok(other) => return Err(not_stream(format!("socket type {}", other.as_raw()))),
        Err(Errno::NOTSOCK) => return Err(not_stream("not a socket".into())),
        Err(e) => return Err(TransportError::sys(addr, "getsockopt(SO_TYPE)", e)),
    }
    let listening = sockopt::socket_acceptconn(fd)
        .map_err(|e| TransportError::sys(addr, "getsockopt(SO_ACCEPTCONN)", e))?;
    if listening {
        return Ok(FdState::Listening);
    }
    match rustix::net::getpeername(fd) {
        Ok(_) => Ok(FdState::Connected),
        Err(Errno::NOTCONN) => Err(TransportError::FdNotConnected {
            addr: addr.to_string(),
        }),
        Err(e) => Err(TransportError::sys(addr, "getpeername", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, IntoRawFd};

    use rustix::net::{socketpair, AddressFamily, SocketFlags};

    use crate::testutil::echo;
    use crate::{connect, ListenOptions, Listener, SocketOptions, Stream};

    /// Runs these tests one at a time. A dropped stream closes its
    /// descriptor before it gives up the claim on the number, so a test
    /// that adopts a freshly made socket could otherwise be handed a number
    /// another test has just closed and still claims (seen once in CI).
    fn one_at_a_time() -> MutexGuard<'static, ()> {
        static SERIAL: Mutex<()> = Mutex::new(());
        SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A connected pair: one end handed off as a raw number (as if
    /// inherited, without close-on-exec), the other wrapped as a Stream.
    fn inherited_pair() -> (RawFd, Stream) {
        let (a, b) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::empty(),
            None,
        )
        .unwrap();
        let other = Stream::new(b, Addr::Unix("socketpair".into()), "pair".into(), None);
        (a.into_raw_fd(), other)
    }

    #[test]
    fn connected_fd_listener_yields_one_stream_then_ends() {
        let _serial = one_at_a_time();
        let (raw, mut other) = inherited_pair();
        let addr = Addr::Fd(raw);
        let listener = Listener::bind(&addr, &ListenOptions::default()).unwrap();
        assert_eq!(listener.local_addr(), &addr);
        let mut stream = listener.accept().unwrap();
        assert_eq!(stream.as_raw_fd(), raw);
        let pid = std::process::id();
        assert!(
            stream
                .peer()
                .starts_with(&format!("fd:{raw} (pid {pid}, uid ")),
            "{}",
            stream.peer()
        );
        echo(&mut stream, &mut other);
        let flags = rustix::io::fcntl_getfd(&stream).unwrap();
        assert!(
            flags.contains(FdFlags::CLOEXEC),
            "adopted descriptors become close-on-exec"
        );

        let err = listener.accept().unwrap_err();
        assert!(
            matches!(err, TransportError::NoMoreConnections { .. }),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "fd:{raw}: no more connections (the inherited connection was already accepted)"
            )
        );
        // The stream outlives the listener, and keeps its claim on the number.
        drop(listener);
        echo(&mut stream, &mut other);
        let err = connect(&addr, &SocketOptions::default()).unwrap_err();
        assert!(matches!(err, TransportError::FdInUse { .. }), "{err}");
    }

    #[test]
    fn listening_fd_accepts_connections() {
        let _serial = one_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let raw = std::os::unix::net::UnixListener::bind(&path)
            .unwrap()
            .into_raw_fd();
        let listener = Listener::bind(&Addr::Fd(raw), &ListenOptions::default()).unwrap();
        for _ in 0..2 {
            let mut client = connect(&Addr::Unix(path.clone()), &SocketOptions::default()).unwrap();
            let mut server = listener.accept().unwrap();
            assert!(
                server.peer().starts_with(&format!("fd:{raw} (pid ")),
                "{}",
                server.peer()
            );
            echo(&mut client, &mut server);
        }
        // Naming the same descriptor twice is refused, not a double close.
        let err = Listener::bind(&Addr::Fd(raw), &ListenOptions::default()).unwrap_err();
        assert!(matches!(err, TransportError::FdInUse { .. }), "{err}");
    }

    #[test]
    fn inherited_unix_listener_takes_only_a_listening_unix_socket() {
        let _serial = one_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vhost.sock");
        let raw = UnixListener::bind(&path).unwrap().into_raw_fd();
        let listener = InheritedUnixListener::adopt(raw).unwrap();
        let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        listener.listener().accept().unwrap();
        let err = InheritedUnixListener::adopt(raw).unwrap_err();
        assert!(matches!(err, TransportError::FdInUse { .. }), "{err}");
        drop(listener);

        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let err = InheritedUnixListener::adopt(tcp.as_raw_fd()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "fd:{}: file descriptor is a socket of another family, not a listening unix socket",
                tcp.as_raw_fd()
            )
        );
        let (a, _b) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let err = InheritedUnixListener::adopt(a.as_raw_fd()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "fd:{}: file descriptor is a connected socket, not a listening unix socket",
                a.as_raw_fd()
            )
        );
        // Refused, and still open: the caller keeps it.
        rustix::io::fcntl_getfd(&a).unwrap();
        let file = tempfile::tempfile().unwrap();
        let err = InheritedUnixListener::adopt(file.as_raw_fd()).unwrap_err();
        assert!(
            err.to_string().contains("is not a socket, not a listening"),
            "{err}"
        );
    }

    #[test]
    fn connect_adopts_connected_fd() {
        let _serial = one_at_a_time();
        let (raw, mut other) = inherited_pair();
        let mut stream = connect(&Addr::Fd(raw), &SocketOptions::default()).unwrap();
        echo(&mut stream, &mut other);
        drop(stream);
        // Dropping the stream closed the descriptor: the peer sees EOF.
        let mut buf = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut other, &mut buf).unwrap(), 0);
    }

    #[test]
    fn connect_refuses_listening_fd_and_leaves_it_open() {
        let _serial = one_at_a_time();
        let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let err = connect(&Addr::Fd(listening.as_raw_fd()), &SocketOptions::default()).unwrap_err();
        assert!(matches!(err, TransportError::FdIsListening { .. }), "{err}");
        // Still ours and still listening.
        let port = listening.local_addr().unwrap().port();
        let _c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        listening.accept().unwrap();
    }

    #[test]
    fn rejects_non_sockets_without_closing_them() {
        let _serial = one_at_a_time();
        let file = tempfile::tempfile().unwrap();
        let raw = file.as_raw_fd();
        let err = adopt(raw, true).unwrap_err();
        assert!(
            matches!(err, TransportError::FdNotStreamSocket { ref what, .. } if what == "not a socket"),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!("fd:{raw}: file descriptor is not a stream socket (not a socket)")
        );
        // Still open and usable: the failed adoption did not close it.
        file.metadata().unwrap();
    }

    #[test]
    fn rejects_closed_and_negative_descriptors() {
        let _serial = one_at_a_time();
        // Far above any open descriptor (closing a real one would race with
        // other tests reusing the number).
        let err = adopt(RawFd::MAX, true).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("fd:{}: file descriptor is not open", RawFd::MAX)
        );
        assert!(matches!(
            adopt(-1, true),
            Err(TransportError::FdNotOpen { .. })
        ));
    }

    #[test]
    fn rejects_datagram_and_unconnected_sockets() {
        let _serial = one_at_a_time();
        use rustix::net::{socket_with, AddressFamily, SocketFlags};
        let dgram = socket_with(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let err = adopt(dgram.as_raw_fd(), true).unwrap_err();
        assert!(
            matches!(err, TransportError::FdNotStreamSocket { .. }),
            "{err}"
        );
        let fresh = socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let err = adopt(fresh.as_raw_fd(), true).unwrap_err();
        assert!(
            matches!(err, TransportError::FdNotConnected { .. }),
            "{err}"
        );
    }
}
