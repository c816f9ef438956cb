use super::*;
use crate::known::inode::ROOT;
use crossfs_events::{DirAttrs, Event, EventKind, RelPath};

fn file(ino: u64) -> Rgetattr {
    let mut a = Rgetattr {
        mode: libc::S_IFREG | 0o644,
        ..Rgetattr::default()
    };
    a.qid.path = ino;
    a
}

fn dir(ino: u64) -> Rgetattr {
    let mut a = Rgetattr {
        mode: libc::S_IFDIR | 0o755,
        ..Rgetattr::default()
    };
    a.qid.path = ino;
    a
}

fn names(listing: &[Listed]) -> Vec<&[u8]> {
    listing.iter().map(|l| &l.entry.name[..]).collect()
}

fn now() -> Fetched {
    crate::known::listed_attrs::ListedAttrs::default().before_fetch()
}

/// Replicas following events, the root's complete with one file "a" (node 10).
fn root_listing_one_file() -> DirReplicas {
    let r = DirReplicas::new(100);
    r.set_following(true);
    let ticket = r.ticket(ROOT).unwrap();
    let listed = vec![(b"a".to_vec(), file(10), 5)];
    assert!(r.install(ROOT, ticket, listed, true, now()));
    r
}

#[test]
fn opendirs_share_one_listing_with_the_servers_cookies_until_a_name_comes() {
    let r = DirReplicas::new(100);
    r.set_following(true);
    let ticket = r.ticket(ROOT).expect("the root is anchored");
    let dot = |name: &[u8], cookie| (name.to_vec(), Rgetattr::default(), cookie);
    let listed = vec![
        dot(b".", 7),
        dot(b"..", 3),
        (b"b".to_vec(), file(11), 90),
        (b"a".to_vec(), file(10), 12),
    ];
    assert!(r.install(ROOT, ticket, listed, true, now()));

    let (first, _) = r.listing(ROOT).expect("complete");
    assert_eq!(
        names(&first),
        [&b"."[..], b"..", b"b", b"a"],
        "as the server listed them"
    );
    let cookies: Vec<u64> = first.iter().map(|l| l.entry.offset).collect();
    assert_eq!(cookies, [7, 3, 90, 12], "the server's cookies");
    assert!(Arc::ptr_eq(&first, &r.listing(ROOT).unwrap().0), "shared");

    // A removal keeps every other cookie: the listing stays.
    r.own_removed(ROOT, b"b", None, None);
    assert_eq!(names(&r.listing(ROOT).unwrap().0), [&b"."[..], b"..", b"a"]);
    assert_eq!(names(&first).len(), 4, "an open listing keeps what it had");
    // A new name has no cookie of the server's: listings go to the server.
    r.own_created(ROOT, b"c", &file(12), None);
    assert!(r.listing(ROOT).is_none());
    assert_eq!(r.lookup(ROOT, b"c"), Answer::Found(Arc::new(file(12))));
}

#[test]
fn a_name_too_long_for_the_host_is_not_answered_missing() {
    let r = root_listing_one_file();
    assert_eq!(r.lookup(ROOT, &[b'x'; 255]), Answer::Missing);
    assert_eq!(
        r.lookup(ROOT, &[b'x'; 256]),
        Answer::Ask,
        "ENAMETOOLONG is the server's"
    );
}

#[test]
fn what_a_change_left_of_a_directory_answers_until_anything_touches_it() {
    let r = DirReplicas::new(100);
    r.set_following(true);
    let dir_attrs = |mtime: u64| Rgetattr {
        valid: 0x7ff,
        mode: libc::S_IFDIR | 0o755,
        mtime_sec: mtime,
        ..Rgetattr::default()
    };
    // Kept: nothing but the removal touched the directory.
    let before = r.ticket(ROOT).unwrap();
    let left = DirLeft {
        before,
        attrs: dir_attrs(1),
    };
    r.own_removed(ROOT, b"a", None, Some(left));
    assert_eq!(r.left_attrs(ROOT).map(|a| a.mtime_sec), Some(1));
    // Any other change in it (here one through the mount that said nothing) ends it.
    r.own_created(ROOT, b"b", &file(11), None);
    assert_eq!(r.left_attrs(ROOT), None);
    // Not kept: something touched the directory while the change was on its way.
    let before = r.ticket(ROOT).unwrap();
    r.own_created(ROOT, b"c", &file(12), None);
    let left = DirLeft {
        before,
        attrs: dir_attrs(2),
    };
    r.own_removed(ROOT, b"c", None, Some(left));
    assert_eq!(r.left_attrs(ROOT), None);
    // Nor without attributes (`valid` 0: the server could not read them).
    let before = r.ticket(ROOT).unwrap();
    let left = DirLeft {
        before,
        attrs: Rgetattr::default(),
    };
    r.own_removed(ROOT, b"b", None, Some(left));
    assert_eq!(r.left_attrs(ROOT), None);
    // Losing the events ends all of it.
    let before = r.ticket(ROOT).unwrap();
    let left = DirLeft {
        before,
        attrs: dir_attrs(3),
    };
    r.own_removed(ROOT, b"x", None, Some(left));
    assert!(r.left_attrs(ROOT).is_some());
    r.set_following(false);
    assert_eq!(r.left_attrs(ROOT), None);
}

#[test]
fn what_a_change_left_of_a_directory_outlives_changes_to_its_files_not_to_its_names() {
    let r = root_listing_one_file();
    let left = |r: &DirReplicas| DirLeft {
        before: r.ticket(ROOT).unwrap(),
        attrs: Rgetattr {
            valid: 0x7ff,
            mode: libc::S_IFDIR | 0o755,
            ..Rgetattr::default()
        },
    };
    r.own_created(ROOT, b"b", &file(11), Some(left(&r)));
    assert!(r.left_attrs(ROOT).is_some());
    let event = |kind: EventKind, name: &str, ino: u64| Event {
        epoch: 1,
        seq: 1,
        kind,
        path: RelPath::new(name).unwrap(),
        qid: Some(ino),
        attrs: None,
        dir: None,
        from_dir: None,
    };
    // A file's attributes and content: the directory's stay.
    r.own_changed(100, 11);
    r.apply(&event(EventKind::Attrib, "a", 10), false, &|_, _| false);
    r.apply(&event(EventKind::Modified, "b", 11), false, &|_, _| false);
    assert!(r.left_attrs(ROOT).is_some());
    assert_eq!(r.lookup(ROOT, b"a"), Answer::Ask, "the file's entry goes");
    // The directory's own change: they go.
    r.own_changed(ROOT, 1);
    assert_eq!(r.left_attrs(ROOT), None);
    // A name: they go.
    r.own_removed(ROOT, b"x", None, Some(left(&r)));
    assert!(r.left_attrs(ROOT).is_some());
    r.apply(&event(EventKind::Created, "c", 12), false, &|_, _| false);
    assert_eq!(r.left_attrs(ROOT), None);
}

#[test]
fn the_echo_of_the_mounts_own_change_keeps_what_it_left_only_if_the_directory_is_so() {
    let r = DirReplicas::new(100);
    r.set_following(true);
    let ticket = r.ticket(ROOT).unwrap();
    assert!(r.install(ROOT, ticket, vec![], true, now()));
    let attrs = |mtime: u64| Rgetattr {
        valid: 0x7ff,
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        size: 4096,
        mtime_sec: mtime,
        ctime_sec: mtime,
        ..Rgetattr::default()
    };
    let stat = |mtime: i64| DirAttrs {
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        size: 4096,
        mtime_ns: mtime * 1_000_000_000,
        ctime_ns: mtime * 1_000_000_000,
        ..DirAttrs::default()
    };
    let created = |name: &str, dir: DirAttrs| Event {
        epoch: 1,
        seq: 1,
        kind: EventKind::Created,
        path: RelPath::new(name).unwrap(),
        qid: Some(20),
        attrs: None,
        dir: Some(dir),
        from_dir: None,
    };
    let make = |r: &DirReplicas, name: &[u8], mtime: u64| {
        let left = DirLeft {
            before: r.ticket(ROOT).unwrap(),
            attrs: attrs(mtime),
        };
        r.own_created(ROOT, name, &file(20), Some(left));
    };
    let own = |_: u64, name: &[u8]| name == b"mine";
    make(&r, b"mine", 5);
    // Its echo, the directory as the creation left it: kept.
    r.apply(&created("mine", stat(5)), true, &own);
    assert_eq!(r.left_attrs(ROOT).map(|a| a.mtime_sec), Some(5));
    // The echo, but the directory changed since (its stat says): gone.
    r.apply(&created("mine", stat(6)), true, &own);
    assert_eq!(r.left_attrs(ROOT), None);
    // The host's creation, whatever the stat says: gone.
    make(&r, b"mine", 7);
    r.apply(&created("theirs", stat(7)), true, &own);
    assert_eq!(r.left_attrs(ROOT), None);
    // An event without the directory's stat (an older server): gone.
    make(&r, b"mine", 8);
    let mut old = created("mine", stat(8));
    old.dir = None;
    r.apply(&old, true, &own);
    assert_eq!(r.left_attrs(ROOT), None);
}

#[test]
fn a_removal_that_may_predate_the_mounts_own_change_makes_the_name_unknown_not_missing() {
    let r = root_listing_one_file();
    let removed = |name: &str| Event {
        epoch: 1,
        seq: 1,
        kind: EventKind::Removed,
        path: RelPath::new(name).unwrap(),
        qid: None,
        attrs: None,
        dir: None,
        from_dir: None,
    };
    // A directory renamed over "b" through the mount, then the late event of an earlier
    // removal of "b": the server knows which is newer.
    r.own_renamed((ROOT, b"x"), (ROOT, b"b"), (None, None), None);
    let recent = |_: u64, name: &[u8]| name == b"b";
    r.apply(&removed("b"), false, &recent);
    assert_eq!(r.lookup(ROOT, b"b"), Answer::Ask);
    // Even if the feed took it for the echo of a change of the mount's.
    r.own_created(ROOT, b"b", &file(12), None);
    r.apply(&removed("b"), true, &recent);
    assert_eq!(r.lookup(ROOT, b"b"), Answer::Ask);
    // The echo of the mount's own removal, or the host's removal of a name the mount left
    // alone: missing.
    r.own_removed(ROOT, b"b", None, None);
    r.apply(&removed("b"), true, &recent);
    assert_eq!(r.lookup(ROOT, b"b"), Answer::Missing);
    r.apply(&removed("a"), false, &recent);
    assert_eq!(r.lookup(ROOT, b"a"), Answer::Missing);
}

#[test]
fn a_removal_or_rename_through_the_mount_touches_the_files_other_names_even_if_unknown_here() {
    let r = root_listing_one_file();
    // "a" and "b" name file 10; "a" changed (unknown here), "b" learnt again since.
    r.own_created(ROOT, b"b", &file(10), None);
    r.stale(ROOT, b"a");
    let b = |r: &DirReplicas| r.lookup(ROOT, b"b");
    assert_eq!(b(&r), Answer::Found(Arc::new(file(10))));
    // Unlinking "a" drops the link count of "b": the mount says which file "a" was.
    r.own_removed(ROOT, b"a", Some(10), None);
    assert_eq!(b(&r), Answer::Ask);
    // Likewise a rename: the file moved (its change time) and the file it replaced.
    r.own_created(ROOT, b"b", &file(10), None);
    r.own_created(ROOT, b"c", &file(11), None);
    r.own_created(ROOT, b"d", &file(11), None);
    r.stale(ROOT, b"c");
    r.own_renamed((ROOT, b"x"), (ROOT, b"c"), (Some(10), Some(11)), None);
    assert_eq!(b(&r), Answer::Ask, "the moved file's other name");
    assert_eq!(
        r.lookup(ROOT, b"d"),
        Answer::Ask,
        "the replaced file's other name"
    );
}

#[test]
fn a_directory_made_through_the_mount_is_known_empty_unless_an_event_came_from_inside_it() {
    let created = |name: &str| Event {
        epoch: 1,
        seq: 1,
        kind: EventKind::Created,
        path: RelPath::new(name).unwrap(),
        qid: Some(99),
        attrs: None,
        dir: None,
        from_dir: None,
    };
    // Made, and nothing else came: empty and complete, so a name in it is missing.
    let r = root_listing_one_file();
    let before = r.ticket(ROOT).unwrap();
    r.own_created(ROOT, b"d", &dir(30), None);
    r.own_made_dir((ROOT, b"d"), 300, before, now());
    assert_eq!(r.lookup(300, b"x"), Answer::Missing);
    assert_eq!(r.entries(300), Some(0));

    // The host made a file in it before the mount anchored it: the event could not be
    // applied to any replica, so the directory's names are asked of the server.
    let r = root_listing_one_file();
    let before = r.ticket(ROOT).unwrap();
    r.own_created(ROOT, b"d", &dir(30), None);
    r.apply(&created("d/x"), false, &|_, _| false);
    r.own_made_dir((ROOT, b"d"), 300, before, now());
    assert!(!r.has(300), "no replica");
    assert_eq!(r.subdir(ROOT, b"d"), Some(300), "anchored all the same");

    // Events about names in a directory the mount placed before (the echoes of files an
    // untar made in the directory before, as it makes the next) tell nothing of the new one.
    let r = root_listing_one_file();
    let before = r.ticket(ROOT).unwrap();
    r.own_created(ROOT, b"e", &dir(31), None);
    r.own_made_dir((ROOT, b"e"), 301, before, now());
    let before = r.ticket(ROOT).unwrap();
    r.own_created(ROOT, b"d", &dir(30), None);
    r.apply(&created("e/x"), false, &|_, _| false);
    r.own_made_dir((ROOT, b"d"), 300, before, now());
    assert_eq!(r.lookup(300, b"x"), Answer::Missing);
    assert_ne!(
        r.lookup(301, b"x"),
        Answer::Missing,
        "the event landed in e"
    );

    // Anchored and empty: what the host makes in it later lands in the replica.
    let r = root_listing_one_file();
    let before = r.ticket(ROOT).unwrap();
    r.own_created(ROOT, b"d", &dir(30), None);
    r.own_made_dir((ROOT, b"d"), 300, before, now());
    r.apply(&created("d/y"), false, &|_, _| false);
    assert_ne!(r.lookup(300, b"y"), Answer::Missing);
}

#[test]
fn a_late_event_from_inside_a_directory_the_mount_removed_leaves_it_missing() {
    let dir = Rgetattr {
        mode: libc::S_IFDIR | 0o755,
        qid: crossfs_wire::Qid {
            path: 30,
            ..Default::default()
        },
        ..Rgetattr::default()
    };
    let event = |kind: EventKind, name: &str| Event {
        epoch: 1,
        seq: 1,
        kind,
        path: RelPath::new(name).unwrap(),
        qid: None,
        attrs: None,
        dir: None,
        from_dir: None,
    };
    let removed_d = || {
        let r = root_listing_one_file();
        let before = r.ticket(ROOT).unwrap();
        r.own_created(ROOT, b"d", &dir, None);
        r.own_made_dir((ROOT, b"d"), 300, before, now());
        r.own_removed(ROOT, b"d", None, None);
        r
    };
    // `rm -r`: the echo of a removal in "d" comes after the mount removed "d" too.
    let r = removed_d();
    let recent = |d: u64, name: &[u8]| d == ROOT && name == b"d";
    r.apply(&event(EventKind::Removed, "d/x"), true, &recent);
    assert_eq!(r.lookup(ROOT, b"d"), Answer::Missing);
    assert_eq!(r.entries(ROOT), Some(1), "only a");
    // Not removed through the mount lately: the name is asked of the server.
    let r = removed_d();
    r.apply(&event(EventKind::Removed, "d/x"), true, &|_, _| false);
    assert_eq!(r.lookup(ROOT, b"d"), Answer::Ask);
    // A host program made it again, then a file in it: its events say so, in order.
    let r = removed_d();
    r.apply(&event(EventKind::Created, "d"), false, &recent);
    r.apply(&event(EventKind::Created, "d/y"), false, &recent);
    assert_ne!(r.lookup(ROOT, b"d"), Answer::Missing);
}

#[test]
fn a_directory_made_behind_is_empty_and_complete_whatever_its_parent_saw_meanwhile() {
    let created = |name: &str, is_dir: bool| Event {
        epoch: 1,
        seq: 1,
        kind: EventKind::Created,
        path: RelPath::new(name).unwrap(),
        qid: Some(99),
        attrs: Some(crossfs_events::Attrs {
            ino: 99,
            mode: if is_dir { libc::S_IFDIR } else { libc::S_IFREG } | 0o755,
            size: 0,
            mtime_ns: 1,
            ctime_ns: 1,
        }),
        dir: None,
        from_dir: None,
    };
    // Events about its parent's other subdirectories, which stop a directory made waiting
    // from counting as empty, tell nothing of one the server has not made yet.
    let r = root_listing_one_file();
    r.apply(&created("e/x", false), false, &|_, _| false);
    r.own_created(ROOT, b"d", &dir(30), None);
    r.own_made_dir_behind((ROOT, b"d"), 300, now());
    assert_eq!(r.lookup(300, b"x"), Answer::Missing);
    assert_eq!(r.entries(300), Some(0));
    assert_eq!(r.subdir(ROOT, b"d"), Some(300));
    // The echo of its mkdir keeps it; what the host makes in it once made lands in it.
    r.apply(&created("d", true), true, &|d, name| {
        d == ROOT && name == b"d"
    });
    r.apply(&created("d/y", false), false, &|_, _| false);
    assert_ne!(r.lookup(300, b"y"), Answer::Missing);
    assert_eq!(r.lookup(300, b"x"), Answer::Missing);
    // Forgotten (a host program took the name first): its names are asked of the server.
    r.forget(300);
    assert!(!r.has(300));
    assert_eq!(r.subdir(ROOT, b"d"), None);
    // Not in a directory without a replica of its own.
    let r = DirReplicas::new(100);
    r.set_following(true);
    r.own_made_dir_behind((77, b"d"), 301, now());
    assert!(!r.has(301));
}
