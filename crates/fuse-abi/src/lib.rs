//! The FUSE ABI as bytes (Linux `include/uapi/linux/fuse.h`), for both of crossfs's FUSE
//! servers: the virtio door (`crossfs-virtiofs`, requests from a guest's virtqueues) and the
//! mount's own session (`crossfs-mount`, from `/dev/fuse` or io_uring). One opcode table, a
//! decoder from bytes that never panics ([`decode()`], with the in-structs a request carries
//! beyond its [`Op`] from [`Request`]'s `*_in` methods), reply encoders ([`encode`]) and the
//! notifications a server sends unasked ([`notify`]), and the layout of FUSE over io_uring's
//! ring entries ([`uring`]).
//!
//! What it must not do: any I/O. The device or the session moves buffers; the file system
//! answers.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod decode;
pub mod encode;
pub mod notify;
pub mod uring;

pub use decode::{decode, decode_write_head, DecodeError, InHeader, Op, Request, WRITE_HEAD_LEN};

/// The FUSE major version spoken.
pub const KERNEL_VERSION: u32 = 7;
/// The minor version the virtio door offers (7.31: max_pages, cache_symlinks, map_alignment
/// known); the guest's, if smaller, is used.
pub const KERNEL_MINOR_VERSION: u32 = 31;
/// The minor version the mount's session offers (7.40: `flags2`, FUSE over io_uring's
/// flag; what fuser 0.18 offered before it).
pub const SESSION_MINOR_VERSION: u32 = 40;
/// The root's node id.
pub const ROOT_ID: u64 = 1;

/// Size of `fuse_in_header`.
pub const IN_HEADER_LEN: usize = 40;
/// Size of `fuse_out_header`.
pub const OUT_HEADER_LEN: usize = 16;

macro_rules! opcodes {
    ($($name:ident = $num:literal,)*) => {
        /// FUSE opcodes this crate knows by name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(missing_docs, non_camel_case_types)]
        pub enum Opcode { $($name = $num,)* }

        impl Opcode {
            /// Every opcode, in number order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name,)*];

            /// The opcode of a number, if known.
            pub fn from_u32(n: u32) -> Option<Opcode> {
                match n { $($num => Some(Opcode::$name),)* _ => None }
            }

            /// The name `crossfs stats` shows (`FUSE_LOOKUP`, ...).
            pub fn name(self) -> &'static str {
                match self { $(Opcode::$name => concat!("FUSE_", stringify!($name)),)* }
            }
        }
    };
}

opcodes! {
    LOOKUP = 1, FORGET = 2, GETATTR = 3, SETATTR = 4, READLINK = 5, SYMLINK = 6, MKNOD = 8,
    MKDIR = 9, UNLINK = 10, RMDIR = 11, RENAME = 12, LINK = 13, OPEN = 14, READ = 15,
    WRITE = 16, STATFS = 17, RELEASE = 18, FSYNC = 20, SETXATTR = 21, GETXATTR = 22,
    LISTXATTR = 23, REMOVEXATTR = 24, FLUSH = 25, INIT = 26, OPENDIR = 27, READDIR = 28,
    RELEASEDIR = 29, FSYNCDIR = 30, GETLK = 31, SETLK = 32, SETLKW = 33, ACCESS = 34,
    CREATE = 35, INTERRUPT = 36, BMAP = 37, DESTROY = 38, IOCTL = 39, POLL = 40,
    NOTIFY_REPLY = 41, BATCH_FORGET = 42, FALLOCATE = 43, READDIRPLUS = 44, RENAME2 = 45,
    LSEEK = 46, COPY_FILE_RANGE = 47, SETUPMAPPING = 48, REMOVEMAPPING = 49, SYNCFS = 50,
    TMPFILE = 51,
}

/// `FUSE_INIT` flags (the `flags` word of `fuse_init_in` and `fuse_init_out`).
#[allow(missing_docs)]
pub mod init {
    pub const ASYNC_READ: u32 = 1 << 0;
    pub const POSIX_LOCKS: u32 = 1 << 1;
    pub const ATOMIC_O_TRUNC: u32 = 1 << 3;
    pub const EXPORT_SUPPORT: u32 = 1 << 4;
    pub const BIG_WRITES: u32 = 1 << 5;
    pub const DONT_MASK: u32 = 1 << 6;
    pub const AUTO_INVAL_DATA: u32 = 1 << 12;
    pub const DO_READDIRPLUS: u32 = 1 << 13;
    pub const READDIRPLUS_AUTO: u32 = 1 << 14;
    pub const ASYNC_DIO: u32 = 1 << 15;
    pub const WRITEBACK_CACHE: u32 = 1 << 16;
    pub const PARALLEL_DIROPS: u32 = 1 << 18;
    pub const HANDLE_KILLPRIV: u32 = 1 << 19;
    pub const MAX_PAGES: u32 = 1 << 22;
    pub const CACHE_SYMLINKS: u32 = 1 << 23;
    pub const FLOCK_LOCKS: u32 = 1 << 10;
    pub const NO_OPEN_SUPPORT: u32 = 1 << 17;
    pub const SUBMOUNTS: u32 = 1 << 27;
    pub const NO_OPENDIR_SUPPORT: u32 = 1 << 24;
    pub const EXPLICIT_INVAL_DATA: u32 = 1 << 25;
    /// `flags2` is valid (in `fuse_init_in` and `fuse_init_out`).
    pub const INIT_EXT: u32 = 1 << 30;
}

/// `FUSE_INIT` flags of the `flags2` word (valid with [`init::INIT_EXT`]), as bits of
/// `flags2`: flag `n` of the kernel's 64-bit list is bit `n - 32` here.
#[allow(missing_docs)]
pub mod init2 {
    /// mmap of files opened with `FOPEN_DIRECT_IO` (Linux 6.6).
    pub const DIRECT_IO_ALLOW_MMAP: u32 = 1 << (36 - 32);
    /// FUSE over io_uring may be used (Linux 6.14, with `enable_uring`).
    pub const OVER_IO_URING: u32 = 1 << (41 - 32);
}

/// Notification codes (`fuse_out_header.error` of a message with `unique` 0).
#[allow(missing_docs)]
pub mod notify_code {
    pub const POLL: i32 = 1;
    pub const INVAL_INODE: i32 = 2;
    pub const INVAL_ENTRY: i32 = 3;
    pub const STORE: i32 = 4;
    pub const RETRIEVE: i32 = 5;
    pub const DELETE: i32 = 6;
}

/// `fuse_attr.flags`: the directory is the root of another file system, which the guest
/// mounts as a submount of its own (with its own device number). Linux reads it whenever
/// FUSE_SUBMOUNTS was agreed.
pub const ATTR_SUBMOUNT: u32 = 1 << 0;

/// `fuse_setattr_in.valid` bits.
#[allow(missing_docs)]
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const LOCKOWNER: u32 = 1 << 9;
    pub const CTIME: u32 = 1 << 10;
    /// With `HANDLE_KILLPRIV_V2`: clear the set-id bits (a truncate by a caller without
    /// `CAP_FSETID`, or a chown).
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_open_out.open_flags` bits.
#[allow(missing_docs)]
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const KEEP_CACHE: u32 = 1 << 1;
    pub const NONSEEKABLE: u32 = 1 << 2;
    pub const CACHE_DIR: u32 = 1 << 3;
    pub const STREAM: u32 = 1 << 4;
    pub const NOFLUSH: u32 = 1 << 5;
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
}

/// `fuse_read_in.flags`, `fuse_release_in.release_flags`, `fuse_flush_in`: `lock_owner` is
/// valid.
pub const READ_LOCKOWNER: u32 = 1 << 1;
/// `fuse_release_in.release_flags`: flush before release.
pub const RELEASE_FLUSH: u32 = 1 << 0;
/// `fuse_write_in.write_flags`: `lock_owner` is valid.
pub const WRITE_LOCKOWNER: u32 = 1 << 1;
/// `fuse_write_in.write_flags`, with `HANDLE_KILLPRIV_V2`: the writer lacks `CAP_FSETID`,
/// so the file system clears the file's set-id bits.
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_lk_in.lk_flags`: a `flock(2)` lock rather than a POSIX one.
pub const LK_FLOCK: u32 = 1 << 0;

/// `fuse_getattr_in.getattr_flags`: `fh` is valid.
pub const GETATTR_FH: u32 = 1;
/// `fuse_fsync_in.fsync_flags`: data only.
pub const FSYNC_FDATASYNC: u32 = 1;
