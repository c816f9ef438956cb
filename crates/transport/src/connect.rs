//! [`connect`]: opening a [`Stream`] to any transport address.

use std::os::fd::AsFd;

use crate::addr::Addr;
use crate::error::TransportError;
use crate::inherited;
use crate::options::SocketOptions;
use crate::stream::Stream;
use crate::{tcp, unix, vsock};

/// Connects to `addr`, applying `opts` (buffer sizes before connecting).
///
/// `fd:N` adopts an inherited connected socket instead of connecting; a
/// listening `fd:N` is refused with [`TransportError::FdIsListening`].
/// For a host name, each resolved address is tried in turn.
pub fn connect(addr: &Addr, opts: &SocketOptions) -> Result<Stream, TransportError> {
    let stream = match addr {
        Addr::Unix(path) => unix::connect(addr, path, opts)?,
        Addr::Tcp(host, port) => tcp::connect(addr, host, *port, opts)?,
        Addr::Vsock { cid, port } => vsock::connect(addr, *cid, *port, opts)?,
        Addr::VhostUserFs(_) => {
            return Err(TransportError::NotAStream {
                addr: addr.to_string(),
            })
        }
        Addr::Fd(raw) => {
            let adopted = inherited::adopt(*raw, false)?;
            let peer = inherited::peer(adopted.fd.as_fd(), *raw);
            let stream = Stream::new(adopted.fd, addr.clone(), peer, Some(adopted.claim));
            stream.apply(opts)?;
            stream
        }
    };
    tracing::debug!(%addr, peer = %stream.peer(), "connected");
    Ok(stream)
}
