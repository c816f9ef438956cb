//! Attributes: getattr, setattr, statfs, readlink.

use crossfs_wire::{
    getattr as ga, setattr as sa, Rgetattr, Rmessage, Rreadlink, Rsetattr, Rstatfs, Tgetattr,
    Treadlink, Tsetattr, Tstatfs,
};
use std::os::fd::AsFd;

use rustix::fs::StatxFlags;
use rustix::io::Errno;

use crossfs_export::sys::{self, Time};
use crossfs_export::SetAttr;

use crate::error::OpResult;
use crate::session::Conn;

/// Tgetattr: everything stat(2) reports, from the fid's own handle (so an open file that has
/// been unlinked still answers), plus the birth time when the file system keeps one. All
/// fields are filled whatever the request mask; `valid` says which mean something.
pub(crate) fn getattr(conn: &Conn, m: Tgetattr) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    let st = sys::stat(f.fd()?.as_fd())?;
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

/// Tsetattr, as the export core applies it ([`crossfs_export::Export::setattr`]). CTIME
/// alone asks for nothing a host can do directly; every other change updates ctime anyway.
pub(crate) fn setattr(conn: &Conn, m: Tsetattr) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    let set = to_setattr(&m)?;
    let open = f.open.get().map(|o| rustix::fd::AsFd::as_fd(&o.fd));
    conn.server.export.setattr(&f.handle, open, &set)?;
    Ok(Rmessage::Setattr(Rsetattr {}))
}

/// The export core's form of a Tsetattr's changes.
pub(crate) fn to_setattr(m: &Tsetattr) -> OpResult<SetAttr> {
    Ok(SetAttr {
        mode: (m.valid & sa::MODE != 0).then_some(m.mode),
        uid: (m.valid & sa::UID != 0).then_some(m.uid),
        gid: (m.valid & sa::GID != 0).then_some(m.gid),
        size: (m.valid & sa::SIZE != 0).then_some(m.size),
        atime: time(m.valid, sa::ATIME, sa::ATIME_SET, m.atime_sec, m.atime_nsec)?,
        mtime: time(m.valid, sa::MTIME, sa::MTIME_SET, m.mtime_sec, m.mtime_nsec)?,
        kill_suidgid: m.valid & sa::KILL_SUIDGID != 0,
    })
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

/// Tstatfs: `fstatfs` of the file system the fid lies on.
pub(crate) fn statfs(conn: &Conn, m: Tstatfs) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let s = sys::statfs(state.file()?.fd()?.as_fd())?;
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
    let target = sys::readlink(state.file()?.fd()?.as_fd())?;
    Ok(Rmessage::Readlink(Rreadlink { target }))
}
