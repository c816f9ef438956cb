//! [`Stream`]: one connected byte stream over any transport.

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::io::Errno;
use rustix::net::{AddressFamily, RecvFlags, SendAncillaryBuffer, SendFlags, Shutdown};

use crate::addr::Addr;
use crate::error::TransportError;
use crate::inherited::FdClaim;
use crate::options::{self, SocketOptions};
use crate::socket::{family_of, retry};

/// One connected byte stream (unix, TCP, vsock or inherited socket).
///
/// Reads and writes retry `EINTR`; writes never raise `SIGPIPE` (a closed
/// peer is reported as [`io::ErrorKind::BrokenPipe`]). `Read` and `Write`
/// are also implemented for `&Stream`, so one thread can read while
/// another writes; [`Stream::try_clone`] gives an independently owned handle.
pub struct Stream {
    // Field order matters: the descriptor closes before the claim on its
    // number (for `fd:N` streams) is released.
    fd: OwnedFd,
    family: AddressFamily,
    addr: Addr,
    peer: String,
    _claim: Option<FdClaim>,
}

impl Stream {
    /// Wraps a connected socket. `addr` is the address it was connected to
    /// or accepted on; `peer` describes the far end for logs.
    pub(crate) fn new(fd: OwnedFd, addr: Addr, peer: String, claim: Option<FdClaim>) -> Stream {
        Stream {
            family: family_of(&fd),
            fd,
            addr,
            peer,
            _claim: claim,
        }
    }

    /// Describes the far end for logs, e.g. `tcp:127.0.0.1:40022` or
    /// `unix:/run/crossfs.sock (pid 812, uid 1000)`.
    pub fn peer(&self) -> String {
        self.peer.clone()
    }

    /// The address this stream was connected to, or accepted on.
    pub fn addr(&self) -> &Addr {
        &self.addr
    }

    /// Another handle to the same connection (`dup`, close-on-exec).
    pub fn try_clone(&self) -> Result<Stream, TransportError> {
        let fd = rustix::io::fcntl_dupfd_cloexec(&self.fd, 0)
            .map_err(|e| TransportError::sys(&self.addr, "dup", e))?;
        Ok(Stream {
            fd,
            family: self.family,
            addr: self.addr.clone(),
            peer: self.peer.clone(),
            _claim: None,
        })
    }

    /// Shuts down both directions: blocked reads on any handle return
    /// end-of-file and the peer sees end-of-file. A connection the peer
    /// already closed is not an error.
    pub fn shutdown(&self) -> io::Result<()> {
        self.shutdown_how(Shutdown::Both)
    }

    /// Shuts down the sending direction only; the peer sees end-of-file
    /// and can still reply.
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown_how(Shutdown::Write)
    }

    fn shutdown_how(&self, how: Shutdown) -> io::Result<()> {
        match rustix::net::shutdown(&self.fd, how) {
            Ok(()) | Err(Errno::NOTCONN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Applies socket options; those that do not suit this transport (such
    /// as `nodelay` on a unix socket) are ignored.
    pub fn apply(&self, opts: &SocketOptions) -> Result<(), TransportError> {
        options::apply(self.fd.as_fd(), self.family, &self.addr, opts)
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("fd", &self.fd.as_raw_fd())
            .field("addr", &self.addr)
            .field("peer", &self.peer)
            .finish()
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (n, _) = retry(|| rustix::net::recv(&self.fd, &mut *buf, RecvFlags::empty()))?;
        Ok(n)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        Ok(retry(|| rustix::io::readv(&self.fd, bufs))?)
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(retry(|| {
            rustix::net::send(&self.fd, buf, SendFlags::NOSIGNAL)
        })?)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let send = || {
            let mut control = SendAncillaryBuffer::default();
            rustix::net::sendmsg(&self.fd, bufs, &mut control, SendFlags::NOSIGNAL)
        };
        Ok(retry(send)?)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&*self).read_vectored(bufs)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl From<Stream> for OwnedFd {
    /// Takes the descriptor; the caller now owns it (for `fd:N` streams,
    /// the number is no longer reserved against reuse through `fd:N`).
    fn from(stream: Stream) -> OwnedFd {
        stream.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{socketpair, SocketFlags, SocketType};

    fn pair() -> (Stream, Stream) {
        let (a, b) = socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let addr = Addr::Unix("socketpair".into());
        (
            Stream::new(a, addr.clone(), "a".into(), None),
            Stream::new(b, addr, "b".into(), None),
        )
    }

    #[test]
    fn vectored_io_and_clone() {
        let (mut a, b) = pair();
        let n = a
            .write_vectored(&[IoSlice::new(b"hello "), IoSlice::new(b"world")])
            .unwrap();
        assert_eq!(n, 11);
        let mut reader = b.try_clone().unwrap();
        assert_ne!(reader.as_raw_fd(), b.as_raw_fd());
        let (mut x, mut y) = ([0u8; 6], [0u8; 5]);
        let mut bufs = [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)];
        assert_eq!(reader.read_vectored(&mut bufs).unwrap(), 11);
        assert_eq!((&x, &y), (b"hello ", b"world"));
    }

    #[test]
    fn shutdown_wakes_reader_and_peer_close_is_broken_pipe() {
        let (a, b) = pair();
        let reader = b.try_clone().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 8];
            (&reader).read(&mut buf).unwrap()
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        b.shutdown().unwrap();
        assert_eq!(
            t.join().unwrap(),
            0,
            "shutdown gives the blocked reader EOF"
        );
        drop(b);
        // Writing to a closed peer must fail cleanly, not raise SIGPIPE.
        let mut err = None;
        for _ in 0..4 {
            if let Err(e) = (&a).write(b"x") {
                err = Some(e);
                break;
            }
        }
        assert_eq!(err.unwrap().kind(), io::ErrorKind::BrokenPipe);
        a.shutdown().unwrap();
    }

    #[test]
    fn into_owned_fd() {
        let (a, _b) = pair();
        let raw = a.as_raw_fd();
        let fd: OwnedFd = a.into();
        assert_eq!(fd.as_raw_fd(), raw);
    }
}
