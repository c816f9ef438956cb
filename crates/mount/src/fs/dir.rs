//! Directory listings: readdir and readdirplus over Treaddir.
//!
//! The FUSE offset of an entry is the 9P cookie of that entry, so the kernel's "continue
//! after this entry" is the server's. One Treaddir fetches far more than one FUSE reply
//! holds; the rest waits in the handle for the kernel's next request.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use std::sync::Arc;

use crate::session::{
    Errno, FileHandle, FileType, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus,
};
use crossfs_wire::{DirEntry, DirEntryAttr};

use super::reply::Then;
use super::{errno, MountState};
use crate::attr::{self, kind_of_dtype};
use crate::fid::FidRef;
use crate::known::cache::CacheMode;
use crate::known::handle::DirStream;
use crate::known::inode::{ByPath, NodeFid};
use crate::known::listed_attrs::Fetched;
use crate::known::replica::Listed;
use crate::remote::resolve_listed;
use crate::sync::lock;
use crossfs_client::ClientError;

/// A directory's fid, and the first entries of its listing if they came with it (with the
/// count they were asked with).
pub(super) type DirFid = (Arc<FidRef>, Option<(Vec<DirEntryAttr>, u32)>);

/// Bytes asked of one Treaddir.
const READDIR_COUNT: u32 = 64 * 1024;
/// The longest name Linux allows: a Treaddirattr reply with room for one more entry of
/// this length was the directory's last.
const NAME_MAX: usize = 255;
/// Bytes of an Rwalkreaddirattr besides its entries, one name walked: nwqid[2] wqid[13].
const WALKED_NAME_LEN: u32 = 2 + 13;
/// Entries resolved (walk + getattr, pipelined) per readdirplus batch.
const PLUS_BATCH: usize = 32;

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

impl MountState {
    /// Makes sure `s` has entries to offer, unless the directory is exhausted. With the
    /// crossfs extension (outside `never` mode) the listing carries every entry's
    /// attributes, and a listing read from the start to the end with nothing touching the
    /// directory meanwhile becomes its replica.
    fn fill(
        &self,
        ino: u64,
        fid: crossfs_wire::Fid,
        s: &mut DirStream,
    ) -> Result<(), crate::session::Errno> {
        if s.front().is_some() {
            self.stats.caches.readdir_buffer_hits.fetch_add(1, Relaxed);
            return Ok(());
        }
        if s.eof {
            return Ok(());
        }
        self.reading(ino);
        let with_attrs = self.client.has_extensions() && self.config.cache != CacheMode::Never;
        if !with_attrs {
            let count = READDIR_COUNT.min(self.client.max_io());
            let entries = self
                .client
                .readdir(fid, s.from, count)
                .map_err(|e| errno(&e))?;
            s.eof = entries.is_empty();
            s.entries.extend(
                entries
                    .into_iter()
                    .map(|entry| Listed { entry, attr: None }),
            );
            return Ok(());
        }
        let ticket = self.known.replicas.ticket(ino);
        let fetched = self.known.listed.before_fetch();
        let count = self.client.max_io();
        // The server opens the directory for the listing: a refusal for want of
        // descriptors gives back this mount's idle opens (`short_of_descriptors`).
        let entries = self
            .short_of_descriptors(|| self.client.readdirattr(fid, s.from, count))
            .map_err(|e| errno(&e))?;
        self.take_listed(ino, s, (entries, count), ticket, fetched);
        Ok(())
    }

    /// Puts entries listed from `s.from`, asked for with `count` at `fetched`, in `s`;
    /// `ticket`, taken before, is the replica's (see [`MountState::fill`]).
    pub(super) fn take_listed(
        &self,
        ino: u64,
        s: &mut DirStream,
        (entries, count): (Vec<DirEntryAttr>, u32),
        ticket: Option<crate::known::replica::Ticket>,
        fetched: Fetched,
    ) {
        if s.from == 0 {
            s.ticket = ticket;
            s.gathered = ticket.map(|t| (t, Vec::new()));
            s.fetched = Some(fetched);
        }
        self.observe_dot(ino, &entries, fetched);
        let used: usize = entries
            .iter()
            .map(|e| DirEntryAttr::wire_len(e.entry.name.len()))
            .sum();
        // The server fills each reply: one with room for another entry is the last.
        s.eof = used + DirEntryAttr::wire_len(NAME_MAX) <= count as usize;
        if let Some((_, gathered)) = &mut s.gathered {
            gathered.extend(
                entries
                    .iter()
                    .map(|e| (e.entry.name.clone(), e.attr.clone(), e.entry.offset)),
            );
        }
        s.entries.extend(entries.into_iter().map(|e| Listed {
            // "." and ".." come without attributes.
            attr: (e.attr.valid != 0).then(|| Arc::new(e.attr)),
            entry: e.entry,
        }));
        if s.eof {
            if let (Some((ticket, gathered)), Some(first)) = (s.gathered.take(), s.fetched) {
                self.known
                    .replicas
                    .install(ino, ticket, gathered, true, first);
            }
        }
    }

    /// Directory `ino`'s fid. When getting it takes a walk (a directory answered from its
    /// parent's replica) and `listing` says the listing is wanted next, the walk brings the
    /// listing's first entries too (Twalkreaddirattr), with the count they were asked
    /// with: a directory met in a listing is bound and listed in one round trip, not two.
    pub(super) fn dir_fid(&self, ino: u64, listing: bool) -> Result<DirFid, crate::session::Errno> {
        let compound = listing
            && self.client.has_extensions()
            && self.config.cache != CacheMode::Never
            && !self.server.no_walkreaddirattr.load(Relaxed);
        let Some(NodeFid::Lazy {
            dir_ino,
            name,
            qid_path,
        }) = self.known.inodes.node_fid(ino).filter(|_| compound)
        else {
            return self.node(INodeNo(ino)).map(|fid| (fid, None));
        };
        let dir = self.node(INodeNo(dir_ino))?;
        let count = self.client.max_io() - WALKED_NAME_LEN;
        let newfid = self.client.alloc_fid();
        let walked = vec![name.clone()];
        match self
            .client
            .walkreaddirattr((dir.fid(), newfid), walked, 0, count)
        {
            Ok((wqids, entries)) => {
                let fid = FidRef::new(&self.client, newfid);
                if wqids.last().map(|q| q.path) != Some(qid_path) {
                    return Err(self.lazy_failed(dir_ino, &name));
                }
                Ok((self.known.inodes.bind(ino, fid), Some((entries, count))))
            }
            Err(e) => {
                if !matches!(e, ClientError::Protocol(_)) {
                    self.client.free_fid(newfid);
                }
                if matches!(e, ClientError::Errno(libc::EOPNOTSUPP)) {
                    self.server.no_walkreaddirattr.store(true, Relaxed);
                }
                // Whatever failed, the plain walk tells it as before.
                self.node(INodeNo(ino)).map(|fid| (fid, None))
            }
        }
    }

    /// Keeps the attributes of directory `ino` that a listing's "." carries, taken by the
    /// server after it read the entries (servers before this send none): the kernel asks
    /// for them after every listing (reading a directory moves its access time), and
    /// they answer that until something may have changed them (`crate::known::listed_attrs`; a
    /// later read of this listing counts).
    fn observe_dot(&self, ino: u64, entries: &[DirEntryAttr], fetched: Fetched) {
        let dot = entries.iter().find(|e| e.entry.name == b".");
        if let Some(e) = dot.filter(|e| e.attr.valid != 0) {
            self.known.inodes.observe(ino, &e.attr, Some(fetched));
        }
    }

    /// Fills directory `ino`'s replica from its start to its end (as many entries per
    /// Treaddirattr as one message holds: about 5,000 per MiB of msize), unless the
    /// directory has more entries than all replicas may hold.
    pub(super) fn fill_replica(&self, ino: u64, ticket: crate::known::replica::Ticket) {
        let limit = self.known.replicas.limit();
        let (mut listed, mut offset) = (Vec::new(), 0);
        self.reading(ino);
        let first = self.known.listed.before_fetch();
        let (dir, mut walked) = match self.dir_fid(ino, true) {
            Ok(d) => d,
            Err(e) => return tracing::debug!("filling the replica of node {ino}: {e:?}"),
        };
        loop {
            // The first entries may have come with the fid, asked for at `first`.
            let (fetched, listing) = match walked.take() {
                Some(first_entries) => (first, Ok(first_entries)),
                None => {
                    let (fetched, count) = (self.known.listed.before_fetch(), self.client.max_io());
                    let entries = self.client.readdirattr(dir.fid(), offset, count);
                    (fetched, entries.map(|e| (e, count)))
                }
            };
            let (entries, count) = match listing {
                Ok(listed) => listed,
                Err(e) => return tracing::debug!("filling the replica of node {ino}: {e}"),
            };
            self.observe_dot(ino, &entries, fetched);
            let used: usize = entries
                .iter()
                .map(|e| DirEntryAttr::wire_len(e.entry.name.len()))
                .sum();
            offset = entries.last().map_or(offset, |e| e.entry.offset);
            listed.extend(
                entries
                    .into_iter()
                    .map(|e| (e.entry.name, e.attr, e.entry.offset)),
            );
            // The server fills each reply: one with room for another entry is the last.
            if used + DirEntryAttr::wire_len(NAME_MAX) <= count as usize {
                break;
            }
            if listed.len() > limit {
                return;
            }
        }
        self.known
            .replicas
            .install(ino, ticket, listed, true, first);
    }

    /// The d_ino to show for an entry without attributes: its node id if the kernel knows
    /// the file, else the server's qid.path (never 0, which readdir callers may skip).
    fn dirent_ino(by_path: &ByPath<'_>, e: &DirEntry) -> u64 {
        by_path.ino_or_own(e.qid.path).max(1)
    }

    /// Adds entries to `reply` until it is full or the listing ends; the caller ends the
    /// reply (or answers with the error, which drops the entries added).
    pub(super) fn readdir(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: &mut ReplyDirectory,
    ) -> Result<(), Errno> {
        let file = self.listing_for(ino, fh, offset)?;
        let fid = self.file_fid(&file)?.fid();
        let mut s = lock(&file.dir);
        s.seek(offset);
        'pages: loop {
            self.fill(file.reopen.node, fid, &mut s)?;
            if s.front().is_none() {
                break;
            }
            // One lock for all the entries at hand (thousands, from a replica).
            let by_path = self.known.inodes.by_path();
            while let Some(Listed { entry: e, .. }) = s.front() {
                let ino = Self::dirent_ino(&by_path, e);
                let name = OsStr::from_bytes(&e.name);
                if reply.add(INodeNo(ino), e.offset, kind_of_dtype(e.ty), name) {
                    break 'pages;
                }
                s.consume();
            }
        }
        self.listing_read(ino, fh, &file, &s, offset);
        Ok(())
    }

    /// After a read of listing `file` from `offset`: an unannounced listing (handle 0)
    /// that had nothing more to give is closed, as the kernel has read it all.
    fn listing_read(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        file: &Arc<crate::known::handle::OpenFile>,
        s: &DirStream,
        offset: u64,
    ) {
        if fh.0 == 0 && s.ended_at(offset) {
            self.known.handles.end_listing(ino.0, file);
        }
    }

    /// Each entry comes with its attributes and counts as a lookup; a batch of entries
    /// costs two round trips (all walks, then all getattrs) instead of two per entry.
    /// An entry listed with attributes (from a replica, or a Treaddirattr) gives the
    /// attributes the mount fetched for the file since, if still exact; else those it
    /// was listed with, for no time if the server read the file for the mount since the
    /// listing was fetched (a replica follows change events, not reads, which may move
    /// the access time). During a tree walk, the subdirectories listed are
    /// fetched ahead (`crate::ahead::tree_walk`), unless `priming`: the mount's own listing
    /// ahead (`crate::ahead::primed_dirs`), once the kernel has the entries. As
    /// [`MountState::readdir`], the caller ends the reply.
    pub(super) fn readdirplus(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        priming: bool,
        reply: &mut ReplyDirectoryPlus,
    ) -> Result<Then<'_, ()>, Errno> {
        let (file, dir) = match (self.listing_for(ino, fh, offset), self.node(ino)) {
            (Ok(f), Ok(d)) => (f, d),
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        let fid = self.file_fid(&file)?.fid();
        let walking = !priming
            && self.replicas_usable()
            && if offset == 0 {
                self.ahead.tree_walk.listing(ino.0)
            } else {
                self.ahead.tree_walk.active()
            };
        let mut subdirs = Vec::new();
        let mut s = lock(&file.dir);
        s.seek(offset);
        'batches: loop {
            self.fill(ino.0, fid, &mut s)?;
            if s.front().is_none() {
                break;
            }
            let ticket = s.ticket;
            let batch = s.upcoming(PLUS_BATCH);
            let listed: Vec<&Listed> = batch.iter().filter(|l| !is_dot(&l.entry.name)).collect();
            let mut resolved = self.resolve_batch(ino, &dir, &listed, ticket).into_iter();
            for Listed { entry: e, .. } in &batch {
                let name = OsStr::from_bytes(&e.name);
                if is_dot(&e.name) {
                    // The kernel links neither "." nor "..": no lookup is counted.
                    let ino = if e.name == b"." {
                        ino.0
                    } else {
                        Self::dirent_ino(&self.known.inodes.by_path(), e)
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
                let remembered = match resolved.next() {
                    Some(ListedEntry {
                        found: Found::Walked(Ok((fid, a))),
                        fetched,
                        ttl,
                    }) => Some((self.remember((ino, &e.name), fid, &a, fetched), ttl)),
                    Some(ListedEntry {
                        found: Found::Listed(a),
                        ttl,
                        ..
                    }) => {
                        let (a, fetched) = self.freshest_listed(&a);
                        // Changed since it was listed, and no newer attributes: the kernel
                        // gets it for no time, and asks again. A read by the server for the
                        // mount counts (it may have moved the access time), and so does a
                        // change through the mount: the kernel dropped the file's
                        // attributes when it was made, and would otherwise take these,
                        // older, in their place.
                        let exact = fetched.is_some()
                            || s.fetched
                                .is_some_and(|f| !self.known.listed.changed_since(a.qid.path, &f));
                        let ttl = if exact { ttl } else { Duration::ZERO };
                        let node = self
                            .known
                            .inodes
                            .remember_lazy((ino.0, &e.name), &a, fetched);
                        self.check_names_lost();
                        if let (Some(t), true) = (s.ticket, attr::is_dir(&a)) {
                            self.known.replicas.anchor(ino.0, &e.name, node, t);
                        }
                        Some((attr::file_attr(node, &a, self.ids), ttl))
                    }
                    _ => None,
                };
                if let Some((fa, ttl)) = remembered {
                    let (fa, ttl) = self.unless_predicted(fa, ttl);
                    if reply.add(fa.ino, e.offset, name, &ttl, &fa, Generation(0)) {
                        // Not sent: take back the lookup just counted.
                        self.known.inodes.forget(fa.ino.0, 1);
                        break 'batches;
                    }
                    self.stats.caches.readdirplus_entries.fetch_add(1, Relaxed);
                    if walking && fa.kind == FileType::Directory {
                        subdirs.push(fa.ino.0);
                    }
                }
                s.consume();
            }
        }
        self.listing_read(ino, fh, &file, &s, offset);
        drop(s);
        Ok(Then::new((), move || {
            if let Some(tx) = self.ahead.subdirs_to_fetch.get() {
                for dir in subdirs.into_iter().filter(|d| !self.known.replicas.has(*d)) {
                    if tx.try_send(dir).is_err() {
                        break; // full: the program lists the rest itself
                    }
                }
            }
        }))
    }

    /// Starts the thread that fetches the replicas of subdirectories during a tree walk
    /// (`crate::ahead::tree_walk`); it ends with the mount.
    pub(crate) fn start_subdir_fetch(self: &Arc<Self>) {
        self.start_helper(
            "crossfs-subdirs",
            &self.ahead.subdirs_to_fetch,
            |shared, dir| {
                shared.fetch_subdir_ahead(dir);
            },
        );
    }

    /// Fetches directory `dir`'s replica as the first lookup in it would, unless it has one
    /// by now or could not keep one.
    fn fetch_subdir_ahead(&self, dir: u64) {
        if !self.replicas_usable() || self.known.replicas.has(dir) {
            return;
        }
        let Some(ticket) = self.known.replicas.ticket(dir) else {
            return;
        };
        // A program fetching it itself (opening it, looking up in it) is left alone.
        let Some(_fetching) = self.ahead.tree_walk.fetch(dir) else {
            return;
        };
        // The kernel may have forgotten the node meanwhile: then nothing is filled.
        self.fill_replica(dir, ticket);
        if self.known.replicas.has(dir) {
            self.stats
                .caches
                .subdirs_fetched_ahead
                .fetch_add(1, Relaxed);
        }
    }

    /// The file and attributes of each entry listed in directory `ino`, in order. An
    /// entry listed with its attributes costs nothing (its node is walked when needed); so
    /// does a name whose known node has the listed qid and attributes that may be reused
    /// (see `crate::known::listed_attrs`); the others are fetched together.
    fn resolve_batch(
        &self,
        ino: INodeNo,
        dir: &Arc<FidRef>,
        listed: &[&Listed],
        ticket: Option<crate::known::replica::Ticket>,
    ) -> Vec<ListedEntry> {
        let ttl = self.entry_ttl();
        let fetched = self.known.listed.before_fetch();
        let mut out: Vec<Option<ListedEntry>> = Vec::with_capacity(listed.len());
        let (mut ask, mut names, mut qids, mut expected) = (vec![], vec![], vec![], vec![]);
        for (i, Listed { entry: e, attr }) in listed.iter().enumerate() {
            if let Some(a) = attr {
                out.push(Some(ListedEntry {
                    found: Found::Listed(a.clone()),
                    fetched: None,
                    ttl,
                }));
                continue;
            }
            let known = self.known.inodes.expected_listed(ino.0, &e.name);
            if let Some((fid, path, Some(kept))) = &known {
                let (a, at) = &**kept;
                let left = self.known.listed.reusable_for(*path, at, self.attr_ttl());
                if let (true, Some(left)) = (*path == e.qid.path, left) {
                    self.stats.caches.listed_attrs_reused.fetch_add(1, Relaxed);
                    out.push(Some(ListedEntry {
                        found: Found::Walked(Ok((fid.clone(), a.clone()))),
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
                found: Found::Walked(found),
                fetched: Some(fetched),
                ttl,
            });
        }
        let _ = ticket;
        out.into_iter().flatten().collect()
    }
}

/// How a listed name was resolved.
enum Found {
    /// Walked (or reused from an earlier walk): a fid and the attributes, or the error.
    Walked(crate::remote::Resolved),
    /// The listing carried the attributes: a node is made without a walk.
    Listed(Arc<crossfs_wire::Rgetattr>),
}

/// One listed name, resolved.
struct ListedEntry {
    found: Found,
    /// When its attributes were fetched, if they may be reused.
    fetched: Option<Fetched>,
    /// How long the kernel may trust the entry and its attributes.
    ttl: Duration,
}

impl MountState {
    /// Starts the thread that lists directories through `mountpoint` so that the kernel
    /// holds their names (see `crate::ahead::primed_dirs`); it ends with the mount.
    pub(crate) fn start_dir_priming(self: &Arc<Self>, mountpoint: std::path::PathBuf) {
        self.start_helper(
            "crossfs-prime",
            &self.ahead.dirs_to_prime,
            move |shared, dir| {
                let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
                shared.ahead.priming_tid.store(tid, Relaxed);
                if let Err(e) = shared.prime_dir(&mountpoint, dir) {
                    tracing::debug!(dir, "directory not listed ahead: {e}");
                }
            },
        );
    }

    /// Whether a request comes from the thread that lists directories ahead.
    pub(super) fn is_priming(&self, pid: u32) -> bool {
        pid != 0 && self.ahead.priming_tid.load(Relaxed) == pid
    }

    /// A LOOKUP in `dir` was answered from its replica: lists the directory ahead if that
    /// makes it time to (`crate::ahead::primed_dirs`).
    pub(super) fn looked_up_in_replica(&self, dir: u64) {
        if let Some(tx) = self.ahead.dirs_to_prime.get() {
            if self.ahead.dir_priming.looked_up(dir) {
                let _ = tx.try_send(dir);
            }
        }
    }

    /// Lists directory `dir` through the mount point, from where its node was found, if
    /// its replica is small enough: the kernel's READDIRPLUS, answered from the replica,
    /// leaves it holding every name.
    fn prime_dir(&self, mountpoint: &std::path::Path, dir: u64) -> std::io::Result<()> {
        use rustix::fs::OFlags;
        let entries = self.known.replicas.entries(dir);
        if entries.is_none_or(|n| n > crate::ahead::primed_dirs::MAX_ENTRIES) {
            return Ok(());
        }
        let Some(rel) = self.path_beneath(dir) else {
            return Ok(()); // forgotten meanwhile
        };
        let fd = open_beneath(mountpoint, &rel, OFlags::RDONLY | OFlags::DIRECTORY)?;
        if rustix::fs::fstat(&fd)?.st_ino != dir {
            return Ok(()); // renamed meanwhile: another directory is there now
        }
        // The kernel asks for attributes (READDIRPLUS) at the start of a listing and after
        // a lookup in the directory, or a first look at a name a READDIRPLUS gave it (its
        // readdirplus "auto" mode); else plain READDIR, which gives it no names. So each
        // getdents, smaller than what one READDIRPLUS brings, is followed by a stat of the
        // last name it returned (one the kernel held before gives no such look: the few
        // looked up already rarely end a buffer), which makes the next request one with
        // attributes.
        let mut buf = vec![std::mem::MaybeUninit::uninit(); 8 * 1024];
        let mut entries = rustix::fs::RawDir::new(&fd, &mut buf);
        let mut last: Option<std::ffi::CString> = None;
        while let Some(entry) = entries.next() {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_bytes() != b"." && name.to_bytes() != b".." {
                last = Some(name.to_owned());
            }
            if let (true, Some(name)) = (entries.is_buffer_empty(), &last) {
                let _ =
                    rustix::fs::statat(&fd, name.as_c_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW);
            }
        }
        self.stats
            .caches
            .dirs_primed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

impl MountState {
    /// Node `ino`'s path beneath the mount point, from where each node on the way was
    /// found ("." for the root); `None` if one of them was forgotten.
    pub(super) fn path_beneath(&self, ino: u64) -> Option<std::path::PathBuf> {
        let mut names = Vec::new();
        let mut at = ino;
        while at != crate::known::inode::ROOT {
            let (parent, name) = self.known.inodes.found_in(at)?;
            names.push(name);
            at = parent;
            if names.len() > 4096 {
                return None;
            }
        }
        Some(match names.is_empty() {
            true => ".".into(),
            false => names.iter().rev().map(|n| OsStr::from_bytes(n)).collect(),
        })
    }
}

/// Opens `rel` beneath `mountpoint` with `flags`, through no link: a name the host just
/// replaced by a link leads nowhere else.
pub(super) fn open_beneath(
    mountpoint: &std::path::Path,
    rel: &std::path::Path,
    flags: rustix::fs::OFlags,
) -> std::io::Result<rustix::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let root = rustix::fs::open(
        mountpoint,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(rustix::fs::openat2(
        &root,
        rel,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV,
    )?)
}
