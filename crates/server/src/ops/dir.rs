//! Directory contents: listing, creating, linking, renaming and removing names.

use std::os::fd::AsFd;

use crossfs_wire::{
    Data, DirEntry, Qid, Rlink, Rmessage, Rmkdir, Rmknod, Rreaddir, Rremove, Rrename, Rrenameat,
    Rsymlink, Runlinkat, Tlink, Tmkdir, Tmknod, Treaddir, Tremove, Trename, Trenameat, Tsymlink,
    Tunlinkat, AT_REMOVEDIR, QID_TYPE_DIR, QID_TYPE_SYMLINK, RREAD_HEADER_LEN,
};
use rustix::io::Errno;

use crossfs_export::sys;
use crossfs_export::{Caller, ExportError, ExportResult, Made};

use crate::error::OpResult;
use crate::fid::{lock, Location};
use crate::session::Conn;

/// Largest `getdents64` buffer per system call; a big Treaddir loops.
const GETDENTS_BUF: usize = 64 * 1024;

/// The numeric id meaning "none given" (Linux sends it as `n_uname` when it has no user).
const NONUNAME: u32 = !0;

/// Treaddir: entries from the cookie `offset` (0: the start, "." and ".." included), each
/// carrying the kernel's `d_off` as the cookie for the next call, so offsets stay valid across
/// calls and concurrent changes. The payload stays within `count` and strictly below msize.
pub(crate) fn readdir(conn: &Conn, m: Treaddir) -> OpResult<Rmessage> {
    let room = (conn.msize() as usize).saturating_sub(RREAD_HEADER_LEN + 1);
    let max = (m.count as usize).min(room);
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    let open = f.opened()?;
    let _cursor = lock(&open.dir_cursor);
    let mut data = Vec::with_capacity(max.min(GETDENTS_BUF));
    let mut too_small = false;
    let is_root = conn.server.dir(f).is_root;
    let fd = open.fd.as_fd();
    conn.server
        .export
        .list(fd, is_root, m.offset, max.min(GETDENTS_BUF), |e| {
            if data.len() + DirEntry::wire_len(e.name.len()) > max {
                too_small = data.is_empty();
                return false;
            }
            DirEntry {
                qid: conn.server.entry_qid(f.dev, e.ino, e.ty),
                offset: e.next,
                ty: e.ty,
                name: e.name.to_vec(),
            }
            .encode(&mut data);
            true
        })?;
    if too_small {
        // As getdents(2) says when its buffer cannot hold the next entry.
        return Err(Errno::INVAL.into());
    }
    Ok(Rmessage::Readdir(Rreaddir { data: Data(data) }))
}

/// Who a create is for, as 9P2000.L says it: the attaching user (`n_uname`) and the
/// requested group, each unless "none" (`!0`). The export core gives the new file to them
/// when the server runs as root.
pub(super) fn caller(n_uname: u32, gid: u32) -> Caller {
    Caller {
        uid: (n_uname != NONUNAME).then_some(n_uname),
        gid: (gid != NONUNAME).then_some(gid),
    }
}

/// The qid of a file just made. One another client removed or renamed at once was made
/// all the same, as a local mkdir would have been: its qid is of the type made, with
/// path 0 (the file is nowhere now, so no walk meets that qid).
fn made_qid(conn: &Conn, made: ExportResult<Made>, ty: u8) -> OpResult<Qid> {
    match made {
        Ok(made) => Ok(conn.server.qid(&made.stat)),
        Err(ExportError::Vanished) => Ok(Qid {
            ty,
            version: 0,
            path: 0,
        }),
        Err(e) => Err(e.into()),
    }
}

/// Tmkdir.
pub(crate) fn mkdir(conn: &Conn, m: Tmkdir) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.dfid)?;
    let dir = state.file()?;
    let made = conn.server.export.mkdir(
        conn.server.dir(dir),
        &m.name,
        m.mode,
        caller(dir.n_uname, m.gid),
    );
    Ok(Rmessage::Mkdir(Rmkdir {
        qid: made_qid(conn, made, QID_TYPE_DIR)?,
    }))
}

/// Tsymlink.
pub(crate) fn symlink(conn: &Conn, m: Tsymlink) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let dir = state.file()?;
    let made = conn.server.export.symlink(
        conn.server.dir(dir),
        &m.name,
        &m.symtgt,
        caller(dir.n_uname, m.gid),
    );
    Ok(Rmessage::Symlink(Rsymlink {
        qid: made_qid(conn, made, QID_TYPE_SYMLINK)?,
    }))
}

/// Tmknod.
pub(crate) fn mknod(conn: &Conn, m: Tmknod) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.dfid)?;
    let dir = state.file()?;
    let made = conn.server.export.mknod(
        conn.server.dir(dir),
        &m.name,
        m.mode,
        sys::makedev(m.major, m.minor),
        caller(dir.n_uname, m.gid),
    );
    Ok(Rmessage::Mknod(Rmknod {
        qid: made_qid(conn, made, 0)?,
    }))
}

/// Tlink: a hard link to the fid's inode.
pub(crate) fn link(conn: &Conn, m: Tlink) -> OpResult<Rmessage> {
    let dstate = conn.fids.get(m.dfid)?;
    let dir = dstate.file()?;
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    conn.server
        .export
        .link(&f.handle, conn.server.dir(dir), &m.name)?;
    Ok(Rmessage::Link(Rlink {}))
}

/// Trenameat: renames within or across directories, replacing an existing target as
/// rename(2) does.
pub(crate) fn renameat(conn: &Conn, m: Trenameat) -> OpResult<Rmessage> {
    let ostate = conn.fids.get(m.olddirfid)?;
    let nstate = conn.fids.get(m.newdirfid)?;
    let (odir, ndir) = (ostate.file()?, nstate.file()?);
    conn.server.export.rename(
        conn.server.dir(odir),
        &m.oldname,
        conn.server.dir(ndir),
        &m.newname,
    )?;
    Ok(Rmessage::Renameat(Rrenameat {}))
}

/// Trename: renames the file behind `fid` (found by the directory and name it was walked
/// through) to `name` in `dfid`, and remembers the new location.
pub(crate) fn rename(conn: &Conn, m: Trename) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    let dstate = conn.fids.get(m.dfid)?;
    let dir = dstate.file()?;
    let loc = f.location().ok_or(Errno::BUSY)?;
    check_same_inode(&loc, f)?;
    conn.server.export.rename(
        conn.server.dir_of(&loc.parent),
        &loc.name,
        conn.server.dir(dir),
        &m.name,
    )?;
    f.set_location(Location {
        parent: dir.handle.clone(),
        name: m.name,
    });
    Ok(Rmessage::Rename(Rrename {}))
}

/// Tunlinkat: removes a name; `AT_REMOVEDIR` for directories.
pub(crate) fn unlinkat(conn: &Conn, m: Tunlinkat) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.dirfd)?;
    let dir = state.file()?;
    conn.server
        .export
        .unlink(conn.server.dir(dir), &m.name, m.flags & AT_REMOVEDIR != 0)?;
    Ok(Rmessage::Unlinkat(Runlinkat {}))
}

/// Tremove: clunks the fid (whatever happens next), then removes the name it was walked
/// through, if that name still names the fid's inode.
pub(crate) fn remove(conn: &Conn, m: Tremove) -> OpResult<Rmessage> {
    let state = conn.fids.remove(m.fid)?;
    conn.server.export.policy.check_writable()?;
    let f = state.file()?;
    let loc = f.location().ok_or(Errno::BUSY)?;
    check_same_inode(&loc, f)?;
    let is_dir = f.qid.ty & crossfs_wire::QID_TYPE_DIR != 0;
    conn.server
        .export
        .unlink(conn.server.dir_of(&loc.parent), &loc.name, is_dir)?;
    Ok(Rmessage::Remove(Rremove {}))
}

/// `ENOENT` unless `name` in `dir` is still the fid's inode (it may have been renamed or
/// replaced since the walk; acting on whatever now has the name would surprise the client).
fn check_same_inode(loc: &Location, f: &crate::fid::FileFid) -> OpResult<()> {
    let name = crossfs_export::names::component(&loc.name)?;
    let now = sys::stat_at(loc.parent.fd()?.as_fd(), &name)?;
    let mine = sys::stat(f.fd()?.as_fd())?;
    if now.stx_ino != mine.stx_ino
        || now.stx_dev_major != mine.stx_dev_major
        || now.stx_dev_minor != mine.stx_dev_minor
    {
        return Err(Errno::NOENT.into());
    }
    Ok(())
}
