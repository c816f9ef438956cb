//! Reading and writing open files: read, write, flush, fsync, fallocate.
//!
//! Reads and writes are handed to the client and answered from their completions. A FUSE
//! write never exceeds one Twrite (max_write is at most msize - 24, in whole pages); a read
//! larger than one Tread can carry is split into concurrent Treads and reassembled. The
//! first read of a deferred open (see `fs/open.rs`) opens and reads in one round trip
//! (Twalkread), or is answered from the small files fetched ahead (`fs/pushes.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::session::{Errno, FileHandle, INodeNo, ReplyData, ReplyEmpty, ReplyWrite};
use crossfs_client::ClientError;
use crossfs_wire::{Rmessage, Tfallocate, Tfsync, Tmessage, Twalkread};

use super::attr::Caller;
use super::reply::{answer, count_moved, Later, NowOrLater, Written};
use super::{errno, MountState};
use crate::ahead::small_files::SmallFile;
use crate::fid::FidRef;
use crate::known::handle::{OpenFile, Unannounced};
use crate::known::inode::NodeFid;
use crate::known::listed_attrs::ChangeInFlight;
use crate::remote::{expect_reply, ATTR_MASK};
use crate::sync::lock;

impl MountState {
    /// The first read of a deferred open: from the file's content fetched with its
    /// directory's small files if that is here (or on the way) and nothing changed the
    /// file since, else [`MountState::walk_and_read`], which may start fetching the files after
    /// it in its directory.
    pub(super) fn open_and_read(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        offset: u64,
        size: u32,
    ) -> Later<'static, ReplyData> {
        let shared = self.clone();
        Later::new(move |reply| {
            let ino = file.reopen.node;
            let again = shared.clone();
            shared.with_small_file(
                ino,
                Box::new(move |found: Option<SmallFile>| {
                    let Some(f) = found else {
                        // Open already (an unannounced open's earlier reads): read through it.
                        if file.fid().is_some() {
                            return answer(reply, again.read_by_fid(file, offset, size));
                        }
                        return answer(reply, again.walk_and_read(file, offset, size));
                    };
                    // The kernel asks for the access time after a read: these answer it.
                    again.known.inodes.observe(ino, &f.attr, Some(f.fetched));
                    let start = usize::try_from(offset)
                        .unwrap_or(usize::MAX)
                        .min(f.data.len());
                    let end = start.saturating_add(size as usize).min(f.data.len());
                    answer(reply, Ok(&f.data[start..end]));
                }),
            );
        })
    }

    /// Twalkread opens the file and reads it in one round trip, from the node's fid or,
    /// for a node answered from a replica, from its directory's by name, checking that
    /// the name still leads to the node's file.
    pub(super) fn walk_and_read(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        offset: u64,
        size: u32,
    ) -> Result<Later<'static, ReplyData>, Errno> {
        let (base, wnames, lazy) = match self.known.inodes.node_fid(file.reopen.node) {
            Some(NodeFid::Bound(fid)) => (fid, vec![], None),
            Some(NodeFid::Lazy {
                dir_ino,
                name,
                qid_path,
            }) => {
                let dir = self.node(INodeNo(dir_ino))?;
                (dir, vec![name.clone()], Some((dir_ino, name, qid_path)))
            }
            None => return Err(Errno::ESTALE),
        };
        let ino = file.reopen.node;
        self.reading(ino);
        let fetched = self.known.listed.before_fetch();
        let shared = self.clone();
        Ok(Later::new(move |reply| {
            let newfid = shared.client.alloc_fid();
            let msg = Tmessage::Walkread(Twalkread {
                fid: base.fid(),
                newfid,
                wnames,
                flags: file.reopen.flags,
                offset,
                count: size,
                request_mask: ATTR_MASK,
            });
            let client = shared.client.clone();
            client.call_async(
                msg,
                Box::new(move |r| {
                    drop(base);
                    let read = match r {
                        Ok(Rmessage::Walkread(r)) => r,
                        Err(ClientError::Errno(libc::EOPNOTSUPP)) => {
                            shared.client.free_fid(newfid);
                            shared.server.no_walkread.store(true, Ordering::Relaxed);
                            // Opening waits for the server: not on the client's reader thread.
                            let again = shared.clone();
                            let spawned = std::thread::Builder::new()
                                .name("crossfs-open".into())
                                .spawn(move || answer(reply, again.read_open(file, offset, size)));
                            if let Err(e) = spawned {
                                tracing::warn!("cannot start a thread to open a file: {e}");
                            }
                            return;
                        }
                        Err(ClientError::Errno(libc::EMFILE | libc::ENFILE)) => {
                            shared.client.free_fid(newfid);
                            // The server is short of descriptors: open on a thread (the
                            // open gives back this mount's idle opens, and waits for other
                            // mounts' to expire, `short_of_descriptors`), then read.
                            let again = shared.clone();
                            let spawned = std::thread::Builder::new()
                                .name("crossfs-open".into())
                                .spawn(move || {
                                    let read = again
                                        .file_fid(&file)
                                        .and_then(|_| again.read_open(file, offset, size));
                                    answer(reply, read)
                                });
                            if let Err(e) = spawned {
                                tracing::warn!("cannot start a thread to open a file: {e}");
                            }
                            return;
                        }
                        r => {
                            shared.client.free_fid(newfid);
                            let failed: Read = Err(shared.walkread_failed(r, lazy));
                            return answer(reply, failed);
                        }
                    };
                    // Bound now: clunked when dropped, here (after the answer) or with the
                    // handle.
                    let fid = FidRef::new(&shared.client, newfid);
                    if let Some((dir_ino, name, qid_path)) = lazy {
                        if read.wqids.last().map(|q| q.path) != Some(qid_path) {
                            let moved: Read = Err(shared.lazy_failed(dir_ino, &name));
                            return answer(reply, moved);
                        }
                    }
                    answer(reply, Ok(shared.first_read(&file, fid, read, fetched)));
                }),
            );
        }))
    }

    /// Why a Twalkread failed, for the kernel (its answer was not an Rwalkread).
    fn walkread_failed(
        &self,
        r: Result<Rmessage, ClientError>,
        lazy: Option<(u64, Vec<u8>, u64)>,
    ) -> Errno {
        match (r, lazy) {
            (Err(ClientError::Errno(libc::ENOENT)), Some((dir_ino, name, _))) => {
                self.lazy_failed(dir_ino, &name)
            }
            (Ok(other), _) => errno(&crate::remote::unexpected(other)),
            (Err(e), _) => errno(&e),
        }
    }

    /// The data of a Twalkread that opened the file as `fid`, which the handle keeps.
    fn first_read(
        &self,
        file: &OpenFile,
        fid: Arc<FidRef>,
        read: crossfs_wire::Rwalkread,
        fetched: crate::known::listed_attrs::Fetched,
    ) -> Vec<u8> {
        self.stats
            .caches
            .deferred_opens_sent
            .fetch_add(1, Ordering::Relaxed);
        // The kernel asks for the access time after a read: these answer it.
        let ino = file.reopen.node;
        self.known.inodes.observe(ino, &read.attr, Some(fetched));
        file.opened(fid);
        read.data.0
    }

    pub(super) fn read(
        self: &Arc<Self>,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> Result<Later<'static, ReplyData>, Errno> {
        let file = self.open_file_for(ino, fh, Unannounced::Read)?;
        self.read_open(file, offset, size)
    }

    pub(super) fn read_open(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        offset: u64,
        size: u32,
    ) -> Result<Later<'static, ReplyData>, Errno> {
        let max = self.sizes.max_io;
        let walkread = !self.server.no_walkread.load(Ordering::Relaxed);
        // A first read, or a read from the start through a deferred open that has its fid
        // (an unannounced open, shared: the kernel dropped the pages it read before), may
        // be answered from the small files fetched with the directory.
        let first = file.fid().is_none() || (file.deferred.is_some() && offset == 0);
        if first && size <= max && walkread {
            return Ok(self.open_and_read(file, offset, size));
        }
        self.read_by_fid(file, offset, size)
    }

    /// A read through the handle's fid (opening a deferred open first).
    fn read_by_fid(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        offset: u64,
        size: u32,
    ) -> Result<Later<'static, ReplyData>, Errno> {
        let max = self.sizes.max_io;
        let fid = self.file_fid(&file)?.fid();
        self.reading(file.reopen.node);
        let client = self.client.clone();
        if size <= max {
            let splice = self.config.splice_reads;
            return Ok(Later::new(move |reply: ReplyData| {
                client.read_payload_async(
                    fid,
                    offset,
                    size,
                    Box::new(move |r| {
                        drop(file);
                        match r {
                            Ok(payload) => count_moved(reply.payload(payload, splice)),
                            Err(e) => reply.error(errno(&e)),
                        }
                    }),
                );
            }));
        }
        self.stats
            .caches
            .split_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Later::new(move |reply| {
            let parts = size.div_ceil(max) as usize;
            let gather = Arc::new(Gather {
                parts: Mutex::new((0..parts).map(|_| None).collect()),
                left: AtomicUsize::new(parts),
                reply: Mutex::new(Some(reply)),
                chunk: max as usize,
            });
            for i in 0..parts {
                let start = i as u32 * max;
                let count = max.min(size - start);
                let (gather, file) = (gather.clone(), file.clone());
                client.read_async(
                    fid,
                    offset + u64::from(start),
                    count,
                    Box::new(move |r| {
                        drop(file);
                        gather.done(i, r);
                    }),
                );
            }
        }))
    }

    /// `change`: held until the server has answered (see `crate::known::listed_attrs`).
    /// It is taken from the caller when handed to the completion; else it ends with the
    /// caller's hold of it, after the kernel has the answer. `kill_suidgid`: the kernel
    /// flagged the write `FUSE_WRITE_KILL_SUIDGID` (the writer lacks `CAP_FSETID`), so
    /// the file's set-id bits are cleared after it ([`MountState::kill_after_write`]). A
    /// write sent behind needs nothing: a file with set-id bits never goes behind.
    pub(super) fn write<'a>(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        (offset, data): (u64, &'a [u8]),
        (pid, flags, kill_suidgid): (u32, i32, Option<Caller>),
        change: &mut Option<ChangeInFlight>,
    ) -> Result<NowOrLater<'a, Written, ReplyWrite>, Errno> {
        self.writable()?;
        let max = self.sizes.max_io as usize;
        if data.len() > max {
            // max_write keeps the kernel below this; stay correct if it ever is not.
            let written = self.write_split(file.clone(), offset, data)?;
            self.kill_after_sync_write(&file, kill_suidgid)?;
            return Ok(NowOrLater::Now(written));
        }
        let fid = self.file_fid(&file)?;
        if self.write_behind((&file, pid, flags), &fid, (offset, data), change) {
            return Ok(NowOrLater::Now(Written(data.len() as u32)));
        }
        let fid = fid.fid();
        if self.client.has_extensions() && !self.server.no_writeattr.load(Ordering::Relaxed) {
            let later = self.write_attr(file, fid, (offset, data), change.take(), kill_suidgid);
            return Ok(NowOrLater::Later(later));
        }
        if kill_suidgid.is_some() {
            // Only after a reconnect to a server without Twriteattr: rare enough to wait.
            let written = self
                .client
                .write(fid, offset, data)
                .map_err(|e| errno(&e))?;
            self.kill_after_sync_write(&file, kill_suidgid)?;
            return Ok(NowOrLater::Now(Written(written)));
        }
        let change = change.take();
        let client = self.client.clone();
        Ok(NowOrLater::Later(Later::new(move |reply| {
            client.write_async(
                fid,
                offset,
                data,
                Box::new(move |r| {
                    drop((file, change));
                    answer(reply, r.map(Written).map_err(|e| errno(&e)));
                }),
            );
        })))
    }

    /// A write as Twriteattr: the attributes it returns answer the kernel's next GETATTR
    /// (it asks after every write) if nothing else changed the file meanwhile. Until the
    /// server has answered one, each keeps its data, to be sent as a Twrite if the server
    /// predates it.
    pub(super) fn write_attr<'a>(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        fid: crossfs_wire::Fid,
        (offset, data): (u64, &'a [u8]),
        mut change: Option<ChangeInFlight>,
        kill_suidgid: Option<Caller>,
    ) -> Later<'a, ReplyWrite> {
        let shared = self.clone();
        Later::new(move |reply| {
            let again =
                (!shared.server.writeattr_answered.load(Ordering::Relaxed)).then(|| data.to_vec());
            let client = shared.client.clone();
            client.write_attr_async(
                fid,
                offset,
                data,
                Box::new(move |r| {
                    let written = match r {
                        Ok((n, attr)) => {
                            shared
                                .server
                                .writeattr_answered
                                .store(true, Ordering::Relaxed);
                            let known = (attr.valid != 0).then_some(&attr);
                            let kill = kill_suidgid
                                .and_then(|caller| shared.kill_after_write(fid, known, caller));
                            if let Some(kill) = kill {
                                return shared.clone().kill_then_answer(
                                    kill,
                                    (file, change),
                                    Written(n),
                                    reply,
                                );
                            }
                            if attr.valid != 0 {
                                let fetched = change.take().and_then(|c| c.end_with_answer(&attr));
                                shared
                                    .known
                                    .inodes
                                    .observe(file.reopen.node, &attr, fetched);
                            }
                            Ok(Written(n))
                        }
                        Err(e) if e.errno() == libc::EOPNOTSUPP && again.is_some() => {
                            shared.server.no_writeattr.store(true, Ordering::Relaxed);
                            let data = again.unwrap_or_default();
                            return shared.client.write_async(
                                fid,
                                offset,
                                &data,
                                Box::new(move |r| {
                                    drop((file, change));
                                    answer(reply, r.map(Written).map_err(|e| errno(&e)));
                                }),
                            );
                        }
                        Err(e) => {
                            drop((file, change));
                            Err(errno(&e))
                        }
                    };
                    // Unless ended above, the change ends after the answer.
                    answer(reply, written);
                }),
            );
        })
    }

    /// Sends `kill` (see [`MountState::kill_after_write`]) after a write of `written` through
    /// `file` was answered, and answers the kernel once it is: the attributes it returns
    /// end `change`. A write whose set-id bits could not be cleared fails with the
    /// server's errno, as Linux fails a write whose `file_remove_privs` fails (here the
    /// data is already written).
    fn kill_then_answer(
        self: Arc<Self>,
        kill: Tmessage,
        (file, mut change): (Arc<OpenFile>, Option<ChangeInFlight>),
        written: Written,
        reply: ReplyWrite,
    ) {
        let client = self.client.clone();
        client.call_async(
            kill,
            Box::new(move |r| {
                let killed = expect_reply!(r, Setattrget).map_err(|e| errno(&e));
                let answered = killed.map(|k| {
                    let fetched = change.take().and_then(|c| c.end_with_answer(&k.attr));
                    self.known
                        .inodes
                        .observe(file.reopen.node, &k.attr, fetched);
                    written
                });
                drop((file, change));
                answer(reply, answered);
            }),
        );
    }

    /// After a write through `file` that waited for the server, its set-id bits cleared
    /// if `kill_suidgid` (see [`MountState::kill_after_write`]), waiting as well.
    fn kill_after_sync_write(
        &self,
        file: &OpenFile,
        kill_suidgid: Option<Caller>,
    ) -> Result<(), Errno> {
        let Some(caller) = kill_suidgid else {
            return Ok(());
        };
        let fid = self.file_fid(file)?.fid();
        // The attributes after the write: S_ISGID without group execute needs them.
        let msg = Tmessage::Getattr(crossfs_wire::Tgetattr {
            fid,
            request_mask: ATTR_MASK,
        });
        let after = expect_reply!(self.client.call(msg), Getattr).map_err(|e| errno(&e))?;
        let Some(kill) = self.kill_after_write(fid, Some(&after), caller) else {
            return Ok(());
        };
        let k = expect_reply!(self.client.call(kill), Setattrget).map_err(|e| errno(&e))?;
        self.known.inodes.observe(file.reopen.node, &k.attr, None);
        Ok(())
    }

    pub(super) fn write_split(
        &self,
        file: Arc<crate::known::handle::OpenFile>,
        offset: u64,
        data: &[u8],
    ) -> Result<Written, Errno> {
        let max = self.sizes.max_io as usize;
        let fid = self.file_fid(&file)?.fid();
        let mut written = 0usize;
        for chunk in data.chunks(max) {
            match self.client.write(fid, offset + written as u64, chunk) {
                Ok(n) => {
                    written += n as usize;
                    if (n as usize) < chunk.len() {
                        break;
                    }
                }
                Err(e) if written == 0 => return Err(errno(&e)),
                Err(_) => break,
            }
        }
        Ok(Written(written as u32))
    }

    /// On close of a handle that can write (see `fopen_flags`), or of any file while opens
    /// go unannounced. Nothing is buffered here, but POSIX says closing any descriptor
    /// drops the process's locks on the file: release those the closing owner took. When
    /// the kernel keeps the locks itself, a close has nothing to ask the mount: ENOSYS
    /// tells the kernel to send no FLUSH again.
    ///
    /// With changes sent behind, a close by thread `pid` returns the error of a change its
    /// process made to the file that the server refused (see `crate::behind`); the kernel
    /// sends FLUSH only while it does not keep the locks itself (`--send-opens`): a
    /// request on every close of every file would cost more than what it reports.
    pub(super) fn flush(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        pid: u32,
        owner: crate::session::LockOwner,
    ) -> Result<(), Errno> {
        if let Some(errno) = self.behind.take_refused_by(ino.0, pid) {
            return Err(Errno::from_i32(errno));
        }
        if self.kernel_keeps_locks() {
            return Err(Errno::ENOSYS);
        }
        let Ok(file) = self.open_file(fh) else {
            return Ok(());
        };
        if !lock(&file.lock_owners).remove(&owner.0) {
            return Ok(());
        }
        self.unlock_all(&file, owner.0)
    }

    pub(super) fn fsync(
        &self,
        file: Arc<OpenFile>,
        datasync: bool,
    ) -> Result<Later<'static, ReplyEmpty>, Errno> {
        // A directory listed through its node's fid is opened for the fsync alone.
        let fid = if file.listing_only {
            let dir = INodeNo(file.reopen.node);
            self.open_node(dir, libc::O_RDONLY | libc::O_DIRECTORY)?.0
        } else {
            self.file_fid(&file)?
        };
        let msg = Tmessage::Fsync(Tfsync {
            fid: fid.fid(),
            datasync: u32::from(datasync),
        });
        let (client, behind) = (self.client.clone(), self.behind.clone());
        Ok(Later::new(move |reply| {
            client.call_async(
                msg,
                Box::new(move |r| {
                    // Changes sent behind before it were answered before it: one the
                    // server refused fails the fsync.
                    let refused = behind.take_refused(file.reopen.node);
                    drop((file, fid));
                    // The refusal first: it is why the file's fid may be unbound.
                    let r = match refused {
                        Some(e) => Err(Errno::from_i32(e)),
                        None => r.map(|_| ()).map_err(|e| errno(&e)),
                    };
                    answer(reply, r);
                }),
            );
        }))
    }
}

impl MountState {
    /// fallocate(2) of an open file, as a Tfallocate of the crossfs extension; the mode goes
    /// as the kernel gave it, so the server's file system decides which modes exist.
    ///
    /// A server without it (a plain 9P2000.L connection: diod, QEMU, `serve
    /// --no-extensions`; a crossfs that predates Tfallocate, answering `ENOSYS`, or
    /// `EOPNOTSUPP` to a plain allocation) is remembered in `ServerSupport::no_fallocate`,
    /// and the kernel gets `ENOSYS`: it then answers `EOPNOTSUPP` itself, as a local file
    /// system without fallocate does, and asks no more. `change`: as for a write.
    pub(super) fn fallocate(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        (offset, length, mode): (u64, u64, i32),
        change: ChangeInFlight,
    ) -> Result<Later<'static, ReplyEmpty>, Errno> {
        self.writable()?;
        if !self.client.has_extensions() || self.server.no_fallocate.load(Ordering::Relaxed) {
            return Err(Errno::ENOSYS);
        }
        let fid = self.file_fid(&file)?;
        let msg = Tmessage::Fallocate(Tfallocate {
            fid: fid.fid(),
            mode: mode as u32,
            offset,
            length,
        });
        let shared = self.clone();
        Ok(Later::new(move |reply| {
            let client = shared.client.clone();
            client.call_async(
                msg,
                Box::new(move |r| {
                    drop((file, fid));
                    let r = match r {
                        Ok(_) => Ok(()),
                        Err(e) if lacks_fallocate(e.errno(), mode) => {
                            shared.server.no_fallocate.store(true, Ordering::Relaxed);
                            Err(Errno::ENOSYS)
                        }
                        Err(e) => Err(errno(&e)),
                    };
                    answer(reply, r);
                    drop(change);
                }),
            );
        }))
    }
}

/// Whether a Tfallocate's errno says the server has no fallocate at all: `ENOSYS`, or
/// `EOPNOTSUPP` (what a crossfs before Tfallocate answers a message it does not know) to
/// a plain allocation, which every server with Tfallocate carries out unless its file
/// system has no fallocate. `EOPNOTSUPP` to another mode is that mode's answer alone.
fn lacks_fallocate(errno: i32, mode: i32) -> bool {
    errno == libc::ENOSYS || (errno == libc::EOPNOTSUPP && mode == 0)
}

/// What a read is answered with.
type Read = Result<Vec<u8>, Errno>;

/// One piece of a split read, once its Rread (or error) is in.
type Part = Option<Result<Vec<u8>, ClientError>>;

/// The pieces of one split read, answered when the last arrives.
struct Gather {
    parts: Mutex<Vec<Part>>,
    left: AtomicUsize,
    reply: Mutex<Option<ReplyData>>,
    chunk: usize,
}

impl Gather {
    fn done(&self, i: usize, r: Result<Vec<u8>, ClientError>) {
        lock(&self.parts)[i] = Some(r);
        if self.left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let Some(reply) = lock(&self.reply).take() else {
            return;
        };
        let parts = std::mem::take(&mut *lock(&self.parts));
        answer(reply, self.joined(parts));
    }

    /// The data read, up to the first part that came short or failed; the first part's
    /// error if it failed.
    fn joined(&self, parts: Vec<Part>) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            match part {
                Some(Ok(data)) => {
                    let short = data.len() < self.chunk;
                    out.extend_from_slice(&data);
                    if short {
                        break;
                    }
                }
                Some(Err(e)) if i == 0 => return Err(errno(&e)),
                _ => break,
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::lacks_fallocate;

    #[test]
    fn only_a_refused_plain_allocation_or_enosys_says_the_server_lacks_fallocate() {
        assert!(lacks_fallocate(libc::ENOSYS, 0));
        assert!(lacks_fallocate(libc::ENOSYS, libc::FALLOC_FL_PUNCH_HOLE));
        assert!(lacks_fallocate(libc::EOPNOTSUPP, 0));
        // The file system lacks this mode; others may work.
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        assert!(!lacks_fallocate(libc::EOPNOTSUPP, punch));
        assert!(!lacks_fallocate(libc::ENOSPC, 0));
    }
}
