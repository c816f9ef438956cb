//! [`Listener`]: accepting [`Stream`]s on any transport.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

use crate::addr::Addr;
use crate::error::TransportError;
use crate::inherited::{self, FdClaim, FdState};
use crate::options::{ListenOptions, SocketOptions};
use crate::socket::{self, peer_name};
use crate::stream::Stream;
use crate::unix::SocketFile;
use crate::{tcp, vsock};

/// A source of incoming connections.
///
/// Binding `unix:` creates the socket file with [`ListenOptions::unix_mode`]
/// (replacing a stale socket file nothing answers on), and dropping the
/// listener removes it. `tcp:` refuses non-loopback addresses unless
/// [`ListenOptions::allow_remote_tcp`] is set. `fd:N` adopts an inherited
/// socket: a listening one is accepted on; a connected one is yielded once
/// by [`accept`](Listener::accept), which then reports
/// [`TransportError::NoMoreConnections`].
#[derive(Debug)]
pub struct Listener {
    source: Source,
    local: Addr,
    stream_opts: SocketOptions,
    socket_file: Option<SocketFile>,
}

#[derive(Debug)]
enum Source {
    /// A listening socket (and, for `fd:N`, the claim on its number; it is
    /// declared after the descriptor so it is released after closing).
    Socket {
        fd: OwnedFd,
        _claim: Option<FdClaim>,
    },
    /// An inherited connected socket, until it is accepted.
    Once(Mutex<Option<Stream>>),
}

impl Listener {
    /// Binds and listens on `addr`.
    pub fn bind(addr: &Addr, opts: &ListenOptions) -> Result<Listener, TransportError> {
        let mut socket_file = None;
        let (source, local) = match addr {
            Addr::Unix(path) => {
                let (fd, file) = crate::unix::bind(addr, path, opts)?;
                socket_file = Some(file);
                (Source::Socket { fd, _claim: None }, addr.clone())
            }
            Addr::Tcp(host, port) => {
                let (fd, local) = tcp::bind(addr, host, *port, opts)?;
                (Source::Socket { fd, _claim: None }, local)
            }
            Addr::Vsock { cid, port } => {
                let (fd, local) = vsock::bind(addr, *cid, *port, opts)?;
                (Source::Socket { fd, _claim: None }, local)
            }
            Addr::VhostUserFs(_) => {
                return Err(TransportError::NotAStream {
                    addr: addr.to_string(),
                })
            }
            Addr::Fd(raw) => {
                let adopted = inherited::adopt(*raw, true)?;
                let source = match adopted.state {
                    FdState::Listening => Source::Socket {
                        fd: adopted.fd,
                        _claim: Some(adopted.claim),
                    },
                    FdState::Connected => {
                        let peer = inherited::peer(adopted.fd.as_fd(), *raw);
                        let stream =
                            Stream::new(adopted.fd, addr.clone(), peer, Some(adopted.claim));
                        Source::Once(Mutex::new(Some(stream)))
                    }
                };
                (source, addr.clone())
            }
        };
        tracing::debug!(addr = %local, "listening");
        Ok(Listener {
            source,
            local,
            stream_opts: opts.stream.clone(),
            socket_file,
        })
    }

    /// Waits for the next connection and applies
    /// [`ListenOptions::stream`] to it.
    ///
    /// `EINTR` and connections aborted while queued are retried. Other
    /// failures (such as running out of descriptors) are returned, and the
    /// listener stays usable.
    pub fn accept(&self) -> Result<Stream, TransportError> {
        let stream = match &self.source {
            Source::Socket { fd, .. } => {
                let conn = socket::accept(fd.as_fd())
                    .map_err(|e| TransportError::sys(&self.local, "accept", e))?;
                let peer = match self.local {
                    Addr::Fd(raw) => inherited::peer(conn.as_fd(), raw),
                    _ => peer_name(conn.as_fd(), &self.local),
                };
                Stream::new(conn, self.local.clone(), peer, None)
            }
            Source::Once(once) => {
                let mut once = once.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                once.take()
                    .ok_or_else(|| TransportError::NoMoreConnections {
                        addr: self.local.to_string(),
                    })?
            }
        };
        stream.apply(&self.stream_opts)?;
        tracing::debug!(addr = %self.local, peer = %stream.peer(), "accepted connection");
        Ok(stream)
    }

    /// The address actually listened on: for `tcp:` and `vsock:` with port
    /// 0 or `any`, it has the port the kernel chose.
    pub fn local_addr(&self) -> &Addr {
        &self.local
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(file) = &self.socket_file {
            file.remove();
        }
    }
}
