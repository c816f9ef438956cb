//! Requests served from a descriptor chain's guest memory: a READ's file data is read
//! straight into the chain's writable buffers, after the place of the reply's header, and a
//! WRITE's data is written to the file straight from its readable buffers, each with one
//! vectored system call of the export core ([`sys::preadv_volatile`],
//! [`sys::pwritev_volatile`]) and no buffer of the door's in between. Every other request
//! (and its reply) is copied out of (and into) the chain, as are a READ whose chain leaves
//! less room than it asks for (so that the reply is refused as before, or fits when it
//! turns out short) and a WRITE whose head does not decode alone (so that the decoder's
//! answer is the same as for any request). [`DataPath`] counts which way the bytes went.

use std::os::fd::AsFd;

use crossfs_export::sys;
use rustix::io::Errno;

use super::{FuseFs, OpResult, MAX_REQUEST_DATA};
use crate::fuse::decode::{InHeader, ReadIn};
use crate::fuse::encode::Reply;
use crate::fuse::{self, Op, OUT_HEADER_LEN, WRITE_HEAD_LEN};
use crate::guest::GuestBuffers;
use crate::stats::DataPath;

/// What a chain's request came to.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A reply: `bytes` to copy into the chain, followed there by `in_guest` bytes already
    /// in place (a READ's data, read straight into the chain after the header's place).
    Reply {
        /// The reply, or for a READ served in the guest its header alone (whose length
        /// counts the data).
        bytes: Vec<u8>,
        /// Bytes of data already in the chain after `bytes`.
        in_guest: usize,
    },
    /// No reply is due, or the header could not be decoded.
    Nothing,
    /// Parked: the reply to the request with this unique id comes later.
    Later(u64),
}

/// A chain's guest memory, for the request being answered.
#[derive(Clone, Copy)]
pub(super) struct InGuest<'g, 'm> {
    /// The chain's writable part: the reply's room.
    pub(super) room: &'g GuestBuffers<'m>,
    /// A WRITE's data, left in the chain's readable part after its head.
    pub(super) write_data: Option<&'g GuestBuffers<'m>>,
}

/// What a handler made.
pub(super) enum Outcome {
    /// A reply to copy (or none due).
    Reply(Option<Reply>),
    /// A READ's data, this many bytes, already in the guest after the header's place.
    InGuest(usize),
}

impl From<Option<Reply>> for Outcome {
    fn from(reply: Option<Reply>) -> Outcome {
        Outcome::Reply(reply)
    }
}

impl FuseFs {
    /// Answers the request in a chain's readable buffers (`request`, at most the largest
    /// request the device accepts), with `room` (its writable buffers) for the reply.
    pub(crate) fn handle_chain(
        &self,
        request: &GuestBuffers<'_>,
        room: &GuestBuffers<'_>,
    ) -> Answer {
        let mut head = [0u8; WRITE_HEAD_LEN];
        if request.copy_out(0, &mut head) == WRITE_HEAD_LEN {
            if let Ok((h, w)) = fuse::decode_write_head(&head, request.len() - WRITE_HEAD_LEN) {
                let data = request.sub(WRITE_HEAD_LEN, w.size as usize);
                // The data stays in the guest. What looks at the request before the write
                // (the agent's checks) looks only at its kind and its node.
                let op = Op::Write {
                    fh: w.fh,
                    offset: w.offset,
                    data: &[],
                };
                let guest = InGuest {
                    room,
                    write_data: Some(&data),
                };
                return self.answer(h, Ok(op), request.len(), Some(guest));
            }
        }
        let mut bytes = vec![0; request.len()];
        request.copy_out(0, &mut bytes);
        self.decode_and_answer(
            &bytes,
            Some(InGuest {
                room,
                write_data: None,
            }),
        )
    }

    /// [`FuseFs::answer`] for a request given whole.
    pub(super) fn decode_and_answer(
        &self,
        request: &[u8],
        guest: Option<InGuest<'_, '_>>,
    ) -> Answer {
        match fuse::decode(request) {
            Ok(req) => self.answer(req.header, req.op, request.len(), guest),
            Err(e) => {
                tracing::warn!("virtiofs: undecodable request: {e}");
                self.stats.record_malformed();
                Answer::Nothing
            }
        }
    }

    /// [`FuseFs::dispatch`], but a READ with room for all it asks for and a WRITE whose data
    /// is in the guest are served there.
    pub(super) fn dispatch_in(
        &self,
        h: &InHeader,
        op: Op<'_>,
        guest: Option<InGuest<'_, '_>>,
    ) -> OpResult<Outcome> {
        match (op, guest) {
            (Op::Read(r), Some(g)) if g.room.len() >= OUT_HEADER_LEN + r.size as usize => {
                self.read_into_guest(&r, g.room).map(Outcome::InGuest)
            }
            (
                Op::Write { fh, offset, .. },
                Some(InGuest {
                    write_data: Some(data),
                    ..
                }),
            ) => self
                .write_from_guest(fh, offset, data)
                .map(|r| Outcome::Reply(Some(r))),
            (op, _) => self.dispatch(h, op).map(Outcome::Reply),
        }
    }

    /// Reads into `room` after the header's place; returns the bytes read, short only at
    /// the end of the file (the kernel takes a short reply as EOF).
    fn read_into_guest(&self, r: &ReadIn, room: &GuestBuffers<'_>) -> OpResult<usize> {
        if r.size > MAX_REQUEST_DATA {
            return Err(Errno::INVAL.into());
        }
        let file = self.file(r.fh)?;
        let want = r.size as usize;
        let done = as_much_as_goes(want, |done| {
            let bufs = room.range(OUT_HEADER_LEN + done, want - done);
            sys::preadv_volatile(file.fd.as_fd(), &bufs, r.offset.saturating_add(done as u64))
        })?;
        self.stats.record_data(DataPath::ReadIntoGuest, done);
        Ok(done)
    }

    /// Writes `data` from the guest's buffers; the reply says how much was written.
    fn write_from_guest(&self, fh: u64, offset: u64, data: &GuestBuffers<'_>) -> OpResult<Reply> {
        self.export.policy.check_writable()?;
        let file = self.file(fh)?;
        let done = as_much_as_goes(data.len(), |done| {
            let bufs = data.range(done, data.len() - done);
            sys::pwritev_volatile(file.fd.as_fd(), &bufs, offset.saturating_add(done as u64))
        })?;
        self.stats.record_data(DataPath::WriteFromGuest, done);
        let mut r = Reply::new();
        r.u32(done as u32).u32(0);
        Ok(r)
    }
}

/// Repeats `io` (given the bytes moved so far) until `want` bytes moved, the file ends
/// (0), or an error: returned only if nothing moved yet, else the bytes moved stand, as a
/// short read or write does. Interrupted calls are made again.
fn as_much_as_goes(
    want: usize,
    mut io: impl FnMut(usize) -> Result<usize, Errno>,
) -> OpResult<usize> {
    let mut done = 0;
    while done < want {
        match io(done) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e) if done == 0 => return Err(e.into()),
            Err(_) => break,
        }
    }
    Ok(done)
}
