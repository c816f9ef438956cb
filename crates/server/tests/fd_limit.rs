//! One connection cannot use up the process's descriptors: with the default configuration
//! (the budget comes from RLIMIT_NOFILE), a connection walking fids until it is refused gets
//! `EMFILE` while other connections, old and new, still walk and open. Alone in its test
//! binary, since it takes most of the process's descriptors for a while.

mod common;

use common::{errno::*, Harness, ROOT};
use crossfs_wire::*;

#[test]
fn a_connection_walking_without_end_leaves_descriptors_for_the_others() {
    let h = Harness::new();
    std::fs::write(h.path("f"), b"x").unwrap();
    let mut hog = h.connect();
    let mut other = h.connect();
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    // Past max_fids (65536) the table refuses anyway; a limit that high proves nothing here.
    let mut refused = None;
    for i in 1..=66_000u32 {
        if let Err(e) = hog.walk(ROOT, Fid(i), &["f"]) {
            refused = Some((i, e));
            break;
        }
    }
    let (at, e) = refused.expect("some limit");
    assert_eq!(e, EMFILE);
    if limit < 60_000 {
        assert!(
            (at as u64) < limit,
            "refused at {at} with a limit of {limit}"
        );
    }
    for c in [&mut other, &mut h.connect()] {
        c.walk(ROOT, Fid(1), &["f"]).unwrap();
        c.lopen(Fid(1), open_flags::RDONLY).unwrap();
        assert_eq!(c.read(Fid(1), 0, 10).unwrap(), b"x");
        c.clunk(Fid(1)).unwrap();
    }
    other.close();
    hog.close();
}
