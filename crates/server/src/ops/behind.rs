//! Changes sent behind (`crossfs mount --changes behind`): requests the client answered
//! before sending them, run on the connection's reader (see `super::runs_inline`), so that
//! every later request finds them done (docs/protocol.md, "Order").
//!
//! The client predicted each from the file as it last saw it, and a host program may have
//! changed the file since (its change events had not reached the client yet). Host data is
//! never overwritten by such a change:
//! - **Tcreatebehind** never opens a name a host program took: the file is made beside it as
//!   `NAME.crossfs-conflict-N`. **Tcreatebehindmarked** also gives the file the access
//!   time the client chose, and takes a file with that access time under a taken name as
//!   its own (the same create sent again after a lost connection: an earlier try made it).
//! - **Tsetattrbehind** and **Twritebehind** carry their base ([`BehindBase`]): the file's
//!   modification time, size, mode and owner as the client saw them, or "as my previous
//!   change of it left it". The change is made onto the file only if the file is still as
//!   the base says, or as a change through this connection left it ([`OwnChanges`]).
//!   Otherwise a regular file is copied beside itself as `NAME.crossfs-conflict-N` and the
//!   change made to the copy; the connection's next changes of the file based on that one
//!   go to the same copy, until one is based on the file as the client sees it again. Any
//!   other kind of file is left as it is, and the change fails with `ESTALE`.
//! - **Tunlinkbehind** removes a name only while it is the file the client saw, as its base
//!   says or as this connection left it: a file a host program changed or put there first
//!   stays, and the removal fails with `ESTALE`.
//! - **Tmkdirbehind** never makes a directory under a name a host program took: it is made
//!   beside it as `NAME.crossfs-conflict-N`, with the access time the client chose, and a
//!   directory with that access time under a taken name is taken as its own (sent again).
//! - **Trmdirbehind** removes a directory only while it is the one the client saw, and
//!   empty: one a host program put something in first stays (`ENOTEMPTY`).
//! - **Trenamebehind** renames a name within its directory only while it leads to the file
//!   the client saw, and never over another file: a name a host program took first stays
//!   its (`EEXIST`).
//!
//! What this module must not do: decide anything for requests that wait for their answer
//! (their client saw the answer before it went on), or hold anything past the connection.

use std::collections::{HashMap, VecDeque};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crossfs_export::handles::PathHandle;
use crossfs_export::sys;
use crossfs_wire::{
    BehindBase, Fid, Rcreatebehind, Rcreatebehindmarked, Rgetattr, Rmessage, Rmkdirbehind,
    Rrenamebehind, Rrmdirbehind, Rsetattrbehind, Runlinkbehind, Rwritebehind, Tcreateattr,
    Tcreatebehind, Tcreatebehindmarked, Tmkdirattr, Tmkdirbehind, Trenamebehind, Trmdirbehind,
    Tsetattr, Tsetattrbehind, Tsetattrget, Tunlinkbehind, Twrite, Twritebehind,
};
use rustix::io::Errno;

use crate::error::{OpError, OpResult};
use crate::fid::{lock, FileFid};
use crate::ops::{attr, bulk, io};
use crate::session::Conn;

/// Conflict names one change tries, at most.
const CONFLICT_NAMES_MAX: u32 = 1000;

/// Files whose last changes a connection remembers. A change based on "my previous
/// change" follows that change by at most the client's requests in flight (256 tags), so
/// older files are not worth keeping.
const FILES_KEPT: usize = 1024;

/// States one file's changes through the connection left, remembered (newest last).
const STAMPS_KEPT: usize = 4;

/// Locks that make a change of a file and the record of what it left one step for a
/// check ([`OwnChanges::around`]): workers run changes beside the reader's checks.
const STRIPES: usize = 16;

/// What the changes through one connection left of the regular files they changed, once
/// the connection has sent a change behind (until then nothing is recorded, and plain
/// changes cost nothing more).
#[derive(Default)]
pub(crate) struct OwnChanges {
    recording: AtomicBool,
    stripes: [Mutex<()>; STRIPES],
    files: Mutex<Files>,
}

#[derive(Default)]
struct Files {
    by_path: HashMap<u64, Record>,
    /// `qid.path` and the tick it was recorded at, oldest first (an entry whose record has
    /// a newer tick is stale).
    order: VecDeque<(u64, u64)>,
    tick: u64,
}

#[derive(Default)]
struct Record {
    /// What this connection's changes left, newest last.
    stamps: VecDeque<BehindBase>,
    /// Where changes based on an earlier one go, after a host program changed the file
    /// first.
    kept: Option<Kept>,
    tick: u64,
}

/// A copy of a file a host program changed first, which the client's changes go to.
#[derive(Clone)]
struct Kept {
    handle: Arc<PathHandle>,
    name: Vec<u8>,
}

/// Where a change sent behind goes.
enum Verdict {
    /// The file is as the client saw it, or as this connection left it.
    Onto,
    /// A copy made after an earlier conflict.
    Kept(Kept),
    /// A host program changed the file first.
    Conflict,
}

/// What a change is compared by: the state of a file it may overwrite.
fn stamp(st: &rustix::fs::Statx) -> BehindBase {
    BehindBase {
        mtime_sec: st.stx_mtime.tv_sec as u64,
        mtime_nsec: u64::from(st.stx_mtime.tv_nsec),
        size: st.stx_size,
        mode: u32::from(st.stx_mode),
        uid: st.stx_uid,
        gid: st.stx_gid,
    }
}

impl OwnChanges {
    /// Runs `change` of `fid`'s file (a plain setattr, write or fallocate) and, while
    /// recording, notes what it left, as one step for checks of the same file.
    pub(crate) fn around<T>(
        &self,
        conn: &Conn,
        fid: Fid,
        change: impl FnOnce() -> OpResult<T>,
    ) -> OpResult<T> {
        if !self.recording.load(Relaxed) {
            return change();
        }
        let Ok(state) = conn.fids.get(fid) else {
            return change();
        };
        let Ok(f) = state.file() else {
            return change();
        };
        if f.kind != libc::S_IFREG {
            return change();
        }
        let _step = lock(&self.stripes[stripe(f)]);
        let r = change();
        // Even a failure may have changed something (a chown before a refused chmod).
        self.note(f);
        r
    }

    /// Records what `f` is now as this connection's own doing.
    fn note(&self, f: &FileFid) {
        if let Ok(st) = f.fd().and_then(|fd| Ok(sys::stat(fd.as_fd())?)) {
            self.record(f.qid.path, stamp(&st), None);
        }
    }

    /// Records `stamp` of file `path`, and where its later changes go (`Some(None)`: onto
    /// the file again).
    fn record(&self, path: u64, stamp: BehindBase, kept: Option<Option<Kept>>) {
        let mut files = lock(&self.files);
        files.tick += 1;
        let tick = files.tick;
        let r = files.by_path.entry(path).or_default();
        if r.stamps.back() != Some(&stamp) {
            r.stamps.push_back(stamp);
            if r.stamps.len() > STAMPS_KEPT {
                r.stamps.pop_front();
            }
        }
        if let Some(kept) = kept {
            r.kept = kept;
        }
        r.tick = tick;
        files.order.push_back((path, tick));
        files.forget_oldest();
    }

    /// Where a change of `path` based on `base` goes, the file being `now`.
    fn verdict(&self, path: u64, base: &BehindBase, now: &BehindBase) -> Verdict {
        let mut files = lock(&self.files);
        let record = files.by_path.get_mut(&path);
        let own = |r: &Option<&mut Record>| r.as_ref().is_some_and(|r| r.stamps.contains(now));
        if base.is_after_previous() {
            let Some(r) = &record else {
                // Its previous change went on another connection (one lost, whose changes
                // the client sends again as they stand): nothing here to tell a host's
                // change from it, and the change goes as they do.
                return Verdict::Onto;
            };
            if let Some(kept) = r.kept.clone() {
                return Verdict::Kept(kept);
            }
            return if own(&record) {
                Verdict::Onto
            } else {
                Verdict::Conflict
            };
        }
        // Based on the file as the client saw it again: no longer on a copy.
        let onto = base == now || own(&record);
        if let Some(r) = record {
            r.kept = None;
        }
        if onto {
            Verdict::Onto
        } else {
            Verdict::Conflict
        }
    }

    fn start_recording(&self) {
        self.recording.store(true, Relaxed);
    }
}

impl Files {
    fn forget_oldest(&mut self) {
        while self.by_path.len() > FILES_KEPT {
            let Some((path, tick)) = self.order.pop_front() else {
                break;
            };
            if self.by_path.get(&path).is_some_and(|r| r.tick == tick) {
                self.by_path.remove(&path);
            }
        }
        // Entries for files recorded again since pile up at the front: drop them.
        if self.order.len() > 4 * FILES_KEPT {
            let by_path = &self.by_path;
            self.order
                .retain(|(path, tick)| by_path.get(path).is_some_and(|r| r.tick == *tick));
        }
    }
}

fn stripe(f: &FileFid) -> usize {
    (f.qid.path % STRIPES as u64) as usize
}

/// Tcreatebehind: Tcreateattr of a create the client already answered. A name taken on
/// the host (a host program got there first) is never opened: the file is made beside it
/// as `NAME.crossfs-conflict-N`, so the guest's file and its later writes to these fids are
/// kept, and the host's file is left as it is.
pub(crate) fn createbehind(conn: &Conn, m: Tcreatebehind) -> OpResult<Rmessage> {
    let made = create_behind(conn, m.create, None)?;
    Ok(Rmessage::Createbehind(made))
}

/// Tcreatebehindmarked: Tcreatebehind, the file made with the access time the client
/// chose, and a taken name that holds a regular file with that access time taken as this
/// create's own (an earlier try made it, and its answer was lost with the connection).
pub(crate) fn createbehindmarked(conn: &Conn, m: Tcreatebehindmarked) -> OpResult<Rmessage> {
    if m.atime_nsec >= 1_000_000_000 {
        return Err(Errno::INVAL.into());
    }
    let made = create_behind(conn, m.create, Some((m.atime_sec, m.atime_nsec)))?;
    Ok(Rmessage::Createbehindmarked(Rcreatebehindmarked { made }))
}

/// A create sent behind, under the first name of `NAME`, `NAME.crossfs-conflict-1`, ...
/// that is free, or, with `mark`, that holds the file an earlier try made.
fn create_behind(
    conn: &Conn,
    create: Tcreateattr,
    mark: Option<(u64, u64)>,
) -> OpResult<Rcreatebehind> {
    use crossfs_wire::open_flags as of;
    if create.flags & of::EXCL == 0 {
        return Err(OpError::Invalid("createbehind needs O_EXCL"));
    }
    conn.own.start_recording();
    let own_try = |a: &Rgetattr| mark == Some((a.atime_sec, a.atime_nsec));
    let mut name = create.name.clone();
    for n in 1..=CONFLICT_NAMES_MAX {
        let attempt = Tcreateattr {
            name: name.clone(),
            ..create.clone()
        };
        let made = match mark {
            Some(atime) => bulk::createattr_marked(conn, attempt.clone(), atime),
            None => bulk::createattr(conn, attempt.clone()),
        };
        let created = match made {
            Ok(Rmessage::Createattr(created)) => created,
            Ok(_) => return Err(OpError::Invalid("Tcreateattr answered something else")),
            Err(OpError::Os(Errno::EXIST)) => {
                match mark.map(|_| bulk::open_made(conn, &attempt, own_try)) {
                    Some(Ok(Some(created))) => created,
                    // Removed since: made again under the same name.
                    Some(Err(OpError::Os(Errno::NOENT))) => continue,
                    Some(Err(e)) => return Err(e),
                    _ => {
                        name = next_conflict_name(&create.name, n)?;
                        continue;
                    }
                }
            }
            Err(e) => return Err(e),
        };
        conn.own
            .record(created.attr.qid.path, BehindBase::seen(&created.attr), None);
        let dir = bulk::attr_after_change(conn, create.dfid, create.request_mask);
        return Ok(Rcreatebehind { name, created, dir });
    }
    Err(Errno::EXIST.into())
}

/// Tmkdirbehind: Tmkdirattr of a mkdir the client already answered, under the first name
/// of `NAME`, `NAME.crossfs-conflict-N`, ... that is free, or that holds the directory an
/// earlier try made (the access time the client chose): a name a host program took is
/// never used, so the guest's directory and what the client sends into it through
/// `newfid` are kept beside the host's.
///
/// Made with no permission bits, then marked, then given its mode: a server killed before
/// the mark leaves a directory of mode 0 that a try sent again takes as its own (a host
/// program's directory of mode 0 under the same name in that moment would be taken too).
pub(crate) fn mkdirbehind(conn: &Conn, m: Tmkdirbehind) -> OpResult<Rmessage> {
    use crossfs_wire::setattr as valid;
    let mark = (m.atime_sec, m.atime_nsec);
    if m.atime_nsec >= 1_000_000_000 {
        return Err(Errno::INVAL.into());
    }
    let mkdir = m.mkdir;
    if mkdir.newfid == mkdir.dfid || conn.fids.contains(mkdir.newfid) {
        return Err(Errno::BADF.into());
    }
    let (dfid, newfid, request_mask) = (mkdir.dfid, mkdir.newfid, mkdir.request_mask);
    let bound = |conn: &Conn| bulk::getattr(conn, newfid, request_mask);
    // The mark, then the mode; made and bound, the directory stands whatever fails here.
    let finish = |conn: &Conn, found: Rgetattr| {
        let set = |valid, mode| Tsetattr {
            valid,
            mode,
            atime_sec: mark.0,
            atime_nsec: mark.1,
            ..Tsetattr::unchanged(newfid)
        };
        if (found.atime_sec, found.atime_nsec) != mark {
            let _ = attr::setattr(conn, set(valid::ATIME | valid::ATIME_SET, 0));
        }
        let _ = attr::setattr(conn, set(valid::MODE, mkdir.mode & 0o7777));
        bound(conn).unwrap_or(found)
    };
    let mut name = mkdir.name.clone();
    for n in 1..=CONFLICT_NAMES_MAX {
        let attempt = Tmkdirattr {
            name: name.clone(),
            mode: 0,
            ..mkdir.clone()
        };
        let attr = match bulk::mkdirattr(conn, attempt) {
            Ok(Rmessage::Mkdirattr(made)) if made.attr.valid != 0 => finish(conn, made.attr),
            // Made, and gone before it was walked (a host program removed it at once).
            Ok(Rmessage::Mkdirattr(_)) => return Err(Errno::NOENT.into()),
            Ok(_) => return Err(OpError::Invalid("Tmkdirattr answered something else")),
            Err(OpError::Os(Errno::EXIST)) => {
                match bulk::walk_all(conn, dfid, newfid, vec![name.clone()]) {
                    // Removed since: made again under the same name.
                    Err(OpError::Os(Errno::NOENT)) => continue,
                    Err(e) => return Err(e),
                    Ok(_) => {}
                }
                let is_dir = |a: &Rgetattr| a.mode & libc::S_IFMT == libc::S_IFDIR;
                let own_try =
                    |a: &Rgetattr| (a.atime_sec, a.atime_nsec) == mark || a.mode & 0o7777 == 0;
                match bound(conn) {
                    Ok(a) if is_dir(&a) && own_try(&a) => finish(conn, a),
                    found => {
                        bulk::unbind(conn, dfid, newfid);
                        found?;
                        name = next_conflict_name(&mkdir.name, n)?;
                        continue;
                    }
                }
            }
            Err(e) => return Err(e),
        };
        let dir = bulk::attr_after_change(conn, dfid, request_mask);
        return Ok(Rmessage::Mkdirbehind(Rmkdirbehind { name, attr, dir }));
    }
    Err(Errno::EXIST.into())
}

/// The `n`th name a guest's file or change takes beside `name`, taken on the host.
pub(crate) fn conflict_name(name: &[u8], n: u32) -> Vec<u8> {
    let mut kept = name.to_vec();
    kept.extend_from_slice(format!(".crossfs-conflict-{n}").as_bytes());
    kept
}

fn next_conflict_name(name: &[u8], n: u32) -> OpResult<Vec<u8>> {
    let next = conflict_name(name, n);
    if next.len() > 255 {
        return Err(Errno::NAMETOOLONG.into());
    }
    Ok(next)
}

/// Tsetattrbehind: Tsetattrget onto the file the client saw, or onto its copy.
pub(crate) fn setattrbehind(conn: &Conn, m: Tsetattrbehind) -> OpResult<Rmessage> {
    let onto_file = |conn: &Conn| {
        let set = Tsetattrget {
            set: m.set.clone(),
            request_mask: m.request_mask,
        };
        match bulk::setattrget(conn, set)? {
            Rmessage::Setattrget(r) => Ok(r.attr),
            _ => Err(OpError::Invalid("Tsetattrget answered something else")),
        }
    };
    let onto_copy = |conn: &Conn, kept: &Kept| {
        let set = attr::to_setattr(&m.set)?;
        conn.server.export.setattr(&kept.handle, None, &set)?;
        Ok(())
    };
    let (attr, kept_as) = behind(conn, m.set.fid, &m.base, onto_file, onto_copy)?;
    Ok(Rmessage::Setattrbehind(Rsetattrbehind { attr, kept_as }))
}

/// Twritebehind: Twriteattr onto the file the client saw, or onto its copy.
pub(crate) fn writebehind(conn: &Conn, m: Twritebehind) -> OpResult<Rmessage> {
    let count = std::cell::Cell::new(0u32);
    let onto_file = |conn: &Conn| {
        let write = Twrite {
            fid: m.fid,
            offset: m.offset,
            data: m.data.clone(),
        };
        match io::write(conn, write)? {
            Rmessage::Write(w) => count.set(w.count),
            _ => return Err(OpError::Invalid("Twrite answered something else")),
        }
        Ok(bulk::attr_after_change(
            conn,
            m.fid,
            crossfs_wire::getattr::BASIC,
        ))
    };
    let onto_copy = |conn: &Conn, kept: &Kept| {
        let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC;
        let (fd, _) = conn.server.export.open_file(&kept.handle, flags)?;
        count.set(sys::pwrite(fd.as_fd(), &m.data.0, m.offset)? as u32);
        Ok(())
    };
    let (attr, kept_as) = behind(conn, m.fid, &m.base, onto_file, onto_copy)?;
    Ok(Rmessage::Writebehind(Rwritebehind {
        count: count.get(),
        attr,
        kept_as,
    }))
}

/// Tunlinkbehind: removes `name` from `dirfd` only if it is still the file the client saw
/// (`path`), as `base` says or as this connection's changes left it; otherwise the host's
/// file stays and the removal fails with `ESTALE`. The check and the removal are one step
/// for the file's other changes on this connection; a host program's change between them
/// (microseconds) is not seen, as for Tsetattrbehind.
pub(crate) fn unlinkbehind(conn: &Conn, m: Tunlinkbehind) -> OpResult<Rmessage> {
    let own = &conn.own;
    own.start_recording();
    let seen = Seen {
        dirfd: m.dirfd,
        name: &m.name,
        path: m.path,
        newfid: m.newfid,
        is_dir: false,
    };
    let (attr, dir) = remove_seen(conn, seen, m.request_mask, |st| {
        let step = lock(&own.stripes[(m.path % STRIPES as u64) as usize]);
        matches!(own.verdict(m.path, &m.base, &stamp(st)), Verdict::Onto).then_some(step)
    })?;
    Ok(Rmessage::Unlinkbehind(Runlinkbehind { attr, dir }))
}

/// Trmdirbehind: removes the directory `name` from `dirfd` only if it is still the one the
/// client saw (`path`; otherwise `ESTALE`) and empty: one a host program put something in
/// first stays (`ENOTEMPTY`, from the removal itself).
pub(crate) fn rmdirbehind(conn: &Conn, m: Trmdirbehind) -> OpResult<Rmessage> {
    let seen = Seen {
        dirfd: m.dirfd,
        name: &m.name,
        path: m.path,
        newfid: m.newfid,
        is_dir: true,
    };
    let (attr, dir) = remove_seen(conn, seen, m.request_mask, |_| Some(()))?;
    Ok(Rmessage::Rmdirbehind(Rrmdirbehind { attr, dir }))
}

/// What a removal sent behind names: `name` in `dirfd`, the file (a directory if `is_dir`)
/// whose `qid.path` the client saw, and the fid to bind to it first (`NOFID`: none).
struct Seen<'a> {
    dirfd: Fid,
    name: &'a [u8],
    path: u64,
    newfid: Fid,
    is_dir: bool,
}

/// Removes `seen` if `name` still leads to it, of its kind, and `as_seen` accepts its
/// attributes (`ESTALE` otherwise; what it returns, a lock, is held until the removal is
/// made), binding `newfid` to it first; returns its attributes through `newfid` (`valid`
/// 0 without one) and the directory's after the removal. A `newfid` bound here is
/// unbound again if the removal fails.
fn remove_seen<Step>(
    conn: &Conn,
    seen: Seen<'_>,
    request_mask: u64,
    as_seen: impl FnOnce(&rustix::fs::Statx) -> Option<Step>,
) -> OpResult<(Rgetattr, Rgetattr)> {
    let state = conn.fids.get(seen.dirfd)?;
    let dir = state.file()?;
    let name = crossfs_export::names::component(seen.name)?;
    let st = sys::stat_at(dir.fd()?.as_fd(), &name)?;
    let is_dir = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
    if is_dir != seen.is_dir || conn.server.qid(&st).path != seen.path {
        return Err(Errno::STALE.into());
    }
    let Some(_step) = as_seen(&st) else {
        return Err(Errno::STALE.into());
    };
    let bound = seen.newfid != crossfs_wire::NOFID;
    // Bound already to the file: a reconnecting client bound its fids again before
    // sending this again.
    let bound_to_it = || {
        conn.fids
            .get(seen.newfid)
            .is_ok_and(|s| s.file().is_ok_and(|f| f.qid.path == seen.path))
    };
    let binds_here = bound && !bound_to_it();
    if binds_here {
        if seen.newfid == seen.dirfd || conn.fids.contains(seen.newfid) {
            return Err(Errno::BADF.into());
        }
        let walked = bulk::walk_all(conn, seen.dirfd, seen.newfid, vec![seen.name.to_vec()])?;
        if walked.first().map(|q| q.path) != Some(seen.path) {
            bulk::unbind(conn, seen.dirfd, seen.newfid);
            return Err(Errno::STALE.into());
        }
    }
    let removed = conn
        .server
        .export
        .unlink(conn.server.dir(dir), seen.name, seen.is_dir);
    if let Err(e) = removed {
        if binds_here {
            bulk::unbind(conn, seen.dirfd, seen.newfid);
        }
        return Err(e.into());
    }
    let attr = if bound {
        bulk::attr_after_change(conn, seen.newfid, request_mask)
    } else {
        Rgetattr::default()
    };
    let dir = bulk::attr_after_change(conn, seen.dirfd, request_mask);
    Ok((attr, dir))
}

/// Trenamebehind: renames `oldname` to `newname` in `dirfd` only if `oldname` is still the
/// file the client saw (`path`; otherwise `ESTALE`), and never over another file
/// (`EEXIST`). Its data and mode may have changed: a rename overwrites neither. Sent again
/// after a lost connection, a rename already made (`oldname` gone, `newname` the file)
/// is done.
pub(crate) fn renamebehind(conn: &Conn, m: Trenamebehind) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.dirfd)?;
    let dir = state.file()?;
    let fd = dir.fd()?;
    let old = crossfs_export::names::component(&m.oldname)?;
    let new = crossfs_export::names::component(&m.newname)?;
    let is_it = |st: &rustix::fs::Statx| {
        u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFDIR && conn.server.qid(st).path == m.path
    };
    let st = match sys::stat_at(fd.as_fd(), &old) {
        Ok(st) => st,
        Err(Errno::NOENT) if sys::stat_at(fd.as_fd(), &new).is_ok_and(|st| is_it(&st)) => {
            let dir = bulk::attr_after_change(conn, m.dirfd, m.request_mask);
            return Ok(Rmessage::Renamebehind(Rrenamebehind { dir }));
        }
        Err(e) => return Err(e.into()),
    };
    if !is_it(&st) {
        return Err(Errno::STALE.into());
    }
    let at = conn.server.dir(dir);
    conn.server
        .export
        .rename_no_replace(at, &m.oldname, at, &m.newname)?;
    let dir = bulk::attr_after_change(conn, m.dirfd, m.request_mask);
    Ok(Rmessage::Renamebehind(Rrenamebehind { dir }))
}

/// Makes a change sent behind of `fid`'s file, based on `base`: `onto_file` where the
/// file is as the client saw it (returns the attributes after), otherwise `onto_copy`
/// onto a copy beside it. Returns the attributes to answer with and the copy's name
/// (empty: onto the file).
fn behind(
    conn: &Conn,
    fid: Fid,
    base: &BehindBase,
    onto_file: impl FnOnce(&Conn) -> OpResult<Rgetattr>,
    onto_copy: impl FnOnce(&Conn, &Kept) -> OpResult<()>,
) -> OpResult<(Rgetattr, Vec<u8>)> {
    let own = &conn.own;
    own.start_recording();
    let state = conn.fids.get(fid)?;
    let f = state.file()?;
    let _step = lock(&own.stripes[stripe(f)]);
    let now = stamp(&sys::stat(f.fd()?.as_fd())?);
    let kept = match own.verdict(f.qid.path, base, &now) {
        Verdict::Onto => {
            // This state is the chain's from now on, whatever the change does.
            own.record(f.qid.path, now, Some(None));
            let r = onto_file(conn);
            own.note(f);
            return Ok((r?, Vec::new()));
        }
        Verdict::Kept(kept) => kept,
        Verdict::Conflict => {
            let kept = keep_beside(conn, f)?;
            tracing::info!(
                "a host program changed '{}' first: the client's change is kept beside it as '{}'",
                String::from_utf8_lossy(&f.location().map(|l| l.name).unwrap_or_default()),
                String::from_utf8_lossy(&kept.name)
            );
            own.record(f.qid.path, now, Some(Some(kept.clone())));
            kept
        }
    };
    onto_copy(conn, &kept)?;
    // The file as the host has it, for the client to show.
    let st = sys::stat(f.fd()?.as_fd())?;
    Ok((attr::rgetattr(conn, &st), kept.name))
}

/// A copy of `f` beside it, under the lowest free `NAME.crossfs-conflict-N`.
fn keep_beside(conn: &Conn, f: &FileFid) -> OpResult<Kept> {
    // Only a regular file's bytes can be kept beside it; anything else stays as the host
    // has it, and the client is told its view was stale.
    let location = match (f.kind, f.location()) {
        (libc::S_IFREG, Some(location)) => location,
        _ => return Err(Errno::STALE.into()),
    };
    let dir = conn.server.dir_of(&location.parent);
    for n in 1..=CONFLICT_NAMES_MAX {
        let name = next_conflict_name(&location.name, n)?;
        match conn.server.export.copy_beside(&f.handle, dir, &name) {
            Ok(made) => {
                return Ok(Kept {
                    handle: made.handle,
                    name,
                })
            }
            Err(crossfs_export::ExportError::Os(Errno::EXIST)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(Errno::EXIST.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(mtime: u64, size: u64) -> BehindBase {
        BehindBase {
            mtime_sec: mtime,
            size,
            mode: libc::S_IFREG | 0o644,
            ..BehindBase::default()
        }
    }

    #[test]
    fn a_change_goes_onto_the_file_it_was_based_on_or_this_connections_own_state() {
        let own = OwnChanges::default();
        // As the client saw it.
        assert!(matches!(
            own.verdict(7, &at(1, 0), &at(1, 0)),
            Verdict::Onto
        ));
        // Changed since by someone else.
        assert!(matches!(
            own.verdict(7, &at(1, 0), &at(2, 0)),
            Verdict::Conflict
        ));
        // Changed since by this connection.
        own.record(7, at(2, 5), None);
        assert!(matches!(
            own.verdict(7, &at(1, 0), &at(2, 5)),
            Verdict::Onto
        ));
        assert!(matches!(
            own.verdict(7, &BehindBase::after_previous(), &at(2, 5)),
            Verdict::Onto
        ));
        // A host change after this connection's last.
        assert!(matches!(
            own.verdict(7, &BehindBase::after_previous(), &at(3, 5)),
            Verdict::Conflict
        ));
        // Nothing known of another file (its previous change went on a connection that
        // was lost, and was sent again as it stands): made as it stands too.
        assert!(matches!(
            own.verdict(8, &BehindBase::after_previous(), &at(3, 5)),
            Verdict::Onto
        ));
    }

    #[test]
    fn changes_after_a_conflict_follow_it_to_the_copy_until_based_on_the_file_again() {
        let own = OwnChanges::default();
        let kept = Kept {
            handle: some_handle(),
            name: b"a.crossfs-conflict-1".to_vec(),
        };
        own.record(7, at(3, 5), Some(Some(kept)));
        let after = BehindBase::after_previous();
        assert!(matches!(
            own.verdict(7, &after, &at(3, 5)),
            Verdict::Kept(_)
        ));
        assert!(matches!(
            own.verdict(7, &after, &at(9, 9)),
            Verdict::Kept(_)
        ));
        // Seen again as the host has it.
        assert!(matches!(
            own.verdict(7, &at(9, 9), &at(9, 9)),
            Verdict::Onto
        ));
        assert!(matches!(
            own.verdict(7, &after, &at(9, 9)),
            Verdict::Conflict
        ));
    }

    /// A handle (of `/`): the verdicts only carry it.
    fn some_handle() -> Arc<PathHandle> {
        let open = || sys::open_root(std::path::Path::new("/")).unwrap();
        let (root, proc_fd) = (open(), sys::open_proc_fd_dir().unwrap());
        let st = sys::stat(root.as_fd()).unwrap();
        crossfs_export::handles::HandleCache::new(&root, &proc_fd, 4, true, false).root(open(), &st)
    }

    #[test]
    fn the_files_remembered_are_bounded() {
        let own = OwnChanges::default();
        for path in 0..(3 * FILES_KEPT as u64) {
            own.record(path, at(path, 0), None);
            own.record(0, at(path, 1), None);
        }
        let files = lock(&own.files);
        assert_eq!(files.by_path.len(), FILES_KEPT);
        assert!(files.order.len() <= 4 * FILES_KEPT + 1);
        // The file recorded all along is still there, with its newest states only.
        assert_eq!(files.by_path[&0].stamps.len(), STAMPS_KEPT);
    }
}
