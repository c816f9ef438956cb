//! The crossfs extension (docs/protocol.md): compounds of the plain handlers, so that each
//! step runs the same confinement, name rules, limits and setid policy as the message it
//! replaces, and listings that carry every entry's attributes.

use std::ffi::CString;
use std::os::fd::AsFd;

use crossfs_wire::{
    Data, DirEntry, DirEntryAttr, Fid, FileData, Rcreateattr, Rcreateattrdir, Rgetattr, Rmessage,
    Rmkdirattr, Rreaddirattr, Rreadfiles, Rrenameatattr, Rsetattrget, Runlinkatattr, Rwalkgetattr,
    Rwalkopen, Rwalkread, Rwalkreaddirattr, Rwriteattr, Tcreateattr, Tcreateattrdir, Tgetattr,
    Tlcreate, Tlink, Tlopen, Tmkdir, Tmkdirattr, Treaddirattr, Treadfiles, Trenameat,
    Trenameatattr, Tsetattr, Tsetattrget, Ttmpfile, Tunlinkat, Tunlinkatattr, Twalk, Twalkgetattr,
    Twalkopen, Twalkread, Twalkreaddirattr, Twriteattr, RREAD_HEADER_LEN,
};
use rustix::fs::OFlags;
use rustix::io::Errno;

use crossfs_export::budget::OpenFd;
use crossfs_export::sys;

use crate::error::{OpError, OpResult};
use crate::fid::{lock, FidState, FileFid, Location};
use crate::ops::{attr, dir, io, walk};
use crate::session::Conn;

/// Largest `getdents64` buffer per system call.
const GETDENTS_BUF: usize = 64 * 1024;

/// Walks every name of `wnames` from `fid` to `newfid`, or fails binding nothing: a partial
/// walk, which plain Twalk reports with fewer qids, is `ENOENT` here.
pub(crate) fn walk_all(
    conn: &Conn,
    fid: Fid,
    newfid: Fid,
    wnames: Vec<Vec<u8>>,
) -> OpResult<Vec<crossfs_wire::Qid>> {
    let n = wnames.len();
    match walk::walk(
        conn,
        Twalk {
            fid,
            newfid,
            wnames,
        },
    )? {
        Rmessage::Walk(w) if w.wqids.len() == n => Ok(w.wqids),
        Rmessage::Walk(_) => Err(Errno::NOENT.into()),
        _ => Err(OpError::Invalid("walk gave no Rwalk")),
    }
}

/// Unbinds `newfid` after a later step failed, unless the walk was in place.
pub(crate) fn unbind(conn: &Conn, fid: Fid, newfid: Fid) {
    if newfid != fid {
        let _ = conn.fids.remove(newfid);
    }
}

pub(crate) fn getattr(conn: &Conn, fid: Fid, request_mask: u64) -> OpResult<Rgetattr> {
    match attr::getattr(conn, Tgetattr { fid, request_mask })? {
        Rmessage::Getattr(a) => Ok(a),
        _ => Err(OpError::Invalid("getattr gave no Rgetattr")),
    }
}

/// Twalkgetattr: Twalk, then Tgetattr of the file reached.
pub(crate) fn walkgetattr(conn: &Conn, m: Twalkgetattr) -> OpResult<Rmessage> {
    let wqids = walk_all(conn, m.fid, m.newfid, m.wnames)?;
    match getattr(conn, m.newfid, m.request_mask) {
        Ok(attr) => Ok(Rmessage::Walkgetattr(Rwalkgetattr { wqids, attr })),
        Err(e) => {
            unbind(conn, m.fid, m.newfid);
            Err(e)
        }
    }
}

/// Tlopen of `fid`; returns the advised I/O size.
fn lopen(conn: &Conn, fid: Fid, flags: u32) -> OpResult<u32> {
    match io::lopen(conn, Tlopen { fid, flags })? {
        Rmessage::Lopen(o) => Ok(o.iounit),
        _ => Err(OpError::Invalid("lopen gave no Rlopen")),
    }
}

/// Twalkopen: Twalk to `newfid`, Tlopen of it, and its attributes.
pub(crate) fn walkopen(conn: &Conn, m: Twalkopen) -> OpResult<Rmessage> {
    if m.newfid == m.fid {
        // Opening in place would leave the fid open if a later step failed.
        return Err(OpError::Invalid("walkopen needs a new fid"));
    }
    let wqids = walk_all(conn, m.fid, m.newfid, m.wnames)?;
    let opened = lopen(conn, m.newfid, m.flags)
        .and_then(|iounit| Ok((iounit, getattr(conn, m.newfid, m.request_mask)?)));
    match opened {
        Ok((iounit, attr)) => Ok(Rmessage::Walkopen(Rwalkopen {
            wqids,
            iounit,
            attr,
        })),
        Err(e) => {
            unbind(conn, m.fid, m.newfid);
            Err(e)
        }
    }
}

/// Twalkread: Twalkopen's walk and open, then a read of the open file, answered with
/// as much as `count` and msize allow, and the attributes after it.
pub(crate) fn walkread(conn: &Conn, m: Twalkread) -> OpResult<Rmessage> {
    if m.newfid == m.fid {
        return Err(OpError::Invalid("walkread needs a new fid"));
    }
    let wqids = walk_all(conn, m.fid, m.newfid, m.wnames)?;
    // size[4] type[1] tag[2] nwqid[2] wqid[13 each] iounit[4] attr[153] count[4]
    let header = 7 + 2 + 13 * wqids.len() + 4 + 153 + 4;
    let room = (conn.msize() as usize).saturating_sub(header);
    let read = lopen(conn, m.newfid, m.flags).and_then(|iounit| {
        let state = conn.fids.get(m.newfid)?;
        let open = state.file()?.opened()?;
        let mut data = vec![0; (m.count as usize).min(room)];
        let n = sys::pread(open.fd.as_fd(), &mut data, m.offset)?;
        data.truncate(n);
        conn.server.count_read(&conn.stats, false, n);
        Ok((iounit, getattr(conn, m.newfid, m.request_mask)?, data))
    });
    match read {
        Ok((iounit, attr, data)) => Ok(Rmessage::Walkread(Rwalkread {
            wqids,
            iounit,
            attr,
            data: Data(data),
        })),
        Err(e) => {
            unbind(conn, m.fid, m.newfid);
            Err(e)
        }
    }
}

/// Treadfiles: each named regular file of directory `fid` whose whole content fits in
/// `max_each` bytes, and each named symbolic link's target, with the attributes after the
/// read, as many as fit in msize. Each
/// name is reached as a walk reaches it (beneath the directory, never through a symlink,
/// charged to the connection's descriptors) and opened `O_RDONLY|O_NOATIME`: a file the
/// server may not open so (not its owner, without `CAP_FOWNER`), or that is missing, not
/// regular, too large, or changing while read, is left out (the client reads it as usual).
/// A name that is not a single component fails the request, as in a walk.
pub(crate) fn readfiles(conn: &Conn, m: Treadfiles) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let dir = state.file()?;
    if dir.kind != libc::S_IFDIR {
        return Err(Errno::NOTDIR.into());
    }
    for name in &m.names {
        crossfs_export::names::component(name)?;
    }
    let room = (conn.msize() as usize).saturating_sub(RREAD_HEADER_LEN + 1);
    let max_each = (m.max_each as usize).min(room);
    let mut data = Vec::new();
    for raw in &m.names {
        let Some((attr, content)) = read_whole(conn, conn.server.dir(dir), raw, max_each) else {
            continue;
        };
        if data.len() + FileData::wire_len(raw.len(), content.len()) > room {
            break;
        }
        FileData {
            name: raw.clone(),
            attr,
            data: content,
        }
        .encode(&mut data);
    }
    Ok(Rmessage::Readfiles(Rreadfiles { data: Data(data) }))
}

/// `name` in `dir`, whole, if it is a regular file of at most `max` bytes that the server
/// may open without moving its access time, and its size after the read is what was read;
/// or a symbolic link's target (reading a link moves its access time as a readlink does).
fn read_whole(
    conn: &Conn,
    dir: crossfs_export::Dir<'_>,
    name: &[u8],
    max: usize,
) -> Option<(Rgetattr, Vec<u8>)> {
    let (path, st) = conn.server.export.lookup(dir, name).ok()?;
    let kind = u32::from(st.stx_mode) & libc::S_IFMT;
    if st.stx_size > max as u64 {
        return None;
    }
    if kind == libc::S_IFLNK {
        // A link's target never changes: another target is another link.
        let fd = path.fd().ok()?;
        let target = sys::readlink(fd.as_fd()).ok()?;
        let after = sys::stat(fd.as_fd()).ok()?;
        return (target.len() <= max).then(|| (attr::rgetattr(conn, &after), target));
    }
    if kind != libc::S_IFREG {
        return None;
    }
    let _open_charge = conn.fds.charge().ok()?;
    let flags = OFlags::RDONLY | OFlags::NOATIME;
    let (fd, _) = conn.server.export.open_file(&path, flags).ok()?;
    // One byte more than allowed: a file that grew meanwhile is left out.
    let mut content = vec![0; max + 1];
    let mut n = 0;
    while n < content.len() {
        match sys::pread(fd.as_fd(), &mut content[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    content.truncate(n);
    conn.server.count_read(&conn.stats, false, n);
    let after = sys::stat(fd.as_fd()).ok()?;
    (n <= max && after.stx_size == n as u64).then(|| (attr::rgetattr(conn, &after), content))
}

/// Tcreateattr: Tlcreate on a clone of `dfid` bound to `openfid`, then `nodefid` bound to
/// the same file (sharing its `O_PATH` handle: the name is not walked again, so a rename on
/// the host in between cannot give `nodefid` another file).
pub(crate) fn createattr(conn: &Conn, m: Tcreateattr) -> OpResult<Rmessage> {
    two_new_fids(conn, &m)?;
    walk_all(conn, m.dfid, m.openfid, Vec::new())?;
    let created = io::lcreate(
        conn,
        Tlcreate {
            fid: m.openfid,
            name: m.name,
            flags: m.flags,
            mode: m.mode,
            gid: m.gid,
        },
    )
    .and_then(|r| match r {
        Rmessage::Lcreate(c) => Ok(c.iounit),
        _ => Err(OpError::Invalid("lcreate gave no Rlcreate")),
    })
    .and_then(|iounit| {
        bind_node_of(conn, m.openfid, m.nodefid)?;
        Ok(iounit)
    });
    let iounit = match created {
        Ok(iounit) => iounit,
        Err(e) => {
            let _ = conn.fids.remove(m.openfid);
            return Err(e);
        }
    };
    match getattr(conn, m.nodefid, m.request_mask) {
        Ok(attr) => Ok(Rmessage::Createattr(Rcreateattr { iounit, attr })),
        Err(e) => {
            let _ = conn.fids.remove(m.openfid);
            let _ = conn.fids.remove(m.nodefid);
            Err(e)
        }
    }
}

/// Tcreateattr of a file with the access time `atime` (a mark a later try of the same
/// create knows it by): made without a name, marked, then linked under `m.name`, so that
/// no file is ever under the name unmarked (a server killed in between leaves nothing).
/// Where the host cannot make a file without a name (its file system, or an open that
/// does not write), made under the name and marked after. `EEXIST` for a taken name.
pub(crate) fn createattr_marked(
    conn: &Conn,
    m: Tcreateattr,
    (atime_sec, atime_nsec): (u64, u64),
) -> OpResult<Rmessage> {
    use crossfs_wire::open_flags as of;
    two_new_fids(conn, &m)?;
    let mark = |fid| {
        let set = Tsetattr {
            valid: crossfs_wire::setattr::ATIME | crossfs_wire::setattr::ATIME_SET,
            atime_sec,
            atime_nsec,
            ..Tsetattr::unchanged(fid)
        };
        attr::setattr(conn, set)
    };
    let unnamed = Ttmpfile {
        dfid: m.dfid,
        newfid: m.openfid,
        // Tmpfile's O_EXCL would make it never linked.
        flags: m.flags & !(of::CREATE | of::EXCL | of::TRUNC),
        mode: m.mode,
        gid: m.gid,
        request_mask: m.request_mask,
    };
    let iounit = match io::tmpfile(conn, unnamed) {
        Ok(_) => conn.iounit(),
        Err(OpError::Os(Errno::OPNOTSUPP | Errno::INVAL | Errno::ISDIR)) => {
            let Rmessage::Createattr(mut made) = createattr(conn, m.clone())? else {
                return Err(OpError::Invalid("Tcreateattr answered something else"));
            };
            // Made and bound: it stands even unmarked (a later try keeps it beside).
            if mark(m.nodefid).is_ok() {
                made.attr = getattr(conn, m.nodefid, m.request_mask).unwrap_or(made.attr);
            }
            return Ok(Rmessage::Createattr(made));
        }
        Err(e) => return Err(e),
    };
    let named = mark(m.openfid)
        .and_then(|_| {
            dir::link(
                conn,
                Tlink {
                    dfid: m.dfid,
                    fid: m.openfid,
                    name: m.name.clone(),
                },
            )
        })
        .and_then(|_| {
            let dstate = conn.fids.get(m.dfid)?;
            conn.fids.get(m.openfid)?.file()?.set_location(Location {
                parent: dstate.file()?.handle.clone(),
                name: m.name.clone(),
            });
            bind_node_of(conn, m.openfid, m.nodefid)?;
            getattr(conn, m.nodefid, m.request_mask)
        });
    match named {
        Ok(attr) => Ok(Rmessage::Createattr(Rcreateattr { iounit, attr })),
        Err(e) => {
            // Unnamed, the file goes with its fid.
            let _ = conn.fids.remove(m.openfid);
            let _ = conn.fids.remove(m.nodefid);
            Err(e)
        }
    }
}

/// The regular file `m.name` in `m.dfid`, where `is_own` says an earlier try of the same
/// create made it: bound to both fids, opened with `m.flags` but never created or
/// truncated again, and answered as Tcreateattr would. `None` (nothing bound) where the
/// name is not such a file.
pub(crate) fn open_made(
    conn: &Conn,
    m: &Tcreateattr,
    is_own: impl FnOnce(&Rgetattr) -> bool,
) -> OpResult<Option<Rcreateattr>> {
    use crossfs_wire::open_flags as of;
    two_new_fids(conn, m)?;
    walk_all(conn, m.dfid, m.nodefid, vec![m.name.clone()])?;
    let found = getattr(conn, m.nodefid, m.request_mask)?;
    if found.mode & libc::S_IFMT != libc::S_IFREG || !is_own(&found) {
        unbind(conn, m.dfid, m.nodefid);
        return Ok(None);
    }
    let flags = m.flags & !(of::CREATE | of::EXCL | of::TRUNC);
    let opened = walk_all(conn, m.nodefid, m.openfid, Vec::new())
        .and_then(|_| lopen(conn, m.openfid, flags))
        .and_then(|iounit| Ok((iounit, getattr(conn, m.nodefid, m.request_mask)?)));
    match opened {
        Ok((iounit, attr)) => Ok(Some(Rcreateattr { iounit, attr })),
        Err(e) => {
            let _ = conn.fids.remove(m.openfid);
            unbind(conn, m.dfid, m.nodefid);
            Err(e)
        }
    }
}

/// A create's node and open fids: two, distinct from the directory's and from each other,
/// the node's not in use (the open fid's use is checked as it is bound).
fn two_new_fids(conn: &Conn, m: &Tcreateattr) -> OpResult<()> {
    if m.nodefid == m.openfid || m.nodefid == m.dfid || m.openfid == m.dfid {
        return Err(OpError::Invalid("createattr needs two new fids"));
    }
    if conn.fids.contains(m.nodefid) {
        return Err(Errno::BADF.into());
    }
    Ok(())
}

/// Binds `nodefid` to the file open fid `openfid` names, unopened.
fn bind_node_of(conn: &Conn, openfid: Fid, nodefid: Fid) -> OpResult<()> {
    let state = conn.fids.get(openfid)?;
    let f = state.file()?;
    let node = FileFid::new(
        f.handle.clone(),
        f.qid,
        (f.dev, f.kind),
        f.location(),
        f.n_uname,
    );
    conn.fids.insert_new(nodefid, FidState::File(node))?;
    Ok(())
}

/// Tsetattrget: Tsetattr, then Tgetattr of the same fid.
pub(crate) fn setattrget(conn: &Conn, m: Tsetattrget) -> OpResult<Rmessage> {
    let fid = m.set.fid;
    attr::setattr(conn, m.set)?;
    let attr = getattr(conn, fid, m.request_mask)?;
    Ok(Rmessage::Setattrget(Rsetattrget { attr }))
}

/// A directory's attributes after a change made in it: the change stands whatever this
/// finds, so a failure is `valid` 0, not an error.
pub(crate) fn attr_after_change(conn: &Conn, dir: Fid, request_mask: u64) -> Rgetattr {
    getattr(conn, dir, request_mask).unwrap_or_default()
}

/// Tmkdirattr: Tmkdir, then the new directory bound to `newfid` with its attributes, then
/// the parent's. The mkdir stands whatever follows it: a new directory not found when
/// walked is answered `valid` 0, unbound.
pub(crate) fn mkdirattr(conn: &Conn, m: Tmkdirattr) -> OpResult<Rmessage> {
    if m.newfid == m.dfid || conn.fids.contains(m.newfid) {
        return Err(Errno::BADF.into());
    }
    dir::mkdir(
        conn,
        Tmkdir {
            dfid: m.dfid,
            name: m.name.clone(),
            mode: m.mode,
            gid: m.gid,
        },
    )?;
    let attr = walk_all(conn, m.dfid, m.newfid, vec![m.name])
        .and_then(|_| getattr(conn, m.newfid, m.request_mask))
        .unwrap_or_else(|_| {
            unbind(conn, m.dfid, m.newfid);
            Rgetattr::default()
        });
    let dir = attr_after_change(conn, m.dfid, m.request_mask);
    Ok(Rmessage::Mkdirattr(Rmkdirattr { attr, dir }))
}

/// Tcreateattrdir: Tcreateattr, then the directory's attributes.
pub(crate) fn createattrdir(conn: &Conn, m: Tcreateattrdir) -> OpResult<Rmessage> {
    let (dfid, request_mask) = (m.create.dfid, m.create.request_mask);
    let Rmessage::Createattr(created) = createattr(conn, m.create)? else {
        return Err(OpError::Invalid("Tcreateattr answered something else"));
    };
    let dir = attr_after_change(conn, dfid, request_mask);
    Ok(Rmessage::Createattrdir(Rcreateattrdir { created, dir }))
}

/// Twriteattr: Twrite, then the file's basic attributes.
pub(crate) fn writeattr(conn: &Conn, m: Twriteattr) -> OpResult<Rmessage> {
    writeattr_data(conn, (m.fid, m.offset), io::WriteData::Bytes(&m.data.0))
}

/// Twriteattr of `data`, in memory or in pipes.
pub(crate) fn writeattr_data(
    conn: &Conn,
    (fid, offset): (Fid, u64),
    data: io::WriteData<'_>,
) -> OpResult<Rmessage> {
    let count = io::write_data(conn, (fid, offset), data)?;
    let attr = attr_after_change(conn, fid, crossfs_wire::getattr::BASIC);
    Ok(Rmessage::Writeattr(Rwriteattr { count, attr }))
}

/// Tunlinkatattr: Tunlinkat, then the directory's attributes.
pub(crate) fn unlinkatattr(conn: &Conn, m: Tunlinkatattr) -> OpResult<Rmessage> {
    let (dirfd, request_mask) = (m.dirfd, m.request_mask);
    dir::unlinkat(
        conn,
        Tunlinkat {
            dirfd,
            name: m.name,
            flags: m.flags,
        },
    )?;
    let dir = attr_after_change(conn, dirfd, request_mask);
    Ok(Rmessage::Unlinkatattr(Runlinkatattr { dir }))
}

/// Trenameatattr: Trenameat, then both directories' attributes.
pub(crate) fn renameatattr(conn: &Conn, m: Trenameatattr) -> OpResult<Rmessage> {
    let (olddirfid, newdirfid, request_mask) = (m.olddirfid, m.newdirfid, m.request_mask);
    dir::renameat(
        conn,
        Trenameat {
            olddirfid,
            oldname: m.oldname,
            newdirfid,
            newname: m.newname,
        },
    )?;
    let olddir = attr_after_change(conn, olddirfid, request_mask);
    let newdir = if newdirfid == olddirfid {
        olddir.clone()
    } else {
        attr_after_change(conn, newdirfid, request_mask)
    };
    Ok(Rmessage::Renameatattr(Rrenameatattr { olddir, newdir }))
}

/// Treaddirattr: like Treaddir, each entry followed by the attributes an `lstat` of it
/// beneath the directory gives; "." with the directory's own, taken once this call has
/// read its entries (which may have moved its access time), ".." with none (`valid` 0).
/// The fid need not be open: a directory descriptor is opened
/// for this call only (charged to the connection's descriptor budget). An entry that
/// vanished before its `lstat` is left out; any other failure to stat one fails the call,
/// so a listing never claims a name missing that a walk would find.
pub(crate) fn readdirattr(conn: &Conn, m: Treaddirattr) -> OpResult<Rmessage> {
    let data = list_with_attrs(conn, &m, 0)?;
    Ok(Rmessage::Readdirattr(Rreaddirattr { data: Data(data) }))
}

/// Twalkreaddirattr: Twalk to `newfid`, then Treaddirattr of it.
pub(crate) fn walkreaddirattr(conn: &Conn, m: Twalkreaddirattr) -> OpResult<Rmessage> {
    let wqids = walk_all(conn, m.fid, m.newfid, m.wnames)?;
    let list = Treaddirattr {
        fid: m.newfid,
        offset: m.offset,
        count: m.count,
        request_mask: m.request_mask,
    };
    // nwqid[2] wqid[13 each], before the entries' count and data.
    match list_with_attrs(conn, &list, 2 + 13 * wqids.len()) {
        Ok(data) => Ok(Rmessage::Walkreaddirattr(Rwalkreaddirattr {
            wqids,
            data: Data(data),
        })),
        Err(e) => {
            unbind(conn, m.fid, m.newfid);
            Err(e)
        }
    }
}

/// The entries of Treaddirattr `m`, with room in the reply for `more` bytes besides them.
fn list_with_attrs(conn: &Conn, m: &Treaddirattr, more: usize) -> OpResult<Vec<u8>> {
    let room = (conn.msize() as usize).saturating_sub(RREAD_HEADER_LEN + 1 + more);
    let max = (m.count as usize).min(room);
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    if f.kind != libc::S_IFDIR {
        return Err(Errno::NOTDIR.into());
    }
    let mut data = Vec::with_capacity(max.min(GETDENTS_BUF));
    let mut too_small = false;
    let mut failed = None;
    // Where "." went and what it is: its attributes are filled in after the last
    // getdents of this call.
    let mut dot = None;
    let mut each = |dir: std::os::fd::BorrowedFd<'_>, e: sys::RawEntry<'_>| {
        if data.len() + DirEntryAttr::wire_len(e.name.len()) > max {
            too_small = data.is_empty();
            return false;
        }
        if e.name == b"." || e.name == b".." {
            // Listed as Treaddir lists them, without attributes for now (`..` of the
            // export's root is outside it).
            let entry = DirEntry {
                qid: conn.server.entry_qid(f.dev, e.ino, e.ty),
                offset: e.next,
                ty: e.ty,
                name: e.name.to_vec(),
            };
            if e.name == b"." {
                dot = Some((data.len(), entry.clone()));
            }
            DirEntryAttr {
                entry,
                // No attributes: `valid` 0.
                attr: Rgetattr::default(),
            }
            .encode(&mut data);
            return true;
        }
        let Ok(name) = CString::new(e.name) else {
            return true;
        };
        let st = match sys::stat_at(dir, &name) {
            Ok(st) => st,
            Err(Errno::NOENT) => return true,
            Err(err) => {
                failed = Some(err);
                return false;
            }
        };
        let attr = attr::rgetattr(conn, &st);
        DirEntryAttr {
            entry: DirEntry {
                qid: attr.qid,
                offset: e.next,
                ty: e.ty,
                name: e.name.to_vec(),
            },
            attr,
        }
        .encode(&mut data);
        true
    };
    let buf = max.min(GETDENTS_BUF);
    let is_root = conn.server.dir(f).is_root;
    let list =
        |fd, each: &mut dyn FnMut(std::os::fd::BorrowedFd<'_>, sys::RawEntry<'_>) -> bool| {
            conn.server
                .export
                .list(fd, is_root, m.offset, buf, |e| each(fd, e))
        };
    let dir_after = match f.open.get() {
        Some(open) => {
            let _cursor = lock(&open.dir_cursor);
            let fd = open.fd.as_fd();
            list(fd, &mut each)?;
            sys::stat(fd)
        }
        None => {
            let charge = conn.fds.charge()?;
            let flags = OFlags::RDONLY | OFlags::DIRECTORY;
            let (dir, _) = conn.server.export.open_file(&f.handle, flags)?;
            let dir = OpenFd::new(dir, charge);
            let fd = dir.as_fd();
            list(fd, &mut each)?;
            sys::stat(fd)
        }
    };
    if let (Some((at, entry)), Ok(st)) = (dot, dir_after) {
        // The same entry with attributes has the same size: it replaces the placeholder.
        let mut with_attr = Vec::new();
        let attr = attr::rgetattr(conn, &st);
        DirEntryAttr { entry, attr }.encode(&mut with_attr);
        if let Some(slot) = data.get_mut(at..at + with_attr.len()) {
            slot.copy_from_slice(&with_attr);
        }
    }
    if let Some(err) = failed {
        return Err(err.into());
    }
    if too_small {
        return Err(Errno::INVAL.into());
    }
    Ok(data)
}
