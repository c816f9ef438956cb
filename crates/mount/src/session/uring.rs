//! FUSE over io_uring, a transport of the session beside `/dev/fuse` (Linux 6.14+, where
//! `/sys/module/fuse/parameters/enable_uring` is Y and INIT agreed `FUSE_OVER_IO_URING`).
//!
//! One queue per possible CPU (the kernel uses the rings only once every queue has
//! registered), each a ring with [`ENTRIES_PER_QUEUE`] entries and its own threads, all
//! pinned to its CPU. One of them leads: it waits on the ring, and a request arrives as a
//! completion of an entry's REGISTER or COMMIT_AND_FETCH; it is laid out as `/dev/fuse`
//! gives it (`crossfs_fuse_abi::uring::reassemble`) and dispatched on the leading thread,
//! so that a request the mount answers from what it holds costs no thread hop. A handler
//! that waits for the server (a blocking 9P call, or a wait of the mount's on the server:
//! `crossfs_client::before_wait`) first frees the ring for the queue's other threads
//! (leader/followers, as the 9P client reads its socket; one is started when none is
//! idle): one of them takes it as soon as a request or a reply to commit comes, so the
//! ring goes on fetching while the handler waits; if none came, the handler's thread takes
//! the ring back with its reply, and the wait cost no thread switch. `crossfs stats`
//! counts both (`io_uring_handovers`, `io_uring_takeovers`).
//!
//! A reply, from whichever thread answers, is written into its entry's buffers there (a
//! READ's payload read straight from the 9P socket into them), and the entry queued for
//! the leading thread (woken through an eventfd unless it answers itself), which commits
//! it, fetching the next request in the same submission. Only the queue's threads submit
//! to its ring: the kernel completes an entry in the task that submitted it, on the
//! queue's CPU.
//!
//! FORGET, INTERRUPT and notifications stay on `/dev/fuse`, and so does everything until
//! the ring is ready, or for good when the kernel refuses a registration: the `/dev/fuse`
//! workers run whatever happens here.
//!
//! Entries' buffers belong to the kernel from their submission to their completion, then
//! to the request's reply until it is written; the ring is freed only once every entry has
//! completed and been answered (the kernel completes them all when the connection ends),
//! and never when a submission failed with entries in the kernel, so the kernel never
//! writes to freed memory. A queue's threads live as long as the queue: the kernel cancels
//! the commands of a thread that exits.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossfs_client::Payload;
use crossfs_fuse_abi::uring::{self as ring_abi, HEADER_BUFFER_LEN};
use crossfs_fuse_abi::{self as abi};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::dev::DevFuse;
use super::dispatch::{self, Acl, Filesystem};
use super::idle_poll::IdlePoll;
use super::reply::{Channel, ReplySender};
use crate::sync::lock;

/// Ring entries per queue: requests one CPU's queue may have in processing at once (each
/// handler waiting for the server holds one); the kernel queues the rest.
pub(crate) const ENTRIES_PER_QUEUE: usize = 8;

/// Threads a queue may start: one leading, the others each in a handler that waits for
/// the server (at most one per entry), or idle; twice the entries leaves room for handlers
/// still running after their reply. Beyond it, a handler that waits keeps the ring waiting.
const MAX_THREADS_PER_QUEUE: usize = 2 * ENTRIES_PER_QUEUE;

/// Requests served, per transport, for `crossfs stats`.
#[derive(Debug, Default)]
pub(crate) struct TransportCounters {
    /// Requests read from `/dev/fuse`.
    pub dev_fuse: AtomicU64,
    /// Requests fetched through io_uring.
    pub io_uring: AtomicU64,
    /// Queues whose entries the kernel took (each possible CPU's, when in use).
    pub queues_registered: AtomicUsize,
    /// Handlers that waited for the server on a ring's leading thread, which freed the
    /// ring for another thread first.
    pub handed_over: AtomicU64,
    /// Times another thread took a ring so freed (a request came, or a reply to commit).
    pub taken_over: AtomicU64,
    /// Threads serving the rings, all queues together.
    pub ring_threads: AtomicUsize,
}

impl TransportCounters {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "dev_fuse": self.dev_fuse.load(Ordering::Relaxed),
            "io_uring": self.io_uring.load(Ordering::Relaxed),
            "io_uring_queues": self.queues_registered.load(Ordering::Relaxed),
            "io_uring_handovers": self.handed_over.load(Ordering::Relaxed),
            "io_uring_takeovers": self.taken_over.load(Ordering::Relaxed),
            "io_uring_threads": self.ring_threads.load(Ordering::Relaxed),
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

/// Starts serving queue `qid` on a ring of its own, until the connection ends or the
/// kernel refuses its entries; returns its first thread, which returns what ended the
/// queue. `payload_len` is the largest payload the kernel sends or takes (the agreed
/// max_write or max_pages, whichever is larger).
///
/// # Errors
/// Setting up the ring, its eventfds and its watch, or starting the thread; the thread
/// returns a submission's error.
pub(crate) fn start_queue<FS: Filesystem>(
    fs: Arc<FS>,
    dev: Arc<DevFuse>,
    qid: u16,
    payload_len: usize,
    acl: Acl,
    (counters, poll): (Arc<TransportCounters>, Option<Arc<IdlePoll>>),
) -> io::Result<JoinHandle<io::Result<()>>> {
    use rustix::event::{epoll, eventfd, EventfdFlags};
    let flags = EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK;
    let (wake, stop) = (eventfd(0, flags)?, eventfd(0, flags)?);
    let watch = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    let ring = Ring::new(&dev, qid, &wake, payload_len)?;
    // The ring only while it is free (armed then, one-shot); the end for good.
    epoll::add(
        &watch,
        &ring.uring,
        epoll::EventData::new_u64(0),
        epoll::EventFlags::empty(),
    )?;
    epoll::add(
        &watch,
        &stop,
        epoll::EventData::new_u64(1),
        epoll::EventFlags::IN,
    )?;
    let follower_fs = fs.clone();
    let queue = Arc::new(Queue {
        qid,
        dev,
        replies: Mutex::new(Vec::new()),
        wake,
        watch,
        stop,
        lead: Mutex::new(Lead {
            ring: None,
            free: false,
            idle: 0,
            threads: 1,
            ended: false,
            error: None,
        }),
        counters,
        poll,
        start_thread: Box::new(move |queue| {
            let fs = follower_fs.clone();
            std::thread::Builder::new()
                .name(format!("crossfs-uring-{}", queue.qid))
                .spawn(move || serve(&*fs, &queue, acl, None))
                .map(drop)
        }),
    });
    std::thread::Builder::new()
        .name(format!("crossfs-uring-{qid}"))
        .spawn(move || {
            serve(&*fs, &queue, acl, Some(ring))?;
            lock(&queue.lead).error.take().map_or(Ok(()), Err)
        })
}

/// One queue: its ring (held by the thread that leads), the replies waiting to be
/// committed, and who leads.
///
/// Handing over costs no thread switch unless there is work: the ring is left parked and
/// free, and the queue's idle threads wait on `watch`, which reports the ring's fd readable
/// (a completion posted: a request, or the eventfd poll of posted replies) only while it is
/// armed, from the hand-over until a thread takes the ring. The thread that handed it over
/// takes it back on its way out if nobody did, and commits its own reply then.
struct Queue {
    qid: u16,
    dev: Arc<DevFuse>,
    /// (entry, its buffers with the reply written in them), to be committed.
    replies: Mutex<Vec<(usize, Buffers)>>,
    /// Written when a reply is posted: the ring polls it (a completion wakes its leader).
    wake: OwnedFd,
    /// The idle threads' wait: the ring's fd (armed while the ring is free), `stop`.
    watch: OwnedFd,
    /// Written once the queue ended.
    stop: OwnedFd,
    lead: Mutex<Lead>,
    counters: Arc<TransportCounters>,
    /// Keeps the CPUs awake while requests come (`idle_poll.rs`), if on.
    poll: Option<Arc<IdlePoll>>,
    /// Starts one more thread serving the queue (the file system's type erased).
    start_thread: Box<dyn Fn(Arc<Queue>) -> io::Result<()> + Send + Sync>,
}

/// Who leads a queue.
struct Lead {
    /// The ring when no thread holds it: parked by the leading thread while it runs a
    /// handler, and free to take once that handler waits for the server.
    ring: Option<Box<Ring>>,
    /// The leading thread's handler waits for the server: another thread may take the
    /// ring (`watch` is armed).
    free: bool,
    /// Threads waiting on `watch`.
    idle: usize,
    /// Threads started.
    threads: usize,
    /// The queue is over: its threads return.
    ended: bool,
    /// What ended it, for the first thread to return.
    error: Option<io::Error>,
}

thread_local! {
    /// The queue this thread serves (set once, by a queue's thread).
    static QUEUE: RefCell<Option<Arc<Queue>>> = const { RefCell::new(None) };
    /// The queue (its address) whose ring this thread leads while it runs a handler; 0
    /// when none.
    static LEADING: Cell<usize> = const { Cell::new(0) };
    /// The queue whose ring this thread's handler handed over, and the entry (plus one)
    /// of the request it runs: its reply may take the ring back.
    static HANDED_OVER: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

fn address(queue: &Queue) -> usize {
    std::ptr::from_ref(queue) as usize
}

/// This thread's hook before it waits for the server (`crossfs_client::set_before_wait`):
/// if its handler runs on the queue's leading thread, the ring goes to another thread.
fn hand_over() {
    if LEADING.replace(0) == 0 {
        return;
    }
    QUEUE.with(|q| {
        if let Some(queue) = q.borrow().as_ref() {
            queue.hand_over();
        }
    });
}

impl Queue {
    /// Frees the parked ring for another thread: arms `watch`, wakes a thread at once if
    /// work is waiting already, and starts a thread if none is idle.
    fn hand_over(self: &Arc<Self>) {
        self.counters.handed_over.fetch_add(1, Ordering::Relaxed);
        HANDED_OVER.with(|h| h.set((address(self), h.get().1)));
        let start = {
            let mut lead = lock(&self.lead);
            let Some(ring) = lead.ring.as_mut() else {
                return;
            };
            let waiting = !ring.completions.is_empty() || !lock(&self.replies).is_empty();
            // What the leader queued goes in now (commits, the poll of `wake`): no thread
            // may be in the ring to submit it until the next takes it.
            if let Err(e) = ring.uring.submit() {
                tracing::warn!("FUSE over io_uring: queue {}: submitting: {e}", self.qid);
            }
            if let Err(e) = self.arm(&ring.uring, true) {
                tracing::warn!(
                    "FUSE over io_uring: queue {}: arming its watch: {e}",
                    self.qid
                );
                return;
            }
            if waiting {
                // Completions already reaped, or replies posted without a wake-up: the
                // ring's poll of `wake` makes the ring's fd readable.
                let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
            }
            lead.free = true;
            if lead.idle == 0 && lead.threads < MAX_THREADS_PER_QUEUE {
                lead.threads += 1;
                true
            } else {
                false
            }
        };
        if start {
            if let Err(e) = (self.start_thread)(self.clone()) {
                lock(&self.lead).threads -= 1;
                tracing::warn!(
                    "FUSE over io_uring: cannot start a thread for queue {} ({e}): the ring \
                     waits for its handler",
                    self.qid
                );
            }
        }
    }

    /// Arms `watch` for the ring's fd (one-shot), or disarms it.
    fn arm(&self, uring: &Uring, on: bool) -> io::Result<()> {
        use rustix::event::epoll::{modify, EventData, EventFlags};
        let flags = match on {
            true => EventFlags::IN | EventFlags::ONESHOT,
            false => EventFlags::empty(),
        };
        Ok(modify(&self.watch, uring, EventData::new_u64(0), flags)?)
    }

    /// Takes the ring if it is free (disarming `watch`).
    fn take_free(&self, lead: &mut Lead) -> Option<Box<Ring>> {
        if !lead.free {
            return None;
        }
        let ring = lead.ring.take()?;
        lead.free = false;
        let _ = self.arm(&ring.uring, false);
        Some(ring)
    }

    /// Waits until the ring is free (woken when it has work, or at once if it is free
    /// already), and takes it; `None` once the queue ended.
    fn wait_to_lead(&self) -> Option<Box<Ring>> {
        let mut events = Vec::with_capacity(2);
        let mut lead = lock(&self.lead);
        loop {
            if lead.ended {
                return None;
            }
            if let Some(ring) = self.take_free(&mut lead) {
                self.counters.taken_over.fetch_add(1, Ordering::Relaxed);
                return Some(ring);
            }
            lead.idle += 1;
            drop(lead);
            events.clear();
            match rustix::event::epoll::wait(
                &self.watch,
                rustix::buffer::spare_capacity(&mut events),
                None,
            ) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => tracing::warn!("FUSE over io_uring: queue {}: waiting: {e}", self.qid),
            }
            lead = lock(&self.lead);
            lead.idle -= 1;
        }
    }

    /// Ends the queue: every thread returns once it is done, the first with `error`.
    fn end(&self, error: Option<io::Error>) {
        let mut lead = lock(&self.lead);
        lead.ended = true;
        lead.error = error;
        let _ = rustix::io::write(&self.stop, &1u64.to_ne_bytes());
    }

    /// Hands an entry's buffers, its reply written in them, to the leading thread. The
    /// thread that handed the ring over, answering its own request, takes the ring back
    /// if nobody took it, and commits the reply itself once its handler returns.
    fn post(&self, entry: usize, buffers: Buffers) -> io::Result<()> {
        let me = address(self);
        if LEADING.get() != me
            && HANDED_OVER.get() == (me, entry + 1)
            && !crossfs_client::in_completion()
        {
            HANDED_OVER.set((0, entry + 1));
            let mut lead = lock(&self.lead);
            if lead.free {
                if let Some(ring) = lead.ring.as_ref() {
                    let _ = self.arm(&ring.uring, false);
                    lead.free = false;
                    LEADING.set(me);
                }
            }
        }
        lock(&self.replies).push((entry, buffers));
        if LEADING.get() != me {
            rustix::io::write(&self.wake, &1u64.to_ne_bytes())?;
        }
        Ok(())
    }
}

/// One thread of a queue, pinned to its CPU: leads with `ring` if given, else whenever the
/// ring is free, until the queue ends.
fn serve<FS: Filesystem>(
    fs: &FS,
    queue: &Arc<Queue>,
    acl: Acl,
    mut ring: Option<Box<Ring>>,
) -> io::Result<()> {
    let mut cpus = rustix::thread::CpuSet::new();
    cpus.set(usize::from(queue.qid));
    // A CPU that is possible but offline: the thread runs wherever it may.
    let _ = rustix::thread::sched_setaffinity(None, &cpus);
    QUEUE.with(|q| *q.borrow_mut() = Some(queue.clone()));
    crossfs_client::set_before_wait(Some(hand_over));
    queue.counters.ring_threads.fetch_add(1, Ordering::Relaxed);
    let mut request = Vec::new();
    loop {
        let Some(r) = ring.take().or_else(|| queue.wait_to_lead()) else {
            return Ok(());
        };
        if let Some(ended) = lead(fs, queue, r, &mut request, acl) {
            queue.end(ended.err());
            return Ok(());
        }
    }
}

/// Leads `queue` with `ring`: fetches requests, runs their handlers and commits their
/// replies, until a handler waits for the server and another thread takes the ring
/// (`None`) or the queue is over (`Some`: how it ended).
fn lead<FS: Filesystem>(
    fs: &FS,
    queue: &Arc<Queue>,
    mut ring: Box<Ring>,
    request: &mut Vec<u8>,
    acl: Acl,
) -> Option<io::Result<()>> {
    let fd = types::Fd(queue.dev.as_fd().as_raw_fd());
    loop {
        if let Err(e) = ring.commit_replies(queue, fd) {
            return Some(ring.close(Err(e)));
        }
        if ring.is_over() {
            return Some(ring.close(Ok(())));
        }
        let Some((user_data, result)) = ring.completions.pop_front() else {
            match ring.uring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Some(ring.close(Err(e))),
            }
            let Ring {
                uring, completions, ..
            } = &mut *ring;
            completions.extend(uring.completion().map(|c| (c.user_data(), c.result())));
            continue;
        };
        if user_data == WAKE {
            let mut count = [0u8; 8];
            let _ = rustix::io::read(&queue.wake, &mut count);
            if let Err(e) = push(&mut ring.uring, wake_poll(&queue.wake)) {
                return Some(ring.close(Err(e)));
            }
            continue;
        }
        let i = user_data as usize;
        let Some((reply, laid_out)) = ring.take_request(queue, i, result, request) else {
            continue;
        };
        // The ring waits here while the handler runs, for this thread to take it back, or
        // for another to take it if the handler waits for the server (`hand_over`).
        lock(&queue.lead).ring = Some(ring);
        LEADING.set(address(queue));
        HANDED_OVER.set((0, i + 1));
        let unique = reply.unique;
        let sender: ReplySender = reply;
        match laid_out.then(|| abi::decode(request)) {
            Some(Ok(req)) => dispatch::dispatch(fs, &req, &sender, acl),
            Some(Err(err)) => {
                // Not even a header: answer what the entry's header says.
                tracing::warn!("undecodable FUSE request through io_uring: {err}");
                super::reply::send(&*sender, unique, -libc::EIO, &[]);
            }
            None => super::reply::send(&*sender, unique, -libc::EIO, &[]),
        }
        drop(sender);
        HANDED_OVER.set((0, 0));
        if LEADING.replace(0) == 0 {
            // Handed over: back to leading if nobody took the ring meanwhile.
            let mut lead = lock(&queue.lead);
            match queue.take_free(&mut lead) {
                Some(r) => ring = r,
                None => return None,
            }
        } else {
            ring = lock(&queue.lead).ring.take()?;
        }
    }
}

/// A ring entry's two buffers, at fixed addresses: the kernel's from their submission to
/// their completion, then the request's, until its reply is written into them.
struct Buffers {
    header: Box<[u8; HEADER_BUFFER_LEN]>,
    payload: Box<[u8]>,
}

/// One ring entry.
struct Entry {
    /// `None` while a request of it is being answered (its reply holds them).
    buffers: Option<Buffers>,
    /// Where the buffers lie, for REGISTER.
    iov: Box<[libc::iovec; 2]>,
    commit_id: u64,
    /// The kernel holds it (registered, or committed and waiting for a request).
    in_kernel: bool,
}

// SAFETY: the raw pointers in `iov` point into the entry's own boxed buffers (wherever they
// are); an entry moves between threads only with its ring, never shared.
#[allow(unsafe_code)]
unsafe impl Send for Entry {}

impl Entry {
    fn new(payload_len: usize) -> Entry {
        let mut header = Box::new([0u8; HEADER_BUFFER_LEN]);
        let mut payload = vec![0u8; payload_len].into_boxed_slice();
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
            buffers: Some(Buffers { header, payload }),
            iov,
            commit_id: 0,
            in_kernel: false,
        }
    }
}

/// A queue's ring and its entries, held by the thread that leads.
struct Ring {
    /// Dropped before the entries (fields drop in order): the kernel is done with their
    /// buffers once the ring is closed.
    uring: Uring,
    entries: Vec<Entry>,
    /// Completions reaped and not yet handled.
    completions: VecDeque<(u64, i32)>,
    registered: bool,
    /// The replies taken from the queue, reused.
    committing: Vec<(usize, Buffers)>,
}

/// A ring of 128-byte submissions, as FUSE's commands need.
type Uring = IoUring<squeue::Entry128, cqueue::Entry>;

/// `user_data` of the eventfd's poll.
const WAKE: u64 = u64::MAX;

impl Ring {
    /// A ring whose entries and eventfd poll are queued, submitted on the first wait.
    fn new(dev: &DevFuse, qid: u16, wake: &OwnedFd, payload_len: usize) -> io::Result<Box<Ring>> {
        let uring = IoUring::builder().build((ENTRIES_PER_QUEUE * 2 + 2) as u32)?;
        let mut ring = Box::new(Ring {
            uring,
            entries: (0..ENTRIES_PER_QUEUE)
                .map(|_| Entry::new(payload_len))
                .collect(),
            completions: VecDeque::new(),
            registered: false,
            committing: Vec::new(),
        });
        let fd = types::Fd(dev.as_fd().as_raw_fd());
        let Ring { uring, entries, .. } = &mut *ring;
        for (i, e) in entries.iter_mut().enumerate() {
            push(uring, entry_command(fd, ring_abi::CMD_REGISTER, e, i, qid))?;
            e.in_kernel = true;
        }
        push(uring, wake_poll(wake))?;
        Ok(ring)
    }

    /// Every entry completed and none waits for an answer: the connection ended, or the
    /// kernel refused the queue.
    fn is_over(&self) -> bool {
        self.entries
            .iter()
            .all(|e| !e.in_kernel && e.buffers.is_some())
    }

    /// Frees the ring, unless a submission failed with entries in the kernel: their
    /// buffers must then stay where they are, and the ring is leaked.
    fn close(self: Box<Self>, result: io::Result<()>) -> io::Result<()> {
        if result.is_err() && self.entries.iter().any(|e| e.in_kernel) {
            std::mem::forget(self);
        }
        result
    }

    /// The request completion `result` of entry `i` brings, laid out in `request`, and the
    /// reply that answers it (holding the entry's buffers), with whether it was laid out
    /// (else it is answered EIO); `None` for an entry that ended or was refused.
    fn take_request(
        &mut self,
        queue: &Arc<Queue>,
        i: usize,
        result: i32,
        request: &mut Vec<u8>,
    ) -> Option<(Arc<EntryReply>, bool)> {
        let e = self.entries.get_mut(i)?;
        e.in_kernel = false;
        if result < 0 {
            let err = io::Error::from_raw_os_error(-result);
            if self.registered {
                tracing::debug!(
                    "FUSE over io_uring: queue {} entry {i} ended ({err})",
                    queue.qid
                );
            } else {
                tracing::info!(
                    "FUSE over io_uring: queue {} refused ({err}); /dev/fuse serves",
                    queue.qid
                );
            }
            return None;
        }
        if !self.registered {
            self.registered = true;
            queue
                .counters
                .queues_registered
                .fetch_add(1, Ordering::Relaxed);
        }
        queue.counters.io_uring.fetch_add(1, Ordering::Relaxed);
        if let Some(poll) = &queue.poll {
            poll.request();
        }
        let buffers = e.buffers.take()?;
        let unique = u64::from_le_bytes(buffers.header[8..16].try_into().unwrap_or([0; 8]));
        let laid_out = match ring_abi::reassemble(&buffers.header[..], &buffers.payload, request) {
            Ok(commit_id) => {
                e.commit_id = commit_id;
                true
            }
            Err(err) => {
                e.commit_id = ring_abi::ent_in_out(&buffers.header[..]).map_or(0, |(c, _)| c);
                tracing::warn!("FUSE request through io_uring does not fit: {err}");
                false
            }
        };
        let reply = Arc::new(EntryReply {
            queue: queue.clone(),
            entry: i,
            unique,
            buffers: Mutex::new(Some(buffers)),
        });
        Some((reply, laid_out))
    }

    /// Commits the replies posted to the queue, each fetching the entry's next request.
    fn commit_replies(&mut self, queue: &Queue, fd: types::Fd) -> io::Result<()> {
        let mut committing = std::mem::take(&mut self.committing);
        std::mem::swap(&mut *lock(&queue.replies), &mut committing);
        for (i, buffers) in committing.drain(..) {
            let Some(e) = self.entries.get_mut(i).filter(|e| e.buffers.is_none()) else {
                continue;
            };
            e.buffers = Some(buffers);
            push(
                &mut self.uring,
                entry_command(fd, ring_abi::CMD_COMMIT_AND_FETCH, e, i, queue.qid),
            )?;
            e.in_kernel = true;
        }
        self.committing = committing;
        Ok(())
    }
}

/// Where a request fetched through a ring is answered: its entry, whose buffers it holds
/// until the reply is written into them.
struct EntryReply {
    queue: Arc<Queue>,
    entry: usize,
    unique: u64,
    buffers: Mutex<Option<Buffers>>,
}

impl EntryReply {
    /// Writes the reply (`error`, and `body` unless the body already lies in the payload
    /// buffer, `len` bytes) into the entry and posts it; EIO in its place if it does not
    /// fit.
    fn answer(&self, mut buffers: Buffers, error: i32, body: Body<'_>) -> io::Result<()> {
        let Buffers { header, payload } = &mut buffers;
        let fits = match body {
            Body::Pieces(pieces) => {
                ring_abi::put_reply(&mut header[..], payload, self.unique, error, pieces)
            }
            Body::InPayload(len) => {
                ring_abi::put_reply_header(&mut header[..], self.unique, error, len)
            }
        };
        if !fits {
            tracing::warn!(
                "FUSE reply to {} does not fit its ring entry: EIO",
                self.unique
            );
            ring_abi::put_reply_header(&mut header[..], self.unique, -libc::EIO, 0);
        }
        self.queue.post(self.entry, buffers)
    }
}

/// A reply's body: in pieces to copy, or already in the payload buffer.
enum Body<'a> {
    Pieces(&'a [&'a [u8]]),
    InPayload(usize),
}

impl Channel for EntryReply {
    fn send(&self, message: &[IoSlice<'_>]) -> io::Result<()> {
        let Some(buffers) = lock(&self.buffers).take() else {
            return Err(io::Error::other("a ring entry's request answered twice"));
        };
        // The message as `super::reply::send` makes it: the out header, then the body.
        let flat;
        let (header, rest): (&[u8], &[IoSlice<'_>]) = match message.split_first() {
            Some((h, rest)) if h.len() >= abi::OUT_HEADER_LEN => (h, rest),
            _ => {
                flat = message
                    .iter()
                    .flat_map(|s| s.iter().copied())
                    .collect::<Vec<u8>>();
                (&flat[..], &[])
            }
        };
        let Some(error) = header.get(4..8) else {
            return self.answer(buffers, -libc::EIO, Body::Pieces(&[]));
        };
        let error = i32::from_le_bytes([error[0], error[1], error[2], error[3]]);
        let mut pieces: Vec<&[u8]> = Vec::with_capacity(1 + rest.len());
        pieces.push(&header[abi::OUT_HEADER_LEN..]);
        pieces.extend(rest.iter().map(|s| &s[..]));
        self.answer(buffers, error, Body::Pieces(&pieces))
    }

    fn send_payload(&self, _unique: u64, payload: &mut Payload<'_>) -> Option<io::Result<usize>> {
        let mut slot = lock(&self.buffers);
        let len = payload.len();
        if slot.as_ref()?.payload.len() < len {
            return None;
        }
        let mut buffers = slot.take()?;
        drop(slot);
        let read = payload.read_exact(&mut buffers.payload[..len]);
        let posted = match &read {
            Ok(()) => self.answer(buffers, 0, Body::InPayload(len)),
            Err(_) => self.answer(buffers, -libc::EIO, Body::Pieces(&[])),
        };
        Some(read.and(posted).map(|()| len))
    }
}

impl Drop for EntryReply {
    fn drop(&mut self) {
        // A request left without a reply (none of the kernel's ring requests is one):
        // its entry must still come back.
        if let Some(buffers) = lock(&self.buffers).take() {
            tracing::warn!(
                "FUSE request {} through io_uring unanswered: EIO",
                self.unique
            );
            let _ = self.answer(buffers, -libc::EIO, Body::Pieces(&[]));
        }
    }
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
    // its completion: a ring and its entries are freed only once none is in the kernel (or
    // leaked), an entry's buffers are moved, never freed, while it is answered, and the
    // eventfd outlives the ring (the poll reads no memory).
    unsafe { ring.submission().push(&sqe) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))
}
