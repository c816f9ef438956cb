//! A pipelined 9P2000.L client over one connection.
//!
//! What it owns: one connection's protocol state. It negotiates the version and msize
//! (`min(requested, transport max, server)`, logged and kept in [`MsizeNegotiation`]), hands
//! out tags from a fixed table (callers wait when all are in flight: back-pressure), allocates
//! and recycles fids, writes whole frames under one lock (a write's data from the caller's
//! buffer, behind its head in one `writev`), and reads replies on one thread at
//! a time, matching each to its request. Many requests may be in flight at once from any
//! number of threads; [`Client::call_async`], [`Client::read_async`] and
//! [`Client::write_async`] let a FUSE thread hand a request over and return, the reply
//! finishing it on the thread that reads it. A blocking call reads its own reply when no
//! other thread is reading (leader/follower), so a lone caller is woken by the kernel
//! directly rather than by a reader thread: one thread hand-off per round trip instead of
//! two. `cargo run --release -p crossfs-client --example client_rtt` measures round trips/s.
//!
//! What it does not do: no FUSE, no caching, no opening of sockets (it takes a connected
//! reader and writer, so it is tested over socket pairs and loopback TCP alike), and no
//! retrying of requests: when the connection dies, every pending request fails with
//! [`ClientError::Disconnected`]. Later requests fail too, unless the caller enabled
//! reconnecting ([`Client::enable_reconnect`]): then they wait for a new connection, on
//! which the caller's restore hooks have bound its fid numbers again, unless the caller
//! gives up first ([`give_up_when`]: a FUSE request whose process got a signal).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use crossfs_client::{Client, ClientConfig};
//! let stream = std::net::TcpStream::connect("127.0.0.1:5640")?;
//! let client = Client::connect(stream.try_clone()?, stream, &ClientConfig::default())?;
//! let (root, _qid) = client.attach(b"root", b"/srv/export", 0)?;
//! let newfid = client.alloc_fid();
//! let qids = client.walk(root, newfid, &[b"src", b"main.rs"])?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod before_wait;
mod client;
mod config;
mod conn;
mod error;
mod fids;
mod give_up;
mod held;
mod ops;
mod payload;
mod redial;
mod request;
mod tags;
mod version;

/// Locks a mutex, going on if a panicking thread poisoned it: nothing runs caller code
/// while holding the client's locks (completions run with only the read side held, and
/// never touch it), so a poisoned lock still guards consistent state.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub use before_wait::{before_wait, in_completion, set_before_wait};
pub use client::{Client, WriteAttrDone, WriteData};
pub use config::{ClientConfig, MsizeNegotiation};
pub use crossfs_wire::{
    CounterSnapshot, DirEntry, DirEntryAttr, Fid, Qid, Rgetattr, Rmessage, Tmessage,
};
pub use error::ClientError;
pub use give_up::{caller_gave_up, current as give_up_now, give_up_when, GiveUp, GIVE_UP_POLL};
pub use held::holding_sends;
pub use payload::Payload;
pub use redial::{Dial, RestoreHook, Transport};
pub use request::PayloadDone;
