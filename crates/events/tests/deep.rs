//! Events at any depth: a tree deeper than `PATH_MAX` (4,096 bytes) beneath the export, built
//! and changed with `*at` calls (as pjdfstest's mkdir/03 builds its PATH_MAX-1 path beneath a
//! test directory), still yields every event, and a subscriber applying them holds the tree.

mod common;

use std::os::fd::OwnedFd;
use std::path::Path;

use common::*;
use crossfs_events::{BackendKind, Event, EventHub, EventKind, HubConfig};
use rustix::fs::{self as rfs, Mode, OFlags};

/// 24 names of 200 bytes: the bottom directory is 4,823 bytes below the export root, more
/// than any one system call accepts.
const LEVELS: usize = 24;
const NAME_LEN: usize = 200;

fn name(level: usize) -> String {
    format!("{level:02}{}", "d".repeat(NAME_LEN - 2))
}

fn rel(levels: usize) -> String {
    (0..levels).map(name).collect::<Vec<_>>().join("/")
}

/// `00ddd…/01ddd…/f` as `00/01/f`, so a failed assertion stays readable.
fn short(list: Vec<(String, String)>) -> Vec<(String, String)> {
    let cut = |p: &str| {
        p.split('/')
            .map(|c| if c.len() == NAME_LEN { &c[..2] } else { c })
            .collect::<Vec<_>>()
            .join("/")
    };
    list.into_iter().map(|(k, p)| (cut(&k), cut(&p))).collect()
}

/// Without the `Attrib` events of directories: past PATH_MAX the engine rescans, and a
/// rescan also reports each directory whose change time moved with its entries.
fn entries_only(evs: Vec<Event>) -> Vec<Event> {
    evs.into_iter()
        .filter(|e| !(e.kind == EventKind::Attrib && e.attrs.is_some_and(|a| a.is_dir())))
        .collect()
}

fn open_dir(at: &OwnedFd, name: &str) -> OwnedFd {
    rfs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// Makes the chain one level at a time beneath `root` and returns the bottom directory.
fn make_chain(root: &Path, levels: usize) -> OwnedFd {
    let mut dir = rfs::open(root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    for level in 0..levels {
        rfs::mkdirat(&dir, name(level).as_str(), Mode::from_raw_mode(0o755)).unwrap();
        dir = open_dir(&dir, &name(level));
    }
    dir
}

fn write_at(dir: &OwnedFd, name: &str, data: &[u8], append: bool) {
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::CLOEXEC
        | if append {
            OFlags::APPEND
        } else {
            OFlags::TRUNC
        };
    let fd = rfs::openat(dir, name, flags, Mode::from_raw_mode(0o644)).unwrap();
    assert_eq!(rustix::io::write(&fd, data).unwrap(), data.len());
}

fn config(backend: BackendKind) -> HubConfig {
    HubConfig {
        backend,
        // The poller would eventually find anything; a long interval makes each step's
        // events the kernel watcher's (or the sync's rescan of what it does not watch).
        poll_interval: std::time::Duration::from_secs(3600),
        // Exact event lists: every change coalesced for the window (see common::config).
        first_at_once: false,
        ..HubConfig::default()
    }
}

/// Changes at the bottom of the deep tree, each checked against the exact events expected
/// and against a model built only from the events.
fn changes_at_the_bottom(backend: BackendKind, built_before_start: bool) {
    let t = tempdir();
    let root = t.path();
    let pre = built_before_start.then(|| make_chain(root, LEVELS));
    let hub = EventHub::start(root, config(backend)).unwrap();
    assert_eq!(hub.backend(), backend);
    let sub = hub.subscribe();
    let mut model = if built_before_start {
        Model::from_disk(root)
    } else {
        Model::new(root)
    };
    assert!(rel(LEVELS).len() > 4096);
    let bottom = match pre {
        Some(fd) => fd,
        None => {
            let fd = make_chain(root, LEVELS);
            let evs = until_sync(&hub, &sub);
            evs.iter().for_each(|e| model.apply(e));
            let evs = entries_only(evs);
            let created: Vec<(String, String)> =
                (1..=LEVELS).map(|l| ("created".into(), rel(l))).collect();
            assert_eq!(
                short(summary(&evs)),
                short(created),
                "{backend:?}: every level, parents first"
            );
            fd
        }
    };
    assert_eq!(model.differences(), Vec::<String>::new(), "{backend:?}");

    let deep = rel(LEVELS);
    let at = |n: &str| format!("{deep}/{n}");
    let mut step = |what: &dyn Fn(), want: Vec<(String, String)>| {
        what();
        let evs = until_sync(&hub, &sub);
        evs.iter().for_each(|e| model.apply(e));
        assert!(
            !evs.iter()
                .any(|e| matches!(e.kind, EventKind::Warning { .. })),
            "{backend:?}: {:?}",
            short(summary(&evs))
        );
        assert_eq!(
            short(summary(&entries_only(evs))),
            short(want),
            "{backend:?}"
        );
        assert_eq!(model.differences(), Vec::<String>::new(), "{backend:?}");
    };
    let one = |kind: &str, path: String| vec![(kind.to_string(), path)];
    step(
        &|| write_at(&bottom, "f", b"hello", false),
        one("created", at("f")),
    );
    step(
        &|| write_at(&bottom, "f", b" world", true),
        one("modified", at("f")),
    );
    step(
        &|| {
            rfs::chmodat(
                &bottom,
                "f",
                Mode::from_raw_mode(0o600),
                rfs::AtFlags::empty(),
            )
            .unwrap()
        },
        one("attrib", at("f")),
    );
    step(
        &|| rfs::mkdirat(&bottom, "sub", Mode::from_raw_mode(0o755)).unwrap(),
        one("created", at("sub")),
    );
    step(
        &|| rfs::renameat(&bottom, "f", &bottom, "sub/g").unwrap(),
        one(&format!("renamed from {}", at("f")), at("sub/g")),
    );
    step(
        &|| {
            let sub_fd = open_dir(&bottom, "sub");
            write_at(&sub_fd, "h", b"new", false);
        },
        one("created", at("sub/h")),
    );
    step(
        &|| rfs::unlinkat(&bottom, "sub/g", rfs::AtFlags::empty()).unwrap(),
        one("removed", at("sub/g")),
    );
    step(
        &|| rfs::unlinkat(&bottom, "sub/h", rfs::AtFlags::empty()).unwrap(),
        one("removed", at("sub/h")),
    );
    step(
        &|| rfs::unlinkat(&bottom, "sub", rfs::AtFlags::REMOVEDIR).unwrap(),
        one("removed", at("sub")),
    );
}

#[test]
fn inotify_sees_changes_below_path_max() {
    changes_at_the_bottom(BackendKind::Inotify, false);
}

#[test]
fn inotify_armed_on_a_tree_already_below_path_max() {
    changes_at_the_bottom(BackendKind::Inotify, true);
}

#[test]
fn fanotify_sees_changes_below_path_max() {
    let t = tempdir();
    if !fanotify_available(t.path()) {
        eprintln!("skipped: fanotify needs CAP_SYS_ADMIN and a filesystem reporting file ids");
        return;
    }
    changes_at_the_bottom(BackendKind::Fanotify, false);
}
