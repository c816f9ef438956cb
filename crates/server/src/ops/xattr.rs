//! Extended attributes: Txattrwalk (+ Tread) to get or list, Txattrcreate (+ Twrite, Tclunk)
//! to set or remove. Values are bounded by `max_xattr_size` in both directions, and what one
//! connection's xattr fids hold together by `max_pending_xattr_bytes` (`ENOSPC` past it).

use std::sync::Mutex;

use crossfs_wire::{xattr_flags, Rmessage, Rxattrcreate, Rxattrwalk, Txattrcreate, Txattrwalk};
use rustix::io::Errno;

use crossfs_export::names;

use crate::error::{OpError, OpResult};
use crate::fid::{lock, FidState, XattrValue, XattrWrite};
use crate::session::Conn;

/// Txattrwalk: fetches the value of `name` (or, for an empty name, the NUL-separated list of
/// names) and binds it to `newfid`, from which the client reads it.
pub(crate) fn xattrwalk(conn: &Conn, m: Txattrwalk) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let f = state.file()?;
    if m.newfid != m.fid && conn.fids.contains(m.newfid) {
        return Err(OpError::FidInUse(m.newfid));
    }
    let max = conn.server.config.max_xattr_size;
    let export = &conn.server.export;
    let value = if m.name.is_empty() {
        export.list_xattr(&f.handle, max)?
    } else {
        export.get_xattr(&f.handle, &m.name, max)?
    };
    let size = value.len() as u64;
    let mut charge = conn.xattr_bytes.empty();
    charge.grow(value.capacity())?;
    let state = FidState::XattrRead(XattrValue {
        bytes: value,
        charge,
    });
    if m.newfid == m.fid {
        conn.fids.replace(m.newfid, state)?;
    } else {
        conn.fids.insert_new(m.newfid, state)?;
    }
    Ok(Rmessage::Xattrwalk(Rxattrwalk { size }))
}

/// Txattrcreate: turns `fid` into a buffer for the value of `name`, `attr_size` bytes
/// (refused with `E2BIG` above `max_xattr_size`, as setxattr(2) refuses values above its
/// limit). The attribute is set when the fid is clunked. Nothing is reserved here: the value's
/// buffer grows, and is charged, as Twrite brings data.
pub(crate) fn xattrcreate(conn: &Conn, m: Txattrcreate) -> OpResult<Rmessage> {
    // Checked again when the value is set, at Tclunk; refused here so nothing is buffered.
    conn.server.export.policy.check_writable()?;
    if m.name.is_empty() {
        return Err(OpError::Invalid("empty xattr name"));
    }
    if m.flags & !(xattr_flags::CREATE | xattr_flags::REPLACE) != 0 {
        return Err(OpError::Invalid("unknown xattr flags"));
    }
    let size = usize::try_from(m.attr_size)
        .ok()
        .filter(|&s| s <= conn.server.config.max_xattr_size)
        .ok_or(Errno::TOOBIG)?;
    let name = names::c_string(&m.name)?;
    let state = conn.fids.get(m.fid)?;
    let handle = state.file()?.handle.clone();
    conn.fids.replace(
        m.fid,
        FidState::XattrWrite(XattrWrite {
            handle,
            name,
            size,
            flags: m.flags,
            value: Mutex::new(XattrValue {
                bytes: Vec::new(),
                charge: conn.xattr_bytes.empty(),
            }),
        }),
    )?;
    Ok(Rmessage::Xattrcreate(Rxattrcreate {}))
}

/// Applies an xattr written through Txattrcreate, at Tclunk.
///
/// Linux sends removexattr(2) as a Txattrcreate of size 0 with `XATTR_REPLACE` (the VFS
/// passes a NULL value with that flag), so exactly that combination removes the attribute;
/// any other size-0 create sets an empty value. A value shorter than announced is `EINVAL`.
pub(crate) fn commit(conn: &Conn, x: &XattrWrite) -> OpResult<()> {
    let guard = lock(&x.value);
    let value = &guard.bytes;
    if value.len() != x.size {
        return Err(OpError::Invalid("xattr value shorter than announced"));
    }
    let export = &conn.server.export;
    if x.size == 0 && x.flags == xattr_flags::REPLACE {
        export.remove_xattr(&x.handle, x.name.as_bytes())?;
    } else {
        export.set_xattr(&x.handle, x.name.as_bytes(), value, x.flags)?;
    }
    Ok(())
}
