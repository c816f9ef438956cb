//! Reading and writing open files: read, write, flush, fsync.
//!
//! Reads and writes are handed to the client and answered from their completions. A FUSE
//! write never exceeds one Twrite (max_write is at most msize - 24, in whole pages); a read
//! larger than one Tread can carry is split into concurrent Treads and reassembled. The
//! first read of a deferred open (see `fs/open.rs`) opens and reads in one round trip
//! (Twalkread), or is answered from the small files fetched ahead (`fs/pushes.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossfs_client::ClientError;
use crossfs_wire::{Rmessage, Tfsync, Tmessage, Twalkread};
use fuser::{Errno, FileHandle, INodeNo, ReplyData, ReplyEmpty, ReplyWrite};

use super::{errno, MountState};
use crate::ahead::small_files::SmallFile;
use crate::fid::FidRef;
use crate::known::handle::OpenFile;
use crate::known::inode::NodeFid;
use crate::known::listed_attrs::ChangeInFlight;
use crate::remote::ATTR_MASK;
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
        reply: ReplyData,
    ) {
        let ino = file.reopen.node;
        let shared = self.clone();
        self.with_small_file(
            ino,
            Box::new(move |found: Option<SmallFile>| {
                let Some(f) = found else {
                    return shared.walk_and_read(file, offset, size, reply);
                };
                // The kernel asks for the access time after a read: these answer it.
                shared.known.inodes.observe(ino, &f.attr, Some(f.fetched));
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(f.data.len());
                let end = start.saturating_add(size as usize).min(f.data.len());
                reply.data(&f.data[start..end]);
            }),
        );
    }

    /// Twalkread opens the file and reads it in one round trip, from the node's fid or,
    /// for a node answered from a replica, from its directory's by name, checking that
    /// the name still leads to the node's file.
    pub(super) fn walk_and_read(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        offset: u64,
        size: u32,
        reply: ReplyData,
    ) {
        let (base, wnames, lazy) = match self.known.inodes.node_fid(file.reopen.node) {
            Some(NodeFid::Bound(fid)) => (fid, vec![], None),
            Some(NodeFid::Lazy {
                dir_ino,
                name,
                qid_path,
            }) => match self.node(INodeNo(dir_ino)) {
                Ok(dir) => (dir, vec![name.clone()], Some((dir_ino, name, qid_path))),
                Err(e) => return reply.error(e),
            },
            None => return reply.error(Errno::ESTALE),
        };
        let ino = file.reopen.node;
        self.reading(ino);
        let fetched = self.known.listed.before_fetch();
        let newfid = self.client.alloc_fid();
        let msg = Tmessage::Walkread(Twalkread {
            fid: base.fid(),
            newfid,
            wnames,
            flags: file.reopen.flags,
            offset,
            count: size,
            request_mask: ATTR_MASK,
        });
        let shared = self.clone();
        self.client.call_async(
            msg,
            Box::new(move |r| {
                drop(base);
                let read = match r {
                    Ok(Rmessage::Walkread(r)) => r,
                    Ok(other) => {
                        shared.client.free_fid(newfid);
                        return reply.error(errno(&crate::remote::unexpected(other)));
                    }
                    Err(ClientError::Errno(libc::EOPNOTSUPP)) => {
                        shared.client.free_fid(newfid);
                        shared.server.no_walkread.store(true, Ordering::Relaxed);
                        // Opening waits for the server: not on the client's reader thread.
                        let again = shared.clone();
                        let spawned = std::thread::Builder::new()
                            .name("crossfs-open".into())
                            .spawn(move || again.read_open(file, offset, size, reply));
                        if let Err(e) = spawned {
                            tracing::warn!("cannot start a thread to open a file: {e}");
                        }
                        return;
                    }
                    Err(ClientError::Errno(libc::ENOENT)) if lazy.is_some() => {
                        shared.client.free_fid(newfid);
                        let (dir_ino, name, _) = lazy.unwrap_or_default();
                        return reply.error(shared.lazy_failed(dir_ino, &name));
                    }
                    Err(e) => {
                        shared.client.free_fid(newfid);
                        return reply.error(errno(&e));
                    }
                };
                // Bound now: clunked when dropped, here or with the handle.
                let fid = FidRef::new(&shared.client, newfid);
                if let Some((dir_ino, name, qid_path)) = lazy {
                    if read.wqids.last().map(|q| q.path) != Some(qid_path) {
                        return reply.error(shared.lazy_failed(dir_ino, &name));
                    }
                }
                shared
                    .stats
                    .caches
                    .deferred_opens_sent
                    .fetch_add(1, Ordering::Relaxed);
                // The kernel asks for the access time after a read: these answer it.
                shared.known.inodes.observe(ino, &read.attr, Some(fetched));
                file.opened(fid);
                reply.data(&read.data.0);
            }),
        );
    }

    pub(super) fn read(self: &Arc<Self>, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
        match self.open_file(fh) {
            Ok(file) => self.read_open(file, offset, size, reply),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn read_open(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        offset: u64,
        size: u32,
        reply: ReplyData,
    ) {
        let max = self.sizes.max_io;
        let walkread = !self.server.no_walkread.load(Ordering::Relaxed);
        if file.fid().is_none() && size <= max && walkread {
            return self.open_and_read(file, offset, size, reply);
        }
        let fid = match self.file_fid(&file) {
            Ok(f) => f.fid(),
            Err(e) => return reply.error(e),
        };
        self.reading(file.reopen.node);
        if size <= max {
            return self.client.read_async(
                fid,
                offset,
                size,
                Box::new(move |r| {
                    drop(file);
                    match r {
                        Ok(data) => reply.data(&data),
                        Err(e) => reply.error(errno(&e)),
                    }
                }),
            );
        }
        self.stats
            .caches
            .split_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
            self.client.read_async(
                fid,
                offset + u64::from(start),
                count,
                Box::new(move |r| {
                    drop(file);
                    gather.done(i, r);
                }),
            );
        }
    }

    /// `change`: held until the server has answered (see `crate::known::listed_attrs`).
    pub(super) fn write(
        self: &Arc<Self>,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        change: ChangeInFlight,
        reply: ReplyWrite,
    ) {
        if let Err(e) = self.writable() {
            return reply.error(e);
        }
        let file = match self.open_file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let max = self.sizes.max_io as usize;
        if data.len() > max {
            // max_write keeps the kernel below this; stay correct if it ever is not.
            return self.write_split(file, offset, data, reply);
        }
        let fid = match self.file_fid(&file) {
            Ok(f) => f.fid(),
            Err(e) => return reply.error(e),
        };
        if self.client.has_extensions() && !self.server.no_writeattr.load(Ordering::Relaxed) {
            return self.write_attr(file, fid, (offset, data), change, reply);
        }
        self.client.write_async(
            fid,
            offset,
            data,
            Box::new(move |r| {
                drop((file, change));
                match r {
                    Ok(n) => reply.written(n),
                    Err(e) => reply.error(errno(&e)),
                }
            }),
        );
    }

    /// A write as Twriteattr: the attributes it returns answer the kernel's next GETATTR
    /// (it asks after every write) if nothing else changed the file meanwhile. Until the
    /// server has answered one, each keeps its data, to be sent as a Twrite if the server
    /// predates it.
    pub(super) fn write_attr(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        fid: crossfs_wire::Fid,
        (offset, data): (u64, &[u8]),
        change: ChangeInFlight,
        reply: ReplyWrite,
    ) {
        let again =
            (!self.server.writeattr_answered.load(Ordering::Relaxed)).then(|| data.to_vec());
        let shared = self.clone();
        self.client.write_attr_async(
            fid,
            offset,
            data,
            Box::new(move |r| match r {
                Ok((n, attr)) => {
                    shared
                        .server
                        .writeattr_answered
                        .store(true, Ordering::Relaxed);
                    if attr.valid != 0 {
                        let fetched = change.end_with_answer(attr.qid.path);
                        shared
                            .known
                            .inodes
                            .observe(file.reopen.node, &attr, fetched);
                    }
                    reply.written(n);
                }
                Err(e) if e.errno() == libc::EOPNOTSUPP && again.is_some() => {
                    shared.server.no_writeattr.store(true, Ordering::Relaxed);
                    let data = again.unwrap_or_default();
                    shared.client.write_async(
                        fid,
                        offset,
                        &data,
                        Box::new(move |r| {
                            drop((file, change));
                            match r {
                                Ok(n) => reply.written(n),
                                Err(e) => reply.error(errno(&e)),
                            }
                        }),
                    );
                }
                Err(e) => {
                    drop((file, change));
                    reply.error(errno(&e));
                }
            }),
        );
    }

    pub(super) fn write_split(
        &self,
        file: Arc<crate::known::handle::OpenFile>,
        offset: u64,
        data: &[u8],
        reply: ReplyWrite,
    ) {
        let max = self.sizes.max_io as usize;
        let fid = match self.file_fid(&file) {
            Ok(f) => f.fid(),
            Err(e) => return reply.error(e),
        };
        let mut written = 0usize;
        for chunk in data.chunks(max) {
            match self.client.write(fid, offset + written as u64, chunk) {
                Ok(n) => {
                    written += n as usize;
                    if (n as usize) < chunk.len() {
                        break;
                    }
                }
                Err(e) if written == 0 => return reply.error(errno(&e)),
                Err(_) => break,
            }
        }
        reply.written(written as u32);
    }

    /// On close of a handle that can write (see `fopen_flags`). Nothing is buffered here,
    /// but POSIX says closing any descriptor drops the process's locks on the file:
    /// release those the closing owner took.
    pub(super) fn flush(&self, fh: FileHandle, owner: fuser::LockOwner, reply: ReplyEmpty) {
        let Ok(file) = self.open_file(fh) else {
            return reply.ok();
        };
        if !lock(&file.lock_owners).remove(&owner.0) {
            return reply.ok();
        }
        match self.unlock_all(&file, owner.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn fsync(&self, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let file = match self.open_file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // A directory listed through its node's fid is opened for the fsync alone.
        let fid = if file.listing_only {
            let dir = INodeNo(file.reopen.node);
            match self.open_node(dir, libc::O_RDONLY | libc::O_DIRECTORY) {
                Ok((fid, _)) => fid,
                Err(e) => return reply.error(e),
            }
        } else {
            match self.file_fid(&file) {
                Ok(f) => f,
                Err(e) => return reply.error(e),
            }
        };
        let msg = Tmessage::Fsync(Tfsync {
            fid: fid.fid(),
            datasync: u32::from(datasync),
        });
        self.client.call_async(
            msg,
            Box::new(move |r| {
                drop((file, fid));
                match r {
                    Ok(_) => reply.ok(),
                    Err(e) => reply.error(errno(&e)),
                }
            }),
        );
    }
}

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
                Some(Err(e)) if i == 0 => return reply.error(errno(&e)),
                _ => break,
            }
        }
        reply.data(&out);
    }
}
