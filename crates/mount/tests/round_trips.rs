//! 9P messages per FUSE operation over plain 9P2000.L (the server's extension switched off;
//! `extension.rs` counts what it saves): a lookup is one Twalk and one Tgetattr (sent together
//! when the name is known), `never` mode answers a stat's GETATTR with its LOOKUP's
//! attributes and trusts directory names briefly, and missing names are cached as the cache
//! mode says. Counts, never timings (the few bounds below allow for a machine stalling a
//! thread for milliseconds).

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{each_backend, errno, Backend, Fixture, Setup};
use crossfs_mount::{CacheMode, MountConfig};

fn in_mode(b: Backend, cache: CacheMode) -> Fixture {
    Fixture::with(Setup {
        config: MountConfig {
            cache,
            ..MountConfig::default()
        },
        extensions: false,
        ..Setup::new(b)
    })
}

/// Polls `done` for up to 5 s (it is the test's next assertion that fails if it never holds).
fn wait_until(done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_cold_stat_costs_one_twalk_and_one_tgetattr() {
    each_backend(|b| {
        let fx = in_mode(b, CacheMode::Auto);
        for i in 0..50 {
            fs::write(fx.e(&format!("f{i}")), b"x").unwrap();
        }
        let (walks, getattrs) = (fx.count("Twalk"), fx.count("Tgetattr"));
        for i in 0..50 {
            assert_eq!(fs::metadata(fx.m(&format!("f{i}"))).unwrap().len(), 1);
        }
        let walks = fx.count("Twalk") - walks;
        let getattrs = fx.count("Tgetattr") - getattrs;
        eprintln!("{b:?}: 50 cold stats: {walks} Twalk, {getattrs} Tgetattr");
        assert_eq!((walks, getattrs), (50, 50));
    });
}

/// 50 files `f0`..`f49` of one byte in the export.
fn fifty_files(fx: &Fixture) {
    for i in 0..50 {
        fs::write(fx.e(&format!("f{i}")), b"x").unwrap();
    }
}

/// `ls -l` of the mount's root: the kernel lists from offset 0 with READDIRPLUS every time,
/// and each entry's stat is answered from the attributes the listing carried. Returns
/// name -> size.
fn list(fx: &Fixture) -> std::collections::BTreeMap<String, u64> {
    fs::read_dir(fx.m(""))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                e.metadata().unwrap().len(),
            )
        })
        .collect()
}

/// Messages sent and listed attributes reused: (Twalk, Tgetattr, Tclunk, reused).
fn listing_counts(fx: &Fixture) -> (u64, u64, u64, u64) {
    let reused = fx.handle().stats_json()["caches"]["listed_attrs_reused"]
        .as_u64()
        .unwrap();
    (
        fx.count("Twalk"),
        fx.count("Tgetattr"),
        fx.count("Tclunk"),
        reused,
    )
}

/// Lists the mount's root and returns what the listing cost, once the directory's
/// RELEASEDIR (sent by the kernel after closedir returns) is counted too.
fn listing_cost(
    fx: &Fixture,
) -> (
    std::collections::BTreeMap<String, u64>,
    (u64, u64, u64, u64),
) {
    let before = listing_counts(fx);
    let listed = list(fx);
    wait_until(|| fx.count("Tclunk") > before.2);
    let after = listing_counts(fx);
    let cost = (
        after.0 - before.0,
        after.1 - before.1,
        after.2 - before.2,
        after.3 - before.3,
    );
    (listed, cost)
}

#[test]
fn a_repeated_listing_reuses_the_attributes_it_fetched() {
    each_backend(|b| {
        let fx = in_mode(b, CacheMode::Auto);
        fifty_files(&fx);
        let (first, cost) = listing_cost(&fx);
        assert_eq!(first.len(), 50);
        assert_eq!(cost.3, 0, "nothing to reuse in a first listing");
        let fetched = Instant::now();
        let (again, (walks, getattrs, clunks, reused)) = listing_cost(&fx);
        eprintln!(
            "{b:?}: 50 entries listed again: {walks} Twalk, {getattrs} Tgetattr, {clunks} Tclunk, {reused} reused"
        );
        assert_eq!(again, first);
        // The listing's qids say the names still lead to the known nodes, and nothing has
        // changed their attributes since they were fetched, within `auto`'s 1 s: no
        // message per entry (the directory's own open and close cost one walk and one
        // clunk, and the kernel may stat it). A machine that stalled this thread for half
        // the timeout cannot show that.
        if fetched.elapsed() < CacheMode::Auto.attr_ttl() / 2 {
            assert_eq!(reused, 50);
            assert!(walks <= 1, "{walks} Twalk");
            assert!(clunks <= 1, "{clunks} Tclunk");
            assert!(getattrs <= 1, "{getattrs} Tgetattr");
        }
        // A file replaced on the host (a new qid: written beside the old one, so that it
        // cannot take the old inode number) is fetched however fresh the rest is.
        fs::write(fx.e("f7.new"), b"seven").unwrap();
        fs::rename(fx.e("f7.new"), fx.e("f7")).unwrap();
        let (listed, (_, _, _, reused)) = listing_cost(&fx);
        assert_eq!(listed["f7"], 5);
        assert!(reused <= 49, "{reused}");
    });
}

#[test]
fn a_change_through_the_mount_is_never_hidden_by_reused_attributes() {
    each_backend(|b| {
        let fx = in_mode(b, CacheMode::Auto);
        fifty_files(&fx);
        list(&fx);
        // Right after each change (long before the server's change event could arrive),
        // the listing shows it: changes through the mount end reuse as they start.
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(fx.m("f3"))
            .unwrap();
        std::io::Write::write_all(&mut f, &[b'y'; 99]).unwrap();
        assert_eq!(list(&fx)["f3"], 100);
        f.set_len(7).unwrap();
        assert_eq!(list(&fx)["f3"], 7);
        fs::write(fx.m("f4"), b"four").unwrap();
        assert_eq!(list(&fx)["f4"], 4);
        drop(f);
        assert_eq!(fs::read(fx.m("f3")).unwrap().len(), 7);
        let listed = list(&fx);
        assert_eq!((listed["f3"], listed["f4"], listed["f5"]), (7, 4, 1));
    });
}

#[test]
fn without_change_events_reused_attributes_expire_with_the_attribute_timeout() {
    each_backend(|b| {
        let fx = in_mode(b, CacheMode::Auto);
        fifty_files(&fx);
        list(&fx);
        // Changed on the host (same file, new size): no event tells this mount, so what
        // it lists may be up to `auto`'s 1 s old, never older.
        fs::write(fx.e("f9"), b"nine!!!!!").unwrap();
        std::thread::sleep(CacheMode::Auto.attr_ttl() + Duration::from_millis(100));
        let (listed, (_, getattrs, _, reused)) = listing_cost(&fx);
        eprintln!("{b:?}: listing after the timeout: {getattrs} Tgetattr, {reused} reused");
        assert_eq!(listed["f9"], 9);
        assert_eq!(reused, 0);
        assert!(getattrs >= 50, "{getattrs} Tgetattr");
    });
}

#[test]
fn never_mode_stat_is_one_walk_and_one_getattr_and_stays_fresh() {
    each_backend(|b| {
        let fx = in_mode(b, CacheMode::Never);
        fs::write(fx.e("f"), b"one").unwrap();
        let (walks, getattrs) = (fx.count("Twalk"), fx.count("Tgetattr"));
        let n = 200;
        for _ in 0..n {
            assert_eq!(fs::metadata(fx.m("f")).unwrap().len(), 3);
        }
        let walks = fx.count("Twalk") - walks;
        let getattrs = fx.count("Tgetattr") - getattrs;
        let reused = fx.handle().stats_json()["caches"]["lookup_attrs_reused"]
            .as_u64()
            .unwrap();
        eprintln!("{b:?}: {n} stats in never mode: {walks} Twalk, {getattrs} Tgetattr, {reused} GETATTRs from LOOKUP");
        // Every stat looks the name up again...
        assert_eq!(walks, n);
        // ... and its GETATTR reuses what that LOOKUP fetched (it used to cost a Tgetattr
        // more: 2n in all). A thread stalled for over 5 ms between the two costs one more.
        // (The lookup's Tgetattr goes to the node's fid with the Twalk: one round trip.)
        assert!(getattrs < n + n / 4, "{getattrs} Tgetattr");
        assert!(reused > n * 3 / 4, "{reused}");
        // A change on the host shows in the very next stat.
        fs::write(fx.e("f"), b"three").unwrap();
        assert_eq!(fs::metadata(fx.m("f")).unwrap().len(), 5);
        // An open file's fstat always asks the server.
        let f = fs::File::open(fx.m("f")).unwrap();
        fs::write(fx.e("f"), b"seven!!").unwrap();
        assert_eq!(f.metadata().unwrap().len(), 7);
    });
}

#[test]
fn never_mode_trusts_directory_names_briefly_not_file_names() {
    let fx = in_mode(Backend::Crossfs, CacheMode::Never);
    fs::create_dir_all(fx.e("a/b")).unwrap();
    fs::write(fx.e("a/b/f"), b"x").unwrap();
    let walks = fx.count("Twalk");
    let n = 200;
    for _ in 0..n {
        fs::metadata(fx.m("a/b/f")).unwrap();
    }
    let walks = fx.count("Twalk") - walks;
    eprintln!("{n} stats of a/b/f in never mode: {walks} Twalk");
    // One walk per stat for the file; a and b only when their 10 ms have passed (it used
    // to be three per stat).
    assert!(walks >= n && walks < 2 * n, "{walks} Twalk");
    // A file removed on the host is gone for the next call.
    fs::remove_file(fx.e("a/b/f")).unwrap();
    assert_eq!(
        errno(&fs::metadata(fx.m("a/b/f")).unwrap_err()),
        libc::ENOENT
    );
}

#[test]
fn missing_names_are_cached_as_the_cache_mode_says() {
    // never: every lookup of a missing name asks the server.
    let fx = in_mode(Backend::Crossfs, CacheMode::Never);
    let walks = fx.count("Twalk");
    for _ in 0..10 {
        assert_eq!(
            errno(&fs::metadata(fx.m("nope.h")).unwrap_err()),
            libc::ENOENT
        );
    }
    assert_eq!(fx.count("Twalk") - walks, 10);
    fs::write(fx.e("nope.h"), b"now").unwrap();
    assert!(fs::metadata(fx.m("nope.h")).is_ok());
    let s = fx.handle().stats_json();
    assert_eq!(s["negative_ttl_ms"], 0);
    // auto (and the others): remembered, and the mount reports how long.
    for (mode, ms) in [
        (CacheMode::Auto, 10_000),
        (CacheMode::Metadata, 86_400_000),
        (CacheMode::Always, 86_400_000),
    ] {
        let fx = in_mode(Backend::Crossfs, mode);
        let walks = fx.count("Twalk");
        for _ in 0..10 {
            assert_eq!(
                errno(&fs::metadata(fx.m("nope.h")).unwrap_err()),
                libc::ENOENT
            );
        }
        assert_eq!(fx.count("Twalk") - walks, 1, "{mode}");
        assert_eq!(fx.handle().stats_json()["negative_ttl_ms"], ms, "{mode}");
    }
}

#[test]
fn listing_a_directory_of_known_files_revalidates_them_in_batches() {
    let fx = in_mode(Backend::Crossfs, CacheMode::Auto);
    fs::create_dir(fx.e("d")).unwrap();
    for i in 0..500 {
        fs::write(fx.e(&format!("d/f{i}")), b"x").unwrap();
    }
    for i in 0..500 {
        fs::metadata(fx.m(&format!("d/f{i}"))).unwrap();
    }
    for _ in 0..3 {
        assert_eq!(fs::read_dir(fx.m("d")).unwrap().count(), 500);
    }
}
