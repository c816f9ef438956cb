use super::*;

/// A table without even the root.
fn empty_table() -> InodeTable {
    InodeTable {
        inner: Mutex::new(Inner {
            next_spare: PLACEHOLDER - 1,
            ..Inner::default()
        }),
    }
}

#[test]
fn listings_show_each_file_its_node_id() {
    let table = empty_table();
    let shown = |q: u64| table.by_path().ino_or_own(q);
    let add = |q: u64| {
        let mut inner = table.lock();
        let ino = InodeTable::insert(&mut inner, None, q, libc::S_IFREG, None);
        inner.map_path(q, ino);
        ino
    };
    table.lock().map_path(77, ROOT);
    assert_eq!(shown(77), ROOT, "the export root's file is node 1");
    assert_eq!((add(5), shown(5)), (5, 5));
    assert_eq!(shown(6), 6, "an unknown file shows its own number");
    // Another file numbered 5 while the kernel holds the first: a spare id.
    let spare = add(5);
    assert_ne!(spare, 5);
    assert_eq!(shown(5), spare);
    table.lock().unmap_path(5, spare);
    assert_eq!(shown(5), 5);
    assert_eq!(table.lock().spared.len(), 1, "the root's only");
}

#[test]
fn a_link_of_a_number_the_kernel_holds_for_another_link_gets_a_node_of_its_own() {
    let table = empty_table();
    let link = |name: &str, mode: u32, mtime_sec: u64| {
        let a = Rgetattr {
            qid: Qid {
                ty: 0,
                version: 0,
                path: 40,
            },
            mode,
            mtime_sec,
            ..Rgetattr::default()
        };
        table.remember_lazy((1, name.as_bytes()), &a, None)
    };
    let first = link("a", libc::S_IFLNK | 0o777, 100);
    assert_eq!(first, 40);
    assert_eq!(
        link("a", libc::S_IFLNK | 0o777, 100),
        first,
        "the same link"
    );
    // The host removed it and made another link that took its number: the kernel
    // would keep the first link's target for a node it still holds.
    let second = link("b", libc::S_IFLNK | 0o777, 200);
    assert_ne!(second, first);
    assert_eq!(table.ino_of(40), Some(second));
    // A regular file's node follows its changes: the kernel drops its pages itself.
    let file = link("f", libc::S_IFREG | 0o644, 300);
    assert_eq!(link("f", libc::S_IFREG | 0o644, 400), file);
}

#[test]
fn names_changed_through_the_mount_move_or_end_where_fidless_nodes_are_walked_from() {
    let table = empty_table();
    let lazy = |dir: u64, name: &str, qid_path: u64| {
        let a = Rgetattr {
            qid: Qid {
                ty: 0,
                version: 0,
                path: qid_path,
            },
            mode: libc::S_IFREG | 0o644,
            ..Rgetattr::default()
        };
        table.remember_lazy((dir, name.as_bytes()), &a, None)
    };
    let walked_from = |ino: u64| match table.node_fid(ino) {
        Some(NodeFid::Lazy { dir_ino, name, .. }) => Some((dir_ino, name)),
        _ => None,
    };
    let (a, b, c) = (lazy(1, "a", 10), lazy(1, "b", 11), lazy(1, "c", 12));
    table.renamed((1, b"a"), (2, b"moved"));
    assert_eq!(walked_from(a), Some((2, b"moved".to_vec())));
    assert_eq!(table.child(2, b"moved"), Some(a));
    assert_eq!(table.child(1, b"a"), None);
    // Renamed over: the replaced node is walked from nowhere (ESTALE), not to the
    // file now under its name.
    table.renamed((1, b"b"), (1, b"c"));
    assert_eq!(walked_from(b), Some((1, b"c".to_vec())));
    assert_eq!(walked_from(c), None);
    table.removed(1, b"c");
    assert_eq!(walked_from(b), None);
    assert_eq!(table.child(1, b"c"), None);
    // A name the table no longer knows moves nothing.
    table.renamed((1, b"gone"), (1, b"other"));
    assert_eq!(table.child(1, b"other"), None);
}

#[test]
fn a_reply_overtaken_by_a_later_requests_keeps_none_of_its_attributes() {
    let table = empty_table();
    let file = |ctime_sec: u64| Rgetattr {
        qid: Qid {
            ty: 0,
            version: 0,
            path: 9,
        },
        mode: libc::S_IFREG | 0o644,
        ctime_sec,
        ..Rgetattr::default()
    };
    let ino = table.remember_lazy((1, b"f"), &file(1), None);
    let clock = crate::known::listed_attrs::ListedAttrs::default();
    let first = clock.before_fetch();
    std::thread::sleep(std::time::Duration::from_millis(1));
    let second = clock.before_fetch();
    // The later request's reply comes first (the file changed between the two).
    table.observe(ino, &file(2), Some(second));
    table.observe(ino, &file(1), Some(first));
    assert_eq!(table.status(ino).unwrap().ctime_ns, 2_000_000_000);
    assert_eq!(table.fetched_attrs(ino).unwrap().0.ctime_sec, 2);
    // In order, the newer one wins as before.
    let third = clock.before_fetch();
    table.observe(ino, &file(3), Some(third));
    assert_eq!(table.status(ino).unwrap().ctime_ns, 3_000_000_000);
}

#[test]
fn an_event_showing_a_state_the_mount_went_past_counts_as_seen() {
    let table = empty_table();
    let file = |size: u64, ctime_sec: u64| Rgetattr {
        qid: Qid {
            ty: 0,
            version: 0,
            path: 9,
        },
        mode: libc::S_IFREG | 0o644,
        size,
        ctime_sec,
        ..Rgetattr::default()
    };
    let ino = table.remember_lazy((1, b"f"), &file(0, 1), None);
    // The mount's create, then its write: the create's echo comes after the write.
    table.observe(ino, &file(5, 2), None);
    let created = Status::of(&file(0, 1));
    assert!(table.has_seen(ino, created, true));
    assert!(table.has_seen(ino, Status::of(&file(5, 2)), true));
    // A state the file never had as the mount saw it is news.
    assert!(!table.has_seen(ino, Status::of(&file(7, 3)), true));
    // A passed state counts only with its change time: the same size, mode and times
    // with a later change time is a later change that put them back.
    assert!(!table.has_seen(ino, Status::of(&file(0, 4)), false));
    assert!(
        table.has_seen(ino, Status::of(&file(5, 4)), false),
        "the newest status, without its change time when asked so (after a rename)"
    );
    // Only the last few are kept.
    for c in 10..10 + PASSED_STATUSES as u64 {
        table.observe(ino, &file(c, c), None);
    }
    assert!(!table.has_seen(ino, created, true));
}
