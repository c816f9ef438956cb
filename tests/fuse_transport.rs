//! The mount's FUSE transports: with the kernel offering FUSE over io_uring
//! (`enable_uring`, set to Y for these tests and put back after), a mount with
//! `--io-uring` serves requests through its rings, and what goes through them reads back as
//! written; without it (the default) every request comes through `/dev/fuse`. `crossfs stats` counts
//! requests per transport.

mod common;
mod tools;

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Mutex;

use common::*;
use tools::assert_root;

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Serializes the tests that change the kernel's parameter, which is the machine's.
static PARAMETER: Mutex<()> = Mutex::new(());

/// `enable_uring` set to Y while held, put back as it was when dropped.
struct UringEnabled {
    before: String,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl UringEnabled {
    fn set() -> UringEnabled {
        let serial = PARAMETER.lock().unwrap_or_else(|e| e.into_inner());
        let before = std::fs::read_to_string(ENABLE_URING)
            .unwrap_or_else(|e| panic!("{ENABLE_URING}: {e} (a kernel before 6.14?)"));
        std::fs::write(ENABLE_URING, "Y").unwrap();
        UringEnabled {
            before: before.trim().to_string(),
            _serial: serial,
        }
    }
}

impl Drop for UringEnabled {
    fn drop(&mut self) {
        let _ = std::fs::write(ENABLE_URING, &self.before);
    }
}

fn transport(mount: &Mount) -> (u64, u64, u64) {
    let t = &mount.stats()["fuse_transport"];
    let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("no {k} in {t}"));
    (n("dev_fuse"), n("io_uring"), n("io_uring_queues"))
}

/// Names, attributes, a large write and its read, a listing: requests of each kind.
fn work(mnt: &Path, export: &Path) {
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    std::fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..20 {
        std::fs::write(mnt.join("d").join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let mut f = std::fs::File::create(mnt.join("big")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(std::fs::read(export.join("big")).unwrap(), data);
    let mut back = Vec::new();
    std::fs::File::open(mnt.join("big"))
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, data);
    let mut names: Vec<_> = std::fs::read_dir(mnt.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names.len(), 20);
    assert_eq!(std::fs::read_to_string(mnt.join("d/f7")).unwrap(), "file 7");
    std::fs::rename(mnt.join("d/f7"), mnt.join("d/g7")).unwrap();
    std::fs::remove_file(mnt.join("d/g7")).unwrap();
    assert!(!export.join("d/f7").exists() && !export.join("d/g7").exists());
}

fn served(extra: &[&str], check: impl FnOnce(&Mount, &Path)) {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let _serve = Serve::start(&export, &addr, &[]);
    let mount = Mount::start(&addr, extra);
    mount.wait_following();
    check(&mount, &export);
}

#[test]
fn io_uring_serves_where_the_kernel_offers_it_and_the_mount_asks() {
    assert_root();
    let _enabled = UringEnabled::set();
    served(&["--io-uring"], |mount, export| {
        work(&mount.mountpoint, export);
        let (_, ring, queues) = transport(mount);
        assert!(ring > 0, "no request came through io_uring");
        assert!(queues >= 1);
    });
}

#[test]
fn by_default_the_mount_keeps_to_dev_fuse_where_io_uring_is_offered() {
    assert_root();
    let _enabled = UringEnabled::set();
    served(&[], |mount, export| {
        work(&mount.mountpoint, export);
        let (dev, ring, queues) = transport(mount);
        assert!(dev > 0);
        assert_eq!((ring, queues), (0, 0));
    });
}
