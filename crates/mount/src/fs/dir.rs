//! Directory listings: readdir and readdirplus over Treaddir.
//!
//! The FUSE offset of an entry is the 9P cookie of that entry, so the kernel's "continue
//! after this entry" is the server's. One Treaddir fetches far more than one FUSE reply
//! holds; the rest waits in the handle for the kernel's next request.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crossfs_wire::DirEntry;
use fuser::{FileHandle, FileType, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};

use super::{errno, Shared};
use crate::attr::{self, kind_of_dtype};
use crate::fid::FidRef;
use crate::handle::{lock, DirStream};
use crate::listed_attrs::Fetched;
use crate::remote::resolve_listed;

/// Bytes asked of one Treaddir.
const READDIR_COUNT: u32 = 64 * 1024;
/// Entries resolved (walk + getattr, pipelined) per readdirplus batch.
const PLUS_BATCH: usize = 32;

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl Shared {
    /// Makes sure `s` has entries to offer, unless the directory is exhausted.
    fn fill(&self, fid: crossfs_wire::Fid, s: &mut DirStream) -> Result<(), fuser::Errno> {
        if !s.entries.is_empty() {
            self.stats.caches.readdir_buffer_hits.fetch_add(1, Relaxed);
            return Ok(());
        }
        if s.eof {
            return Ok(());
        }
        let count = READDIR_COUNT.min(self.client.max_io());
        let entries = self
            .client
            .readdir(fid, s.from, count)
            .map_err(|e| errno(&e))?;
        s.eof = entries.is_empty();
        s.entries.extend(entries);
        Ok(())
    }

    /// The d_ino to show for an entry without attributes: its node id if the kernel knows
    /// the file, else the server's qid.path (never 0, which readdir callers may skip).
    fn dirent_ino(&self, e: &DirEntry) -> u64 {
        self.inodes.ino_of(e.qid.path).unwrap_or(e.qid.path).max(1)
    }

    pub(super) fn readdir(
        &self,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let file = match self.open_file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let mut s = lock(&file.dir);
        s.seek(offset);
        loop {
            if let Err(e) = self.fill(file.fid.fid(), &mut s) {
                return reply.error(e);
            }
            let Some(e) = s.entries.front() else { break };
            let ino = self.dirent_ino(e);
            let name = OsStr::from_bytes(&e.name);
            if reply.add(INodeNo(ino), e.offset, kind_of_dtype(e.ty), name) {
                break;
            }
            s.consume();
        }
        reply.ok();
    }

    /// Each entry comes with its attributes and counts as a lookup; a batch of entries
    /// costs two round trips (all walks, then all getattrs) instead of two per entry.
    pub(super) fn readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let (file, dir) = match (self.open_file(fh), self.node(ino)) {
            (Ok(f), Ok(d)) => (f, d),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        let mut s = lock(&file.dir);
        s.seek(offset);
        'batches: loop {
            if let Err(e) = self.fill(file.fid.fid(), &mut s) {
                return reply.error(e);
            }
            if s.entries.is_empty() {
                break;
            }
            let batch: Vec<DirEntry> = s.entries.iter().take(PLUS_BATCH).cloned().collect();
            let listed: Vec<&DirEntry> = batch.iter().filter(|e| !is_dot(&e.name)).collect();
            let mut resolved = self.resolve_batch(ino, &dir, &listed).into_iter();
            for e in &batch {
                let name = OsStr::from_bytes(&e.name);
                if is_dot(&e.name) {
                    // The kernel links neither "." nor "..": no lookup is counted.
                    let ino = if e.name == b"." {
                        ino.0
                    } else {
                        self.dirent_ino(e)
                    };
                    let a = attr::placeholder(ino, FileType::Directory);
                    let ttl = self.entry_ttl();
                    if reply.add(INodeNo(ino), e.offset, name, &ttl, &a, Generation(0)) {
                        break 'batches;
                    }
                    s.consume();
                    continue;
                }
                // An entry gone since the listing was read (or unreadable) is left out.
                if let Some(ListedEntry {
                    found: Ok((fid, a)),
                    fetched,
                    ttl,
                }) = resolved.next()
                {
                    let fa = self.remember((ino, &e.name), fid, &a, fetched);
                    if reply.add(fa.ino, e.offset, name, &ttl, &fa, Generation(0)) {
                        // Not sent: take back the lookup just counted.
                        self.inodes.forget(fa.ino.0, 1);
                        break 'batches;
                    }
                    self.stats.caches.readdirplus_entries.fetch_add(1, Relaxed);
                }
                s.consume();
            }
        }
        reply.ok();
    }

    /// The file and attributes of each entry listed in directory `ino`, in order. A name
    /// whose known node has the listed qid and attributes that may be reused (see
    /// `crate::listed_attrs`) costs nothing; the others are fetched together.
    fn resolve_batch(&self, ino: INodeNo, dir: &FidRef, listed: &[&DirEntry]) -> Vec<ListedEntry> {
        let ttl = self.entry_ttl();
        let fetched = self.listed.before_fetch();
        let mut out: Vec<Option<ListedEntry>> = Vec::with_capacity(listed.len());
        let (mut ask, mut names, mut qids, mut expected) = (vec![], vec![], vec![], vec![]);
        for (i, e) in listed.iter().enumerate() {
            let known = self.inodes.expected_listed(ino.0, &e.name);
            if let Some((fid, path, Some(kept))) = &known {
                let (a, at) = &**kept;
                let left = self.listed.reusable_for(*path, at, self.attr_ttl());
                if let (true, Some(left)) = (*path == e.qid.path, left) {
                    self.stats.caches.listed_attrs_reused.fetch_add(1, Relaxed);
                    out.push(Some(ListedEntry {
                        found: Ok((fid.clone(), a.clone())),
                        fetched: Some(*at),
                        ttl: ttl.min(left),
                    }));
                    continue;
                }
            }
            out.push(None);
            ask.push(i);
            names.push(e.name.as_slice());
            qids.push(e.qid.path);
            expected.push(known.map(|(fid, path, _)| (fid, path)));
        }
        let found = resolve_listed(&self.client, dir, &names, &qids, expected);
        for (i, found) in ask.into_iter().zip(found) {
            out[i] = Some(ListedEntry {
                found,
                fetched: Some(fetched),
                ttl,
            });
        }
        out.into_iter().flatten().collect()
    }
}

/// One listed name, resolved.
struct ListedEntry {
    found: crate::remote::Resolved,
    /// When its attributes were fetched, if they may be reused.
    fetched: Option<Fetched>,
    /// How long the kernel may trust the entry and its attributes.
    ttl: Duration,
}
