//! What an in-flight request carries: the bytes it puts on the wire and how it is finished.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, Thread};

use crossfs_wire::{
    encode_twrite, encode_twriteattr, Data, Fid, Rmessage, Rread, Tag, Tmessage, Twrite,
    Twriteattr, WriteHead,
};

use crate::payload::Payload;
use crate::ClientError;

/// A completion for requests answered with a decoded message.
pub(crate) type Done = Box<dyn FnOnce(Result<Rmessage, ClientError>) + Send>;
/// A completion for reads: receives the Rread payload, read straight off the socket.
pub(crate) type ReadDone = Box<dyn FnOnce(Result<Vec<u8>, ClientError>) + Send>;
/// Finishes a read whose payload is handed over in the stream ([`crate::Client::read_payload_async`]).
pub type PayloadDone = Box<dyn FnOnce(Result<&mut Payload<'_>, ClientError>) + Send>;

/// A request to encode. Writes borrow their payload, which is written from where it lies.
pub(crate) enum Request<'a> {
    Msg(Tmessage),
    Write {
        fid: Fid,
        offset: u64,
        data: Cow<'a, [u8]>,
        /// Sent as Twriteattr: the reply carries the file's attributes.
        with_attr: bool,
    },
}

impl Request<'_> {
    pub(crate) fn msg_type(&self) -> u8 {
        match self {
            Request::Msg(m) => m.msg_type(),
            Request::Write {
                with_attr: false, ..
            } => Twrite::TYPE,
            Request::Write {
                with_attr: true, ..
            } => Twriteattr::TYPE,
        }
    }

    pub(crate) fn encode(&self, tag: Tag, out: &mut Vec<u8>) {
        match self {
            Request::Msg(m) => m.encode(tag, out),
            Request::Write {
                fid,
                offset,
                data,
                with_attr,
            } => {
                let encode = if *with_attr {
                    encode_twriteattr
                } else {
                    encode_twrite
                };
                encode(tag, *fid, *offset, data, out)
            }
        }
    }

    /// Appends the frame to `out` but for a write's data, which it returns, to be sent
    /// behind it from where it lies (so that it is never copied into the frame); any other
    /// request is appended whole, and the rest is empty.
    pub(crate) fn encode_split<'s>(&'s self, tag: Tag, out: &mut Vec<u8>) -> &'s [u8] {
        let (fid, offset, data) = match self {
            Request::Write {
                fid, offset, data, ..
            } => (*fid, *offset, &data[..]),
            Request::Msg(Tmessage::Write(Twrite { fid, offset, data }))
            | Request::Msg(Tmessage::Writeattr(Twriteattr { fid, offset, data })) => {
                (*fid, *offset, &data.0[..])
            }
            Request::Msg(m) => {
                m.encode(tag, out);
                return &[];
            }
        };
        // A payload no msize allows is sent whole, so that the caller's size check sees it.
        let Ok(count) = u32::try_from(data.len()) else {
            self.encode(tag, out);
            return &[];
        };
        let head = WriteHead {
            msg_type: self.msg_type(),
            tag,
            fid,
            offset,
            count,
        };
        out.extend_from_slice(&head.encode());
        data
    }

    /// Whether a write's data was handed over as the caller's own bytes, written from
    /// there (`Some(true)`), or copied into memory of the client's or the caller's first
    /// (`Some(false)`: a request queued after its caller returned, or a message that owns
    /// its data); `None` for anything but a write.
    pub(crate) fn write_borrowed(&self) -> Option<bool> {
        match self {
            Request::Write { data, .. } => Some(matches!(data, Cow::Borrowed(_))),
            Request::Msg(Tmessage::Write(_) | Tmessage::Writeattr(_)) => Some(false),
            Request::Msg(_) => None,
        }
    }

    /// An owned copy, for a request that must wait in a queue after its caller returned.
    pub(crate) fn into_owned(self) -> Request<'static> {
        match self {
            Request::Msg(m) => Request::Msg(m),
            Request::Write {
                fid,
                offset,
                data,
                with_attr,
            } => Request::Write {
                fid,
                offset,
                data: Cow::Owned(data.into_owned()),
                with_attr,
            },
        }
    }

    /// The payload bytes this request moves (write data, or the count a read or readdir
    /// asks for), which must not exceed msize - IOHDRSZ.
    pub(crate) fn io_size(&self) -> Option<u64> {
        match self {
            Request::Msg(Tmessage::Read(r)) => Some(r.count.into()),
            Request::Msg(Tmessage::Readdir(r)) => Some(r.count.into()),
            Request::Msg(_) => None,
            Request::Write { data, .. } => Some(data.len() as u64),
        }
    }
}

/// How a request is finished.
pub(crate) enum Completion {
    Msg(Done),
    Read(ReadDone),
    /// An Rread whose payload is handed over still in the stream ([`crate::Payload`]).
    Payload(PayloadDone),
    /// A blocking call: the reply is left in slot `index` of the waiter and its thread woken
    /// once every slot is filled. `data`: an Rread payload is wanted as raw bytes.
    Wake {
        waiter: Arc<Waiter>,
        index: usize,
        data: bool,
    },
}

/// Every reply has arrived (or its request failed).
const DONE: u8 = 1;
/// The thread was handed the job of reading replies (see `Connection::wait`).
const LEAD: u8 = 2;

/// A thread blocked in a call of one or more requests: where their replies go, and how it is
/// woken, either because the last reply is in or because it is its turn to read the socket
/// for everyone.
pub(crate) struct Waiter {
    thread: Thread,
    flags: AtomicU8,
    /// Replies still due.
    remaining: AtomicUsize,
    replies: Mutex<Vec<Option<Result<Reply, ClientError>>>>,
}

impl Waiter {
    /// A waiter for `n` requests of the calling thread (done at once for none).
    pub(crate) fn new(n: usize) -> Arc<Waiter> {
        Arc::new(Waiter {
            thread: thread::current(),
            flags: AtomicU8::new(if n == 0 { DONE } else { 0 }),
            remaining: AtomicUsize::new(n),
            replies: Mutex::new((0..n).map(|_| None).collect()),
        })
    }

    fn set(&self, flag: u8) {
        self.flags.fetch_or(flag, Ordering::AcqRel);
        self.thread.unpark();
    }

    fn complete(&self, index: usize, reply: Result<Reply, ClientError>) {
        if let Some(slot) = self
            .replies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(index)
        {
            *slot = Some(reply);
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.set(DONE);
        }
    }

    /// Tells the waiting thread that it now reads replies for everyone.
    pub(crate) fn promote(&self) {
        self.set(LEAD);
    }

    pub(crate) fn is_done(&self) -> bool {
        self.flags.load(Ordering::Acquire) & DONE != 0
    }

    /// Clears and returns the promotion flag.
    pub(crate) fn take_lead(&self) -> bool {
        self.flags.fetch_and(!LEAD, Ordering::AcqRel) & LEAD != 0
    }

    /// Sleeps until every reply is in or the thread is promoted (the caller re-checks which).
    pub(crate) fn park(&self) {
        while self.flags.load(Ordering::Acquire) == 0 {
            thread::park();
        }
    }

    /// The replies, in request order, once [`Waiter::is_done`].
    pub(crate) fn take_replies(&self) -> Vec<Result<Reply, ClientError>> {
        let replies =
            std::mem::take(&mut *self.replies.lock().unwrap_or_else(PoisonError::into_inner));
        replies
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(ClientError::Disconnected(
                        "request dropped without a reply".into(),
                    ))
                })
            })
            .collect()
    }
}

/// A reply as the thread reading the socket got it. It lives only from the socket to its
/// waiter: boxing the larger messages (Rrenameatattr carries two Rgetattr) would cost an
/// allocation for every reply instead.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Reply {
    /// A decoded message (any type, Rlerror included).
    Msg(Rmessage),
    /// The payload of an Rread, never decoded into a message.
    Data(Vec<u8>),
}

impl Completion {
    pub(crate) fn fail(self, e: ClientError) {
        match self {
            Completion::Msg(done) => done(Err(e)),
            Completion::Read(done) => done(Err(e)),
            Completion::Payload(done) => done(Err(e)),
            Completion::Wake { waiter, index, .. } => waiter.complete(index, Err(e)),
        }
    }

    /// Whether an Rread for this request is to be handed over in the stream.
    pub(crate) fn wants_payload(&self) -> bool {
        matches!(self, Completion::Payload(_))
    }

    /// Hands an Rread's payload, still in the stream, to the caller.
    pub(crate) fn finish_payload(self, payload: &mut Payload<'_>) {
        match self {
            Completion::Payload(done) => done(Ok(payload)),
            other => {
                let data = payload
                    .read_to_vec()
                    .map_err(|e| ClientError::Disconnected(e.to_string()));
                other.finish(data.map(Reply::Data));
            }
        }
    }

    /// Whether an Rread for this request should be read as raw payload.
    pub(crate) fn wants_data(&self) -> bool {
        matches!(
            self,
            Completion::Read(_) | Completion::Wake { data: true, .. }
        )
    }

    /// Hands a reply whose type was already checked to the caller.
    pub(crate) fn finish(self, reply: Result<Reply, ClientError>) {
        match self {
            Completion::Msg(done) => done(reply.map(Reply::into_msg)),
            Completion::Read(done) => done(reply.and_then(Reply::into_data)),
            // Only an error comes here: an Rread goes to `finish_payload`.
            Completion::Payload(done) => done(reply.and_then(|r| {
                Err(ClientError::Protocol(format!(
                    "Tread answered with {}",
                    r.into_msg().name()
                )))
            })),
            Completion::Wake { waiter, index, .. } => waiter.complete(index, reply),
        }
    }
}

impl Reply {
    /// As a message (an Rread payload becomes an Rread).
    pub(crate) fn into_msg(self) -> Rmessage {
        match self {
            Reply::Msg(m) => m,
            Reply::Data(data) => Rmessage::Read(Rread { data: Data(data) }),
        }
    }

    /// As an Rread payload.
    pub(crate) fn into_data(self) -> Result<Vec<u8>, ClientError> {
        match self {
            Reply::Data(data) => Ok(data),
            Reply::Msg(Rmessage::Read(r)) => Ok(r.data.0),
            Reply::Msg(m) => Err(ClientError::Protocol(format!(
                "Tread answered with {}",
                m.name()
            ))),
        }
    }
}
