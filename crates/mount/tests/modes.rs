//! Every cache mode serves the same data; each mode's freshness promise for host changes.

mod common;

use std::fs;
use std::io::Write;
use std::time::Duration;

use common::{Backend, Fixture, Setup};
use crossfs_mount::{CacheMode, MountConfig};

fn in_mode(cache: CacheMode) -> Fixture {
    Fixture::with(Setup {
        config: MountConfig {
            cache,
            ..MountConfig::default()
        },
        ..Setup::new(Backend::Crossfs)
    })
}

#[test]
fn every_mode_reads_and_writes_correctly() {
    for mode in [
        CacheMode::Never,
        CacheMode::Metadata,
        CacheMode::Auto,
        CacheMode::Always,
    ] {
        let fx = in_mode(mode);
        let mut f = fs::File::create(fx.m("f")).unwrap();
        f.write_all(&vec![1u8; 300_000]).unwrap();
        f.write_all(b"tail").unwrap();
        drop(f);
        assert_eq!(fs::metadata(fx.m("f")).unwrap().len(), 300_004, "{mode}");
        assert_eq!(fs::read(fx.m("f")).unwrap().len(), 300_004, "{mode}");
        assert_eq!(fs::read(fx.e("f")).unwrap().len(), 300_004, "{mode}");
        // Write-only opens work with the writeback cache too.
        fs::OpenOptions::new()
            .write(true)
            .open(fx.m("f"))
            .unwrap()
            .write_all(b"HEAD")
            .unwrap();
        assert_eq!(&fs::read(fx.e("f")).unwrap()[..4], b"HEAD", "{mode}");
        // Appends: from the server's end of file, or (always) the kernel's.
        let mut a = fs::OpenOptions::new().append(true).open(fx.m("f")).unwrap();
        a.write_all(b"+").unwrap();
        drop(a);
        let host = fs::read(fx.e("f")).unwrap();
        assert_eq!(host.len(), 300_005, "{mode}");
        assert_eq!(host[300_004], b'+');
        let names: Vec<_> = fs::read_dir(fx.m(""))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["f"], "{mode}");
    }
}

#[test]
fn host_changes_show_within_the_mode_timeout() {
    // never: at once.
    let fx = in_mode(CacheMode::Never);
    fs::write(fx.e("f"), b"one").unwrap();
    assert_eq!(fs::read(fx.m("f")).unwrap(), b"one");
    fs::write(fx.e("f"), b"two!").unwrap();
    assert_eq!(fs::read(fx.m("f")).unwrap(), b"two!");
    // auto: within a second, because the size or mtime changed.
    let fx = in_mode(CacheMode::Auto);
    fs::write(fx.e("f"), b"one").unwrap();
    assert_eq!(fs::read(fx.m("f")).unwrap(), b"one");
    fs::write(fx.e("f"), b"three").unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(fs::read(fx.m("f")).unwrap(), b"three");
    let s = fx.handle().stats_json();
    eprintln!("auto caches: {}", s["caches"]);
}
