//! Addresses, listening, connecting, and socket options for every transport
//! crossfs speaks. This crate knows nothing of 9P: it hands out connected
//! byte streams.
//!
//! # Transports
//!
//! | Address          | Meaning |
//! |------------------|---------|
//! | `unix:/path`     | Unix-domain stream socket. Listening creates the file with mode 0600 (see [`ListenOptions::unix_mode`]), replaces a stale socket file nothing answers on, and removes the file on drop. |
//! | `tcp:HOST:PORT`  | TCP; `tcp:[::1]:PORT` for IPv6. Listening on a non-loopback address is refused unless [`ListenOptions::allow_remote_tcp`] is set, since 9P2000.L has no authentication or encryption. |
//! | `vsock:CID:PORT` | `AF_VSOCK`; CID may be a number or `any`, `host` (2), `local` (1); PORT may be `any` when listening. Errors caused by a missing vsock transport are [`TransportError::VsockUnavailable`] and name what is missing. |
//! | `fd:N`           | A socket inherited from the parent. Listening on a listening socket accepts on it; on a connected socket it yields that one [`Stream`] and then [`TransportError::NoMoreConnections`]. [`connect()`] adopts a connected one; [`InheritedUnixListener`] adopts a listening unix socket for a vhost-user backend. |
//!
//! Every socket is close-on-exec; reads, writes, `accept` and `connect`
//! retry `EINTR`; writes never raise `SIGPIPE`.
//!
//! ```
//! use std::io::{Read, Write};
//! use crossfs_transport::{connect, Addr, ListenOptions, Listener, SocketOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let listener = Listener::bind(&"tcp:127.0.0.1:0".parse()?, &ListenOptions::default())?;
//! let mut client = connect(listener.local_addr(), &SocketOptions::default())?;
//! let mut server = listener.accept()?;
//! client.write_all(b"ping")?;
//! let mut buf = [0; 4];
//! server.read_exact(&mut buf)?;
//! assert_eq!(&buf, b"ping");
//! println!("connection from {}", server.peer());
//! # Ok(())
//! # }
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod addr;
mod connect;
mod error;
mod inherited;
mod listener;
mod options;
mod socket;
mod stream;
#[allow(unsafe_code)]
mod sys;
mod tcp;
#[cfg(test)]
mod testutil;
mod unix;
mod vsock;

pub use addr::{
    Addr, AddrParseError, UNIX_PATH_MAX, VSOCK_CID_ANY, VSOCK_CID_HOST, VSOCK_CID_LOCAL,
    VSOCK_PORT_ANY,
};
pub use connect::connect;
pub use error::TransportError;
pub use inherited::InheritedUnixListener;
pub use listener::Listener;
pub use options::{ListenOptions, SocketOptions};
pub use stream::Stream;
pub use vsock::vsock_local_cid;
