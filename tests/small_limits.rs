//! Promises that hold at any size: a server whose open-file limit is 256 (a quarter of the
//! usual 1,024) serves a 20,000-entry tree through a mount with no error anywhere. The
//! `O_PATH` descriptors of what the guest holds are a cache the server closes and reopens
//! (crates/export/src/handles.rs); only open files count against a wall.

mod common;

use std::process::Command;

use common::{make_source_tree, run_ok, Mount, Serve};

/// A directory on tmpfs where there is one, so the figures do not follow the disk.
fn scratch() -> tempfile::TempDir {
    match tempfile::tempdir_in("/dev/shm") {
        Ok(dir) => dir,
        Err(_) => tempfile::tempdir().unwrap(),
    }
}

fn sh(script: &str) -> String {
    let out = run_ok(Command::new("sh").arg("-c").arg(script));
    assert!(
        out.stderr.is_empty(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_server_limited_to_256_descriptors_serves_a_20000_entry_tree() {
    let work = scratch();
    let (src, export) = (work.path().join("src"), work.path().join("export"));
    std::fs::create_dir(&src).unwrap();
    std::fs::create_dir(&export).unwrap();
    make_source_tree(&src, 1000);
    let tar = work.path().join("src.tar");
    sh(&format!("tar -cf {} -C {} .", tar.display(), src.display()));
    let sock = work.path().join("s.sock");
    let serve = Serve::start_limited(&export, &format!("unix:{}", sock.display()), &[], 256);
    let mount = Mount::start(&serve.listen, &[]);
    let mnt = mount.mountpoint.join("x");
    std::fs::create_dir(&mnt).unwrap();

    sh(&format!("tar -xf {} -C {}", tar.display(), mnt.display()));
    // Every file read back through the mount, and on the host, equals its source.
    sh(&format!("diff -r {} {}", src.display(), mnt.display()));
    sh(&format!(
        "diff -r {} {}",
        src.display(),
        export.join("x").display()
    ));
    for _ in 0..2 {
        let dirs = sh(&format!("find {} -type d | wc -l", mnt.display()));
        assert_eq!(dirs.trim(), "1001");
        let hits = sh(&format!("grep -r -l 'int x' {} | wc -l", mnt.display()));
        assert_eq!(hits.trim(), "19000");
    }

    let live = &serve.stats()["live"];
    let handles = &live["handles"];
    assert!(
        handles["closed"].as_u64().unwrap() > 0 && handles["reopened"].as_u64().unwrap() > 0,
        "the handle cache never had to close and reopen: {live}"
    );
    assert!(handles["open"].as_u64().unwrap() <= handles["capacity"].as_u64().unwrap() + 64);
    assert_eq!(live["open_files"]["refused"], 0, "{live}");
}
