//! The inode table: FUSE node ids, the fid behind each, and the kernel's lookup counts.
//!
//! Node ids are our own, handed out in order from 2 (1 is the export root); `st_ino` as seen
//! through the mount is this id. Files are recognised by `qid.path`, so hard links and
//! repeated lookups share one node id and the kernel keeps one page cache per file.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crossfs_wire::{Fid, Qid, Rgetattr};

use crate::attr::DataStamp;
use crate::fid::FidRef;
use crate::known::listed_attrs::Fetched;

/// The root's node id (FUSE_ROOT_ID).
pub(crate) const ROOT: u64 = 1;

/// The `qid_path` of a placeholder node (see [`InodeTable::placeholder`]): no file has it.
const PLACEHOLDER: u64 = u64::MAX;

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
    /// The attributes seen when the file was last opened.
    opened: Option<DataStamp>,
    /// The newest attributes fetched, for a READDIRPLUS to reuse (see `crate::known::listed_attrs`).
    listed: Option<FetchedAttrs>,
    /// `fid` is not bound on the server (it could not be bound again after a reconnect):
    /// the node answers ESTALE until a lookup finds its file and gives it a fresh fid.
    stale: bool,
}

impl Inode {
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

    /// Notes that `name` in directory `parent` leads to node `ino`. At [`NAMES_LIMIT`],
    /// names of nodes the kernel forgot are dropped first; if that is not enough, all are,
    /// and [`InodeTable::take_names_lost`] says so once.
    fn name(inner: &mut Inner, parent: u64, name: &[u8], ino: u64) {
        if inner.name_count >= NAMES_LIMIT {
            let Inner { names, by_ino, .. } = &mut *inner;
            names.retain(|dir, entries| {
                entries.retain(|_, node| by_ino.contains_key(node));
                by_ino.contains_key(dir) && !entries.is_empty()
            });
            inner.name_count = inner.names.values().map(HashMap::len).sum();
            if inner.name_count >= NAMES_LIMIT / 2 {
                inner.names.clear();
                inner.name_count = 0;
                inner.names_lost = true;
            }
        }
        let dir = inner.names.entry(parent).or_default();
        if let Some(old) = dir.get_mut(name) {
            *old = ino;
        } else {
            dir.insert(name.to_vec(), ino);
            inner.name_count += 1;
        }
    }

    /// Records one lookup of the file behind `fid`, reached as `name` in `parent`, and
    /// returns its node id.
    ///
    /// A file already known keeps its node id and takes the fresher fid (the old one is
    /// clunked once its last request is answered): a fid walked just now names the file
    /// by its current path on servers that track paths.
    ///
    /// `fetched`: when `a` was fetched, if it may be reused (see `crate::known::listed_attrs`).
    pub(crate) fn remember(
        &self,
        (parent, name): (u64, &[u8]),
        fid: Arc<FidRef>,
        a: &Rgetattr,
        fetched: Option<Fetched>,
    ) -> u64 {
        let mut inner = self.lock();
        let (ino, unused) = Self::remember_locked(&mut inner, fid, a, fetched);
        Self::name(&mut inner, parent, name, ino);
        if let Some(node) = inner.by_ino.get_mut(&ino).filter(|_| ino != ROOT) {
            node.found_as(parent, name);
        }
        drop(inner);
        // Dropping a fid may send its Tclunk, which can wait for the socket; never under the
        // table's lock, which the client's reader thread takes to finish a GETATTR.
        drop(unused);
        ino
    }

    /// Returns the node id and the fid no longer needed, to drop once the lock is released.
    fn remember_locked(
        inner: &mut Inner,
        fid: Arc<FidRef>,
        a: &Rgetattr,
        fetched: Option<Fetched>,
    ) -> (u64, Option<Arc<FidRef>>) {
        Self::remember_node(inner, Found::Walked(fid), a, fetched)
    }

    /// [`InodeTable::remember`] for a file a directory replica or a listing answered for: a
    /// node already known keeps its fid; a new one gets none until it is needed (see
    /// [`NodeFid::Lazy`]), walked then as `name` from `parent`.
    pub(crate) fn remember_lazy(
        &self,
        (parent, name): (u64, &[u8]),
        a: &Rgetattr,
        fetched: Option<Fetched>,
    ) -> u64 {
        let mut inner = self.lock();
        let (ino, unused) =
            Self::remember_node(&mut inner, Found::Listed(parent, name.to_vec()), a, fetched);
        Self::name(&mut inner, parent, name, ino);
        drop(inner);
        drop(unused);
        ino
    }

    fn remember_node(
        inner: &mut Inner,
        found: Found,
        a: &Rgetattr,
        fetched: Option<Fetched>,
    ) -> (u64, Option<Arc<FidRef>>) {
        let (qid, format, stamp) = (a.qid, a.mode & libc::S_IFMT, crate::attr::stamp(a));
        let listed = fetched.map(|f| Box::new((a.clone(), f)));
        if let Some(&ino) = inner.by_path.get(&qid.path) {
            if let Some(node) = inner.by_ino.get_mut(&ino) {
                if node.format == format && !node.another_link(a) {
                    node.nlookup += 1;
                    node.seen = Some(stamp);
                    node.status = Some(Status::of(a));
                    node.listed = listed;
                    let fid = match found {
                        Found::Walked(fid) => fid,
                        Found::Listed(dir_ino, name) => {
                            // A listed name: the node keeps the fid it has, unless that one
                            // is stale; one without is walked from where it was found last.
                            let mut unused = None;
                            if node.stale {
                                unused = node.fid.take();
                                node.stale = false;
                            }
                            if node.fid.is_none() {
                                node.found_as(dir_ino, &name);
                            }
                            return (ino, unused);
                        }
                    };
                    node.stale = false;
                    if ino == ROOT {
                        return (ino, Some(fid));
                    }
                    node.origin = None;
                    return (ino, node.fid.replace(fid));
                }
            }
        }
        let (fid, origin) = match found {
            Found::Walked(fid) => (Some(fid), None),
            Found::Listed(dir_ino, name) => (None, Some((dir_ino, name))),
        };
        let ino = Self::insert(inner, fid, qid.path, format, Some(stamp));
        if let Some(node) = inner.by_ino.get_mut(&ino) {
            node.origin = origin;
            node.status = Some(Status::of(a));
        }
        inner.map_path(qid.path, ino);
        if let Some(node) = inner.by_ino.get_mut(&ino) {
            node.listed = listed;
        }
        (ino, None)
    }

    /// A new node with one kernel reference.
    ///
    /// Its node id is the file's `qid.path` where that is free: FUSE shows the node id as
    /// the inode number (fuser's replies use one for the other), and crossfs's server and
    /// most others give the host's inode number as `qid.path`, so `st_ino` in the guest is
    /// the host's. A git index written on the host then matches the guest's `lstat` (git
    /// compares inode numbers), instead of making the guest's `git status` read every file.
    /// The root stays FUSE_ROOT_ID; a file whose number is taken (a node the kernel still
    /// holds for an earlier file of that number, or the root's 1) gets a spare id from the
    /// top of the range.
    fn insert(
        inner: &mut Inner,
        fid: Option<Arc<FidRef>>,
        qid_path: u64,
        format: u32,
        seen: Option<DataStamp>,
    ) -> u64 {
        let own = qid_path > ROOT && qid_path != PLACEHOLDER;
        let ino = if own && !inner.by_ino.contains_key(&qid_path) {
            qid_path
        } else {
            while inner.by_ino.contains_key(&inner.next_spare) {
                inner.next_spare -= 1;
            }
            inner.next_spare
        };
        inner.by_ino.insert(
            ino,
            Inode {
                fid,
                origin: None,
                named_twice: false,
                qid_path,
                format,
                nlookup: 1,
                seen,
                status: None,
                opened: None,
                listed: None,
                stale: false,
            },
        );
        ino
    }

    /// `name` in directory `parent` leads the kernel nowhere any more (the mount answered
    /// it missing, or dropped the kernel's entry): it is no longer anyone's expectation.
    pub(crate) fn forget_name(&self, parent: u64, name: &[u8]) {
        Self::unname(&mut self.lock(), parent, name);
    }

    /// Takes `name` out of directory `parent`'s known names; returns the node it led to.
    fn unname(inner: &mut Inner, parent: u64, name: &[u8]) -> Option<u64> {
        let dir = inner.names.get_mut(&parent)?;
        let ino = dir.remove(name)?;
        if dir.is_empty() {
            inner.names.remove(&parent);
        }
        inner.name_count -= 1;
        Some(ino)
    }

    /// A change through the mount removed `name` from directory `parent`: a node found
    /// there, without a fid, is found nowhere now (it answers ESTALE, which makes the
    /// kernel look a path up again, rather than being walked to a later file of that name).
    pub(crate) fn removed(&self, parent: u64, name: &[u8]) {
        let mut inner = self.lock();
        if let Some(ino) = Self::unname(&mut inner, parent, name) {
            Self::lose_origin(&mut inner, ino, (parent, name));
        }
    }

    /// A rename through the mount moved `from` to `to`: the node `from` led to is found
    /// as `to` from now on (one without a fid is walked from there: the kernel moved its
    /// entry, and open files of it read on), and the node `to` led to, replaced, is found
    /// nowhere.
    pub(crate) fn renamed(&self, from: (u64, &[u8]), to: (u64, &[u8])) {
        let mut inner = self.lock();
        let moved = Self::unname(&mut inner, from.0, from.1);
        if let Some(replaced) = Self::unname(&mut inner, to.0, to.1) {
            Self::lose_origin(&mut inner, replaced, to);
        }
        let Some(ino) = moved else {
            return;
        };
        Self::name(&mut inner, to.0, to.1, ino);
        Self::move_origin(&mut inner, ino, from, to);
    }

    /// The host renamed `from` to `to`, and the file was node `ino`'s: a node without a
    /// fid is walked from `to` from now on, so that its open files read on. The names the
    /// kernel holds are the feed's to drop.
    pub(crate) fn moved(&self, ino: u64, from: (u64, &[u8]), to: (u64, &[u8])) {
        Self::move_origin(&mut self.lock(), ino, from, to);
    }

    fn move_origin(inner: &mut Inner, ino: u64, from: (u64, &[u8]), to: (u64, &[u8])) {
        if let Some(node) = inner
            .by_ino
            .get_mut(&ino)
            .filter(|n| n.found_at(from.0, from.1))
        {
            node.origin = Some((to.0, to.1.to_vec()));
        }
    }

    fn lose_origin(inner: &mut Inner, ino: u64, (dir, name): (u64, &[u8])) {
        if let Some(node) = inner.by_ino.get_mut(&ino).filter(|n| n.found_at(dir, name)) {
            node.origin = None;
        }
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
        let path = node.qid_path;
        let gone = inner.by_ino.remove(&ino);
        inner.unmap_path(path, ino);
        drop(inner);
        drop(gone); // its fid is clunked outside the lock
        true
    }

    /// Notes attributes fresh from the server (`fetched`: as for [`InodeTable::remember`]).
    pub(crate) fn observe(&self, ino: u64, a: &Rgetattr, fetched: Option<Fetched>) {
        if let Some(node) = self.lock().by_ino.get_mut(&ino) {
            node.seen = Some(crate::attr::stamp(a));
            node.status = Some(Status::of(a));
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
    /// node): what binding the fids again on a new connection needs (see
    /// `crate::restore`). Placeholders, which borrow their directory's fid, are left out.
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
            .filter(|(_, node)| node.fid.is_none())
            .map(|(&ino, node)| (ino, node.qid_path))
            .collect();
        let names = inner
            .names
            .iter()
            .flat_map(|(&dir, names)| names.iter().map(move |(n, &ino)| (dir, n.clone(), ino)))
            .filter(|(_, _, ino)| inner.by_ino.contains_key(ino))
            .collect();
        (nodes, lazy, names)
    }

    /// Marks every node but those in `bound` (and the root) stale: their fids were not
    /// bound again on a new connection.
    pub(crate) fn mark_stale_except(&self, bound: &NodeFids) -> usize {
        let mut inner = self.lock();
        let mut stale = 0;
        for (ino, node) in inner.by_ino.iter_mut() {
            // A node without a fid is walked from its directory's when needed; if that
            // one was not bound again, the walk fails and the node answers ESTALE then.
            let lazy = node.fid.is_none();
            if *ino != ROOT && node.qid_path != PLACEHOLDER && !lazy && !bound.contains_key(ino) {
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
mod tests {
    use super::*;

    /// A table without even the root.
    fn empty_table() -> InodeTable {
        InodeTable {
            inner: Mutex::new(Inner {
                next_spare: PLACEHOLDER - 1,
                ..Inner::default()
            }),
        }
    }

    #[test]
    fn listings_show_each_file_its_node_id() {
        let table = empty_table();
        let shown = |q: u64| table.by_path().ino_or_own(q);
        let add = |q: u64| {
            let mut inner = table.lock();
            let ino = InodeTable::insert(&mut inner, None, q, libc::S_IFREG, None);
            inner.map_path(q, ino);
            ino
        };
        table.lock().map_path(77, ROOT);
        assert_eq!(shown(77), ROOT, "the export root's file is node 1");
        assert_eq!((add(5), shown(5)), (5, 5));
        assert_eq!(shown(6), 6, "an unknown file shows its own number");
        // Another file numbered 5 while the kernel holds the first: a spare id.
        let spare = add(5);
        assert_ne!(spare, 5);
        assert_eq!(shown(5), spare);
        table.lock().unmap_path(5, spare);
        assert_eq!(shown(5), 5);
        assert_eq!(table.lock().spared.len(), 1, "the root's only");
    }

    #[test]
    fn a_link_of_a_number_the_kernel_holds_for_another_link_gets_a_node_of_its_own() {
        let table = empty_table();
        let link = |name: &str, mode: u32, mtime_sec: u64| {
            let a = Rgetattr {
                qid: Qid {
                    ty: 0,
                    version: 0,
                    path: 40,
                },
                mode,
                mtime_sec,
                ..Rgetattr::default()
            };
            table.remember_lazy((1, name.as_bytes()), &a, None)
        };
        let first = link("a", libc::S_IFLNK | 0o777, 100);
        assert_eq!(first, 40);
        assert_eq!(
            link("a", libc::S_IFLNK | 0o777, 100),
            first,
            "the same link"
        );
        // The host removed it and made another link that took its number: the kernel
        // would keep the first link's target for a node it still holds.
        let second = link("b", libc::S_IFLNK | 0o777, 200);
        assert_ne!(second, first);
        assert_eq!(table.ino_of(40), Some(second));
        // A regular file's node follows its changes: the kernel drops its pages itself.
        let file = link("f", libc::S_IFREG | 0o644, 300);
        assert_eq!(link("f", libc::S_IFREG | 0o644, 400), file);
    }

    #[test]
    fn names_changed_through_the_mount_move_or_end_where_fidless_nodes_are_walked_from() {
        let table = empty_table();
        let lazy = |dir: u64, name: &str, qid_path: u64| {
            let a = Rgetattr {
                qid: Qid {
                    ty: 0,
                    version: 0,
                    path: qid_path,
                },
                mode: libc::S_IFREG | 0o644,
                ..Rgetattr::default()
            };
            table.remember_lazy((dir, name.as_bytes()), &a, None)
        };
        let walked_from = |ino: u64| match table.node_fid(ino) {
            Some(NodeFid::Lazy { dir_ino, name, .. }) => Some((dir_ino, name)),
            _ => None,
        };
        let (a, b, c) = (lazy(1, "a", 10), lazy(1, "b", 11), lazy(1, "c", 12));
        table.renamed((1, b"a"), (2, b"moved"));
        assert_eq!(walked_from(a), Some((2, b"moved".to_vec())));
        assert_eq!(table.child(2, b"moved"), Some(a));
        assert_eq!(table.child(1, b"a"), None);
        // Renamed over: the replaced node is walked from nowhere (ESTALE), not to the
        // file now under its name.
        table.renamed((1, b"b"), (1, b"c"));
        assert_eq!(walked_from(b), Some((1, b"c".to_vec())));
        assert_eq!(walked_from(c), None);
        table.removed(1, b"c");
        assert_eq!(walked_from(b), None);
        assert_eq!(table.child(1, b"c"), None);
        // A name the table no longer knows moves nothing.
        table.renamed((1, b"gone"), (1, b"other"));
        assert_eq!(table.child(1, b"other"), None);
    }
}
