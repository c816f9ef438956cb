//! crossfs-mount: the FUSE view of a 9P2000.L export.
//!
//! [`mount`] takes a connected [`crossfs_client::Client`] and an attached root fid and serves
//! the export at a mount point through the kernel's FUSE module (its own session, `session/`, no libfuse),
//! until [`MountHandle::unmount`] or an outside `umount`.
//!
//! What it owns: the FUSE side of crossfs — node ids and the fid behind each (deduplicated by
//! `qid.path`, clunked when the kernel forgets the node), open handles, and the kernel's
//! cache policy: entry and attribute timeouts, page-cache keeping, readdirplus, writeback
//! (see [`CacheMode`]); negative entries for missing names (see [`NegativeTtl`]); symlink
//! targets cached by the kernel (`FUSE_CACHE_SYMLINKS`); and request size: `FUSE_MAX_PAGES`
//! with writes up to 1 MiB (never more than one Twrite can carry) and the mount's readahead
//! raised to match, so a large read or write is one 9P message.
//!
//! Directory replicas (`known/replica/`): while change events are followed and the server speaks
//! crossfs's extension of 9P2000.L (docs/protocol.md), the first lookup in a directory
//! fetches the whole directory with every entry's attributes (Treaddirattr), and lookups
//! of names present or missing, stats and listings of it are answered here from then on,
//! kept exact by the events (see that module's doc for what makes each answer exact). A
//! node answered from a replica has no fid until something needs one. While events are
//! followed the kernel keeps names, missing names, attributes and listings
//! (`FOPEN_CACHE_DIR`) until an event invalidates them, in every mode but `never`.
//!
//! While events are followed, an open for reading waits for its first read that the page
//! cache cannot answer, which opens and reads in one round trip (Twalkread), or is answered
//! from the directory's small files fetched together (`ahead/small_files.rs`, Treadfiles),
//! which in `auto` mode go into the kernel's page cache as they come
//! (`ahead/pushed_pages.rs`).
//! A directory whose names a program looks up is listed ahead through the mount point
//! (`ahead/primed_dirs.rs`), and during a walk of a tree the replicas of the subdirectories
//! a program lists are fetched ahead (`ahead/tree_walk.rs`).
//! The kernel's question before every write, whether the file has a `security.capability`,
//! is answered from what the server said is missing (`known/missing_xattrs.rs`).
//! Opening a file again soon after closing it, for reading, reuses the open fid kept from the
//! last time (`known/idle.rs`): no round trip. Round trips without a replica: with the extension,
//! a LOOKUP costs one (Twalkgetattr), an open one (Twalkopen), binding and listing a
//! directory answered from its parent's replica one (Twalkreaddirattr), a create one (Tcreateattr: the file, its node's fid and its
//! attributes; Tcreateattrdir also returns the directory's), a mkdir one (Tmkdirattr: the
//! directory made and bound, its attributes and its parent's), a setattr one (Tsetattrget),
//! a write one (Twriteattr: with the file's attributes afterwards), an unlink or rename one
//! (Tunlinkatattr, Trenameatattr: with the directories' attributes afterwards), a
//! fallocate one (Tfallocate; without the extension, EOPNOTSUPP). What a
//! change returns of its directory answers the GETATTR the kernel sends before the next
//! change in it, while nothing else touched the directory; what a setattr or a write
//! returns of the file answers the GETATTR the kernel sends after it (after every write,
//! and before a chown), while nothing else marked the file. Over
//! plain 9P2000.L, a LOOKUP of a name the
//! mount has resolved before costs one (Twalk and a Tgetattr of the known node's fid, sent
//! together; the reply is used only if the walk finds the same file), a new name two (a
//! Tgetattr is never sent ahead of the Rwalk that binds its fid: 9P does not order
//! requests, and diod drops the connection). In `never`
//! mode a `stat` is one LOOKUP: the GETATTR that follows is answered with what the LOOKUP
//! fetched (see [`CacheMode::Never`] for the exact promise). A READDIRPLUS (the kernel lists
//! every directory from its start that way) costs, for each name listed whose known node has
//! the qid the Treaddir gave, no walk, and no Tgetattr either if the attributes the mount
//! fetched for that file may be reused (nothing can have changed them since: see
//! `known/listed_attrs.rs`); otherwise one Tgetattr of that node's fid. With the extension a
//! listing carries the attributes itself (Treaddirattr), and costs nothing per entry.
//!
//! Change events (`changes/`, started by [`MountHandle::follow_changes`] on a second
//! connection): the kernel's caches are invalidated as the host changes, and host changes
//! are replayed on the mount for the guest's file watchers; see that module's doc. The
//! replay system calls themselves are public ([`replay_calls`]): `crossfs agent` makes the
//! same calls on a virtiofs mount, whose door answers them.
//!
//! Layout: the mount's state (`fs::MountState`) is made of parts, each in its folder.
//! - `session/`: the FUSE session: INIT, worker threads on cloned `/dev/fuse` descriptors,
//!   FUSE over io_uring where the kernel offers it (a ring and a thread per CPU queue),
//!   requests decoded with the workspace's FUSE codec (`crossfs-fuse-abi`) and dispatched
//!   with their replies, notifications, fusermount3 for a user who may not mount.
//! - `fs/`: the FUSE side. `face.rs` implements `session::Filesystem` and hands each request
//!   to a `MountState` method in the file of its kind (`entry.rs`, `open.rs`, `create.rs`,
//!   `read_write.rs`, `pushes.rs`, `dir.rs`, `attr.rs`, `xattr.rs`, `lock.rs`,
//!   `replayed.rs`).
//! - `remote/`: the 9P calls the mount makes, and what the server supports
//!   (`support.rs`), learned from its answers.
//! - `known/`: what the mount knows: node ids (`inode/`), open handles (`handle.rs`),
//!   kept opens (`idle.rs`), directory replicas (`replica/`), when fetched attributes may
//!   answer again (`listed_attrs.rs`), missing extended attributes (`missing_xattrs.rs`),
//!   and the kernel's cache policy (`cache.rs`). Nothing there sends anything.
//! - `ahead/`: what the mount fetches ahead (small files, pushed pages, primed
//!   directories, tree walks). Dropping any of it changes no answer.
//! - `behind.rs`: changes sent behind (`--changes behind`): the queue of setattrs,
//!   writes, creates and removals answered here and not yet by the server, their answers
//!   and refusals; `fs/behind.rs`, `fs/create_behind.rs` and `fs/unlink_behind.rs`
//!   decide what goes behind and what the kernel is told meanwhile.
//! - `changes/`: the change feed, which holds only what it must touch
//!   (`changes::FeedTarget`), not the FUSE side's state.
//! - `mount.rs` (the session and [`MountHandle`]), `direct.rs` (mount(2) itself, so that the
//!   table says `fuse.crossfs` and only this mount is ever unmounted), `table.rs` (the mount table: which mount
//!   at a point is this one), `restore.rs` (binding again after a
//!   reconnect), `config.rs`, `stats.rs`, `attr.rs` (attributes as the kernel wants them),
//!   `fid.rs`, `sync.rs` (the one way a mutex is taken).
//!
//! What it does not touch: sockets and transports (the CLI connects and hands over a client),
//! 9P encoding (the wire and client crates), and the exported files themselves (the server).
//!
//! Semantics worth knowing, each a consequence of 9P2000.L or of FUSE:
//! - `rename` with RENAME_NOREPLACE or RENAME_EXCHANGE fails with EINVAL: 9P has no atomic
//!   form, and a check-then-rename would race.
//! - POSIX locks go to the server (Tlock/Tgetlock; F_SETLKW polls with back-off). flock(2)
//!   locks stay in the local kernel: they exclude processes on this mount, not on the host.
//! - `access(2)` is not forwarded; the server checks permissions on each real operation,
//!   with its own credentials. With `allow_other` the kernel first checks every caller
//!   against the modes and owners shown (`default_permissions`), as on a local file system.
//! - `st_ino` is the node id, which is the server's `qid.path` (for crossfs's server, the
//!   host's inode number) unless a node the kernel still holds has that number (see
//!   `known::inode::InodeTable`); hard links share it.
//! - With `uid`/`gid` set every file is shown as owned by them; the server's ownership is
//!   unchanged and still decides access.
//! - O_APPEND writes are appended by the server at its end of file (9P has no append
//!   offset), except in `always` mode, where the writeback cache owns the file size.
//! - Node ids hold one fid each, the one walked most recently. crossfs's server (and any
//!   server whose fids name files) keeps it valid across renames and unlinks of other names.
//!   On servers whose fids name paths (diod, QEMU's 9pfs), a node reached by a name that was
//!   then renamed or removed answers ENOENT until the kernel looks it up again; Tremove and
//!   Trename are used where a server lacks Tunlinkat and Trenameat.
//! - New files belong to the requesting process's uid and gid (in a set-group-ID directory,
//!   the directory's gid, as Linux's v9fs decides from cached attributes). The server gives
//!   them to the user the mount attached as; a file made by another user is then handed to
//!   that user with a Tsetattr, which only a server running as root can honour (after a
//!   refusal the mount stops asking). `uid`/`gid` mapping does not change what is sent.
//! - When the connection is lost, requests in flight fail with EIO. If the caller enabled
//!   reconnecting on the client ([`crossfs_client::Client::enable_reconnect`], with a hook
//!   attaching the root fid again), the mount binds its files and open files again on the
//!   new connection (see `restore.rs`) and carries on; later requests wait for that, within
//!   the client's limit. Otherwise every later request fails with EIO (the client logs the
//!   cause once). Nothing hangs.
// Denied, not forbidden: `session/dev.rs` allows it for one ioctl.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod ahead;
mod attr;
mod behind;
mod changes;
mod config;
mod direct;
mod error;
mod fid;
mod fs;
mod known;
mod mount;
mod remote;
mod restore;
mod session;
mod stats;
mod sync;
pub mod table;

pub use changes::calls as replay_calls;
pub use config::{ChangeMode, MountConfig, UnknownChangeMode};
pub use error::MountError;
pub use known::cache::{CacheMode, InvalidNegativeTtl, NegativeTtl, UnknownCacheMode};
pub use known::replica::DEFAULT_REPLICA_ENTRIES;
pub use mount::{mount, MountHandle, Unmounted, Unmounter};
pub use session::auto_idle_poll;
