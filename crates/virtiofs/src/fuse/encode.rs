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
}
