//! Reconnecting: which connection a call uses, and the thread that replaces a lost one.
//!
//! A [`Client`] normally lives and dies with its connection. With
//! [`Client::enable_reconnect`], a lost connection (the server closed it, or the stream
//! failed) is replaced instead: the *redial thread* dials a new transport with the caller's
//! function, negotiates the version again, and runs the restore hooks
//! ([`Client::on_reconnect`]) on the new connection before anyone else may use it. The hooks
//! bind the fid numbers their owners still hold to the same files again (re-attach,
//! re-walk, reopen), so fid numbers survive the reconnect and nothing above the client
//! needs to know which connection carries a request.
//!
//! Requests in flight when the connection died fail with [`ClientError::Disconnected`]:
//! the client cannot know whether the server acted on them. Calls made while the
//! connection is down wait for the new one, for at most the configured wait counted from
//! the loss; after that they fail at once until the server is back. A completion callback
//! (running on a thread that reads replies) never waits: it fails at once. A waiting call
//! whose caller gives up (`give_up.rs`) fails with [`ClientError::Interrupted`].

use crate::lock;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use crate::conn::{self, Connection, Meters};
use crate::version::negotiate;
use crate::{Client, ClientError};

/// A new transport to the server, as [`Client::enable_reconnect`]'s dial function returns
/// it: the two halves of one connected stream and what closes it.
pub struct Transport {
    /// The read half.
    pub reader: Box<dyn Read + Send>,
    /// The write half.
    pub writer: Box<dyn Write + Send>,
    /// Run once when the connection ends (typically a `shutdown(Both)` of the socket).
    pub closer: Box<dyn FnOnce() + Send>,
    /// A duplicate of the socket, watched for the server hanging up while no request is in
    /// flight (nobody reads the stream then), so that a lost connection is noticed, and
    /// replaced, when it happens rather than by the next call. The closer must make it
    /// report a hang-up (a socket `shutdown` does).
    pub hangup: Option<OwnedFd>,
    /// The socket `reader` reads, read by nothing else (no buffering in `reader`): a
    /// [`crate::Payload`] offers it for splicing its bytes out. `None` for a transport
    /// that is not one socket read as it is.
    pub socket: Option<OwnedFd>,
}

/// Opens a new transport to the same server.
pub type Dial = Box<dyn Fn() -> io::Result<Transport> + Send + Sync>;
/// Restores server-side state on a new connection (see [`Client::on_reconnect`]).
pub type RestoreHook = Box<dyn Fn(&Client) -> Result<(), ClientError> + Send + Sync>;

/// First pause between failed dials; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Which connection calls go to, shared by the client, its connections' loss hooks and the
/// redial thread.
pub(crate) struct Link {
    slot: Mutex<Slot>,
    /// Signalled when the connection is lost, replaced or made ready, or the client shuts.
    changed: Condvar,
}

struct Slot {
    conn: Arc<Connection>,
    /// Calls may use `conn` (false while a new connection is being restored).
    ready: bool,
    /// Reconnecting is enabled.
    redials: bool,
    /// The client was shut down or dropped: no more reconnecting.
    shut: bool,
    /// When the connection in use was found lost.
    lost_at: Option<Instant>,
    /// The redial thread while it runs the restore hooks: it alone may use `conn`.
    restorer: Option<ThreadId>,
    /// How long calls wait for a lost connection to come back.
    wait: Duration,
    /// Connections made after the first.
    reconnects: u64,
}

impl Link {
    pub(crate) fn new(conn: Arc<Connection>) -> Arc<Link> {
        Arc::new(Link {
            slot: Mutex::new(Slot {
                conn,
                ready: true,
                redials: false,
                shut: false,
                lost_at: None,
                restorer: None,
                wait: Duration::ZERO,
                reconnects: 0,
            }),
            changed: Condvar::new(),
        })
    }

    /// What a connection runs when it dies unexpectedly: wakes the redial thread.
    pub(crate) fn loss_hook(link: &Arc<Link>) -> Box<dyn Fn() + Send + Sync> {
        let link = Arc::downgrade(link);
        Box::new(move || {
            if let Some(link) = link.upgrade() {
                let _slot = lock(&link.slot);
                link.changed.notify_all();
            }
        })
    }

    /// The connection a call should use now, waiting (outside completions) while a lost
    /// one is being replaced. A dead connection is returned when there is nothing to wait
    /// for: the request then fails with that connection's reason.
    pub(crate) fn conn(&self) -> Result<Arc<Connection>, ClientError> {
        let mut slot = lock(&self.slot);
        loop {
            let usable = slot.ready && slot.conn.is_connected();
            if usable || slot.shut || !slot.redials || slot.restorer == Some(thread::current().id())
            {
                return Ok(slot.conn.clone());
            }
            let lost_at = *slot.lost_at.get_or_insert_with(Instant::now);
            if conn::dispatching_any() {
                return Err(reconnecting(lost_at));
            }
            let Some(left) = (lost_at + slot.wait).checked_duration_since(Instant::now()) else {
                return Err(reconnecting(lost_at));
            };
            let give_up = crate::give_up::current();
            let step = match give_up {
                Some(_) => left.min(crate::GIVE_UP_POLL),
                None => left,
            };
            crate::before_wait::run_hook();
            slot = self
                .changed
                .wait_timeout(slot, step)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if give_up.is_some_and(|g| (g.check)(g.arg)) {
                return Err(ClientError::Interrupted);
            }
        }
    }

    /// The connection in use, whatever its state (for counters and negotiation).
    pub(crate) fn current(&self) -> Arc<Connection> {
        lock(&self.slot).conn.clone()
    }

    /// True while calls can be sent at once.
    pub(crate) fn is_usable(&self) -> bool {
        let slot = lock(&self.slot);
        slot.ready && slot.conn.is_connected()
    }

    pub(crate) fn redials(&self) -> bool {
        let slot = lock(&self.slot);
        slot.redials && !slot.shut
    }

    pub(crate) fn is_shut(&self) -> bool {
        lock(&self.slot).shut
    }

    pub(crate) fn reconnects(&self) -> u64 {
        lock(&self.slot).reconnects
    }

    /// Stops reconnecting and kills the connection in use.
    pub(crate) fn shut(&self, reason: &str) {
        let conn = {
            let mut slot = lock(&self.slot);
            slot.shut = true;
            self.changed.notify_all();
            slot.conn.clone()
        };
        conn.kill(reason.into(), false);
    }
}

fn reconnecting(lost_at: Instant) -> ClientError {
    ClientError::Disconnected(format!(
        "connection to the server lost {:.1} s ago; reconnecting",
        lost_at.elapsed().as_secs_f64()
    ))
}

/// Starts the redial thread for `client` (see the module doc).
pub(crate) fn enable(
    client: &Arc<Client>,
    link: &Arc<Link>,
    dial: Dial,
    wait: Duration,
) -> io::Result<()> {
    {
        let mut slot = lock(&link.slot);
        if slot.redials {
            return Err(io::Error::other("reconnecting is already enabled"));
        }
        slot.redials = true;
        slot.wait = wait;
    }
    let (link, client) = (link.clone(), Arc::downgrade(client));
    thread::Builder::new()
        .name("9p-redial".into())
        .spawn(move || redial_thread(&link, &client, &dial))
        .map(drop)
}

fn redial_thread(link: &Arc<Link>, client: &Weak<Client>, dial: &Dial) {
    loop {
        // Sleep until the connection in use dies.
        let lost_at = {
            let mut slot = lock(&link.slot);
            while !slot.shut && slot.conn.is_connected() {
                slot = link
                    .changed
                    .wait(slot)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if slot.shut {
                return;
            }
            slot.ready = false;
            *slot.lost_at.get_or_insert_with(Instant::now)
        };
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 0u64;
        loop {
            let Some(client) = client.upgrade() else {
                return;
            };
            attempts += 1;
            match reconnect(link, &client, dial) {
                Ok(()) => {
                    tracing::warn!(
                        after_ms = lost_at.elapsed().as_millis() as u64,
                        attempts,
                        "9P connection restored"
                    );
                    break;
                }
                Err(e) if attempts == 1 => tracing::warn!("reconnecting to the server: {e}"),
                Err(e) => tracing::debug!(attempts, "reconnecting to the server: {e}"),
            }
            drop(client);
            let slot = lock(&link.slot);
            if slot.shut {
                return;
            }
            let _ = link.changed.wait_timeout(slot, backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// One attempt: dial, negotiate, restore, and hand the connection to callers.
fn reconnect(link: &Arc<Link>, client: &Client, dial: &Dial) -> Result<(), ClientError> {
    let old = link.current();
    let transport = dial().map_err(|e| ClientError::Disconnected(format!("dialing: {e}")))?;
    let Transport {
        reader,
        mut writer,
        closer,
        hangup,
        socket,
    } = transport;
    let mut reader = BufReader::with_capacity(conn::READ_BUFFER, reader);
    let negotiation = match negotiate(&mut reader, &mut writer, &client.config, &old.counters) {
        Ok(n) => n,
        Err(e) => {
            closer();
            return Err(e);
        }
    };
    let shared = Connection::new(
        &client.config,
        (reader, socket),
        writer,
        Meters {
            counters: old.counters.clone(),
            latency: old.latency.clone(),
            data: old.data.clone(),
        },
        negotiation,
        closer,
        old.fids.clone(),
    );
    // Everything above the client sized its requests for the first connection.
    if negotiation.effective < old.negotiation.effective {
        let why = format!(
            "the server now offers msize {} (was {})",
            negotiation.effective, old.negotiation.effective
        );
        shared.kill(why.clone(), false);
        return Err(ClientError::Protocol(why));
    }
    shared.set_loss_hook(Link::loss_hook(link));
    if let Err(e) = conn::start_threads(&shared, hangup) {
        let why = format!("starting the reader: {e}");
        shared.kill(why.clone(), false);
        return Err(ClientError::Disconnected(why));
    }
    {
        let mut slot = lock(&link.slot);
        if slot.shut {
            drop(slot);
            shared.kill("client shut down".into(), false);
            return Err(ClientError::Disconnected("client shut down".into()));
        }
        slot.conn = shared.clone();
        slot.restorer = Some(thread::current().id());
    }
    let restored = client.run_restore_hooks();
    let mut slot = lock(&link.slot);
    slot.restorer = None;
    if let Err(e) = restored {
        drop(slot);
        shared.kill(format!("restoring state: {e}"), false);
        return Err(e);
    }
    slot.ready = true;
    slot.lost_at = None;
    slot.reconnects += 1;
    link.changed.notify_all();
    Ok(())
}
