//! Server attributes (Rgetattr) as the kernel wants them (FileAttr), with the local id view.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::session::{FileAttr, FileType, INodeNo};
use crossfs_wire::Rgetattr;

/// What an open in `auto` mode compares to decide whether cached pages are still good,
/// whether an open for reading may wait for its first read, and, for a directory, the
/// group its new entries take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DataStamp {
    pub mtime: (u64, u64),
    pub size: u64,
    /// A set-group-ID directory's group (`None` for anything else).
    pub setgid_group: Option<u32>,
    /// A regular file that others may read: the server may open it for reading whatever
    /// its own credentials (see `OpenFile::deferred`).
    pub readable_by_anyone: bool,
}

/// How server ownership is shown locally: `None` passes the server's id through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IdMap {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// The file type of a `st_mode`.
pub(crate) fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// The file type a Rreaddir entry's `d_type` names.
pub(crate) fn kind_of_dtype(ty: u8) -> FileType {
    match ty {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// 9P times are unsigned on the wire but carry Linux's signed seconds.
fn time(sec: u64, nsec: u64) -> SystemTime {
    let nanos = Duration::from_nanos(nsec.min(999_999_999));
    let sec = sec as i64;
    if sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(sec as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + nanos
    }
}

/// The kernel's 32-bit device encoding (`new_encode_dev`) of a 64-bit `dev_t`.
fn encode_dev(rdev: u64) -> u32 {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// Major and minor of the kernel's 32-bit device encoding, as FUSE's mknod passes it.
pub(crate) fn decode_dev(rdev: u32) -> (u32, u32) {
    (
        (rdev & 0xfff00) >> 8,
        (rdev & 0xff) | ((rdev >> 12) & 0xfff00),
    )
}

/// The attributes the kernel should cache for node `ino`.
pub(crate) fn file_attr(ino: u64, a: &Rgetattr, ids: IdMap) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: a.size,
        blocks: a.blocks,
        atime: time(a.atime_sec, a.atime_nsec),
        mtime: time(a.mtime_sec, a.mtime_nsec),
        ctime: time(a.ctime_sec, a.ctime_nsec),
        crtime: time(a.btime_sec, a.btime_nsec),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink.min(u32::MAX as u64) as u32,
        uid: ids.uid.unwrap_or(a.uid),
        gid: ids.gid.unwrap_or(a.gid),
        rdev: encode_dev(a.rdev),
        blksize: a.blksize.clamp(512, 1 << 30) as u32,
        flags: 0,
    }
}

/// What `auto` mode compares across opens, and a set-group-ID directory's group.
pub(crate) fn stamp(a: &Rgetattr) -> DataStamp {
    let setgid_dir = a.mode & libc::S_IFMT == libc::S_IFDIR && a.mode & libc::S_ISGID != 0;
    DataStamp {
        mtime: (a.mtime_sec, a.mtime_nsec),
        size: a.size,
        setgid_group: setgid_dir.then_some(a.gid),
        readable_by_anyone: a.mode & libc::S_IFMT == libc::S_IFREG && a.mode & libc::S_IROTH != 0,
    }
}

/// Placeholder attributes for replies whose attributes the kernel ignores (negative
/// entries, "." and ".." in readdirplus).
pub(crate) fn placeholder(ino: u64, kind: FileType) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm: 0,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// Whether attributes are a directory's.
pub(crate) fn is_dir(a: &crossfs_wire::Rgetattr) -> bool {
    a.mode & libc::S_IFMT == libc::S_IFDIR
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_round_trip_through_the_kernel_encoding() {
        for (major, minor) in [(1, 3), (8, 17), (259, 0x12345), (4095, 255)] {
            let enc = encode_dev(libc::makedev(major, minor));
            assert_eq!(decode_dev(enc), (major, minor));
        }
    }

    #[test]
    fn times_before_the_epoch() {
        assert_eq!(
            time((-1i64) as u64, 500_000_000),
            UNIX_EPOCH - Duration::from_millis(500)
        );
        assert_eq!(time(10, 0), UNIX_EPOCH + Duration::from_secs(10));
    }

    #[test]
    fn ids_are_mapped_and_types_decoded() {
        let a = Rgetattr {
            mode: libc::S_IFLNK | 0o777,
            uid: 1000,
            gid: 1000,
            nlink: 1,
            size: 5,
            blksize: 4096,
            ..Rgetattr::default()
        };
        let f = file_attr(
            7,
            &a,
            IdMap {
                uid: Some(0),
                gid: None,
            },
        );
        assert_eq!(
            (f.kind, f.perm, f.uid, f.gid),
            (FileType::Symlink, 0o777, 0, 1000)
        );
    }
}
