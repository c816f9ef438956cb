//! A READ's reply from the 9P socket to `/dev/fuse` without passing through the mount's
//! memory: the reply's 16-byte header, the payload bytes the client had already read into
//! its buffer (up to 64 KiB) and the few bytes more that bring the rest to a page boundary
//! are written into a pipe; the rest of the Rread's payload is spliced from the socket
//! into the pipe behind them (the pipe then holds references to the socket buffer's pages,
//! which for a payload the server spliced are the file's page-cache pages: no copy), and
//! the pipe is spliced into `/dev/fuse` whole (the kernel takes a reply in one write, so
//! the pipe must hold all of it; the kernel's one copy is into the mount's page cache).
//!
//! A pipe has one slot per page, and without `CAP_SYS_RESOURCE` holds at most
//! `/proc/sys/fs/pipe-max-size` (1 MiB, 256 slots): a 1 MiB READ's reply (257 pages with
//! its header) never fits. The mount then asks for READs a page smaller (`max_read`, from
//! [`largest_read`]).
//!
//! Anything the kernel refuses is copied as before and the reply is the same: a socket or
//! pipe that cannot splice, a pipe that fills before the payload is in (its bytes are read
//! back and the rest read from the socket), a `/dev/fuse` that refuses the splice. Only the
//! `/dev/fuse` transport splices; the io_uring transport's replies go in its ring's
//! buffers.
//!
//! Memory: the pipes are pooled, one per thread reading replies at a time (one per
//! connection), each holding at most one reply (page references) and empty between them.

use std::io::{self, IoSlice, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

use crossfs_client::Payload;
use crossfs_fuse_abi::OUT_HEADER_LEN;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::pipe::{fcntl_setpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};

/// A pipe, empty between replies.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

/// Payload bytes left in the socket below which a reply is copied: a 4 KiB random read
/// would pay three system calls (into the pipe, from the socket, into `/dev/fuse`) for
/// one.
const SPLICE_MIN: usize = 64 * 1024;

/// Pipes not in use.
static POOL: Mutex<Vec<Pipe>> = Mutex::new(Vec::new());

/// A page: a pipe has one slot per page it holds, and pieces of a socket's buffers that do
/// not fill a page still take a slot each.
const PAGE: usize = 4096;

impl Pipe {
    /// A pipe large enough for a reply of `reply` bytes, or as large as the system allows
    /// (`/proc/sys/fs/pipe-max-size` without `CAP_SYS_RESOURCE`); `None` if no pipe can
    /// be made.
    fn new(reply: usize) -> Option<Pipe> {
        let (read, write) = pipe_with(PipeFlags::CLOEXEC).ok()?;
        let want = (reply + 2 * PAGE).next_power_of_two();
        let capacity = match fcntl_setpipe_size(&write, want) {
            Ok(n) => n,
            Err(_) => {
                let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(64 * 1024);
                fcntl_setpipe_size(&write, max.min(want)).ok()?
            }
        };
        Some(Pipe {
            read,
            write,
            capacity,
        })
    }

    /// Whether a reply of `len` bytes may fit: one slot a page, so it does when the
    /// socket's pieces are whole pages (a payload the server spliced from the page cache
    /// at a page-aligned offset) behind the bytes written first; otherwise (a server that
    /// copied: its pieces are not whole pages) the pipe may fill first, and the reply is
    /// then copied.
    fn holds(&self, len: usize) -> bool {
        len <= self.capacity
    }

    /// Bytes waiting in the pipe, if it can say.
    fn waiting(&self) -> Option<usize> {
        rustix::io::ioctl_fionread(&self.read)
            .ok()
            .map(|n| n as usize)
    }
}

/// The largest READ payload, at most `max`, whose reply fits a pipe this process may make:
/// one page less than the pipe's capacity (the reply's header takes a slot of its own).
/// Without `CAP_SYS_RESOURCE` a pipe holds at most `/proc/sys/fs/pipe-max-size` (1 MiB by
/// default), so a 1 MiB READ could never be spliced; the mount asks the kernel for READs of
/// this size instead (`max_read`). `None` when no pipe can be made.
pub(crate) fn largest_read(max: usize) -> Option<usize> {
    let pipe = Pipe::new(OUT_HEADER_LEN + max)?;
    let fits = (pipe.capacity / PAGE).saturating_sub(1) * PAGE;
    lock(&POOL).push(pipe);
    Some(fits.min(max))
}

/// How a reply went.
pub(crate) enum Sent {
    /// Spliced into `/dev/fuse`: this many bytes of payload.
    Spliced(usize),
    /// Not spliced: the payload, read into memory (`Ok`), for the caller to send as a
    /// copied reply; `Err` when the stream failed (the payload says so to the client).
    Copy(io::Result<Vec<u8>>),
    /// The kernel no longer waits for the reply (the caller was interrupted, or the mount
    /// is gone): nothing more to send.
    Gone,
    /// The kernel refused the reply after taking it from the pipe: the caller answers EIO.
    Failed,
}

/// Sends `payload` as the reply to request `unique` through `dev`, splicing where it can
/// (see the module's doc).
pub(crate) fn reply(dev: BorrowedFd<'_>, unique: u64, payload: &mut Payload<'_>) -> Sent {
    let len = payload.len();
    if len - payload.buffered().len() < SPLICE_MIN {
        // Mostly in the client's buffer already, or small: a copy costs less than the
        // pipe's system calls.
        return Sent::Copy(payload.read_to_vec());
    }
    let total = OUT_HEADER_LEN + len;
    let Some(pipe) = take_pipe(total) else {
        return Sent::Copy(payload.read_to_vec());
    };
    let sent = through(&pipe, dev, unique, payload);
    // Back to the pool if it is empty (as a spliced reply leaves it: the kernel took all it
    // held), else dropped (a failure left bytes in it).
    if matches!(sent, Sent::Spliced(_)) || pipe.waiting() == Some(0) {
        lock(&POOL).push(pipe);
    }
    sent
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A pooled pipe that holds a reply of `total` bytes, or a new one.
fn take_pipe(total: usize) -> Option<Pipe> {
    let mut pool = lock(&POOL);
    match pool.pop() {
        Some(p) if p.holds(total) => Some(p),
        // The largest pipe allowed, too small for this reply: it is copied.
        Some(p) => {
            pool.push(p);
            None
        }
        None => {
            drop(pool);
            Pipe::new(total).filter(|p| p.holds(total))
        }
    }
}

/// The reply through `pipe`.
fn through(pipe: &Pipe, dev: BorrowedFd<'_>, unique: u64, payload: &mut Payload<'_>) -> Sent {
    let len = payload.len();
    let total = OUT_HEADER_LEN + len;
    let mut header = [0u8; OUT_HEADER_LEN];
    header[0..4].copy_from_slice(&(total as u32).to_le_bytes());
    header[8..16].copy_from_slice(&unique.to_le_bytes());
    // The header, what the client has already read of the payload, and as many bytes more
    // as bring the rest to a page boundary of the payload go in by copy: the socket's
    // pieces then fill whole slots (see `Pipe::holds`).
    let buffered = payload.buffered().len();
    let mut align = [0u8; PAGE];
    let align = &mut align[..((PAGE - buffered % PAGE) % PAGE).min(len - buffered)];
    let head = [IoSlice::new(&header), IoSlice::new(payload.buffered())];
    let first = OUT_HEADER_LEN + buffered;
    match rustix::io::writev(&pipe.write, &head) {
        Ok(n) if n == first => payload.consume_buffered(buffered),
        // Nothing that fits an empty pipe comes short: copy instead, leaving the pipe (to
        // be dropped if anything went in) and the payload as they are.
        _ => return Sent::Copy(payload.read_to_vec()),
    }
    let Some(socket) = payload.socket() else {
        return Sent::Copy(copy_back(pipe, buffered, payload));
    };
    // From the socket itself: a read through the client's buffer would fill the buffer.
    if let Err(e) = recv_exact(socket, align) {
        payload.broke(format!("reading a reply: {e}"));
        return Sent::Copy(Err(e));
    }
    payload.took_from_socket(align.len());
    match rustix::io::write(&pipe.write, align) {
        Ok(n) if n == align.len() => {}
        _ => return Sent::Copy(Err(io::Error::other("a short write into an empty pipe"))),
    }
    let buffered = buffered + align.len();
    let mut in_pipe = buffered;
    while !payload.is_empty() {
        // NONBLOCK: a full pipe is an answer, never a wait (nobody else empties it).
        match splice(
            socket,
            None,
            &pipe.write,
            None,
            payload.len(),
            SpliceFlags::NONBLOCK,
        ) {
            Ok(0) => {
                payload.broke("the server closed the connection mid-reply".into());
                return Sent::Copy(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(n) => {
                payload.took_from_socket(n);
                in_pipe += n;
            }
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => {
                if !wait(socket, pipe.write.as_fd()) {
                    // The pipe is full: what it holds is read back, the rest copied.
                    return Sent::Copy(copy_back(pipe, in_pipe, payload));
                }
            }
            Err(_) => return Sent::Copy(copy_back(pipe, in_pipe, payload)),
        }
    }
    match splice(&pipe.read, None, dev, None, total, SpliceFlags::empty()) {
        Ok(n) if n == total => Sent::Spliced(len),
        Err(Errno::NOENT | Errno::NODEV) => Sent::Gone,
        // Refused with the pipe untouched (a kernel that cannot take a spliced reply): the
        // reply is read back and copied.
        other => match pipe.waiting() {
            Some(n) if n == total => Sent::Copy(copy_back(pipe, len, payload)),
            _ => {
                tracing::warn!("cannot splice FUSE reply to request {unique}: {other:?}");
                Sent::Failed
            }
        },
    }
}

/// Reads `buf.len()` bytes from `socket`.
fn recv_exact(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match rustix::net::recv(socket, &mut buf[got..], rustix::net::RecvFlags::WAITALL) {
            Ok((0, _)) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok((n, _)) => got += n,
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => {
                let mut ready = [PollFd::new(&socket, PollFlags::IN)];
                let _ = poll(&mut ready, None);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Waits until the socket has bytes or the pipe is full; false when the pipe is full.
fn wait(socket: BorrowedFd<'_>, pipe: BorrowedFd<'_>) -> bool {
    let mut room = [PollFd::new(&pipe, PollFlags::OUT)];
    if !matches!(
        poll(&mut room, Some(&rustix::event::Timespec::default())),
        Ok(1)
    ) {
        return false;
    }
    let mut ready = [PollFd::new(&socket, PollFlags::IN)];
    loop {
        match poll(&mut ready, None) {
            Err(Errno::INTR) => {}
            // An error shows in the next splice.
            _ => return true,
        }
    }
}

/// The payload in memory: the `in_pipe` bytes of it waiting in the pipe behind the
/// header, then the rest from the payload.
fn copy_back(pipe: &Pipe, in_pipe: usize, payload: &mut Payload<'_>) -> io::Result<Vec<u8>> {
    let mut data = vec![0u8; in_pipe];
    let mut reader = PipeReader(pipe.read.as_fd());
    let mut header = [0u8; OUT_HEADER_LEN];
    reader.read_exact(&mut header)?;
    reader.read_exact(&mut data)?;
    payload.append_to(&mut data)?;
    Ok(data)
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
