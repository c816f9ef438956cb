//! Rread's payload from the file to the socket without passing through the server's memory.
//!
//! The count of an Rread comes before its data, and a read may come up short (the end of
//! the file, a file truncated meanwhile), so the data must be read before the header is
//! written. A worker therefore splices the file's pages into its own pipe first (which
//! gives the count, and takes references to page-cache pages rather than copies of them),
//! then, holding the connection's writer lock, sends the 11-byte header and splices the pipe
//! into the socket. Replies never interleave: the header and the data are written under one
//! lock, as a copied reply is.
//!
//! Where the kernel cannot splice (a file system without `splice_read`, a socket or
//! descriptor that refuses it, a pipe too small for the payload, a pipe that fills up before
//! the payload is in), the bytes already in the pipe are read back and the rest is copied as
//! before: the reply is the same either way. Memory stays bounded: one pipe per worker,
//! holding at most one payload (at most msize) at a time.
//!
//! What a reader sees: the pages stay the file's while they sit in the pipe or the socket,
//! so a write that lands after the splice but before the client takes the bytes may show in
//! them. The client's read has not returned yet, so that write overlaps the read, and POSIX
//! allows either content.

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rustix::fs::FileType;
use rustix::io::Errno;
use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};

/// Bytes of file data by the path they took, over a connection or the server's life.
#[derive(Debug, Default)]
pub(crate) struct DataPaths {
    /// File data read into the server's memory and written from there: Rread payloads
    /// (reads the reader answers from the page cache, xattr and event reads, every read
    /// where splicing is not possible) and the file data of compound replies
    /// (`Rwalkread`, `Rreadfiles`).
    pub read_copied: AtomicU64,
    /// Rread payloads spliced from the file into the socket.
    pub read_spliced: AtomicU64,
    /// Twrite and Twriteattr payloads written to files from the server's memory (writes of
    /// at most 64 KiB, and every write where splicing is not possible).
    pub write_copied: AtomicU64,
    /// Twrite and Twriteattr payloads spliced from the socket into the file
    /// (`crate::piped`).
    pub write_spliced: AtomicU64,
}

impl DataPaths {
    /// `{"read_copied": N, "read_spliced": N, "write_copied": N, "write_spliced": N}`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "read_copied": self.read_copied.load(Relaxed),
            "read_spliced": self.read_spliced.load(Relaxed),
            "write_copied": self.write_copied.load(Relaxed),
            "write_spliced": self.write_spliced.load(Relaxed),
        })
    }
}

/// How replies may reach the connection's descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SinkKind {
    /// A socket: the header is sent with `MSG_MORE`, so that it leaves with the data.
    Socket,
    /// A pipe (an inherited descriptor, say).
    Pipe,
}

impl SinkKind {
    /// What `fd` is, if splicing into it is worth trying.
    pub(crate) fn of(fd: BorrowedFd<'_>) -> Option<SinkKind> {
        let st = rustix::fs::fstat(fd).ok()?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Socket => Some(SinkKind::Socket),
            FileType::Fifo => Some(SinkKind::Pipe),
            _ => None,
        }
    }
}

/// A worker's pipe, empty between replies.
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Its capacity in bytes.
    capacity: usize,
}

/// A page, for the slot a payload that does not start on a page boundary takes more.
const PAGE: usize = 4096;

impl Pipe {
    /// A pipe that holds `payload` bytes of a file from any offset (a pipe has one slot per
    /// page, so an unaligned payload needs one more), or as much as the system allows an
    /// unprivileged pipe (`/proc/sys/fs/pipe-max-size`) when it refuses that.
    ///
    /// # Errors
    /// `EMFILE`/`ENFILE`: no descriptors left for it.
    pub(crate) fn new(payload: usize) -> io::Result<Pipe> {
        Pipe::with_flags(payload, PipeFlags::CLOEXEC)
    }

    /// As [`Pipe::new`], with both ends non-blocking: a write into a full pipe, or a read
    /// from an empty one, is an answer (`EAGAIN`), never a wait.
    ///
    /// # Errors
    /// As [`Pipe::new`].
    pub(crate) fn non_blocking(payload: usize) -> io::Result<Pipe> {
        Pipe::with_flags(payload, PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
    }

    fn with_flags(payload: usize, flags: PipeFlags) -> io::Result<Pipe> {
        let (read, write) = pipe_with(flags)?;
        let want = (payload + 2 * PAGE).next_power_of_two();
        let capacity = match fcntl_setpipe_size(&write, want) {
            Ok(n) => n,
            Err(_) => {
                let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(64 * 1024);
                fcntl_setpipe_size(&write, max.min(want))
                    .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))?
            }
        };
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }

    /// Its capacity, for the connection's memory figures.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The end bytes go in by.
    pub(crate) fn write_end(&self) -> BorrowedFd<'_> {
        self.write.as_fd()
    }

    /// The end bytes come out of.
    pub(crate) fn read_end(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Bytes waiting in the pipe, if it can say.
    pub(crate) fn waiting(&self) -> Option<usize> {
        rustix::io::ioctl_fionread(&self.read)
            .ok()
            .map(|n| n as usize)
    }

    /// Whether `payload` bytes may fit: always from an offset on a page boundary (what the
    /// kernel's page cache asks for), not always from another ([`Pipe::fill`] then stops
    /// short and the rest is copied).
    pub(crate) fn holds(&self, payload: usize) -> bool {
        payload <= self.capacity
    }

    /// Splices up to `max` bytes of `file` from `offset` into the pipe (which must be
    /// empty). Returns the bytes spliced and whether that is all the read gives: `true`
    /// when it reached `max` or the end of the file, `false` when the pipe filled first or
    /// the kernel refused after some bytes (then the caller reads them back, see
    /// [`Pipe::read_back`], and copies the rest). `Err` only when nothing was spliced.
    ///
    /// # Errors
    /// `EINVAL` when the file system cannot splice, or any error of the read itself.
    pub(crate) fn fill(
        &self,
        file: BorrowedFd<'_>,
        offset: u64,
        max: usize,
    ) -> Result<(usize, bool), Errno> {
        let mut off = offset;
        let mut got = 0;
        while got < max {
            // NONBLOCK: a full pipe is an answer (EAGAIN), never a wait, since nobody else
            // empties it. It does not make the file's read non-blocking.
            match splice(
                file,
                Some(&mut off),
                &self.write,
                None,
                max - got,
                SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
            ) {
                Ok(0) => return Ok((got, true)),
                Ok(n) => got += n,
                Err(Errno::INTR) => {}
                Err(e) if got == 0 => return Err(e),
                Err(_) => return Ok((got, false)),
            }
        }
        Ok((got, true))
    }

    /// Reads `n` bytes waiting in the pipe into `buf`, leaving it empty.
    ///
    /// # Errors
    /// Any error of `read(2)`; the pipe must then be dropped.
    pub(crate) fn read_back(&self, buf: &mut [u8]) -> io::Result<()> {
        let mut reader = PipeReader(self.read.as_fd());
        reader.read_exact(buf)
    }

    /// Splices `n` bytes waiting in the pipe into `sink`. On `EINVAL` before the first
    /// byte (a descriptor that cannot take a splice), returns `Ok(false)` with the pipe
    /// untouched: the caller copies them instead ([`Pipe::read_back`]).
    ///
    /// # Errors
    /// Any other error of `splice(2)` (`EPIPE`: the peer is gone); the pipe must then be
    /// dropped.
    pub(crate) fn drain_into(&self, sink: BorrowedFd<'_>, n: usize) -> io::Result<bool> {
        let mut left = n;
        while left > 0 {
            match splice(&self.read, None, sink, None, left, SpliceFlags::MOVE) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left -= m,
                Err(Errno::INTR) => {}
                Err(Errno::INVAL) if left == n => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }
}

/// `Read` of a pipe's read end, retrying `EINTR`.
struct PipeReader<'a>(BorrowedFd<'a>);

impl Read for PipeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match rustix::io::read(self.0, &mut *buf) {
                Err(Errno::INTR) => {}
                r => return Ok(r?),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(len: usize) -> (tempfile::TempDir, std::fs::File, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        (dir, std::fs::File::open(&path).unwrap(), data)
    }

    #[test]
    fn a_short_file_gives_its_length_and_its_bytes() {
        let (_d, f, data) = file_of(5000);
        let pipe = Pipe::new(1 << 20).unwrap();
        assert!(pipe.holds(1 << 20));
        assert!(!pipe.holds(pipe.capacity() + 1));
        let (n, whole) = pipe.fill(f.as_fd(), 1, 1 << 20).unwrap();
        assert_eq!((n, whole), (4999, true));
        let mut back = vec![0; n];
        pipe.read_back(&mut back).unwrap();
        assert_eq!(back, data[1..]);
        // Past the end: nothing, and the whole answer.
        assert_eq!(pipe.fill(f.as_fd(), 9000, 10).unwrap(), (0, true));
    }

    #[test]
    fn an_unaligned_payload_of_the_whole_capacity_is_cut_short_not_blocked() {
        let (_d, f, data) = file_of(3 << 20);
        let pipe = Pipe::new(1 << 20).unwrap();
        let cap = pipe.capacity();
        // More than the pipe can hold from an unaligned offset: the fill stops, and what
        // it took reads back exactly.
        let (n, whole) = pipe.fill(f.as_fd(), 100, cap + PAGE).unwrap();
        assert!(!whole && n > 0 && n <= cap, "{n} of {cap}");
        let mut back = vec![0; n];
        pipe.read_back(&mut back).unwrap();
        assert_eq!(back, data[100..100 + n]);
    }

    #[test]
    fn drained_into_a_socket_the_bytes_arrive_in_order() {
        let (_d, f, data) = file_of(300_000);
        let pipe = Pipe::new(1 << 20).unwrap();
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(SinkKind::of(a.as_fd()), Some(SinkKind::Socket));
        assert_eq!(SinkKind::of(f.as_fd()), None);
        let (n, _) = pipe.fill(f.as_fd(), 0, 300_000).unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0; 300_000];
            b.read_exact(&mut got).unwrap();
            got
        });
        assert!(pipe.drain_into(a.as_fd(), n).unwrap());
        assert_eq!(reader.join().unwrap(), data);
    }
}
