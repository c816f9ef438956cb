//! Protocol identifiers and the constants 9P2000.L gives meaning to.

/// A file identifier chosen by the client, naming a file on the server for one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Fid(pub u32);

/// "No fid": the afid of an unauthenticated attach, for example.
pub const NOFID: Fid = Fid(!0);

/// A request tag: matches a reply to its request on one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Tag(pub u16);

/// The tag of Tversion/Rversion, which precede tag allocation.
pub const NOTAG: Tag = Tag(!0);

/// The server's unique identity of a file: type bits, version, and a path that no other file
/// on the export shares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Qid {
    /// One of the `QID_TYPE_*` bits.
    pub ty: u8,
    /// Changes when the file changes (servers may leave it 0).
    pub version: u32,
    /// Unique per file on the export (the server derives it from device and inode).
    pub path: u64,
}

/// Qid type bits.
pub const QID_TYPE_DIR: u8 = 0x80;
/// Qid type: append-only file.
pub const QID_TYPE_APPEND: u8 = 0x40;
/// Qid type: exclusive-use file.
pub const QID_TYPE_EXCL: u8 = 0x20;
/// Qid type: mounted channel.
pub const QID_TYPE_MOUNT: u8 = 0x10;
/// Qid type: authentication file.
pub const QID_TYPE_AUTH: u8 = 0x08;
/// Qid type: temporary file.
pub const QID_TYPE_TMP: u8 = 0x04;
/// Qid type: symbolic link.
pub const QID_TYPE_SYMLINK: u8 = 0x02;
/// Qid type: hard link (unused by Linux).
pub const QID_TYPE_LINK: u8 = 0x01;
/// Qid type: plain file.
pub const QID_TYPE_FILE: u8 = 0x00;

/// Bytes whose length is a 32-bit count on the wire (read, write and readdir payloads), as
/// opposed to strings, which carry a 16-bit length.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct Data(pub Vec<u8>);

/// Most names one Twalk may carry (MAXWELEM in every implementation).
pub const MAX_WALK_ELEMENTS: usize = 16;

/// The only protocol version crossfs speaks.
pub const VERSION_9P2000_L: &[u8] = b"9P2000.L";

/// 9P2000.L with the crossfs extension: a client asks for it in Tversion, and a server that
/// has it answers with it; any other server answers "9P2000.L" (as Linux's clients accept any
/// version starting so) or "unknown", and the client then speaks plain 9P2000.L.
pub const VERSION_CROSSFS: &[u8] = b"9P2000.L.crossfs";

/// The lowest message type of the crossfs extension. 9P2000.L uses numbers below 128.
pub const EXTENSION_FIRST: u8 = 150;

/// Flags of Tlopen and Tlcreate. 9P2000.L defines its own values; they equal Linux's generic
/// ones, but a server must translate them rather than pass them through.
pub mod open_flags {
    #![allow(missing_docs)]
    pub const RDONLY: u32 = 0o0;
    pub const WRONLY: u32 = 0o1;
    pub const RDWR: u32 = 0o2;
    pub const ACCMODE: u32 = 0o3;
    pub const CREATE: u32 = 0o100;
    pub const EXCL: u32 = 0o200;
    pub const NOCTTY: u32 = 0o400;
    pub const TRUNC: u32 = 0o1000;
    pub const APPEND: u32 = 0o2000;
    pub const NONBLOCK: u32 = 0o4000;
    pub const DSYNC: u32 = 0o10000;
    pub const FASYNC: u32 = 0o20000;
    pub const DIRECT: u32 = 0o40000;
    pub const LARGEFILE: u32 = 0o100000;
    pub const DIRECTORY: u32 = 0o200000;
    pub const NOFOLLOW: u32 = 0o400000;
    pub const NOATIME: u32 = 0o1000000;
    pub const CLOEXEC: u32 = 0o2000000;
    pub const SYNC: u32 = 0o4000000;
}

/// Bits of Tgetattr's request mask and Rgetattr's valid mask.
pub mod getattr {
    #![allow(missing_docs)]
    pub const MODE: u64 = 0x1;
    pub const NLINK: u64 = 0x2;
    pub const UID: u64 = 0x4;
    pub const GID: u64 = 0x8;
    pub const RDEV: u64 = 0x10;
    pub const ATIME: u64 = 0x20;
    pub const MTIME: u64 = 0x40;
    pub const CTIME: u64 = 0x80;
    pub const INO: u64 = 0x100;
    pub const SIZE: u64 = 0x200;
    pub const BLOCKS: u64 = 0x400;
    pub const BTIME: u64 = 0x800;
    pub const GEN: u64 = 0x1000;
    pub const DATA_VERSION: u64 = 0x2000;
    /// Everything a stat(2) reports.
    pub const BASIC: u64 = 0x7ff;
    /// Every bit defined.
    pub const ALL: u64 = 0x3fff;
}

/// Bits of Tsetattr's valid mask.
pub mod setattr {
    #![allow(missing_docs)]
    pub const MODE: u32 = 0x1;
    pub const UID: u32 = 0x2;
    pub const GID: u32 = 0x4;
    pub const SIZE: u32 = 0x8;
    pub const ATIME: u32 = 0x10;
    pub const MTIME: u32 = 0x20;
    pub const CTIME: u32 = 0x40;
    /// Set atime to the given value rather than to "now".
    pub const ATIME_SET: u32 = 0x80;
    /// Set mtime to the given value rather than to "now".
    pub const MTIME_SET: u32 = 0x100;
    /// crossfs (only to a server whose Rfeatures has [`crate::features::KILL_SUIDGID`]):
    /// after the other changes succeed, clear `S_ISUID`, and `S_ISGID` where group execute
    /// is set, of a file that is not a directory or symlink, as the kernel does for a
    /// write or truncate by a caller without `CAP_FSETID`. Alone, it asks for that only:
    /// how a client passes on a write's `FUSE_WRITE_KILL_SUIDGID`. A bit 9P2000.L leaves
    /// unused, which other servers ignore.
    pub const KILL_SUIDGID: u32 = 0x8000_0000;
}

/// Bits of Rfeatures: optional behaviours of a crossfs server.
pub mod features {
    /// The server honours [`crate::setattr::KILL_SUIDGID`] in Tsetattr and Tsetattrget.
    pub const KILL_SUIDGID: u64 = 0x1;
    /// The server makes changes sent behind only onto the file the client saw
    /// (Tsetattrbehind, Twritebehind, [`crate::BehindBase`]).
    pub const CONDITIONAL_BEHIND: u64 = 0x2;
    /// The server takes Tcreatebehindmarked: a create sent again after a lost connection
    /// finds the file its earlier try made.
    pub const MARKED_CREATE: u64 = 0x4;
    /// The server takes Tmkdirattr.
    pub const MKDIR_ATTR: u64 = 0x8;
    /// The server takes Tunlinkbehind.
    pub const UNLINK_BEHIND: u64 = 0x10;
    /// The server takes Trenamebehind.
    pub const RENAME_BEHIND: u64 = 0x20;
    /// The server takes Trmdirbehind.
    pub const RMDIR_BEHIND: u64 = 0x40;
    /// The server takes Tmkdirbehind.
    pub const MKDIR_BEHIND: u64 = 0x80;
}

/// What a change sent behind (Tsetattrbehind, Twritebehind) was predicted from: the file
/// as the client last saw it, by what a host program's change of it would move and the
/// guest's change would overwrite (its data's modification time and size, its mode and
/// owner). The server makes the change onto the file only if the file is still so, or
/// was last changed by this connection; otherwise a host program changed it first, and
/// the change is kept beside it (docs/protocol.md, "Changes sent behind").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
pub struct BehindBase {
    /// The modification time the client saw (Rgetattr's bits), or
    /// [`BehindBase::AFTER_PREVIOUS`].
    pub mtime_sec: u64,
    /// Nanoseconds of the modification time.
    pub mtime_nsec: u64,
    /// The size the client saw.
    pub size: u64,
    /// The mode the client saw (file type and permission bits).
    pub mode: u32,
    /// The owner the client saw.
    pub uid: u32,
    /// The group the client saw.
    pub gid: u32,
}

impl BehindBase {
    /// `mtime_sec` of a base that is the file as this connection's previous change of it
    /// left it (that change, sent behind too, is not answered yet).
    pub const AFTER_PREVIOUS: u64 = u64::MAX;

    /// The file as the client's newest unanswered change of it leaves it.
    pub fn after_previous() -> BehindBase {
        BehindBase {
            mtime_sec: Self::AFTER_PREVIOUS,
            ..BehindBase::default()
        }
    }

    /// The file as attributes `a` (from the server) show it.
    pub fn seen(a: &crate::Rgetattr) -> BehindBase {
        BehindBase {
            mtime_sec: a.mtime_sec,
            mtime_nsec: a.mtime_nsec,
            size: a.size,
            mode: a.mode,
            uid: a.uid,
            gid: a.gid,
        }
    }

    /// Whether this base is "after the previous change" rather than attributes seen.
    pub fn is_after_previous(&self) -> bool {
        self.mtime_sec == Self::AFTER_PREVIOUS
    }
}

/// Values of Tlock / Tgetlock.
pub mod lock {
    #![allow(missing_docs)]
    pub const TYPE_RDLCK: u8 = 0;
    pub const TYPE_WRLCK: u8 = 1;
    pub const TYPE_UNLCK: u8 = 2;
    pub const STATUS_SUCCESS: u8 = 0;
    pub const STATUS_BLOCKED: u8 = 1;
    pub const STATUS_ERROR: u8 = 2;
    pub const STATUS_GRACE: u8 = 3;
    pub const FLAGS_BLOCK: u32 = 1;
    pub const FLAGS_RECLAIM: u32 = 2;
}

/// Tunlinkat flag: remove a directory (Linux AT_REMOVEDIR).
pub const AT_REMOVEDIR: u32 = 0x200;

/// Txattrcreate flags (Linux XATTR_CREATE / XATTR_REPLACE).
pub mod xattr_flags {
    #![allow(missing_docs)]
    pub const CREATE: u32 = 1;
    pub const REPLACE: u32 = 2;
}
