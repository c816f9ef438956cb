//! `O_TMPFILE` through `crossfs mount`: the mount has no FUSE_TMPFILE handler, so its
//! session answers the kernel's request ENOSYS and the program gets EOPNOTSUPP, as from a local file system
//! without `O_TMPFILE` (the README's differences); nothing reaches the export. The server
//! carries it (Ttmpfile, crates/server/tests/extension.rs), and a virtiofs guest gets it
//! (tests/virtiofs.rs).

mod common;
mod tools;

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use common::*;
use tools::assert_root;

/// open(2) of directory `dir` with `O_TMPFILE | O_RDWR`: the errno on failure.
fn open_tmpfile(dir: &Path) -> Result<std::fs::File, i32> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .map_err(|e| e.raw_os_error().unwrap())
}

#[test]
fn o_tmpfile_through_crossfs_mount_is_eopnotsupp_and_makes_nothing() {
    assert_root();
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    // The export's own file system has O_TMPFILE: the refusal is the mount's.
    assert!(open_tmpfile(&export).is_ok());
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let _serve = Serve::start(&export, &addr, &[]);
    let mount = Mount::start(&addr, &[]);
    // The kernel asks once, then remembers the answer.
    for _ in 0..2 {
        assert_eq!(
            open_tmpfile(&mount.mountpoint).err(),
            Some(libc::EOPNOTSUPP)
        );
    }
    assert_eq!(std::fs::read_dir(&export).unwrap().count(), 0);
    // The mount goes on as before.
    std::fs::write(mount.mountpoint.join("f"), "after").unwrap();
    assert_eq!(std::fs::read(export.join("f")).unwrap(), b"after");
}
