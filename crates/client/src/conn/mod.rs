//! One connection's shared state, and who reads its replies.
//!
//! Callers take a tag (waiting on a condition variable when all are in flight), write their
//! frame under the writer lock, and return or wait. Replies are read by one thread at a
//! time, the *leader*, which frees each reply's tag (handing it straight to a request queued
//! from a completion, if any) and runs its completion.
//!
//! Who leads (leader/follower): a blocking call whose request is written reads the socket
//! itself when nobody else is, until its own reply is in; the kernel then wakes exactly the
//! thread that waits for the reply, instead of waking a reader thread that wakes the caller
//! (one thread hand-off per call instead of two). A blocking caller that finds a leader
//! sleeps as a *follower*; a leader leaving while replies are still due promotes the
//! follower if exactly one waits, else wakes the reader thread. The reader thread leads
//! while only asynchronous requests come (staying in its read when idle, so each reply
//! wakes just it) or while several callers wait, and steps aside for a lone caller. Completions
//! therefore run on whichever thread leads; they must not block on this connection.
//!
//! A thread reading replies never writes: requests its completions make go to the sender
//! thread (`outbox`). Were it to block in a write, a server that stops reading requests
//! until its replies are read would wait for it forever.
//!
//! When anything breaks the stream, [`Connection::kill`] fails every pending and queued request
//! once, and every later one at once.

mod write;

use crate::lock;
use std::cell::Cell;
use std::collections::VecDeque;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};
use write::Writer;

use crossfs_wire::{
    check_frame_size, decode_rframe, message_name, Fid, LatencyHistograms, MessageCounters,
    Rmessage, Rread, Tag, HEADER_LEN, IOHDRSZ, NOTAG, RREAD_HEADER_LEN,
};

use crate::fids::FidPool;
use crate::payload::Payload;
use crate::request::{Completion, Reply, Request, Waiter};
use crate::tags::TagTable;
use crate::{ClientConfig, ClientError, MsizeNegotiation};

thread_local! {
    /// The connection (a `Connection`'s address) this thread is reading replies for, 0 if none:
    /// completions run there and must not block on that connection.
    static LEADING: Cell<usize> = const { Cell::new(0) };
}

/// True on a thread running completions for any connection: it must not wait for one.
pub(crate) fn dispatching_any() -> bool {
    LEADING.with(Cell::get) != 0
}

/// Buffer between the socket and the reader. Small frames (most replies) are read from it;
/// large Rread payloads bypass it and land in their own Vec.
pub(crate) const READ_BUFFER: usize = 64 * 1024;

/// The socket's read half, held by the leader while it reads.
pub(crate) type Source = BufReader<Box<dyn Read + Send>>;

struct ReadSide {
    source: Source,
    /// The socket `source` reads, where the transport gave one: payloads handed to their
    /// callers in the stream ([`crate::Payload`]) may be spliced from it.
    socket: Option<OwnedFd>,
    /// Frame buffer, reused for every reply that is not a raw Rread.
    buf: Vec<u8>,
}

/// The state every thread using the connection shares.
pub(crate) struct Connection {
    state: Mutex<State>,
    /// Signalled when a tag comes free or the connection dies.
    tag_freed: Condvar,
    /// Wakes the reader thread: replies are due and nobody is reading, or the connection died.
    reader_wanted: Condvar,
    writer: Mutex<Writer>,
    /// Taken (`None`) once the connection is dead.
    read_side: Mutex<Option<ReadSide>>,
    /// Blocking callers sleeping as followers (a copy of `State::followers.len()` the
    /// leader can read between replies without the lock).
    followers_waiting: AtomicUsize,
    /// Connection with the connections that replace this one (see `redial.rs`).
    pub(crate) counters: Arc<MessageCounters>,
    /// Shared likewise: from a request written to its reply read, per request type.
    pub(crate) latency: Arc<LatencyHistograms>,
    /// Shared likewise: write data by path.
    pub(crate) data: Arc<WriteDataCounters>,
    /// When each tag's request began to be written, in ns since `epoch` (an atomic per tag,
    /// so timing takes no lock): set by `send`, read with the reply.
    sent_at: Box<[AtomicU64]>,
    epoch: Instant,
    /// Connection likewise: fid numbers outlive a connection.
    pub(crate) fids: Arc<FidPool>,
    pub(crate) negotiation: MsizeNegotiation,
    /// Closes the transport so a blocked reader wakes up; run once, when the connection dies.
    closer: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Run when the connection dies unexpectedly (the server or the stream failed).
    on_loss: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Requests made on a thread reading replies (from completions), written by the sender
    /// thread instead: a reader blocked in a write would wait forever on a server that
    /// stops reading requests until its replies are read.
    outbox: Mutex<VecDeque<(Tag, Request<'static>)>>,
    outbox_ready: Condvar,
    /// Requests held until the next write, in order (see `crate::held`).
    held: Mutex<VecDeque<(Tag, Request<'static>)>>,
}

/// What a connection counts and times, shared with the connections that replace it.
#[derive(Clone, Default)]
pub(crate) struct Meters {
    pub counters: Arc<MessageCounters>,
    pub latency: Arc<LatencyHistograms>,
    pub data: Arc<WriteDataCounters>,
}

/// Bytes of write data sent, by the path they took out of the client, over a client's
/// connections (see [`crate::Client::write_data`]).
#[derive(Default)]
pub(crate) struct WriteDataCounters {
    from_caller: AtomicU64,
    copied: AtomicU64,
}

impl WriteDataCounters {
    fn count(&self, borrowed: bool, bytes: usize) {
        let c = if borrowed {
            &self.from_caller
        } else {
            &self.copied
        };
        c.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> crate::WriteData {
        crate::WriteData {
            from_caller: self.from_caller.load(Ordering::Relaxed),
            copied: self.copied.load(Ordering::Relaxed),
        }
    }
}

struct State {
    tags: TagTable<Pending>,
    /// Why the connection died; once set, never cleared.
    closed: Option<String>,
    /// Requests made from a completion while every tag was taken. The leader cannot wait
    /// for a tag (only it frees them), so the request queues here and takes the next tag
    /// the leader frees.
    deferred: VecDeque<Deferred>,
    /// Some thread reads replies (or has been told to).
    leader: bool,
    /// Blocking callers waiting for a reply someone else reads, oldest first.
    followers: VecDeque<Arc<Waiter>>,
}

/// An in-flight request.
struct Pending {
    req_ty: u8,
    /// Returned to the pool when the reply arrives (Tclunk, Tremove: the server forgets the
    /// fid whatever the outcome).
    release_fid: Option<Fid>,
    completion: Completion,
}

struct Deferred {
    request: Request<'static>,
    pending: Pending,
}

fn name(ty: u8) -> &'static str {
    message_name(ty).unwrap_or("unknown message")
}

impl Connection {
    pub(crate) fn new(
        config: &ClientConfig,
        (source, socket): (Source, Option<OwnedFd>),
        writer: Box<dyn Write + Send>,
        meters: Meters,
        negotiation: MsizeNegotiation,
        closer: Box<dyn FnOnce() + Send>,
        fids: Arc<FidPool>,
    ) -> Arc<Connection> {
        Arc::new(Connection {
            state: Mutex::new(State {
                tags: TagTable::new(config.max_in_flight),
                closed: None,
                deferred: VecDeque::new(),
                leader: false,
                followers: VecDeque::new(),
            }),
            tag_freed: Condvar::new(),
            reader_wanted: Condvar::new(),
            writer: Mutex::new(Writer {
                sink: writer,
                buf: Vec::new(),
            }),
            read_side: Mutex::new(Some(ReadSide {
                source,
                socket,
                buf: Vec::new(),
            })),
            followers_waiting: AtomicUsize::new(0),
            counters: meters.counters,
            latency: meters.latency,
            data: meters.data,
            // As many as the tag table has slots.
            sent_at: (0..config.max_in_flight.clamp(1, NOTAG.0))
                .map(|_| AtomicU64::new(0))
                .collect(),
            epoch: Instant::now(),
            fids,
            negotiation,
            closer: Mutex::new(Some(closer)),
            on_loss: OnceLock::new(),
            outbox: Mutex::new(VecDeque::new()),
            outbox_ready: Condvar::new(),
            held: Mutex::new(VecDeque::new()),
        })
    }

    /// Sets what runs when the connection dies unexpectedly (once; later calls are ignored).
    pub(crate) fn set_loss_hook(&self, hook: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_loss.set(hook);
    }

    pub(crate) fn is_connected(&self) -> bool {
        lock(&self.state).closed.is_none()
    }

    pub(crate) fn in_flight(&self) -> usize {
        lock(&self.state).tags.in_flight()
    }

    fn id(&self) -> usize {
        self as *const Connection as usize
    }

    /// True on a thread running completions for this connection (it reads its replies).
    pub(crate) fn is_dispatching(&self) -> bool {
        LEADING.with(Cell::get) == self.id()
    }

    /// Waits for the replies of a blocking call whose requests were submitted with
    /// [`Completion::Wake`]s for `waiter`, reading the socket itself whenever nobody else
    /// does.
    pub(crate) fn wait(&self, waiter: &Arc<Waiter>) -> Vec<Result<Reply, ClientError>> {
        if !waiter.is_done() {
            crate::before_wait();
        }
        while !waiter.is_done() {
            let mut state = lock(&self.state);
            if waiter.is_done() {
                break;
            }
            if state.closed.is_some() {
                // `kill` is failing every pending request, this one included.
                drop(state);
                waiter.park();
                continue;
            }
            if !state.leader {
                state.leader = true;
                drop(state);
                self.lead(|_| waiter.is_done());
                continue;
            }
            state.followers.push_back(waiter.clone());
            self.followers_waiting.fetch_add(1, Ordering::Relaxed);
            drop(state);
            waiter.park();
            // Promotion happens under the state lock, with the waiter taken off the queue:
            // a waiter no longer queued has been promoted (perhaps after its reply came in)
            // and must lead, or pass the lead on, before anything else.
            let promoted = {
                let mut state = lock(&self.state);
                match state.followers.iter().position(|f| Arc::ptr_eq(f, waiter)) {
                    Some(i) => {
                        state.followers.remove(i);
                        self.followers_waiting.fetch_sub(1, Ordering::Relaxed);
                        false
                    }
                    None => true,
                }
            };
            if promoted {
                waiter.take_lead();
                self.lead(|_| waiter.is_done());
            }
        }
        waiter.take_replies()
    }

    /// Reads and finishes replies until `stop` says enough (checked before each read, and
    /// told whether the reply just finished woke a blocking caller), then gives up the lead.
    /// The caller has set `State::leader`.
    fn lead(&self, stop: impl Fn(bool) -> bool) {
        {
            let mut side = lock(&self.read_side);
            if let Some(ReadSide {
                source,
                socket,
                buf,
            }) = side.as_mut()
            {
                let outer = LEADING.with(|l| l.replace(self.id()));
                let mut woke = false;
                while !stop(woke) {
                    // A panicking completion must not leave callers waiting forever.
                    let read = panic::catch_unwind(AssertUnwindSafe(|| {
                        self.read_reply(source, socket.as_ref().map(AsFd::as_fd), buf)
                    }));
                    let reason = match read {
                        Ok(Ok(blocking)) => {
                            woke = blocking;
                            continue;
                        }
                        Ok(Err(reason)) => reason,
                        Err(_) => "a completion panicked".to_string(),
                    };
                    // A no-op when the client itself closed the connection first.
                    self.kill(reason, true);
                    break;
                }
                LEADING.with(|l| l.set(outer));
            }
            if !self.is_connected() {
                // Close our half of the stream, for transports whose reader closes on drop.
                side.take();
            }
        }
        self.hand_off();
    }

    /// Gives up the lead: to the oldest follower still waiting if replies are due, else to
    /// the reader thread if replies are due, else to nobody.
    fn hand_off(&self) {
        let mut state = lock(&self.state);
        state.leader = false;
        if state.closed.is_some() || state.tags.in_flight() == 0 {
            return;
        }
        // One caller waiting: it reads its own reply. Several: the reader thread reads for
        // all of them (it wakes each once, and no lead changes hands per call).
        let mut waiting = state.followers.iter().filter(|f| !f.is_done());
        if let (Some(_), None) = (waiting.next(), waiting.next()) {
            if let Some(i) = state.followers.iter().position(|f| !f.is_done()) {
                if let Some(next) = state.followers.remove(i) {
                    self.followers_waiting.fetch_sub(1, Ordering::Relaxed);
                    state.leader = true;
                    next.promote();
                    return;
                }
            }
        }
        self.reader_wanted.notify_one();
    }

    /// What the reader thread checks between replies: it keeps reading, idle or not (an
    /// asynchronous request's reply then wakes only it), until exactly one blocking caller
    /// waits, or it has just woken one and no other waits: a lone caller had better read its
    /// own replies from now on. While several wait, it reads for them all.
    fn reader_may_stop(&self, woke_blocking: bool) -> bool {
        if self.followers_waiting.load(Ordering::Relaxed) == 0 {
            return woke_blocking;
        }
        // Callers are waiting: step aside only for a lone one.
        let state = lock(&self.state);
        let mut waiting = state.followers.iter().filter(|f| !f.is_done());
        matches!((waiting.next(), waiting.next()), (Some(_), None))
            || (woke_blocking && state.followers.iter().all(|f| f.is_done()))
    }
}

/// Starts the reader thread, which reads replies while only asynchronous requests wait,
/// and, given a duplicate of the socket, the thread that notices a hang-up while idle.
pub(crate) fn start_threads(shared: &Arc<Connection>, hangup: Option<OwnedFd>) -> io::Result<()> {
    let reader = shared.clone();
    thread::Builder::new()
        .name("9p-reader".into())
        .spawn(move || reader_thread(&reader))?;
    let sender = shared.clone();
    thread::Builder::new()
        .name("9p-sender".into())
        .spawn(move || sender_thread(&sender))?;
    if let Some(fd) = hangup {
        let shared = Arc::downgrade(shared);
        thread::Builder::new()
            .name("9p-hangup".into())
            .spawn(move || hangup_thread(&shared, &fd))?;
    }
    Ok(())
}

/// Waits for the server to hang up. While requests are in flight, whoever reads their
/// replies meets the end of the stream after the last reply sent; when none are, nobody
/// reads, and without this the loss would show only when the next request fails.
fn hangup_thread(shared: &std::sync::Weak<Connection>, fd: &OwnedFd) {
    use rustix::event::{poll, PollFd, PollFlags};
    let hung_up = PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR;
    loop {
        let mut fds = [PollFd::new(fd, PollFlags::RDHUP)];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        if !fds[0].revents().intersects(hung_up) {
            continue;
        }
        if let Some(shared) = shared.upgrade() {
            if shared.is_connected() && shared.in_flight() == 0 {
                shared.kill("the server closed the connection".into(), true);
            }
        }
        return;
    }
}

/// The sender thread: writes the requests completions made, until the connection dies.
fn sender_thread(shared: &Connection) {
    loop {
        let (tag, request) = {
            let mut outbox = lock(&shared.outbox);
            loop {
                if !shared.is_connected() {
                    return;
                }
                if let Some(next) = outbox.pop_front() {
                    break next;
                }
                outbox = shared
                    .outbox_ready
                    .wait(outbox)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        shared.send(tag, &request);
    }
}

/// An Rlerror code as an errno the kernel will take as a failure.
pub(crate) fn sane_errno(ecode: u32) -> i32 {
    match i32::try_from(ecode) {
        // 0 would read as success to FUSE.
        Ok(e) if e > 0 => e,
        _ => libc::EIO,
    }
}

/// The reader thread: leads whenever replies are due and nobody reads them, until the
/// connection is closed.
fn reader_thread(shared: &Connection) {
    loop {
        {
            let mut state = lock(&shared.state);
            loop {
                if state.closed.is_some() {
                    return;
                }
                if !state.leader && state.tags.in_flight() > 0 {
                    state.leader = true;
                    break;
                }
                state = shared
                    .reader_wanted
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
        shared.lead(|woke| shared.reader_may_stop(woke));
    }
}

impl Connection {
    /// Takes a tag for `request`, writes it, and arranges for `completion` to run.
    pub(crate) fn submit(
        self: &Arc<Self>,
        request: Request<'_>,
        release_fid: Option<Fid>,
        completion: Completion,
    ) {
        let max_io = u64::from(self.negotiation.effective) - IOHDRSZ as u64;
        if let Some(size) = request.io_size().filter(|&n| n > max_io) {
            return completion.fail(ClientError::TooLarge { size, max: max_io });
        }
        let mut pending = Pending {
            req_ty: request.msg_type(),
            release_fid,
            completion,
        };
        // A blocking caller reads its own reply if nobody else is reading; anything else
        // needs the reader thread then.
        let caller_reads = matches!(pending.completion, Completion::Wake { .. });
        let tag = {
            let mut state = lock(&self.state);
            loop {
                if let Some(reason) = &state.closed {
                    let err = ClientError::Disconnected(reason.clone());
                    drop(state);
                    return pending.completion.fail(err);
                }
                match state.tags.insert(pending) {
                    Ok(tag) => {
                        if !state.leader && !caller_reads {
                            self.reader_wanted.notify_one();
                        }
                        break tag;
                    }
                    Err(p) => pending = p,
                }
                if self.is_dispatching() {
                    let request = request.into_owned();
                    state.deferred.push_back(Deferred { request, pending });
                    return;
                }
                if self.has_held() {
                    // Some of the tags are requests held (perhaps this thread's): written,
                    // they free their tags as they are answered.
                    drop(state);
                    self.write_held();
                    state = lock(&self.state);
                    continue;
                }
                crate::before_wait::run_hook();
                state = self
                    .tag_freed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        if self.is_dispatching() {
            self.send_later(tag, request.into_owned());
        } else if !caller_reads && matches!(request, Request::Msg(_)) && crate::held::hold_on(self)
        {
            self.hold(tag, request.into_owned());
        } else {
            self.send(tag, &request);
        }
    }

    /// Hands `request` (under `tag`, whose slot is filled) to the sender thread.
    fn send_later(&self, tag: Tag, request: Request<'static>) {
        lock(&self.outbox).push_back((tag, request));
        self.outbox_ready.notify_one();
    }

    /// Now, in ns since the connection's epoch (what `sent_at` holds).
    fn since_epoch(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Removes the request under `tag`, frees its fid if it had one to free, and hands the
    /// tag on to a deferred request (sent here) or to a waiting caller.
    fn take(&self, tag: Tag) -> Option<Pending> {
        let (pending, next) = {
            let mut state = lock(&self.state);
            let pending = state.tags.take(tag)?;
            let next = match state.deferred.pop_front() {
                Some(d) => {
                    state.tags.reuse(tag, d.pending);
                    Some(d.request)
                }
                None => {
                    self.tag_freed.notify_one();
                    None
                }
            };
            (pending, next)
        };
        if let Some(fid) = pending.release_fid {
            self.fids.release(fid);
        }
        if let Some(request) = next {
            // `take` runs on a thread reading replies, which must not block in a write.
            self.send_later(tag, request);
        }
        Some(pending)
    }

    /// Reads one reply and finishes its request; `Ok(true)` if that woke a blocking caller.
    /// `Err` means the connection is unusable.
    fn read_reply(
        &self,
        r: &mut Source,
        socket: Option<BorrowedFd<'_>>,
        buf: &mut Vec<u8>,
    ) -> Result<bool, String> {
        let mut head = [0u8; HEADER_LEN];
        match r.read_exact(&mut head[..4]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err("the server closed the connection".into())
            }
            Err(e) => return Err(format!("reading a reply: {e}")),
        }
        let size = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let msize = self.negotiation.effective;
        // Linux's rule: a reply as large as msize is already too large.
        if size >= msize {
            return Err(format!("reply of {size} bytes with msize {msize}"));
        }
        let len = check_frame_size(size, msize).map_err(|e| format!("bad reply frame: {e}"))?;
        read_all(r, &mut head[4..])?;
        let ty = head[4];
        let tag = Tag(u16::from_le_bytes([head[5], head[6]]));

        let (raw_read, in_stream) = {
            let state = lock(&self.state);
            if state.closed.is_some() {
                return Err("closed".into());
            }
            match state.tags.get(tag) {
                None => return Err(format!("{} with unknown tag {}", name(ty), tag.0)),
                Some(p) => (
                    ty == Rread::TYPE && p.completion.wants_data(),
                    ty == Rread::TYPE && p.completion.wants_payload(),
                ),
            }
        };
        let count = if raw_read || in_stream {
            if len < RREAD_HEADER_LEN {
                return Err(format!("Rread frame of {len} bytes"));
            }
            let mut count = [0u8; 4];
            read_all(r, &mut count)?;
            let count = u32::from_le_bytes(count) as usize;
            if count != len - RREAD_HEADER_LEN {
                return Err(format!("Rread of {count} bytes in a {len}-byte frame"));
            }
            count
        } else {
            0
        };
        if in_stream {
            return self.hand_payload((ty, tag, len), Payload::new(r, socket, count));
        }
        let reply = if raw_read {
            // Read the payload straight into the Vec the caller will own: no second copy.
            let mut data = Vec::with_capacity(count);
            r.by_ref()
                .take(count as u64)
                .read_to_end(&mut data)
                .map_err(|e| format!("reading a reply: {e}"))?;
            if data.len() != count {
                return Err("the server closed the connection mid-reply".into());
            }
            Ok(Reply::Data(data))
        } else {
            buf.clear();
            buf.extend_from_slice(&head);
            buf.resize(len, 0);
            read_all(r, &mut buf[HEADER_LEN..])?;
            // The frame was read whole, so the stream is still in step: a body that does not
            // decode fails this request only.
            decode_rframe(buf)
                .map(|f| Reply::Msg(f.msg))
                .map_err(|e| ClientError::Protocol(format!("{}: {e}", name(ty))))
        };

        let pending = self.take_answered((ty, tag, len))?;
        let reply = reply.and_then(|reply| match reply {
            Reply::Msg(Rmessage::Lerror(e)) => {
                self.counters.record_error(pending.req_ty);
                Err(ClientError::Errno(sane_errno(e.ecode)))
            }
            Reply::Msg(m) if m.msg_type() != pending.req_ty.wrapping_add(1) => {
                Err(ClientError::Protocol(format!(
                    "{} answered with {}",
                    name(pending.req_ty),
                    m.name()
                )))
            }
            reply => Ok(reply),
        });
        let blocking = matches!(pending.completion, Completion::Wake { .. });
        pending.completion.finish(reply);
        Ok(blocking)
    }

    /// The request under `tag`, whose reply of type `ty` and `len` bytes is in: its
    /// latency recorded (timed before `take` hands the tag and its `sent_at` on) and the
    /// reply counted, after the tag and fid are free, so that a caller that sees the count
    /// can rely on both (tests do). `Err` if the connection was closed meanwhile and the
    /// request already failed.
    fn take_answered(&self, (ty, tag, len): (u8, Tag, usize)) -> Result<Pending, String> {
        let arrived = self.since_epoch();
        let sent = self
            .sent_at
            .get(tag.0 as usize)
            .map(|s| s.load(Ordering::Relaxed));
        let pending = self.take(tag).ok_or("closed")?;
        if let Some(sent) = sent {
            let elapsed = Duration::from_nanos(arrived.saturating_sub(sent));
            self.latency.record(pending.req_ty, elapsed);
        }
        self.counters.record(ty, len);
        Ok(pending)
    }

    /// Finishes the request under `tag` with its Rread's payload still in the stream
    /// (`Completion::Payload`), then discards whatever the caller left of it.
    fn hand_payload(
        &self,
        (ty, tag, len): (u8, Tag, usize),
        mut payload: Payload<'_>,
    ) -> Result<bool, String> {
        let pending = self.take_answered((ty, tag, len))?;
        if pending.req_ty != Rread::TYPE - 1 {
            // A reply to something else: its caller wants no payload.
            let err =
                ClientError::Protocol(format!("{} answered with Rread", name(pending.req_ty)));
            pending.completion.fail(err);
        } else {
            pending.completion.finish_payload(&mut payload);
        }
        payload.finish().map(|()| false)
    }

    /// Marks the connection dead and fails everything pending. Only the first call acts, so
    /// the loss is logged once.
    pub(crate) fn kill(&self, reason: String, unexpected: bool) {
        let (pending, deferred) = {
            let mut state = lock(&self.state);
            if state.closed.is_some() {
                return;
            }
            state.closed = Some(reason.clone());
            (state.tags.drain(), std::mem::take(&mut state.deferred))
        };
        self.tag_freed.notify_all();
        self.reader_wanted.notify_all();
        // Under the outbox lock, so the sender either sees `closed` or is waiting for this.
        lock(&self.outbox).clear();
        self.outbox_ready.notify_all();
        // Their tags were drained above: their callers are told the connection died.
        lock(&self.held).clear();
        if unexpected {
            tracing::error!(reason = %reason, pending = pending.len(), "9P connection lost");
        } else {
            tracing::info!(reason = %reason, pending = pending.len(), "9P connection closed");
        }
        let closer = lock(&self.closer).take();
        if let Some(close) = closer {
            close();
        }
        // Drop our half of the stream too, for transports whose writer closes on drop. Only
        // if no caller is mid-write: the closer is what unblocks such a writer, and this
        // thread must not wait for it.
        if let Ok(mut writer) = self.writer.try_lock() {
            writer.sink = Box::new(io::sink());
            writer.buf = Vec::new();
        }
        // Likewise the read half, unless a leader is reading it (it drops it on leaving).
        if let Ok(mut side) = self.read_side.try_lock() {
            side.take();
        }
        let pending = pending
            .into_iter()
            .chain(deferred.into_iter().map(|d| d.pending));
        for p in pending {
            p.completion.fail(ClientError::Disconnected(reason.clone()));
        }
        if unexpected {
            if let Some(hook) = self.on_loss.get() {
                hook();
            }
        }
    }
}

/// `read_exact`, with an early end of stream told apart from other failures.
fn read_all<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<(), String> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => "the server closed the connection mid-reply".into(),
        _ => format!("reading a reply: {e}"),
    })
}
