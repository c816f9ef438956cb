//! A connection's two ends as its session sees them: where requests come from (a reader
//! and, for a socket or pipe read as it is, its descriptor, so that a Twrite's data can be
//! spliced out of it: `crate::piped`) and where replies go (a writer and, for a socket or
//! pipe that keeps no buffer of its own, its descriptor, so that an Rread's data can be
//! spliced into it after its header: `crate::splice`).

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

use crate::splice::SinkKind;

/// Where a connection's replies go.
pub(crate) trait ReplySink: Write + Send {
    /// The descriptor the writer writes to, when it keeps no buffer of its own, so that
    /// replies may be spliced into it directly.
    fn splice_fd(&self) -> Option<BorrowedFd<'_>>;
}

/// Where a connection's requests come from.
pub(crate) trait RequestSource: Read + Send {
    /// The descriptor the reader reads, when it reads it as it is (no buffer of its own),
    /// so that request data may also be spliced out of it.
    fn splice_fd(&self) -> Option<BorrowedFd<'_>>;
}

/// A reader requests are only read from, or a writer replies are only written to.
pub(crate) struct Plain<W>(pub W);

/// A socket or pipe with no buffer of its own: requests may also be spliced out of it, or
/// replies into it.
pub(crate) struct Spliceable<W>(pub W);

impl<R: Read + Send> Read for Plain<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read + Send> RequestSource for Plain<R> {
    fn splice_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

impl<R: Read + Send> Read for Spliceable<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: Read + AsFd + Send> RequestSource for Spliceable<R> {
    fn splice_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.0.as_fd())
    }
}

impl<W: Write + Send> Write for Plain<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<W: Write + Send> ReplySink for Plain<W> {
    fn splice_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

impl<W: Write + Send> Write for Spliceable<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<W: Write + AsFd + Send> ReplySink for Spliceable<W> {
    fn splice_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.0.as_fd())
    }
}

/// Sends an Rread's header ahead of its spliced data; on a socket with `MSG_MORE`, so that
/// it leaves in one segment with them.
pub(crate) fn send_header(
    fd: BorrowedFd<'_>,
    sink: Option<SinkKind>,
    header: &[u8],
) -> std::io::Result<()> {
    use rustix::net::SendFlags;
    let mut sent = 0;
    while sent < header.len() {
        let rest = &header[sent..];
        let n = match sink {
            Some(SinkKind::Socket) => {
                rustix::net::send(fd, rest, SendFlags::MORE | SendFlags::NOSIGNAL)
            }
            _ => rustix::io::write(fd, rest),
        };
        match n {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
