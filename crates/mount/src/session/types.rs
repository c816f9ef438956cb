//! The values a request carries and a reply sends, with the names and shapes the handlers
//! in `crate::fs` were written against (they were fuser's): node numbers, file handles,
//! errnos, attributes, the flags of INIT, OPEN and RENAME.

use std::num::NonZeroI32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossfs_fuse_abi::encode;

/// A node id, as the kernel names a file (the root is 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct INodeNo(pub u64);

impl INodeNo {
    /// The root's node id.
    pub const ROOT: INodeNo = INodeNo(crossfs_fuse_abi::ROOT_ID);
}

/// A handle the file system gave an OPEN, OPENDIR or CREATE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileHandle(pub u64);

/// Who holds a POSIX lock, or whose descriptor is flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockOwner(pub u64);

/// An inode's generation (crossfs's are always 0: node ids are not reused while known).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Generation(pub u64);

/// The `flags` of open(2), as OPEN, CREATE, READ and WRITE carry them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFlags(pub i32);

/// `fuse_write_in.write_flags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteFlags(pub u32);

/// The mask of access(2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessFlags(pub i32);

/// An errno to answer a request with (positive, never 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(NonZeroI32);

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        // The errnos by name, whether or not a handler answers with each today.
        #[allow(dead_code)]
        impl Errno {
            $(
                #[allow(missing_docs)]
                pub const $name: Errno = match NonZeroI32::new(libc::$name) {
                    Some(n) => Errno(n),
                    None => panic!("errno 0"),
                };
            )*
        }
    };
}

errnos!(
    EPERM,
    ENOENT,
    ESRCH,
    EINTR,
    EIO,
    ENXIO,
    E2BIG,
    EBADF,
    EAGAIN,
    ENOMEM,
    EACCES,
    EBUSY,
    EEXIST,
    EXDEV,
    ENODEV,
    ENOTDIR,
    EISDIR,
    EINVAL,
    ENFILE,
    EMFILE,
    EFBIG,
    ENOSPC,
    ESPIPE,
    EROFS,
    EMLINK,
    ERANGE,
    ENAMETOOLONG,
    ENOLCK,
    ENOSYS,
    ENOTEMPTY,
    ELOOP,
    ENODATA,
    EOPNOTSUPP,
    ETIMEDOUT,
    ESTALE,
    EPROTO,
    EOVERFLOW,
    ENOTSUP,
);

impl Errno {
    /// The errno `n`; EIO for 0 or a negative number, which are not errnos.
    pub fn from_i32(n: i32) -> Errno {
        NonZeroI32::new(n)
            .filter(|n| n.get() > 0)
            .map_or(Errno::EIO, Errno)
    }

    /// The number.
    pub fn code(self) -> i32 {
        self.0.get()
    }
}

/// A file's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum FileType {
    NamedPipe,
    CharDevice,
    BlockDevice,
    Directory,
    RegularFile,
    Symlink,
    Socket,
}

impl FileType {
    /// The `S_IFMT` bits of the type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::NamedPipe => libc::S_IFIFO,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Directory => libc::S_IFDIR,
            FileType::RegularFile => libc::S_IFREG,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Socket => libc::S_IFSOCK,
        }
    }
}

/// A file's attributes, as the kernel is told them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct FileAttr {
    pub ino: INodeNo,
    pub size: u64,
    /// 512-byte blocks.
    pub blocks: u64,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    /// Birth time: Linux's FUSE carries none, kept for what the mount records.
    pub crtime: SystemTime,
    pub kind: FileType,
    /// Permission bits, set-id and sticky bits included.
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    /// Unused on Linux (sent as 0).
    pub flags: u32,
}

impl FileAttr {
    /// As `fuse_attr` carries it.
    pub(crate) fn wire(&self) -> encode::Attr {
        encode::Attr {
            ino: self.ino.0,
            size: self.size,
            blocks: self.blocks,
            atime: wire_time(self.atime),
            mtime: wire_time(self.mtime),
            ctime: wire_time(self.ctime),
            mode: self.kind.mode_bits() | u32::from(self.perm),
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: self.blksize,
            flags: 0,
        }
    }
}

/// A time as Linux's signed seconds and nanoseconds (saturating far from the epoch).
fn wire_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => match i64::try_from(d.as_secs()) {
            Ok(s) => (s, d.subsec_nanos()),
            Err(_) => (i64::MAX, 999_999_999),
        },
        Err(e) => {
            let d = e.duration();
            match i64::try_from(d.as_secs()) {
                Ok(s) if d.subsec_nanos() == 0 => (-s, 0),
                Ok(s) => (-s - 1, 1_000_000_000 - d.subsec_nanos()),
                Err(_) => (i64::MIN, 0),
            }
        }
    }
}

/// A time a SETATTR carries (Linux's seconds, signed, and nanoseconds).
///
/// Before the epoch this is `EPOCH - (|s| + ns)`, as fuser 0.18 decoded it, because
/// `crate::fs::wire_time` is written as the exact inverse of that: the pair reaches the
/// server unchanged either way.
pub(crate) fn setattr_time(secs: u64, nanos: u32) -> SystemTime {
    let secs = secs as i64;
    let nanos = nanos.min(999_999_999);
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs.unsigned_abs(), nanos)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::new(secs.unsigned_abs(), nanos))
            .unwrap_or(UNIX_EPOCH)
    }
}

/// A time SETATTR sets: a given one, or the server's now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum TimeOrNow {
    SpecificTime(SystemTime),
    Now,
}

/// BSD file flags (macOS only; always `None` here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BsdFileFlags(pub u32);

bitflags::bitflags! {
    /// `fuse_open_out.open_flags`: how the kernel is to cache an open file.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct FopenFlags: u32 {
        const FOPEN_DIRECT_IO = crossfs_fuse_abi::fopen::DIRECT_IO;
        const FOPEN_KEEP_CACHE = crossfs_fuse_abi::fopen::KEEP_CACHE;
        const FOPEN_NONSEEKABLE = crossfs_fuse_abi::fopen::NONSEEKABLE;
        const FOPEN_CACHE_DIR = crossfs_fuse_abi::fopen::CACHE_DIR;
        const FOPEN_STREAM = crossfs_fuse_abi::fopen::STREAM;
        const FOPEN_NOFLUSH = crossfs_fuse_abi::fopen::NOFLUSH;
        const FOPEN_PARALLEL_DIRECT_WRITES = crossfs_fuse_abi::fopen::PARALLEL_DIRECT_WRITES;
    }

    /// renameat2(2)'s flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct RenameFlags: u32 {
        const RENAME_NOREPLACE = libc::RENAME_NOREPLACE;
        const RENAME_EXCHANGE = libc::RENAME_EXCHANGE;
        const RENAME_WHITEOUT = libc::RENAME_WHITEOUT;
        const _ = !0;
    }

    /// `FUSE_INIT` flags, `flags` in the low 32 bits and `flags2` in the high ones.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct InitFlags: u64 {
        const FUSE_ASYNC_READ = 1 << 0;
        const FUSE_POSIX_LOCKS = 1 << 1;
        const FUSE_FILE_OPS = 1 << 2;
        const FUSE_ATOMIC_O_TRUNC = 1 << 3;
        const FUSE_EXPORT_SUPPORT = 1 << 4;
        const FUSE_BIG_WRITES = 1 << 5;
        const FUSE_DONT_MASK = 1 << 6;
        const FUSE_SPLICE_WRITE = 1 << 7;
        const FUSE_SPLICE_MOVE = 1 << 8;
        const FUSE_SPLICE_READ = 1 << 9;
        const FUSE_FLOCK_LOCKS = 1 << 10;
        const FUSE_HAS_IOCTL_DIR = 1 << 11;
        const FUSE_AUTO_INVAL_DATA = 1 << 12;
        const FUSE_DO_READDIRPLUS = 1 << 13;
        const FUSE_READDIRPLUS_AUTO = 1 << 14;
        const FUSE_ASYNC_DIO = 1 << 15;
        const FUSE_WRITEBACK_CACHE = 1 << 16;
        const FUSE_NO_OPEN_SUPPORT = 1 << 17;
        const FUSE_PARALLEL_DIROPS = 1 << 18;
        const FUSE_HANDLE_KILLPRIV = 1 << 19;
        const FUSE_POSIX_ACL = 1 << 20;
        const FUSE_ABORT_ERROR = 1 << 21;
        const FUSE_MAX_PAGES = 1 << 22;
        const FUSE_CACHE_SYMLINKS = 1 << 23;
        const FUSE_NO_OPENDIR_SUPPORT = 1 << 24;
        const FUSE_EXPLICIT_INVAL_DATA = 1 << 25;
        const FUSE_MAP_ALIGNMENT = 1 << 26;
        const FUSE_SUBMOUNTS = 1 << 27;
        const FUSE_HANDLE_KILLPRIV_V2 = 1 << 28;
        const FUSE_SETXATTR_EXT = 1 << 29;
        const FUSE_INIT_EXT = 1 << 30;
        const FUSE_INIT_RESERVED = 1 << 31;
        const FUSE_SECURITY_CTX = 1 << 32;
        const FUSE_HAS_INODE_DAX = 1 << 33;
        const FUSE_CREATE_SUPP_GROUP = 1 << 34;
        const FUSE_HAS_EXPIRE_ONLY = 1 << 35;
        const FUSE_DIRECT_IO_ALLOW_MMAP = 1 << 36;
        const FUSE_PASSTHROUGH = 1 << 37;
        const FUSE_NO_EXPORT_SUPPORT = 1 << 38;
        const FUSE_HAS_RESEND = 1 << 39;
        const FUSE_ALLOW_IDMAP = 1 << 40;
        const FUSE_OVER_IO_URING = 1 << 41;
        const FUSE_REQUEST_TIMEOUT = 1 << 42;
    }
}

impl InitFlags {
    /// From `fuse_init_in`'s two words.
    pub(crate) fn from_words(flags: u32, flags2: u32) -> InitFlags {
        InitFlags::from_bits_retain(u64::from(flags) | u64::from(flags2) << 32)
    }

    /// As `fuse_init_out`'s two words.
    pub(crate) fn words(self) -> (u32, u32) {
        let b = self.bits();
        (b as u32, (b >> 32) as u32)
    }
}

/// Who sent a request: its header's caller.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    uid: u32,
    gid: u32,
    pid: u32,
}

impl Request {
    pub(crate) fn from_header(h: &crossfs_fuse_abi::InHeader) -> Request {
        Request {
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
        }
    }

    /// The caller's fsuid.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The caller's fsgid.
    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// The caller's thread (its id in the mount's pid namespace; 0 for the kernel's own).
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// What the file system asks of the kernel at INIT, within what the kernel offers.
#[derive(Debug)]
pub struct KernelConfig {
    capabilities: InitFlags,
    pub(crate) requested: InitFlags,
    pub(crate) max_readahead: u32,
    max_max_readahead: u32,
    pub(crate) max_background: u16,
    congestion_threshold: Option<u16>,
    pub(crate) max_write: u32,
}

/// The largest write the session accepts (its read buffers are sized from the agreed one).
pub(crate) const MAX_WRITE: u32 = 16 << 20;

impl KernelConfig {
    pub(crate) fn new(capabilities: InitFlags, max_readahead: u32) -> KernelConfig {
        let mut requested = InitFlags::FUSE_ASYNC_READ | InitFlags::FUSE_BIG_WRITES;
        requested |= capabilities & InitFlags::FUSE_MAX_PAGES;
        KernelConfig {
            capabilities,
            requested,
            max_readahead,
            max_max_readahead: max_readahead,
            max_background: 16,
            congestion_threshold: None,
            max_write: MAX_WRITE,
        }
    }

    /// Sets the largest WRITE; returns the previous value.
    ///
    /// # Errors
    /// The nearest value allowed, for 0 or more than the session's buffers hold.
    pub fn set_max_write(&mut self, value: u32) -> Result<u32, u32> {
        if value == 0 {
            return Err(1);
        }
        if value > MAX_WRITE {
            return Err(MAX_WRITE);
        }
        Ok(std::mem::replace(&mut self.max_write, value))
    }

    /// Sets the readahead; returns the previous value.
    ///
    /// # Errors
    /// The nearest value allowed, for 0 or more than the kernel offered.
    pub fn set_max_readahead(&mut self, value: u32) -> Result<u32, u32> {
        if value == 0 {
            return Err(1);
        }
        if value > self.max_max_readahead {
            return Err(self.max_max_readahead);
        }
        Ok(std::mem::replace(&mut self.max_readahead, value))
    }

    /// What the kernel offers.
    pub fn capabilities(&self) -> InitFlags {
        self.capabilities & !InitFlags::FUSE_INIT_EXT
    }

    /// Asks for `flags`.
    ///
    /// # Errors
    /// Those of `flags` the kernel does not offer (nothing is asked then).
    pub fn add_capabilities(&mut self, flags: InitFlags) -> Result<(), InitFlags> {
        if !self.capabilities.contains(flags) {
            return Err(flags & !self.capabilities);
        }
        self.requested |= flags;
        Ok(())
    }

    /// Sets the most background requests in flight; returns the previous value.
    ///
    /// # Errors
    /// 1 for 0.
    pub fn set_max_background(&mut self, value: u16) -> Result<u16, u16> {
        if value == 0 {
            return Err(1);
        }
        Ok(std::mem::replace(&mut self.max_background, value))
    }

    /// Sets the number of background requests past which the kernel throttles new ones;
    /// returns the previous value.
    ///
    /// # Errors
    /// 1 for 0.
    pub fn set_congestion_threshold(&mut self, value: u16) -> Result<u16, u16> {
        if value == 0 {
            return Err(1);
        }
        let previous = self.congestion_threshold();
        self.congestion_threshold = Some(value);
        Ok(previous)
    }

    pub(crate) fn congestion_threshold(&self) -> u16 {
        match self.congestion_threshold {
            None => (u32::from(self.max_background) * 3 / 4) as u16,
            Some(v) => v.min(self.max_background),
        }
    }

    /// Pages per request: enough for the largest write or readahead.
    pub(crate) fn max_pages(&self) -> u16 {
        let page = crate::config::PAGE;
        let most = self.max_write.max(self.max_readahead).max(1);
        u16::try_from((most - 1) / page + 1).unwrap_or(u16::MAX)
    }
}
