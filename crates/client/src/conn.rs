//! One connection's shared state and its reader thread.
//!
//! Callers take a tag (waiting on a condition variable when all are in flight), write their
//! frame under the writer lock, and return or wait. The reader thread reads each reply, frees
//! its tag (handing it straight to a request queued from the reader thread itself, if any),
//! and runs its completion. When anything breaks the stream, [`Shared::kill`] fails every
//! pending and queued request once, and every later one at once.

use std::collections::VecDeque;
use std::io::{self, BufReader, Read, Write};
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{self, ThreadId};

use crossfs_wire::{
    check_frame_size, decode_rframe, message_name, Fid, MessageCounters, Rmessage, Rread, Tag,
    HEADER_LEN, IOHDRSZ, RREAD_HEADER_LEN,
};

use crate::fids::FidPool;
use crate::request::{Completion, Reply, Request};
use crate::tags::TagTable;
use crate::{ClientConfig, ClientError, MsizeNegotiation};

/// The state the reader thread shares with callers.
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Signalled when a tag comes free or the connection dies.
    tag_freed: Condvar,
    writer: Mutex<Writer>,
    pub(crate) counters: MessageCounters,
    pub(crate) fids: FidPool,
    pub(crate) negotiation: MsizeNegotiation,
    reader_thread: OnceLock<ThreadId>,
    /// Closes the transport so a blocked reader wakes up; run once, when the connection dies.
    closer: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

struct State {
    tags: TagTable<Pending>,
    /// Why the connection died; once set, never cleared.
    closed: Option<String>,
    /// Requests made from the reader thread while every tag was taken. That thread cannot
    /// wait for a tag (only it frees them), so the request queues here and takes the next tag
    /// the reader frees.
    deferred: VecDeque<Deferred>,
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

struct Writer {
    sink: Box<dyn Write + Send>,
    /// Reused for every frame; bounded by msize.
    buf: Vec<u8>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing runs caller code while holding these locks, so a poisoned lock still guards
    // consistent state.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn name(ty: u8) -> &'static str {
    message_name(ty).unwrap_or("unknown message")
}

impl Shared {
    pub(crate) fn new(
        config: &ClientConfig,
        writer: Box<dyn Write + Send>,
        counters: MessageCounters,
        negotiation: MsizeNegotiation,
        closer: Box<dyn FnOnce() + Send>,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State {
                tags: TagTable::new(config.max_in_flight),
                closed: None,
                deferred: VecDeque::new(),
            }),
            tag_freed: Condvar::new(),
            writer: Mutex::new(Writer {
                sink: writer,
                buf: Vec::new(),
            }),
            counters,
            fids: FidPool::default(),
            negotiation,
            reader_thread: OnceLock::new(),
            closer: Mutex::new(Some(closer)),
        })
    }

    pub(crate) fn is_connected(&self) -> bool {
        lock(&self.state).closed.is_none()
    }

    pub(crate) fn in_flight(&self) -> usize {
        lock(&self.state).tags.in_flight()
    }
}

/// Starts the reader thread over `reader`.
pub(crate) fn start_reader<R: Read + Send + 'static>(
    shared: &Arc<Shared>,
    reader: BufReader<R>,
) -> io::Result<()> {
    let shared = shared.clone();
    thread::Builder::new()
        .name("9p-reader".into())
        .spawn(move || reader_thread(shared, reader))
        .map(drop)
}

/// An Rlerror code as an errno the kernel will take as a failure.
pub(crate) fn sane_errno(ecode: u32) -> i32 {
    match i32::try_from(ecode) {
        // 0 would read as success to FUSE.
        Ok(e) if e > 0 => e,
        _ => libc::EIO,
    }
}

/// The reader thread: reads replies until the stream fails or the connection is closed.
fn reader_thread<R: Read>(shared: Arc<Shared>, mut r: BufReader<R>) {
    let _ = shared.reader_thread.set(thread::current().id());
    // A panicking completion (or a bug here) must not leave callers waiting forever.
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        let mut buf = Vec::new();
        loop {
            if let Err(reason) = shared.read_reply(&mut r, &mut buf) {
                return reason;
            }
        }
    }));
    let reason = outcome.unwrap_or_else(|_| "the reader thread panicked".into());
    // A no-op when the client itself closed the connection first.
    shared.kill(reason, true);
}

impl Shared {
    pub(crate) fn on_reader_thread(&self) -> bool {
        self.reader_thread.get() == Some(&thread::current().id())
    }

    /// Takes a tag for `request`, writes it, and arranges for `completion` to run.
    pub(crate) fn submit(
        &self,
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
        let tag = {
            let mut state = lock(&self.state);
            loop {
                if let Some(reason) = &state.closed {
                    let err = ClientError::Disconnected(reason.clone());
                    drop(state);
                    return pending.completion.fail(err);
                }
                match state.tags.insert(pending) {
                    Ok(tag) => break tag,
                    Err(p) => pending = p,
                }
                if self.on_reader_thread() {
                    let request = request.into_owned();
                    state.deferred.push_back(Deferred { request, pending });
                    return;
                }
                state = self
                    .tag_freed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        self.send(tag, &request);
    }

    /// Writes `request` under `tag`, whose slot is already filled.
    fn send(&self, tag: Tag, request: &Request<'_>) {
        let msize = self.negotiation.effective as usize;
        let mut writer = lock(&self.writer);
        let Writer { sink, buf } = &mut *writer;
        buf.clear();
        request.encode(tag, buf);
        let len = buf.len();
        if len > msize {
            // Names are up to 64 KiB each: don't keep a buffer sized for a refused request.
            buf.clear();
            buf.shrink_to(msize);
            drop(writer);
            let err = ClientError::TooLarge {
                size: len as u64,
                max: msize as u64,
            };
            if let Some(p) = self.take(tag) {
                p.completion.fail(err);
            }
            return;
        }
        self.counters.record(request.msg_type(), len);
        let written = sink.write_all(buf).and_then(|()| sink.flush());
        drop(writer);
        if let Err(e) = written {
            // A partial frame may be on the wire: the stream cannot be resynchronised.
            self.kill(format!("writing {}: {e}", name(request.msg_type())), true);
        }
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
            self.send(tag, &request);
        }
        Some(pending)
    }

    /// Reads one reply and finishes its request. `Err` means the connection is unusable.
    fn read_reply<R: Read>(&self, r: &mut R, buf: &mut Vec<u8>) -> Result<(), String> {
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

        let raw_read = {
            let state = lock(&self.state);
            if state.closed.is_some() {
                return Err("closed".into());
            }
            match state.tags.get(tag) {
                None => return Err(format!("{} with unknown tag {}", name(ty), tag.0)),
                Some(p) => ty == Rread::TYPE && matches!(p.completion, Completion::Read(_)),
            }
        };
        let reply = if raw_read {
            // Read the payload straight into the Vec the caller will own: no second copy.
            if len < RREAD_HEADER_LEN {
                return Err(format!("Rread frame of {len} bytes"));
            }
            let mut count = [0u8; 4];
            read_all(r, &mut count)?;
            let count = u32::from_le_bytes(count) as usize;
            if count != len - RREAD_HEADER_LEN {
                return Err(format!("Rread of {count} bytes in a {len}-byte frame"));
            }
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

        let Some(pending) = self.take(tag) else {
            // The connection was closed meanwhile and the request already failed.
            return Err("closed".into());
        };
        // Counted after the tag and fid are free, so a caller that sees the count can rely on
        // both (tests do).
        self.counters.record(ty, len);
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
        pending.completion.finish(reply);
        Ok(())
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
        let pending = pending
            .into_iter()
            .chain(deferred.into_iter().map(|d| d.pending));
        for p in pending {
            p.completion.fail(ClientError::Disconnected(reason.clone()));
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
