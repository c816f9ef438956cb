//! A 9P2000.L file server: exports one directory so that any 9P2000.L client, above all the
//! Linux kernel's v9fs, sees what a local program would see there.
//!
//! # What it owns, what it does not
//! This crate owns the export (an `O_PATH` handle on its root), the fids of each connection,
//! and the handling of every request, from the byte stream a connection hands it to the
//! replies it writes back. It does not listen, accept or configure sockets (that is
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
//! - msize: the smaller of the client's and [`ServerConfig::max_msize`] (1 MiB by default);
//!   every reply is strictly smaller (Linux rejects a reply of size >= msize). A version
//!   string not starting with "9P2000.L", or an msize below 4096, is answered "unknown". A
//!   Tversion waits for outstanding requests, then clunks every fid.
//! - Requests before a successful Tversion get `EPROTO`. Framing errors (size < 7, larger
//!   than the msize in force, a truncated frame) close the connection with a warning; a body
//!   that does not decode gets `EINVAL`, an unknown type `EOPNOTSUPP`, with the request's tag.
//!   A tag reused while its request is in flight closes the connection (a reply to it would
//!   be ambiguous).
//! - An unknown fid is `EBADF`; a `newfid` already in use is `EBADF` too. More fids than
//!   [`ServerConfig::max_fids`] is `EMFILE`. Tauth is `EOPNOTSUPP`.
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
//! created nor opened unless [`ServerConfig::allow_devices`] is set. With
//! [`ServerConfig::read_only`] every mutation is refused with `EROFS`. Every length read from
//! the wire is bounded before anything is allocated; a connection's memory is bounded by
//! `max_in_flight` requests of at most msize each; a client that stops reading replies stops
//! being read. `/proc` must be mounted: [`Server::new`] fails clearly otherwise.
//!
//! # Identity
//! The server acts with its own credentials and reports real uid, gid and mode. The uname and
//! n_uname of Tattach are recorded (logged) but grant nothing. Tsetattr's uid and gid are
//! applied with `fchownat`, which succeeds only if the server itself may make the change.
//! When the server runs as root, files made by Tlcreate, Tmkdir, Tsymlink and Tmknod are given
//! to the attaching user (n_uname, unless it is "none", `!0`) and the requested gid, so that
//! files a caller creates belong to the caller, as on a local file system; otherwise the gid
//! is ignored. Permission bits of a new file are exactly those asked for: the client has
//! already applied its umask, so the server's own is undone.
//!
//! # Known limits
//! - Opening a fifo through the server blocks a worker until the other end opens (Linux's
//!   v9fs opens fifos locally, so this takes a client that asks for it).
//! - A peer that stops reading *and* keeps its socket open holds its connection's thread
//!   until it goes away; other connections are unaffected.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod config;
mod error;
mod fid;
mod names;
mod ops;
mod server;
mod session;
mod stats;
mod sys;

pub use config::ServerConfig;
pub use error::ServerError;
pub use server::Server;
