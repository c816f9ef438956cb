//! Writing a connection's requests: one frame at a time under the writer lock, after the
//! requests held before it (`crate::held`), and what happens to a request that cannot be
//! written (too large: its caller is told; a broken stream: the connection dies).
//!
//! What this module must not do: read replies, or run completions with the writer lock
//! held (a completion may send).

use std::io::{self, Write};
use std::sync::atomic::Ordering;

use crossfs_wire::Tag;

use super::{name, Connection};
use crate::lock;
use crate::request::Request;
use crate::ClientError;

/// A request that could not be written.
enum Unsent {
    /// Larger than msize: its caller is told, the connection goes on.
    TooLarge(Tag, ClientError),
    /// The stream failed mid-frame: the connection dies.
    Broken(String),
}

/// The connection's sending half, under its writer lock.
pub(super) struct Writer {
    pub(super) sink: Box<dyn Write + Send>,
    /// Reused for every frame; bounded by msize.
    pub(super) buf: Vec<u8>,
}

impl Connection {
    /// Writes `request` under `tag`, whose slot is already filled, after the requests held
    /// before it (see `crate::held`).
    pub(super) fn send(&self, tag: Tag, request: &Request<'_>) {
        let mut writer = lock(&self.writer);
        let mut unsent = self.write_held_locked(&mut writer);
        let written = match unsent.last() {
            Some(Unsent::Broken(_)) => None,
            _ => Some(self.write_one(&mut writer, tag, request)),
        };
        drop(writer);
        match written {
            Some(Ok(bytes)) => {
                if let Some(borrowed) = request.write_borrowed() {
                    self.data.count(borrowed, bytes);
                }
            }
            Some(Err(e)) => unsent.push(e),
            None => {}
        }
        self.settle(unsent);
    }

    /// Holds `request` under `tag` until the next write on this connection, or until this
    /// thread stops holding its sends or waits (see `crate::held`).
    pub(super) fn hold(&self, tag: Tag, request: Request<'static>) {
        lock(&self.held).push_back((tag, request));
    }

    /// Whether requests are held on this connection, by any thread.
    pub(crate) fn has_held(&self) -> bool {
        !lock(&self.held).is_empty()
    }

    /// Writes the requests held on this connection, in order.
    pub(crate) fn write_held(&self) {
        if !self.has_held() {
            return;
        }
        let mut writer = lock(&self.writer);
        let unsent = self.write_held_locked(&mut writer);
        drop(writer);
        self.settle(unsent);
    }

    /// Writes the held requests, in order, with the writer lock held; what could not be
    /// written, for [`Connection::settle`] once it is released.
    fn write_held_locked(&self, writer: &mut Writer) -> Vec<Unsent> {
        let mut unsent = Vec::new();
        loop {
            // Popped under the writer lock: no other thread writes between.
            let Some((tag, request)) = lock(&self.held).pop_front() else {
                return unsent;
            };
            match self.write_one(writer, tag, &request) {
                Ok(_) => {}
                Err(e @ Unsent::TooLarge(..)) => unsent.push(e),
                Err(e @ Unsent::Broken(_)) => {
                    unsent.push(e);
                    return unsent;
                }
            }
        }
    }

    /// Writes one frame; `Ok`: the bytes of data written from where they lie (behind the
    /// head).
    fn write_one(
        &self,
        writer: &mut Writer,
        tag: Tag,
        request: &Request<'_>,
    ) -> Result<usize, Unsent> {
        let msize = self.negotiation.effective as usize;
        let Writer { sink, buf } = writer;
        buf.clear();
        // A write's data goes from where it lies, behind its head (see `write_frame`).
        let data = request.encode_split(tag, buf);
        let len = buf.len() + data.len();
        if len > msize {
            // Names are up to 64 KiB each: don't keep a buffer sized for a refused request.
            buf.clear();
            buf.shrink_to(msize);
            let err = ClientError::TooLarge {
                size: len as u64,
                max: msize as u64,
            };
            return Err(Unsent::TooLarge(tag, err));
        }
        self.counters.record(request.msg_type(), len);
        if let Some(slot) = self.sent_at.get(tag.0 as usize) {
            slot.store(self.since_epoch(), Ordering::Relaxed);
        }
        match write_frame(sink, buf, data).and_then(|()| sink.flush()) {
            Ok(()) => Ok(data.len()),
            // A partial frame may be on the wire: the stream cannot be resynchronised.
            Err(e) => Err(Unsent::Broken(format!(
                "writing {}: {e}",
                name(request.msg_type())
            ))),
        }
    }

    /// Fails what could not be written (without the writer lock: a completion may send).
    fn settle(&self, unsent: Vec<Unsent>) {
        for u in unsent {
            match u {
                Unsent::TooLarge(tag, err) => {
                    if let Some(p) = self.take(tag) {
                        p.completion.fail(err);
                    }
                }
                Unsent::Broken(reason) => self.kill(reason, true),
            }
        }
    }
}

/// Writes `head` then `data` as one frame: one `writev` where the sink takes it (a socket
/// does), so that a write's data reaches the socket from the caller's buffer without being
/// copied into the frame first.
fn write_frame(sink: &mut dyn Write, head: &[u8], data: &[u8]) -> io::Result<()> {
    let mut parts = [io::IoSlice::new(head), io::IoSlice::new(data)];
    let mut parts = &mut parts[..];
    while !parts.is_empty() {
        match sink.write_vectored(parts) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => io::IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
