//! The feed thread: reads the event stream and applies each event (invalidate, then replay).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossfs_client::{Client, Fid};
use crossfs_events::{Event, EventKind, RelPath};
use fuser::{INodeNo, Notifier};

use super::replay::Replayer;
use crate::fs::Shared;
use crate::inode::ROOT;

/// A running feed; stopping it closes the event connection and joins the thread.
pub(crate) struct Feed {
    client: Arc<Client>,
    thread: Option<JoinHandle<()>>,
}

impl Feed {
    /// Starts the feed thread on an attached event fid of `client`.
    pub(crate) fn start(
        shared: Arc<Shared>,
        notifier: Notifier,
        mountpoint: PathBuf,
        client: Arc<Client>,
        fid: Fid,
    ) -> std::io::Result<Feed> {
        let _ = shared.changes.link.set((client.clone(), fid));
        shared.changes.enabled.store(true, Relaxed);
        let reader = client.clone();
        let thread = std::thread::Builder::new()
            .name("crossfs-changes".into())
            .spawn(move || {
                let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
                shared.changes.replay_tid.store(tid, Relaxed);
                let applier = Applier {
                    shared: &shared,
                    notifier,
                    replayer: Replayer {
                        shared: &shared,
                        mountpoint,
                    },
                };
                applier.run(&reader, fid);
                shared.changes.replay_tid.store(0, Relaxed);
                shared.changes.enabled.store(false, Relaxed);
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
    shared: &'a Arc<Shared>,
    notifier: Notifier,
    replayer: Replayer<'a>,
}

impl Applier<'_> {
    fn run(&self, client: &Client, fid: Fid) {
        let max = client.max_io();
        loop {
            let data = match client.read(fid, 0, max) {
                Ok(d) => d,
                Err(e) => {
                    if client.is_connected() {
                        tracing::warn!(
                            "change events stopped: {e}; caches follow their timeouts only"
                        );
                    }
                    return;
                }
            };
            for line in data.split_inclusive(|&b| b == b'\n') {
                match Event::from_json_line(line) {
                    Ok(ev) => self.apply(&ev),
                    Err(e) => tracing::warn!("unreadable change event: {e}"),
                }
            }
        }
    }

    fn apply(&self, ev: &Event) {
        let c = &self.shared.changes;
        c.stats.received.fetch_add(1, Relaxed);
        tracing::debug!("change event {ev}");
        match &ev.kind {
            EventKind::Sync { cookie } => c.marker_applied(*cookie),
            EventKind::Warning { message } => tracing::warn!("server: {message}"),
            EventKind::Rescan { reason } => {
                tracing::info!("rescan of '{}' ({reason})", ev.path);
                c.stats.rescans.fetch_add(1, Relaxed);
                self.rescan(&ev.path);
            }
            EventKind::Created => self.created(ev),
            EventKind::Removed => self.removed(ev),
            EventKind::Modified | EventKind::Attrib => self.changed(ev),
            EventKind::Renamed { from } => self.renamed(from, ev),
        }
    }

    fn inval_entry(&self, dir: u64, name: &[u8]) {
        self.shared.changes.forget_missing(dir, name);
        if self
            .notifier
            .inval_entry(INodeNo(dir), OsStr::from_bytes(name))
            .is_ok()
        {
            self.shared
                .changes
                .stats
                .invalidations
                .fetch_add(1, Relaxed);
        }
    }

    /// `pages`: drop the cached data too, not only the attributes.
    fn inval_inode(&self, ino: u64, pages: bool) {
        let offset = if pages { 0 } else { -1 };
        if self.notifier.inval_inode(INodeNo(ino), offset, 0).is_ok() {
            self.shared
                .changes
                .stats
                .invalidations
                .fetch_add(1, Relaxed);
        }
    }

    fn counted(&self, replay: impl FnOnce() -> std::io::Result<()>) {
        let stats = &self.shared.changes.stats;
        match replay() {
            Ok(()) => stats.replayed.fetch_add(1, Relaxed),
            Err(e) => {
                tracing::debug!("replay failed: {e}");
                stats.replay_failures.fetch_add(1, Relaxed)
            }
        };
    }

    /// Whether `path` was created, removed or renamed through this mount lately, judged
    /// from what the mount already knows (no system call: such events are frequent while
    /// the guest itself works, and must cost next to nothing).
    fn is_own(&self, path: &RelPath) -> bool {
        let Some(parent) = path.parent() else {
            return false;
        };
        let mut dir = ROOT;
        for name in parent.components() {
            match self.shared.inodes.child(dir, name) {
                Some(ino) => dir = ino,
                None => return false,
            }
        }
        let own = self.shared.changes.is_own_name(dir, path.file_name());
        if own {
            self.shared.changes.stats.own.fetch_add(1, Relaxed);
        }
        own
    }

    fn created(&self, ev: &Event) {
        if self.is_own(&ev.path) {
            return;
        }
        let Some(dir) = self.replayer.parent_of(&ev.path) else {
            return;
        };
        let name = ev.path.file_name();
        self.inval_entry(dir.ino, name);
        let Some(attrs) = ev.attrs else { return };
        self.counted(|| self.replayer.create(&dir, name, attrs.mode));
    }

    fn removed(&self, ev: &Event) {
        if self.is_own(&ev.path) {
            return;
        }
        let Some(dir) = self.replayer.parent_of(&ev.path) else {
            return;
        };
        let name = ev.path.file_name();
        let is_dir = ev.attrs.is_some_and(|a| a.is_dir());
        let mode = ev.attrs.map_or(libc::S_IFREG, |a| a.mode);
        self.counted(|| {
            let r = self.replayer.remove(&dir, name, mode, is_dir);
            if r.is_err() {
                // Not replayed: at least make the kernel ask again.
                self.inval_entry(dir.ino, name);
            }
            r
        });
    }

    fn changed(&self, ev: &Event) {
        let modified = matches!(ev.kind, EventKind::Modified);
        let node = ev.qid.and_then(|q| self.shared.inodes.ino_of(q));
        if let Some(ino) = node {
            // Pages go only for content changes this mount did not make itself.
            let own = self.shared.changes.is_own_node(ino);
            self.inval_inode(ino, modified && !own);
            if own {
                self.shared.changes.stats.own.fetch_add(1, Relaxed);
                return;
            }
        }
        let Some(dir) = self.replayer.parent_of(&ev.path) else {
            return;
        };
        let name = ev.path.file_name();
        self.counted(|| self.replayer.touch(&dir, name, modified));
    }

    fn renamed(&self, from: &RelPath, ev: &Event) {
        if self.is_own(from) || self.is_own(&ev.path) {
            return;
        }
        let (Some(from_dir), Some(to_dir)) = (
            self.replayer.parent_of(from),
            self.replayer.parent_of(&ev.path),
        ) else {
            // One side is unknown here: what the kernel can see is a creation or a removal.
            return if self.replayer.parent_of(&ev.path).is_some() {
                self.created(ev)
            } else {
                let mut gone = ev.clone();
                gone.path = from.clone();
                self.removed(&gone)
            };
        };
        let (from_name, to_name) = (from.file_name(), ev.path.file_name());
        self.inval_entry(to_dir.ino, to_name);
        self.counted(|| {
            self.replayer
                .rename((&from_dir, from_name), (&to_dir, to_name), ev.attrs)
        });
    }

    /// Invalidates everything known beneath `path` (names, negative names, attributes and
    /// pages), so the kernel reads it afresh.
    fn rescan(&self, path: &RelPath) {
        let top = if path.is_root() {
            Some(ROOT)
        } else {
            self.replayer.node_of(path)
        };
        let Some(top) = top else { return };
        let known = self.shared.inodes.subtree(top);
        let mut dirs = vec![top];
        for (dir, name, ino) in &known {
            self.inval_entry(*dir, name);
            self.inval_inode(*ino, true);
            dirs.push(*ino);
        }
        for dir in dirs {
            for name in self.shared.changes.take_missing(dir) {
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
