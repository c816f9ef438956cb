//! Opening, creating, reading, writing and syncing files.

use std::os::fd::AsFd;

use crossfs_wire::{
    encode_rread_with, open_flags as of, Rfallocate, Rfsync, Rlcreate, Rlopen, Rmessage, Rtmpfile,
    Rwrite, Tag, Tfallocate, Tfsync, Tlcreate, Tlopen, Tread, Ttmpfile, Twrite, RREAD_HEADER_LEN,
};
use rustix::fs::OFlags;
use rustix::io::Errno;

use crossfs_export::budget::OpenFd;
use crossfs_export::sys;

use crate::error::{OpError, OpResult};
use crate::fid::{lock, FidState, FileFid, Location, OpenFile};
use crate::ops::dir::caller;
use crate::piped::PipedPayload;
use crate::server::dev_and_kind;
use crate::session::{Conn, ReadInto};
use crate::splice::Pipe;

/// 9P2000.L open flags that carry over to the host, each translated explicitly (the values
/// happen to match Linux's, but a server must not rely on that). NOCTTY, FASYNC and CLOEXEC
/// from the client are dropped: they describe the client's descriptor, not the file.
const CARRIED: [(u32, OFlags); 8] = [
    (of::TRUNC, OFlags::TRUNC),
    (of::APPEND, OFlags::APPEND),
    (of::NONBLOCK, OFlags::NONBLOCK),
    (of::DSYNC, OFlags::DSYNC),
    (of::DIRECT, OFlags::DIRECT),
    (of::DIRECTORY, OFlags::DIRECTORY),
    (of::NOATIME, OFlags::NOATIME),
    (of::SYNC, OFlags::SYNC),
];

/// Host flags for a 9P2000.L open: access mode plus [`CARRIED`]. Creation flags are not
/// included; Tlcreate adds its own.
pub(crate) fn host_flags(flags: u32) -> OpResult<OFlags> {
    let mut host = match flags & of::ACCMODE {
        of::RDONLY => OFlags::RDONLY,
        of::WRONLY => OFlags::WRONLY,
        of::RDWR => OFlags::RDWR,
        _ => return Err(OpError::Invalid("access mode 3")),
    };
    for (wire, flag) in CARRIED {
        if flags & wire != 0 {
            host |= flag;
        }
    }
    Ok(host)
}

/// Tlopen: opens the fid's inode as the export core opens one
/// ([`crossfs_export::Export::open_file`]: through `/proc/self/fd/N`, never following
/// anything; a symlink is `ELOOP`, a device `EPERM` unless allowed).
pub(crate) fn lopen(conn: &Conn, m: Tlopen) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    if let FidState::Events(_) = &*state {
        return Ok(Rmessage::Lopen(Rlopen {
            qid: crate::ops::walk::EVENTS_QID,
            iounit: conn.iounit(),
        }));
    }
    let f = state.file()?;
    if f.open.get().is_some() {
        return Err(OpError::Invalid("fid already open"));
    }
    let flags = host_flags(m.flags)?;
    let charge = conn.fds.charge()?;
    let (fd, st) = conn.server.export.open_file(&f.handle, flags)?;
    f.open
        .set(OpenFile::new(
            OpenFd::new(fd, charge),
            dev_and_kind(&st).1,
            flags,
        ))
        .map_err(|_| OpError::Invalid("fid already open"))?;
    Ok(Rmessage::Lopen(Rlopen {
        qid: conn.server.qid(&st),
        iounit: conn.iounit(),
    }))
}

/// Tlcreate: creates `name` in the directory `fid` (the client's `O_EXCL` kept; without it
/// an existing file is opened), then rebinds `fid` to the new, open file.
pub(crate) fn lcreate(conn: &Conn, m: Tlcreate) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let dir = state.file()?;
    let flags = host_flags(m.flags)?;
    let open_charge = conn.fds.charge()?;
    let created = conn.server.export.create(
        conn.server.dir(dir),
        &m.name,
        flags,
        m.flags & of::EXCL != 0,
        m.mode,
        caller(dir.n_uname, m.gid),
    )?;
    let qid = conn.server.qid(&created.stat);
    let new = FileFid::new(
        created.handle,
        qid,
        dev_and_kind(&created.stat),
        Some(Location {
            parent: dir.handle.clone(),
            name: m.name,
        }),
        dir.n_uname,
    );
    // A fresh OnceLock cannot be set already.
    let _ = new.open.set(OpenFile::new(
        OpenFd::new(created.file, open_charge),
        new.kind,
        flags,
    ));
    conn.fids.replace(m.fid, FidState::File(new))?;
    Ok(Rmessage::Lcreate(Rlcreate {
        qid,
        iounit: conn.iounit(),
    }))
}

/// Ttmpfile (crossfs extension): an unnamed file in the directory `dfid`
/// ([`crossfs_export::Export::tmpfile`]: the rules of Tlcreate but for the name), bound
/// open to `newfid` with no location (Trename and Tremove of it are `EBUSY`, as of the
/// root). Tlink of `newfid` names it; clunked first, it is gone.
pub(crate) fn tmpfile(conn: &Conn, m: Ttmpfile) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.dfid)?;
    let dir = state.file()?;
    let mut flags = host_flags(m.flags)?;
    if m.flags & of::EXCL != 0 {
        flags |= OFlags::EXCL;
    }
    let open_charge = conn.fds.charge()?;
    let made = conn.server.export.tmpfile(
        conn.server.dir(dir),
        flags,
        m.mode,
        caller(dir.n_uname, m.gid),
    )?;
    let attr = crate::ops::attr::rgetattr(conn, &made.stat);
    let new = FileFid::new(
        made.handle,
        attr.qid,
        dev_and_kind(&made.stat),
        None,
        dir.n_uname,
    );
    // A fresh OnceLock cannot be set already.
    let _ = new.open.set(OpenFile::new(
        OpenFd::new(made.file, open_charge),
        new.kind,
        flags,
    ));
    // A newfid in use: the file, never named, goes with `new`.
    conn.fids.insert_new(m.newfid, FidState::File(new))?;
    Ok(Rmessage::Tmpfile(Rtmpfile {
        iounit: conn.iounit(),
        attr,
    }))
}

/// Tread: from an open file straight into the reply buffer, or from an xattr fid. The count
/// is clamped so the reply stays strictly below msize.
pub(crate) fn read(conn: &Conn, tag: Tag, m: Tread, out: &mut Vec<u8>) -> OpResult<()> {
    let room = (conn.msize() as usize).saturating_sub(RREAD_HEADER_LEN + 1);
    let max = (m.count as usize).min(room);
    let state = conn.fids.get(m.fid)?;
    match &*state {
        FidState::File(f) => {
            let open = f.opened()?;
            encode_rread_with(tag, max, out, |buf| {
                sys::pread(open.fd.as_fd(), buf, m.offset)
            })?;
        }
        FidState::XattrRead(value) => {
            let value = &value.bytes;
            let start = usize::try_from(m.offset)
                .unwrap_or(usize::MAX)
                .min(value.len());
            let part = &value[start..value.len().min(start.saturating_add(max))];
            encode_rread_with(tag, part.len(), out, |buf| {
                buf.copy_from_slice(part);
                Ok::<_, OpError>(part.len())
            })?;
        }
        FidState::Events(sub) => {
            let lines = sub.read_blocking(max, EVENTS_LONG_POLL);
            encode_rread_with(tag, lines.len(), out, |buf| {
                buf.copy_from_slice(&lines);
                Ok::<_, OpError>(lines.len())
            })?;
        }
        FidState::XattrWrite(_) => return Err(Errno::BADF.into()),
        // Nothing to read from an auth fid: the server asks no questions.
        FidState::Auth(_) => encode_rread_with(tag, 0, out, |_| Ok::<_, OpError>(0))?,
    }
    Ok(())
}

/// How long a Tread of an event stream waits for an event before answering with no data
/// (the client then reads again). Bounded so a worker is never parked for long on a
/// connection that went quiet; a closing connection wakes it at once.
const EVENTS_LONG_POLL: std::time::Duration = std::time::Duration::from_secs(5);

/// Twrite of `sync N` to an event stream: returns once every change made before it has been
/// queued on the stream, followed by a `Sync` marker with cookie `N`.
fn events_sync(conn: &Conn, sub: &crossfs_events::Subscriber, data: &[u8]) -> OpResult<usize> {
    let hub = conn.server.events.as_ref().ok_or(OpError::NotSupported)?;
    let marker = std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.trim().strip_prefix("sync "))
        .and_then(|n| n.trim().parse().ok())
        .ok_or(OpError::Invalid("event streams take `sync N`"))?;
    hub.sync_subscriber(sub, marker).map_err(|e| {
        tracing::warn!(id = conn.stats.id, "sync failed: {e}");
        // A cookie the export cannot take (full, read-only) is its file system's errno,
        // which the client can name; anything else is the hub not keeping up.
        match &e {
            crossfs_events::EventError::Cookie(io) => OpError::Os(
                io.raw_os_error()
                    .map_or(Errno::IO, Errno::from_raw_os_error),
            ),
            _ => OpError::Os(Errno::TIMEDOUT),
        }
    })?;
    Ok(data.len())
}

/// Tread of a regular file, answered only if it needs nothing but the page cache (see
/// [`sys::pread_cached`], and [`sys::all_cached`] where the file system cannot say): fills `out` with the reply and returns true when the read got all
/// it asked for or reached the end of the file. Otherwise (not cached, partly cached, any
/// error, not a regular file, opened with `O_DIRECT`) leaves `out` empty and returns false; the request then goes to
/// a worker, which reads (and reports errors) as [`read`] does.
pub(crate) fn read_cached(conn: &Conn, tag: Tag, m: &Tread, out: &mut Vec<u8>) -> bool {
    out.clear();
    let Ok(state) = conn.fids.get(m.fid) else {
        return false;
    };
    let FidState::File(f) = &*state else {
        return false;
    };
    let Some(open) = f.open.get().filter(|o| o.cached_reads) else {
        return false;
    };
    let room = (conn.msize() as usize).saturating_sub(RREAD_HEADER_LEN + 1);
    let max = (m.count as usize).min(room);
    let fd = open.fd.as_fd();
    let complete = encode_rread_with(tag, max, out, |buf| {
        let n = match sys::pread_cached(fd, buf, m.offset) {
            // A file system that cannot read without waiting (tmpfs): `cachestat(2)` tells
            // whether a plain read would wait.
            Err(Errno::OPNOTSUPP) => {
                let size = sys::stat(fd)?.stx_size;
                if sys::all_cached(fd, m.offset, buf.len() as u64, size) != Some(true) {
                    return Err(Errno::AGAIN);
                }
                sys::pread(fd, buf, m.offset)?
            }
            n => n?,
        };
        // A short read is the end of the file, or only part of the range was cached.
        if n < buf.len() && m.offset.saturating_add(n as u64) < sys::stat(fd)?.stx_size {
            return Err(Errno::AGAIN);
        }
        Ok(n)
    });
    if complete.is_err() {
        out.clear();
        return false;
    }
    true
}

/// Tread of a regular file (opened without `O_DIRECT`) into `pipe`, which is empty
/// (`crate::splice`): `Pipe(n)` when the reply's `n` bytes of data wait there, `Out` when
/// the pipe filled before the read was done and the whole reply is now in `out` (what it
/// took read back, the rest read into the buffer), `Lost` when that reading back failed.
/// `None` for any other read, one too large for the pipe, or one the kernel would not
/// splice before a byte was in (the copy path then answers it, errors included); with
/// `only_cached` (the connection's reader, which must not wait for a disk), also `None`
/// unless the page cache holds every page of it ([`sys::all_cached`]).
pub(crate) fn read_to_pipe(
    conn: &Conn,
    (tag, m): (Tag, &Tread),
    pipe: &Pipe,
    out: &mut Vec<u8>,
    only_cached: bool,
) -> Option<ReadInto> {
    let state = conn.fids.get(m.fid).ok()?;
    let FidState::File(f) = &*state else {
        return None;
    };
    let open = f.open.get().filter(|o| o.cached_reads)?;
    let room = (conn.msize() as usize).saturating_sub(RREAD_HEADER_LEN + 1);
    let max = (m.count as usize).min(room);
    if max == 0 || !pipe.holds(max) {
        return None;
    }
    let fd = open.fd.as_fd();
    if only_cached {
        let size = sys::stat(fd).ok()?.stx_size;
        if sys::all_cached(fd, m.offset, max as u64, size) != Some(true) {
            return None;
        }
    }
    match pipe.fill(fd, m.offset, max) {
        Err(_) => None,
        Ok((n, true)) => Some(ReadInto::Pipe(n)),
        Ok((n, false)) => {
            out.clear();
            let mut lost = false;
            let _ = encode_rread_with(tag, max, out, |buf| {
                if pipe.read_back(&mut buf[..n]).is_err() {
                    lost = true;
                    return Err(());
                }
                let offset = m.offset + n as u64;
                // An error after some bytes is a short read, as from `pread` itself.
                Ok(n + sys::pread(fd, &mut buf[n..], offset).unwrap_or(0))
            });
            if lost {
                out.clear();
                return Some(ReadInto::Lost);
            }
            Some(ReadInto::Out)
        }
    }
}

/// Twrite: to an open file (`pwrite`; an `O_APPEND` file appends), or the next chunk of an
/// xattr value (chunks must arrive in order and not exceed the announced size).
pub(crate) fn write(conn: &Conn, m: Twrite) -> OpResult<Rmessage> {
    let count = write_data(conn, (m.fid, m.offset), WriteData::Bytes(&m.data.0))?;
    Ok(Rmessage::Write(Rwrite { count }))
}

/// A write's data: in memory, or waiting in pipes (`crate::piped`).
pub(crate) enum WriteData<'a> {
    Bytes(&'a [u8]),
    Piped(&'a mut PipedPayload),
}

/// Twrite of `data` at `offset` through `fid` (see [`write()`]): the count written. Data in
/// pipes is spliced into a file that takes it, and read back into memory for anything
/// else (the fid changed since the reader looked at it).
pub(crate) fn write_data(
    conn: &Conn,
    (fid, offset): (crossfs_wire::Fid, u64),
    data: WriteData<'_>,
) -> OpResult<u32> {
    let state = conn.fids.get(fid)?;
    let read_back;
    let data = match (data, &*state) {
        (WriteData::Piped(p), FidState::File(f)) => {
            conn.server.export.policy.check_writable()?;
            return write_piped(conn, f.opened()?, offset, p);
        }
        (WriteData::Piped(p), _) => {
            read_back = p.read_back()?;
            &read_back[..]
        }
        (WriteData::Bytes(b), _) => b,
    };
    if let FidState::Events(sub) = &*state {
        return Ok(events_sync(conn, sub, data)? as u32);
    }
    if !matches!(&*state, FidState::Auth(_)) {
        conn.server.export.policy.check_writable()?;
    }
    let count = match &*state {
        FidState::Auth(a) => super::auth::write(a, data)?,
        FidState::File(f) => {
            let open = f.opened()?;
            let n = sys::pwrite(open.fd.as_fd(), data, offset)?;
            conn.server.count_write(&conn.stats, false, n);
            n
        }
        FidState::XattrWrite(x) => {
            let mut value = lock(&x.value);
            let value = &mut *value;
            let len = value.bytes.len();
            if offset != len as u64 {
                return Err(OpError::Invalid("xattr value written out of order"));
            }
            let end = len + data.len();
            if end > x.size {
                return Err(OpError::Invalid("xattr value longer than announced"));
            }
            // The buffer grows as data arrives (doubling, up to the announced size), and its
            // growth is charged to the connection's budget first.
            // Doubling when the budget allows, exactly what is needed otherwise.
            let charged = value.charge.bytes();
            if end > charged {
                let mut new_cap = end.max(charged * 2).min(x.size);
                if value.charge.grow(new_cap - charged).is_err() {
                    value.charge.grow(end - charged)?;
                    new_cap = end;
                }
                value.bytes.reserve_exact(new_cap - len);
            }
            value.bytes.extend_from_slice(data);
            data.len()
        }
        FidState::XattrRead(_) | FidState::Events(_) => return Err(Errno::BADF.into()),
    };
    Ok(count as u32)
}

/// A write whose data waits in pipes, into the open file `open`: spliced where it takes a
/// splice (`OpenFile::spliced_writes`, and a file system that takes one), read back and
/// written otherwise.
fn write_piped(
    conn: &Conn,
    open: &OpenFile,
    offset: u64,
    payload: &mut PipedPayload,
) -> OpResult<u32> {
    let fd = open.fd.as_fd();
    if open.spliced_writes {
        match payload.write_to_file(fd, offset) {
            Ok(n) => {
                conn.server.count_write(&conn.stats, true, n);
                return Ok(n as u32);
            }
            // Refused with the payload untouched: copied below.
            Err(Errno::INVAL) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let data = payload.read_back()?;
    let n = sys::pwrite(fd, &data, offset)?;
    conn.server.count_write(&conn.stats, false, n);
    Ok(n as u32)
}

/// Tfsync: `fsync`/`fdatasync` of the fid's open file.
pub(crate) fn fsync(conn: &Conn, m: Tfsync) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let f: &FileFid = state.file()?;
    sys::fsync(f.opened()?.fd.as_fd(), m.datasync != 0)?;
    Ok(Rmessage::Fsync(Rfsync {}))
}

/// Tfallocate (crossfs extension): `fallocate(2)` of the fid's open file, any mode the
/// host's file system has ([`crossfs_export::Export::fallocate`]).
pub(crate) fn fallocate(conn: &Conn, m: Tfallocate) -> OpResult<Rmessage> {
    let state = conn.fids.get(m.fid)?;
    let FidState::File(f) = &*state else {
        return Err(Errno::BADF.into());
    };
    let open = f.opened()?;
    conn.server
        .export
        .fallocate(open.fd.as_fd(), m.mode, m.offset, m.length)?;
    Ok(Rmessage::Fallocate(Rfallocate {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_translated_and_client_only_bits_dropped() {
        let f =
            host_flags(of::RDWR | of::TRUNC | of::APPEND | of::CLOEXEC | of::NOCTTY | of::FASYNC)
                .unwrap();
        assert_eq!(f, OFlags::RDWR | OFlags::TRUNC | OFlags::APPEND);
        assert_eq!(
            host_flags(of::WRONLY | of::DIRECT).unwrap(),
            OFlags::WRONLY | OFlags::DIRECT
        );
        assert!(host_flags(3).is_err());
    }
}
