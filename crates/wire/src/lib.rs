//! The 9P2000.L wire protocol: message types, encoding and decoding.
//!
//! This crate owns the byte layout of every 9P2000.L message and nothing else: it performs no
//! I/O, holds no connection state and knows nothing about files. A server or client reads a
//! frame from its transport, hands the bytes to [`decode_tframe`] / [`decode_rframe`], and
//! writes what [`Tmessage::encode`] / [`Rmessage::encode`] produce.
//!
//! Guarantees the rest of crossfs relies on:
//! - Decoding never panics and never allocates more than the frame it was given: every length
//!   read from the wire is checked against the bytes that remain before anything is allocated.
//! - A frame whose header is sound but whose body is not still yields its tag
//!   ([`Tframe::msg`] is an `Err`), so a server can answer `Rlerror` instead of dropping the
//!   connection.
//! - Names and strings are bytes ([`Vec<u8>`]): Linux file names need not be UTF-8.
//!
//! The crossfs extension (`9P2000.L.crossfs`, type numbers from [`EXTENSION_FIRST`]) adds
//! compound messages that save round trips; they live in the same table and are decoded by
//! the same code. `docs/protocol.md` documents them (generated: `cargo run -p crossfs-wire
//! --example protocol_doc`).
//!
//! The message table lives in one place (`messages.rs`); the enums, the type numbers, the
//! names used by counters and the codec are all generated from it.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod codec;
mod counters;
mod dirent;
mod frame;
mod messages;
mod types;

pub use codec::DecodeError;
pub use counters::{
    CounterSnapshot, LatencyHistogram, LatencyHistograms, LatencySnapshot, LatencySummary,
    MessageCount, MessageCounters, LATENCY_BUCKETS,
};
pub use dirent::{DirEntry, DirEntryAttr, DirEntryAttrIter, DirEntryIter, FileData, FileDataIter};
pub use frame::{
    check_frame_size, decode_rframe, decode_tframe, encode_rread_with, encode_twrite,
    encode_twriteattr, message_name, Rframe, Tframe, WriteHead, DEFAULT_MSIZE, HEADER_LEN, IOHDRSZ,
    MIN_MSIZE, RREAD_HEADER_LEN, TWRITE_HEADER_LEN,
};
pub use messages::*;
pub use types::*;

mod protocol_doc;
pub use protocol_doc::protocol_doc;

/// The crossfs server's order promise (docs/protocol.md, "Order"): it runs a Tsetattr or
/// Tsetattrget that changes no size, and a Twrite or Twriteattr of at most this many
/// bytes through a file opened without `O_DIRECT`, `O_SYNC` or `O_DSYNC`, before it reads
/// the connection's next request. A client may send such changes without waiting for
/// their answers: every later request on the connection finds them done.
pub const INLINE_WRITE_MAX: usize = 64 * 1024;
