//! Real files, real watchers: each change shows up as the right event, coalesced.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::time::Duration;

use common::*;
use crossfs_events::{BackendKind, Event, EventHub, EventKind, HubConfig, RelPath};

fn each_kind(backend: BackendKind) {
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(backend)).unwrap();
    assert_eq!(hub.backend(), backend);
    let sub = hub.subscribe();
    let mut model = Model::new(root);
    let mut step = |what: &dyn Fn(), want: &[(&str, &str)]| {
        what();
        let evs = until_sync(&hub, &sub);
        evs.iter().for_each(|e| model.apply(e));
        assert_eq!(summary(&evs), pairs(want), "{backend:?}");
        assert_eq!(model.differences(), Vec::<String>::new(), "{backend:?}");
    };
    step(
        &|| fs::write(root.join("f"), b"hello").unwrap(),
        &[("created", "f")],
    );
    step(
        &|| fs::create_dir(root.join("d")).unwrap(),
        &[("created", "d")],
    );
    step(
        &|| fs::set_permissions(root.join("f"), fs::Permissions::from_mode(0o600)).unwrap(),
        &[("attrib", "f")],
    );
    // A directory's own attributes, changed with nothing else: only its change time moves
    // (a utimes of the modification time alone is IN_MODIFY to the kernel, not IN_ATTRIB).
    let set_dir_mtime = || {
        fs::File::open(root.join("d"))
            .and_then(|d| d.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1 << 30)))
            .unwrap()
    };
    step(&set_dir_mtime, &[("attrib", "d")]);
    step(&set_dir_mtime, &[("attrib", "d")]);
    step(
        &|| fs::set_permissions(root.join("d"), fs::Permissions::from_mode(0o755)).unwrap(),
        &[("attrib", "d")],
    );
    step(
        &|| fs::rename(root.join("f"), root.join("d/g")).unwrap(),
        &[("renamed from f", "d/g")],
    );
    step(
        &|| {
            let mut f = fs::OpenOptions::new()
                .append(true)
                .open(root.join("d/g"))
                .unwrap();
            for _ in 0..100 {
                f.write_all(b"x").unwrap();
            }
        },
        &[("modified", "d/g")],
    );
    step(
        &|| fs::rename(root.join("d"), root.join("e")).unwrap(),
        &[("renamed from d", "e")],
    );
    step(
        &|| fs::write(root.join("e/g"), b"").unwrap(),
        &[("modified", "e/g")],
    );
    step(
        &|| fs::remove_file(root.join("e/g")).unwrap(),
        &[("removed", "e/g")],
    );
    step(
        &|| fs::remove_dir(root.join("e")).unwrap(),
        &[("removed", "e")],
    );
    step(
        &|| {
            fs::write(root.join("gone"), b"x").unwrap();
            fs::remove_file(root.join("gone")).unwrap();
        },
        // Never published, but a subscriber may have looked it up meanwhile.
        &[("removed", "gone")],
    );
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9\n.txt");
    step(
        &|| fs::write(root.join(odd), b"bytes").unwrap(),
        &[("created", "caf\\xe9\\n.txt")],
    );
    let evs = until_sync(&hub, &sub);
    assert!(evs.is_empty(), "nothing but the marker: {evs:?}");
}

#[test]
fn inotify_reports_each_kind() {
    each_kind(BackendKind::Inotify);
}

#[test]
fn fanotify_reports_each_kind() {
    let t = tempdir();
    if !fanotify_available(t.path()) {
        eprintln!("SKIPPED: fanotify unavailable for {}", t.path().display());
        return;
    }
    each_kind(BackendKind::Fanotify);
}

#[test]
fn poll_backend_converges_at_sync() {
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(BackendKind::Poll)).unwrap();
    let sub = hub.subscribe();
    let mut model = Model::new(root);
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("a/b/f"), b"x").unwrap();
    fs::write(root.join("g"), b"x").unwrap();
    until_sync(&hub, &sub).iter().for_each(|e| model.apply(e));
    assert_eq!(model.differences(), Vec::<String>::new());
    fs::rename(root.join("a"), root.join("z")).unwrap();
    fs::remove_file(root.join("g")).unwrap();
    let evs = until_sync(&hub, &sub);
    evs.iter().for_each(|e| model.apply(e));
    assert_eq!(
        summary(&evs),
        pairs(&[
            ("removed", "a"),
            ("removed", "g"),
            ("created", "z"),
            ("created", "z/b"),
            ("created", "z/b/f")
        ])
    );
    assert_eq!(model.differences(), Vec::<String>::new());
}

fn mkdir_p_then_fill(backend: BackendKind) {
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(backend)).unwrap();
    let sub = hub.subscribe();
    let mut model = Model::new(root);
    for round in 0..20 {
        let deep = root.join(format!("r{round}/a/b/c"));
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("f"), b"x").unwrap();
        fs::create_dir_all(deep.join("d/e")).unwrap();
        fs::write(deep.join("d/e/g"), b"y").unwrap();
    }
    let evs = until_sync(&hub, &sub);
    evs.iter().for_each(|e| model.apply(e));
    for round in 0..20 {
        for sfx in ["", "/a", "/a/b", "/a/b/c", "/a/b/c/f", "/a/b/c/d/e/g"] {
            let want = format!("r{round}{sfx}");
            assert!(
                evs.iter()
                    .any(|e| e.kind == EventKind::Created && e.path.to_string() == want),
                "{backend:?}: no created {want}"
            );
        }
    }
    assert_eq!(model.differences(), Vec::<String>::new());
}

#[test]
fn inotify_new_directories_lose_nothing() {
    mkdir_p_then_fill(BackendKind::Inotify);
}

#[test]
fn fanotify_new_directories_lose_nothing() {
    let t = tempdir();
    if !fanotify_available(t.path()) {
        eprintln!("SKIPPED: fanotify unavailable");
        return;
    }
    mkdir_p_then_fill(BackendKind::Fanotify);
}

/// A directory removed and made again under the same name, and a change inside the new one:
/// when the old directory is still open somewhere, the kernel says its watch is gone only
/// after the new directory's creation, and that notice used to take the new directory's
/// watch with it (the change inside was lost from the second round on).
fn remade_directory_is_watched(backend: BackendKind) {
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(backend)).unwrap();
    let sub = hub.subscribe();
    let mut model = Model::new(root);
    for round in 0..4 {
        // Held open (as crossfs's server holds a directory a client has looked up), the
        // old directory outlives its name, and its watch goes only when it is closed.
        let held = fs::File::open(root.join("g")).ok();
        let _ = fs::remove_dir_all(root.join("g"));
        fs::create_dir(root.join("g")).unwrap();
        fs::write(root.join("g/a"), b"aaa").unwrap();
        until_sync(&hub, &sub).iter().for_each(|e| model.apply(e));
        drop(held);
        fs::write(root.join("g/a"), format!("round {round}")).unwrap();
        let evs = until_sync(&hub, &sub);
        evs.iter().for_each(|e| model.apply(e));
        assert_eq!(
            summary(&evs),
            pairs(&[("modified", "g/a")]),
            "{backend:?}, round {round}"
        );
        assert_eq!(model.differences(), Vec::<String>::new(), "{backend:?}");
    }
}

#[test]
fn inotify_remade_directory_is_watched() {
    remade_directory_is_watched(BackendKind::Inotify);
}

#[test]
fn fanotify_remade_directory_is_watched() {
    let t = tempdir();
    if !fanotify_available(t.path()) {
        eprintln!("SKIPPED: fanotify unavailable");
        return;
    }
    remade_directory_is_watched(BackendKind::Fanotify);
}

/// A hard link made and removed within one window changes nothing but its file's link
/// count and change time, which no event of the file's other names tells: the removal
/// carries the file, as it was while the link was there.
fn short_lived_link_names_its_file(backend: BackendKind) {
    let t = tempdir();
    let root = t.path();
    fs::write(root.join("f"), b"f").unwrap();
    // A window long enough that the engine reads the link's creation within it however
    // busy the machine is; the link lives a tenth of it.
    let config = HubConfig {
        quiet: Duration::from_millis(500),
        max_delay: Duration::from_secs(2),
        ..config(backend)
    };
    let hub = EventHub::start(root, config).unwrap();
    let sub = hub.subscribe();
    until_sync(&hub, &sub);
    let ino = fs::metadata(root.join("f")).unwrap().ino();
    fs::hard_link(root.join("f"), root.join("link")).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    fs::remove_file(root.join("link")).unwrap();
    let mut evs = until_sync(&hub, &sub);
    // fanotify also tells the file's own change (its link count moved twice), under its
    // remaining name.
    if backend == BackendKind::Fanotify {
        evs.retain(|e| e.path.to_string() != "f" || e.kind != EventKind::Attrib);
    }
    assert_eq!(summary(&evs), pairs(&[("removed", "link")]), "{backend:?}");
    assert_eq!(evs[0].qid, Some(ino), "{backend:?}");
    // A name made and removed that was no link carries nothing.
    fs::write(root.join("tmp"), b"t").unwrap();
    fs::remove_file(root.join("tmp")).unwrap();
    let evs = until_sync(&hub, &sub);
    assert_eq!(summary(&evs), pairs(&[("removed", "tmp")]), "{backend:?}");
    assert_eq!(evs[0].qid, None, "{backend:?}");
}

#[test]
fn inotify_short_lived_link_names_its_file() {
    short_lived_link_names_its_file(BackendKind::Inotify);
}

#[test]
fn fanotify_short_lived_link_names_its_file() {
    let t = tempdir();
    if !fanotify_available(t.path()) {
        eprintln!("SKIPPED: fanotify unavailable");
        return;
    }
    short_lived_link_names_its_file(BackendKind::Fanotify);
}

/// A hard link made and removed while the engine reads nothing (within one of its reads):
/// no name the engine can see ever led to the file, yet its link count and change time
/// moved. fanotify, which also reports the file's own handle, tells it under the file's
/// remaining name; inotify cannot (docs/events.md).
#[test]
fn fanotify_a_link_gone_before_it_was_read_still_moves_its_files_change_time() {
    let t = tempdir();
    let root = t.path();
    if !fanotify_available(root) {
        eprintln!("SKIPPED: fanotify unavailable");
        return;
    }
    fs::write(root.join("f"), b"f").unwrap();
    let hub = EventHub::start(root, config(BackendKind::Fanotify)).unwrap();
    let sub = hub.subscribe();
    until_sync(&hub, &sub);
    hub.pause_reader();
    std::thread::sleep(Duration::from_millis(50));
    fs::hard_link(root.join("f"), root.join("link")).unwrap();
    fs::remove_file(root.join("link")).unwrap();
    hub.resume_reader();
    let evs = until_sync(&hub, &sub);
    let md = fs::metadata(root.join("f")).unwrap();
    let ctime = md.ctime() * 1_000_000_000 + md.ctime_nsec();
    let told = evs
        .iter()
        .find(|e| e.path.to_string() == "f")
        .unwrap_or_else(|| panic!("no event for f: {evs:?}"));
    assert_eq!(told.kind, EventKind::Attrib, "{evs:?}");
    let attrs = told.attrs.expect("the attributes the file has now");
    assert_eq!(attrs.ctime_ns, ctime, "{evs:?}");
}

/// A file made without a name (`O_TMPFILE`, as the server makes a create it marks before
/// linking it), changed, then linked: one creation, under its name. The kernel tells the
/// unnamed file's changes as a child "#INO" of its directory, which is no name anyone can
/// look up: no event about it (each cost the mount a look at who watches it). A file
/// without a name that is never linked: no event at all.
fn unnamed_file_shows_only_once_linked(backend: BackendKind) {
    use std::os::fd::AsRawFd;
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(backend)).unwrap();
    let sub = hub.subscribe();
    until_sync(&hub, &sub);
    let unnamed = || {
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(root)
            .expect("O_TMPFILE in the test's temporary directory")
    };
    let mut f = unnamed();
    f.write_all(b"made").unwrap();
    f.set_permissions(fs::Permissions::from_mode(0o640))
        .unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1 << 30))
        .unwrap();
    let proc_path = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
    let name = std::ffi::CString::new(root.join("made").as_os_str().as_bytes()).unwrap();
    // SAFETY: both paths are NUL-terminated strings that live across the call.
    let linked = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    assert_eq!(linked, 0, "linkat: {}", std::io::Error::last_os_error());
    let evs = until_sync(&hub, &sub);
    assert_eq!(summary(&evs), pairs(&[("created", "made")]), "{backend:?}");
    let mut never_linked = unnamed();
    never_linked.write_all(b"gone").unwrap();
    never_linked
        .set_permissions(fs::Permissions::from_mode(0o600))
        .unwrap();
    drop(never_linked);
    let evs = until_sync(&hub, &sub);
    assert_eq!(summary(&evs), pairs(&[]), "{backend:?}");
}

#[test]
fn inotify_unnamed_file_shows_only_once_linked() {
    unnamed_file_shows_only_once_linked(BackendKind::Inotify);
}

#[test]
fn fanotify_unnamed_file_shows_only_once_linked() {
    let t = tempdir();
    if !fanotify_available(t.path()) {
        eprintln!("SKIPPED: fanotify unavailable");
        return;
    }
    unnamed_file_shows_only_once_linked(BackendKind::Fanotify);
}

/// A directory filled and then moved into another directory, all within one coalescing window
/// (or while the reader is paused, so the events queue up and may be read in pieces): the
/// subscriber's model must have the moved children, at their new names, and a later change
/// inside the moved directory must be reported at its new name too (its watch followed it).
fn moved_directory_keeps_its_children(backend: BackendKind, paused: bool, dest_known: bool) {
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(backend)).unwrap();
    let sub = hub.subscribe();
    let mut model = Model::new(root);
    let settle = |model: &mut Model, what: &str| {
        until_sync(&hub, &sub).iter().for_each(|e| model.apply(e));
        assert_eq!(
            model.differences(),
            Vec::<String>::new(),
            "{backend:?} paused={paused} dest_known={dest_known}: {what}"
        );
    };
    fs::create_dir(root.join("a")).unwrap();
    fs::create_dir(root.join("a/old")).unwrap();
    fs::write(root.join("a/old/f"), b"x").unwrap();
    if dest_known {
        fs::create_dir(root.join("c")).unwrap();
    }
    settle(&mut model, "setup");
    if paused {
        hub.pause_reader();
        std::thread::sleep(Duration::from_millis(50));
    }
    if !dest_known {
        fs::create_dir(root.join("c")).unwrap();
    }
    fs::File::create(root.join("a/c")).unwrap();
    fs::write(root.join("a/old/g"), b"yy").unwrap();
    fs::create_dir(root.join("a/new")).unwrap();
    fs::write(root.join("a/new/h"), b"zzz").unwrap();
    fs::rename(root.join("a"), root.join("c/a")).unwrap();
    if paused {
        hub.resume_reader();
    }
    settle(&mut model, "after the move");
    // The watches followed the move: changes inside report the new names.
    fs::write(root.join("c/a/new/i"), b"i").unwrap();
    fs::write(root.join("c/a/old/f"), b"longer").unwrap();
    fs::create_dir(root.join("c/a/new/deeper")).unwrap();
    fs::write(root.join("c/a/new/deeper/j"), b"j").unwrap();
    settle(&mut model, "changes inside the moved directory");
}

#[test]
fn inotify_moved_directory_keeps_its_children() {
    for paused in [false, true] {
        for dest_known in [false, true] {
            moved_directory_keeps_its_children(BackendKind::Inotify, paused, dest_known);
        }
    }
}

#[test]
fn fanotify_moved_directory_keeps_its_children() {
    let t = tempdir();
    if !fanotify_available(t.path()) {
        eprintln!("SKIPPED: fanotify unavailable");
        return;
    }
    for paused in [false, true] {
        for dest_known in [false, true] {
            moved_directory_keeps_its_children(BackendKind::Fanotify, paused, dest_known);
        }
    }
}

#[test]
fn hundred_writes_in_ten_ms_are_one_event() {
    let t = tempdir();
    let root = t.path();
    fs::write(root.join("f"), b"").unwrap();
    let hub = EventHub::start(root, config(BackendKind::Inotify)).unwrap();
    let sub = hub.subscribe();
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(root.join("f"))
        .unwrap();
    for i in 0..100u8 {
        f.write_all(&[i]).unwrap();
    }
    let ev = sub.next_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(
        (ev.kind.clone(), ev.path.to_string()),
        (EventKind::Modified, "f".into())
    );
    assert_eq!(ev.attrs.unwrap().size, 100);
    assert!(sub.next_timeout(Duration::from_millis(300)).is_none());
}

#[test]
fn name_changes_carry_their_directories_as_they_are_after_the_change() {
    use std::os::unix::fs::MetadataExt;
    let t = tempdir();
    let root = t.path();
    fs::create_dir(root.join("a")).unwrap();
    fs::create_dir(root.join("b")).unwrap();
    let hub = EventHub::start(root, config(BackendKind::Inotify)).unwrap();
    let sub = hub.subscribe();
    let dir_now = |name: &str| {
        let md = fs::metadata(root.join(name)).unwrap();
        (
            md.ino(),
            md.mode(),
            md.nlink(),
            md.size(),
            md.mtime() * 1_000_000_000 + md.mtime_nsec(),
        )
    };
    let seen = |d: Option<crossfs_events::DirAttrs>| {
        let d = d.expect("the directory's stat");
        (d.ino, d.mode, d.nlink, d.size, d.mtime_ns)
    };
    fs::write(root.join("a/f"), b"x").unwrap();
    fs::create_dir(root.join("a/sub")).unwrap();
    let evs = until_sync(&hub, &sub);
    assert_eq!(evs.len(), 2, "{evs:?}");
    for ev in &evs {
        assert_eq!(seen(ev.dir), dir_now("a"), "{ev}");
        assert_eq!(ev.from_dir, None);
    }
    fs::rename(root.join("a/f"), root.join("b/g")).unwrap();
    let evs = until_sync(&hub, &sub);
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert_eq!(seen(evs[0].from_dir), dir_now("a"));
    assert_eq!(seen(evs[0].dir), dir_now("b"));
    fs::remove_dir(root.join("a/sub")).unwrap();
    let evs = until_sync(&hub, &sub);
    assert_eq!(seen(evs[0].dir), dir_now("a"), "nlink 2 again");
    // Content and attribute changes carry none.
    fs::write(root.join("b/g"), b"more").unwrap();
    let evs = until_sync(&hub, &sub);
    assert_eq!(
        (evs[0].kind.clone(), evs[0].dir),
        (EventKind::Modified, None)
    );
}

#[test]
fn sync_marker_follows_every_earlier_change() {
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(BackendKind::Inotify)).unwrap();
    let sub = hub.subscribe();
    for i in 0..200 {
        fs::write(root.join(format!("f{i}")), b"x").unwrap();
    }
    let evs = until_sync(&hub, &sub);
    // Each file's creation, once. A write the engine read in a later window than its
    // file's creation (a busy machine) comes as a modification of it too.
    let created: std::collections::BTreeSet<String> = evs
        .iter()
        .filter(|e| e.kind == EventKind::Created)
        .map(|e| e.path.to_string())
        .collect();
    let expected: std::collections::BTreeSet<String> = (0..200).map(|i| format!("f{i}")).collect();
    assert_eq!(created, expected);
    let others: Vec<&Event> = evs
        .iter()
        .filter(|e| e.kind != EventKind::Created)
        .collect();
    assert!(
        others
            .iter()
            .all(|e| e.kind == EventKind::Modified && expected.contains(&e.path.to_string())),
        "{others:?}"
    );
    assert_eq!(evs.len() - others.len(), 200, "one creation each");
    // Seq numbers are strictly increasing, and the epoch is the hub's.
    assert!(evs.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(evs.iter().all(|e| e.epoch == hub.epoch()));
    // The cookie file is gone and never reported: the export is as it was.
    assert_eq!(fs::read_dir(root).unwrap().count(), 200);
}

#[test]
fn slow_subscriber_gets_exactly_one_rescan() {
    let t = tempdir();
    let root = t.path();
    let cfg = HubConfig {
        ring_capacity: 16,
        ..config(BackendKind::Inotify)
    };
    let hub = EventHub::start(root, cfg).unwrap();
    let slow = hub.subscribe();
    let fast = hub.subscribe();
    for i in 0..100 {
        fs::write(root.join(format!("f{i}")), b"x").unwrap();
    }
    let cookie = hub.sync_cookie().unwrap();
    // The fast reader drains as it goes in real use; here it just counts what it would see.
    let evs: Vec<Event> = std::iter::from_fn(|| fast.try_next()).collect();
    assert!(
        matches!(evs[0].kind, EventKind::Rescan { .. }),
        "fast also fell behind here"
    );
    let got: Vec<Event> = std::iter::from_fn(|| slow.try_next()).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0].kind,
        EventKind::Rescan {
            reason: "subscriber fell behind".into()
        }
    );
    assert_eq!(got[0].path, RelPath::root());
    assert_eq!(got[1].kind, EventKind::Sync { cookie });
    assert_eq!(
        got[0].seq + 1,
        got[1].seq,
        "the rescan covers everything before the marker"
    );
    let mut model = Model::new(root);
    got.iter().for_each(|e| model.apply(e));
    assert_eq!(model.differences(), Vec::<String>::new());
}

#[test]
fn reports_from_handlers_are_published_without_the_kernel() {
    let t = tempdir();
    let root = t.path();
    let cfg = HubConfig {
        poll_interval: Duration::from_secs(3600),
        ..config(BackendKind::Poll)
    };
    let hub = EventHub::start(root, cfg).unwrap();
    let sub = hub.subscribe();
    fs::write(root.join("via9p"), b"abc").unwrap();
    hub.report(EventKind::Created, p("via9p"));
    let ev = sub
        .next_timeout(Duration::from_secs(2))
        .expect("published from the report");
    assert_eq!(
        (ev.kind, ev.path.to_string()),
        (EventKind::Created, "via9p".into())
    );
    assert_eq!(ev.attrs.unwrap().size, 3);
    fs::rename(root.join("via9p"), root.join("moved")).unwrap();
    hub.report(EventKind::Renamed { from: p("via9p") }, p("moved"));
    let ev = sub.next_timeout(Duration::from_secs(2)).unwrap();
    assert_eq!(ev.kind, EventKind::Renamed { from: p("via9p") });
}

#[test]
fn directories_past_the_watch_budget_are_polled() {
    let t = tempdir();
    let root = t.path();
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    let cfg = HubConfig {
        watch_budget: 2,
        poll_interval: Duration::from_millis(100),
        ..config(BackendKind::Inotify)
    };
    let hub = EventHub::start(root, cfg).unwrap();
    let sub = hub.subscribe();
    fs::write(root.join("a/b/c/deep"), b"x").unwrap();
    let mut ev = sub
        .next_timeout(Duration::from_secs(5))
        .expect("the poller finds it");
    // A poll compares times too: the directory's change time moved with its new entry.
    if (&ev.kind, ev.path.to_string()) == (&EventKind::Attrib, "a/b/c".into()) {
        ev = sub.next_timeout(Duration::from_secs(5)).unwrap();
    }
    assert_eq!(
        (ev.kind, ev.path.to_string()),
        (EventKind::Created, "a/b/c/deep".into())
    );
    // And sync covers polled subtrees without waiting for the poll.
    fs::write(root.join("a/b/c/deeper"), b"x").unwrap();
    let evs = until_sync(&hub, &sub);
    assert!(evs.iter().any(|e| e.path.to_string() == "a/b/c/deeper"));
}

#[test]
fn long_poll_read_returns_whole_json_lines() {
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(BackendKind::Inotify)).unwrap();
    let sub = hub.subscribe();
    assert!(sub
        .read_blocking(4096, Duration::from_millis(50))
        .is_empty());
    for i in 0..50 {
        fs::write(root.join(format!("file-{i:03}")), b"x").unwrap();
    }
    hub.sync_cookie().unwrap();
    let mut lines = Vec::new();
    loop {
        let chunk = sub.read_blocking(1024, Duration::from_millis(100));
        if chunk.is_empty() {
            break;
        }
        assert!(chunk.len() <= 1024 && chunk.ends_with(b"\n"));
        lines.extend(
            chunk
                .split_inclusive(|&b| b == b'\n')
                .map(|l| Event::from_json_line(l).unwrap()),
        );
    }
    // Each file once as created; a writer descheduled for longer than the hub's longest
    // delay (200 ms) between a create and its write adds that file's modification.
    let created: std::collections::BTreeSet<String> = lines
        .iter()
        .filter(|e| e.kind == EventKind::Created)
        .map(|e| e.path.to_string())
        .collect();
    assert_eq!(created.len(), 50, "{lines:?}");
    assert!(lines.len() >= 51, "{lines:?}");
    assert!(matches!(lines.last().unwrap().kind, EventKind::Sync { .. }));
    println!("{}", lines[0]);
}

#[test]
fn resume_since_a_sequence_number() {
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(BackendKind::Inotify)).unwrap();
    let sub = hub.subscribe();
    fs::write(root.join("one"), b"x").unwrap();
    let first = until_sync(&hub, &sub);
    let seen = first[0].seq;
    fs::write(root.join("two"), b"x").unwrap();
    hub.sync_cookie().unwrap();
    let again = hub.subscribe_since(hub.epoch(), seen);
    let replay: Vec<Event> = std::iter::from_fn(|| again.try_next()).collect();
    assert_eq!(
        summary(&replay),
        pairs(&[("sync", "."), ("created", "two"), ("sync", ".")])
    );
    let other = hub.subscribe_since(hub.epoch() ^ 1, 5);
    assert_eq!(
        other.try_next().unwrap().kind,
        EventKind::Rescan {
            reason: "fresh start".into()
        }
    );
}

#[test]
fn scanning_a_new_directory_leaves_its_access_time_alone() {
    use std::os::unix::fs::MetadataExt;
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(BackendKind::Inotify)).unwrap();
    let sub = hub.subscribe();
    // Made elsewhere with an access time before its modification time, which `relatime`
    // would move at the first listing, then moved in: the watcher lists it to watch it.
    let outside = tempdir();
    let made = outside.path().join("d");
    fs::create_dir(&made).unwrap();
    fs::write(made.join("f"), b"x").unwrap();
    let (atime, mtime) = (1_900_000_000, 1_950_000_000);
    let set = |p: &std::path::Path| {
        let times = fs::FileTimes::new()
            .set_accessed(std::time::UNIX_EPOCH + Duration::from_secs(atime))
            .set_modified(std::time::UNIX_EPOCH + Duration::from_secs(mtime));
        fs::File::open(p).and_then(|d| d.set_times(times)).unwrap();
    };
    set(&made);
    if fs::rename(&made, root.join("d")).is_err() {
        // Another file system: make it in place instead.
        fs::create_dir(root.join("d")).unwrap();
        fs::write(root.join("d/f"), b"x").unwrap();
        set(&root.join("d"));
    }
    let evs = until_sync(&hub, &sub);
    assert!(evs.iter().any(|e| e.path.as_bytes() == b"d"), "{evs:?}");
    let md = fs::metadata(root.join("d")).unwrap();
    assert_eq!(
        md.atime(),
        atime as i64,
        "the watcher's listing moved the access time"
    );
}

/// A quiet period's first change is published without waiting for the quiet window (made
/// ten seconds here, longer than the test waits); what follows it within the window is
/// still held for it.
#[test]
fn a_lone_change_is_not_held_for_the_quiet_window() {
    let t = tempdir();
    let root = t.path();
    let config = HubConfig {
        quiet: Duration::from_secs(10),
        max_delay: Duration::from_secs(20),
        first_at_once: true,
        ..HubConfig::default()
    };
    let hub = EventHub::start(root, config).unwrap();
    let sub = hub.subscribe();
    fs::create_dir(root.join("d")).unwrap();
    let ev = sub
        .next_timeout(Duration::from_secs(5))
        .expect("the first change after a quiet period arrives before the window ends");
    assert_eq!(summary(&[ev]), pairs(&[("created", "d")]));
    fs::create_dir(root.join("e")).unwrap();
    assert!(
        sub.next_timeout(Duration::from_secs(1)).is_none(),
        "a change right after it waits for the window"
    );
    let evs = until_sync(&hub, &sub);
    assert_eq!(summary(&evs), pairs(&[("created", "e")]));
}
