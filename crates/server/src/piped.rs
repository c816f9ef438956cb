//! Twrite's payload from the socket into the file without passing through the server's
//! memory.
//!
//! The connection's reader reads a large Twrite's (or Twriteattr's) 23-byte head alone
//! ([`crossfs_wire::WriteHead`]) and moves its payload into a pipe: the bytes its buffer
//! already holds (at most 64 KiB) by a `write`, the rest spliced from the socket, so that
//! the pipe holds references to the socket buffer's pages rather than copies of them. It
//! hands the pipe to a worker with the request and reads on; the worker splices the pipe
//! into the file at the write's offset ([`crossfs_export::sys::splice_to_file`]): the
//! kernel's one copy, into the file's pages. The reader never waits for the file.
//!
//! Which writes: payloads of more than [`crossfs_wire::INLINE_WRITE_MAX`] bytes to a fid
//! open on a regular file for writing, without `O_APPEND` (splice refuses it) or
//! `O_DIRECT`, on a connection read from a socket or a pipe, unless
//! [`crate::ServerConfig::splice_writes`] is off. Those are writes that ran on workers
//! already: which requests run where, and so the order they run in, is the same with
//! splicing as without (docs/protocol.md, "Order"). Smaller writes are copied, on the
//! reader: a pipe would cost more system calls than the copy.
//!
//! A pipe holds a piece of the socket's buffer per slot, 256 slots without
//! `CAP_SYS_RESOURCE` (`/proc/sys/fs/pipe-max-size`, 1 MiB). A 1 MiB payload from a unix
//! socket or loopback TCP fits one such pipe, the socket's pieces being up to 32 KiB; one
//! that fills a pipe goes on in a second, and one that fills [`MAX_PIPES`] (a client that
//! sends in tiny pieces) is read back from the pipes and copied, as is a payload for which
//! no pipe can be made.
//!
//! Memory: a payload in pipes holds the socket's pages, counted as its frame against
//! `max_buffered_bytes` as a copied request is; the reader waits for room before it takes
//! a payload off the socket. Pipes are pooled per connection, empty between writes; one
//! that may still hold bytes (a write that failed part-way, a request flushed before it
//! ran) is closed instead.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::BorrowedFd;
use std::sync::Mutex;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::pipe::{splice, SpliceFlags};

use crossfs_export::sys;

use crate::fid::lock;
use crate::sink::RequestSource;
use crate::splice::Pipe;

/// Pipes one payload may take before the rest is copied.
pub(crate) const MAX_PIPES: usize = 2;

/// A write's payload waiting in pipes, in order.
pub(crate) struct PipedPayload {
    /// Each pipe and the bytes of the payload it holds.
    pipes: Vec<(Pipe, usize)>,
}

impl PipedPayload {
    /// Bytes waiting.
    pub(crate) fn len(&self) -> usize {
        self.pipes.iter().map(|(_, n)| n).sum()
    }

    /// Splices the payload into `file` at `offset`: the bytes written, fewer than
    /// [`PipedPayload::len`] when the file took fewer (a full file system). `Err` only
    /// when it took none; `EINVAL` then leaves the payload untouched (a descriptor or file
    /// system that takes no splice: read it back and write it).
    pub(crate) fn write_to_file(
        &mut self,
        file: BorrowedFd<'_>,
        offset: u64,
    ) -> Result<usize, Errno> {
        let mut written = 0usize;
        for (pipe, held) in &mut self.pipes {
            while *held > 0 {
                let at = offset.saturating_add(written as u64);
                match sys::splice_to_file(pipe.read_end(), file, at, *held) {
                    // Nothing taken with bytes waiting: the file takes no more.
                    Ok(0) => return Ok(written),
                    Ok(n) => {
                        *held -= n;
                        written += n;
                    }
                    Err(Errno::INTR) => {}
                    Err(e) if written == 0 => return Err(e),
                    // An error after some bytes is a short write, as from `pwrite` itself.
                    Err(_) => return Ok(written),
                }
            }
        }
        Ok(written)
    }

    /// The payload in memory, leaving the pipes empty.
    ///
    /// # Errors
    /// A pipe holding fewer bytes than it should (`EIO`), or failing to read.
    pub(crate) fn read_back(&mut self) -> Result<Vec<u8>, Errno> {
        let mut data = Vec::with_capacity(self.len());
        for (pipe, held) in &mut self.pipes {
            let start = data.len();
            data.resize(start + *held, 0);
            let mut got = start;
            while got < data.len() {
                match rustix::io::read(pipe.read_end(), &mut data[got..]) {
                    Ok(0) | Err(Errno::AGAIN) => return Err(Errno::IO),
                    Ok(n) => got += n,
                    Err(Errno::INTR) => {}
                    Err(e) => return Err(e),
                }
            }
            *held = 0;
        }
        Ok(data)
    }
}

/// A connection's idle pipes, each empty.
pub(crate) struct PipePool {
    idle: Mutex<Vec<Pipe>>,
    /// Pipes kept idle at most (one per worker, and one the reader fills).
    max_idle: usize,
}

impl PipePool {
    pub(crate) fn new(max_idle: usize) -> PipePool {
        PipePool {
            idle: Mutex::new(Vec::new()),
            max_idle,
        }
    }

    /// An idle pipe, or a new one as large as the system allows for `payload` bytes;
    /// `None` if no pipe can be made (no descriptors left).
    fn take(&self, payload: usize) -> Option<Pipe> {
        if let Some(p) = lock(&self.idle).pop() {
            return Some(p);
        }
        Pipe::non_blocking(payload)
            .map_err(|e| tracing::debug!("no pipe for a write: {e}"))
            .ok()
    }

    /// Takes back the pipes of a payload written whole; a payload that still holds bytes
    /// (or whose pipes cannot say) has its pipes closed.
    pub(crate) fn give_back(&self, payload: PipedPayload) {
        let mut idle = lock(&self.idle);
        for (pipe, held) in payload.pipes {
            if held == 0 && pipe.waiting() == Some(0) && idle.len() < self.max_idle {
                idle.push(pipe);
            }
        }
    }
}

/// A write's payload as the reader took it off the stream.
pub(crate) enum Taken {
    /// In pipes, for a worker to splice into the file.
    Piped(PipedPayload),
    /// In memory (no pipe to be had, a payload in too many pieces, a descriptor that
    /// takes no splice).
    Copied(Vec<u8>),
}

/// Takes the `count` bytes of payload that come next in `reader` (whose descriptor is read
/// by nothing else, and buffered only by `reader`) into pipes from `pool`; `payload_max`
/// sizes new pipes. Waits for the bytes as a read would.
///
/// # Errors
/// The stream ending (`UnexpectedEof`) or failing before the payload is in: the
/// connection cannot go on.
pub(crate) fn take_payload<S: RequestSource>(
    reader: &mut BufReader<S>,
    count: usize,
    (pool, payload_max): (&PipePool, usize),
) -> std::io::Result<Taken> {
    let mut piped = PipedPayload { pipes: Vec::new() };
    // The bytes the reader's buffer holds go in by `write`.
    let buffered = reader.buffer().len().min(count);
    let mut done = 0;
    while done < buffered {
        if piped.pipes.is_empty() && !grow(&mut piped, pool, payload_max) {
            break;
        }
        let Some((pipe, held)) = piped.pipes.last_mut() else {
            break;
        };
        match rustix::io::write(pipe.write_end(), &reader.buffer()[done..buffered]) {
            Ok(n) => {
                done += n;
                *held += n;
            }
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) if grow(&mut piped, pool, payload_max) => {}
            Err(_) => break,
        }
    }
    reader.consume(done);
    if done < buffered {
        return copy_rest(reader, (piped, pool), count - done);
    }
    // The rest from the descriptor itself: the reader's buffer is empty now, or holds
    // bytes beyond this payload (then nothing is left to splice).
    let mut left = count - done;
    while left > 0 {
        if piped.pipes.is_empty() && !grow(&mut piped, pool, payload_max) {
            return copy_rest(reader, (piped, pool), left);
        }
        let (Some((pipe, held)), Some(fd)) = (piped.pipes.last_mut(), reader.get_ref().splice_fd())
        else {
            return copy_rest(reader, (piped, pool), left);
        };
        // NONBLOCK: a full pipe is an answer (nobody else empties it), as is an empty
        // socket, which is then waited for.
        match splice(
            fd,
            None,
            pipe.write_end(),
            None,
            left,
            SpliceFlags::NONBLOCK,
        ) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                left -= n;
                *held += n;
            }
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => {
                if is_full(pipe.write_end()) {
                    if !grow(&mut piped, pool, payload_max) {
                        return copy_rest(reader, (piped, pool), left);
                    }
                } else {
                    wait_readable(fd);
                }
            }
            // Anything else (a descriptor that takes no splice): copied, and a failing
            // stream then fails the read.
            Err(_) => return copy_rest(reader, (piped, pool), left),
        }
    }
    Ok(Taken::Piped(piped))
}

/// Adds a pipe to the payload's chain, unless it has [`MAX_PIPES`] or none can be made.
fn grow(piped: &mut PipedPayload, pool: &PipePool, payload_max: usize) -> bool {
    if piped.pipes.len() >= MAX_PIPES {
        return false;
    }
    match pool.take(payload_max) {
        Some(p) => {
            piped.pipes.push((p, 0));
            true
        }
        None => false,
    }
}

/// The payload in memory: what `piped` holds (its pipes then go back to `pool`), then the
/// `left` bytes still in the stream.
fn copy_rest<S: RequestSource>(
    reader: &mut BufReader<S>,
    (mut piped, pool): (PipedPayload, &PipePool),
    left: usize,
) -> std::io::Result<Taken> {
    let mut data = piped.read_back().map_err(std::io::Error::from)?;
    pool.give_back(piped);
    let start = data.len();
    data.resize(start + left, 0);
    reader.read_exact(&mut data[start..])?;
    Ok(Taken::Copied(data))
}

/// Whether the pipe whose write end is `pipe` has no free slot.
fn is_full(pipe: BorrowedFd<'_>) -> bool {
    let mut room = [PollFd::new(&pipe, PollFlags::OUT)];
    !matches!(poll(&mut room, Some(&Timespec::default())), Ok(1))
}

/// Waits until `fd` has bytes (or an end, or an error, which the next splice shows).
fn wait_readable(fd: BorrowedFd<'_>) {
    let mut ready = [PollFd::new(&fd, PollFlags::IN)];
    while let Err(Errno::INTR) = poll(&mut ready, None) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::Spliceable;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 + i / 4096) as u8).collect()
    }

    /// A payload behind a head, sent in one piece or in `piece`-byte writes; what the
    /// reader takes of it goes into a file whole and in order.
    fn through_a_file(len: usize, piece: usize) -> bool {
        let data = pattern(len);
        let (mut tx, rx) = UnixStream::pair().unwrap();
        let sent = data.clone();
        let sender = std::thread::spawn(move || {
            tx.write_all(b"head").unwrap();
            for chunk in sent.chunks(piece) {
                tx.write_all(chunk).unwrap();
            }
        });
        let mut reader = BufReader::with_capacity(64 * 1024, Spliceable(rx));
        let mut head = [0u8; 4];
        reader.read_exact(&mut head).unwrap();
        let pool = PipePool::new(4);
        let taken = take_payload(&mut reader, len, (&pool, 1 << 20)).unwrap();
        sender.join().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        let spliced = match taken {
            Taken::Piped(mut p) => {
                assert_eq!(p.len(), len);
                let n = p.write_to_file(file.as_fd(), 0).unwrap();
                assert_eq!(n, len);
                pool.give_back(p);
                true
            }
            Taken::Copied(bytes) => {
                std::fs::write(dir.path().join("f"), bytes).unwrap();
                false
            }
        };
        let got = std::fs::read(dir.path().join("f")).unwrap();
        assert!(got == data, "{} bytes in the file of {len}", got.len());
        spliced
    }

    #[test]
    fn a_mib_sent_whole_is_spliced_into_the_file() {
        assert!(through_a_file(1 << 20, 1 << 20));
        assert!(through_a_file((1 << 20) - 4096 + 1, 1 << 20));
    }

    #[test]
    fn a_payload_sent_in_tiny_pieces_is_copied_whole() {
        // 512-byte sends each take a slot: more than two pipes' worth for 1 MiB.
        assert!(!through_a_file(1 << 20, 512));
    }

    #[test]
    fn the_stream_ending_mid_payload_is_an_error_not_a_hang() {
        let (mut tx, rx) = UnixStream::pair().unwrap();
        // Sent, then the stream closed, while the reader waits for more.
        let sender = std::thread::spawn(move || tx.write_all(&pattern(200_000)).unwrap());
        let mut reader = BufReader::with_capacity(64 * 1024, Spliceable(rx));
        let pool = PipePool::new(4);
        let taken = take_payload(&mut reader, 1 << 20, (&pool, 1 << 20));
        sender.join().unwrap();
        assert_eq!(
            taken.err().map(|e| e.kind()),
            Some(std::io::ErrorKind::UnexpectedEof)
        );
    }
}
