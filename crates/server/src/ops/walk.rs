//! Tattach and Twalk: making fids, one confined step at a time.

use std::os::fd::AsFd;

use crossfs_wire::{Rattach, Rmessage, Rwalk, Tattach, Twalk};

use crossfs_export::sys;

use crate::error::{OpError, OpResult};
use crate::fid::{FidState, FileFid, Location};
use crate::server::dev_and_kind;
use crate::session::Conn;

/// Tattach: binds `fid` to the export root, once `afid` passes [`super::auth::check_attach`].
/// The unames are recorded and logged; they grant nothing (see the crate's Identity
/// section). `aname` is ignored: the export is the root.
pub(crate) fn attach(conn: &Conn, m: Tattach) -> OpResult<Rmessage> {
    super::auth::check_attach(conn, m.afid)?;
    tracing::info!(
        id = conn.stats.id,
        peer = %conn.stats.peer,
        uname = %String::from_utf8_lossy(&m.uname),
        n_uname = m.n_uname,
        aname = %String::from_utf8_lossy(&m.aname),
        "attach"
    );
    if let Some(since) = m.aname.strip_prefix(crate::EVENTS_ANAME.as_bytes()) {
        return attach_events(conn, m.fid, since);
    }
    let root = conn.server.export.root.clone();
    let st = sys::stat(root.fd()?.as_fd())?;
    let qid = conn.server.qid(&st);
    let fid = FileFid::new(root, qid, dev_and_kind(&st), None, m.n_uname);
    conn.fids.insert_new(m.fid, FidState::File(fid))?;
    Ok(Rmessage::Attach(Rattach { qid }))
}

/// Tattach with [`crate::EVENTS_ANAME`]: binds `fid` to a new subscription to the export's
/// change events, resuming after `?since=EPOCH:SEQ` when given.
fn attach_events(conn: &Conn, fid: crossfs_wire::Fid, since: &[u8]) -> OpResult<Rmessage> {
    let Some(hub) = &conn.server.events else {
        return Err(OpError::NotSupported);
    };
    // Each stream may queue a ring of events: a bound per connection bounds the memory.
    if conn.fids.event_streams() >= MAX_EVENT_STREAMS {
        return Err(OpError::TooManyFids);
    }
    let sub = if since.is_empty() {
        hub.subscribe()
    } else {
        let (epoch, seq) = parse_since(since).ok_or(OpError::Invalid("bad ?since=EPOCH:SEQ"))?;
        hub.subscribe_since(epoch, seq)
    };
    conn.fids.insert_new(fid, FidState::Events(sub))?;
    tracing::info!(id = conn.stats.id, peer = %conn.stats.peer, "change events attached");
    Ok(Rmessage::Attach(Rattach { qid: EVENTS_QID }))
}

/// Event streams one connection may hold (a mount needs one).
const MAX_EVENT_STREAMS: usize = 4;

/// The qid of an event stream: a file no inode has (qid paths of files are inode numbers).
pub(crate) const EVENTS_QID: crossfs_wire::Qid = crossfs_wire::Qid {
    ty: crossfs_wire::QID_TYPE_FILE,
    version: 0,
    path: u64::MAX,
};

fn parse_since(s: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(s.strip_prefix(b"?since=")?).ok()?;
    let (epoch, seq) = s.split_once(':')?;
    Some((epoch.parse().ok()?, seq.parse().ok()?))
}

/// Twalk. Every name is checked before any is used ("", ".", "..", "/" or NUL: `EINVAL` for
/// the whole walk). Each step opens one name beneath the previous directory with
/// `O_PATH|O_NOFOLLOW`, so a symlink can end a walk (the fid then names the link) but never
/// be passed through. A failure at the first name is an Rlerror; a later one gives a short
/// Rwalk, and `newfid` is not bound. Each step's handle goes into the export's handle cache
/// ([`crossfs_export::handles`]), which closes descriptors no one uses rather than refuse a
/// walk: no walk fails because of how many fids clients hold.
pub(crate) fn walk(conn: &Conn, m: Twalk) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let from = state.file()?;
    if m.newfid != m.fid && conn.fids.contains(m.newfid) {
        return Err(OpError::FidInUse(m.newfid));
    }
    // Every name is checked before any is walked: one bad name fails the whole walk.
    for name in &m.wnames {
        crossfs_export::names::component(name)?;
    }

    let mut handle = from.handle.clone();
    let mut location = from.location();
    let mut qid = from.qid;
    let mut dev_kind = (from.dev, from.kind);
    let mut wqids = Vec::with_capacity(m.wnames.len());
    for raw in &m.wnames {
        let (found, st) = match conn.server.export.lookup(conn.server.dir_of(&handle), raw) {
            Ok(found) => found,
            Err(e) if wqids.is_empty() => return Err(e.into()),
            Err(_) => return Ok(Rmessage::Walk(Rwalk { wqids })),
        };
        qid = conn.server.qid(&st);
        dev_kind = dev_and_kind(&st);
        wqids.push(qid);
        location = Some(Location {
            parent: handle,
            name: raw.clone(),
        });
        handle = found;
    }

    if m.newfid == m.fid && m.wnames.is_empty() {
        // Cloning a fid onto itself changes nothing (and keeps it open if it was).
        return Ok(Rmessage::Walk(Rwalk { wqids }));
    }
    let fid = FileFid::new(handle, qid, dev_kind, location, from.n_uname);
    if m.newfid == m.fid {
        conn.fids.replace(m.newfid, FidState::File(fid))?;
    } else {
        conn.fids.insert_new(m.newfid, FidState::File(fid))?;
    }
    Ok(Rmessage::Walk(Rwalk { wqids }))
}
