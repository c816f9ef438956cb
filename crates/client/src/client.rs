//! The public face of a connection: connecting, and sending requests blocking or not.
//!
//! Requests are written whole under one writer lock by the calling thread, so frames never
//! interleave and no writer thread is needed. Replies are read by one thread at a time (see
//! `conn.rs`), which looks the tag up, frees it, and runs the request's completion: a
//! blocking caller reads its own reply when nobody else is reading, else the reader thread
//! or another blocking caller does and wakes it.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, BufReader, Read, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crossfs_wire::{CounterSnapshot, Fid, LatencySnapshot, Rgetattr, Rmessage, Tmessage, IOHDRSZ};

use crate::conn::{self, Connection, Meters, READ_BUFFER};
use crate::fids::FidPool;
use crate::redial::{self, Link, RestoreHook, Transport};
use crate::request::{Completion, Done, PayloadDone, Reply, Request, Waiter};
use crate::version::negotiate;
use crate::{ClientConfig, ClientError, MsizeNegotiation};

/// Bytes of Twrite and Twriteattr data a client sent, by the path they took
/// ([`Client::write_data`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteData {
    /// Written to the transport from the caller's own buffer, behind the request's head
    /// in one vectored write ([`Client::write_async`], [`Client::write_attr_async`],
    /// [`Client::write`]): never copied by the client.
    pub from_caller: u64,
    /// Copied first: into a buffer the request waited in (one made from a completion,
    /// sent by the client's sender thread), or the data of a [`Tmessage`] the caller made.
    pub copied: u64,
}

/// What a Twriteattr's completion gets: the count written and the attributes after it.
pub type WriteAttrDone = Box<dyn FnOnce(Result<(u32, Rgetattr), ClientError>) + Send>;

/// A 9P2000.L client over one connection (replaced by a new one when it is lost, if
/// [`Client::enable_reconnect`] was called). Share it as `Arc<Client>`; every method takes
/// `&self` and may be called from any thread.
pub struct Client {
    link: Arc<Link>,
    pub(crate) config: ClientConfig,
    /// Run in order on every new connection (see [`Client::on_reconnect`]).
    restore_hooks: Mutex<Vec<Arc<RestoreHook>>>,
}

impl Client {
    /// Negotiates the protocol version and msize over `reader`/`writer` (two halves of one
    /// connected stream), then starts the reader thread.
    ///
    /// Blocks until the server answers Tversion; a transport that may never answer should
    /// carry its own timeout. Without a closer (see [`Client::connect_with_closer`]),
    /// [`Client::shutdown`] fails every call waiting for a reply, but the thread reading
    /// the stream at that moment (the reader thread, or a blocking caller reading its own
    /// reply) stays in its read until the server answers or closes the stream.
    ///
    /// # Errors
    /// [`ClientError::Disconnected`] if the stream fails, [`ClientError::Protocol`] if the
    /// server does not speak 9P2000.L or offers an msize below 4096,
    /// [`ClientError::InvalidConfig`] for an msize below 4096 in `config`.
    pub fn connect<R, W>(
        reader: R,
        writer: W,
        config: &ClientConfig,
    ) -> Result<Arc<Client>, ClientError>
    where
        R: Read + Send + 'static,
        W: Write + Send + 'static,
    {
        Self::connect_with_closer(reader, writer, config, || {})
    }

    /// As [`Client::connect_with_closer`], from a [`Transport`] (which may also carry a
    /// socket to watch for hang-ups: see [`Transport::hangup`]).
    ///
    /// # Errors
    /// As [`Client::connect`].
    pub fn connect_transport(
        transport: Transport,
        config: &ClientConfig,
    ) -> Result<Arc<Client>, ClientError> {
        let Transport {
            reader,
            writer,
            closer,
            hangup,
            socket,
        } = transport;
        Self::start((reader, socket), writer, config, closer, hangup)
    }

    /// As [`Client::connect`], with `closer` run once when the connection ends (shutdown,
    /// drop, or failure), typically `move || stream.shutdown(Both)`: it wakes the reader
    /// thread so it exits, and tells the server at once.
    ///
    /// # Errors
    /// As [`Client::connect`]; `closer` has run when it fails.
    pub fn connect_with_closer<R, W, F>(
        reader: R,
        writer: W,
        config: &ClientConfig,
        closer: F,
    ) -> Result<Arc<Client>, ClientError>
    where
        R: Read + Send + 'static,
        W: Write + Send + 'static,
        F: FnOnce() + Send + 'static,
    {
        Self::start(
            (Box::new(reader), None),
            Box::new(writer),
            config,
            Box::new(closer),
            None,
        )
    }

    fn start(
        (reader, socket): (Box<dyn Read + Send>, Option<std::os::fd::OwnedFd>),
        writer: Box<dyn Write + Send>,
        config: &ClientConfig,
        closer: Box<dyn FnOnce() + Send>,
        hangup: Option<std::os::fd::OwnedFd>,
    ) -> Result<Arc<Client>, ClientError> {
        let mut reader = BufReader::with_capacity(READ_BUFFER, reader);
        let mut writer = writer;
        let meters = Meters::default();
        let negotiation = match negotiate(&mut reader, &mut writer, config, &meters.counters) {
            Ok(n) => n,
            Err(e) => {
                closer();
                return Err(e);
            }
        };
        tracing::info!(
            requested = negotiation.requested,
            transport_max = negotiation.transport_max,
            server = negotiation.server,
            effective = negotiation.effective,
            "9P msize negotiated"
        );
        let shared = Connection::new(
            config,
            (reader, socket),
            writer,
            meters,
            negotiation,
            closer,
            Arc::new(FidPool::default()),
        );
        let link = Link::new(shared.clone());
        shared.set_loss_hook(Link::loss_hook(&link));
        if let Err(e) = conn::start_threads(&shared, hangup) {
            let reason = format!("cannot start the reader thread: {e}");
            shared.kill(reason.clone(), false);
            return Err(ClientError::Disconnected(reason));
        }
        Ok(Arc::new(Client {
            link,
            config: config.clone(),
            restore_hooks: Mutex::new(Vec::new()),
        }))
    }

    /// Replaces the connection when it is lost instead of failing every later call.
    ///
    /// `dial` opens a new transport to the same server; the version and msize are
    /// negotiated again (a server now offering a smaller msize is refused, as everything
    /// above was sized for the old one), then the hooks given to [`Client::on_reconnect`]
    /// run on the new connection, before any other call may use it. Dialing is retried
    /// with back-off (50 ms doubling to 2 s) until it works or the client is shut down.
    ///
    /// Requests in flight when the connection died fail with
    /// [`ClientError::Disconnected`]. Calls made while it is down wait for the new one, up
    /// to `wait` after the loss; after that they fail at once until it is back.
    ///
    /// # Errors
    /// If reconnecting is already enabled, or the redial thread cannot start.
    pub fn enable_reconnect(
        self: &Arc<Self>,
        dial: impl Fn() -> io::Result<Transport> + Send + Sync + 'static,
        wait: Duration,
    ) -> io::Result<()> {
        redial::enable(self, &self.link, Box::new(dial), wait)
    }

    /// Adds a hook run on every new connection made by reconnecting, after those added
    /// before it: it binds again the fids its owner still holds (Tattach, Twalk, Tlopen to
    /// the same fid numbers). Only the thread running the hooks may use the connection
    /// meanwhile. An error fails this attempt; the connection is dropped and dialed again.
    pub fn on_reconnect(
        &self,
        hook: impl Fn(&Client) -> Result<(), ClientError> + Send + Sync + 'static,
    ) {
        self.restore_hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::new(Box::new(hook)));
    }

    pub(crate) fn run_restore_hooks(&self) -> Result<(), ClientError> {
        let hooks = self
            .restore_hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        hooks.iter().try_for_each(|hook| hook(self))
    }

    /// True if a lost connection will be replaced (reconnecting is enabled and the client
    /// was not shut down).
    pub fn reconnects_enabled(&self) -> bool {
        self.link.redials()
    }

    /// Connections made to replace a lost one.
    pub fn reconnects(&self) -> u64 {
        self.link.reconnects()
    }

    /// How the msize was negotiated (on the connection in use).
    pub fn negotiation(&self) -> MsizeNegotiation {
        self.link.current().negotiation
    }

    /// Whether the connection in use speaks the crossfs extension (docs/protocol.md). It
    /// can change across a reconnect, to a server with or without it.
    pub fn has_extensions(&self) -> bool {
        self.negotiation().extensions
    }

    /// The msize in force.
    pub fn msize(&self) -> u32 {
        self.negotiation().effective
    }

    /// The largest read or write payload (and readdir count) one request may carry:
    /// msize - IOHDRSZ, as Linux asks.
    pub fn max_io(&self) -> u32 {
        self.msize() - IOHDRSZ as u32
    }

    /// A fid no one else holds. It returns to the pool once a Tclunk or Tremove of it is
    /// answered (through any method), or through [`Client::free_fid`] if it was never bound.
    /// Every fid used with this client must come from here.
    pub fn alloc_fid(&self) -> Fid {
        self.link.current().fids.alloc()
    }

    /// Returns a fid that the server does not hold (an attach or walk that failed, or a
    /// partial walk) to the pool. Never pass a bound fid: clunk it instead.
    pub fn free_fid(&self, fid: Fid) {
        self.link.current().fids.release(fid);
    }

    /// Sends `msg` and waits for the reply.
    ///
    /// # Errors
    /// [`ClientError::Errno`] for Rlerror, [`ClientError::Protocol`] for a reply of the wrong
    /// type, [`ClientError::Disconnected`] if the connection is or goes down,
    /// [`ClientError::TooLarge`] for a request beyond msize, and
    /// [`ClientError::BlockingOnReaderThread`] when called from a completion callback.
    pub fn call(&self, msg: Tmessage) -> Result<Rmessage, ClientError> {
        let release_fid = match &msg {
            Tmessage::Clunk(c) => Some(c.fid),
            Tmessage::Remove(r) => Some(r.fid),
            Tmessage::Version(_) => return Err(version_refused()),
            _ => None,
        };
        self.blocking(Request::Msg(msg), release_fid, false)
            .map(Reply::into_msg)
    }

    /// Sends every message at once and waits for all replies, in order: independent
    /// requests cost one round trip together instead of one each. A request may name a fid
    /// that an earlier one in the batch binds (a Tgetattr behind a Twalk) if the server runs
    /// one connection's requests in order; on other servers it may fail.
    ///
    /// # Errors
    /// Each reply fails as for [`Client::call`].
    pub fn call_all(&self, msgs: Vec<Tmessage>) -> Vec<Result<Rmessage, ClientError>> {
        let mut refused = Vec::new();
        let requests = msgs
            .into_iter()
            .enumerate()
            .filter_map(|(i, msg)| {
                let release_fid = match &msg {
                    Tmessage::Clunk(c) => Some(c.fid),
                    Tmessage::Remove(r) => Some(r.fid),
                    Tmessage::Version(_) => {
                        refused.push(i);
                        return None;
                    }
                    _ => None,
                };
                Some((Request::Msg(msg), release_fid, false))
            })
            .collect();
        let mut replies = self
            .blocking_all(requests)
            .into_iter()
            .map(|r| r.map(Reply::into_msg));
        let total = replies.len() + refused.len();
        (0..total)
            .map(|i| {
                if refused.contains(&i) {
                    Err(version_refused())
                } else {
                    replies
                        .next()
                        .unwrap_or_else(|| Err(ClientError::Protocol("no reply".into())))
                }
            })
            .collect()
    }

    /// Sends `msg`; `done` gets the reply (Rlerror already turned into
    /// [`ClientError::Errno`]). Returns once the request is written, after waiting for a free
    /// tag if all are in use.
    ///
    /// `done` runs exactly once: normally on the thread reading replies (the reader thread,
    /// or a blocking caller reading its own), so it must be quick and must not make
    /// blocking calls on this client (those fail with
    /// [`ClientError::BlockingOnReaderThread`]); it may issue async requests. If the
    /// connection is already down, or dies while the request is pending, `done` gets
    /// [`ClientError::Disconnected`] on whichever thread notices, possibly the caller's
    /// before this returns.
    pub fn call_async(
        &self,
        msg: Tmessage,
        done: Box<dyn FnOnce(Result<Rmessage, ClientError>) + Send>,
    ) {
        let release_fid = match &msg {
            Tmessage::Clunk(c) => Some(c.fid),
            Tmessage::Remove(r) => Some(r.fid),
            Tmessage::Version(_) => return done(Err(version_refused())),
            _ => None,
        };
        self.submit(Request::Msg(msg), release_fid, Completion::Msg(done));
    }

    /// Submits `request` on the connection in use (waiting while it is being replaced).
    fn submit(&self, request: Request<'_>, release_fid: Option<Fid>, completion: Completion) {
        match self.link.conn() {
            Ok(conn) => conn.submit(request, release_fid, completion),
            Err(e) => completion.fail(e),
        }
    }

    /// As [`Client::call`], for a Tclunk that must not return its fid to the pool (the caller
    /// keeps the number).
    pub(crate) fn call_keep_fid(&self, msg: Tmessage) -> Result<Rmessage, ClientError> {
        self.blocking(Request::Msg(msg), None, false)
            .map(Reply::into_msg)
    }

    /// Writes `data` at `offset` through the open `fid`; `done` gets the count written. The
    /// payload goes to the transport from `data` itself, behind the request's head (it is
    /// copied only when the request must wait for the sender thread: one made from a
    /// completion). At most [`Client::max_io`] bytes. `done` runs
    /// as for [`Client::call_async`].
    pub fn write_async(
        &self,
        fid: Fid,
        offset: u64,
        data: &[u8],
        done: Box<dyn FnOnce(Result<u32, ClientError>) + Send>,
    ) {
        let len = data.len();
        let done: Done = Box::new(move |reply| done(reply.and_then(|m| written(m, len))));
        let request = Request::Write {
            fid,
            offset,
            data: Cow::Borrowed(data),
            with_attr: false,
        };
        self.submit(request, None, Completion::Msg(done));
    }

    /// As [`Client::write_async`], as a Twriteattr of the crossfs extension: `done` gets
    /// the count written and the file's attributes after the write (`valid` 0 if the
    /// server could not read them). A server without it answers `EOPNOTSUPP`, and has
    /// then written nothing.
    pub fn write_attr_async(&self, fid: Fid, offset: u64, data: &[u8], done: WriteAttrDone) {
        let len = data.len();
        let done: Done = Box::new(move |reply| {
            done(reply.and_then(|m| match m {
                Rmessage::Writeattr(w) => Ok((checked_count(w.count, len)?, w.attr)),
                other => Err(unexpected(other)),
            }))
        });
        let request = Request::Write {
            fid,
            offset,
            data: Cow::Borrowed(data),
            with_attr: true,
        };
        self.submit(request, None, Completion::Msg(done));
    }

    /// Reads up to `count` bytes (at most [`Client::max_io`]) at `offset` from the open
    /// `fid`; `done` gets the Rread payload, read from the socket straight into the Vec it
    /// receives. `done` runs as for [`Client::call_async`].
    pub fn read_async(
        &self,
        fid: Fid,
        offset: u64,
        count: u32,
        done: Box<dyn FnOnce(Result<Vec<u8>, ClientError>) + Send>,
    ) {
        let msg = Tmessage::Read(crossfs_wire::Tread { fid, offset, count });
        self.submit(Request::Msg(msg), None, Completion::Read(done));
    }

    /// As [`Client::read_async`], but `done` gets the payload still in the stream
    /// ([`crate::Payload`]): it may splice it from the socket, or read it where it wants it. `done`
    /// runs on the thread reading replies, which reads nothing else until it returns.
    pub fn read_payload_async(&self, fid: Fid, offset: u64, count: u32, done: PayloadDone) {
        let msg = Tmessage::Read(crossfs_wire::Tread { fid, offset, count });
        self.submit(Request::Msg(msg), None, Completion::Payload(done));
    }

    /// Blocking [`Client::read_async`].
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn read(&self, fid: Fid, offset: u64, count: u32) -> Result<Vec<u8>, ClientError> {
        let msg = Tmessage::Read(crossfs_wire::Tread { fid, offset, count });
        self.blocking(Request::Msg(msg), None, true)?.into_data()
    }

    /// Blocking [`Client::write_async`].
    ///
    /// # Errors
    /// As [`Client::call`].
    pub fn write(&self, fid: Fid, offset: u64, data: &[u8]) -> Result<u32, ClientError> {
        let request = Request::Write {
            fid,
            offset,
            data: Cow::Borrowed(data),
            with_attr: false,
        };
        written(self.blocking(request, None, false)?.into_msg(), data.len())
    }

    /// Bytes of write data sent, by path, over this client's connections (counted once
    /// written to the transport).
    pub fn write_data(&self) -> WriteData {
        self.link.current().data.snapshot()
    }

    /// Counts of every message sent and received, by type, with bytes and Rlerror counts.
    pub fn counters(&self) -> CounterSnapshot {
        self.link.current().counters.snapshot()
    }

    /// How long requests took, by type: from a request's first byte written to its reply
    /// read whole, over this client's connections (Tversion is not timed).
    pub fn latency(&self) -> LatencySnapshot {
        self.link.current().latency.snapshot()
    }

    /// True while calls can be sent at once: false once the connection has died or been
    /// shut down, and, with reconnecting, while a lost one is being replaced.
    pub fn is_connected(&self) -> bool {
        self.link.is_usable()
    }

    /// Requests currently waiting for a reply.
    pub fn in_flight(&self) -> usize {
        self.link.current().in_flight()
    }

    /// Ends the connection for good (no reconnecting): every pending call fails with
    /// [`ClientError::Disconnected`] (their completions run on this thread), later calls
    /// fail at once, and the closer given to [`Client::connect_with_closer`] runs so the
    /// reader thread exits.
    pub fn shutdown(&self) {
        self.link.shut("client shut down");
    }

    /// True once [`Client::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.link.is_shut()
    }

    /// Submits `request` and waits for its reply, reading the connection on this thread
    /// while nobody else does (see `conn.rs`). `data`: take an Rread payload raw.
    fn blocking(
        &self,
        request: Request<'_>,
        release_fid: Option<Fid>,
        data: bool,
    ) -> Result<Reply, ClientError> {
        self.blocking_all(vec![(request, release_fid, data)])
            .pop()
            .unwrap_or_else(|| Err(ClientError::Protocol("no reply".into())))
    }

    /// [`Client::blocking`] for several requests sent back to back, replies in order.
    fn blocking_all(
        &self,
        requests: Vec<(Request<'_>, Option<Fid>, bool)>,
    ) -> Vec<Result<Reply, ClientError>> {
        if requests.is_empty() {
            return Vec::new();
        }
        let conn = match self.link.conn() {
            Ok(conn) => conn,
            Err(e) => return requests.iter().map(|_| Err(e.clone())).collect(),
        };
        if conn.is_dispatching() {
            return requests
                .iter()
                .map(|_| Err(ClientError::BlockingOnReaderThread))
                .collect();
        }
        let waiter = Waiter::new(requests.len());
        for (index, (request, release_fid, data)) in requests.into_iter().enumerate() {
            let completion = Completion::Wake {
                waiter: waiter.clone(),
                index,
                data,
            };
            conn.submit(request, release_fid, completion);
        }
        conn.wait(&waiter)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.link.shut("client dropped");
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("msize", &self.msize())
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

fn version_refused() -> ClientError {
    // Renegotiating mid-connection would invalidate every tag and fid.
    ClientError::Protocol("Tversion is sent by connect only".into())
}

/// The count of an Rwrite answering a write of `len` bytes.
fn written(m: Rmessage, len: usize) -> Result<u32, ClientError> {
    match m {
        Rmessage::Write(w) => checked_count(w.count, len),
        other => Err(unexpected(other)),
    }
}

/// The count a write's reply claims, if it is no more than the `len` bytes sent.
fn checked_count(count: u32, len: usize) -> Result<u32, ClientError> {
    if count as usize <= len {
        Ok(count)
    } else {
        Err(ClientError::Protocol(format!(
            "a write's reply claims {count} bytes of a {len}-byte write"
        )))
    }
}

pub(crate) fn unexpected(m: Rmessage) -> ClientError {
    ClientError::Protocol(format!("unexpected reply {}", m.name()))
}
