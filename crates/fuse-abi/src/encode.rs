//! Replies as bytes: a `fuse_out_header` followed by the body, little-endian, laid out as
//! the kernel's structs are.

use rustix::fs::Statx;

use super::OUT_HEADER_LEN;

/// A reply being built: header space first, filled in by [`Reply::finish`].
#[derive(Debug)]
pub struct Reply {
    buf: Vec<u8>,
}

impl Reply {
    /// An empty successful reply; append the body with the methods below.
    pub fn new() -> Reply {
        Reply::with_capacity(0)
    }

    /// As [`Reply::new`], with room for `body` bytes.
    pub fn with_capacity(body: usize) -> Reply {
        let mut buf = Vec::with_capacity(OUT_HEADER_LEN + body);
        buf.resize(OUT_HEADER_LEN, 0);
        Reply { buf }
    }

    /// Appends a `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    /// Body bytes so far.
    pub fn body_len(&self) -> usize {
        self.buf.len() - OUT_HEADER_LEN
    }

    /// The body as a buffer to fill in place (reads): grows it by `n` zero bytes and returns
    /// them.
    pub fn tail(&mut self, n: usize) -> &mut [u8] {
        let start = self.buf.len();
        self.buf.resize(start + n, 0);
        &mut self.buf[start..]
    }

    /// Drops body bytes past `len`.
    pub fn truncate_body(&mut self, len: usize) {
        self.buf.truncate(OUT_HEADER_LEN + len);
    }

    /// Appends a `fuse_attr` (88 bytes).
    pub fn attr(&mut self, st: &Statx) -> &mut Self {
        self.attr_with_flags(st, 0)
    }

    /// Appends a `fuse_attr` whose `flags` are `flags` ([`super::ATTR_SUBMOUNT`]).
    pub fn attr_with_flags(&mut self, st: &Statx, flags: u32) -> &mut Self {
        let blksize = st.stx_blksize;
        let rdev = (rustix::fs::makedev(st.stx_rdev_major, st.stx_rdev_minor) & 0xffff_ffff) as u32;
        self.u64(st.stx_ino)
            .u64(st.stx_size)
            .u64(st.stx_blocks)
            .u64(st.stx_atime.tv_sec as u64)
            .u64(st.stx_mtime.tv_sec as u64)
            .u64(st.stx_ctime.tv_sec as u64)
            .u32(st.stx_atime.tv_nsec)
            .u32(st.stx_mtime.tv_nsec)
            .u32(st.stx_ctime.tv_nsec)
            .u32(u32::from(st.stx_mode))
            .u32(st.stx_nlink)
            .u32(st.stx_uid)
            .u32(st.stx_gid)
            .u32(rdev)
            .u32(blksize)
            .u32(flags)
    }

    /// Appends a `fuse_entry_out` (128 bytes): `nodeid` 0 with no attributes is a negative
    /// entry the kernel caches for `entry_valid`.
    pub fn entry(
        &mut self,
        nodeid: u64,
        st: Option<&Statx>,
        entry_valid: Ttl,
        attr_valid: Ttl,
    ) -> &mut Self {
        self.entry_with_flags(nodeid, st, entry_valid, attr_valid, 0)
    }

    /// As [`Reply::entry`], the attributes carrying `attr_flags`.
    pub fn entry_with_flags(
        &mut self,
        nodeid: u64,
        st: Option<&Statx>,
        entry_valid: Ttl,
        attr_valid: Ttl,
        attr_flags: u32,
    ) -> &mut Self {
        self.u64(nodeid)
            .u64(0)
            .u64(entry_valid.secs)
            .u64(attr_valid.secs)
            .u32(entry_valid.nanos)
            .u32(attr_valid.nanos);
        match st {
            Some(st) => self.attr_with_flags(st, attr_flags),
            None => self.bytes(&[0; 88]),
        }
    }

    /// Appends a `fuse_attr_out` (104 bytes).
    pub fn attr_out(&mut self, st: &Statx, valid: Ttl) -> &mut Self {
        self.u64(valid.secs).u32(valid.nanos).u32(0).attr(st)
    }

    /// Appends a `fuse_open_out`.
    pub fn open_out(&mut self, fh: u64, open_flags: u32) -> &mut Self {
        self.u64(fh).u32(open_flags).u32(0)
    }

    /// Appends a `fuse_attr` (88 bytes) of attributes given field by field.
    pub fn fuse_attr(&mut self, a: &Attr) -> &mut Self {
        self.u64(a.ino)
            .u64(a.size)
            .u64(a.blocks)
            .u64(a.atime.0 as u64)
            .u64(a.mtime.0 as u64)
            .u64(a.ctime.0 as u64)
            .u32(a.atime.1)
            .u32(a.mtime.1)
            .u32(a.ctime.1)
            .u32(a.mode)
            .u32(a.nlink)
            .u32(a.uid)
            .u32(a.gid)
            .u32(a.rdev)
            .u32(a.blksize)
            .u32(a.flags)
    }

    /// Appends a `fuse_entry_out` (128 bytes) of attributes given field by field.
    pub fn entry_of(
        &mut self,
        nodeid: u64,
        generation: u64,
        a: &Attr,
        entry_valid: Ttl,
        attr_valid: Ttl,
    ) -> &mut Self {
        self.u64(nodeid)
            .u64(generation)
            .u64(entry_valid.secs)
            .u64(attr_valid.secs)
            .u32(entry_valid.nanos)
            .u32(attr_valid.nanos)
            .fuse_attr(a)
    }

    /// Appends a `fuse_attr_out` (104 bytes) of attributes given field by field.
    pub fn attr_out_of(&mut self, a: &Attr, valid: Ttl) -> &mut Self {
        self.u64(valid.secs).u32(valid.nanos).u32(0).fuse_attr(a)
    }

    /// Appends a `fuse_write_out`.
    pub fn write_out(&mut self, size: u32) -> &mut Self {
        self.u32(size).u32(0)
    }

    /// Appends a `fuse_getxattr_out`: the size a value or name list needs.
    pub fn xattr_size(&mut self, size: u32) -> &mut Self {
        self.u32(size).u32(0)
    }

    /// Appends a `fuse_lk_out`: the lock that conflicts (`F_UNLCK`: none).
    pub fn lk_out(&mut self, start: u64, end: u64, typ: u32, pid: u32) -> &mut Self {
        self.u64(start).u64(end).u32(typ).u32(pid)
    }

    /// Appends a `fuse_statfs_out` (a `fuse_kstatfs`, 80 bytes).
    pub fn statfs_out(&mut self, s: &Statfs) -> &mut Self {
        self.u64(s.blocks)
            .u64(s.bfree)
            .u64(s.bavail)
            .u64(s.files)
            .u64(s.ffree)
            .u32(s.bsize)
            .u32(s.namelen)
            .u32(s.frsize)
            .u32(0)
            .bytes(&[0; 24])
    }

    /// Appends a `fuse_init_out` as a kernel of minor version `kernel_minor` reads it
    /// (shorter for the oldest, as the kernel's `fuse_init_out` grew).
    pub fn init_out(&mut self, o: &InitOut, kernel_minor: u32) -> &mut Self {
        let start = self.buf.len();
        self.u32(o.major)
            .u32(o.minor)
            .u32(o.max_readahead)
            .u32(o.flags)
            .u16(o.max_background)
            .u16(o.congestion_threshold)
            .u32(o.max_write)
            .u32(o.time_gran)
            .u16(o.max_pages)
            .u16(0) // map_alignment
            .u32(o.flags2)
            .u32(0) // max_stack_depth
            .bytes(&[0; 24]);
        let len = match kernel_minor {
            0..=4 => 8,
            5..=22 => 24,
            _ => 64,
        };
        self.buf.truncate(start + len);
        self
    }
}

/// A `fuse_attr`, field by field (times as Linux's signed seconds and nanoseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    /// File type and permission bits, as `st_mode`.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
    /// `fuse_attr.flags` (`super::ATTR_SUBMOUNT`).
    pub flags: u32,
}

/// A `fuse_kstatfs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// A `fuse_init_out`, the fields a server sets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct InitOut {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u32,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    /// Timestamp granularity in nanoseconds.
    pub time_gran: u32,
    pub max_pages: u16,
    pub flags2: u32,
}

impl Reply {
    /// The finished reply: header filled in with `unique`, error 0 and the length.
    pub fn finish(mut self, unique: u64) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_le_bytes());
        self.buf[4..8].copy_from_slice(&0i32.to_le_bytes());
        self.buf[8..16].copy_from_slice(&unique.to_le_bytes());
        self.buf
    }
}

impl Default for Reply {
    fn default() -> Self {
        Reply::new()
    }
}

/// The header of a successful reply of `body_len` body bytes that the caller places after
/// it itself: the virtio door reads a READ's data straight into the guest's buffers.
pub fn header(unique: u64, body_len: usize) -> [u8; OUT_HEADER_LEN] {
    let mut h = [0; OUT_HEADER_LEN];
    let len = u32::try_from(OUT_HEADER_LEN + body_len).unwrap_or(u32::MAX);
    h[0..4].copy_from_slice(&len.to_le_bytes());
    h[8..16].copy_from_slice(&unique.to_le_bytes());
    h
}

/// An error reply: just the header, with `-errno`.
pub fn error(unique: u64, errno: i32) -> Vec<u8> {
    let mut buf = Vec::with_capacity(OUT_HEADER_LEN);
    buf.extend_from_slice(&(OUT_HEADER_LEN as u32).to_le_bytes());
    buf.extend_from_slice(&(-errno).to_le_bytes());
    buf.extend_from_slice(&unique.to_le_bytes());
    buf
}

/// A cache timeout as FUSE carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ttl {
    /// Seconds.
    pub secs: u64,
    /// Nanoseconds.
    pub nanos: u32,
}

impl Ttl {
    /// No caching.
    pub const ZERO: Ttl = Ttl { secs: 0, nanos: 0 };

    /// A timeout of `d`.
    pub fn from(d: std::time::Duration) -> Ttl {
        Ttl {
            secs: d.as_secs(),
            nanos: d.subsec_nanos(),
        }
    }
}

/// Size of a `fuse_dirent` holding a name of `namelen` bytes, padded to 8.
pub fn dirent_len(namelen: usize) -> usize {
    (24 + namelen + 7) & !7
}

/// Size of a `fuse_direntplus` (an entry, then a dirent) holding a name of `namelen`
/// bytes, padded to 8.
pub fn direntplus_len(namelen: usize) -> usize {
    128 + dirent_len(namelen)
}

/// Appends a `fuse_direntplus`: the entry (node id 0 for one the kernel is not to look up),
/// then the dirent.
pub fn direntplus(r: &mut Reply, entry: (u64, &Attr, Ttl), off: u64, name: &[u8]) {
    let (nodeid, attr, ttl) = entry;
    r.entry_of(nodeid, 0, attr, ttl, ttl);
    dirent(r, attr.ino, off, (attr.mode & 0o170000) >> 12, name);
}

/// Appends a `fuse_dirent`.
pub fn dirent(r: &mut Reply, ino: u64, off: u64, ty: u32, name: &[u8]) {
    let len = dirent_len(name.len());
    r.u64(ino)
        .u64(off)
        .u32(name.len() as u32)
        .u32(ty)
        .bytes(name);
    let pad = len - 24 - name.len();
    r.bytes(&[0; 8][..pad]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_sizes() {
        let e = error(9, libc::ENOENT);
        assert_eq!(e.len(), 16);
        assert_eq!(
            i32::from_le_bytes(e[4..8].try_into().unwrap()),
            -libc::ENOENT
        );
        let mut r = Reply::new();
        r.entry(0, None, Ttl::ZERO, Ttl::ZERO);
        assert_eq!(r.body_len(), 128);
        let out = r.finish(3);
        assert_eq!(u32::from_le_bytes(out[0..4].try_into().unwrap()), 144);
        assert_eq!(dirent_len(1), 32);
        assert_eq!(dirent_len(8), 32);
        assert_eq!(dirent_len(9), 40);
    }

    #[test]
    fn field_by_field_sizes() {
        let a = Attr {
            ino: 5,
            mode: 0o100644,
            ..Attr::default()
        };
        let mut r = Reply::new();
        r.entry_of(5, 0, &a, Ttl::ZERO, Ttl::ZERO);
        assert_eq!(r.body_len(), 128);
        let mut r = Reply::new();
        r.attr_out_of(&a, Ttl::ZERO);
        assert_eq!(r.body_len(), 104);
        let mut r = Reply::new();
        r.statfs_out(&Statfs::default());
        assert_eq!(r.body_len(), 80);
        let mut r = Reply::new();
        direntplus(&mut r, (5, &a, Ttl::ZERO), 1, b"abc");
        assert_eq!(r.body_len(), direntplus_len(3));
        // The dirent's type is the mode's (DT_REG).
        let body = r.finish(1);
        let ty = u32::from_le_bytes(body[16 + 128 + 20..16 + 128 + 24].try_into().unwrap());
        assert_eq!(ty, 8);
        for (minor, len) in [(4, 8), (22, 24), (40, 64)] {
            let mut r = Reply::new();
            r.init_out(&InitOut::default(), minor);
            assert_eq!(r.body_len(), len);
        }
    }
}
