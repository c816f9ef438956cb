//! Kernel caching driven by the mount: negative entries, symlink targets, and what they cost
//! in 9P messages (counted by the client).

mod common;

use std::fs;
use std::time::Duration;

use common::{each_backend, errno, Backend, Fixture, Setup};
use crossfs_mount::{MountConfig, NegativeTtl};

fn with_negative_ttl(b: Backend, ttl: NegativeTtl) -> Fixture {
    Fixture::with(Setup {
        config: MountConfig {
            negative_ttl: ttl,
            ..MountConfig::default()
        },
        ..Setup::new(b)
    })
}

fn stat_missing(fx: &Fixture, name: &str, times: usize) {
    for _ in 0..times {
        let e = fs::metadata(fx.m(name)).unwrap_err();
        assert_eq!(errno(&e), libc::ENOENT);
    }
}

#[test]
fn a_thousand_stats_of_a_missing_name_cost_one_walk() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        let before = fx.walks();
        stat_missing(&fx, "no-such-file.h", 1000);
        let walks = fx.walks() - before;
        eprintln!("{b:?}: 1000 stats of a missing name, default TTL: {walks} walks");
        assert!(walks <= 1, "{walks} walks");
        let stats = fx.handle().stats_json();
        assert!(stats["caches"]["negative_entries_sent"].as_u64().unwrap() >= 1);

        let fx = with_negative_ttl(b, NegativeTtl::Off);
        let before = fx.walks();
        stat_missing(&fx, "no-such-file.h", 1000);
        let walks = fx.walks() - before;
        eprintln!("{b:?}: 1000 stats of a missing name, negative TTL off: {walks} walks");
        assert_eq!(walks, 1000);
    });
}

#[test]
fn names_created_through_the_mount_replace_negative_entries_at_once() {
    each_backend(|b| {
        let fx = with_negative_ttl(b, NegativeTtl::Forever);
        fs::write(fx.m("target"), b"t").unwrap();
        type Make = fn(&Fixture, &str);
        let makers: [(&str, Make); 6] = [
            ("create", |fx, n| fs::write(fx.m(n), b"new").unwrap()),
            ("mkdir", |fx, n| fs::create_dir(fx.m(n)).unwrap()),
            ("symlink", |fx, n| {
                std::os::unix::fs::symlink("target", fx.m(n)).unwrap()
            }),
            ("link", |fx, n| {
                fs::hard_link(fx.m("target"), fx.m(n)).unwrap()
            }),
            ("rename", |fx, n| {
                fs::write(fx.m("tmp"), b"renamed").unwrap();
                fs::rename(fx.m("tmp"), fx.m(n)).unwrap();
            }),
            ("mknod", |fx, n| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    fx.m(n),
                    rustix::fs::FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o600),
                    0,
                )
                .unwrap()
            }),
        ];
        for (what, make) in makers {
            let name = format!("later-{what}");
            stat_missing(&fx, &name, 3);
            make(&fx, &name);
            assert!(
                fs::symlink_metadata(fx.m(&name)).is_ok(),
                "{what}: the new name must be visible at once"
            );
            assert!(fs::symlink_metadata(fx.e(&name)).is_ok());
        }
        // Removing a name and creating it again through the mount.
        fs::remove_file(fx.m("later-create")).unwrap();
        stat_missing(&fx, "later-create", 2);
        fs::write(fx.m("later-create"), b"again").unwrap();
        assert_eq!(fs::read(fx.m("later-create")).unwrap(), b"again");
    });
}

#[test]
fn names_created_on_the_host_appear_when_the_negative_entry_expires() {
    let fx = Fixture::new(Backend::Crossfs);
    // Forever: a host-side creation stays unseen (the documented trade-off).
    let forever = with_negative_ttl(Backend::Crossfs, NegativeTtl::Forever);
    stat_missing(&forever, "h", 1);
    fs::write(forever.e("h"), b"host").unwrap();
    stat_missing(&forever, "h", 1);
    // A short TTL: unseen, then seen once it has passed.
    let short = with_negative_ttl(
        Backend::Crossfs,
        NegativeTtl::For(Duration::from_millis(200)),
    );
    stat_missing(&short, "h", 1);
    fs::write(short.e("h"), b"host").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(fs::read(short.m("h")).unwrap(), b"host");
    drop(fx);
}

#[test]
fn a_hundred_readlinks_cost_one_treadlink() {
    each_backend(|b| {
        let fx = Fixture::new(b);
        std::os::unix::fs::symlink("some/where/else", fx.e("link")).unwrap();
        let before = fx.count("Treadlink");
        for _ in 0..100 {
            assert_eq!(
                fs::read_link(fx.m("link")).unwrap().to_str(),
                Some("some/where/else")
            );
        }
        let reads = fx.count("Treadlink") - before;
        eprintln!("{b:?}: 100 readlinks of one symlink: {reads} Treadlink");
        assert_eq!(reads, 1);
    });
}

#[test]
fn stats_json_has_every_section() {
    let fx = Fixture::new(Backend::Crossfs);
    fs::write(fx.m("f"), b"x").unwrap();
    let _ = fs::metadata(fx.m("missing"));
    let s = fx.handle().stats_json();
    assert_eq!(s["role"], "client");
    assert_eq!(s["cache"], "auto");
    assert_eq!(s["msize"]["effective"], 1 << 20);
    assert!(s["max_pages"].as_u64().unwrap() >= 32);
    assert!(s["fuse"]["LOOKUP"]["count"].as_u64().unwrap() >= 1);
    assert!(s["fuse"]["CREATE"]["count"].as_u64().unwrap() >= 1);
    let walk = if fx.client.has_extensions() {
        "Twalkgetattr"
    } else {
        "Twalk"
    };
    assert!(s["9p"][walk]["count"].as_u64().unwrap() >= 1);
    assert_eq!(s["extensions"], fx.client.has_extensions());
    assert!(s["replicas"]["limit"].as_u64().unwrap() > 0);
    assert!(s["9p"]["bytes_out"].as_u64().unwrap() > 0);
    assert!(s["caches"]["negative_entries_sent"].as_u64().unwrap() >= 1);
    eprintln!("{}", serde_json::to_string_pretty(&s).unwrap());
}
