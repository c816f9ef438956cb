//! Shared by the integration tests: a hub on a temporary export, and a model of the tree
//! built only from the events a subscriber receives.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use crossfs_events::{
    Attrs, BackendKind, Event, EventHub, EventKind, HubConfig, RelPath, Snapshot, Subscriber,
};

pub const CONTROL: &[u8] = b".crossfs-sync-";

/// Where fanotify can be tested: a directory on a filesystem that reports file ids.
/// `/tmp` is on the root ext4 filesystem here; the tempdir lives there.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// The default config with `backend`, but every change coalesced for the quiet window:
/// these tests assert exact event lists ("created" for a create and its write), which the
/// default's early first change would split whenever the writer is descheduled between
/// its create and its write for longer than the settle (a loaded machine).
/// `a_lone_change_is_not_held_for_the_quiet_window` tests the default.
pub fn config(backend: BackendKind) -> HubConfig {
    HubConfig {
        backend,
        first_at_once: false,
        ..HubConfig::default()
    }
}

/// Whether fanotify is usable here (root with CAP_SYS_ADMIN, fid-capable filesystem).
pub fn fanotify_available(dir: &Path) -> bool {
    EventHub::start(dir, config(BackendKind::Fanotify)).is_ok()
}

pub fn p(s: &str) -> RelPath {
    RelPath::new(s).unwrap()
}

/// The tree as a subscriber sees it.
pub struct Model {
    root: PathBuf,
    pub tree: Snapshot,
}

impl Model {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            tree: Snapshot::default(),
        }
    }

    /// Starts from the tree as it is now (for a subscriber attached to a non-empty export).
    pub fn from_disk(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            tree: Snapshot::scan(root, &RelPath::root(), CONTROL).unwrap(),
        }
    }

    pub fn apply(&mut self, ev: &Event) {
        match &ev.kind {
            EventKind::Created | EventKind::Modified | EventKind::Attrib => {
                if let Some(a) = ev.attrs {
                    self.tree.insert(ev.path.clone(), a);
                }
            }
            EventKind::Removed => self.tree.remove_subtree(&ev.path),
            EventKind::Renamed { from } => {
                self.tree.move_subtree(from, &ev.path);
                if let Some(a) = ev.attrs {
                    self.tree.insert(ev.path.clone(), a);
                }
            }
            EventKind::Rescan { .. } => {
                let fresh = Snapshot::scan(&self.root, &ev.path, CONTROL).unwrap();
                self.tree.replace_subtree(&ev.path, fresh);
            }
            EventKind::Sync { .. } | EventKind::Warning { .. } => {}
        }
    }

    /// Differences between the model and the disk (times are left out: a directory's times
    /// change with its children, which have their own events).
    pub fn differences(&self) -> Vec<String> {
        let disk = Snapshot::scan(&self.root, &RelPath::root(), CONTROL).unwrap();
        let key = |a: &Attrs| (a.ino, a.mode, if a.is_dir() { 0 } else { a.size });
        let mut out = Vec::new();
        for (path, a) in disk.iter() {
            match self.tree.get(path) {
                None => out.push(format!("missing {path}")),
                Some(m) if key(m) != key(a) => out.push(format!("stale {path}: {m:?} vs {a:?}")),
                Some(_) => {}
            }
        }
        for (path, _) in self.tree.iter() {
            if disk.get(path).is_none() {
                out.push(format!("extra {path}"));
            }
        }
        out
    }
}

/// Calls `sync_cookie` and returns every event up to (not including) its marker.
pub fn until_sync(hub: &EventHub, sub: &Subscriber) -> Vec<Event> {
    let cookie = hub.sync_cookie().expect("sync");
    let mut out = Vec::new();
    loop {
        let ev = sub
            .next_timeout(Duration::from_secs(10))
            .expect("the sync marker arrives");
        if ev.kind == (EventKind::Sync { cookie }) {
            return out;
        }
        out.push(ev);
    }
}

/// (kind, path) pairs, for compact assertions.
pub fn summary(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            let kind = match &e.kind {
                EventKind::Renamed { from } => format!("renamed from {from}"),
                EventKind::Rescan { reason } => format!("rescan ({reason})"),
                EventKind::Sync { .. } => "sync".into(),
                k => format!("{k:?}").to_lowercase(),
            };
            (kind, e.path.to_string())
        })
        .collect()
}

pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, p)| (k.to_string(), p.to_string()))
        .collect()
}
