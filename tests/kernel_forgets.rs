//! What the mount answers for a file the guest's kernel let go of. Alone in its test
//! binary: it empties the kernel's dentry and inode caches (`drop_caches`), which would
//! disturb the request counts other tests assert while they run beside it.

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn a_file_read_and_then_let_go_of_by_the_kernel_shows_its_access_time() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir_all(export.join("d")).unwrap();
    std::fs::write(export.join("d/f"), "content").unwrap();
    // Older than its change time: the server's read of it moves it.
    std::fs::File::open(export.join("d/f"))
        .unwrap()
        .set_times(
            std::fs::FileTimes::new()
                .set_accessed(std::time::UNIX_EPOCH + Duration::from_secs(1000)),
        )
        .unwrap();
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let _serve = Serve::start(&export, &addr, &[]);
    let mount = Mount::start(&addr, &[]);
    mount.wait_following();
    run_ok(
        Command::new(crossfs_bin())
            .arg("sync")
            .arg(&mount.mountpoint),
    );
    let guest = mount.mountpoint.join("d");

    // The directory stays held (open), and its replica with it; the file is read through
    // the server, then dropped from the guest kernel's caches.
    let _held = std::fs::File::open(&guest).unwrap();
    assert_eq!(std::fs::read_dir(&guest).unwrap().count(), 1);
    assert_eq!(std::fs::read(guest.join("f")).unwrap(), b"content");
    let host = std::fs::metadata(export.join("d/f")).unwrap();
    assert!(host.atime() > 1000, "the read moved the access time");
    let forgets = || {
        let fuse = &mount.stats()["fuse"];
        ["FORGET", "BATCH_FORGET"]
            .map(|op| fuse[op]["count"].as_u64().unwrap_or(0))
            .iter()
            .sum::<u64>()
    };
    std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    wait_until(
        "the kernel to let go of the file",
        Duration::from_secs(10),
        || forgets() > 0,
    );

    // Looked up again, answered from the replica, which has its attributes from before
    // the read: the guest still shows the access time the read left.
    let shown = std::fs::metadata(guest.join("f")).unwrap();
    assert_eq!(
        (shown.atime(), shown.atime_nsec()),
        (host.atime(), host.atime_nsec())
    );
}
