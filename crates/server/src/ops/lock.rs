//! POSIX byte-range locks, as open file description locks on the fid's open file.
//!
//! Each open fid is its own open file description, so locks taken through different fids
//! conflict as locks of different processes do; Linux's v9fs also tracks locks locally, which
//! covers the processes of one client. The server never waits: a conflicting Tlock answers
//! `BLOCKED`, and Linux's client retries blocking requests itself.

use crossfs_wire::{lock as wl, Rgetlock, Rlock, Rmessage, Tgetlock, Tlock};
use rustix::io::Errno;

use crossfs_export::sys::{self, LockRange};

use crate::error::OpResult;
use crate::session::Conn;

fn range(ty: u8, start: u64, length: u64) -> OpResult<LockRange> {
    let ty = match ty {
        wl::TYPE_RDLCK => libc::F_RDLCK,
        wl::TYPE_WRLCK => libc::F_WRLCK,
        wl::TYPE_UNLCK => libc::F_UNLCK,
        _ => return Err(Errno::INVAL.into()),
    };
    Ok(LockRange {
        ty: ty as i16,
        start: i64::try_from(start).map_err(|_| Errno::INVAL)?,
        // 0 is "to the end of the file" on both sides.
        len: i64::try_from(length).map_err(|_| Errno::INVAL)?,
        pid: 0,
    })
}

/// Tlock: `F_OFD_SETLK`; `SUCCESS`, or `BLOCKED` when another holder conflicts.
pub(crate) fn lock(conn: &Conn, m: Tlock) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let open = state.file()?.opened()?;
    let r = range(m.ty, m.start, m.length)?;
    let status = if sys::ofd_setlk(rustix::fd::AsFd::as_fd(&open.fd), r)? {
        wl::STATUS_SUCCESS
    } else {
        wl::STATUS_BLOCKED
    };
    Ok(Rmessage::Lock(Rlock { status }))
}

/// Tgetlock: `F_OFD_GETLK`; the conflicting lock, or the request with type `UNLCK`. The
/// holder's pid is not known for open file description locks (the kernel says -1): 0 is sent.
pub(crate) fn getlock(conn: &Conn, m: Tgetlock) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let open = state.file()?.opened()?;
    let r = range(m.ty, m.start, m.length)?;
    let reply = match sys::ofd_getlk(rustix::fd::AsFd::as_fd(&open.fd), r)? {
        None => Rgetlock {
            ty: wl::TYPE_UNLCK,
            start: m.start,
            length: m.length,
            proc_id: m.proc_id,
            client_id: m.client_id,
        },
        Some(held) => Rgetlock {
            ty: if held.ty == libc::F_WRLCK as i16 {
                wl::TYPE_WRLCK
            } else {
                wl::TYPE_RDLCK
            },
            start: held.start as u64,
            length: held.len as u64,
            proc_id: held.pid.max(0) as u32,
            client_id: m.client_id,
        },
    };
    Ok(Rmessage::Getlock(reply))
}
