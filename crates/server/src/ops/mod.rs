//! Request handlers: one function per message, grouped by what they touch. [`handle`] runs one
//! request and leaves its encoded reply (or Rlerror) in a buffer.

mod attr;
mod auth;
mod behind;
mod bulk;
mod dir;
mod io;
mod lock;
mod walk;
mod xattr;

pub(crate) use behind::OwnChanges;

use std::os::fd::AsFd;

use crossfs_wire::{DecodeError, Rclunk, Rmessage, Tag, Tmessage, WriteHead};

use crate::error::{OpError, OpResult};
use crate::fid::FidState;
use crate::session::{Conn, PipedWrite};

pub(crate) use auth::{AuthFid, MAX_TOKEN};
pub(crate) use io::{read_cached, read_to_pipe};

/// Executes one request and appends exactly one reply frame to `out`.
pub(crate) fn handle(
    conn: &Conn,
    tag: Tag,
    msg_type: u8,
    msg: Result<Tmessage, DecodeError>,
    out: &mut Vec<u8>,
) {
    let result = match msg {
        Ok(Tmessage::Read(m)) => io::read(conn, tag, m, out).map(|()| None),
        Ok(m) => dispatch(conn, m).map(Some),
        Err(DecodeError::UnknownType(_)) => Err(OpError::NotSupported),
        Err(_) => Err(OpError::Invalid("malformed message body")),
    };
    answer(conn, (tag, msg_type), result, out);
}

/// As [`handle`], for a Twrite or Twriteattr whose payload waits in pipes
/// (`crate::piped`).
pub(crate) fn handle_piped(conn: &Conn, tag: Tag, write: &mut PipedWrite, out: &mut Vec<u8>) {
    let WriteHead {
        msg_type,
        fid,
        offset,
        ..
    } = write.head;
    let data = io::WriteData::Piped(&mut write.payload);
    let result = if msg_type == crossfs_wire::Twriteattr::TYPE {
        bulk::writeattr_data(conn, (fid, offset), data)
    } else {
        io::write_data(conn, (fid, offset), data)
            .map(|count| Rmessage::Write(crossfs_wire::Rwrite { count }))
    };
    answer(conn, (tag, msg_type), result.map(Some), out);
}

/// Appends the reply a handler's `result` makes (`None`: it appended its own).
fn answer(
    conn: &Conn,
    (tag, msg_type): (Tag, u8),
    result: OpResult<Option<Rmessage>>,
    out: &mut Vec<u8>,
) {
    match result {
        Ok(Some(reply)) => reply.encode(tag, out),
        Ok(None) => {}
        Err(e) => {
            let request = crossfs_wire::message_name(msg_type).unwrap_or("unknown");
            // An I/O error is the host's (a failing disk, a file system's own error): the
            // client gives it to a program, so it is never silent here.
            if e.errno() == libc::EIO {
                tracing::warn!(id = conn.stats.id, request, "I/O error: {e}");
            } else {
                tracing::debug!(id = conn.stats.id, request, tag = tag.0, "Rlerror: {e}");
            }
            out.clear();
            Rmessage::error(e.errno()).encode(tag, out);
        }
    }
}

/// Whether a request cannot block for long, so the connection's reader may execute it itself
/// rather than hand it to a worker (see the session's concurrency notes). These only look up
/// names, attributes, directory entries and locks (never waiting for one), close
/// descriptors, or make changes a local file system makes at once: renaming, setting
/// attributes, small writes into the page cache ([`quick_write`]). Opening qualifies only
/// for regular files and directories (opening a fifo waits for its other end, a device
/// for whatever the driver waits for). Reads (but see [`read_cached`]), creating files,
/// large, direct or synchronous writes, fsync, allocation, cutting a large file short and
/// unlinking one (which may free many blocks) go to workers. Requests that do not decode only get an error, and
/// run inline too. The cost of running on the reader: the connection's next request
/// waits for this one, which on a busy disk is a journal commit or dirty-page throttling
/// at worst; what it saves is two thread hand-offs per request, half of a round trip.
pub(crate) fn runs_inline(conn: &Conn, msg: &Result<Tmessage, DecodeError>) -> bool {
    use Tmessage as T;
    let Ok(msg) = msg else {
        return true;
    };
    match msg {
        T::Attach(_)
        | T::Auth(_)
        | T::Walk(_)
        | T::Clunk(_)
        | T::Getattr(_)
        | T::Statfs(_)
        | T::Readlink(_)
        | T::Readdir(_)
        | T::Xattrwalk(_)
        | T::Xattrcreate(_)
        | T::Mkdir(_)
        | T::Mkdirattr(_)
        | T::Symlink(_)
        | T::Mknod(_)
        | T::Link(_)
        | T::Rename(_)
        | T::Renameat(_)
        | T::Renameatattr(_)
        | T::Lock(_)
        | T::Getlock(_)
        | T::Walkgetattr(_)
        | T::Readdirattr(_)
        | T::Walkreaddirattr(_)
        | T::Features(_)
        // Its client answered it already and sends what follows it without waiting: the
        // order promise (docs/protocol.md, "Order") covers it.
        | T::Createbehind(_)
        | T::Createbehindmarked(_)
        | T::Setattrbehind(_)
        | T::Writebehind(_)
        | T::Unlinkbehind(_)
        | T::Rmdirbehind(_)
        | T::Mkdirbehind(_)
        | T::Renamebehind(_) => true,
        T::Lopen(m) => match conn.fids.get(m.fid) {
            Ok(state) => match &*state {
                FidState::File(f) => matches!(f.kind, libc::S_IFREG | libc::S_IFDIR),
                // An xattr fid: the open fails at once.
                _ => true,
            },
            // Unknown fid: EBADF at once.
            Err(_) => true,
        },
        // Inline when what it opens is a regular file or a directory (see Tlopen): the
        // fid itself, or the one name beneath it, looked at without following anything.
        T::Walkopen(m) => match (conn.fids.get(m.fid), m.wnames.as_slice()) {
            (Ok(state), []) => matches!(&*state, FidState::File(f) if matches!(f.kind, libc::S_IFREG | libc::S_IFDIR)),
            (Ok(state), [name]) => match (&*state, crossfs_export::names::component(name)) {
                // A handle that cannot be reached again fails at once.
                (FidState::File(dir), Ok(name)) => dir.fd().map_or(true, |fd| {
                    crossfs_export::sys::stat_at(fd.as_fd(), &name).is_ok_and(|st| {
                        matches!(u32::from(st.stx_mode) & libc::S_IFMT, libc::S_IFREG | libc::S_IFDIR)
                    })
                }),
                // Refused at once.
                _ => true,
            },
            _ => false,
        },
        T::Unlinkat(crossfs_wire::Tunlinkat { dirfd, name, .. })
        | T::Unlinkatattr(crossfs_wire::Tunlinkatattr { dirfd, name, .. }) => {
            quick_removal(conn, *dirfd, name)
        }
        T::Write(crossfs_wire::Twrite { fid, data, .. })
        | T::Writeattr(crossfs_wire::Twriteattr { fid, data, .. }) => {
            quick_write(conn, *fid, data.0.len())
        }
        T::Setattr(set) | T::Setattrget(crossfs_wire::Tsetattrget { set, .. }) => {
            quick_setattr(conn, set)
        }
        T::Read(_)
        // Creating a file waits for the directory and the journal: on a disk, creates from
        // several threads at once go faster on the workers (8 threads, 400 files each:
        // 2.5-2.8 s against 3.1-3.6 s on the reader).
        | T::Lcreate(_)
        | T::Createattr(_)
        | T::Createattrdir(_)
        | T::Fsync(_)
        // Allocating or zeroing a large range takes as long as the file system needs.
        | T::Fallocate(_)
        // Creates, as a Tlcreate that truncates may.
        | T::Tmpfile(_)
        | T::Remove(_)
        | T::Version(_)
        | T::Flush(_)
        // Reads, as Tread.
        | T::Walkread(_)
        | T::Readfiles(_) => false,
    }
}

/// Whether a write of `len` bytes to open fid `fid` is quick: a small one to a regular file
/// opened without `O_DIRECT` or `O_SYNC` (a copy into the page cache). Larger writes go to
/// workers, so that several run at once. A fid that is not such a file fails at once or
/// is not quick.
fn quick_write(conn: &Conn, fid: crossfs_wire::Fid, len: usize) -> bool {
    let Ok(state) = conn.fids.get(fid) else {
        return true;
    };
    match &*state {
        FidState::File(f) => {
            len <= crossfs_wire::INLINE_WRITE_MAX
                && f.open.get().is_none_or(|open| open.quick_writes)
        }
        // Written into the fid's own buffer.
        FidState::XattrWrite(_) | FidState::Auth(_) => true,
        FidState::XattrRead(_) | FidState::Events(_) => true,
    }
}

/// Whether a setattr is quick: anything but cutting a regular file of over
/// [`QUICK_REMOVAL_MAX`] bytes short, whose blocks the file system may take a while to free.
fn quick_setattr(conn: &Conn, set: &crossfs_wire::Tsetattr) -> bool {
    if set.valid & crossfs_wire::setattr::SIZE == 0 {
        return true;
    }
    let Ok(state) = conn.fids.get(set.fid) else {
        return true;
    };
    let FidState::File(f) = &*state else {
        return true;
    };
    let Ok(fd) = f.fd() else {
        return true;
    };
    crossfs_export::sys::stat(fd.as_fd()).map_or(true, |st| {
        st.stx_size <= QUICK_REMOVAL_MAX || set.size >= st.stx_size
    })
}

/// Largest file whose removal runs on the reader (see [`quick_removal`]).
const QUICK_REMOVAL_MAX: u64 = 1 << 20;

/// Whether removing `name` from directory `dirfd` is quick: anything but the last link of a
/// regular file over [`QUICK_REMOVAL_MAX`] bytes, whose blocks the file system may take a
/// while to free (unless someone holds it open). A name that cannot be looked at fails at
/// once.
fn quick_removal(conn: &Conn, dirfd: crossfs_wire::Fid, name: &[u8]) -> bool {
    let Ok(state) = conn.fids.get(dirfd) else {
        return true;
    };
    let (FidState::File(dir), Ok(name)) = (&*state, crossfs_export::names::component(name)) else {
        return true;
    };
    let Ok(fd) = dir.fd() else {
        return true;
    };
    crossfs_export::sys::stat_at(fd.as_fd(), &name).map_or(true, |st| {
        let regular = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFREG;
        !(regular && st.stx_nlink == 1 && st.stx_size > QUICK_REMOVAL_MAX)
    })
}

fn dispatch(conn: &Conn, msg: Tmessage) -> OpResult<Rmessage> {
    use Tmessage as T;
    match msg {
        T::Attach(m) => walk::attach(conn, m),
        T::Walk(m) => walk::walk(conn, m),
        T::Clunk(m) => clunk(conn, m.fid),
        T::Lopen(m) => io::lopen(conn, m),
        T::Lcreate(m) => io::lcreate(conn, m),
        // Plain changes of a file are noted for the changes sent behind after them.
        T::Write(m) => conn.own.around(conn, m.fid, || io::write(conn, m)),
        T::Writeattr(m) => conn.own.around(conn, m.fid, || bulk::writeattr(conn, m)),
        T::Fsync(m) => io::fsync(conn, m),
        T::Fallocate(m) => conn.own.around(conn, m.fid, || io::fallocate(conn, m)),
        T::Tmpfile(m) => io::tmpfile(conn, m),
        T::Readdir(m) => dir::readdir(conn, m),
        T::Mkdir(m) => dir::mkdir(conn, m),
        T::Symlink(m) => dir::symlink(conn, m),
        T::Mknod(m) => dir::mknod(conn, m),
        T::Link(m) => dir::link(conn, m),
        T::Rename(m) => dir::rename(conn, m),
        T::Renameat(m) => dir::renameat(conn, m),
        T::Unlinkat(m) => dir::unlinkat(conn, m),
        T::Remove(m) => dir::remove(conn, m),
        T::Getattr(m) => attr::getattr(conn, m),
        T::Setattr(m) => conn.own.around(conn, m.fid, || attr::setattr(conn, m)),
        T::Statfs(m) => attr::statfs(conn, m),
        T::Readlink(m) => attr::readlink(conn, m),
        T::Xattrwalk(m) => xattr::xattrwalk(conn, m),
        T::Xattrcreate(m) => xattr::xattrcreate(conn, m),
        T::Lock(m) => lock::lock(conn, m),
        T::Getlock(m) => lock::getlock(conn, m),
        T::Auth(m) => auth::auth(conn, m),
        T::Walkgetattr(m) => bulk::walkgetattr(conn, m),
        T::Readdirattr(m) => bulk::readdirattr(conn, m),
        T::Walkopen(m) => bulk::walkopen(conn, m),
        T::Walkread(m) => bulk::walkread(conn, m),
        T::Readfiles(m) => bulk::readfiles(conn, m),
        T::Walkreaddirattr(m) => bulk::walkreaddirattr(conn, m),
        T::Createattr(m) => bulk::createattr(conn, m),
        T::Setattrget(m) => conn
            .own
            .around(conn, m.set.fid, || bulk::setattrget(conn, m)),
        T::Unlinkatattr(m) => bulk::unlinkatattr(conn, m),
        T::Createattrdir(m) => bulk::createattrdir(conn, m),
        T::Createbehind(m) => behind::createbehind(conn, m),
        T::Createbehindmarked(m) => behind::createbehindmarked(conn, m),
        T::Mkdirattr(m) => bulk::mkdirattr(conn, m),
        T::Setattrbehind(m) => behind::setattrbehind(conn, m),
        T::Writebehind(m) => behind::writebehind(conn, m),
        T::Unlinkbehind(m) => behind::unlinkbehind(conn, m),
        T::Rmdirbehind(m) => behind::rmdirbehind(conn, m),
        T::Mkdirbehind(m) => behind::mkdirbehind(conn, m),
        T::Renamebehind(m) => behind::renamebehind(conn, m),
        T::Renameatattr(m) => bulk::renameatattr(conn, m),
        T::Features(crossfs_wire::Tfeatures {}) => {
            Ok(Rmessage::Features(crossfs_wire::Rfeatures {
                features: crossfs_wire::features::KILL_SUIDGID
                    | crossfs_wire::features::CONDITIONAL_BEHIND
                    | crossfs_wire::features::MARKED_CREATE
                    | crossfs_wire::features::MKDIR_ATTR
                    | crossfs_wire::features::UNLINK_BEHIND
                    | crossfs_wire::features::RENAME_BEHIND
                    | crossfs_wire::features::RMDIR_BEHIND
                    | crossfs_wire::features::MKDIR_BEHIND,
            }))
        }
        // Handled by the session before dispatch; never queued.
        T::Read(_) | T::Version(_) | T::Flush(_) => Err(OpError::Invalid("not dispatched")),
    }
}

/// Tclunk: forgets the fid; an xattr being written is set now.
fn clunk(conn: &Conn, fid: crossfs_wire::Fid) -> OpResult<Rmessage> {
    let state = conn.fids.remove(fid)?;
    if let FidState::XattrWrite(x) = &*state {
        xattr::commit(conn, x)?;
    }
    Ok(Rmessage::Clunk(Rclunk {}))
}
