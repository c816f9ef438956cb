//! The inode table: FUSE node ids, the fid behind each, and the kernel's lookup counts.
//!
//! Node ids are our own, handed out in order from 2 (1 is the export root); `st_ino` as seen
//! through the mount is this id. Files are recognised by `qid.path`, so hard links and
//! repeated lookups share one node id and the kernel keeps one page cache per file.
//!
//! This file answers what is known of a node; `names.rs` records files found and the
//! names they were found by. What this must not do: send anything (the fids it holds are
//! walked by the callers), or tell the kernel anything.

mod names;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crossfs_wire::{Fid, Qid, Rgetattr};

use crate::attr::DataStamp;
use crate::fid::FidRef;
use crate::known::listed_attrs::Fetched;

/// The root's node id (FUSE_ROOT_ID).
pub(crate) const ROOT: u64 = 1;

/// The `qid_path` of a placeholder node (see [`InodeTable::placeholder`]): no file has it.
const PLACEHOLDER: u64 = u64::MAX;

/// The first `qid.path` given to files created behind before the server made them (see
/// [`InodeTable::unmade_path`]): above every `qid.path` a crossfs server gives (inode
/// numbers, with a device's index from bit 48 for files on other devices).
const UNMADE_PATHS: u64 = 0xffff_0000_0000_0000;

/// Whether `qid_path` is one of [`InodeTable::unmade_path`]'s.
pub(crate) fn is_unmade(qid_path: u64) -> bool {
    qid_path & UNMADE_PATHS == UNMADE_PATHS
}

/// Statuses a node remembers from before its newest (see `Inode::passed`).
const PASSED_STATUSES: usize = 3;

/// A file's attributes as a change event shows them (`crossfs_events::Attrs`): what tells
/// the echo of the mount's own change from a later change on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Status {
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl Status {
    pub(crate) fn of(a: &Rgetattr) -> Status {
        let ns = |s: u64, n: u64| {
            (s as i64)
                .saturating_mul(1_000_000_000)
                .saturating_add(n as i64)
        };
        Status {
            mode: a.mode,
            size: a.size,
            mtime_ns: ns(a.mtime_sec, a.mtime_nsec),
            ctime_ns: ns(a.ctime_sec, a.ctime_nsec),
        }
    }

    /// The state a change event shows.
    pub(crate) fn of_event(a: &crossfs_events::Attrs) -> Status {
        Status {
            mode: a.mode,
            size: a.size,
            mtime_ns: a.mtime_ns,
            ctime_ns: a.ctime_ns,
        }
    }
}

struct Inode {
    /// An unopened fid for the file: the base of walks, getattr, setattr, xattrs, opens.
    /// `None` for a node answered from a directory replica: walked from `origin` when
    /// first needed (see [`NodeFid::Lazy`]).
    fid: Option<Arc<FidRef>>,
    /// Where the node was last found: its directory's node and its name there (a node
    /// without a fid is walked from there when needed).
    origin: Option<(u64, Vec<u8>)>,
    /// The kernel found the node under another name than `origin` too (a hard link, or
    /// a name it had before the host renamed it), and may still hold that name.
    named_twice: bool,
    qid_path: u64,
    /// `S_IFMT` bits: a qid.path reused by a file of another type is another file.
    format: u32,
    /// Entries the kernel holds (each lookup reply adds one, FORGET takes them back).
    nlookup: u64,
    /// The newest attributes seen from the server.
    seen: Option<DataStamp>,
    /// The same attributes, as a change event shows a file (see [`Status`]).
    status: Option<Status>,
    /// The statuses seen before `status`, newest first: a change event may report a state
    /// the mount has already gone past (the echo of a create, flushed before the write
    /// that followed it reached the host), and must not count as a change on the host.
    passed: [Option<Status>; PASSED_STATUSES],
    /// The attributes seen when the file was last opened.
    opened: Option<DataStamp>,
    /// The newest attributes fetched, for a READDIRPLUS to reuse (see `crate::known::listed_attrs`).
    listed: Option<FetchedAttrs>,
    /// `fid` is not bound on the server (it could not be bound again after a reconnect):
    /// the node answers ESTALE until a lookup finds its file and gives it a fresh fid.
    stale: bool,
}

impl Inode {
    /// Whether the node holds attributes asked for after those `fetched` describes: a
    /// reply overtaken by a later request's keeps none of its attributes (else a change
    /// event already applied, which this older reply predates, would be undone with no
    /// event to say so).
    fn has_newer(&self, fetched: Option<&Fetched>) -> bool {
        match (fetched, &self.listed) {
            (Some(new), Some(kept)) => new.asked_before(&kept.1),
            _ => false,
        }
    }

    /// The node was found as `name` in directory `dir`: walked from there when needed.
    fn found_as(&mut self, dir: u64, name: &[u8]) {
        if self.origin.is_some() && !self.found_at(dir, name) {
            self.named_twice = true;
        }
        self.origin = Some((dir, name.to_vec()));
    }

    /// Whether `a`, of a symbolic link with this node's number, is another link than the
    /// node's (the host removed the link and gave its number to a new one while the
    /// kernel still held the node): a link's modification time is its creation's, and the
    /// kernel keeps a link's target with its node (`FUSE_CACHE_SYMLINKS`), which nothing
    /// would tell it to drop. The new link gets a node of its own. Regular files and
    /// directories need no such care: the kernel drops their cached pages and listings
    /// when their times change.
    fn another_link(&self, a: &Rgetattr) -> bool {
        let mtime_ns = |s: Status| s.mtime_ns;
        self.format == libc::S_IFLNK
            && self
                .status
                .map(mtime_ns)
                .is_some_and(|m| m != Status::of(a).mtime_ns)
    }

    /// Whether the node is walked from `name` in directory `dir`.
    fn found_at(&self, dir: u64, name: &[u8]) -> bool {
        self.origin
            .as_ref()
            .is_some_and(|(d, n)| *d == dir && n == name)
    }
}

#[derive(Default)]
struct Inner {
    by_ino: HashMap<u64, Inode>,
    by_path: HashMap<u64, u64>,
    /// The entries of `by_path` whose node id is not the `qid.path` (the root, spare ids):
    /// few, so a listing's thousands of entries are mapped without hashing into `by_path`.
    spared: HashMap<u64, u64>,
    /// Directory node -> name -> the node that name last led to. Only a hint, checked
    /// against the server's answer (see `remote::resolve`); entries of forgotten nodes
    /// linger until the table is cleared at [`NAMES_LIMIT`].
    names: HashMap<u64, HashMap<Vec<u8>, u64>>,
    name_count: usize,
    /// Names the kernel may still hold were forgotten (see [`InodeTable::name`]).
    names_lost: bool,
    /// The next node id for a file whose own inode number is taken (see
    /// [`InodeTable::insert`]), counting down from the top of the range.
    next_spare: u64,
    /// The next `qid.path` for a file created behind (see [`InodeTable::unmade_path`]).
    next_unmade: u64,
    /// Nodes the kernel forgot that stay while changes of theirs are unanswered (see
    /// [`InodeTable::forget_unless`]).
    kept_for_changes: std::collections::HashSet<u64>,
}

/// How a file being remembered was reached.
enum Found {
    /// By a walk: this fid names it.
    Walked(Arc<FidRef>),
    /// In a listing or a directory replica: as this name in this directory node.
    Listed(u64, Vec<u8>),
}

/// A name the kernel may hold, as [`InodeTable::subtree`] lists it.
pub(crate) struct KnownName {
    pub dir: u64,
    pub name: Vec<u8>,
    pub ino: u64,
    pub qid_path: u64,
    /// `S_IFMT` bits.
    pub format: u32,
}

/// A node's newest attributes and when they were fetched (see `crate::known::listed_attrs`).
pub(crate) type FetchedAttrs = Box<(Rgetattr, Fetched)>;

/// Node id -> its fid and `qid.path`.
pub(crate) type NodeFids = HashMap<u64, (Fid, u64)>;

/// What [`InodeTable::snapshot`] returns: the nodes with fids, those without (node and
/// `qid.path`), and the names (directory, name, node).
pub(crate) type Snapshot = (NodeFids, Vec<(u64, u64)>, Vec<(u64, Vec<u8>, u64)>);

/// How to reach a node's file on the server.
pub(crate) enum NodeFid {
    /// Through its fid.
    Bound(Arc<FidRef>),
    /// Not walked yet: walk `name` from directory node `dir_ino`'s fid, and check that it
    /// reaches `qid_path`.
    Lazy {
        dir_ino: u64,
        name: Vec<u8>,
        qid_path: u64,
    },
}

/// The table locked for [`InodeTable::by_path`].
pub(crate) struct ByPath<'a>(MutexGuard<'a, Inner>);

impl ByPath<'_> {
    /// The node id already given to the file with this `qid.path`, if any.
    pub(crate) fn ino_of(&self, qid_path: u64) -> Option<u64> {
        self.0.by_path.get(&qid_path).copied()
    }

    /// The node id of the file with this `qid.path` if it has one, else the id it would
    /// get if free (the `qid.path`): what a listing shows as `d_ino`.
    pub(crate) fn ino_or_own(&self, qid_path: u64) -> u64 {
        self.0.spared.get(&qid_path).copied().unwrap_or(qid_path)
    }
}

impl Inner {
    fn map_path(&mut self, qid_path: u64, ino: u64) {
        if let Some(old) = self.by_path.insert(qid_path, ino) {
            if old != qid_path {
                self.spared.remove(&qid_path);
            }
        }
        if ino != qid_path {
            self.spared.insert(qid_path, ino);
        }
    }

    /// Forgets that `qid_path` leads to node `ino`, if it still does.
    fn unmap_path(&mut self, qid_path: u64, ino: u64) {
        if self.by_path.get(&qid_path) == Some(&ino) {
            self.by_path.remove(&qid_path);
            self.spared.remove(&qid_path);
        }
    }
}

/// Remembered (directory, name) pairs after which all are forgotten.
const NAMES_LIMIT: usize = 1 << 20;

/// Node id <-> fid, deduplicated by `qid.path`, with lookup counts.
pub(crate) struct InodeTable {
    inner: Mutex<Inner>,
}

impl InodeTable {
    /// A table holding the export root as node 1.
    pub(crate) fn new(root: Arc<FidRef>, root_qid: Qid) -> Self {
        let mut inner = Inner {
            next_spare: PLACEHOLDER - 1,
            ..Inner::default()
        };
        inner.by_ino.insert(
            ROOT,
            Inode {
                fid: Some(root),
                origin: None,
                named_twice: false,
                qid_path: root_qid.path,
                format: libc::S_IFDIR,
                nlookup: 1,
                seen: None,
                status: None,
                passed: [None; PASSED_STATUSES],
                opened: None,
                listed: None,
                stale: false,
            },
        );
        inner.map_path(root_qid.path, ROOT);
        InodeTable {
            inner: Mutex::new(inner),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::sync::lock(&self.inner)
    }

    /// The fid of node `ino`, if the kernel still holds it and it has one.
    pub(crate) fn fid(&self, ino: u64) -> Option<Arc<FidRef>> {
        let inner = self.lock();
        let node = inner.by_ino.get(&ino)?;
        if node.stale {
            return None;
        }
        node.fid.clone()
    }

    /// How to reach node `ino`'s file: its fid, or where to walk from (see
    /// [`NodeFid::Lazy`]); `None` if the kernel no longer holds it or it is stale.
    pub(crate) fn node_fid(&self, ino: u64) -> Option<NodeFid> {
        let inner = self.lock();
        let node = inner.by_ino.get(&ino).filter(|n| !n.stale)?;
        match (&node.fid, &node.origin) {
            (Some(fid), _) => Some(NodeFid::Bound(fid.clone())),
            (None, Some((dir_ino, name))) => Some(NodeFid::Lazy {
                dir_ino: *dir_ino,
                name: name.clone(),
                qid_path: node.qid_path,
            }),
            (None, None) => None,
        }
    }

    /// Gives lazy node `ino` the fid just walked for it, and returns the node's fid (the
    /// one another thread bound first, if one did; that walk's fid is then dropped).
    pub(crate) fn bind(&self, ino: u64, fid: Arc<FidRef>) -> Arc<FidRef> {
        let mut inner = self.lock();
        let Some(node) = inner.by_ino.get_mut(&ino) else {
            return fid;
        };
        if let Some(bound) = &node.fid {
            return bound.clone();
        }
        node.fid = Some(fid.clone());
        fid
    }

    /// Where node `ino` was last found, fid or not: its directory's node and its name.
    pub(crate) fn found_in(&self, ino: u64) -> Option<(u64, Vec<u8>)> {
        self.lock().by_ino.get(&ino)?.origin.clone()
    }

    /// The `qid.path` of node `ino`'s file, if the kernel still holds it.
    pub(crate) fn qid_path(&self, ino: u64) -> Option<u64> {
        self.lock().by_ino.get(&ino).map(|node| node.qid_path)
    }

    /// The node id already given to the file with this `qid.path`, if any.
    pub(crate) fn ino_of(&self, qid_path: u64) -> Option<u64> {
        self.by_path().ino_of(qid_path)
    }

    /// [`InodeTable::ino_of`] for many files under one lock (a listing's entries): hold
    /// it only while nothing waits for the server.
    pub(crate) fn by_path(&self) -> ByPath<'_> {
        ByPath(self.lock())
    }

    /// The node `name` in directory `parent` last led to, if the kernel still holds it:
    /// its fid and `qid.path`.
    pub(crate) fn expected(&self, parent: u64, name: &[u8]) -> Option<(Arc<FidRef>, u64)> {
        self.with_known(parent, name, |node, fid| (fid.clone(), node.qid_path))
    }

    /// The `qid.path` and type (`S_IFMT` bits) of the file `name` in `parent` last led the
    /// kernel to, fid or not
    /// (a node a replica answered for has none yet): what an event about the name may
    /// have made stale.
    pub(crate) fn named(&self, parent: u64, name: &[u8]) -> Option<(u64, u32)> {
        let inner = self.lock();
        let ino = inner.names.get(&parent)?.get(name)?;
        inner
            .by_ino
            .get(ino)
            .map(|node| (node.qid_path, node.format))
    }

    /// As [`InodeTable::expected`], with the node's newest fetched attributes, if kept.
    pub(crate) fn expected_listed(
        &self,
        parent: u64,
        name: &[u8],
    ) -> Option<(Arc<FidRef>, u64, Option<FetchedAttrs>)> {
        self.with_known(parent, name, |node, fid| {
            (fid.clone(), node.qid_path, node.listed.clone())
        })
    }

    /// `f` of the node `name` in `parent` leads to, if it is bound (not stale, with a fid).
    fn with_known<T>(
        &self,
        parent: u64,
        name: &[u8],
        f: impl FnOnce(&Inode, &Arc<FidRef>) -> T,
    ) -> Option<T> {
        let inner = self.lock();
        let ino = inner.names.get(&parent)?.get(name)?;
        let node = inner.by_ino.get(ino).filter(|node| !node.stale)?;
        Some(f(node, node.fid.as_ref()?))
    }

    /// The node `name` in directory `parent` last led to, if the kernel still holds it.
    pub(crate) fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
        let inner = self.lock();
        let ino = *inner.names.get(&parent)?.get(name)?;
        inner.by_ino.contains_key(&ino).then_some(ino)
    }

    /// Every name known beneath `dir`, breadth first: what a rescan of `dir` must check.
    pub(crate) fn subtree(&self, dir: u64) -> Vec<KnownName> {
        let inner = self.lock();
        let mut found = Vec::new();
        let mut queue = std::collections::VecDeque::from([dir]);
        let mut seen = std::collections::HashSet::from([dir]);
        while let Some(d) = queue.pop_front() {
            let Some(names) = inner.names.get(&d) else {
                continue;
            };
            for (name, &ino) in names {
                let Some(node) = inner.by_ino.get(&ino) else {
                    continue;
                };
                if seen.insert(ino) {
                    queue.push_back(ino);
                }
                found.push(KnownName {
                    dir: d,
                    name: name.clone(),
                    ino,
                    qid_path: node.qid_path,
                    format: node.format,
                });
            }
        }
        found
    }

    /// A node for a name whose file is already gone from the server, so that a replayed
    /// removal (see `crate::changes`) has something for the kernel to remove. It borrows
    /// `fid` (its directory's) and is reachable by no qid; the kernel forgets it once the
    /// removal is answered.
    pub(crate) fn placeholder(
        &self,
        (parent, name): (u64, &[u8]),
        fid: Arc<FidRef>,
        format: u32,
    ) -> u64 {
        let mut inner = self.lock();
        let ino = Self::insert(&mut inner, Some(fid), PLACEHOLDER, format, None);
        Self::name(&mut inner, parent, name, ino);
        ino
    }

    /// A node for a file made through the mount and gone from the server before the mount
    /// could look it up (another client removed or renamed it at once): the kernel gets
    /// the creation it asked for, and the node, with no fid and no name, answers ESTALE,
    /// which makes the kernel look the name up again and find it gone.
    pub(crate) fn gone(&self, format: u32) -> u64 {
        Self::insert(&mut self.lock(), None, PLACEHOLDER, format, None)
    }

    /// Lets the next lookup of node `ino`'s file make a new node (the kernel then makes a
    /// new inode, taking the server's attributes whole); `ino` lives on for open files until
    /// the kernel forgets it.
    pub(crate) fn retire(&self, ino: u64) {
        let mut inner = self.lock();
        let Some(path) = inner.by_ino.get(&ino).map(|n| n.qid_path) else {
            return;
        };
        inner.unmap_path(path, ino);
    }

    /// Gives the node of `qid_path`, if known, a fresher fid for the same file.
    pub(crate) fn refresh(&self, qid_path: u64, fid: Arc<FidRef>) {
        let mut inner = self.lock();
        if let Some(ino) = inner.by_path.get(&qid_path).copied() {
            if let Some(node) = inner.by_ino.get_mut(&ino) {
                if ino != ROOT {
                    let old = node.fid.replace(fid);
                    node.origin = None;
                    node.stale = false;
                    drop(inner);
                    drop(old); // the older fid, clunked outside the lock
                    return;
                }
            }
        }
        drop(inner);
        drop(fid); // the unused one, clunked outside the lock
    }

    /// The kernel dropped `n` of its references to `ino`; at zero the node goes (and this
    /// returns true).
    pub(crate) fn forget(&self, ino: u64, n: u64) -> bool {
        self.forget_unless(ino, n, |_| false)
    }

    /// [`Self::forget`], except that a node `keep` says is still needed stays, without
    /// the kernel's references, until [`Self::release`] (a node whose changes sent behind
    /// are unanswered: a reconnect binds their fids again through it, `crate::restore`).
    /// `keep` runs under the table's lock.
    pub(crate) fn forget_unless(&self, ino: u64, n: u64, keep: impl FnOnce(u64) -> bool) -> bool {
        if ino == ROOT {
            return false;
        }
        let mut inner = self.lock();
        let Some(node) = inner.by_ino.get_mut(&ino) else {
            return false;
        };
        node.nlookup = node.nlookup.saturating_sub(n);
        if node.nlookup > 0 {
            return false;
        }
        if keep(ino) {
            inner.kept_for_changes.insert(ino);
            return false;
        }
        let path = node.qid_path;
        inner.kept_for_changes.remove(&ino);
        let gone = inner.by_ino.remove(&ino);
        inner.unmap_path(path, ino);
        drop(inner);
        drop(gone); // its fid is clunked outside the lock
        true
    }

    /// Node `ino`, if the kernel forgot it and [`Self::forget_unless`] kept it, goes now
    /// unless `keep` still says otherwise; returns whether it went.
    pub(crate) fn release(&self, ino: u64, keep: impl FnOnce(u64) -> bool) -> bool {
        let kept = self.lock().kept_for_changes.contains(&ino);
        kept && self.forget_unless(ino, 0, keep)
    }

    /// Notes attributes fresh from the server (`fetched`: as for [`InodeTable::remember`]).
    pub(crate) fn observe(&self, ino: u64, a: &Rgetattr, fetched: Option<Fetched>) {
        if let Some(node) = self.lock().by_ino.get_mut(&ino) {
            if node.has_newer(fetched.as_ref()) {
                return;
            }
            node.seen = Some(crate::attr::stamp(a));
            let status = Status::of(a);
            if node.status.is_some_and(|s| s != status) {
                node.passed.rotate_right(1);
                node.passed[0] = node.status;
            }
            node.status = Some(status);
            if node.qid_path == a.qid.path {
                node.listed = fetched.map(|f| Box::new((a.clone(), f)));
            }
        }
    }

    /// The group that files created in directory `ino` take from it, if it is
    /// set-group-ID as last seen (as Linux's v9fs decides, from its cached attributes).
    pub(crate) fn setgid_group(&self, ino: u64) -> Option<u32> {
        self.lock().by_ino.get(&ino)?.seen?.setgid_group
    }

    /// Node `ino`'s newest fetched attributes and when they were fetched, if kept.
    pub(crate) fn fetched_attrs(&self, ino: u64) -> Option<FetchedAttrs> {
        self.lock().by_ino.get(&ino)?.listed.clone()
    }

    /// Node `ino`'s attributes as last seen from the server, as an event shows them.
    pub(crate) fn status(&self, ino: u64) -> Option<Status> {
        self.lock().by_ino.get(&ino)?.status
    }

    /// Whether a change event showing node `ino`'s file as `shown` reports what the mount
    /// has seen of it: its newest status (change time compared only if `ctime`), or one
    /// it went past since (change time and all: a state the host's file held before what
    /// the mount saw last, so the event is late, not news; the change time, which nobody
    /// can set back, tells it from a later change that restored the rest).
    pub(crate) fn has_seen(&self, ino: u64, shown: Status, ctime: bool) -> bool {
        let inner = self.lock();
        let Some(node) = inner.by_ino.get(&ino) else {
            return false;
        };
        let same =
            |s: &Status| (s.mode, s.size, s.mtime_ns) == (shown.mode, shown.size, shown.mtime_ns);
        node.status
            .is_some_and(|s| same(&s) && (!ctime || s.ctime_ns == shown.ctime_ns))
            || node.passed.iter().flatten().any(|s| *s == shown)
    }

    /// Whether the kernel found node `ino` under more than one name (see
    /// `Inode::named_twice`).
    pub(crate) fn named_twice(&self, ino: u64) -> bool {
        self.lock().by_ino.get(&ino).is_some_and(|n| n.named_twice)
    }

    /// The kernel is about to get node `ino`'s content as of attributes `stamp`
    /// (`crate::ahead::pushed_pages`): true if those are the attributes last seen (the kernel's),
    /// and then its next open keeps the pages, as a reopen of an unchanged file does.
    pub(crate) fn pages_pushed(&self, ino: u64, stamp: DataStamp) -> bool {
        let mut inner = self.lock();
        match inner.by_ino.get_mut(&ino) {
            Some(node) if node.seen == Some(stamp) => {
                node.opened = Some(stamp);
                true
            }
            _ => false,
        }
    }

    /// Whether node `ino` is, as last seen, a regular file anyone may read.
    pub(crate) fn readable_by_anyone(&self, ino: u64) -> bool {
        let inner = self.lock();
        let node = inner.by_ino.get(&ino);
        node.and_then(|n| n.seen)
            .is_some_and(|s| s.readable_by_anyone)
    }

    /// For `auto` mode: true if the file looks unchanged since its previous open (so the
    /// kernel may keep its cached pages), and remembers the current state for the next.
    pub(crate) fn reopen_unchanged(&self, ino: u64) -> bool {
        let mut inner = self.lock();
        let Some(node) = inner.by_ino.get_mut(&ino) else {
            return false;
        };
        let unchanged = node.seen.is_some() && node.opened == node.seen;
        node.opened = node.seen;
        unchanged
    }

    /// Every node's fid and `qid.path`, the nodes without a fid (answered from a replica:
    /// node and `qid.path`), and every name known to lead to a node (directory, name,
    /// node), or, for a node none leads to, where it was last found: what binding the fids
    /// again on a new connection needs (see `crate::restore`). Placeholders, which borrow their directory's fid, are left out.
    pub(crate) fn snapshot(&self) -> Snapshot {
        let inner = self.lock();
        let real = inner
            .by_ino
            .iter()
            .filter(|(_, node)| node.qid_path != PLACEHOLDER);
        let nodes: NodeFids = real
            .clone()
            .filter_map(|(&ino, node)| Some((ino, (node.fid.as_ref()?.fid(), node.qid_path))))
            .collect();
        let lazy: Vec<(u64, u64)> = real
            .clone()
            .filter(|(_, node)| node.fid.is_none())
            .map(|(&ino, node)| (ino, node.qid_path))
            .collect();
        let mut names: Vec<(u64, Vec<u8>, u64)> = inner
            .names
            .iter()
            .flat_map(|(&dir, names)| names.iter().map(move |(n, &ino)| (dir, n.clone(), ino)))
            .filter(|(_, _, ino)| inner.by_ino.contains_key(ino))
            .collect();
        // A node no known name leads to any more (retired for a newer node of its file,
        // or its entry dropped) may still be open: it is tried where it was last found.
        let named: HashSet<u64> = names.iter().map(|&(_, _, ino)| ino).collect();
        names.extend(
            real.filter(|(ino, _)| !named.contains(ino))
                .filter_map(|(&ino, node)| {
                    let (dir, name) = node.origin.as_ref()?;
                    Some((*dir, name.clone(), ino))
                }),
        );
        (nodes, lazy, names)
    }

    /// A `qid.path` for a file created behind until the server has made it: no file on the
    /// server has it, and the node is found by it until [`InodeTable::made`].
    pub(crate) fn unmade_path(&self) -> u64 {
        let mut inner = self.lock();
        let path = UNMADE_PATHS | (inner.next_unmade & !UNMADE_PATHS);
        inner.next_unmade = inner.next_unmade.wrapping_add(1);
        path
    }

    /// The server made node `ino`'s file, created behind with `qid.path` `unmade`: the
    /// node is found by the file's own from now on.
    pub(crate) fn made(&self, ino: u64, unmade: u64, made: &Rgetattr) {
        let mut inner = self.lock();
        let Some(node) = inner.by_ino.get_mut(&ino).filter(|n| n.qid_path == unmade) else {
            return;
        };
        node.qid_path = made.qid.path;
        inner.unmap_path(unmade, ino);
        inner.map_path(made.qid.path, ino);
    }

    /// The server refused the change sent behind that was to bind node `ino`'s fid (the
    /// create of its file, or the removal that was to bind it first): the node answers
    /// ESTALE, and is found by no `qid.path` (the next lookup of its file makes a new one).
    pub(crate) fn never_bound(&self, ino: u64) {
        let mut inner = self.lock();
        let Some(node) = inner.by_ino.get_mut(&ino) else {
            return;
        };
        node.stale = true;
        let path = node.qid_path;
        inner.unmap_path(path, ino);
    }

    /// Marks every node but those in `bound` or `unmade` (and the root) stale: their fids
    /// were not bound again on a new connection (those of files created behind and not
    /// yet made are bound by their create, sent again).
    pub(crate) fn mark_stale_except(&self, bound: &NodeFids, unmade: &HashSet<u64>) -> usize {
        let mut inner = self.lock();
        let mut stale = 0;
        for (ino, node) in inner.by_ino.iter_mut() {
            // A node without a fid is walked from its directory's when needed; if that
            // one was not bound again, the walk fails and the node answers ESTALE then.
            let lazy = node.fid.is_none();
            let kept = bound.contains_key(ino) || unmade.contains(ino);
            if *ino != ROOT && node.qid_path != PLACEHOLDER && !lazy && !kept {
                node.stale = true;
                stale += 1;
            }
        }
        stale
    }

    /// Whether names the kernel may still hold were forgotten since the last call: change
    /// events can no longer reach them, so nothing may be kept long from then on.
    pub(crate) fn take_names_lost(&self) -> bool {
        std::mem::take(&mut self.lock().names_lost)
    }

    /// Nodes currently known (the root included).
    pub(crate) fn len(&self) -> usize {
        self.lock().by_ino.len()
    }
}

#[cfg(test)]
mod tests;
