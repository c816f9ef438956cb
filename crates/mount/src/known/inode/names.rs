//! Recording what the kernel was told: files found (a node per file, by `qid.path`, with
//! the fid most recently walked to it), the names they were found by, and names removed,
//! renamed or moved through the mount. The node's name is where a node without a fid is
//! walked from (see [`super::NodeFid::Lazy`]).

use std::collections::HashMap;
use std::sync::Arc;

use crossfs_wire::Rgetattr;

use crate::attr::DataStamp;
use crate::fid::FidRef;
use crate::known::listed_attrs::Fetched;

use super::*;

impl InodeTable {
    /// Notes that `name` in directory `parent` leads to node `ino`. At [`NAMES_LIMIT`],
    /// names of nodes the kernel forgot are dropped first; if that is not enough, all are,
    /// and [`InodeTable::take_names_lost`] says so once.
    pub(super) fn name(inner: &mut Inner, parent: u64, name: &[u8], ino: u64) {
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
    pub(super) fn remember_locked(
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

    pub(super) fn remember_node(
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
                    if !node.has_newer(fetched.as_ref()) {
                        node.seen = Some(stamp);
                        node.status = Some(Status::of(a));
                        node.listed = listed;
                    }
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
    pub(super) fn insert(
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
                passed: [None; super::PASSED_STATUSES],
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
    pub(super) fn unname(inner: &mut Inner, parent: u64, name: &[u8]) -> Option<u64> {
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

    /// Node `ino`'s file, created behind as `asked` in `parent`, was made as `made` (a
    /// host program had taken `asked`): it is found there from now on.
    pub(crate) fn made_as(&self, ino: u64, parent: u64, asked: &[u8], made: &[u8]) {
        let mut inner = self.lock();
        if inner.names.get(&parent).and_then(|d| d.get(asked)) == Some(&ino) {
            Self::unname(&mut inner, parent, asked);
        }
        Self::name(&mut inner, parent, made, ino);
        Self::move_origin(&mut inner, ino, (parent, asked), (parent, made));
    }

    /// The host renamed `from` to `to`, and the file was node `ino`'s: a node without a
    /// fid is walked from `to` from now on, so that its open files read on. The names the
    /// kernel holds are the feed's to drop.
    pub(crate) fn moved(&self, ino: u64, from: (u64, &[u8]), to: (u64, &[u8])) {
        Self::move_origin(&mut self.lock(), ino, from, to);
    }

    pub(super) fn move_origin(inner: &mut Inner, ino: u64, from: (u64, &[u8]), to: (u64, &[u8])) {
        if let Some(node) = inner
            .by_ino
            .get_mut(&ino)
            .filter(|n| n.found_at(from.0, from.1))
        {
            node.origin = Some((to.0, to.1.to_vec()));
        }
    }

    pub(super) fn lose_origin(inner: &mut Inner, ino: u64, (dir, name): (u64, &[u8])) {
        if let Some(node) = inner.by_ino.get_mut(&ino).filter(|n| n.found_at(dir, name)) {
            node.origin = None;
        }
    }
}
