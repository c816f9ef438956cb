//! Mount lifetime: outside umount, unmount of a busy mount, a lost connection, read-only.

mod common;

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{each_backend, errno, Backend, Fixture, Setup};
use crossfs_mount::MountConfig;

fn is_mounted(path: &std::path::Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let p = path.canonicalize().unwrap_or(path.to_path_buf());
    mounts.lines().any(|l| l.split(' ').nth(4) == p.to_str())
}

#[test]
fn outside_umount_ends_wait() {
    let mut fx = Fixture::new(Backend::Crossfs);
    let handle = fx.take_handle();
    let path = fx.mnt.path().to_path_buf();
    assert!(is_mounted(&path));
    let waiter = std::thread::spawn(move || handle.wait());
    let status = Command::new("umount").arg(&path).status().unwrap();
    assert!(status.success());
    waiter.join().unwrap().unwrap();
    assert!(!is_mounted(&path));
}

#[test]
fn unmount_of_a_busy_mount_does_not_hang() {
    let mut fx = Fixture::new(Backend::Crossfs);
    fs::write(fx.m("f"), b"x").unwrap();
    let busy = fs::File::open(fx.m("f")).unwrap();
    let path = fx.mnt.path().to_path_buf();
    let start = Instant::now();
    fx.take_handle().unmount().unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(!is_mounted(&path));
    drop(busy);
}

#[test]
fn a_lost_connection_gives_eio_not_a_hang() {
    each_backend(|b| {
        let mut fx = Fixture::new(b);
        fs::write(fx.m("f"), b"x").unwrap();
        let f = fs::File::open(fx.m("f")).unwrap();
        match b {
            Backend::Diod => fx.kill_server(),
            Backend::Crossfs => fx.client.shutdown(),
        }
        let start = Instant::now();
        let e = fs::read_dir(fx.m("newdir")).unwrap_err();
        assert_eq!(errno(&e), libc::EIO, "{e}");
        let e = fs::write(fx.m("g"), b"y").unwrap_err();
        assert_eq!(errno(&e), libc::EIO, "{e}");
        let mut buf = [0u8; 4];
        let e = std::io::Read::read(&mut &f, &mut buf).unwrap_err();
        assert_eq!(errno(&e), libc::EIO, "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
    });
}

#[test]
fn read_only_mounts_refuse_changes() {
    let fx = Fixture::with(Setup {
        config: MountConfig {
            read_only: true,
            ..MountConfig::default()
        },
        ..Setup::new(Backend::Crossfs)
    });
    fs::write(fx.e("f"), b"host").unwrap();
    assert_eq!(fs::read(fx.m("f")).unwrap(), b"host");
    for e in [
        fs::write(fx.m("g"), b"x").unwrap_err(),
        fs::OpenOptions::new()
            .write(true)
            .open(fx.m("f"))
            .unwrap_err(),
        fs::create_dir(fx.m("d")).unwrap_err(),
        fs::remove_file(fx.m("f")).unwrap_err(),
    ] {
        assert_eq!(errno(&e), libc::EROFS);
    }
}

#[test]
fn ids_are_shown_as_configured() {
    let fx = Fixture::with(Setup {
        config: MountConfig {
            uid: Some(4242),
            gid: Some(4343),
            ..MountConfig::default()
        },
        ..Setup::new(Backend::Crossfs)
    });
    fs::write(fx.e("f"), b"x").unwrap();
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(fx.m("f")).unwrap();
    assert_eq!((m.uid(), m.gid()), (4242, 4343));
    let h = fs::metadata(fx.e("f")).unwrap();
    assert_eq!(
        (h.uid(), h.gid()),
        (0, 0),
        "the server's ownership is unchanged"
    );
}
