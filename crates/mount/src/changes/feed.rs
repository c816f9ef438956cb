//! The feed thread: reads the event stream and applies each event (invalidate, then replay).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::session::{INodeNo, Notifier};
use crossfs_client::{Client, ClientError, Fid};
use crossfs_events::{Event, EventKind, RelPath};

use super::replay::Replayer;
use super::watchers::Watchers;
use super::FeedTarget;
use crate::known::inode::{Status, ROOT};

/// A running feed; stopping it closes the event connection and joins the thread.
pub(crate) struct Feed {
    client: Arc<Client>,
    thread: Option<JoinHandle<()>>,
}

impl Feed {
    /// Starts the feed thread on an attached event fid of `client`.
    pub(crate) fn start(
        mount: FeedTarget,
        notifier: Notifier,
        mountpoint: PathBuf,
        client: Arc<Client>,
        fid: Fid,
    ) -> std::io::Result<Feed> {
        let _ = mount.changes.link.set((client.clone(), fid));
        mount.changes.link_decided();
        mount.changes.enabled.store(true, Relaxed);
        let reader = client.clone();
        let thread = std::thread::Builder::new()
            .name("crossfs-changes".into())
            .spawn(move || {
                let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
                mount.changes.replay_tid.store(tid, Relaxed);
                let applier = Applier {
                    mount: &mount,
                    notifier,
                    watchers: Watchers::new(&mountpoint),
                    replayer: Replayer {
                        mount: &mount,
                        mountpoint,
                    },
                };
                applier.run(&reader, fid);
                mount.changes.replay_tid.store(0, Relaxed);
                mount.changes.enabled.store(false, Relaxed);
            })?;
        Ok(Feed {
            client,
            thread: Some(thread),
        })
    }

    /// Ends the event connection and waits for the thread.
    pub(crate) fn stop(mut self) {
        self.client.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Applier<'a> {
    mount: &'a FeedTarget,
    notifier: Notifier,
    replayer: Replayer<'a>,
    watchers: Watchers,
}

impl Applier<'_> {
    fn run(&self, client: &Client, fid: Fid) {
        let max = client.max_io();
        let following = |on: bool| {
            self.mount.known.listed.set_following(on);
            self.mount.known.replicas.set_following(on);
        };
        // Attached: every change from now on will come as an event.
        following(true);
        loop {
            let data = match client.read(fid, 0, max) {
                Ok(d) => {
                    following(true);
                    d
                }
                // Reconnecting: the next read waits for the new connection, which resumes
                // after the last event applied (see `follow_changes`).
                Err(ClientError::Disconnected(_)) if client.reconnects_enabled() => {
                    following(false);
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
                Err(e) => {
                    following(false);
                    if !client.is_shut_down() {
                        tracing::warn!(
                            "change events stopped: {e}; caches follow their timeouts only"
                        );
                    }
                    return;
                }
            };
            let events: Vec<Event> = data
                .split_inclusive(|&b| b == b'\n')
                .filter_map(|line| {
                    Event::from_json_line(line)
                        .map_err(|e| tracing::warn!("unreadable change event: {e}"))
                        .ok()
                })
                .collect();
            self.watchers.batch_received();
            for (i, ev) in events.iter().enumerate() {
                // Stopped (unmounting): the rest of a large batch would only be applied to
                // a kernel that is gone, one failing notification at a time.
                if client.is_shut_down() {
                    following(false);
                    return;
                }
                self.apply(ev, events.get(i + 1));
            }
        }
    }

    /// Applies `ev`; `next`: the event after it, if it came with it.
    fn apply(&self, ev: &Event, next: Option<&Event>) {
        let c = &self.mount.changes;
        c.stats.received.fetch_add(1, Relaxed);
        *crate::sync::lock(&c.position) = Some((ev.epoch, ev.seq));
        tracing::debug!("change event {ev}");
        self.mark_changed(ev);
        let echo = self.is_echo(ev, next);
        // Replicas first: a lookup the kernel sends after the invalidations below must
        // not be answered with what the event changed.
        let changes = &self.mount.changes;
        self.note_echoed(ev);
        self.mount
            .known
            .replicas
            .apply(ev, echo, &|dir, name| changes.is_own_name(dir, name));
        if let Some(ino) = ev.qid.and_then(|q| self.mount.known.inodes.ino_of(q)) {
            self.mount.known.idle.forget(ino);
        }
        self.inval_containers(ev, echo);
        match &ev.kind {
            EventKind::Sync { cookie } => {
                // The server made and removed its cookie at the top of the export: the
                // root's times moved with no event of their own.
                self.inval_inode(crate::known::inode::ROOT, false);
                self.check_unechoed();
                c.marker_applied(*cookie)
            }
            EventKind::Warning { message } => tracing::warn!("server: {message}"),
            EventKind::Rescan { reason } => {
                tracing::info!("rescan of '{}' ({reason})", ev.path);
                c.stats.rescans.fetch_add(1, Relaxed);
                self.rescan(&ev.path);
            }
            EventKind::Created if !echo => self.created(ev),
            EventKind::Removed if !echo => self.removed(ev),
            EventKind::Modified | EventKind::Attrib => self.changed(ev),
            EventKind::Renamed { from } if !echo => self.renamed(from, ev),
            EventKind::Created | EventKind::Removed | EventKind::Renamed { .. } => {}
        }
    }

    /// For an event that adds, removes or renames a name: the directories' attributes and
    /// cached listings (their times, sizes and entries changed), and the attributes of the
    /// files involved (their link counts may have changed: the file the event names, and
    /// whatever the kernel knew under the names, such as a file a rename replaced),
    /// everything the kernel may keep long while events are followed.
    fn inval_containers(&self, ev: &Event, echo: bool) {
        let from = match &ev.kind {
            EventKind::Created | EventKind::Removed => None,
            EventKind::Renamed { from } => Some(from),
            _ => return,
        };
        let mut files: Vec<u64> = ev.qid.into_iter().collect();
        for path in std::iter::once(&ev.path).chain(from) {
            let Some(dir) = self.known_parent(path) else {
                continue;
            };
            files.extend(self.kernel_entry(dir, path.file_name()));
            // The directory's attributes and listing go whoever made the change: an event
            // cannot tell this mount's change from the host's on the same name a moment
            // later, and the kernel, which updated its caches for its own change, would
            // keep the directory's times from before the host's.
            self.inval_inode(dir, true);
        }
        // A change through this mount: the kernel updated its own caches of the files.
        if echo {
            return;
        }
        files.sort_unstable();
        files.dedup();
        for ino in files
            .into_iter()
            .filter_map(|q| self.mount.known.inodes.ino_of(q))
        {
            self.inval_inode(ino, false);
        }
    }

    /// Makes the kernel look `name` in `dir` up again, unless its entry still leads where
    /// the server's does (one Twalk): invalidating a directory's entry detaches it, and a
    /// process whose working directory it is would find itself nowhere, so a right entry
    /// is never dropped, whatever the events said.
    fn inval_entry(&self, dir: u64, name: &[u8]) {
        self.mount.changes.forget_missing(dir, name);
        if self
            .kernel_file(dir, name)
            .is_some_and(|file| self.still_leads_to(dir, name, file))
        {
            return;
        }
        self.drop_entry(dir, name);
    }

    /// Drops the kernel's entry for `name` in `dir`, unconditionally.
    fn drop_entry(&self, dir: u64, name: &[u8]) {
        self.mount.known.inodes.forget_name(dir, name);
        match self
            .notifier
            .inval_entry(INodeNo(dir), OsStr::from_bytes(name))
        {
            Ok(()) => {
                self.mount.changes.stats.invalidations.fetch_add(1, Relaxed);
            }
            // ENOENT: the kernel holds no such entry (nothing to drop).
            Err(e) => {
                tracing::debug!(dir, name = %String::from_utf8_lossy(name), "entry not invalidated: {e}")
            }
        }
    }

    /// `pages`: drop the cached data too, not only the attributes.
    fn inval_inode(&self, ino: u64, pages: bool) {
        if pages {
            // After a push of the file's pages in progress (`crate::ahead::pushed_pages`).
            self.mount.page_push.settle(ino);
            self.mount.page_push.pages_dropped(ino);
        }
        let offset = if pages { 0 } else { -1 };
        if self.notifier.inval_inode(INodeNo(ino), offset, 0).is_ok() {
            self.mount.changes.stats.invalidations.fetch_add(1, Relaxed);
        }
    }

    /// Counts a replay's outcome; true if it succeeded.
    fn counted(&self, replay: std::io::Result<()>) -> bool {
        let stats = &self.mount.changes.stats;
        match replay {
            Ok(()) => {
                stats.replayed.fetch_add(1, Relaxed);
                true
            }
            Err(e) => {
                tracing::debug!("replay failed: {e}");
                stats.replay_failures.fetch_add(1, Relaxed);
                false
            }
        }
    }

    /// Ends reuse of the attributes of the files an event names (see
    /// `crate::known::listed_attrs`): by its qid, by its path and its old path, and their
    /// directories. An event the mount cannot place counts for every file. An event that
    /// shows its file exactly as the mount last saw it (mode, size and times: the echo of
    /// the mount's own create, write or setattr, which now comes within milliseconds)
    /// leaves that file alone, so a change that starts from those attributes may still go
    /// behind.
    fn mark_changed(&self, ev: &Event) {
        let listed = &self.mount.known.listed;
        let from = match &ev.kind {
            // The sync's cookie, made and removed at the top of the export, moved the
            // root's times with no event of their own.
            EventKind::Sync { .. } => {
                listed.changed(self.mount.known.inodes.qid_path(crate::known::inode::ROOT));
                return;
            }
            EventKind::Warning { .. } => return,
            EventKind::Rescan { .. } => return listed.all_changed(),
            EventKind::Renamed { from } => Some(from),
            _ => None,
        };
        let inodes = &self.mount.known.inodes;
        let as_seen = matches!(
            ev.kind,
            EventKind::Created | EventKind::Modified | EventKind::Attrib
        ) && ev
            .qid
            .and_then(|q| inodes.ino_of(q))
            .is_some_and(|ino| self.as_seen(ino, ev, true));
        let mut files: Vec<u64> = ev.qid.into_iter().collect();
        for path in std::iter::once(&ev.path).chain(from) {
            let Some(dir) = self.known_parent(path) else {
                if ev.qid.is_none() {
                    return listed.all_changed();
                }
                continue;
            };
            files.extend(inodes.qid_path(dir));
            files.extend(self.kernel_entry(dir, path.file_name()));
        }
        if as_seen {
            files.retain(|&f| Some(f) != ev.qid);
        }
        // In this order: an extended attribute fetched meanwhile is not kept.
        match (as_seen, ev.qid, ev.attrs) {
            (false, Some(q), Some(a)) => {
                listed.changed_as_shown(files.iter().copied(), (q, Status::of_event(&a)))
            }
            _ => listed.changed(files.iter().copied()),
        };
        self.mount.known.missing_xattrs.forget(files);
    }

    /// The node of the directory holding `path`, from what the mount knows (no system
    /// call: events are frequent while the guest itself works, and must cost next to
    /// nothing). `None` when the kernel holds nothing there: then nothing is cached and
    /// nobody watches.
    fn known_parent(&self, path: &RelPath) -> Option<u64> {
        let mut dir = ROOT;
        for name in path.parent()?.components() {
            dir = self.mount.known.inodes.child(dir, name)?;
        }
        Some(dir)
    }

    /// Whether name `n` leads the kernel to the file `ev` gives it, with the attributes the
    /// mount last saw of it (but the change time after a rename, which moves it without
    /// any reply to the mount showing it).
    fn leads_to(&self, (dir, name): (u64, &[u8]), ev: &Event) -> bool {
        let file = event_file(ev);
        let ctime = matches!(ev.kind, EventKind::Created);
        let as_seen = |ino| self.as_seen(ino, ev, ctime);
        file.is_some()
            && self.kernel_file(dir, name) == file
            && self
                .mount
                .known
                .inodes
                .child(dir, name)
                .is_some_and(as_seen)
    }

    /// Whether `ev` shows node `ino`'s file with the attributes the mount last saw of it
    /// (`ctime`: its change time too), or as it was before them (see
    /// `InodeTable::has_seen`).
    fn as_seen(&self, ino: u64, ev: &Event, ctime: bool) -> bool {
        ev.attrs.is_some_and(|a| {
            self.mount
                .known
                .inodes
                .has_seen(ino, Status::of_event(&a), ctime)
        })
    }

    /// Whether the file of node `ino`, which `ev` names by its inode number as modified,
    /// may have a size the kernel does not hold (`renew_if_size_is_local` then gives it a
    /// new node). Always when the event's name leads the kernel to that node: the kernel
    /// keeps its own size whatever the mount saw since. Under another name, only when the
    /// event shows another size than the mount saw, no older than that: the late event of
    /// a removed file whose inode number the host gave to a new one names the new one's
    /// node, and renewing it split a hard link made next into two kernel inodes, whose
    /// chown through one name left the other's attributes stale (issue 24). A host change
    /// through a hard link the guest never looked up that leaves the size as the mount saw
    /// it is missed (the kernel's size may then be stale until the node is renewed).
    fn size_may_differ(&self, (dir, name): (u64, &[u8]), ino: u64, ev: &Event) -> bool {
        if self.mount.known.inodes.child(dir, name) == Some(ino) {
            return true;
        }
        let (Some(a), Some(seen)) = (ev.attrs, self.mount.known.inodes.status(ino)) else {
            return true;
        };
        a.size != seen.size && a.ctime_ns >= seen.ctime_ns
    }

    /// Notes the names `ev` names as told (see `OwnChanges::unechoed`).
    fn note_echoed(&self, ev: &Event) {
        let from = match &ev.kind {
            EventKind::Renamed { from } => Some(from),
            _ => None,
        };
        for (dir, name) in std::iter::once(&ev.path)
            .chain(from)
            .filter_map(|p| self.known_name(p))
        {
            self.mount.changes.echoed(dir, name);
        }
    }

    /// At a sync: names changed through the mount that no event has named since are
    /// checked with the server (the host may have undone the change within one window of
    /// the server's engine, which then tells nothing): the kernel's entry is kept if it
    /// still leads where the server's does, and the replica asks the server about them.
    fn check_unechoed(&self) {
        for (dir, name) in self.mount.changes.take_unechoed() {
            self.mount.known.replicas.stale(dir, &name);
            self.inval_entry(dir, &name);
        }
    }

    /// `path` as a name in a directory node, if the kernel holds the directory.
    fn known_name<'p>(&self, path: &'p RelPath) -> Option<(u64, &'p [u8])> {
        Some((self.known_parent(path)?, path.file_name()))
    }

    /// Whether `ev` is the echo of a change made through this mount (counted as such):
    /// names it changed lately, and what the kernel was told agrees with the event already
    /// (a name the event gives leads to the event's file, with the attributes the mount
    /// last saw of it; a name it takes leads elsewhere or nowhere). The host changing the
    /// same names or files soon after disagrees (an event stats the file when it is
    /// published, and a creation and a chmod right after come as one event), and its
    /// event is applied as any other: taking every event on those names for an echo left
    /// the kernel with names the server no longer had, and attributes it had changed,
    /// even after a sync.
    ///
    /// The engine tells a name whose file was replaced as the old file's removal and, in
    /// the next event, the new file's creation (or a rename onto it): a removal whose
    /// next event gives the name the file the guest holds is the echo of the mount's own
    /// replacement (`git checkout`, an editor's save) when that next event is.
    fn is_echo(&self, ev: &Event, next: Option<&Event>) -> bool {
        let at = |path| self.known_name(path);
        let own = |(dir, name): (u64, &[u8])| self.mount.changes.is_own_name(dir, name);
        let gives = |n, ev| own(n) && self.leads_to(n, ev);
        let takes = |n| own(n) && self.kernel_file(n.0, n.1).is_none();
        let replaced_in = |n| {
            next.is_some_and(|next| {
                let onto = matches!(next.kind, EventKind::Created | EventKind::Renamed { .. });
                onto && next.path == ev.path && gives(n, next)
            })
        };
        let echo = match &ev.kind {
            EventKind::Created => at(&ev.path).is_some_and(|n| gives(n, ev)),
            EventKind::Removed => at(&ev.path).is_some_and(|n| takes(n) || replaced_in(n)),
            EventKind::Renamed { from } => match (at(from), at(&ev.path)) {
                (Some(from), Some(to)) => takes(from) && gives(to, ev),
                (Some(from), None) => takes(from),
                (None, Some(to)) => gives(to, ev),
                (None, None) => false,
            },
            _ => false,
        };
        if echo {
            self.mount.changes.stats.own.fetch_add(1, Relaxed);
        }
        echo
    }

    /// For a name that now exists on the server: drops what the kernel may hold for it, a
    /// negative entry (a name this mount answered "missing") or another file. A name the
    /// kernel never asked about is left alone: nothing is cached, and invalidating it could
    /// only race with a process looking it up right now (and, for a directory it then
    /// works in, detach it).
    fn drop_stale_entry(&self, dir: u64, name: &[u8]) {
        if self.kernel_entry(dir, name).is_some() || self.mount.changes.was_missing(dir, name) {
            self.inval_entry(dir, name);
        }
    }

    /// The file (qid path) the kernel's entry for `name` in `dir` leads to, if it has one.
    fn kernel_entry(&self, dir: u64, name: &[u8]) -> Option<u64> {
        self.kernel_file(dir, name).map(|(qid, _)| qid)
    }

    /// As `kernel_entry`, with the file's type: a `qid.path` the host reused for a file
    /// of another type (a directory removed, a file created) is another file.
    fn kernel_file(&self, dir: u64, name: &[u8]) -> Option<(u64, u32)> {
        self.mount.known.inodes.named(dir, name)
    }

    fn created(&self, ev: &Event) {
        let name = ev.path.file_name();
        let Some(dir) = self.known_parent(&ev.path) else {
            return;
        };
        if event_file(ev).is_some() && self.kernel_file(dir, name) == event_file(ev) {
            // The guest looked the new file up before the event came: nothing is stale
            // (and invalidating a directory in use would detach it from its users).
            return;
        }
        self.drop_stale_entry(dir, name);
        let (Some(attrs), true) = (ev.attrs, self.watchers.any_watched(&[dir])) else {
            return;
        };
        let Some(on_mount) = self.replayer.parent_of(&ev.path) else {
            return;
        };
        self.counted(self.replayer.create(&on_mount, name, attrs.mode));
    }

    fn removed(&self, ev: &Event) {
        let name = ev.path.file_name();
        let Some(dir) = self.known_parent(&ev.path) else {
            return;
        };
        let known = self.kernel_file(dir, name);
        if known.is_some() && event_file(ev).is_some() && known != event_file(ev) {
            // The name leads the guest to another file, newer than the event's stat (made
            // after it), or made and removed since the file the event names (the engine
            // tells only what a name is now): the server says which.
            return self.inval_entry(dir, name);
        }
        // Replayed where watched; elsewhere the kernel just forgets the name.
        let replay = self.watchers.any_watched(&[dir]);
        let replayed = replay
            && self.replayer.parent_of(&ev.path).is_some_and(|on_mount| {
                let is_dir = ev.attrs.is_some_and(|a| a.is_dir());
                let mode = ev.attrs.map_or(libc::S_IFREG, |a| a.mode);
                self.counted(self.replayer.remove(&on_mount, name, mode, is_dir))
            });
        if !replayed {
            // Nobody to tell, or the replay failed: the kernel just forgets the name.
            self.inval_entry(dir, name);
        }
    }

    fn changed(&self, ev: &Event) {
        let modified = matches!(ev.kind, EventKind::Modified);
        // The engine tells what a name is now: a file removed and another made under its
        // name that took its inode number shows as a change of that number. If the
        // guest's entry leads to another file, the server says which is right; one the
        // mount answered missing meanwhile goes.
        let name = ev.path.file_name();
        if let Some(dir) = self.known_parent(&ev.path) {
            match self.kernel_file(dir, name) {
                None => self.drop_stale_entry(dir, name),
                Some(known) if event_file(ev).is_some_and(|f| f != known) => {
                    self.inval_entry(dir, name)
                }
                Some(_) => {}
            }
        }
        let node = ev.qid.and_then(|q| self.mount.known.inodes.ino_of(q));
        if let Some(ino) = node {
            // Pages go only for content changes this mount did not make itself: the
            // event shows the file as the mount's own change left it.
            let own = self.mount.changes.is_own_node(ino) && self.as_seen(ino, ev, true);
            self.inval_inode(ino, modified && !own);
            if own {
                self.mount.changes.stats.own.fetch_add(1, Relaxed);
                return;
            }
        }
        let Some(dir) = self.known_parent(&ev.path) else {
            return;
        };
        if !self.watchers.any_watched(&[dir, node.unwrap_or(0)]) {
            let regular = ev.attrs.is_some_and(|a| a.file_type() == libc::S_IFREG);
            if let (true, true, Some(ino)) = (modified, regular, node) {
                if self.size_may_differ((dir, ev.path.file_name()), ino, ev) {
                    self.renew_if_size_is_local(dir, ev.path.file_name(), ino);
                }
            }
            return;
        }
        let Some(on_mount) = self.replayer.parent_of(&ev.path) else {
            return;
        };
        self.counted(
            self.replayer
                .touch(&on_mount, ev.path.file_name(), modified),
        );
    }

    fn renamed(&self, from: &RelPath, ev: &Event) {
        let (from_name, to_name) = (from.file_name(), ev.path.file_name());
        let (from_dir, to_dir) = (self.known_parent(from), self.known_parent(&ev.path));
        let Some(from_dir) = from_dir else {
            // The kernel never saw the old name: to it, this is a creation.
            return self.created(ev);
        };
        let from_known = self.kernel_file(from_dir, from_name);
        let to_known = to_dir.and_then(|d| self.kernel_file(d, to_name));
        let same = |known: Option<(u64, u32)>| known.is_some() && known == event_file(ev);
        if from_known.is_some() && !same(from_known) {
            // The old name already leads the guest to another file: only the new name can
            // be news.
            if let (Some(to_dir), false) = (to_dir, same(to_known)) {
                self.drop_stale_entry(to_dir, to_name);
            }
            return;
        }
        if same(to_known) {
            // The guest found the file under its new name already: drop the old one.
            return self.inval_entry(from_dir, from_name);
        }
        // Its open files read on: a node without a fid is walked from the new name (the
        // old one leads the kernel to the event's file here, or nowhere).
        if let (Some(to_dir), Some(ino)) =
            (to_dir, self.mount.known.inodes.child(from_dir, from_name))
        {
            self.mount
                .known
                .inodes
                .moved(ino, (from_dir, from_name), (to_dir, to_name));
        }
        if let Some(to_dir) = to_dir {
            self.drop_stale_entry(to_dir, to_name);
        }
        // Replayed where watched (the kernel then moves its entry: open files and working
        // directories follow, as locally); elsewhere the old name is dropped.
        let replay = self.watchers.any_watched(&[from_dir, to_dir.unwrap_or(0)]);
        let ends = (
            self.replayer.parent_of(from),
            self.replayer.parent_of(&ev.path),
        );
        let replayed = match (replay, ends) {
            (true, (Some(f), Some(t))) => self.counted(self.replayer.rename(
                (&f, from_name),
                (&t, to_name),
                ev.attrs,
            )),
            _ => false,
        };
        if !replayed {
            self.inval_entry(from_dir, from_name);
        }
    }

    /// With the writeback cache the kernel keeps its own idea of a file's size, whatever
    /// the server says: only a new inode takes the server's. So the file's node is retired
    /// (the next lookup makes a new one; open files keep the old) and its entry dropped, a
    /// regular file's entry, never anyone's working directory.
    fn renew_if_size_is_local(&self, dir: u64, name: &[u8], ino: u64) {
        if !self.mount.writeback {
            return;
        }
        self.mount.known.inodes.retire(ino);
        self.drop_entry(dir, name);
    }

    /// Whether `name` in directory node `dir` still leads to the file with `qid_path` and
    /// type `format` on the server (one Twalk).
    fn still_leads_to(&self, dir: u64, name: &[u8], (qid_path, format): (u64, u32)) -> bool {
        let Some(dir_fid) = self.mount.known.inodes.fid(dir) else {
            return false;
        };
        let flag = |qid: &crossfs_wire::Qid, bit: u8| qid.ty & bit != 0;
        crate::remote::walk_name(&self.mount.client, &dir_fid, name).is_ok_and(|(_, qid)| {
            qid.path == qid_path
                && flag(&qid, crossfs_wire::QID_TYPE_DIR) == (format == libc::S_IFDIR)
                && flag(&qid, crossfs_wire::QID_TYPE_SYMLINK) == (format == libc::S_IFLNK)
        })
    }

    /// Invalidates what changed beneath `path`: names that no longer lead where the kernel
    /// thinks, names cached as missing, and every known file's attributes and pages, so the
    /// kernel reads the subtree afresh.
    fn rescan(&self, path: &RelPath) {
        let top = if path.is_root() {
            Some(ROOT)
        } else {
            self.replayer.node_of(path)
        };
        let Some(top) = top else { return };
        let known = self.mount.known.inodes.subtree(top);
        let writeback = self.mount.writeback;
        let mut dirs = vec![top];
        for k in &known {
            if !self.still_leads_to(k.dir, &k.name, (k.qid_path, k.format)) {
                self.inval_entry(k.dir, &k.name);
            } else if writeback && k.format == libc::S_IFREG {
                // What size the kernel holds is unknown (it ignores the server's sizes for
                // inodes it has, whatever the mount told it since): a new inode takes the
                // server's.
                self.renew_if_size_is_local(k.dir, &k.name, k.ino);
            }
            self.inval_inode(k.ino, true);
            dirs.push(k.ino);
        }
        for dir in dirs {
            for name in self.mount.changes.take_missing(dir) {
                self.inval_entry(dir, &name);
            }
        }
        self.inval_inode(top, true);
    }
}

impl super::ChangeState {
    fn is_own_name(&self, dir: u64, name: &[u8]) -> bool {
        super::is_recent(&self.own.names, &(dir, name.to_vec()))
    }

    fn is_own_node(&self, ino: u64) -> bool {
        super::is_recent(&self.own.nodes, &ino)
    }
}

/// The file an event names: its `qid.path` and type, when the event carries attributes.
fn event_file(ev: &Event) -> Option<(u64, u32)> {
    ev.attrs.map(|a| (a.ino, a.mode & libc::S_IFMT))
}
