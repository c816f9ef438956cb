//! A 9P2000.L file server: exports one directory so that any 9P2000.L client, above all the
//! Linux kernel's v9fs, sees what a local program would see there.
//!
//! # What it owns, what it does not
//! This crate is the 9P door of the export core (`crossfs-export`): it owns the fids of
//! each connection and the handling of every request, from the byte stream a connection
//! hands it to the replies it writes back. What a request does to exported files
//! (confinement, names, reserved names, policy, ownership of new files, the descriptor
//! budget) is the core's: a handler translates the message into one core call and the
//! answer back. It does not listen, accept or configure sockets (that is
//! `crossfs-transport`), parse command lines or print anything (the CLI). A caller makes a
//! [`Server`] from a [`ServerConfig`] and calls [`Server::serve_connection`] with each
//! connection's two directions, on a thread of its own:
//!
//! ```no_run
//! # use std::os::unix::net::UnixStream;
//! # fn demo(stream: UnixStream) -> Result<(), Box<dyn std::error::Error>> {
//! use crossfs_server::{Server, ServerConfig};
//! let server = Server::new(ServerConfig { export: "/srv/src".into(), ..Default::default() })?;
//! let writer = stream.try_clone()?;
//! std::thread::spawn(move || server.serve_connection(stream, writer, "unix:client".into()));
//! # Ok(()) }
//! ```
//!
//! # Protocol choices
//! - msize: the smaller of the client's and [`ServerConfig::max_msize`] (1 MiB + 4 KiB by
//!   default, so that a 1 MiB read or write travels in one message);
//!   every reply is strictly smaller (Linux rejects a reply of size >= msize). A version
//!   string not starting with "9P2000.L", or an msize below 4096, is answered "unknown". A
//!   Tversion waits for outstanding requests, then clunks every fid.
//! - Requests before a successful Tversion get `EPROTO`. Framing errors (size < 7, larger
//!   than the msize in force, a truncated frame) close the connection with a warning; a body
//!   that does not decode gets `EINVAL`, an unknown type `EOPNOTSUPP`, with the request's tag
//!   (and is counted as "unknown" in the statistics, even when its number is a reply's).
//!   A tag reused while its request is in flight closes the connection (a reply to it would
//!   be ambiguous).
//! - An unknown fid is `EBADF`; a `newfid` already in use is `EBADF` too. More fids than
//!   [`ServerConfig::max_fids`] is `EMFILE`, and so is a connection's share of descriptors
//!   used up (see Limits). Tauth is `EOPNOTSUPP` unless a token is configured (see
//!   Security).
//! - Qids: type from the file mode, version 0 (the qid names the inode; freshness comes from
//!   Tgetattr), path the inode number, with a per-device index mixed into the top bits for
//!   inodes on another device than the export root.
//! - Tlock never blocks the server: a conflict answers `BLOCKED` and the client retries.
//!
//! # Security
//! No request can reach outside the export. Names are single components: "", ".", "..", and
//! names holding "/" or NUL are refused with `EINVAL` in every message that takes a name.
//! Every fid holds an `O_PATH|O_NOFOLLOW` descriptor; a walk step opens one name beneath the
//! previous descriptor (with `openat2` and `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
//! RESOLVE_NO_MAGICLINKS` where the kernel has it), so a symlink can be walked *to* (the fid
//! names the link, which the client reads with Treadlink) but never *through*. Opening a fid
//! reopens its inode through `/proc/self/fd/N`, which lands on the inode and follows nothing;
//! symlinks are refused with `ELOOP`. Every other operation on a fid's inode goes through its
//! descriptor, never through a path built from the export root, so renaming directories or
//! swapping one for a symlink between requests redirects nothing. Device nodes can neither be
//! created nor opened unless [`ServerConfig::allow_devices`] is set. Set-user-ID and
//! set-group-ID bits from clients are stripped, and cleared from files clients write to,
//! unless [`ServerConfig::allow_setuid`] is set (the rules are `crossfs_export::policy`'s). With
//! [`ServerConfig::read_only`] every mutation is refused with `EROFS`. With
//! [`ServerConfig::auth_token`], Tattach needs an `afid` from Tauth to which the client has
//! written the token (`EACCES` otherwise, with a warning); the token is compared in time
//! that does not depend on where it differs. 9P2000.L is not encrypted, so the token keeps
//! out those who cannot read the traffic, no one else. `/proc` must be
//! mounted: [`Server::new`] fails clearly otherwise.
//!
//! # Limits: what one client can make the server hold
//! - Connections: at most [`ServerConfig::max_connections`] (256 by default) are served at
//!   once; one more is closed at once with a warning, and the others carry on.
//! - Walks: at most 16 names per Twalk (MAXWELEM), enforced by the decoder: more is
//!   `EINVAL` with the request's tag, and nothing is walked.
//! - Memory, per connection: every length read from the wire is bounded before anything is
//!   allocated. At most `max_in_flight` queued or running requests, and no more than
//!   [`ServerConfig::max_buffered_bytes`] of them (4 MiB by default; one request is always
//!   admitted, and none is larger than msize), plus the one the reader holds; a reply
//!   buffer of at most msize per worker; a 64 KiB read buffer; extended attribute values held by xattr fids (fetched by Txattrwalk and not yet
//!   clunked, or being written after Txattrcreate) at most
//!   [`ServerConfig::max_pending_xattr_bytes`] together (1 MiB by default; the Txattrwalk or
//!   Twrite that would pass it gets `ENOSPC`, as setxattr(2) does when a file system is out
//!   of room for attributes; a value's buffer grows as its chunks arrive, nothing is
//!   reserved from the announced size); and the fid table, at most
//!   [`ServerConfig::max_fids`] entries of a few hundred bytes. A client that stops reading
//!   replies stops being read. [`Server::stats_json`] reports what each connection holds
//!   of all this, counted from what was allocated (`memory` per connection), and the
//!   export's handle cache, which all connections share, once.
//! - Descriptors, server-wide: [`ServerConfig::fd_budget`], by default the open-file limit
//!   (raised to its hard maximum) less an eighth, at least 64, kept for listeners, sockets
//!   and descriptors a request uses briefly. Half of it is the export's handle cache: every
//!   fid holds a handle on its inode whose `O_PATH` descriptor the cache closes when the
//!   least recently used and idle, and opens again on the next use (by file handle, or by a
//!   confined walk that must find the same inode; see `crossfs_export::handles`), so no walk
//!   fails for how many fids clients hold. The other half is for open files: a connection
//!   may open one more only if at least `min(what it then holds, budget / 4)` stay free, and
//!   may always hold a small floor (budget / 64, at most 64) while any is free; past that its
//!   opens get `EMFILE`. So a lone connection can use three quarters of it, and whatever one
//!   connection does the others, old and new, still find at least a quarter free.
//!
//! - Change events (with [`Server::with_events`]): at most four event streams per
//!   connection (`EMFILE` past that), each queuing at most the hub's ring capacity of events
//!   (a few hundred bytes each) before it collapses into one "rescan"; a long-poll Tread
//!   holds a worker for at most five seconds.
//!
//! # Concurrency
//! Each connection has a reader (the thread that called [`Server::serve_connection`]) and
//! `workers_per_connection` workers. The reader executes requests that cannot block for
//! long itself and writes their replies before reading on: walks, getattr, clunk, statfs,
//! readlink, readdir, xattr and lock requests (locks never wait), creating directories,
//! links, nodes and renames, opening a regular file or a directory, and reads that the page
//! cache can answer whole (`preadv2` with `RWF_NOWAIT`). That spares the two thread
//! hand-offs per request that otherwise dominate a round trip. Everything else (reads that
//! need the disk, writes, fsync, Tlcreate, setattr, unlinking, opening fifos and devices)
//! goes to the workers, so a request that blocks (a fifo with no writer, a slow disk) holds
//! up neither the reader nor the connection's other requests. A large write's payload is
//! spliced by the reader from the socket into a pipe, and by its worker from the pipe into
//! the file ([`ServerConfig::splice_writes`]). Replies are written whole,
//! one at a time; Rflush follows the flushed request's reply; at most `max_in_flight`
//! requests wait for or run on workers, after which the reader stops reading.
//!
//! # Identity
//! The server acts with its own credentials and reports real uid, gid and mode. The uname and
//! n_uname of Tattach are recorded (logged) but grant nothing. Tsetattr's uid and gid are
//! applied with `fchownat`, which succeeds only if the server itself may make the change.
//! When the server runs as root, files made by Tlcreate, Tmkdir, Tsymlink and Tmknod are given
//! to the attaching user (n_uname, unless it is "none", `!0`) and the requested gid, so that
//! files a caller creates belong to the caller, as on a local file system; otherwise the gid
//! is ignored. The chown comes before the mode is set, and set-id bits follow the rules of
//! the Security section. Permission bits of a new file are exactly those asked for: the client has
//! already applied its umask, so the server's own is undone.
//!
//! # Known limits
//! - Opening a fifo through the server blocks a worker until the other end opens (Linux's
//!   v9fs opens fifos locally, so this takes a client that asks for it).
//! - The requests the reader runs itself can still be slowed by the file system: a walk or
//!   readdir of a directory not in the dentry cache reads the disk, and a Tclunk that drops
//!   the last reference to an unlinked file frees its blocks. The connection's next request
//!   waits that long; an export on a network file system that hangs would hang the reader.
//! - The descriptor budget is per [`Server`]: several servers in one process should be
//!   given explicit budgets that add up to less than the open-file limit.
//! - A peer that stops reading *and* keeps its socket open holds its connection's thread
//!   until it goes away; other connections are unaffected.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod error;
mod fid;
mod ops;
mod piped;
mod server;
mod session;
mod sink;
mod splice;
mod stats;

pub use config::{AuthToken, ServerConfig};
pub use error::ServerError;
pub use server::Server;

/// The Tattach aname that asks for the change-event stream instead of the export root
/// (optionally followed by `?since=EPOCH:SEQ` to resume); see [`Server::with_events`].
pub const EVENTS_ANAME: &str = "crossfs:events";
