//! Directory contents: listing, creating, linking, renaming and removing names.

use std::os::fd::{AsFd, BorrowedFd};

use crossfs_wire::{
    Data, DirEntry, Rlink, Rmessage, Rmkdir, Rmknod, Rreaddir, Rremove, Rrename, Rrenameat,
    Rsymlink, Runlinkat, Tlink, Tmkdir, Tmknod, Treaddir, Tremove, Trename, Trenameat, Tsymlink,
    Tunlinkat, AT_REMOVEDIR, RREAD_HEADER_LEN,
};
use rustix::io::Errno;

use crate::error::OpResult;
use crate::fid::{lock, Location};
use crate::names;
use crate::ops::setid;
use crate::session::Conn;
use crate::sys;

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
    sys::read_dir(open.fd.as_fd(), m.offset, max.min(GETDENTS_BUF), |e| {
        if conn.server.is_reserved(f.qid.path, e.name) {
            return true;
        }
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

/// After creating a file system object: when the server runs as root gives it to the
/// attaching user (`n_uname`, if given) and the requested group, as a local create by that
/// user would, then sets exactly the permission bits `perm` (the client applied its own
/// umask; the server's must not apply twice). In that order, because a chown clears set-id
/// bits. `perm` has been through [`setid::client_perm`]; a directory keeps the `S_ISGID` it
/// inherited from a setgid parent. Without root the server keeps ownership: it cannot give
/// files away, and pretending otherwise would lie.
pub(super) fn finish_create(
    conn: &Conn,
    fd: BorrowedFd<'_>,
    perm: u32,
    gid: u32,
    n_uname: u32,
) -> OpResult<()> {
    // Without root the server keeps ownership: it cannot give files away.
    let owner = conn.server.is_root.then_some((
        (n_uname != NONUNAME).then_some(n_uname),
        (gid != NONUNAME).then_some(gid),
    ));
    Ok(crossfs_export::policy::finish_create(
        conn.server.proc_fd(),
        fd,
        perm,
        owner,
    )?)
}

/// Opens the object just created as `name` in `dir`, fixes it up, and returns its qid.
fn created(
    conn: &Conn,
    dir: BorrowedFd<'_>,
    name: &std::ffi::CStr,
    perm: Option<u32>,
    gid: u32,
    n_uname: u32,
) -> OpResult<crossfs_wire::Qid> {
    let handle = sys::walk_one(dir, name, conn.server.openat2)?;
    finish_create(conn, handle.as_fd(), perm.unwrap_or(0o777), gid, n_uname)?;
    let st = sys::stat(handle.as_fd())?;
    Ok(conn.server.qid(&st))
}

/// Tmkdir. As mkdir(2), the mode's set-id bits are ignored (a directory inherits `S_ISGID`
/// from a setgid parent, nothing else).
pub(crate) fn mkdir(conn: &Conn, m: Tmkdir) -> OpResult<Rmessage> {
    conn.server.check_writable()?;
    let name = names::component(&m.name)?;
    let state = conn.fids.get(m.dfid)?;
    let dir = state.file()?;
    conn.server.check_not_reserved(dir.qid.path, &m.name)?;
    let perm = m.mode & 0o1777;
    sys::mkdir(dir.fd(), &name, perm)?;
    let qid = created(conn, dir.fd(), &name, Some(perm), m.gid, dir.n_uname)?;
    Ok(Rmessage::Mkdir(Rmkdir { qid }))
}

/// Tsymlink: the target is stored as given; it is data, never resolved by the server.
pub(crate) fn symlink(conn: &Conn, m: Tsymlink) -> OpResult<Rmessage> {
    conn.server.check_writable()?;
    let name = names::component(&m.name)?;
    let target = names::c_string(&m.symtgt)?;
    let state = conn.fids.get(m.fid)?;
    let dir = state.file()?;
    conn.server.check_not_reserved(dir.qid.path, &m.name)?;
    sys::symlink(&target, dir.fd(), &name)?;
    let qid = created(conn, dir.fd(), &name, None, m.gid, dir.n_uname)?;
    Ok(Rmessage::Symlink(Rsymlink { qid }))
}

/// Tmknod: fifos, sockets and regular files; device nodes only with `allow_devices`.
pub(crate) fn mknod(conn: &Conn, m: Tmknod) -> OpResult<Rmessage> {
    conn.server.check_writable()?;
    let name = names::component(&m.name)?;
    conn.server.policy().check_device(m.mode)?;
    match m.mode & libc::S_IFMT {
        libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFREG | 0 => {}
        _ => return Err(Errno::INVAL.into()),
    }
    let state = conn.fids.get(m.dfid)?;
    let dir = state.file()?;
    conn.server.check_not_reserved(dir.qid.path, &m.name)?;
    let perm = setid::client_perm(conn, m.mode);
    // mknod with type 0 makes a regular file, as mknod(2) does.
    let mode = match m.mode & libc::S_IFMT {
        0 => libc::S_IFREG | perm,
        ty => ty | perm,
    };
    sys::mknod(dir.fd(), &name, mode, sys::makedev(m.major, m.minor))?;
    let qid = created(conn, dir.fd(), &name, Some(perm), m.gid, dir.n_uname)?;
    Ok(Rmessage::Mknod(Rmknod { qid }))
}

/// Tlink: a hard link to the fid's inode, made through its magic link (no privilege needed,
/// unlike `AT_EMPTY_PATH`; a symlink fid links the symlink itself).
pub(crate) fn link(conn: &Conn, m: Tlink) -> OpResult<Rmessage> {
    conn.server.check_writable()?;
    let name = names::component(&m.name)?;
    let dstate = conn.fids.get(m.dfid)?;
    let dir = dstate.file()?;
    conn.server.check_not_reserved(dir.qid.path, &m.name)?;
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    sys::link(conn.server.proc_fd(), f.fd(), dir.fd(), &name)?;
    Ok(Rmessage::Link(Rlink {}))
}

/// Trenameat: renames within or across directories, replacing an existing target as
/// rename(2) does.
pub(crate) fn renameat(conn: &Conn, m: Trenameat) -> OpResult<Rmessage> {
    conn.server.check_writable()?;
    let old = names::component(&m.oldname)?;
    let new = names::component(&m.newname)?;
    let ostate = conn.fids.get(m.olddirfid)?;
    let nstate = conn.fids.get(m.newdirfid)?;
    let (odir, ndir) = (ostate.file()?, nstate.file()?);
    conn.server.check_not_reserved(odir.qid.path, &m.oldname)?;
    conn.server.check_not_reserved(ndir.qid.path, &m.newname)?;
    sys::rename(odir.fd(), &old, ndir.fd(), &new)?;
    Ok(Rmessage::Renameat(Rrenameat {}))
}

/// Trename: renames the file behind `fid` (found by the directory and name it was walked
/// through) to `name` in `dfid`, and remembers the new location.
pub(crate) fn rename(conn: &Conn, m: Trename) -> OpResult<Rmessage> {
    conn.server.check_writable()?;
    let new = names::component(&m.name)?;
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    let dstate = conn.fids.get(m.dfid)?;
    let dir = dstate.file()?;
    conn.server.check_not_reserved(dir.qid.path, &m.name)?;
    let loc = f.location().ok_or(Errno::BUSY)?;
    let old = names::component(&loc.name)?;
    check_same_inode(loc.parent.as_fd(), &old, f)?;
    sys::rename(loc.parent.as_fd(), &old, dir.fd(), &new)?;
    f.set_location(Location {
        parent: dir.handle.clone(),
        name: m.name,
    });
    Ok(Rmessage::Rename(Rrename {}))
}

/// Tunlinkat: removes a name; `AT_REMOVEDIR` for directories.
pub(crate) fn unlinkat(conn: &Conn, m: Tunlinkat) -> OpResult<Rmessage> {
    conn.server.check_writable()?;
    let name = names::component(&m.name)?;
    let state = conn.fids.get(m.dirfd)?;
    let dir = state.file()?;
    conn.server.check_not_reserved(dir.qid.path, &m.name)?;
    sys::unlink(dir.fd(), &name, m.flags & AT_REMOVEDIR != 0)?;
    Ok(Rmessage::Unlinkat(Runlinkat {}))
}

/// Tremove: clunks the fid (whatever happens next), then removes the name it was walked
/// through, if that name still names the fid's inode.
pub(crate) fn remove(conn: &Conn, m: Tremove) -> OpResult<Rmessage> {
    let state = conn.fids.remove(m.fid)?;
    conn.server.check_writable()?;
    let f = state.file()?;
    let loc = f.location().ok_or(Errno::BUSY)?;
    let name = names::component(&loc.name)?;
    check_same_inode(loc.parent.as_fd(), &name, f)?;
    let is_dir = f.qid.ty & crossfs_wire::QID_TYPE_DIR != 0;
    sys::unlink(loc.parent.as_fd(), &name, is_dir)?;
    Ok(Rmessage::Remove(Rremove {}))
}

/// `ENOENT` unless `name` in `dir` is still the fid's inode (it may have been renamed or
/// replaced since the walk; acting on whatever now has the name would surprise the client).
fn check_same_inode(
    dir: BorrowedFd<'_>,
    name: &std::ffi::CStr,
    f: &crate::fid::FileFid,
) -> OpResult<()> {
    let now = sys::stat_at(dir, name)?;
    let mine = sys::stat(f.fd())?;
    if now.stx_ino != mine.stx_ino
        || now.stx_dev_major != mine.stx_dev_major
        || now.stx_dev_minor != mine.stx_dev_minor
    {
        return Err(Errno::NOENT.into());
    }
    Ok(())
}
