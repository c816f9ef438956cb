//! What an in-flight request carries: the bytes it puts on the wire and how it is finished.

use std::borrow::Cow;

use crossfs_wire::{encode_twrite, Data, Fid, Rmessage, Rread, Tag, Tmessage, Twrite};

use crate::ClientError;

/// A completion for requests answered with a decoded message.
pub(crate) type Done = Box<dyn FnOnce(Result<Rmessage, ClientError>) + Send>;
/// A completion for reads: receives the Rread payload, read straight off the socket.
pub(crate) type ReadDone = Box<dyn FnOnce(Result<Vec<u8>, ClientError>) + Send>;

/// A request to encode. Writes borrow their payload so it is copied once, into the frame.
pub(crate) enum Request<'a> {
    Msg(Tmessage),
    Write {
        fid: Fid,
        offset: u64,
        data: Cow<'a, [u8]>,
    },
}

impl Request<'_> {
    pub(crate) fn msg_type(&self) -> u8 {
        match self {
            Request::Msg(m) => m.msg_type(),
            Request::Write { .. } => Twrite::TYPE,
        }
    }

    pub(crate) fn encode(&self, tag: Tag, out: &mut Vec<u8>) {
        match self {
            Request::Msg(m) => m.encode(tag, out),
            Request::Write { fid, offset, data } => encode_twrite(tag, *fid, *offset, data, out),
        }
    }

    /// An owned copy, for a request that must wait in a queue after its caller returned.
    pub(crate) fn into_owned(self) -> Request<'static> {
        match self {
            Request::Msg(m) => Request::Msg(m),
            Request::Write { fid, offset, data } => Request::Write {
                fid,
                offset,
                data: Cow::Owned(data.into_owned()),
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
}

/// A reply as the reader thread got it.
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
        }
    }

    /// Hands a reply whose type was already checked to the caller.
    pub(crate) fn finish(self, reply: Result<Reply, ClientError>) {
        match self {
            Completion::Msg(done) => done(reply.map(|r| match r {
                Reply::Msg(m) => m,
                Reply::Data(data) => Rmessage::Read(Rread { data: Data(data) }),
            })),
            Completion::Read(done) => done(reply.and_then(|r| match r {
                Reply::Data(data) => Ok(data),
                Reply::Msg(Rmessage::Read(r)) => Ok(r.data.0),
                Reply::Msg(m) => Err(ClientError::Protocol(format!(
                    "Tread answered with {}",
                    m.name()
                ))),
            })),
        }
    }
}
