//! Names: lookup (with negative entries), create-like requests, unlink, rename, links.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use crate::session::{Errno, FileType, INodeNo, RenameFlags, ReplyData};
use crossfs_client::ClientError;
use crossfs_wire::{
    features, setattr as valid, Fid, Qid, Rgetattr, Rmessage, Tlink, Tmessage, Tmkdir, Tmkdirattr,
    Tmknod, Treadlink, Tremove, Trename, Trenameat, Trenameatattr, Tsetattr, Tsymlink, Tunlinkat,
    Tunlinkatattr,
};

use super::reply::{answer, Entry, Later, Then};
use super::{errno, Caller, MountState};
use crate::attr::{self, decode_dev};
use crate::fid::FidRef;
use crate::known::cache::CacheMode;
use crate::known::inode::NodeFid;
use crate::known::listed_attrs::ChangeInFlight;
use crate::known::listed_attrs::Fetched;
use crate::known::replica::{Answer, DirLeft};
use crate::remote::{expect_reply, resolve_one, ATTR_MASK};

impl MountState {
    /// Records a looked-up file (one more kernel reference) and builds its entry.
    /// `fetched`: when `a` was fetched, if a READDIRPLUS may reuse it (see
    /// `crate::known::listed_attrs`).
    pub(crate) fn remember(
        &self,
        at: (INodeNo, &[u8]),
        fid: Arc<FidRef>,
        a: &Rgetattr,
        fetched: Option<Fetched>,
    ) -> crate::session::FileAttr {
        let ino = self.known.inodes.remember((at.0 .0, at.1), fid, a, fetched);
        self.check_names_lost();
        attr::file_attr(ino, a, self.ids)
    }

    /// After the name table overflowed, events can no longer reach every name the kernel
    /// holds: replicas go, and the kernel gets the cache mode's timeouts from then on.
    pub(crate) fn check_names_lost(&self) {
        if self.known.inodes.take_names_lost() {
            tracing::warn!(
                "more names in use than the mount can track: long cache timeouts and \
                 directory replicas are off for the rest of this mount"
            );
            self.known
                .untracked
                .store(true, std::sync::atomic::Ordering::Relaxed);
            self.known.replicas.set_limit_zero();
            self.known.listed.all_changed();
        }
    }

    /// The looked-up file's entry. `looked_up_by`: the thread of a LOOKUP, whose
    /// attributes `never` mode keeps for its GETATTR, recorded before the reply lets the
    /// thread go on.
    fn entry(
        &self,
        at: (INodeNo, &[u8]),
        r: Result<(Arc<FidRef>, Rgetattr), ClientError>,
        looked_up_by: Option<u32>,
        fetched: Option<Fetched>,
    ) -> Result<Entry, Errno> {
        let (fid, a) = r.map_err(|e| errno(&e))?;
        let fa = self.remember(at, fid, &a, fetched);
        if let (Some(pid), CacheMode::Never) = (looked_up_by, self.config.cache) {
            self.known.recent.record(pid, fa.ino.0, fa);
        }
        let (fa, attr_ttl) = self.unless_predicted(fa, self.attr_ttl());
        Ok(Entry {
            attr: fa,
            attr_ttl,
            entry_ttl: self.entry_ttl_for(fa.kind),
        })
    }

    /// LOOKUP from thread `pid`: answered from the directory's replica when there is one
    /// (see `crate::known::replica`), the first lookup in a directory filling it; otherwise one
    /// round trip for a name already known (see [`crate::remote::resolve`]), two for a new
    /// one (one with the crossfs extension). A directory's replica is anchored, and the
    /// directory listed ahead, once the kernel has the answer.
    pub(super) fn lookup<'a>(
        &'a self,
        pid: u32,
        parent: INodeNo,
        name: &'a [u8],
    ) -> Result<Then<'a, Entry>, Errno> {
        let ticket = if self.replicas_usable() {
            self.known.replicas.ticket(parent.0)
        } else {
            None
        };
        if let Some(ticket) = ticket {
            let mut answer = self.known.replicas.lookup(parent.0, name);
            if answer == Answer::Ask && !self.known.replicas.has(parent.0) {
                // Fetched ahead right now (`crate::ahead::tree_walk`), or else by this lookup.
                self.ahead.tree_walk.wait_for(parent.0);
                if !self.known.replicas.has(parent.0) {
                    let _fetching = self.ahead.tree_walk.fetch(parent.0);
                    // Binds the directory's fid too, in the same round trip if need be.
                    self.fill_replica(parent.0, ticket);
                }
                answer = self.known.replicas.lookup(parent.0, name);
            }
            match answer {
                Answer::Found(a) => {
                    let entry = self.replica_entry((parent, name), &a, ticket);
                    return Ok(Then::new(entry, move || {
                        self.looked_up_in_replica(parent.0)
                    }));
                }
                Answer::Missing => return self.missing(parent.0, name).map(Then::alone),
                Answer::Ask => {
                    if let Some(a) = self.changed_subdir_attrs(parent.0, name) {
                        self.stats.caches.subdir_lookups_left.fetch_add(1, Relaxed);
                        return Ok(Then::alone(self.subdir_entry((parent, name), &a)));
                    }
                }
            }
        }
        let dir = self.node(parent)?;
        let expected = self.known.inodes.expected(parent.0, name);
        let fetched = self.known.listed.before_fetch();
        match resolve_one(&self.client, &dir, name, expected) {
            Err(ClientError::Errno(libc::ENOENT)) => {
                if let Some(t) = ticket {
                    self.known.replicas.learned(parent.0, t, name, None);
                }
                self.missing(parent.0, name).map(Then::alone)
            }
            r => {
                if let (Some(t), Ok((_, a))) = (ticket, &r) {
                    self.known.replicas.learned(parent.0, t, name, Some(a));
                }
                let anchor = ticket.filter(|_| r.as_ref().is_ok_and(|(_, a)| attr::is_dir(a)));
                let entry = self.entry((parent, name), r, Some(pid), Some(fetched))?;
                let ino = entry.attr.ino.0;
                Ok(match anchor {
                    Some(t) => Then::new(entry, move || {
                        self.known.replicas.anchor(parent.0, name, ino, t);
                    }),
                    None => Then::alone(entry),
                })
            }
        }
    }

    /// The answer to a LOOKUP from what the replica of `parent` says `name` is: the node the
    /// mount already has for that file, or a new one walked only when needed. As for a
    /// listing (`MountState::readdirplus`): the attributes the mount fetched for the file
    /// since, if still exact; else the replica's, for no time if the server read the file
    /// for the mount since the replica's listing was fetched (the kernel then asks).
    fn replica_entry(
        &self,
        (parent, name): (INodeNo, &[u8]),
        a: &Rgetattr,
        ticket: crate::known::replica::Ticket,
    ) -> Entry {
        let (a, fetched) = &self.freshest_listed(a);
        let attr_ttl = self.attr_ttl();
        let exact = fetched.is_some()
            || self
                .known
                .replicas
                .filled(parent.0)
                .is_some_and(|f| !self.known.listed.read_since(a.qid.path, &f));
        let attr_ttl = if exact { attr_ttl } else { Duration::ZERO };
        let ino = self
            .known
            .inodes
            .remember_lazy((parent.0, name), a, *fetched);
        self.check_names_lost();
        if attr::is_dir(a) {
            self.known.replicas.anchor(parent.0, name, ino, ticket);
        }
        let (fa, attr_ttl) = self.unless_predicted(attr::file_attr(ino, a, self.ids), attr_ttl);
        Entry {
            attr: fa,
            attr_ttl,
            entry_ttl: self.entry_ttl_for(fa.kind),
        }
    }

    /// The attributes of the directory `name` in `dir` where a change in it through the
    /// mount is what moved its times (its entry in `dir`'s replica then says "ask"), as a
    /// GETATTR of it would answer without a message: sent behind and not answered yet
    /// (the prediction), or as the change's answer left it (`left_attrs`). Creates and
    /// removals in a directory are followed by lookups of it (`mkdir -p`, npm's next
    /// file in it), which would otherwise each wait for a Twalkgetattr.
    fn changed_subdir_attrs(&self, dir: u64, name: &[u8]) -> Option<Rgetattr> {
        let child = self.known.replicas.subdir(dir, name)?;
        let mut a = self
            .behind
            .predicted(child)
            .or_else(|| self.known.replicas.left_attrs(child))?;
        // A prediction made before the directory's own mkdir sent behind was answered
        // names it by the mount's own `qid.path`: the node is found by its file's now.
        if let Some(qid_path) = self.known.inodes.qid_path(child) {
            a.qid.path = qid_path;
        }
        Some(a)
    }

    /// The entry of the directory `name` in `parent` with the attributes
    /// [`Self::changed_subdir_attrs`] found, as a GETATTR of it would be answered: for the
    /// usual timeout, or at once again while predicted.
    fn subdir_entry(&self, (parent, name): (INodeNo, &[u8]), a: &Rgetattr) -> Entry {
        let ino = self.known.inodes.remember_lazy((parent.0, name), a, None);
        let fa = attr::file_attr(ino, a, self.ids);
        let (fa, attr_ttl) = self.unless_predicted(fa, self.attr_ttl());
        Entry {
            attr: fa,
            attr_ttl,
            entry_ttl: self.entry_ttl_for(fa.kind),
        }
    }

    /// LOOKUP for a replayed creation (see `crate::changes`): the file the server has,
    /// never a negative entry.
    pub(crate) fn lookup_existing(&self, parent: INodeNo, name: &[u8]) -> Result<Entry, Errno> {
        let dir = self.node(parent)?;
        let r = resolve_one(&self.client, &dir, name, None);
        self.entry((parent, name), r, None, None)
    }

    /// A missing name: an entry of node 0 that the kernel caches for the negative timeout,
    /// answering further lookups of the name itself. The kernel replaces it when the name
    /// is created through this mount. While events are followed and the mount can track
    /// the name (so that its creation on the host invalidates it), and no `--negative-ttl`
    /// was given, the timeout is long.
    fn missing(&self, parent: u64, name: &[u8]) -> Result<Entry, Errno> {
        use std::sync::atomic::Ordering::Relaxed;
        self.known.inodes.forget_name(parent, name);
        let tracked = self.changes.note_missing(parent, name);
        let ttl = match self.config.negative_ttl.timeout() {
            Some(_) if tracked && self.negative_by_mode && self.follows_events() => {
                Some(crate::known::cache::FOLLOWED)
            }
            ttl => ttl,
        };
        match ttl {
            Some(ttl) => {
                self.stats
                    .caches
                    .negative_entries_sent
                    .fetch_add(1, Relaxed);
                Ok(Entry {
                    attr: attr::placeholder(0, FileType::RegularFile),
                    attr_ttl: Duration::ZERO,
                    entry_ttl: ttl,
                })
            }
            None => {
                self.stats.caches.enoent_sent.fetch_add(1, Relaxed);
                Err(Errno::ENOENT)
            }
        }
    }

    /// Gives a file this mount has just created for `caller` to the caller, as a local
    /// create would: the server gives new files to the user the mount attached as (and the
    /// gid asked for), so another user's files are handed over with a Tsetattr that also
    /// restores set-id bits (a chown clears them). Returns the attributes the file ends up
    /// with. A server that may not give files away (not root) keeps them, as it keeps every
    /// file: after its first refusal, no more are asked for.
    pub(super) fn give_to(
        &self,
        caller: Caller,
        fid: &FidRef,
        a: Rgetattr,
    ) -> Result<Rgetattr, ClientError> {
        use std::sync::atomic::Ordering::Relaxed;
        if a.uid == caller.uid || self.server.chown_refused.load(Relaxed) {
            return Ok(a);
        }
        let mut m = Tsetattr::unchanged(fid.fid());
        m.valid = valid::UID;
        m.uid = caller.uid;
        if a.mode & 0o6000 != 0 && a.mode & libc::S_IFMT != libc::S_IFLNK {
            m.valid |= valid::MODE;
            m.mode = a.mode & 0o7777;
        }
        match self.client.call(Tmessage::Setattr(m)) {
            Ok(_) => self.client.getattr(fid.fid(), crate::remote::ATTR_MASK),
            Err(ClientError::Errno(libc::EPERM)) => {
                self.server.chown_refused.store(true, Relaxed);
                tracing::info!(
                    "the server keeps new files (it may not give them to uid {})",
                    caller.uid
                );
                Ok(a)
            }
            Err(e) => {
                tracing::warn!("giving a new file to uid {}: {e}", caller.uid);
                Ok(a)
            }
        }
    }

    /// Sends a request that creates `name` in `parent` for `caller`, then looks the new
    /// file up, unless the request bound fid `binds` to it and answered its attributes
    /// (Tmkdirattr). A directory made is anchored once the kernel has the answer.
    /// `format`: the file type made (`S_IFMT` bits), which the kernel checks the answer
    /// against.
    fn create_entry<'a>(
        &'a self,
        parent: INodeNo,
        (name, format): (&'a [u8], u32),
        (caller, binds): (Option<Caller>, Option<Fid>),
        make: impl FnOnce(&FidRef) -> Tmessage,
    ) -> Result<Then<'a, Entry>, Errno> {
        let unbound = |binds: Option<Fid>| {
            if let Some(fid) = binds {
                self.client.free_fid(fid);
            }
        };
        if let Err(e) = self.writable() {
            unbound(binds);
            return Err(e);
        }
        let dir = match self.node(parent) {
            Ok(dir) => dir,
            Err(e) => {
                unbound(binds);
                return Err(e);
            }
        };
        // Taken before the request: a directory made here is anchored only if nothing
        // else touched `parent` meanwhile.
        let before = self
            .replicas_usable()
            .then(|| self.known.replicas.ticket(parent.0))
            .flatten();
        let before_left = self.ticket_for_left(parent.0);
        let filled = self.known.listed.before_fetch();
        let (found, left) = match (self.client.call(make(&dir)), binds) {
            (Ok(Rmessage::Mkdirattr(m)), Some(fid)) if m.attr.valid != 0 => {
                self.note_new_dir(&m.attr);
                let left = before_left
                    .filter(|_| m.dir.valid != 0)
                    .map(|before| DirLeft {
                        before,
                        attrs: m.dir,
                    });
                (Some((FidRef::new(&self.client, fid), m.attr)), left)
            }
            (Ok(_), binds) => {
                unbound(binds);
                (None, None)
            }
            (Err(e), binds) => {
                unbound(binds);
                return Err(errno(&e));
            }
        };
        let r = match found {
            Some(found) => Ok(found),
            None => resolve_one(&self.client, &dir, name, None),
        };
        let r = r.and_then(|(fid, a)| match caller {
            Some(c) => Ok((fid.clone(), self.give_to(c, &fid, a)?)),
            None => Ok((fid, a)),
        });
        let made_dir = r.as_ref().is_ok_and(|(_, a)| attr::is_dir(a));
        match &r {
            Ok((_, a)) => {
                // A new file: what the mount kept of an earlier one of the same number
                // (the host reused it), such as a link's target, is not it.
                self.known.listed.changed([a.qid.path]);
                self.known.replicas.own_created(parent.0, name, a, left)
            }
            // Created, but its attributes are unknown.
            Err(_) => self.known.replicas.stale(parent.0, name),
        }
        if let Err(ClientError::Errno(libc::ENOENT)) = &r {
            // Made, and removed or renamed by another client before the lookup: the
            // creation succeeded, as it would have locally, and the name leads nowhere
            // (a program got ENOENT for its successful mkdir under load).
            let gone = attr::placeholder(self.known.inodes.gone(format), attr::kind(format));
            let entry = Entry {
                attr: gone,
                attr_ttl: Duration::ZERO,
                entry_ttl: Duration::ZERO,
            };
            return Ok(Then::alone(entry));
        }
        let entry = self.entry((parent, name), r, None, None)?;
        let ino = entry.attr.ino.0;
        Ok(match (made_dir, before) {
            (true, Some(before)) => Then::new(entry, move || {
                self.known
                    .replicas
                    .own_made_dir((parent.0, name), ino, before, filled);
            }),
            _ => Then::alone(entry),
        })
    }

    /// MKDIR: sent behind where it may be (`fs/create_behind.rs`), else as Tmkdirattr
    /// (or Tmkdir to a server without it); `change` marks the directory and the name as
    /// changing, `pid` is the caller's thread.
    pub(super) fn mkdir<'a>(
        self: &'a Arc<Self>,
        parent: INodeNo,
        name: &'a [u8],
        mode: u32,
        (caller, pid): (Caller, u32),
        change: &ChangeInFlight,
    ) -> Result<Then<'a, Entry>, Errno> {
        if self.sends_behind() {
            self.writable()?;
            let dir = self.node(parent)?;
            let behind = (caller, pid);
            if let Some(entry) = self.mkdir_behind((parent, &dir), name, mode, behind, change) {
                return Ok(Then::alone(entry));
            }
        }
        let in_one = self.client.negotiation().features & features::MKDIR_ATTR != 0;
        let newfid = in_one.then(|| self.client.alloc_fid());
        self.create_entry(
            parent,
            (name, libc::S_IFDIR),
            (Some(caller), newfid),
            |dir| match newfid {
                Some(newfid) => Tmessage::Mkdirattr(Tmkdirattr {
                    dfid: dir.fid(),
                    newfid,
                    name: name.to_vec(),
                    mode: mode & 0o7777,
                    gid: caller.gid,
                    request_mask: ATTR_MASK,
                }),
                None => Tmessage::Mkdir(Tmkdir {
                    dfid: dir.fid(),
                    name: name.to_vec(),
                    mode: mode & 0o7777,
                    gid: caller.gid,
                }),
            },
        )
    }

    pub(super) fn mknod<'a>(
        &'a self,
        parent: INodeNo,
        name: &'a [u8],
        mode: u32,
        rdev: u32,
        caller: Caller,
    ) -> Result<Then<'a, Entry>, Errno> {
        let (major, minor) = decode_dev(rdev);
        self.create_entry(
            parent,
            (name, mode & libc::S_IFMT),
            (Some(caller), None),
            |dir| {
                Tmessage::Mknod(Tmknod {
                    dfid: dir.fid(),
                    name: name.to_vec(),
                    mode,
                    major,
                    minor,
                    gid: caller.gid,
                })
            },
        )
    }

    pub(super) fn symlink<'a>(
        &'a self,
        parent: INodeNo,
        name: &'a [u8],
        target: &[u8],
        caller: Caller,
    ) -> Result<Then<'a, Entry>, Errno> {
        self.create_entry(parent, (name, libc::S_IFLNK), (Some(caller), None), |dir| {
            Tmessage::Symlink(Tsymlink {
                fid: dir.fid(),
                name: name.to_vec(),
                symtgt: target.to_vec(),
                gid: caller.gid,
            })
        })
    }

    pub(super) fn link<'a>(
        &'a self,
        ino: INodeNo,
        newparent: INodeNo,
        name: &'a [u8],
    ) -> Result<Then<'a, Entry>, Errno> {
        let file = self.node(ino)?;
        let format = self
            .known
            .inodes
            .status(ino.0)
            .map_or(libc::S_IFREG, |s| s.mode)
            & libc::S_IFMT;
        self.create_entry(newparent, (name, format), (None, None), |dir| {
            Tmessage::Link(Tlink {
                dfid: dir.fid(),
                fid: file.fid(),
                name: name.to_vec(),
            })
        })
    }

    /// Sends a name-changing request, falling back to the older 9P2000.L form (Tremove,
    /// Trename on a walked fid) for servers that answer EOPNOTSUPP, as Linux's v9fs does;
    /// once a server has refused, the new form is not tried again.
    fn change_name(
        &self,
        modern: Tmessage,
        legacy: impl FnOnce() -> Result<(), ClientError>,
    ) -> Result<(), Errno> {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.server.legacy_names.load(Relaxed) {
            match self.client.call(modern) {
                Err(ClientError::Errno(libc::EOPNOTSUPP)) => {
                    self.server.legacy_names.store(true, Relaxed);
                }
                r => return r.map(|_| ()).map_err(|e| errno(&e)),
            }
        }
        legacy().map_err(|e| errno(&e))
    }

    /// A fid for `name` in `dir`, without its attributes.
    pub(crate) fn walk_name(
        &self,
        dir: &FidRef,
        name: &[u8],
    ) -> Result<(Arc<FidRef>, Qid), ClientError> {
        crate::remote::walk_name(&self.client, dir, name)
    }

    /// UNLINK (`flags` 0) or RMDIR (`AT_REMOVEDIR`) of `name` in `parent`, from thread
    /// `pid`: sent behind where it may be (`super::unlink_behind`), else waiting.
    pub(super) fn unlink(
        self: &Arc<Self>,
        (parent, name): (INodeNo, &[u8]),
        flags: u32,
        pid: u32,
        change: &ChangeInFlight,
    ) -> Result<(), Errno> {
        let is_dir = flags == crossfs_wire::AT_REMOVEDIR;
        if (flags == 0 || is_dir)
            && !self.config.read_only
            && self.unlink_behind((parent, name, is_dir), pid, change)
        {
            return Ok(());
        }
        let left = self.unlink_on_server(parent, name, flags)?;
        let file = self.file_named(parent.0, name);
        self.known.inodes.removed(parent.0, name);
        self.known.replicas.own_removed(parent.0, name, file, left);
        Ok(())
    }

    /// Removes `name` from `parent` on the server; returns what that left of the directory,
    /// if the server said.
    fn unlink_on_server(
        &self,
        parent: INodeNo,
        name: &[u8],
        flags: u32,
    ) -> Result<Option<DirLeft>, Errno> {
        self.writable()?;
        let dir = self.node(parent)?;
        self.keep_reachable(parent.0, name);
        let before = self.ticket_for_left(parent.0);
        if let Some(before) = before {
            let msg = Tmessage::Unlinkatattr(Tunlinkatattr {
                dirfd: dir.fid(),
                name: name.to_vec(),
                flags,
                request_mask: ATTR_MASK,
            });
            match self.call_left(msg) {
                Some(Ok(Rmessage::Unlinkatattr(r))) => {
                    return Ok(Some(DirLeft {
                        before,
                        attrs: r.dir,
                    }))
                }
                Some(Ok(other)) => return Err(errno(&crate::remote::unexpected(other))),
                Some(Err(e)) => return Err(errno(&e)),
                None => {}
            }
        }
        let msg = Tmessage::Unlinkat(Tunlinkat {
            dirfd: dir.fid(),
            name: name.to_vec(),
            flags,
        });
        self.change_name(msg, || {
            let (fid, _) = self.walk_name(&dir, name)?;
            // Tremove clunks the fid whatever the outcome.
            let msg = Tmessage::Remove(Tremove { fid: fid.fid() });
            fid.forget_clunked();
            self.client.call(msg).map(|_| ())
        })?;
        Ok(None)
    }

    /// Before a change through the mount takes `name` in `parent` from its file (an
    /// unlink, a rename over it): a node answered from a replica has no fid and is reached
    /// through its name, so while an open of it waits for its first read (a deferred open;
    /// while opens go unannounced, any regular file may be open), or while the kernel may
    /// hold another name of it (a hard link it looked up too), it is walked now, and stays
    /// reachable afterwards, as POSIX has it. Other opens hold fids of their own; a file of
    /// one name that nobody has open costs nothing here.
    fn keep_reachable(&self, parent: u64, name: &[u8]) {
        let Some(ino) = self.known.inodes.child(parent, name) else {
            return;
        };
        // While the kernel opens files without telling (`crate::known::handle::Unannounced`),
        // any regular file may be open.
        let may_be_open = || {
            self.known.handles.has_deferred(ino)
                || self.known.handles.opens_unannounced.load(Relaxed)
                    && self
                        .known
                        .inodes
                        .status(ino)
                        .is_some_and(|s| s.mode & libc::S_IFMT == libc::S_IFREG)
        };
        if matches!(self.known.inodes.node_fid(ino), Some(NodeFid::Lazy { .. }))
            && (may_be_open() || self.known.inodes.named_twice(ino))
        {
            // Failing, the change goes on: its own answer says what the name was.
            if let Err(e) = self.node(INodeNo(ino)) {
                tracing::debug!(ino, "open file not walked before its name went: {e:?}");
            }
        }
    }

    /// The ticket of directory `dir` before a change whose compound will say what the
    /// change left of it (see [`crate::known::replica::DirReplicas::left_attrs`]), if the server
    /// has the compounds and the directory's replica state can be followed.
    pub(super) fn ticket_for_left(&self, dir: u64) -> Option<crate::known::replica::Ticket> {
        use std::sync::atomic::Ordering::Relaxed;
        let usable = self.replicas_usable()
            && self.config.cache != CacheMode::Never
            && !self.server.no_left_attrs.load(Relaxed)
            && !self.server.legacy_names.load(Relaxed);
        usable.then(|| self.known.replicas.ticket(dir)).flatten()
    }

    /// Sends a change compound; `None` if the server predates it (then never again).
    pub(super) fn call_left(&self, msg: Tmessage) -> Option<Result<Rmessage, ClientError>> {
        match self.client.call(msg) {
            Err(ClientError::Errno(libc::EOPNOTSUPP)) => {
                self.server
                    .no_left_attrs
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                None
            }
            r => Some(r),
        }
    }

    /// RENAME_NOREPLACE and RENAME_EXCHANGE have no 9P2000.L form (a check-then-rename
    /// would race), so they fail with EINVAL, as on file systems that lack them. Sent
    /// behind where it may be (`super::rename_behind`), else waiting.
    pub(super) fn rename(
        self: &Arc<Self>,
        (parent, name): (INodeNo, &[u8]),
        (newparent, newname): (INodeNo, &[u8]),
        flags: RenameFlags,
        (pid, change): (u32, &ChangeInFlight),
    ) -> Result<(), Errno> {
        if parent == newparent
            && flags.is_empty()
            && self.rename_behind((parent, name, newname), pid, change)
        {
            return Ok(());
        }
        let left = self.rename_on_server((parent, name), (newparent, newname), flags)?;
        let files = (
            self.file_named(parent.0, name),
            self.file_named(newparent.0, newname),
        );
        self.known
            .inodes
            .renamed((parent.0, name), (newparent.0, newname));
        self.known
            .replicas
            .own_renamed((parent.0, name), (newparent.0, newname), files, left);
        Ok(())
    }

    /// The `qid.path` of the non-directory `name` in `dir` leads the kernel to, if any.
    fn file_named(&self, dir: u64, name: &[u8]) -> Option<u64> {
        let (qid_path, format) = self.known.inodes.named(dir, name)?;
        (format != libc::S_IFDIR).then_some(qid_path)
    }

    /// Renames `name` in `parent` to `newname` in `newparent` on the server; returns what
    /// that left of the two directories, if the server said.
    fn rename_on_server(
        &self,
        (parent, name): (INodeNo, &[u8]),
        (newparent, newname): (INodeNo, &[u8]),
        flags: RenameFlags,
    ) -> Result<Option<(DirLeft, DirLeft)>, Errno> {
        self.writable()?;
        if !flags.is_empty() {
            return Err(Errno::EINVAL);
        }
        let (from, to) = (self.node(parent)?, self.node(newparent)?);
        self.keep_reachable(newparent.0, newname);
        let before = self
            .ticket_for_left(parent.0)
            .zip(self.ticket_for_left(newparent.0));
        if let Some((from_before, to_before)) = before {
            let msg = Tmessage::Renameatattr(Trenameatattr {
                olddirfid: from.fid(),
                oldname: name.to_vec(),
                newdirfid: to.fid(),
                newname: newname.to_vec(),
                request_mask: ATTR_MASK,
            });
            match self.call_left(msg) {
                Some(Ok(Rmessage::Renameatattr(r))) => {
                    let left = |before, attrs| DirLeft { before, attrs };
                    return Ok(Some((
                        left(from_before, r.olddir),
                        left(to_before, r.newdir),
                    )));
                }
                Some(Ok(other)) => return Err(errno(&crate::remote::unexpected(other))),
                Some(Err(e)) => return Err(errno(&e)),
                None => {}
            }
        }
        let msg = Tmessage::Renameat(Trenameat {
            olddirfid: from.fid(),
            oldname: name.to_vec(),
            newdirfid: to.fid(),
            newname: newname.to_vec(),
        });
        self.change_name(msg, || {
            let (fid, qid) = self.walk_name(&from, name)?;
            let msg = Tmessage::Rename(Trename {
                fid: fid.fid(),
                dfid: to.fid(),
                name: newname.to_vec(),
            });
            self.client.call(msg)?;
            // Servers of this vintage name files by path (diod): the fid just renamed
            // follows the file, the node's older fid does not.
            self.known.inodes.refresh(qid.path, fid);
            Ok(())
        })?;
        Ok(None)
    }

    /// With FUSE_CACHE_SYMLINKS the kernel keeps the target in its page cache, so this runs
    /// once per symlink while its attributes stay valid. While events are followed, the
    /// target may come with the directory's small files (`crate::ahead::small_files`).
    pub(super) fn readlink(self: &Arc<Self>, ino: INodeNo) -> Later<'static, ReplyData> {
        let shared = self.clone();
        Later::new(move |reply| {
            let again = shared.clone();
            shared.with_small_file(
                ino.0,
                Box::new(
                    move |found: Option<crate::ahead::small_files::SmallFile>| match found {
                        Some(link) if link.attr.mode & libc::S_IFMT == libc::S_IFLNK => {
                            answer(reply, Ok(&link.data[..]))
                        }
                        None => answer(reply, again.readlink_from_server(ino)),
                        // Not a link (its number now names another file): asked for, off the
                        // thread this may run on (the client's reader).
                        Some(_) => {
                            let spawned = std::thread::Builder::new()
                                .name("crossfs-readlink".into())
                                .spawn(move || answer(reply, again.readlink_from_server(ino)));
                            if let Err(e) = spawned {
                                tracing::warn!("cannot start a thread to read a link: {e}");
                            }
                        }
                    },
                ),
            );
        })
    }

    fn readlink_from_server(&self, ino: INodeNo) -> Result<Later<'static, ReplyData>, Errno> {
        let fid = self.node(ino)?;
        self.reading(ino.0);
        let msg = Tmessage::Readlink(Treadlink { fid: fid.fid() });
        let client = self.client.clone();
        Ok(Later::new(move |reply| {
            client.call_async(
                msg,
                Box::new(move |r| {
                    drop(fid);
                    let target = expect_reply!(r, Readlink).map(|l| l.target);
                    answer(reply, target.map_err(|e| errno(&e)));
                }),
            );
        }))
    }
}
