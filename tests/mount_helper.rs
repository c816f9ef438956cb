//! `mount.crossfs`, mount(8)'s helper: the binary under that name returns once the mount is in
//! place, with the client carrying on in the background; bad options and unreachable servers
//! fail with mount(8)'s statuses (1 and 32) and leave nothing mounted; and `mount -t crossfs`
//! from an fstab line works.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// A directory holding `mount.crossfs`, a link to the binary under test.
fn helper_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let helper = dir.path().join("mount.crossfs");
    std::os::unix::fs::symlink(crossfs_bin(), &helper).unwrap();
    (dir, helper)
}

/// Unmounts `dir` and waits for the client to let go of it.
fn unmount(dir: &Path) {
    run_ok(Command::new("umount").arg(dir));
    wait_until("the unmount", Duration::from_secs(10), || !is_mounted(dir));
}

#[test]
fn the_helper_returns_once_mounted_and_the_client_carries_on() {
    let (_bin, helper) = helper_dir();
    let host = serve_one_file("hello", b"from the host");
    let (export, mnt, addr) = (host.export.clone(), host.mnt.clone(), host.addr.clone());

    let out = Command::new(&helper)
        .arg(&addr)
        .arg(&mnt)
        .args([
            "-o",
            "cache=auto,_netdev,negative_ttl=0,x-systemd.automount",
            "-n",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}: {}", out.status, stderr_of(&out));
    // The helper has exited; the mount is there and served.
    assert!(is_mounted(&mnt));
    assert_eq!(std::fs::read(mnt.join("hello")).unwrap(), b"from the host");
    std::fs::write(mnt.join("back"), b"from the guest").unwrap();
    assert_eq!(
        std::fs::read(export.join("back")).unwrap(),
        b"from the guest"
    );
    unmount(&mnt);
    // The client logged to the file the README names, without colour codes, through to
    // its unmount.
    let canonical = std::fs::canonicalize(&mnt).unwrap();
    let log = helper_client_log(&mnt);
    wait_until(
        "the client's last log line",
        Duration::from_secs(10),
        || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("unmounted ")),
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(
        text.contains(&format!("mounted {addr} on {}", canonical.display())),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "{text}");
}

#[test]
fn bad_options_and_absent_servers_fail_and_mount_nothing() {
    let (_bin, helper) = helper_dir();
    let work = tempfile::tempdir().unwrap();
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let addr = format!("unix:{}", work.path().join("nobody-listens.sock").display());

    let out = Command::new(&helper)
        .args([&addr, mnt.to_str().unwrap(), "-o", "cache=auto,colour=blue"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "usage error: {}",
        stderr_of(&out)
    );
    assert!(
        stderr_of(&out).contains("unknown option `colour=blue`"),
        "{}",
        stderr_of(&out)
    );

    let out = Command::new(&helper)
        .args([&addr, mnt.to_str().unwrap(), "-o", "cache=auto"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(32),
        "mount failure: {}",
        stderr_of(&out)
    );
    assert!(
        stderr_of(&out).contains("nobody-listens.sock"),
        "the client's error is shown: {}",
        stderr_of(&out)
    );
    assert!(!is_mounted(&mnt));
    let _ = std::fs::remove_file(helper_client_log(&mnt));

    // -f: everything but the mount.
    let out = Command::new(&helper)
        .args([&addr, mnt.to_str().unwrap(), "-f", "-o", "cache=never"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(!is_mounted(&mnt));
}

/// Removes /sbin/mount.crossfs when dropped, if this test made it.
struct SbinLink(Option<PathBuf>);

impl Drop for SbinLink {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn mount_t_crossfs_from_an_fstab_line() {
    let sbin = PathBuf::from("/sbin/mount.crossfs");
    let _link = if sbin.symlink_metadata().is_ok() {
        // Installed already (scripts/install, or the package): mount(8) runs that one.
        SbinLink(None)
    } else {
        std::os::unix::fs::symlink(crossfs_bin(), &sbin).unwrap();
        SbinLink(Some(sbin))
    };
    let host = serve_one_file("f", b"fstab");
    let (work, mnt, addr) = (&host.work, host.mnt.clone(), host.addr.clone());
    let fstab = work.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# a guest's line, with a unix socket for the test\n\
             {addr} {} crossfs cache=auto,_netdev,nofail 0 0\n",
            mnt.display()
        ),
    )
    .unwrap();
    run_ok(Command::new("mount").arg("-T").arg(&fstab).arg(&mnt));
    assert!(is_mounted(&mnt));
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"fstab");
    unmount(&mnt);
    let _ = std::fs::remove_file(helper_client_log(&mnt));
}
