//! Bytes to requests, without I/O and without panics: every length is checked against the
//! buffer before it is used, every count against the bytes that remain before anything is
//! allocated, and a header that decodes keeps its `unique` even when the body does not, so
//! the device can still answer it with an error.

use super::{Opcode, IN_HEADER_LEN};

/// Why bytes are not a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than a `fuse_in_header`.
    #[error("request shorter than its header ({0} bytes)")]
    ShortHeader(usize),
    /// The header's `len` is below the header size or past the bytes the guest gave.
    #[error("header length {len} does not fit the {available} bytes given")]
    BadLength {
        /// `fuse_in_header.len`.
        len: u32,
        /// Bytes in the readable part of the descriptor chain.
        available: usize,
    },
    /// An opcode this crate does not know.
    #[error("unknown opcode {0}")]
    UnknownOpcode(u32),
    /// The body ended before a field or a name did.
    #[error("truncated body of {0:?}")]
    Truncated(Opcode),
    /// A name or string without its terminating NUL.
    #[error("unterminated string in {0:?}")]
    Unterminated(Opcode),
    /// A count that the body cannot hold.
    #[error("count {count} too large for {0:?}", count = .1)]
    BadCount(Opcode, u32),
    /// An in-struct asked of a request of another opcode.
    #[error("the request is not {0:?}")]
    NotThis(Opcode),
}

/// `fuse_in_header`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InHeader {
    /// Total length of the request, header included.
    pub len: u32,
    /// The opcode as sent.
    pub opcode: u32,
    /// The id the reply must carry.
    pub unique: u64,
    /// The node the request is about.
    pub nodeid: u64,
    /// Caller's uid.
    pub uid: u32,
    /// Caller's gid.
    pub gid: u32,
    /// Caller's pid.
    pub pid: u32,
}

/// A decoded request: the header always, the body when it decoded.
#[derive(Debug)]
pub struct Request<'a> {
    /// The header.
    pub header: InHeader,
    /// The body, or why it did not decode.
    pub op: Result<Op<'a>, DecodeError>,
    /// The body's bytes (after the header, within its length), for the in-structs that
    /// [`Op`] summarises ([`Request::write_in`], [`Request::lk_in`], ...).
    pub body: &'a [u8],
}

/// `fuse_write_in`, whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct WriteIn {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub write_flags: u32,
    pub lock_owner: u64,
    /// The open flags of the file written.
    pub flags: u32,
}

/// `fuse_read_in` (READ), whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ReadInFull {
    pub fh: u64,
    pub offset: u64,
    pub size: u32,
    pub read_flags: u32,
    pub lock_owner: u64,
    /// The open flags of the file read.
    pub flags: u32,
}

/// `fuse_flush_in`, whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct FlushIn {
    pub fh: u64,
    pub lock_owner: u64,
}

/// `fuse_release_in` (RELEASE, RELEASEDIR), whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ReleaseIn {
    pub fh: u64,
    pub flags: u32,
    pub release_flags: u32,
    pub lock_owner: u64,
}

/// `fuse_lk_in` (GETLK, SETLK, SETLKW), whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct LkIn {
    pub fh: u64,
    pub owner: u64,
    pub start: u64,
    pub end: u64,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub typ: u32,
    pub pid: u32,
    pub lk_flags: u32,
}

impl Request<'_> {
    fn cursor(&self, op: Opcode) -> Result<Cursor<'_>, DecodeError> {
        if self.header.opcode != op as u32 {
            return Err(DecodeError::NotThis(op));
        }
        Ok(Cursor { buf: self.body, op })
    }

    /// A WRITE's `fuse_write_in`.
    ///
    /// # Errors
    /// [`DecodeError::NotThis`] for another opcode; [`DecodeError::Truncated`].
    pub fn write_in(&self) -> Result<WriteIn, DecodeError> {
        let mut c = self.cursor(Opcode::WRITE)?;
        let fh = c.u64()?;
        let offset = c.u64()?;
        let size = c.u32()?;
        let write_flags = c.u32()?;
        let lock_owner = c.u64()?;
        let flags = c.u32()?;
        Ok(WriteIn {
            fh,
            offset,
            size,
            write_flags,
            lock_owner,
            flags,
        })
    }

    /// A READ's `fuse_read_in`, whole.
    ///
    /// # Errors
    /// [`DecodeError::NotThis`] for another opcode; [`DecodeError::Truncated`].
    pub fn read_in_full(&self) -> Result<ReadInFull, DecodeError> {
        let mut c = self.cursor(Opcode::READ)?;
        Ok(ReadInFull {
            fh: c.u64()?,
            offset: c.u64()?,
            size: c.u32()?,
            read_flags: c.u32()?,
            lock_owner: c.u64()?,
            flags: c.u32()?,
        })
    }

    /// A FLUSH's `fuse_flush_in`.
    ///
    /// # Errors
    /// [`DecodeError::NotThis`] for another opcode; [`DecodeError::Truncated`].
    pub fn flush_in(&self) -> Result<FlushIn, DecodeError> {
        let mut c = self.cursor(Opcode::FLUSH)?;
        let fh = c.u64()?;
        c.skip(8)?;
        Ok(FlushIn {
            fh,
            lock_owner: c.u64()?,
        })
    }

    /// A RELEASE's or RELEASEDIR's `fuse_release_in`.
    ///
    /// # Errors
    /// [`DecodeError::NotThis`] for another opcode; [`DecodeError::Truncated`].
    pub fn release_in(&self) -> Result<ReleaseIn, DecodeError> {
        let op = match Opcode::from_u32(self.header.opcode) {
            Some(o @ Opcode::RELEASEDIR) => o,
            _ => Opcode::RELEASE,
        };
        let mut c = self.cursor(op)?;
        Ok(ReleaseIn {
            fh: c.u64()?,
            flags: c.u32()?,
            release_flags: c.u32()?,
            lock_owner: c.u64()?,
        })
    }

    /// A GETLK's, SETLK's or SETLKW's `fuse_lk_in`.
    ///
    /// # Errors
    /// [`DecodeError::NotThis`] for another opcode; [`DecodeError::Truncated`].
    pub fn lk_in(&self) -> Result<LkIn, DecodeError> {
        let op = match Opcode::from_u32(self.header.opcode) {
            Some(o @ (Opcode::SETLK | Opcode::SETLKW)) => o,
            _ => Opcode::GETLK,
        };
        let mut c = self.cursor(op)?;
        Ok(LkIn {
            fh: c.u64()?,
            owner: c.u64()?,
            start: c.u64()?,
            end: c.u64()?,
            typ: c.u32()?,
            pid: c.u32()?,
            lk_flags: c.u32()?,
        })
    }
}

/// `fuse_init_in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitIn {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// The guest's readahead limit.
    pub max_readahead: u32,
    /// Flags the guest supports.
    pub flags: u32,
    /// More flags the kernel supports (`flags2`, valid with `init::INIT_EXT` in `flags`;
    /// 0 from a kernel before 7.36).
    pub flags2: u32,
}

/// `fuse_setattr_in`, the fields used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SetattrIn {
    pub valid: u32,
    pub fh: u64,
    pub size: u64,
    pub atime: u64,
    pub mtime: u64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctime: u64,
    pub ctimensec: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// `fuse_read_in` (READ, READDIR, READDIRPLUS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadIn {
    /// File handle.
    pub fh: u64,
    /// Offset (a directory cookie for listings).
    pub offset: u64,
    /// Bytes asked for.
    pub size: u32,
}

/// A request body. Names and data borrow from the request's bytes.
#[derive(Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Op<'a> {
    Init(InitIn),
    Destroy,
    Lookup {
        name: &'a [u8],
    },
    Forget {
        nlookup: u64,
    },
    /// (nodeid, nlookup) pairs, as many as the body holds.
    BatchForget(Vec<(u64, u64)>),
    Getattr {
        flags: u32,
        fh: u64,
    },
    Setattr(SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        mode: u32,
        rdev: u32,
        umask: u32,
        name: &'a [u8],
    },
    Mkdir {
        mode: u32,
        umask: u32,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        flags: u32,
        old: &'a [u8],
        new: &'a [u8],
    },
    Link {
        oldnodeid: u64,
        name: &'a [u8],
    },
    Open {
        flags: u32,
    },
    Read(ReadIn),
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
    },
    Statfs,
    Release {
        fh: u64,
    },
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Setxattr {
        flags: u32,
        name: &'a [u8],
        value: &'a [u8],
    },
    Getxattr {
        size: u32,
        name: &'a [u8],
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush {
        fh: u64,
    },
    Opendir {
        flags: u32,
    },
    Readdir(ReadIn),
    Releasedir {
        fh: u64,
    },
    Fsyncdir {
        fh: u64,
        datasync: bool,
    },
    Access {
        mask: u32,
    },
    Create {
        flags: u32,
        mode: u32,
        umask: u32,
        name: &'a [u8],
    },
    /// FUSE_TMPFILE: `fuse_create_in` as CREATE's; the name the kernel sends after it
    /// (`/`, its placeholder for a file without one) means nothing and is not decoded.
    Tmpfile {
        flags: u32,
        mode: u32,
        umask: u32,
    },
    Interrupt {
        unique: u64,
    },
    Readdirplus(ReadIn),
    Lseek {
        fh: u64,
        offset: u64,
        whence: u32,
    },
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    },
    Syncfs,
    /// A known opcode this file system does not implement (answered `ENOSYS`).
    Unsupported(Opcode),
}

/// Reads little-endian fields off the front of a body.
struct Cursor<'a> {
    buf: &'a [u8],
    op: Opcode,
}

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated(self.op));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let lo = u64::from(self.u32()?);
        let hi = u64::from(self.u32()?);
        Ok(lo | hi << 32)
    }

    fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.bytes(n).map(|_| ())
    }

    /// A NUL-terminated string, without its NUL.
    fn cstr(&mut self) -> Result<&'a [u8], DecodeError> {
        let end = self
            .buf
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::Unterminated(self.op))?;
        let s = self.bytes(end)?;
        self.skip(1)?;
        Ok(s)
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    fn read_in(&mut self) -> Result<ReadIn, DecodeError> {
        let fh = self.u64()?;
        let offset = self.u64()?;
        let size = self.u32()?;
        // read_flags, lock_owner, flags, padding
        self.skip(4 + 8 + 4 + 4)?;
        Ok(ReadIn { fh, offset, size })
    }
}

/// A WRITE's head: `fuse_in_header` and `fuse_write_in`, after which its data starts.
pub const WRITE_HEAD_LEN: usize = IN_HEADER_LEN + 40;

/// The header and `fuse_write_in` of a WRITE of which only the head (the first
/// [`WRITE_HEAD_LEN`] bytes) is in `head`, and `rest` more bytes of the request lie
/// elsewhere: the virtio door leaves a WRITE's data in the guest's memory and writes it to
/// the file from there. The rules are [`decode`]'s, as if the `WRITE_HEAD_LEN + rest`
/// bytes were given: the header's length within them, the data (`size` bytes, the first of
/// the `rest`) within the length.
///
/// # Errors
/// [`DecodeError::ShortHeader`] and [`DecodeError::BadLength`] as [`decode`];
/// [`DecodeError::NotThis`] for another opcode; [`DecodeError::Truncated`] when `head` is
/// shorter than a WRITE's head or the data passes the header's length.
pub fn decode_write_head(head: &[u8], rest: usize) -> Result<(InHeader, WriteIn), DecodeError> {
    let header = in_header(head)?;
    let available = head.len().saturating_add(rest);
    if header.opcode != Opcode::WRITE as u32 {
        return Err(DecodeError::NotThis(Opcode::WRITE));
    }
    let Some(total) = usize::try_from(header.len)
        .ok()
        .filter(|&l| (IN_HEADER_LEN..=available).contains(&l))
    else {
        return Err(DecodeError::BadLength {
            len: header.len,
            available,
        });
    };
    let Some(body) = head
        .get(IN_HEADER_LEN..WRITE_HEAD_LEN)
        .filter(|_| total >= WRITE_HEAD_LEN)
    else {
        return Err(DecodeError::Truncated(Opcode::WRITE));
    };
    let request = Request {
        header,
        op: Err(DecodeError::Truncated(Opcode::WRITE)),
        body,
    };
    let write = request.write_in()?;
    if write.size as usize > total - WRITE_HEAD_LEN {
        return Err(DecodeError::Truncated(Opcode::WRITE));
    }
    Ok((header, write))
}

/// The `fuse_in_header` at the start of `buf`, its length not yet checked.
fn in_header(buf: &[u8]) -> Result<InHeader, DecodeError> {
    if buf.len() < IN_HEADER_LEN {
        return Err(DecodeError::ShortHeader(buf.len()));
    }
    let mut c = Cursor {
        buf,
        op: Opcode::INIT,
    };
    let len = c.u32()?;
    let opcode = c.u32()?;
    let unique = c.u64()?;
    let nodeid = c.u64()?;
    let uid = c.u32()?;
    let gid = c.u32()?;
    let pid = c.u32()?;
    Ok(InHeader {
        len,
        opcode,
        unique,
        nodeid,
        uid,
        gid,
        pid,
    })
}

/// Decodes one request from the readable bytes of a descriptor chain.
///
/// # Errors
/// [`DecodeError::ShortHeader`] or [`DecodeError::BadLength`] when not even the header can be
/// trusted (nothing can be answered); any other problem is in [`Request::op`].
pub fn decode(buf: &[u8]) -> Result<Request<'_>, DecodeError> {
    let header = in_header(buf)?;
    let InHeader { len, opcode, .. } = header;
    let Some(total) = usize::try_from(len)
        .ok()
        .filter(|&l| (IN_HEADER_LEN..=buf.len()).contains(&l))
    else {
        return Err(DecodeError::BadLength {
            len,
            available: buf.len(),
        });
    };
    let body_bytes = buf.get(IN_HEADER_LEN..total).unwrap_or_default();
    let op = match Opcode::from_u32(opcode) {
        None => Err(DecodeError::UnknownOpcode(opcode)),
        Some(op) => body(
            op,
            Cursor {
                buf: body_bytes,
                op,
            },
        ),
    };
    Ok(Request {
        header,
        op,
        body: body_bytes,
    })
}

fn body(op: Opcode, mut c: Cursor<'_>) -> Result<Op<'_>, DecodeError> {
    use Opcode as O;
    Ok(match op {
        O::INIT => {
            let major = c.u32()?;
            let minor = c.u32()?;
            let max_readahead = c.u32()?;
            let flags = c.u32()?;
            // Kernels before 7.36 send 16 bytes, without flags2.
            let flags2 = if flags & super::init::INIT_EXT != 0 {
                c.u32().unwrap_or(0)
            } else {
                0
            };
            Op::Init(InitIn {
                major,
                minor,
                max_readahead,
                flags,
                flags2,
            })
        }
        O::DESTROY => Op::Destroy,
        O::LOOKUP => Op::Lookup { name: c.cstr()? },
        O::FORGET => Op::Forget { nlookup: c.u64()? },
        O::BATCH_FORGET => {
            let count = c.u32()?;
            c.skip(4)?;
            // Bound the count by the bytes present before allocating anything.
            if usize::try_from(count).map_or(true, |n| n > c.buf.len() / 16) {
                return Err(DecodeError::BadCount(op, count));
            }
            let mut forgets = Vec::with_capacity(count as usize);
            for _ in 0..count {
                forgets.push((c.u64()?, c.u64()?));
            }
            Op::BatchForget(forgets)
        }
        O::GETATTR => {
            let flags = c.u32()?;
            c.skip(4)?;
            Op::Getattr {
                flags,
                fh: c.u64()?,
            }
        }
        O::SETATTR => {
            let valid = c.u32()?;
            c.skip(4)?;
            let fh = c.u64()?;
            let size = c.u64()?;
            c.skip(8)?; // lock_owner
            let atime = c.u64()?;
            let mtime = c.u64()?;
            let ctime = c.u64()?;
            let atimensec = c.u32()?;
            let mtimensec = c.u32()?;
            let ctimensec = c.u32()?;
            let mode = c.u32()?;
            c.skip(4)?;
            let uid = c.u32()?;
            let gid = c.u32()?;
            c.skip(4)?;
            Op::Setattr(SetattrIn {
                valid,
                fh,
                size,
                atime,
                mtime,
                atimensec,
                mtimensec,
                ctime,
                ctimensec,
                mode,
                uid,
                gid,
            })
        }
        O::READLINK => Op::Readlink,
        O::SYMLINK => Op::Symlink {
            name: c.cstr()?,
            target: c.cstr()?,
        },
        O::MKNOD => {
            let mode = c.u32()?;
            let rdev = c.u32()?;
            let umask = c.u32()?;
            c.skip(4)?;
            Op::Mknod {
                mode,
                rdev,
                umask,
                name: c.cstr()?,
            }
        }
        O::MKDIR => {
            let mode = c.u32()?;
            let umask = c.u32()?;
            Op::Mkdir {
                mode,
                umask,
                name: c.cstr()?,
            }
        }
        O::UNLINK => Op::Unlink { name: c.cstr()? },
        O::RMDIR => Op::Rmdir { name: c.cstr()? },
        O::RENAME => Op::Rename {
            newdir: c.u64()?,
            flags: 0,
            old: c.cstr()?,
            new: c.cstr()?,
        },
        O::RENAME2 => {
            let newdir = c.u64()?;
            let flags = c.u32()?;
            c.skip(4)?;
            Op::Rename {
                newdir,
                flags,
                old: c.cstr()?,
                new: c.cstr()?,
            }
        }
        O::LINK => Op::Link {
            oldnodeid: c.u64()?,
            name: c.cstr()?,
        },
        O::OPEN | O::OPENDIR => {
            let flags = c.u32()?;
            c.skip(4)?;
            if op == O::OPEN {
                Op::Open { flags }
            } else {
                Op::Opendir { flags }
            }
        }
        O::READ => Op::Read(c.read_in()?),
        O::READDIR => Op::Readdir(c.read_in()?),
        O::READDIRPLUS => Op::Readdirplus(c.read_in()?),
        O::WRITE => {
            let fh = c.u64()?;
            let offset = c.u64()?;
            let size = c.u32()?;
            c.skip(4 + 8 + 4 + 4)?;
            let data = c.bytes(size as usize)?;
            Op::Write { fh, offset, data }
        }
        O::STATFS => Op::Statfs,
        O::RELEASE | O::RELEASEDIR => {
            let fh = c.u64()?;
            c.skip(4 + 4 + 8)?;
            if op == O::RELEASE {
                Op::Release { fh }
            } else {
                Op::Releasedir { fh }
            }
        }
        O::FSYNC | O::FSYNCDIR => {
            let fh = c.u64()?;
            let datasync = c.u32()? & super::FSYNC_FDATASYNC != 0;
            c.skip(4)?;
            if op == O::FSYNC {
                Op::Fsync { fh, datasync }
            } else {
                Op::Fsyncdir { fh, datasync }
            }
        }
        O::SETXATTR => {
            let size = c.u32()?;
            let flags = c.u32()?;
            let name = c.cstr()?;
            let value = c.bytes(size as usize)?;
            Op::Setxattr { flags, name, value }
        }
        O::GETXATTR => {
            let size = c.u32()?;
            c.skip(4)?;
            Op::Getxattr {
                size,
                name: c.cstr()?,
            }
        }
        O::LISTXATTR => {
            let size = c.u32()?;
            c.skip(4)?;
            Op::Listxattr { size }
        }
        O::REMOVEXATTR => Op::Removexattr { name: c.cstr()? },
        O::FLUSH => {
            let fh = c.u64()?;
            c.skip(4 + 4 + 8)?;
            Op::Flush { fh }
        }
        O::ACCESS => {
            let mask = c.u32()?;
            c.skip(4)?;
            Op::Access { mask }
        }
        O::CREATE => {
            let flags = c.u32()?;
            let mode = c.u32()?;
            let umask = c.u32()?;
            c.skip(4)?;
            Op::Create {
                flags,
                mode,
                umask,
                name: c.cstr()?,
            }
        }
        O::TMPFILE => {
            let flags = c.u32()?;
            let mode = c.u32()?;
            let umask = c.u32()?;
            c.skip(4)?;
            let _ = c.rest();
            Op::Tmpfile { flags, mode, umask }
        }
        O::INTERRUPT => Op::Interrupt { unique: c.u64()? },
        O::LSEEK => {
            let fh = c.u64()?;
            let offset = c.u64()?;
            let whence = c.u32()?;
            c.skip(4)?;
            Op::Lseek { fh, offset, whence }
        }
        O::FALLOCATE => {
            let fh = c.u64()?;
            let offset = c.u64()?;
            let length = c.u64()?;
            let mode = c.u32()?;
            c.skip(4)?;
            Op::Fallocate {
                fh,
                offset,
                length,
                mode,
            }
        }
        O::SYNCFS => {
            let _ = c.rest();
            Op::Syncfs
        }
        other => Op::Unsupported(other),
    })
}

#[cfg(test)]
mod tests;
