//! FUSE over io_uring, a transport of the session beside `/dev/fuse` (Linux 6.14+, where
//! `/sys/module/fuse/parameters/enable_uring` is Y and INIT agreed `FUSE_OVER_IO_URING`).
//!
//! One thread per CPU queue (the kernel has one per possible CPU, and uses the ring only
//! once every queue has registered), pinned to its CPU, owning one ring with
//! [`ENTRIES_PER_QUEUE`] entries. A request arrives as a completion of an entry's
//! REGISTER or COMMIT_AND_FETCH; it is laid out as `/dev/fuse` gives it
//! (`crossfs_fuse_abi::uring::reassemble`) and dispatched as any other. Its reply, from
//! whichever thread answers, is queued for the ring's thread (woken through an eventfd
//! unless it answers itself), which writes it into the entry and commits it, fetching the
//! next request in the same submission.
//!
//! FORGET, INTERRUPT and notifications stay on `/dev/fuse`, and so does everything until
//! the ring is ready, or for good when the kernel refuses a registration: the `/dev/fuse`
//! workers run whatever happens here.
//!
//! Entries' buffers belong to the kernel from their submission to their completion; the
//! thread frees them only once every entry has completed (the kernel completes them all
//! when the connection ends), so the kernel never writes to freed memory.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossfs_fuse_abi::uring::{self as ring_abi, HEADER_BUFFER_LEN};
use crossfs_fuse_abi::{self as abi};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::dev::DevFuse;
use super::dispatch::{self, Acl, Filesystem};
use super::reply::{Channel, ReplySender};

/// Ring entries per queue: requests one CPU's queue may have in processing at once (a read
/// waiting for the server holds one); the kernel queues the rest.
pub(crate) const ENTRIES_PER_QUEUE: usize = 8;

/// Requests served, per transport, for `crossfs stats`.
#[derive(Debug, Default)]
pub(crate) struct TransportCounters {
    /// Requests read from `/dev/fuse`.
    pub dev_fuse: AtomicU64,
    /// Requests fetched through io_uring.
    pub io_uring: AtomicU64,
    /// Queues whose entries the kernel took (each possible CPU's, when in use).
    pub queues_registered: AtomicUsize,
}

impl TransportCounters {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "dev_fuse": self.dev_fuse.load(Ordering::Relaxed),
            "io_uring": self.io_uring.load(Ordering::Relaxed),
            "io_uring_queues": self.queues_registered.load(Ordering::Relaxed),
        })
    }
}

/// The CPUs the kernel may run (`/sys/devices/system/cpu/possible`, `0-3,6`): one queue
/// each.
pub(crate) fn possible_cpus() -> usize {
    let Ok(list) = std::fs::read_to_string("/sys/devices/system/cpu/possible") else {
        return std::thread::available_parallelism().map_or(1, |n| n.get());
    };
    let last = list
        .trim()
        .split(',')
        .filter_map(|range| range.rsplit('-').next()?.parse::<usize>().ok())
        .max();
    last.map_or(1, |n| n + 1)
}

/// One queue's way in for replies from other threads.
struct Mailbox {
    /// (entry, whole reply message) waiting to be committed.
    replies: Mutex<Vec<(usize, Vec<u8>)>>,
    /// Written to wake the ring's thread.
    wake: OwnedFd,
}

thread_local! {
    /// The queue whose ring this thread owns, if any: its own replies need no wake-up.
    static RING_OF_THIS_THREAD: std::cell::Cell<Option<u16>> = const { std::cell::Cell::new(None) };
}

/// Where a request fetched through a ring is answered: its entry.
struct EntryReply {
    mailbox: Arc<Mailbox>,
    qid: u16,
    entry: usize,
}

impl Channel for EntryReply {
    fn send(&self, message: &[IoSlice<'_>]) -> io::Result<()> {
        let bytes: Vec<u8> = message.iter().flat_map(|s| s.iter().copied()).collect();
        crate::sync::lock(&self.mailbox.replies).push((self.entry, bytes));
        if RING_OF_THIS_THREAD.with(|q| q.get()) != Some(self.qid) {
            rustix::io::write(&self.mailbox.wake, &1u64.to_ne_bytes())?;
        }
        Ok(())
    }
}

/// A ring entry's buffers, at fixed addresses while the kernel holds them.
struct Entry {
    header: Box<[u8; HEADER_BUFFER_LEN]>,
    payload: Vec<u8>,
    iov: Box<[libc::iovec; 2]>,
    commit_id: u64,
    /// The kernel holds it (registered, or committed and waiting for a request).
    in_kernel: bool,
    /// A request of it is being answered.
    busy: bool,
}

// SAFETY: the raw pointers in `iov` point into the entry's own boxed buffers; the entry
// moves between threads only as a whole (with the queue's thread), never shared.
#[allow(unsafe_code)]
unsafe impl Send for Entry {}

impl Entry {
    fn new(payload_len: usize) -> Entry {
        let mut header = Box::new([0u8; HEADER_BUFFER_LEN]);
        let mut payload = vec![0u8; payload_len];
        let iov = Box::new([
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: HEADER_BUFFER_LEN,
            },
            libc::iovec {
                iov_base: payload.as_mut_ptr().cast(),
                iov_len: payload_len,
            },
        ]);
        Entry {
            header,
            payload,
            iov,
            commit_id: 0,
            in_kernel: false,
            busy: false,
        }
    }
}

/// `user_data` of the eventfd's poll.
const WAKE: u64 = u64::MAX;

/// Serves queue `qid` on a ring of its own until the connection ends or the kernel refuses
/// its entries. `payload_len` is the largest payload the kernel sends or takes (the agreed
/// max_write or max_pages, whichever is larger).
///
/// # Errors
/// Setting up the ring or the eventfd; a submission failing.
pub(crate) fn serve_queue<FS: Filesystem>(
    fs: &FS,
    dev: &DevFuse,
    qid: u16,
    payload_len: usize,
    acl: Acl,
    counters: &TransportCounters,
) -> io::Result<()> {
    let mut cpus = rustix::thread::CpuSet::new();
    cpus.set(usize::from(qid));
    // A CPU that is possible but offline: the thread runs wherever it may.
    let _ = rustix::thread::sched_setaffinity(None, &cpus);
    RING_OF_THIS_THREAD.with(|q| q.set(Some(qid)));
    let mailbox = Arc::new(Mailbox {
        replies: Mutex::new(Vec::new()),
        wake: rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?,
    });
    // Entries first, so that they outlive the ring (locals drop in reverse order).
    let mut entries: Vec<Entry> = (0..ENTRIES_PER_QUEUE)
        .map(|_| Entry::new(payload_len))
        .collect();
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> =
        IoUring::builder().build((ENTRIES_PER_QUEUE * 2 + 2) as u32)?;
    let fd = types::Fd(dev.as_fd().as_raw_fd());
    for (i, e) in entries.iter_mut().enumerate() {
        push(
            &mut ring,
            entry_command(fd, ring_abi::CMD_REGISTER, e, i, qid),
        )?;
        e.in_kernel = true;
    }
    push(&mut ring, wake_poll(&mailbox.wake))?;
    let mut registered = false;
    let mut request = Vec::with_capacity(payload_len + 512);
    let mut completions = Vec::new();
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        completions.clear();
        completions.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for &(user_data, result) in &completions {
            if user_data == WAKE {
                let mut count = [0u8; 8];
                let _ = rustix::io::read(&mailbox.wake, &mut count);
                push(&mut ring, wake_poll(&mailbox.wake))?;
                continue;
            }
            let i = user_data as usize;
            let Some(e) = entries.get_mut(i) else {
                continue;
            };
            e.in_kernel = false;
            if result < 0 {
                let err = io::Error::from_raw_os_error(-result);
                if !registered {
                    tracing::info!(
                        "FUSE over io_uring: queue {qid} refused ({err}); /dev/fuse serves"
                    );
                } else {
                    tracing::debug!("FUSE over io_uring: queue {qid} entry {i} ended ({err})");
                }
                continue;
            }
            if !registered {
                registered = true;
                counters.queues_registered.fetch_add(1, Ordering::Relaxed);
            }
            counters.io_uring.fetch_add(1, Ordering::Relaxed);
            e.busy = true;
            let sender: ReplySender = Arc::new(EntryReply {
                mailbox: mailbox.clone(),
                qid,
                entry: i,
            });
            match ring_abi::reassemble(&e.header[..], &e.payload, &mut request) {
                Ok(commit_id) => {
                    e.commit_id = commit_id;
                    match abi::decode(&request) {
                        Ok(req) => dispatch::dispatch(fs, &req, &sender, acl),
                        Err(err) => {
                            // Not even a header: answer what the entry's header says.
                            tracing::warn!("undecodable FUSE request through io_uring: {err}");
                            let unique =
                                u64::from_le_bytes(e.header[8..16].try_into().unwrap_or([0; 8]));
                            super::reply::send(&*sender, unique, -libc::EIO, &[]);
                        }
                    }
                }
                Err(err) => {
                    e.commit_id = ring_abi::ent_in_out(&e.header[..]).map_or(0, |(c, _)| c);
                    tracing::warn!("FUSE request through io_uring does not fit: {err}");
                    let unique = u64::from_le_bytes(e.header[8..16].try_into().unwrap_or([0; 8]));
                    super::reply::send(&*sender, unique, -libc::EIO, &[]);
                }
            }
        }
        let replies = std::mem::take(&mut *crate::sync::lock(&mailbox.replies));
        for (i, message) in replies {
            let Some(e) = entries.get_mut(i).filter(|e| e.busy) else {
                continue;
            };
            e.busy = false;
            if !commit(e, &message) {
                let unique = u64::from_le_bytes(message[8..16].try_into().unwrap_or([0; 8]));
                tracing::warn!("FUSE reply to {unique} does not fit its ring entry: EIO");
                let _ =
                    ring_abi::put_reply(&mut e.header[..], &mut e.payload, unique, -libc::EIO, &[]);
            }
            push(
                &mut ring,
                entry_command(fd, ring_abi::CMD_COMMIT_AND_FETCH, e, i, qid),
            )?;
            e.in_kernel = true;
        }
        if entries.iter().all(|e| !e.in_kernel && !e.busy) {
            // Every entry completed and none waits for an answer: the connection ended, or
            // the kernel refused the queue. The buffers are the thread's again.
            return Ok(());
        }
    }
}

/// Writes the reply `message` (out header and body, as `/dev/fuse` takes it) into `e`.
fn commit(e: &mut Entry, message: &[u8]) -> bool {
    let (Some(header), Some(body)) = (
        message.get(..abi::OUT_HEADER_LEN),
        message.get(abi::OUT_HEADER_LEN..),
    ) else {
        return false;
    };
    let error = i32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let unique = u64::from_le_bytes(header[8..16].try_into().unwrap_or([0; 8]));
    ring_abi::put_reply(&mut e.header[..], &mut e.payload, unique, error, &[body])
}

fn wake_poll(wake: &OwnedFd) -> squeue::Entry128 {
    opcode::PollAdd::new(types::Fd(wake.as_raw_fd()), libc::POLLIN as u32)
        .build()
        .user_data(WAKE)
        .into()
}

/// A REGISTER or COMMIT_AND_FETCH of entry `i` of queue `qid`.
fn entry_command(fd: types::Fd, cmd_op: u32, e: &Entry, i: usize, qid: u16) -> squeue::Entry128 {
    let commit_id = if cmd_op == ring_abi::CMD_REGISTER {
        0
    } else {
        e.commit_id
    };
    let sqe = opcode::UringCmd80::new(fd, cmd_op)
        .cmd(ring_abi::cmd_req(commit_id, qid))
        .addr(Some(e.iov.as_ptr() as u64))
        .build()
        .user_data(i as u64);
    with_iovec_count(sqe, 2)
}

/// Sets the SQE's `len` (the number of iovecs REGISTER reads), which the io-uring crate's
/// `UringCmd80` has no setter for.
#[allow(unsafe_code)]
fn with_iovec_count(sqe: squeue::Entry128, count: u32) -> squeue::Entry128 {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: `Entry128` is `#[repr(C)]`: the kernel's 128-byte SQE (`io_uring_sqe`, whose
    // `len` is the u32 at byte 24) followed by the command's tail; every bit pattern of
    // those bytes is a valid value of both types.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&count.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute(raw) }
}

/// Queues `sqe` on the ring.
#[allow(unsafe_code)]
fn push(
    ring: &mut IoUring<squeue::Entry128, cqueue::Entry>,
    sqe: squeue::Entry128,
) -> io::Result<()> {
    if ring.submission().is_full() {
        ring.submit()?;
    }
    // SAFETY: what the SQE points at (an entry's iovecs and buffers; the eventfd) lives until
    // its completion: entries are freed only once none is in the kernel, and the eventfd
    // outlives the ring (the poll reads no memory).
    unsafe { ring.submission().push(&sqe) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))
}
