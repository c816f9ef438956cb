//! Random operation sequences on a real tree: after a sync, the events reproduce the tree.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;
use crossfs_events::{BackendKind, EventHub};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Create(String),
    Write(String, usize),
    Truncate(String, u64),
    Chmod(String, u32),
    Rename(String, String),
    Mkdir(String),
    Rmdir(String),
    Unlink(String),
    Sync,
}

fn name() -> impl Strategy<Value = String> {
    let comp = prop::sample::select(vec!["a", "b", "c"]);
    prop::collection::vec(comp, 1..=3).prop_map(|v| v.join("/"))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        name().prop_map(Op::Create),
        (name(), 1usize..2000).prop_map(|(n, k)| Op::Write(n, k)),
        (name(), 0u64..100).prop_map(|(n, k)| Op::Truncate(n, k)),
        (name(), prop::sample::select(vec![0o600u32, 0o644, 0o755]))
            .prop_map(|(n, m)| Op::Chmod(n, m)),
        (name(), name()).prop_map(|(a, b)| Op::Rename(a, b)),
        name().prop_map(Op::Mkdir),
        name().prop_map(Op::Rmdir),
        name().prop_map(Op::Unlink),
        Just(Op::Sync),
    ]
}

fn run(root: &Path, op: &Op) {
    // Failures (ENOENT, ENOTDIR, EISDIR, ENOTEMPTY, ...) are part of the game.
    let _ = match op {
        Op::Create(n) => fs::File::create(root.join(n)).map(drop),
        Op::Write(n, k) => fs::OpenOptions::new()
            .append(true)
            .open(root.join(n))
            .and_then(|mut f| std::io::Write::write_all(&mut f, &vec![b'x'; *k])),
        Op::Truncate(n, k) => fs::OpenOptions::new()
            .write(true)
            .open(root.join(n))
            .and_then(|f| f.set_len(*k)),
        Op::Chmod(n, m) => fs::set_permissions(root.join(n), fs::Permissions::from_mode(*m)),
        Op::Rename(a, b) => fs::rename(root.join(a), root.join(b)),
        Op::Mkdir(n) => fs::create_dir(root.join(n)),
        Op::Rmdir(n) => fs::remove_dir(root.join(n)),
        Op::Unlink(n) => fs::remove_file(root.join(n)),
        Op::Sync => Ok(()),
    };
}

fn check(backend: BackendKind, ops: &[Op]) -> Result<(), TestCaseError> {
    let t = tempdir();
    let root = t.path();
    let hub = EventHub::start(root, config(backend)).unwrap();
    let sub = hub.subscribe();
    let mut model = Model::new(root);
    for op in ops {
        run(root, op);
        if matches!(op, Op::Sync) {
            until_sync(&hub, &sub).iter().for_each(|e| model.apply(e));
            prop_assert_eq!(model.differences(), Vec::<String>::new());
        }
    }
    until_sync(&hub, &sub).iter().for_each(|e| model.apply(e));
    prop_assert_eq!(model.differences(), Vec::<String>::new());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn inotify_events_reproduce_the_tree(ops in prop::collection::vec(op(), 1..=50)) {
        check(BackendKind::Inotify, &ops)?;
    }

    #[test]
    fn fanotify_events_reproduce_the_tree(ops in prop::collection::vec(op(), 1..=50)) {
        let t = tempdir();
        if fanotify_available(t.path()) {
            check(BackendKind::Fanotify, &ops)?;
        }
    }
}
