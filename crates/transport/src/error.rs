//! [`TransportError`]: every failure says which address and what failed.

use std::io;

use crate::addr::AddrParseError;

/// A failure to parse, listen on, connect to or configure a transport.
///
/// Every variant names the address involved (in its [`Addr`](crate::Addr)
/// text form) and, for system-call failures, the call that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The address text is invalid.
    #[error(transparent)]
    Parse(#[from] AddrParseError),

    /// A system call failed.
    #[error("{addr}: {op} failed: {source}")]
    Sys {
        /// The address being used.
        addr: String,
        /// The system call (and option) that failed, e.g. `bind` or `setsockopt(SO_RCVBUF)`.
        op: &'static str,
        /// The operating-system error.
        #[source]
        source: io::Error,
    },

    /// A TCP host name could not be resolved.
    #[error("{addr}: cannot resolve host: {source}")]
    Resolve {
        /// The address being used.
        addr: String,
        /// The resolver error.
        #[source]
        source: io::Error,
    },

    /// A TCP host name resolved to no addresses.
    #[error("{addr}: host resolved to no addresses")]
    NoAddresses {
        /// The address being used.
        addr: String,
    },

    /// Listening on a non-loopback TCP address without
    /// [`ListenOptions::allow_remote_tcp`](crate::ListenOptions::allow_remote_tcp).
    #[error(
        "refusing to listen on {addr}: {ip} is not a loopback address, and 9P2000.L has no \
         authentication or encryption, so anyone who can reach it could use the share \
         (set allow_remote_tcp to listen anyway)"
    )]
    RemoteTcpRefused {
        /// The address asked for.
        addr: String,
        /// The resolved IP that is not loopback.
        ip: std::net::IpAddr,
    },

    /// Another process is listening on the unix socket path.
    #[error("{addr}: address in use: another process is listening on this socket")]
    AddrInUse {
        /// The address asked for.
        addr: String,
    },

    /// The unix socket path exists and is not a socket, so it was left alone.
    #[error("{addr}: path exists and is not a socket; refusing to replace it")]
    PathNotSocket {
        /// The address asked for.
        addr: String,
    },

    /// The kernel has no vsock transport that can serve this address.
    #[error("{addr}: vsock {op} failed: {source}; {hint}")]
    VsockUnavailable {
        /// The address being used.
        addr: String,
        /// The system call that failed.
        op: &'static str,
        /// The operating-system error (`EAFNOSUPPORT`, `EADDRNOTAVAIL` or `ENODEV`).
        #[source]
        source: io::Error,
        /// What is missing, e.g. the `vsock_loopback` module.
        hint: String,
    },

    /// `fd:N` names a descriptor that is not open.
    #[error("{addr}: file descriptor is not open")]
    FdNotOpen {
        /// The address being used.
        addr: String,
    },

    /// `fd:N` names a descriptor already in use through another `fd:N` address.
    #[error("{addr}: file descriptor is already in use by this process")]
    FdInUse {
        /// The address being used.
        addr: String,
    },

    /// `fd:N` names something other than a stream socket.
    #[error("{addr}: file descriptor is not a stream socket ({what})")]
    FdNotStreamSocket {
        /// The address being used.
        addr: String,
        /// What it is instead.
        what: String,
    },

    /// `fd:N` names a listening socket where a connected one is needed.
    #[error("{addr}: file descriptor is a listening socket; listen on it instead of connecting")]
    FdIsListening {
        /// The address being used.
        addr: String,
    },

    /// `fd:N` names a stream socket that is neither listening nor connected.
    #[error("{addr}: file descriptor is a socket that is neither listening nor connected")]
    FdNotConnected {
        /// The address being used.
        addr: String,
    },

    /// `fd:N` names a socket other than the listening unix socket a vhost-user backend
    /// needs.
    #[error("{addr}: file descriptor is {what}, not a listening unix socket")]
    FdNotListeningUnix {
        /// The address being used.
        addr: String,
        /// What it is instead.
        what: String,
    },

    /// The listener will never yield another connection: it was an inherited
    /// connected socket, and its one [`Stream`](crate::Stream) was accepted.
    #[error("{addr}: no more connections (the inherited connection was already accepted)")]
    NoMoreConnections {
        /// The listener's address.
        addr: String,
    },

    /// The address is not a byte-stream transport (`vhost-user-fs:` is served by the
    /// virtio door, not as a 9P stream).
    #[error("{addr}: not a 9P stream transport")]
    NotAStream {
        /// The address.
        addr: String,
    },
}

impl TransportError {
    /// Builds [`TransportError::Sys`].
    pub(crate) fn sys(addr: impl ToString, op: &'static str, errno: rustix::io::Errno) -> Self {
        TransportError::Sys {
            addr: addr.to_string(),
            op,
            source: errno.into(),
        }
    }

    /// The OS error number behind this error, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            TransportError::Sys { source, .. }
            | TransportError::Resolve { source, .. }
            | TransportError::VsockUnavailable { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

impl From<TransportError> for io::Error {
    fn from(err: TransportError) -> io::Error {
        let kind = match &err {
            TransportError::Sys { source, .. } | TransportError::Resolve { source, .. } => {
                source.kind()
            }
            TransportError::Parse(_) => io::ErrorKind::InvalidInput,
            TransportError::AddrInUse { .. } | TransportError::FdInUse { .. } => {
                io::ErrorKind::AddrInUse
            }
            TransportError::PathNotSocket { .. } => io::ErrorKind::AlreadyExists,
            TransportError::RemoteTcpRefused { .. } => io::ErrorKind::PermissionDenied,
            TransportError::VsockUnavailable { .. } => io::ErrorKind::AddrNotAvailable,
            TransportError::NoMoreConnections { .. } => io::ErrorKind::UnexpectedEof,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, err)
    }
}
