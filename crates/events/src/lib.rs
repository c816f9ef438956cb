//! Change events for an exported tree.
//!
//! This crate owns watching a directory tree (fanotify, inotify within a watch budget, or
//! polling), the event model, coalescing, bounded fan-out to subscribers and sync cookies. It
//! must not touch 9P, FUSE or sockets: the server reports its own changes through
//! [`EventHub::report`] and serves [`Subscriber::read_blocking`] from a long-poll read; the
//! mount client consumes the JSON lines.
//!
//! ```text
//!  kernel queue ──► watcher (one 64 KiB buffer, never blocks) ──┐
//!  9P handlers ──► EventHub::report ────────────────────────────┤
//!                                                               ▼
//!                               coalescer (per path: 20 ms quiet / 200 ms max, burst → rescan)
//!                                                               ▼
//!                 engine: lstat vs snapshot → Created/Removed/Modified/Attrib/Renamed
//!                                                               ▼
//!                 fan-out: seq numbers, history ──► per-subscriber ring (full → one Rescan)
//! ```
//!
//! Guarantees:
//! - Nothing is lost silently: a kernel overflow becomes a rescan against the hub's snapshot
//!   (publishing the real differences); a subscriber that falls behind gets one `Rescan`.
//! - No producer waits for a consumer: the watcher thread never blocks on subscribers, and
//!   [`EventHub::report`] never blocks on the watcher thread.
//! - Applying the events in order to a copy of the tree (re-reading a subtree on `Rescan`)
//!   reproduces the tree as of the last event; [`EventHub::sync_cookie`] bounds "as of".
//! - Names are bytes ([`RelPath`]); nothing outside the export is ever stat'ed or listed.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod beneath;
mod coalesce;
mod config;
mod cookie;
mod engine;
mod error;
mod event;
mod hub;
mod path;
mod snapshot;
mod subscriber;
mod sys;
mod watch;

pub use config::{BackendKind, HubConfig};
pub use error::EventError;
pub use event::{Attrs, Change, DirAttrs, Event, EventKind};
pub use hub::{EventHub, HubStats};
pub use path::{PathError, RelPath};
pub use snapshot::{diff, Snapshot};
pub use subscriber::{Subscriber, MIN_READ_BYTES};
