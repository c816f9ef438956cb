//! Overflow for real: the kernel queue (16384 events, a global sysctl we do not touch) fills
//! while the reader is paused; the hub rescans against its snapshot and the subscriber's view
//! still equals the tree.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::*;
use crossfs_events::{BackendKind, EventHub, EventKind, HubConfig};

fn overflow_then_converge(backend: BackendKind) {
    let t = tempdir();
    let root = t.path();
    fs::create_dir(root.join("pre")).unwrap();
    // The flood goes into a directory watched before the pause: files in a directory the
    // paused reader has not seen yet would produce no inotify events at all.
    fs::create_dir(root.join("flood")).unwrap();
    for i in 0..100 {
        fs::write(root.join(format!("pre/old{i}")), b"x").unwrap();
    }
    let cfg = HubConfig {
        ring_capacity: 1 << 16,
        ..config(backend)
    };
    let hub = EventHub::start(root, cfg).unwrap();
    let sub = hub.subscribe();
    let mut model = Model::from_disk(root);
    hub.pause_reader();
    // Let the event thread see the pause before the flood starts.
    std::thread::sleep(Duration::from_millis(50));
    for i in 0..20_000 {
        fs::File::create(root.join(format!("flood/f{i:05}"))).unwrap();
    }
    for i in 0..50 {
        fs::remove_file(root.join(format!("pre/old{i}"))).unwrap();
    }
    hub.resume_reader();
    let evs = until_sync(&hub, &sub);
    evs.iter().for_each(|e| model.apply(e));
    let stats = hub.stats();
    assert!(
        stats.overflows >= 1,
        "{backend:?}: the kernel queue overflowed: {stats:?}"
    );
    assert!(stats.rescans >= 1, "{stats:?}");
    assert!(
        evs.iter()
            .any(|e| matches!(e.kind, EventKind::Rescan { .. })),
        "20,000 differences are past the burst limit: one rescan is published"
    );
    assert_eq!(model.differences(), Vec::<String>::new(), "{backend:?}");
    // Afterwards the watcher is still live.
    fs::write(root.join("after"), b"x").unwrap();
    let evs = until_sync(&hub, &sub);
    assert_eq!(summary(&evs), pairs(&[("created", "after")]));
}

#[test]
fn inotify_overflow_rescans_and_converges() {
    overflow_then_converge(BackendKind::Inotify);
}

#[test]
fn fanotify_overflow_rescans_and_converges() {
    let t = tempdir();
    if !fanotify_available(t.path()) {
        eprintln!("SKIPPED: fanotify unavailable");
        return;
    }
    overflow_then_converge(BackendKind::Fanotify);
}

#[test]
fn small_overflow_publishes_the_real_differences() {
    let t = tempdir();
    let root = t.path();
    let cfg = HubConfig {
        burst_limit: 100_000,
        ring_capacity: 1 << 16,
        ..config(BackendKind::Inotify)
    };
    fs::create_dir(root.join("kept")).unwrap();
    let hub = EventHub::start(root, cfg).unwrap();
    let sub = hub.subscribe();
    hub.pause_reader();
    std::thread::sleep(Duration::from_millis(50));
    // A directory whose only change is its change time (a chmod to the mode it has): the
    // rescan must report it, as the watcher would have.
    fs::set_permissions(root.join("kept"), fs::Permissions::from_mode(0o755)).unwrap();
    // Create and delete most of them: the queue overflows, the tree ends up small.
    for i in 0..20_000 {
        let f = root.join(format!("f{i:05}"));
        fs::File::create(&f).unwrap();
        if i % 1000 != 0 {
            fs::remove_file(&f).unwrap();
        }
    }
    hub.resume_reader();
    let evs = until_sync(&hub, &sub);
    assert!(hub.stats().overflows >= 1);
    assert!(!evs
        .iter()
        .any(|e| matches!(e.kind, EventKind::Rescan { .. })));
    let mut model = Model::new(root);
    evs.iter().for_each(|e| model.apply(e));
    assert_eq!(model.differences(), Vec::<String>::new());
    assert_eq!(
        evs.iter().filter(|e| e.kind == EventKind::Created).count(),
        20
    );
    assert!(
        evs.iter()
            .any(|e| e.kind == EventKind::Attrib && e.path.to_string() == "kept"),
        "{evs:?}"
    );
}

#[test]
fn repeated_overflows_back_off_to_polling_then_rearm() {
    let t = tempdir();
    let root = t.path();
    let cfg = HubConfig {
        overflow_threshold: 1,
        overflow_backoff: Duration::from_millis(500),
        poll_interval: Duration::from_millis(100),
        ring_capacity: 1 << 16,
        ..config(BackendKind::Inotify)
    };
    let hub = EventHub::start(root, cfg).unwrap();
    let sub = hub.subscribe();
    hub.pause_reader();
    std::thread::sleep(Duration::from_millis(50));
    for i in 0..17_000 {
        fs::File::create(root.join(format!("f{i:05}"))).unwrap();
    }
    hub.resume_reader();
    let mut warnings = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while warnings.len() < 2 && std::time::Instant::now() < deadline {
        if let Some(e) = sub.next_timeout(Duration::from_millis(100)) {
            if let EventKind::Warning { message } = e.kind {
                warnings.push(message);
            }
        }
    }
    assert_eq!(hub.stats().backoffs, 1);
    assert!(warnings[0].contains("polling"), "{warnings:?}");
    assert!(warnings[1].contains("re-armed"), "{warnings:?}");
    let mut model = Model::from_disk(root);
    fs::write(root.join("later"), b"x").unwrap();
    let evs = until_sync(&hub, &sub);
    evs.iter().for_each(|e| model.apply(e));
    assert!(
        summary(&evs).contains(&("created".into(), "later".into())),
        "{:?}",
        summary(&evs)
    );
    assert_eq!(model.differences(), Vec::<String>::new());
}
