//! What the server supports, learned as it answers: each flag is set once, the first time
//! the server refuses a message or an act, and the mount uses the older way from then on.
//!
//! Nothing here is asked ahead: a server that has the crossfs extension
//! ([`crossfs_client::Client::has_extensions`]) may still predate some of its messages.

use std::sync::atomic::AtomicBool;

/// The server's gaps, as found so far (all false at first: everything is tried).
#[derive(Default)]
pub(crate) struct ServerSupport {
    /// The server lacks Tunlinkat/Trenameat (diod): use Tremove/Trename, as Linux does.
    pub legacy_names: AtomicBool,
    /// The server lacks Tunlinkatattr/Trenameatattr (a crossfs before them): the plain
    /// messages, and the kernel's GETATTR of the directory afterwards goes to the server.
    pub no_left_attrs: AtomicBool,
    /// The server predates Twalkread: a deferred open is opened, then read.
    pub no_walkread: AtomicBool,
    /// The server predates Twalkreaddirattr: a directory is walked, then listed.
    pub no_walkreaddirattr: AtomicBool,
    /// The server predates Treadfiles: no small files are fetched.
    pub no_readfiles: AtomicBool,
    /// The server predates Twriteattr: writes are Twrites, and the kernel's GETATTR after
    /// one goes to the server.
    pub no_writeattr: AtomicBool,
    /// The server has answered a Twriteattr: a write need not keep its data for a Twrite
    /// again.
    pub writeattr_answered: AtomicBool,
    /// The server has no Tfallocate (or no fallocate at all): the kernel is told `ENOSYS`,
    /// and programs get `EOPNOTSUPP` (see `MountState::fallocate`).
    pub no_fallocate: AtomicBool,
    /// The server refused to give a new file to its creator (it is not root).
    pub chown_refused: AtomicBool,
    /// The owner and group the server made the last file created through it with (before
    /// the mount gave it to its creator), and the caller's it was made for: what a create
    /// sent behind for the same caller predicts (`MountState::create_behind`).
    pub new_file_owner: std::sync::Mutex<Option<NewFileOwner>>,
    /// What the last directory made through the server looked like, empty: what a mkdir
    /// sent behind predicts (`MountState::mkdir_behind`); file systems differ (ext4 gives
    /// a new directory 4,096 bytes and 8 blocks, tmpfs 40 bytes, btrfs one link).
    pub new_dir_shape: std::sync::Mutex<Option<NewDirShape>>,
}

/// The size, blocks, block size and links of a new, empty directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NewDirShape {
    pub size: u64,
    pub blocks: u64,
    pub blksize: u64,
    pub nlink: u64,
}

/// A file created for a caller with (uid, gid) `asked` came out owned by (uid, gid) `got`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NewFileOwner {
    pub asked: (u32, u32),
    pub got: (u32, u32),
}
