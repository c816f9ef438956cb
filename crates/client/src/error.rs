//! The one error type of the client.

use std::io;

/// Why a request failed.
///
/// Cloneable because one connection failure is reported to every request that was waiting on
/// it.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The server answered with Rlerror carrying this errno.
    #[error("server replied: {}", io::Error::from_raw_os_error(*.0))]
    Errno(i32),
    /// The connection is gone (or was shut down); the text says why. Every request pending
    /// when it died, and every one made afterwards, gets this error.
    #[error("9P connection lost: {0}")]
    Disconnected(String),
    /// The server broke the protocol for this request (e.g. answered with the wrong reply
    /// type, or with a body that does not decode). The connection itself is still usable;
    /// framing errors that are not recoverable become [`ClientError::Disconnected`].
    #[error("9P protocol error: {0}")]
    Protocol(String),
    /// The request, or the reply it asks for, would not fit in the negotiated msize. Split it
    /// by [`crate::Client::max_io`].
    #[error("request needs {size} bytes, more than the negotiated limit {max}")]
    TooLarge {
        /// Bytes the request (or its reply) would need.
        size: u64,
        /// The limit in force.
        max: u64,
    },
    /// The configuration cannot work (an msize below 4096, for one).
    #[error("invalid client configuration: {0}")]
    InvalidConfig(String),
    /// A blocking call was made from inside a completion callback, on the thread reading
    /// replies. It would wait for a reply only that thread can read, so it fails instead of
    /// hanging.
    #[error("blocking 9P call from the client's reader thread would deadlock")]
    BlockingOnReaderThread,
    /// The call waited for a lost connection to be replaced, and its caller gave up (see
    /// [`crate::give_up_when`]): for a FUSE request, its process got a signal.
    #[error("interrupted while waiting for the server to come back")]
    Interrupted,
}

impl ClientError {
    /// The errno to hand to the kernel (FUSE) for this error.
    pub fn errno(&self) -> i32 {
        match self {
            ClientError::Errno(e) => *e,
            ClientError::Disconnected(_) | ClientError::Protocol(_) => libc::EIO,
            // A request too large for msize is a bug in the caller's splitting; from the
            // application's point of view it is an I/O error.
            ClientError::TooLarge { .. } => libc::EIO,
            ClientError::InvalidConfig(_) => libc::EINVAL,
            ClientError::BlockingOnReaderThread => libc::EDEADLK,
            ClientError::Interrupted => libc::EINTR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping() {
        assert_eq!(ClientError::Errno(libc::ENOENT).errno(), libc::ENOENT);
        assert_eq!(ClientError::Disconnected("x".into()).errno(), libc::EIO);
        assert_eq!(ClientError::Protocol("x".into()).errno(), libc::EIO);
        assert!(ClientError::Errno(libc::ENOENT)
            .to_string()
            .contains("No such file"));
    }
}
