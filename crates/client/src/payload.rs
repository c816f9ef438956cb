//! An Rread's payload handed to its caller while it is still in the stream, so that the
//! caller can move it on without a copy through this process (splice it from the socket
//! into a pipe, say) or read it where it wants it.
//!
//! The reply's header has been read and checked (its count matches its frame), so exactly
//! [`Payload::len`] bytes of payload come next: some may already sit in the client's read
//! buffer ([`Payload::buffered`]), the rest in the socket. Whatever the caller leaves
//! untaken is read and discarded after it returns, so the stream stays in step whatever
//! the caller does; a caller that broke the stream says so ([`Payload::broke`]) and the
//! connection is closed.

use std::io::{self, BufRead, Read};
use std::os::fd::BorrowedFd;

use crate::conn::Source;

/// The payload of one Rread, in the stream (see the module's doc).
pub struct Payload<'a> {
    source: &'a mut Source,
    /// The socket `source` reads, where the transport gave one.
    socket: Option<BorrowedFd<'a>>,
    left: usize,
    broken: Option<String>,
}

impl<'a> Payload<'a> {
    pub(crate) fn new(source: &'a mut Source, socket: Option<BorrowedFd<'a>>, len: usize) -> Self {
        Payload {
            source,
            socket,
            left: len,
            broken: None,
        }
    }

    /// Bytes of payload not taken yet.
    pub fn len(&self) -> usize {
        self.left
    }

    /// True when every byte has been taken.
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// The payload's next bytes already read from the socket into the client's buffer
    /// (empty when none are): they come before anything in the socket.
    pub fn buffered(&self) -> &[u8] {
        let b = self.source.buffer();
        &b[..b.len().min(self.left)]
    }

    /// Takes the first `n` bytes of [`Payload::buffered`] (at most all of them).
    pub fn consume_buffered(&mut self, n: usize) {
        let n = n.min(self.buffered().len());
        self.source.consume(n);
        self.left -= n;
    }

    /// The socket the rest of the payload is to be taken from, once nothing of it is
    /// buffered; `None` while some is, or when the transport gave no socket (a caller then
    /// reads, [`Payload::read_exact`]). Bytes taken from it directly must be reported with
    /// [`Payload::took_from_socket`].
    pub fn socket(&self) -> Option<BorrowedFd<'a>> {
        if self.source.buffer().is_empty() {
            self.socket
        } else {
            None
        }
    }

    /// Whether the transport gave a socket (so [`Payload::socket`] offers it once the
    /// buffered bytes are taken).
    pub fn has_socket(&self) -> bool {
        self.socket.is_some()
    }

    /// Records that the caller took `n` bytes of payload from [`Payload::socket`] itself.
    pub fn took_from_socket(&mut self, n: usize) {
        self.left -= n.min(self.left);
    }

    /// Reads the next `buf.len()` bytes of payload (at most [`Payload::len`]).
    ///
    /// # Errors
    /// The stream's, or `InvalidInput` for more than is left; the connection is then
    /// closed after the caller returns.
    pub fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() > self.left {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} bytes asked of a payload of {}", buf.len(), self.left),
            ));
        }
        let read = self.source.read_exact(buf);
        match &read {
            Ok(()) => self.left -= buf.len(),
            Err(e) => self.broke(format!("reading a reply: {e}")),
        }
        read
    }

    /// Reads what is left of the payload into a new `Vec`.
    ///
    /// # Errors
    /// As [`Payload::read_exact`].
    pub fn read_to_vec(&mut self) -> io::Result<Vec<u8>> {
        let mut data = Vec::with_capacity(self.left);
        self.append_to(&mut data)?;
        Ok(data)
    }

    /// Reads what is left of the payload onto the end of `data`.
    ///
    /// # Errors
    /// As [`Payload::read_exact`].
    pub fn append_to(&mut self, data: &mut Vec<u8>) -> io::Result<()> {
        let want = self.left;
        let start = data.len();
        let read = self
            .source
            .by_ref()
            .take(want as u64)
            .read_to_end(data)
            .and_then(|n| {
                if n == want {
                    Ok(())
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                }
            });
        self.left -= data.len() - start;
        if let Err(e) = &read {
            self.broke(format!("reading a reply: {e}"));
        }
        read
    }

    /// Says the stream is out of step (a splice from the socket failed after taking an
    /// unknown part): the connection is closed after the caller returns.
    pub fn broke(&mut self, why: String) {
        self.broken.get_or_insert(why);
    }

    /// After the caller: discards what it left, and says whether the stream is still in
    /// step (`Err`: why not).
    pub(crate) fn finish(mut self) -> Result<(), String> {
        if let Some(why) = self.broken.take() {
            return Err(why);
        }
        if self.left > 0 {
            let left = self.left as u64;
            let n = io::copy(&mut self.source.by_ref().take(left), &mut io::sink())
                .map_err(|e| format!("reading a reply: {e}"))?;
            if n != left {
                return Err("the server closed the connection mid-reply".into());
            }
        }
        Ok(())
    }
}
