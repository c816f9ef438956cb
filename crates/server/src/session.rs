//! One connection: a reader, a bounded pool of workers, and one writer lock.
//!
//! The calling thread reads frames (through a buffer, so a small request costs one `read`).
//! Tversion and Tflush are handled by the reader itself, and so are requests that cannot
//! block for long (see [`crate::ops::runs_inline`]: walks, getattr, clunk, opening a
//! regular file, setattr, small writes into the page cache, readdir, removing anything but
//! a large file, ...): the reader executes them and writes the reply before reading on,
//! which spares two thread hand-offs per request, the bulk of a round trip's cost. Every
//! other request (read, create, large or synchronous writes, fsync, opening a fifo, ...)
//! is recorded in the
//! in-flight table under its tag and queued for the workers, so a request that blocks (a
//! fifo with no writer, a slow disk) never holds up the connection's other requests. When
//! `max_in_flight` requests, or `max_buffered_bytes` of them, are queued or running on
//! workers, the reader stops reading, so a client that sends faster than it is served (or
//! never reads its replies, leaving the writer blocked) is held back by the socket, and
//! memory stays bounded: at most `max_buffered_bytes` of queued requests (or one request,
//! if larger) plus the one the reader holds, each at most msize.
//!
//! A Tread of a regular file whose pages the page cache holds (`cachestat(2)`) is answered on
//! the reader too, its data spliced from the file into the socket (`crate::splice`); where
//! the pages are not all cached, a worker splices them (it may wait for the disk); where
//! splicing is off or impossible, the reader copies what a no-wait read gets, and a worker
//! the rest.
//!
//! A Twrite or Twriteattr is read apart from its data: its 23-byte head first, then its
//! payload, either into a buffer of its own (so it is neither read into the frame buffer nor
//! copied again in decoding) or, for a payload over 64 KiB to a file that takes a splice,
//! spliced from the socket into pipes, which a worker splices into the file
//! (`crate::piped`). The reader waits for room under `max_buffered_bytes` before it takes
//! such a payload off the socket, and never waits for the file.
//!
//! Ordering rules, and how they hold:
//! - Replies never interleave: a reply is written whole while holding the writer lock.
//! - A request run by the reader is never in the in-flight table, and nothing is read while
//!   it runs: no Tflush can name it before its reply is written, after which the tag is free
//!   (a Tflush for it is then answered at once). Its tag is still checked against the table.
//! - Rflush follows the flushed reply: a request leaves the in-flight table only while its
//!   worker holds the writer lock, and that worker then writes its reply and the Rflush of
//!   every Tflush that named it. A Tflush for a tag no longer in flight is answered at once,
//!   but only after taking the writer lock, hence after the reply written under it.
//! - A flushed request that had not started is dropped unanswered; its Rflush is still sent.
//! - A tag becomes free (in the table) no earlier than its reply is on the wire, so a client
//!   that reuses a tag as soon as it has the reply is never mistaken for a duplicate.
//! - A request whose tag is already in flight is a protocol violation: the connection is
//!   closed, since any reply would be ambiguous.

use std::collections::VecDeque;
use std::hash::RandomState;
use std::io::{BufReader, ErrorKind, Read, Write};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crossfs_wire::{
    check_frame_size, decode_tframe, DecodeError, Rflush, Rmessage, Rread, Rversion, Tag, Tframe,
    Tmessage, Tversion, WriteHead, MIN_MSIZE, RREAD_HEADER_LEN, TWRITE_HEADER_LEN,
    VERSION_9P2000_L, VERSION_CROSSFS,
};

use crossfs_export::budget::{ByteBudget, FdAccount};
use crossfs_export::memory::{buffer_bytes, Gauge};

use crate::fid::{lock, FidTable};
use crate::piped::{PipePool, PipedPayload};
use crate::server::Server;
use crate::sink::{ReplySink, RequestSource};
use crate::splice::{Pipe, SinkKind};
use crate::stats::ConnStats;

mod spliced;

pub(crate) use spliced::ReadInto;
use spliced::ReaderPipe;

/// What the request handlers see of a connection.
pub(crate) struct Conn {
    pub server: Arc<Server>,
    pub stats: Arc<ConnStats>,
    pub fids: Arc<FidTable>,
    /// This connection's share of the server's descriptors.
    pub fds: Arc<FdAccount>,
    /// What this connection's xattr fids may hold.
    pub xattr_bytes: Arc<ByteBudget>,
    /// What this connection's changes left of the files they changed, for its changes
    /// sent behind.
    pub own: crate::ops::OwnChanges,
    /// The negotiated msize; 0 until a Tversion succeeds.
    msize: AtomicU32,
}

impl Conn {
    /// The negotiated msize (every reply must be strictly smaller).
    pub(crate) fn msize(&self) -> u32 {
        self.msize.load(Relaxed)
    }

    /// The iounit advertised by Rlopen/Rlcreate: what Linux asks per read or write anyway.
    pub(crate) fn iounit(&self) -> u32 {
        self.msize().saturating_sub(crossfs_wire::IOHDRSZ as u32)
    }
}

/// A request waiting for or under execution.
struct Entry {
    /// Flushed before a worker took it: drop it unanswered.
    cancelled: bool,
    /// A worker has taken it (or it is a Tflush waiting for its target).
    started: bool,
    /// Tags of Tflush requests waiting for this one, in arrival order.
    flushers: Vec<Tag>,
}

struct Job {
    tag: Tag,
    msg_type: u8,
    work: Work,
    /// The frame's size, counted against `max_buffered_bytes` until the job is retired.
    len: usize,
    /// When its frame had been read.
    received: Instant,
}

/// What a worker is to run.
enum Work {
    /// A decoded request.
    Msg(Result<Tmessage, DecodeError>),
    /// A Twrite or Twriteattr whose data waits in pipes (`crate::piped`).
    Piped(PipedWrite),
}

/// A write whose payload the reader spliced into pipes.
pub(crate) struct PipedWrite {
    pub head: WriteHead,
    pub payload: PipedPayload,
}

#[derive(Default)]
struct State {
    /// hashbrown's map (with std's hasher) for `allocation_size`, as the fid table.
    in_flight: hashbrown::HashMap<u16, Entry, RandomState>,
    queue: VecDeque<Job>,
    /// Bytes of the frames of queued and running jobs.
    buffered: usize,
    /// The reader has stopped: workers finish the queue and exit.
    closing: bool,
    /// The reader waits on `reader_wake` (only then is it signalled).
    reader_waiting: bool,
    /// Workers waiting on `worker_wake` (only then is it signalled).
    idle_workers: usize,
}

impl State {
    /// Bytes of the requests queued or running (see [`crate::stats::ConnMemory`]).
    fn bytes(&self) -> usize {
        let flushers: usize = self
            .in_flight
            .values()
            .map(|e| buffer_bytes::<Tag>(e.flushers.capacity()))
            .sum();
        self.in_flight.allocation_size()
            + flushers
            + buffer_bytes::<Job>(self.queue.capacity())
            + self.buffered
    }
}

struct Output {
    writer: Box<dyn ReplySink>,
    /// A write failed: the peer is gone, later replies are dropped.
    broken: bool,
    /// What the writer's descriptor is, when Rread payloads may be spliced into it.
    sink: Option<SinkKind>,
}

/// A reply as a worker hands it over.
enum Answer<'a> {
    /// A whole frame.
    Frame(&'a [u8]),
    /// An Rread whose `count` bytes of data wait in the worker's pipe (dropped if anything
    /// goes wrong, since it may then hold stale bytes).
    Spliced {
        count: usize,
        pipe: &'a mut Option<Pipe>,
    },
}

struct Session {
    conn: Conn,
    state: Mutex<State>,
    /// Signalled when an entry leaves the in-flight table.
    reader_wake: Condvar,
    /// Signalled when a job is queued or the session closes.
    worker_wake: Condvar,
    out: Mutex<Output>,
    /// Rread payloads of regular files may be spliced into the connection (`crate::splice`).
    splicing: bool,
    /// Large Twrite payloads may be spliced out of the connection (`crate::piped`).
    splicing_writes: bool,
    /// The pipes they are spliced into.
    pipes: PipePool,
}

/// Why the reader stopped.
enum Stop {
    /// The peer closed the stream between frames.
    Eof,
    /// The connection must be closed; the reason is logged.
    Close(String),
}

/// Where incoming messages of a type that is no request are counted: a slot no message
/// uses, which the counters name "unknown" (and count as bytes in).
const UNKNOWN_TYPE: u8 = 0;

/// Bytes the reader buffers: a request of up to this size costs one `read` (larger ones are
/// read straight into the frame).
const READ_BUFFER: usize = 64 * 1024;

/// Runs a connection to completion.
pub(crate) fn run(
    server: &Arc<Server>,
    stats: &Arc<ConnStats>,
    reader: impl RequestSource,
    writer: Box<dyn ReplySink>,
) {
    let sink = writer
        .splice_fd()
        .filter(|_| server.config.splice_reads)
        .and_then(SinkKind::of);
    // A socket or pipe read as it is; what else it is shows in the first splice, which then
    // copies instead.
    let splicing_writes =
        server.config.splice_writes && reader.splice_fd().and_then(SinkKind::of).is_some();
    let mut reader = BufReader::with_capacity(READ_BUFFER, reader);
    let mut read_buffer = Gauge::new(&stats.memory.buffers);
    read_buffer.set(reader.capacity());
    let session = Session {
        conn: Conn {
            server: server.clone(),
            stats: stats.clone(),
            fids: stats.fids.clone(),
            fds: stats.fds.clone(),
            xattr_bytes: stats.xattr_bytes.clone(),
            own: Default::default(),
            msize: AtomicU32::new(0),
        },
        state: Mutex::new(State::default()),
        reader_wake: Condvar::new(),
        worker_wake: Condvar::new(),
        out: Mutex::new(Output {
            writer,
            broken: false,
            sink,
        }),
        splicing: sink.is_some(),
        splicing_writes,
        pipes: PipePool::new(server.config.workers_per_connection + 1),
    };
    tracing::debug!(id = stats.id, peer = %stats.peer, "connection opened");
    std::thread::scope(|s| {
        for _ in 0..server.config.workers_per_connection {
            s.spawn(|| session.worker());
        }
        let stop = session.read_loop(&mut reader);
        match stop {
            Stop::Eof => {
                tracing::debug!(id = stats.id, peer = %stats.peer, "connection closed by peer")
            }
            Stop::Close(why) => {
                tracing::warn!(id = stats.id, peer = %stats.peer, "closing connection: {why}")
            }
        }
        session.conn.fids.close_event_streams();
        lock(&session.state).closing = true;
        session.worker_wake.notify_all();
    });
    session.conn.fids.clear();
    stats.memory.requests.store(0, Relaxed);
}

impl Session {
    fn read_loop<S: RequestSource>(&self, reader: &mut BufReader<S>) -> Stop {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        let mut pipe = ReaderPipe {
            pipe: None,
            gauge: Gauge::new(&self.conn.stats.memory.buffers),
        };
        let memory = &self.conn.stats.memory;
        let (mut buf_gauge, mut out_gauge) =
            (Gauge::new(&memory.buffers), Gauge::new(&memory.buffers));
        loop {
            let mut head = [0u8; 4];
            match read_head(reader, &mut head) {
                Ok(true) => {}
                Ok(false) => return Stop::Eof,
                Err(e) => return Stop::Close(format!("reading a frame: {e}")),
            }
            let size = u32::from_le_bytes(head);
            let limit = match self.conn.msize() {
                0 => self.conn.server.config.max_msize,
                m => m,
            };
            // Checked before allocating: the buffer never exceeds the msize in force.
            let len = match check_frame_size(size, limit) {
                Ok(len) => len,
                Err(e) => return Stop::Close(e.to_string()),
            };
            buf.clear();
            buf.extend_from_slice(&head);
            let mut have = head.len();
            // A Twrite's data is read apart from its head: into a buffer of its own, or
            // spliced into pipes (see `take_write`).
            if len >= TWRITE_HEADER_LEN && self.conn.msize() != 0 {
                let mut write_head = [0u8; TWRITE_HEADER_LEN];
                write_head[..4].copy_from_slice(&head);
                if let Err(e) = reader.read_exact(&mut write_head[4..]) {
                    return Stop::Close(format!("truncated frame of {len} bytes: {e}"));
                }
                if let Some(w) = WriteHead::decode(&write_head) {
                    let outs = (&mut out, &mut out_gauge, &mut pipe);
                    match self.take_write(w, reader, outs) {
                        Ok(()) => continue,
                        Err(stop) => return stop,
                    }
                }
                buf.extend_from_slice(&write_head[4..]);
                have = TWRITE_HEADER_LEN;
            }
            buf.resize(len, 0);
            if let Err(e) = reader.read_exact(&mut buf[have..]) {
                return Stop::Close(format!("truncated frame of {len} bytes: {e}"));
            }
            let received = Instant::now();
            buf_gauge.set(buf.capacity());
            let mut frame = match decode_tframe(&buf) {
                Ok(f) => f,
                Err(e) => return Stop::Close(e.to_string()),
            };
            // A type that is no request (a reply's number, say) is counted, with its error,
            // as "unknown", never as the message that number names.
            if Tmessage::name_of(frame.msg_type).is_none() {
                frame.msg_type = UNKNOWN_TYPE;
            }
            self.conn
                .server
                .record(&self.conn.stats, frame.msg_type, len);
            let outs = (&mut out, &mut out_gauge, &mut pipe);
            if let Err(stop) = self.dispatch(frame, len, received, outs) {
                return stop;
            }
        }
    }

    /// Answers the request of `frame`, read at `received`, or queues it for a worker. `out`
    /// is the reader's reply buffer, whose size `out_gauge` reports before each reply goes
    /// out (so a client that has its reply sees the buffer that carried it in the
    /// statistics).
    fn dispatch(
        &self,
        frame: Tframe,
        len: usize,
        received: Instant,
        (out, out_gauge, pipe): (&mut Vec<u8>, &mut Gauge<'_>, &mut ReaderPipe<'_>),
    ) -> Result<(), Stop> {
        let Tframe { tag, msg_type, msg } = frame;
        match msg {
            Ok(Tmessage::Version(v)) => {
                self.version(tag, msg_type, v, received);
                Ok(())
            }
            Ok(Tmessage::Flush(f)) if self.conn.msize() != 0 => self.flush(tag, f.oldtag, received),
            _ if self.conn.msize() == 0 => {
                // Nothing is in flight before negotiation, so answering here keeps the rules.
                let mut out = Vec::new();
                Rmessage::error(libc::EPROTO).encode(tag, &mut out);
                self.write_reply(msg_type, &out, Some(received));
                Ok(())
            }
            Ok(Tmessage::Read(m)) => {
                // Answered on the reader when the page cache has the data; a worker reads
                // otherwise (from the disk, a fifo, or with an error to report).
                self.check_tag(tag)?;
                let started = Instant::now();
                if self.splicing && self.read_spliced_inline((tag, &m), received, out, pipe) {
                    out_gauge.set(out.capacity());
                    return Ok(());
                }
                if crate::ops::read_cached(&self.conn, tag, &m, out) {
                    self.conn
                        .server
                        .latency
                        .exec
                        .record(msg_type, started.elapsed());
                    out_gauge.set(out.capacity());
                    self.write_reply(msg_type, out, Some(received));
                    return Ok(());
                }
                let work = Work::Msg(Ok(Tmessage::Read(m)));
                self.enqueue(Job {
                    tag,
                    msg_type,
                    work,
                    len,
                    received,
                })
            }
            msg if crate::ops::runs_inline(&self.conn, &msg) => {
                self.run_inline(tag, msg_type, msg, received, out, out_gauge)
            }
            msg => self.enqueue(Job {
                tag,
                msg_type,
                work: Work::Msg(msg),
                len,
                received,
            }),
        }
    }

    /// Executes a request on the reader and writes its reply (see the module's rules).
    fn run_inline(
        &self,
        tag: Tag,
        msg_type: u8,
        msg: Result<Tmessage, DecodeError>,
        received: Instant,
        out: &mut Vec<u8>,
        out_gauge: &mut Gauge<'_>,
    ) -> Result<(), Stop> {
        self.check_tag(tag)?;
        self.execute(tag, msg_type, msg, out);
        out_gauge.set(out.capacity());
        self.write_reply(msg_type, out, Some(received));
        Ok(())
    }

    /// Closes the connection if `tag` is in flight (a request the reader answers itself is
    /// never entered in the table, so the check is made here).
    fn check_tag(&self, tag: Tag) -> Result<(), Stop> {
        if lock(&self.state).in_flight.contains_key(&tag.0) {
            return Err(Stop::Close(format!("tag {} reused while in flight", tag.0)));
        }
        Ok(())
    }

    /// Runs one request's handler, leaving its reply in `out` (cleared first), and times it.
    /// A panic in a handler is answered `EIO`: a bug must not leave a tag unanswered.
    fn execute(
        &self,
        tag: Tag,
        msg_type: u8,
        msg: Result<Tmessage, DecodeError>,
        out: &mut Vec<u8>,
    ) {
        self.guarded(tag, msg_type, out, |out| {
            crate::ops::handle(&self.conn, tag, msg_type, msg, out)
        });
    }

    /// As [`Session::execute`], for a write whose payload waits in pipes.
    fn execute_piped(&self, tag: Tag, write: &mut PipedWrite, out: &mut Vec<u8>) {
        let msg_type = write.head.msg_type;
        self.guarded(tag, msg_type, out, |out| {
            crate::ops::handle_piped(&self.conn, tag, write, out)
        });
    }

    /// Runs `handler` into `out` (cleared first), timed, a panic answered `EIO`.
    fn guarded(
        &self,
        tag: Tag,
        msg_type: u8,
        out: &mut Vec<u8>,
        handler: impl FnOnce(&mut Vec<u8>),
    ) {
        out.clear();
        let started = Instant::now();
        let panicked = std::panic::catch_unwind(AssertUnwindSafe(|| handler(&mut *out))).is_err();
        self.conn
            .server
            .latency
            .exec
            .record(msg_type, started.elapsed());
        if panicked {
            tracing::error!(
                id = self.conn.stats.id,
                tag = tag.0,
                "request handler panicked"
            );
            out.clear();
            Rmessage::error(libc::EIO).encode(tag, out);
        }
    }

    /// Tversion: waits for every outstanding request, clunks every fid, then negotiates.
    ///
    /// A client asking for less than [`MIN_MSIZE`] is refused with version "unknown" (its
    /// msize echoed): Linux itself never asks for less and fails a mount given less, so no
    /// client that could work is turned away.
    fn version(&self, tag: Tag, msg_type: u8, v: Tversion, received: Instant) {
        {
            let mut st = lock(&self.state);
            while !st.in_flight.is_empty() {
                st = self.wait_reader(st);
            }
        }
        self.conn.fids.clear();
        let max = self.conn.server.config.max_msize;
        let ok = v.version.starts_with(VERSION_9P2000_L) && v.msize >= MIN_MSIZE;
        // The crossfs extension, if asked for exactly and not switched off; any other
        // version starting with 9P2000.L gets plain 9P2000.L, as before.
        let version = if v.version == VERSION_CROSSFS && self.conn.server.config.extensions {
            VERSION_CROSSFS
        } else {
            VERSION_9P2000_L
        };
        let reply = if ok {
            let msize = v.msize.min(max);
            self.conn.msize.store(msize, Relaxed);
            self.conn.stats.msize.store(msize, Relaxed);
            tracing::info!(
                id = self.conn.stats.id,
                peer = %self.conn.stats.peer,
                requested = v.msize,
                msize,
                version = %String::from_utf8_lossy(version),
                "negotiated"
            );
            Rversion {
                msize,
                version: version.to_vec(),
            }
        } else {
            self.conn.msize.store(0, Relaxed);
            self.conn.stats.msize.store(0, Relaxed);
            tracing::info!(
                id = self.conn.stats.id,
                peer = %self.conn.stats.peer,
                version = %String::from_utf8_lossy(&v.version),
                requested = v.msize,
                "refused protocol version"
            );
            Rversion {
                msize: v.msize.min(max),
                version: b"unknown".to_vec(),
            }
        };
        let mut out = Vec::new();
        Rmessage::Version(reply).encode(tag, &mut out);
        self.write_reply(msg_type, &out, Some(received));
    }

    /// Tflush: answered at once if `oldtag` is not in flight, else after it (and then not
    /// timed: the reply that carries it is its target's).
    fn flush(&self, tag: Tag, oldtag: Tag, received: Instant) -> Result<(), Stop> {
        let mut st = lock(&self.state);
        if st.in_flight.contains_key(&tag.0) {
            return Err(Stop::Close(format!("tag {} reused while in flight", tag.0)));
        }
        // Flushes do not wait for in-flight capacity: they free it. Their number is bounded
        // by the tag space, since each holds a distinct tag.
        match st.in_flight.get_mut(&oldtag.0) {
            Some(target) => {
                target.flushers.push(tag);
                if !target.started {
                    target.cancelled = true;
                }
                st.in_flight.insert(
                    tag.0,
                    Entry {
                        cancelled: false,
                        started: true,
                        flushers: Vec::new(),
                    },
                );
                self.record_requests(&st);
            }
            None => {
                drop(st);
                // Taking the writer lock orders this after any reply being written now.
                let mut out = Vec::new();
                Rmessage::Flush(Rflush {}).encode(tag, &mut out);
                self.write_reply(crossfs_wire::Tflush::TYPE, &out, Some(received));
            }
        }
        Ok(())
    }

    fn enqueue(&self, job: Job) -> Result<(), Stop> {
        let mut st = self.wait_room_locked(lock(&self.state), job.len);
        st.buffered += job.len;
        if st.in_flight.contains_key(&job.tag.0) {
            return Err(Stop::Close(format!(
                "tag {} reused while in flight",
                job.tag.0
            )));
        }
        st.in_flight.insert(
            job.tag.0,
            Entry {
                cancelled: false,
                started: false,
                flushers: Vec::new(),
            },
        );
        st.queue.push_back(job);
        self.record_requests(&st);
        let idle = st.idle_workers > 0;
        drop(st);
        if idle {
            self.worker_wake.notify_one();
        }
        Ok(())
    }

    /// Waits (as the reader) until a request of `len` bytes may be queued.
    fn wait_room(&self, len: usize) {
        drop(self.wait_room_locked(lock(&self.state), len));
    }

    /// Back-pressure: stops reading until a request has been answered while `max_in_flight`
    /// are queued or running, or `max_buffered_bytes` would be passed. A request larger than
    /// the byte limit waits until nothing else is buffered. Only the reader queues, so the
    /// room it waited for is still there when it queues.
    fn wait_room_locked<'a>(
        &self,
        mut st: MutexGuard<'a, State>,
        len: usize,
    ) -> MutexGuard<'a, State> {
        let config = &self.conn.server.config;
        let (max, max_bytes) = (config.max_in_flight, config.max_buffered_bytes);
        while st.in_flight.len() >= max || (st.buffered > 0 && st.buffered + len > max_bytes) {
            st = self.wait_reader(st);
        }
        st
    }

    /// Reports the bytes of the requests queued or running to the statistics.
    fn record_requests(&self, st: &State) {
        self.conn.stats.memory.requests.store(st.bytes(), Relaxed);
    }

    /// Waits (as the reader) until an entry leaves the in-flight table.
    fn wait_reader<'a>(&self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        st.reader_waiting = true;
        let mut st = self.reader_wake.wait(st).unwrap_or_else(|e| e.into_inner());
        st.reader_waiting = false;
        st
    }

    fn worker(&self) {
        let mut out = Vec::new();
        let mut out_gauge = Gauge::new(&self.conn.stats.memory.buffers);
        // Made at the first read that may be spliced; dropped when it may hold stale bytes.
        let mut pipe: Option<Pipe> = None;
        let mut pipe_gauge = Gauge::new(&self.conn.stats.memory.buffers);
        let splicing = self.splicing;
        loop {
            // Taking a job and marking it started happen under one lock, so a Tflush sees
            // either a queued request (and cancels it) or a started one (and waits for it).
            let (job, cancelled) = {
                let mut st = lock(&self.state);
                let job = loop {
                    if let Some(job) = st.queue.pop_front() {
                        break job;
                    }
                    if st.closing {
                        return;
                    }
                    st.idle_workers += 1;
                    st = self.worker_wake.wait(st).unwrap_or_else(|e| e.into_inner());
                    st.idle_workers -= 1;
                };
                let cancelled = match st.in_flight.get_mut(&job.tag.0) {
                    Some(e) if !e.cancelled => {
                        e.started = true;
                        false
                    }
                    _ => true,
                };
                (job, cancelled)
            };
            let Job {
                tag,
                msg_type,
                work,
                len,
                received,
            } = job;
            if cancelled {
                self.complete(tag, msg_type, len, None, received);
                continue;
            }
            let queued = received.elapsed();
            self.conn.server.latency.queued.record(msg_type, queued);
            let msg = match work {
                Work::Msg(msg) => msg,
                Work::Piped(mut write) => {
                    self.execute_piped(tag, &mut write, &mut out);
                    self.pipes.give_back(write.payload);
                    self.complete(tag, msg_type, len, Some(Answer::Frame(&out)), received);
                    out_gauge.set(out.capacity());
                    continue;
                }
            };
            let spliced = match &msg {
                Ok(Tmessage::Read(m)) if splicing => {
                    let started = Instant::now();
                    let got = self.read_to_pipe((tag, m), &mut pipe, &mut out, false);
                    if got.is_some() {
                        self.conn
                            .server
                            .latency
                            .exec
                            .record(msg_type, started.elapsed());
                    }
                    pipe_gauge.set(pipe.as_ref().map_or(0, Pipe::capacity));
                    got
                }
                _ => None,
            };
            let answer = match spliced {
                Some(ReadInto::Pipe(count)) => Answer::Spliced {
                    count,
                    pipe: &mut pipe,
                },
                Some(ReadInto::Out) => Answer::Frame(&out),
                Some(ReadInto::Lost) | None => {
                    self.execute(tag, msg_type, msg, &mut out);
                    Answer::Frame(&out)
                }
            };
            self.complete(tag, msg_type, len, Some(answer), received);
            out_gauge.set(out.capacity());
        }
    }

    /// Retires `tag`, whose frame was `len` bytes and read at `received`: under the writer
    /// lock, removes it (and the Tflush requests waiting for it) from the in-flight table,
    /// writes its reply if any, then the Rflush replies.
    fn complete(
        &self,
        tag: Tag,
        msg_type: u8,
        len: usize,
        reply: Option<Answer<'_>>,
        received: Instant,
    ) {
        let mut out = lock(&self.out);
        let flushed = {
            let mut st = lock(&self.state);
            st.buffered -= len;
            let mut done = Vec::new();
            let mut pending = VecDeque::from([tag]);
            while let Some(t) = pending.pop_front() {
                if let Some(entry) = st.in_flight.remove(&t.0) {
                    if t != tag {
                        done.push(t);
                    }
                    pending.extend(entry.flushers);
                }
            }
            if st.reader_waiting {
                self.reader_wake.notify_all();
            }
            self.record_requests(&st);
            done
        };
        match reply {
            Some(Answer::Frame(bytes)) => {
                self.write_locked(&mut out, msg_type, bytes, Some(received))
            }
            Some(Answer::Spliced { count, pipe }) => {
                self.write_spliced_locked(&mut out, (tag, msg_type), count, pipe, received)
            }
            None => {}
        }
        let mut frame = Vec::new();
        for t in flushed {
            frame.clear();
            Rmessage::Flush(Rflush {}).encode(t, &mut frame);
            self.write_locked(&mut out, crossfs_wire::Tflush::TYPE, &frame, None);
        }
    }

    fn write_reply(&self, request_ty: u8, frame: &[u8], received: Option<Instant>) {
        let mut out = lock(&self.out);
        self.write_locked(&mut out, request_ty, frame, received);
    }

    /// Writes one whole reply frame and counts it (and, for Rlerror, an error against the
    /// request type). A reply to a request read at `received` is timed from then to the
    /// moment its write begins, and counted once written: the write itself is the wire's
    /// (its return may come long after the peer has the reply, when the reader it wakes
    /// runs first), and so is a peer that reads its replies late.
    fn write_locked(
        &self,
        out: &mut Output,
        request_ty: u8,
        frame: &[u8],
        received: Option<Instant>,
    ) {
        let Some(&reply_ty) = frame.get(4) else {
            return;
        };
        let msize = self.conn.msize() as usize;
        debug_assert!(
            msize == 0 || frame.len() < msize,
            "reply of {} bytes",
            frame.len()
        );
        let server = &self.conn.server;
        server.record(&self.conn.stats, reply_ty, frame.len());
        if reply_ty == Rread::TYPE {
            let payload = frame.len().saturating_sub(RREAD_HEADER_LEN);
            server.count_read(&self.conn.stats, false, payload);
        }
        if reply_ty == crossfs_wire::Rlerror::TYPE {
            server.record_error(&self.conn.stats, request_ty);
        }
        if out.broken {
            return;
        }
        let answered = received.map(|t| t.elapsed());
        if let Err(e) = out
            .writer
            .write_all(frame)
            .and_then(|()| out.writer.flush())
        {
            tracing::debug!(id = self.conn.stats.id, "reply not delivered: {e}");
            out.broken = true;
        } else if let Some(answered) = answered {
            server.latency.reply.record(request_ty, answered);
        }
    }
}

/// Reads the 4-byte size field. `Ok(false)`: clean end of stream before the first byte.
fn read_head(reader: &mut impl Read, head: &mut [u8; 4]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < head.len() {
        match reader.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
