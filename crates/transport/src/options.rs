//! [`SocketOptions`] and [`ListenOptions`], and applying them to sockets.

use std::os::fd::BorrowedFd;

use rustix::net::sockopt;
use rustix::net::AddressFamily;

use crate::addr::Addr;
use crate::error::TransportError;
use crate::sys;

/// Per-connection socket options.
///
/// Buffer sizes are only set when asked for; the kernel's defaults (and
/// autotuning, for TCP) apply otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketOptions {
    /// `SO_SNDBUF` in bytes. Linux doubles the value for bookkeeping and
    /// caps it at `net.core.wmem_max`.
    pub send_buffer: Option<usize>,
    /// `SO_RCVBUF` in bytes (capped at `net.core.rmem_max`); on vsock, the
    /// vsock buffer size (`SO_VM_SOCKETS_BUFFER_SIZE`), which bounds how
    /// much the peer may send before it must wait.
    pub recv_buffer: Option<usize>,
    /// `TCP_NODELAY` (TCP only; ignored elsewhere). On by default: 9P is
    /// request/response, and Nagle's algorithm would delay small requests.
    pub nodelay: bool,
}

impl Default for SocketOptions {
    fn default() -> Self {
        SocketOptions {
            send_buffer: None,
            recv_buffer: None,
            nodelay: true,
        }
    }
}

/// Options for [`Listener::bind`](crate::Listener::bind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenOptions {
    /// Permission bits for a unix socket file; 0600 by default, so only the
    /// owner can connect. Applied exactly, regardless of the umask.
    pub unix_mode: u32,
    /// Allow listening on a non-loopback TCP address. 9P2000.L has no
    /// authentication or encryption, so this is off by default and logs a
    /// warning when used.
    pub allow_remote_tcp: bool,
    /// Options for every accepted stream. Buffer sizes are also set on the
    /// listening socket, so accepted connections inherit them from the
    /// start (TCP picks its window scale before `accept` returns).
    pub stream: SocketOptions,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            unix_mode: 0o600,
            allow_remote_tcp: false,
            stream: SocketOptions::default(),
        }
    }
}

/// Applies every option in `opts` that suits the socket's family.
pub(crate) fn apply(
    fd: BorrowedFd<'_>,
    family: AddressFamily,
    addr: &Addr,
    opts: &SocketOptions,
) -> Result<(), TransportError> {
    apply_buffers(fd, family, addr, opts)?;
    if matches!(family, AddressFamily::INET | AddressFamily::INET6) {
        sockopt::set_tcp_nodelay(fd, opts.nodelay)
            .map_err(|e| TransportError::sys(addr, "setsockopt(TCP_NODELAY)", e))?;
    }
    Ok(())
}

/// Applies the buffer sizes in `opts`, logging what the kernel granted.
pub(crate) fn apply_buffers(
    fd: BorrowedFd<'_>,
    family: AddressFamily,
    addr: &Addr,
    opts: &SocketOptions,
) -> Result<(), TransportError> {
    if let Some(size) = opts.send_buffer {
        sockopt::set_socket_send_buffer_size(fd, size)
            .map_err(|e| TransportError::sys(addr, "setsockopt(SO_SNDBUF)", e))?;
        let got = sockopt::socket_send_buffer_size(fd)
            .map_err(|e| TransportError::sys(addr, "getsockopt(SO_SNDBUF)", e))?;
        report(
            addr,
            "SO_SNDBUF",
            size as u64,
            got as u64,
            "net.core.wmem_max",
        );
    }
    if let Some(size) = opts.recv_buffer {
        if family == AddressFamily::VSOCK {
            let op = "setsockopt(SO_VM_SOCKETS_BUFFER_SIZE)";
            sys::set_vsock_buffer_size(fd, size as u64).map_err(|e| io_err(addr, op, e))?;
            let op = "getsockopt(SO_VM_SOCKETS_BUFFER_SIZE)";
            let got = sys::vsock_buffer_size(fd).map_err(|e| io_err(addr, op, e))?;
            report(
                addr,
                "SO_VM_SOCKETS_BUFFER_SIZE",
                size as u64,
                got,
                "the vsock transport",
            );
        } else {
            sockopt::set_socket_recv_buffer_size(fd, size)
                .map_err(|e| TransportError::sys(addr, "setsockopt(SO_RCVBUF)", e))?;
            let got = sockopt::socket_recv_buffer_size(fd)
                .map_err(|e| TransportError::sys(addr, "getsockopt(SO_RCVBUF)", e))?;
            report(
                addr,
                "SO_RCVBUF",
                size as u64,
                got as u64,
                "net.core.rmem_max",
            );
        }
    }
    Ok(())
}

fn io_err(addr: &Addr, op: &'static str, source: std::io::Error) -> TransportError {
    TransportError::Sys {
        addr: addr.to_string(),
        op,
        source,
    }
}

fn report(addr: &Addr, option: &str, requested: u64, effective: u64, limit: &str) {
    if effective < requested {
        tracing::warn!(
            %addr, option, requested, effective,
            "kernel granted a smaller socket buffer than requested (limited by {limit})"
        );
    } else {
        tracing::debug!(%addr, option, requested, effective, "socket buffer set");
    }
}

#[cfg(test)]
mod tests {
    use rustix::net::sockopt;

    use crate::testutil::echo;
    use crate::{connect, Addr, ListenOptions, Listener, SocketOptions};

    const SEND: usize = 96 * 1024;
    const RECV: usize = 160 * 1024;

    fn buffers() -> SocketOptions {
        SocketOptions {
            send_buffer: Some(SEND),
            recv_buffer: Some(RECV),
            nodelay: true,
        }
    }

    fn check(stream: &crate::Stream) {
        let snd = sockopt::socket_send_buffer_size(stream).unwrap();
        let rcv = sockopt::socket_recv_buffer_size(stream).unwrap();
        assert!(snd >= SEND, "SO_SNDBUF {snd} < {SEND} on {}", stream.peer());
        assert!(rcv >= RECV, "SO_RCVBUF {rcv} < {RECV} on {}", stream.peer());
    }

    #[test]
    fn buffers_applied_on_tcp_both_ends() {
        let opts = ListenOptions {
            stream: buffers(),
            ..ListenOptions::default()
        };
        let listener = Listener::bind(&"tcp:127.0.0.1:0".parse().unwrap(), &opts).unwrap();
        let mut client = connect(listener.local_addr(), &buffers()).unwrap();
        let mut server = listener.accept().unwrap();
        check(&client);
        check(&server);
        echo(&mut client, &mut server);
    }

    #[test]
    fn buffers_applied_on_unix_and_by_apply() {
        let dir = tempfile::tempdir().unwrap();
        let addr = Addr::Unix(dir.path().join("s"));
        let opts = ListenOptions {
            stream: buffers(),
            ..ListenOptions::default()
        };
        let listener = Listener::bind(&addr, &opts).unwrap();
        let client = connect(&addr, &SocketOptions::default()).unwrap();
        check(&listener.accept().unwrap());
        // Defaults leave buffers alone; `apply` sets them later.
        let before = sockopt::socket_recv_buffer_size(&client).unwrap();
        client.apply(&buffers()).unwrap();
        check(&client);
        assert_ne!(before, sockopt::socket_recv_buffer_size(&client).unwrap());
    }

    #[test]
    fn nodelay_can_be_turned_off() {
        let listener = Listener::bind(
            &"tcp:127.0.0.1:0".parse().unwrap(),
            &ListenOptions::default(),
        )
        .unwrap();
        let opts = SocketOptions {
            nodelay: false,
            ..SocketOptions::default()
        };
        let client = connect(listener.local_addr(), &opts).unwrap();
        assert!(!sockopt::tcp_nodelay(&client).unwrap());
        client.apply(&SocketOptions::default()).unwrap();
        assert!(sockopt::tcp_nodelay(&client).unwrap());
    }
}
