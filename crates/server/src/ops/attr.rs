//! Attributes: getattr, setattr, statfs, readlink.

use crossfs_wire::{
    getattr as ga, setattr as sa, Rgetattr, Rmessage, Rreadlink, Rsetattr, Rstatfs, Tgetattr,
    Treadlink, Tsetattr, Tstatfs,
};
use rustix::fs::StatxFlags;
use rustix::io::Errno;

use crate::error::OpResult;
use crate::ops::setid;
use crate::session::Conn;
use crate::sys::{self, Time};

/// Tgetattr: everything stat(2) reports, from the fid's own handle (so an open file that has
/// been unlinked still answers), plus the birth time when the file system keeps one. All
/// fields are filled whatever the request mask; `valid` says which mean something.
pub(crate) fn getattr(conn: &Conn, m: Tgetattr) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    let st = sys::stat(f.fd())?;
    Ok(Rmessage::Getattr(rgetattr(conn, &st)))
}

/// The Rgetattr body for a file's `statx`.
pub(crate) fn rgetattr(conn: &Conn, st: &rustix::fs::Statx) -> Rgetattr {
    let has_btime = StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::BTIME);
    let mut valid = ga::BASIC;
    if has_btime {
        valid |= ga::BTIME;
    }
    let (btime_sec, btime_nsec) = if has_btime {
        (st.stx_btime.tv_sec as u64, u64::from(st.stx_btime.tv_nsec))
    } else {
        (0, 0)
    };
    Rgetattr {
        valid,
        qid: conn.server.qid(st),
        mode: u32::from(st.stx_mode),
        uid: st.stx_uid,
        gid: st.stx_gid,
        nlink: u64::from(st.stx_nlink),
        rdev: rustix::fs::makedev(st.stx_rdev_major, st.stx_rdev_minor),
        size: st.stx_size,
        blksize: u64::from(st.stx_blksize),
        blocks: st.stx_blocks,
        // Times before 1970 are negative; their two's-complement survives the round trip.
        atime_sec: st.stx_atime.tv_sec as u64,
        atime_nsec: u64::from(st.stx_atime.tv_nsec),
        mtime_sec: st.stx_mtime.tv_sec as u64,
        mtime_nsec: u64::from(st.stx_mtime.tv_nsec),
        ctime_sec: st.stx_ctime.tv_sec as u64,
        ctime_nsec: u64::from(st.stx_ctime.tv_nsec),
        btime_sec,
        btime_nsec,
        gen: 0,
        data_version: 0,
    }
}

/// Tsetattr. Applied in the order that keeps each change: owner first (a chown clears
/// set-id bits, which the server makes sure of), then mode (set-id bits only as
/// [`setid::setattr_perm`] allows), then size (which moves mtime), then times. CTIME alone
/// asks for nothing a host can do directly; every other change updates ctime anyway.
pub(crate) fn setattr(conn: &Conn, m: Tsetattr) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    if m.valid & !sa::CTIME == 0 {
        return Ok(Rmessage::Setattr(Rsetattr {}));
    }
    conn.server.check_writable()?;
    let proc_fd = conn.server.proc_fd();
    if m.valid & (sa::UID | sa::GID) != 0 {
        let uid = (m.valid & sa::UID != 0).then_some(m.uid);
        let gid = (m.valid & sa::GID != 0).then_some(m.gid);
        sys::chown(f.fd(), uid, gid)?;
        setid::drop_bits(conn, f.fd())?;
    }
    if m.valid & sa::MODE != 0 {
        let perm = if m.mode & setid::SETID != 0 {
            let current = u32::from(sys::stat(f.fd())?.stx_mode);
            setid::setattr_perm(conn, m.mode, current)
        } else {
            m.mode & 0o7777
        };
        sys::chmod(proc_fd, f.fd(), perm)?;
    }
    if m.valid & sa::SIZE != 0 {
        truncate(conn, f, m.size)?;
    }
    if m.valid & (sa::ATIME | sa::MTIME) != 0 {
        let atime = time(m.valid, sa::ATIME, sa::ATIME_SET, m.atime_sec, m.atime_nsec)?;
        let mtime = time(m.valid, sa::MTIME, sa::MTIME_SET, m.mtime_sec, m.mtime_nsec)?;
        sys::set_times(proc_fd, f.fd(), atime, mtime)?;
    }
    Ok(Rmessage::Setattr(Rsetattr {}))
}

fn time(valid: u32, bit: u32, set: u32, sec: u64, nsec: u64) -> OpResult<Time> {
    if valid & bit == 0 {
        return Ok(Time::Omit);
    }
    if valid & set == 0 {
        return Ok(Time::Now);
    }
    let nsec = i64::try_from(nsec).map_err(|_| Errno::INVAL)?;
    // The wire carries the bits of a signed time; negative times come back as they went.
    Ok(Time::At(sec as i64, nsec))
}

/// Truncation through the fid's open descriptor when it is writable, otherwise by reopening
/// the inode for writing (which needs write permission, as truncate(2) does). Only regular
/// files: a fifo reopened for writing would block the worker. Set-id bits go first (see
/// [`setid::before_write`]).
fn truncate(conn: &Conn, f: &crate::fid::FileFid, size: u64) -> OpResult<()> {
    if f.kind == libc::S_IFREG {
        let mode = u32::from(sys::stat(f.fd())?.stx_mode);
        setid::before_write(conn, f.fd(), mode)?;
    }
    if let Some(open) = f.open.get() {
        match sys::truncate(rustix::fd::AsFd::as_fd(&open.fd), size) {
            Ok(()) => return Ok(()),
            // Opened read-only (or a directory): fall through to the checks below.
            Err(Errno::BADF | Errno::INVAL) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let st = sys::stat(f.fd())?;
    match u32::from(st.stx_mode) & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFDIR => return Err(Errno::ISDIR.into()),
        _ => return Err(Errno::INVAL.into()),
    }
    let fd = sys::reopen(conn.server.proc_fd(), f.fd(), rustix::fs::OFlags::WRONLY)?;
    sys::truncate(rustix::fd::AsFd::as_fd(&fd), size)?;
    Ok(())
}

/// Tstatfs: `fstatfs` of the file system the fid lies on.
pub(crate) fn statfs(conn: &Conn, m: Tstatfs) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let s = sys::statfs(state.file()?.fd())?;
    Ok(Rmessage::Statfs(Rstatfs {
        ty: s.ty,
        bsize: s.bsize,
        blocks: s.blocks,
        bfree: s.bfree,
        bavail: s.bavail,
        files: s.files,
        ffree: s.ffree,
        fsid: s.fsid,
        namelen: s.namelen,
    }))
}

/// Treadlink: the target of the symlink the fid names (`EINVAL` for anything else).
pub(crate) fn readlink(conn: &Conn, m: Treadlink) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let target = sys::readlink(state.file()?.fd())?;
    Ok(Rmessage::Readlink(Rreadlink { target }))
}
