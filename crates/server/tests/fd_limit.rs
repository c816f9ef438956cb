//! One connection cannot use up the process's descriptors. With the default configuration
//! (the budget comes from RLIMIT_NOFILE): a connection walking fids without end is refused
//! only by its fid table (`max_fids`), never for descriptors, while the process stays within
//! its limit (the handles' descriptors are a cache); a connection opening files until it is
//! refused gets `EMFILE` below the limit; and other connections, old and new, still walk
//! and open. Alone in its test binary, since it takes most of the process's descriptors
//! for a while.

mod common;

use common::{errno::*, Harness, ROOT};
use crossfs_wire::*;

/// Descriptors this process holds now.
fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

fn limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX)
}

fn others_still_work(h: &Harness, other: &mut common::Client) {
    for c in [other, &mut h.connect()] {
        c.walk(ROOT, Fid(1), &["f"]).unwrap();
        c.lopen(Fid(1), open_flags::RDONLY).unwrap();
        assert_eq!(c.read(Fid(1), 0, 10).unwrap(), b"x");
        c.clunk(Fid(1)).unwrap();
    }
}

/// One test, so that the two servers never hold their budgets at once (each is budgeted
/// for the whole process).
#[test]
fn descriptors_are_a_cache_for_walks_and_a_fair_wall_for_opens() {
    a_connection_walking_without_end_is_refused_only_by_its_fid_table();
    a_connection_opening_without_end_gets_emfile_and_leaves_descriptors_for_the_others();
}

fn a_connection_walking_without_end_is_refused_only_by_its_fid_table() {
    let h = Harness::new();
    std::fs::write(h.path("f"), b"x").unwrap();
    let mut hog = h.connect();
    let mut other = h.connect();
    let mut refused = None;
    for i in 1..=66_000u32 {
        if let Err(e) = hog.walk(ROOT, Fid(i), &["f"]) {
            refused = Some((i, e));
            break;
        }
    }
    // max_fids is 65,536 by default, the root's fid included: the table, not the
    // descriptors, refuses.
    assert_eq!(refused, Some((65_536, EMFILE)));
    assert!(
        open_descriptors() < limit(),
        "{} descriptors with a limit of {}",
        open_descriptors(),
        limit()
    );
    others_still_work(&h, &mut other);
    other.close();
    hog.close();
}

fn a_connection_opening_without_end_gets_emfile_and_leaves_descriptors_for_the_others() {
    let h = Harness::new();
    std::fs::write(h.path("f"), b"x").unwrap();
    let mut hog = h.connect();
    let mut other = h.connect();
    let mut refused = None;
    for i in 1..=66_000u32 {
        hog.walk(ROOT, Fid(i), &["f"]).unwrap();
        if let Err(e) = hog.lopen(Fid(i), open_flags::RDONLY) {
            refused = Some((i, e));
            break;
        }
    }
    let (at, e) = refused.expect("some limit");
    assert_eq!(e, EMFILE);
    assert!(
        (at as u64) < limit(),
        "refused at {at} with a limit of {}",
        limit()
    );
    others_still_work(&h, &mut other);
    other.close();
    hog.close();
}
