//! The splice paths of a connection: large writes taken off the socket into pipes, reads
//! spliced from the page cache into the socket (`crate::piped`, `crate::splice`).

use std::io::{BufReader, Read, Write};
use std::time::Instant;

use crossfs_export::memory::Gauge;
use crossfs_wire::{
    Data, Rread, Tag, Tframe, Tmessage, Twrite, Twriteattr, WriteHead, INLINE_WRITE_MAX,
    RREAD_HEADER_LEN, TWRITE_HEADER_LEN,
};

use super::{Job, Output, PipedWrite, Session, Stop, Work};
use crate::fid::{lock, FidState};
use crate::piped::{take_payload, Taken};
use crate::sink::{send_header, RequestSource};
use crate::splice::Pipe;

impl Session {
    /// A Twrite or Twriteattr whose head `w` was read: its payload is spliced into pipes and
    /// the request queued for a worker when it is large and goes to a file that takes a
    /// splice (`crate::piped`); otherwise read into a buffer of its own (no frame, no copy
    /// of it in decoding) and dispatched as any request.
    pub(super) fn take_write<S: RequestSource>(
        &self,
        w: WriteHead,
        reader: &mut BufReader<S>,
        outs: (&mut Vec<u8>, &mut Gauge<'_>, &mut ReaderPipe<'_>),
    ) -> Result<(), Stop> {
        let count = w.count as usize;
        let len = TWRITE_HEADER_LEN + count;
        let truncated =
            |e: std::io::Error| Stop::Close(format!("truncated frame of {len} bytes: {e}"));
        self.conn.server.record(&self.conn.stats, w.msg_type, len);
        let data = if count > INLINE_WRITE_MAX && self.splices_into(w.fid) {
            // Room first: the pages the payload holds count as its frame.
            self.wait_room(len);
            let payload_max = (self.conn.msize() as usize).saturating_sub(TWRITE_HEADER_LEN);
            match take_payload(reader, count, (&self.pipes, payload_max)).map_err(truncated)? {
                Taken::Piped(payload) => {
                    let received = Instant::now();
                    return self.enqueue(Job {
                        tag: w.tag,
                        msg_type: w.msg_type,
                        work: Work::Piped(PipedWrite { head: w, payload }),
                        len,
                        received,
                    });
                }
                Taken::Copied(data) => data,
            }
        } else {
            let mut data = vec![0; count];
            reader.read_exact(&mut data).map_err(truncated)?;
            data
        };
        let received = Instant::now();
        let (fid, offset, data) = (w.fid, w.offset, Data(data));
        let msg = if w.msg_type == Twriteattr::TYPE {
            Tmessage::Writeattr(Twriteattr { fid, offset, data })
        } else {
            Tmessage::Write(Twrite { fid, offset, data })
        };
        let frame = Tframe {
            tag: w.tag,
            msg_type: w.msg_type,
            msg: Ok(msg),
        };
        self.dispatch(frame, len, received, outs)
    }

    /// Whether a large write to `fid` is to be spliced: the connection splices writes, the
    /// export takes them, and the fid is a file open for a splice (`OpenFile::spliced_writes`;
    /// a worker checks again when it runs the write, and copies if that changed).
    fn splices_into(&self, fid: crossfs_wire::Fid) -> bool {
        self.splicing_writes
            && self.conn.server.export.policy.check_writable().is_ok()
            && self.conn.fids.get(fid).is_ok_and(|state| {
                matches!(&*state, FidState::File(f) if f.open.get().is_some_and(|o| o.spliced_writes))
            })
    }

    /// A Tread of pages all in the page cache, answered on the reader by splicing them
    /// (`crate::splice`); false, with nothing written, for any other.
    pub(super) fn read_spliced_inline(
        &self,
        (tag, m): (Tag, &crossfs_wire::Tread),
        received: Instant,
        out: &mut Vec<u8>,
        pipe: &mut ReaderPipe<'_>,
    ) -> bool {
        let started = Instant::now();
        let got = self.read_to_pipe((tag, m), &mut pipe.pipe, out, true);
        pipe.gauge.set(pipe.pipe.as_ref().map_or(0, Pipe::capacity));
        let msg_type = crossfs_wire::Tread::TYPE;
        match got {
            Some(ReadInto::Pipe(count)) => {
                let exec = started.elapsed();
                self.conn.server.latency.exec.record(msg_type, exec);
                let mut output = lock(&self.out);
                let request = (tag, msg_type);
                self.write_spliced_locked(&mut output, request, count, &mut pipe.pipe, received);
                true
            }
            Some(ReadInto::Out) => {
                let exec = started.elapsed();
                self.conn.server.latency.exec.record(msg_type, exec);
                self.write_reply(msg_type, out, Some(received));
                true
            }
            Some(ReadInto::Lost) | None => false,
        }
    }

    /// A Tread of a regular file into the worker's pipe (made here the first time), or into
    /// `out` whole when the pipe took only part of it; `None` when it is not such a read,
    /// or the kernel cannot splice it (the copy path then reads it, and reports its errors).
    pub(super) fn read_to_pipe(
        &self,
        read: (Tag, &crossfs_wire::Tread),
        pipe: &mut Option<Pipe>,
        out: &mut Vec<u8>,
        only_cached: bool,
    ) -> Option<ReadInto> {
        if pipe.is_none() {
            let payload = (self.conn.msize() as usize).saturating_sub(RREAD_HEADER_LEN + 1);
            *pipe = Pipe::new(payload)
                .map_err(|e| tracing::debug!(id = self.conn.stats.id, "no pipe: {e}"))
                .ok();
        }
        let got = crate::ops::read_to_pipe(&self.conn, read, pipe.as_ref()?, out, only_cached);
        if matches!(got, Some(ReadInto::Lost)) {
            *pipe = None;
            return None;
        }
        got
    }

    /// Writes an Rread of `count` bytes waiting in `pipe`: its header, then the pipe spliced
    /// into the connection's descriptor (read back and written where that descriptor takes
    /// no splice). Counted and timed as [`Session::write_locked`] does a frame.
    pub(super) fn write_spliced_locked(
        &self,
        out: &mut Output,
        (tag, request_ty): (Tag, u8),
        count: usize,
        pipe: &mut Option<Pipe>,
        received: Instant,
    ) {
        let server = &self.conn.server;
        let len = RREAD_HEADER_LEN + count;
        server.record(&self.conn.stats, Rread::TYPE, len);
        let Some(p) = pipe.as_ref() else {
            return;
        };
        if out.broken {
            *pipe = None;
            return;
        }
        let mut header = [0u8; RREAD_HEADER_LEN];
        header[..4].copy_from_slice(&(len as u32).to_le_bytes());
        header[4] = Rread::TYPE;
        header[5..7].copy_from_slice(&tag.0.to_le_bytes());
        header[7..].copy_from_slice(&(count as u32).to_le_bytes());
        let answered = received.elapsed();
        let sent = (|| {
            out.writer.flush()?;
            let fd = out
                .writer
                .splice_fd()
                .ok_or(std::io::ErrorKind::Unsupported)?;
            send_header(fd, out.sink, &header)?;
            p.drain_into(fd, count)
        })();
        let result = match sent {
            Ok(true) => {
                server.count_read(&self.conn.stats, true, count);
                Ok(())
            }
            Ok(false) => {
                // The descriptor takes no splice: copy what waits in the pipe, and splice
                // no more on this connection.
                out.sink = None;
                let mut data = vec![0; count];
                let copied = p
                    .read_back(&mut data)
                    .and_then(|()| out.writer.write_all(&data));
                server.count_read(&self.conn.stats, false, count);
                copied
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => server.latency.reply.record(request_ty, answered),
            Err(e) => {
                tracing::debug!(id = self.conn.stats.id, "reply not delivered: {e}");
                out.broken = true;
                *pipe = None;
            }
        }
    }
}

/// The reader's pipe, for reads it answers itself, and its size in the statistics.
pub(super) struct ReaderPipe<'a> {
    pub(super) pipe: Option<Pipe>,
    pub(super) gauge: Gauge<'a>,
}

/// Where [`crate::ops::read_to_pipe`] left a read.
pub(crate) enum ReadInto {
    /// Its data, this many bytes, wait in the pipe.
    Pipe(usize),
    /// Its whole reply is in the reply buffer (the pipe took part of it, read back).
    Out,
    /// The pipe may hold stale bytes: drop it; the copy path answers.
    Lost,
}
