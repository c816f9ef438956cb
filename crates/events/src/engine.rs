//! The event thread: reads the watcher, coalesces, turns flushed paths into events by
//! comparing the snapshot with the disk, publishes, polls what the kernel does not watch,
//! handles overflows and sync cookies.
//!
//! Invariant: every published change is exactly a transition of `snapshot`, so a subscriber
//! applying the events holds the snapshot; and every real change leaves a hint (or a rescan)
//! that brings the snapshot back to the disk.

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::beneath::Root;
use crate::coalesce::{Coalescer, Flushed, Hints, Window};
use crate::event::{Change, DirAttrs, EventKind};
use crate::hub::{lock, HubState};
use crate::path::RelPath;
use crate::snapshot::{compare, diff, Snapshot};
use crate::watch::{Raw, Watcher};

/// The longest the thread sleeps without a reason to wake.
const IDLE: Duration = Duration::from_secs(1);
/// Most names remembered as another link of a file (see `Engine::links_made`); past it,
/// all are forgotten (what is lost: the change time of a link made and removed within one
/// window).
const LINKS_MADE_LIMIT: usize = 4096;
/// Most names remembered in `Engine::told_gone`; past it, all are forgotten (what is lost:
/// a rename of one of them reports its source's removal a second time).
const TOLD_GONE_LIMIT: usize = 4096;
/// The least time between two reads of the watcher (at most a quarter of the quiet
/// window): a burst of changes is taken in one wakeup every few milliseconds rather than
/// one per event, which on a small machine is CPU taken from the program making them
/// (about 19 us of this thread's CPU per event before, most of it waking up and sleeping).
const READ_GAP: Duration = Duration::from_millis(2);
/// How long the first change after a quiet period waits for what comes with it; the
/// kernel queue is read once more just before it goes (see `Engine::run`).
const FIRST_CHANGE_SETTLE: Duration = Duration::from_micros(500);

pub(crate) struct Engine {
    shared: Arc<HubState>,
    root: Root,
    watcher: Box<dyn Watcher>,
    snapshot: Snapshot,
    coalescer: Coalescer,
    wake_r: OwnedFd,
    raws: Vec<Raw>,
    /// Cookie requests not yet answered, with when they were made.
    cookies_pending: Vec<(u64, Instant)>,
    cookies_seen: HashSet<u64>,
    overflows: VecDeque<Instant>,
    backoff_until: Option<Instant>,
    next_poll: Instant,
    /// When the watcher was last read, and the least time until the next read.
    last_read: Instant,
    read_gap: Duration,
    /// Names made as another link of a file, with the file as it was then. A link made and
    /// removed within one window changes nothing but that file's link count and change
    /// time, which no event of its other names tells (the kernel tells only a watch on
    /// the file itself): the removal carries the file, so subscribers drop what they know
    /// of it. Filled when the creation is read, emptied when the name is flushed.
    links_made: HashMap<RelPath, crate::Attrs>,
    /// Names published as removed that subscribers were never told were there (made and
    /// gone within one window), until a rename from them is flushed or they are made again.
    told_gone: HashSet<RelPath>,
}

impl Engine {
    pub(crate) fn new(
        shared: Arc<HubState>,
        root: Root,
        watcher: Box<dyn Watcher>,
        snapshot: Snapshot,
        wake_r: OwnedFd,
    ) -> Self {
        let c = &shared.config;
        let read_gap = READ_GAP.min(c.quiet / 4);
        let window = Window {
            quiet: c.quiet,
            settle: c.first_at_once.then(|| FIRST_CHANGE_SETTLE.min(c.quiet)),
            max_delay: c.max_delay,
            limit: c.burst_limit,
        };
        let next_poll = Instant::now() + c.poll_interval;
        Self {
            coalescer: Coalescer::new(window),
            shared,
            root,
            watcher,
            snapshot,
            wake_r,
            raws: Vec::new(),
            cookies_pending: Vec::new(),
            cookies_seen: HashSet::new(),
            overflows: VecDeque::new(),
            backoff_until: None,
            next_poll,
            last_read: Instant::now(),
            read_gap,
            links_made: HashMap::new(),
            told_gone: HashSet::new(),
        }
    }

    fn control(&self) -> &[u8] {
        &self.shared.config.cookie_prefix
    }

    /// Whether the kernel is currently telling us about changes.
    fn kernel_active(&self) -> bool {
        self.backoff_until.is_none() && self.watcher.fd().is_some()
    }

    /// Subtrees that only polling sees.
    fn polled(&self) -> Vec<RelPath> {
        if self.kernel_active() {
            self.watcher.unwatched()
        } else {
            vec![RelPath::root()]
        }
    }

    pub(crate) fn run(mut self) {
        while !self.shared.stop.load(Ordering::SeqCst) {
            let readable = self.wait();
            let now = Instant::now();
            // A quiet period's first change is about to go: read what came with it (the
            // write after a create), whatever the gap between reads.
            let settling = self.coalescer.first_change_due(now)
                && !self.shared.paused.load(Ordering::SeqCst)
                && self.kernel_active();
            if readable || settling {
                self.last_read = now;
                if let Err(e) = self.watcher.read_into(&self.root, &mut self.raws) {
                    tracing::warn!("reading {:?} events: {e}", self.watcher.kind());
                }
            }
            let (reported, cookies) = {
                let mut inbox = lock(&self.shared.inbox);
                (
                    std::mem::take(&mut inbox.raws),
                    std::mem::take(&mut inbox.cookies),
                )
            };
            self.raws.extend(reported);
            let mut raws = std::mem::take(&mut self.raws);
            for raw in raws.drain(..) {
                self.ingest(raw, now);
            }
            self.raws = raws;
            self.cookies_pending
                .extend(cookies.into_iter().map(|id| (id, now)));
            self.tick(now);
        }
    }

    /// Sleeps until the watcher has something, the wake pipe is written, or the next
    /// deadline. Returns whether the watcher is readable.
    fn wait(&mut self) -> bool {
        let now = Instant::now();
        let mut deadline = now + IDLE;
        if let Some(d) = self.coalescer.next_deadline() {
            deadline = deadline.min(d);
        }
        if !self.polled().is_empty() {
            deadline = deadline.min(self.next_poll);
        }
        if let Some(b) = self.backoff_until {
            deadline = deadline.min(b);
        }
        for (_, at) in &self.cookies_pending {
            deadline = deadline.min(*at + self.shared.config.cookie_grace);
        }
        let paused = self.shared.paused.load(Ordering::SeqCst);
        let next_read = self.last_read + self.read_gap;
        let watcher_fd = if paused || self.backoff_until.is_some() {
            None
        } else if now < next_read {
            // Whatever arrives meanwhile waits in the kernel's queue for the next read.
            deadline = deadline.min(next_read);
            None
        } else {
            self.watcher.fd()
        };
        let left = deadline.saturating_duration_since(now);
        let ts = Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = vec![PollFd::new(&self.wake_r, PollFlags::IN)];
        if let Some(fd) = watcher_fd {
            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
        }
        if poll(&mut fds, Some(&ts)).is_err() {
            return false;
        }
        let readable = fds.get(1).is_some_and(|f| !f.revents().is_empty());
        if !fds[0].revents().is_empty() {
            let mut sink = [0u8; 64];
            while matches!(rustix::io::read(&self.wake_r, &mut sink), Ok(n) if n > 0) {}
        }
        readable
    }

    fn is_control(&self, path: &RelPath) -> bool {
        path.first_component().starts_with(self.control())
    }

    fn ingest(&mut self, raw: Raw, now: Instant) {
        match raw {
            Raw::Change { path, hints } => {
                if self.is_control(&path) {
                    if hints.contains(Hints::CREATED) {
                        if let Some(id) = self.shared.cookies.parse(&path, self.shared.epoch) {
                            self.cookies_seen.insert(id);
                        }
                    }
                } else if !path.is_root() {
                    if hints.contains(Hints::CREATED) {
                        self.note_link(&path);
                    }
                    self.coalescer.push(path, hints, now);
                }
            }
            Raw::Rename { from, to } => match (self.is_control(&from), self.is_control(&to)) {
                (false, false) => self.coalescer.push_rename(from, to, now),
                (false, true) => self.coalescer.push(from, Hints::REMOVED, now),
                (true, false) => self.coalescer.push(to, Hints::CREATED, now),
                (true, true) => {}
            },
            Raw::Overflow => self.overflowed(now),
            Raw::Rescan { path } => {
                self.coalescer.collapse(path, "requested", false, now);
            }
        }
    }

    /// Remembers `path` if it was made as another link of a file (a file with more than one
    /// link, other than a directory), while it is still there to see.
    fn note_link(&mut self, path: &RelPath) {
        let Ok(Some(st)) = self.root.lstat_whole(path) else {
            return;
        };
        let a = crate::Attrs::from_stat(&st);
        if a.is_dir() || st.st_nlink < 2 {
            return;
        }
        if self.links_made.len() >= LINKS_MADE_LIMIT {
            self.links_made.clear();
        }
        self.links_made.insert(path.clone(), a);
    }

    /// A kernel queue overflow: rescan everything against the snapshot; too many in a row
    /// and we poll for a while instead.
    fn overflowed(&mut self, now: Instant) {
        let cfg = &self.shared.config;
        self.overflows.push_back(now);
        self.shared.stats.overflows.fetch_add(1, Ordering::Relaxed);
        while self
            .overflows
            .front()
            .is_some_and(|t| now.duration_since(*t) > cfg.overflow_window)
        {
            self.overflows.pop_front();
        }
        tracing::warn!(
            "{:?} event queue overflowed; rescanning the export",
            self.watcher.kind()
        );
        self.coalescer
            .collapse(RelPath::root(), "kernel queue overflow", false, now);
        if self.overflows.len() >= cfg.overflow_threshold && self.backoff_until.is_none() {
            let backoff = cfg.overflow_backoff;
            let message = format!(
                "kernel event queue overflowed {} times in {:?}; polling every {:?} for {:?}",
                self.overflows.len(),
                cfg.overflow_window,
                cfg.poll_interval,
                backoff
            );
            tracing::warn!("{message}");
            self.watcher.disarm();
            self.shared.stats.backoffs.fetch_add(1, Ordering::Relaxed);
            self.backoff_until = Some(now + backoff);
            self.next_poll = now + cfg.poll_interval;
            self.shared.publish(vec![Change::new(
                EventKind::Warning { message },
                RelPath::root(),
                None,
            )]);
        }
    }

    /// Time-driven work: re-arming, polling, cookies, flushing.
    fn tick(&mut self, now: Instant) {
        let mut out = Vec::new();
        if self.backoff_until.is_some_and(|b| b <= now) {
            self.rearm(now, &mut out);
        }
        if now >= self.next_poll {
            self.next_poll = now + self.shared.config.poll_interval;
            for sub in self.polled() {
                self.rescan(&sub, "poll", false, &mut out);
            }
        }
        let cookies = self.ready_cookies(now);
        let force = !cookies.is_empty();
        if force && cookies.iter().any(|id| !self.cookies_seen.contains(id)) {
            // The watcher did not (or cannot) see the cookie: a rescan gives the guarantee.
            self.coalescer.collapse(RelPath::root(), "sync", false, now);
        }
        for f in self.coalescer.take_due(now, force) {
            self.apply(f, &mut out);
        }
        if force && self.kernel_active() {
            for sub in self.watcher.unwatched() {
                self.rescan(&sub, "sync", false, &mut out);
            }
        }
        for &id in &cookies {
            out.push(Change::new(
                EventKind::Sync { cookie: id },
                RelPath::root(),
                None,
            ));
            // Removed before the marker goes out: the cookie moved the root's times, and a
            // client that refreshes them on the marker must find them as they stay.
            self.shared.cookies.remove(self.shared.epoch, id);
        }
        self.attach_dirs(&mut out);
        self.shared.publish(out);
        for id in cookies {
            self.cookies_seen.remove(&id);
            self.shared.syncs.complete(id);
        }
    }

    /// Gives each change that adds, removes or renames a name the attributes of the
    /// directories it changed, as they are now, after it (one stat a directory a batch):
    /// a client that made the change can tell its own from a later one.
    fn attach_dirs(&self, out: &mut [Change]) {
        let mut seen: HashMap<RelPath, Option<DirAttrs>> = HashMap::new();
        let mut stat = |path: &RelPath| -> Option<DirAttrs> {
            let dir = path.parent()?;
            *seen
                .entry(dir)
                .or_insert_with_key(|dir| self.root.dir_attrs(dir))
        };
        for c in out.iter_mut() {
            match &c.kind {
                EventKind::Created | EventKind::Removed => c.dir = stat(&c.path),
                EventKind::Renamed { from } => {
                    c.from_dir = stat(from);
                    c.dir = stat(&c.path);
                }
                _ => {}
            }
        }
    }

    fn ready_cookies(&mut self, now: Instant) -> Vec<u64> {
        let grace = self.shared.config.cookie_grace;
        let active = self.kernel_active();
        let mut ready = Vec::new();
        self.cookies_pending.retain(|&(id, at)| {
            let go = !active || self.cookies_seen.contains(&id) || now >= at + grace;
            if go {
                ready.push(id);
            }
            !go
        });
        ready
    }

    fn rearm(&mut self, now: Instant, out: &mut Vec<Change>) {
        match self.watcher.arm(&self.root) {
            Ok(()) => {
                self.backoff_until = None;
                self.overflows.clear();
                self.coalescer
                    .collapse(RelPath::root(), "re-armed", false, now);
                let message = format!("{:?} watcher re-armed", self.watcher.kind());
                tracing::info!("{message}");
                out.push(Change::new(
                    EventKind::Warning { message },
                    RelPath::root(),
                    None,
                ));
            }
            Err(e) => {
                tracing::warn!("re-arming {:?}: {e}", self.watcher.kind());
                self.backoff_until = Some(now + self.shared.config.overflow_backoff);
            }
        }
    }

    fn apply(&mut self, f: Flushed, out: &mut Vec<Change>) {
        match f {
            Flushed::Path { path, hints } => self.reconcile(&path, hints, out),
            Flushed::Rename { from, to } => self.rename(&from, &to, out),
            Flushed::Rescan {
                path,
                reason,
                announce,
            } => self.rescan(&path, &reason, announce, out),
        }
    }

    /// Publishes how `path` differs from what subscribers were told, and records it.
    fn reconcile(&mut self, path: &RelPath, hints: Hints, out: &mut Vec<Change>) {
        if path.is_root() || self.is_control(path) {
            return;
        }
        let now = match self.root.lstat(path) {
            Ok(now) => now,
            Err(e) => {
                // Dropping the change would leave subscribers wrong until some later event
                // happened to touch this path: tell them to re-read the parent instead.
                tracing::warn!(%path, "cannot stat: {e}; announcing a rescan of its parent");
                let parent = path.parent().unwrap_or_default();
                self.compare_subtree(&parent, "unreadable", true, out);
                return;
            }
        };
        let old = self.snapshot.get(path).copied();
        let link = self.links_made.remove(path);
        match (old, now) {
            // A file without a name changed: the kernel tells the changes of an `O_TMPFILE`
            // file (made by this server, to be linked once marked) as a child "#INO" of its
            // directory, a name no lookup can reach. Nothing to publish.
            (None, None) if !hints.names() => {}
            // Here and gone within the window: a subscriber may have looked it up meanwhile.
            // A link of a file carries the file (its link count and change time moved).
            (None, None) => {
                self.tell_gone(path);
                out.push(Change::new(EventKind::Removed, path.clone(), link));
            }
            (Some(o), None) => {
                self.snapshot.remove_subtree(path);
                out.push(Change::new(EventKind::Removed, path.clone(), Some(o)));
            }
            (None, Some(_)) => self.create(path, out),
            (Some(o), Some(a)) if o.ino != a.ino || o.file_type() != a.file_type() => {
                self.snapshot.remove_subtree(path);
                out.push(Change::new(EventKind::Removed, path.clone(), Some(o)));
                self.create(path, out);
            }
            (Some(o), Some(a)) => {
                self.snapshot.insert(path.clone(), a);
                let modified = hints.contains(Hints::MODIFIED);
                let attrib = hints.contains(Hints::ATTRIB);
                if let Some(kind) = compare(&o, &a, modified, attrib) {
                    out.push(Change::new(kind, path.clone(), Some(a)));
                }
            }
        }
    }

    /// Remembers that `path`'s removal was published though it was never published as there.
    fn tell_gone(&mut self, path: &RelPath) {
        if self.told_gone.len() >= TOLD_GONE_LIMIT {
            self.told_gone.clear();
        }
        self.told_gone.insert(path.clone());
    }

    /// Makes sure the parent of `path` is known, publishing its creation first if not.
    fn ensure_parent(&mut self, path: &RelPath, out: &mut Vec<Change>) {
        if let Some(parent) = path.parent() {
            if !parent.is_root() && self.snapshot.get(&parent).is_none() {
                self.reconcile(&parent, Hints::CREATED, out);
            }
        }
    }

    /// Publishes the creation of `path` (absent from the snapshot) and, for a directory,
    /// of everything already inside it.
    fn create(&mut self, path: &RelPath, out: &mut Vec<Change>) {
        self.ensure_parent(path, out);
        if self.snapshot.get(path).is_some() {
            return; // the parent's scan found it
        }
        let scan = Snapshot::scan_root(&self.root, path, self.control());
        let Some(top) = scan.get(path).copied() else {
            // Gone again: as in `reconcile`, someone may have seen it meanwhile.
            self.tell_gone(path);
            out.push(Change::new(EventKind::Removed, path.clone(), None));
            return;
        };
        self.told_gone.remove(path);
        out.push(Change::new(EventKind::Created, path.clone(), Some(top)));
        let mut inside = diff(&self.snapshot.subtree(path), &scan);
        inside.retain(|c| &c.path != path);
        self.snapshot.replace_subtree(path, scan);
        if inside.len() > self.shared.config.burst_limit {
            out.push(rescan_event(path, "burst"));
        } else {
            out.extend(inside);
        }
    }

    fn rename(&mut self, from: &RelPath, to: &RelPath, out: &mut Vec<Change>) {
        let old = self.snapshot.get(from).copied();
        let now = self.root.lstat(to).ok().flatten();
        match (old, now) {
            (Some(o), Some(a)) if o.ino == a.ino && !to.is_within(from) => {
                self.ensure_parent(to, out);
                self.snapshot.move_subtree(from, to);
                self.snapshot.insert(to.clone(), a);
                let kind = EventKind::Renamed { from: from.clone() };
                out.push(Change::new(kind, to.clone(), Some(a)));
                if a.is_dir() {
                    // The snapshot's picture of the moved subtree is only what was published
                    // under `from`: changes inside it queued before the rename were reconciled
                    // at their old names after the move (and found nothing), and an earlier
                    // scan of `to`'s parent may already have published children that the move
                    // just replaced. Compare the destination with the disk.
                    self.refresh(to, "rename", out);
                }
            }
            (Some(o), None)
                if !to.is_within(from) && self.root.lstat(from).ok().flatten().is_none() =>
            {
                // Renamed on again (or removed) since: a later entry takes it from `to`.
                self.ensure_parent(to, out);
                self.snapshot.move_subtree(from, to);
                let kind = EventKind::Renamed { from: from.clone() };
                out.push(Change::new(kind, to.clone(), Some(o)));
            }
            _ => {
                let known = self.snapshot.get(to).is_some();
                // A source made and renamed within one window was published as removed when
                // the entry of its making was flushed (before the rename, a barrier):
                // saying so again would report one removal twice.
                let told = old.is_none() && self.told_gone.remove(from);
                if !(told && matches!(self.root.lstat(from), Ok(None))) {
                    self.reconcile(from, Hints::REMOVED, out);
                }
                self.reconcile(to, Hints::CREATED, out);
                // A directory already published at `to` (a scan found it there) keeps its
                // inode through `reconcile`, which looks at `to` alone: check what is inside.
                if known && self.snapshot.get(to).is_some_and(|a| a.is_dir()) {
                    self.refresh(to, "rename", out);
                }
            }
        }
    }

    /// Compares `path`'s subtree with the disk: publishes the differences, or one `Rescan`
    /// when announcing (a burst) or when there are too many of them.
    fn rescan(&mut self, path: &RelPath, reason: &str, announce: bool, out: &mut Vec<Change>) {
        if !path.is_root() && self.snapshot.get(path).is_none() {
            self.ensure_parent(path, out);
        }
        self.shared.stats.rescans.fetch_add(1, Ordering::Relaxed);
        // Names collapsed into the rescan are not flushed one by one.
        self.links_made.clear();
        self.compare_subtree(path, reason, announce, out);
    }

    /// Compares `path`'s subtree with the disk after the snapshot moved it there, publishing
    /// the differences (not counted as a rescan: it is part of applying the rename).
    fn refresh(&mut self, path: &RelPath, reason: &str, out: &mut Vec<Change>) {
        self.compare_subtree(path, reason, false, out);
    }

    fn compare_subtree(
        &mut self,
        path: &RelPath,
        reason: &str,
        announce: bool,
        out: &mut Vec<Change>,
    ) {
        let scan = Snapshot::scan_root(&self.root, path, self.control());
        let changes = diff(&self.snapshot.subtree(path), &scan);
        self.snapshot.replace_subtree(path, scan);
        if announce || changes.len() > self.shared.config.burst_limit {
            tracing::debug!(%path, reason, differences = changes.len(), "rescan announced");
            out.push(rescan_event(path, reason));
        } else {
            out.extend(changes);
        }
    }
}

fn rescan_event(path: &RelPath, reason: &str) -> Change {
    Change::new(
        EventKind::Rescan {
            reason: reason.to_owned(),
        },
        path.clone(),
        None,
    )
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.watcher.disarm();
    }
}
