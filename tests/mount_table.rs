//! The mount table tells the truth about `crossfs mount`: type `fuse.crossfs` and the
//! source as given, so that findmnt finds it and `mount -a` knows an fstab line is mounted;
//! a second mount on a point is refused unless asked for; and each client unmounts only its
//! own mount when two stand at one point. `crossfs mount -o` takes mount.crossfs's options.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

const PATIENCE: Duration = Duration::from_secs(20);

/// The mount table's entries at `mountpoint`, in mount order: (fstype, source, mount flags).
fn entries_at(mountpoint: &Path) -> Vec<(String, String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dash = f.iter().position(|x| *x == "-")?;
            (f[4] == mountpoint.to_str().unwrap()).then(|| {
                (
                    f[dash + 1].to_owned(),
                    f[dash + 2].to_owned(),
                    f[5].to_owned(),
                )
            })
        })
        .collect()
}

/// An export with one file, served on a unix socket; the work directory holds `mnt`.
fn host() -> (tempfile::TempDir, String, PathBuf, Serve) {
    let h = serve_one_file("hello", b"from the host");
    (h.work, h.addr, h.mnt, h.serve)
}

fn spawn_mount(addr: &str, mnt: &Path, extra: &[&str]) -> Child {
    Command::new(crossfs_bin())
        .arg("mount")
        .arg(addr)
        .arg(mnt)
        .args(extra)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_entries(mnt: &Path, n: usize) {
    wait_until(
        &format!("{n} mounts at {}", mnt.display()),
        PATIENCE,
        || entries_at(mnt).len() == n,
    );
}

fn sigterm(child: &Child) {
    run_ok(Command::new("kill").args(["-TERM", &child.id().to_string()]));
}

fn exits(child: &mut Child) -> bool {
    wait_until_ok(PATIENCE, || child.try_wait().unwrap().is_some())
}

fn wait_until_ok(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while !ready() {
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Unmounts whatever is left at `mnt` and kills the clients, whatever a failed test left.
struct Cleanup<'a>(&'a Path, Vec<Child>);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for child in &mut self.1 {
            let _ = child.kill();
            let _ = child.wait();
        }
        while !entries_at(self.0).is_empty() {
            let ok = Command::new("umount").arg("-l").arg(self.0).status();
            if !ok.is_ok_and(|s| s.success()) {
                break;
            }
        }
    }
}

#[test]
fn findmnt_shows_fuse_crossfs_and_the_source_as_given() {
    let (_work, addr, _mnt, _serve) = host();
    let mount = Mount::start(&addr, &[]);
    let out = run_ok(
        Command::new("findmnt")
            .args([
                "-t",
                "fuse.crossfs",
                "-n",
                "-o",
                "SOURCE,FSTYPE",
                "--mountpoint",
            ])
            .arg(&mount.mountpoint),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .collect::<Vec<_>>(),
        [addr.as_str(), "fuse.crossfs"]
    );
}

#[test]
fn a_second_mount_on_a_point_is_refused_unless_asked_for() {
    let (work, addr, mnt, _serve) = host();
    let mut cleanup = Cleanup(&mnt, vec![]);
    cleanup.1.push(spawn_mount(&addr, &mnt, &[]));
    wait_entries(&mnt, 1);

    let out = Command::new(crossfs_bin())
        .arg("mount")
        .arg(&addr)
        .arg(&mnt)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert_eq!(
        stderr_of(&out),
        format!(
            "crossfs: {} is already a mount point (fuse.crossfs from {addr}); pass \
             --allow-stacked (fstab: allow_stacked) to mount over it\n",
            mnt.display()
        )
    );
    assert_eq!(entries_at(&mnt).len(), 1);

    cleanup
        .1
        .push(spawn_mount(&addr, &mnt, &["--allow-stacked"]));
    wait_entries(&mnt, 2);
    assert_eq!(
        std::fs::read(mnt.join("hello")).unwrap(),
        b"from the host",
        "the mount on top serves"
    );

    // mount(8)'s helper: refused the same way (mount(8)'s "mount failure"), or, with
    // allow_stacked, returns once its own mount is there (not at the sight of another).
    let helper = work.path().join("mount.crossfs");
    std::os::unix::fs::symlink(crossfs_bin(), &helper).unwrap();
    let out = Command::new(&helper).arg(&addr).arg(&mnt).output().unwrap();
    assert_eq!(out.status.code(), Some(32), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("is already a mount point"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(entries_at(&mnt).len(), 2);
    run_ok(
        Command::new(&helper)
            .arg(&addr)
            .arg(&mnt)
            .args(["-o", "allow_stacked"]),
    );
    assert_eq!(entries_at(&mnt).len(), 3);
}

#[test]
fn sigterm_unmounts_only_the_clients_own_mount() {
    let (_work, addr, mnt, _serve) = host();
    let mut cleanup = Cleanup(&mnt, vec![]);
    cleanup.1.push(spawn_mount(&addr, &mnt, &[]));
    wait_entries(&mnt, 1);
    cleanup
        .1
        .push(spawn_mount(&addr, &mnt, &["--allow-stacked"]));
    wait_entries(&mnt, 2);

    // The top client goes; the lower mount stays, served by its client.
    sigterm(&cleanup.1[1]);
    assert!(exits(&mut cleanup.1[1]), "the top client exits");
    assert_eq!(entries_at(&mnt).len(), 1, "{:?}", entries_at(&mnt));
    assert!(
        cleanup.1[0].try_wait().unwrap().is_none(),
        "the lower client runs"
    );
    assert_eq!(std::fs::read(mnt.join("hello")).unwrap(), b"from the host");

    // The lower client, with a mount over its own, leaves that one alone: it unmounts its
    // own once the one above is gone.
    cleanup.1[1] = spawn_mount(&addr, &mnt, &["--allow-stacked"]);
    wait_entries(&mnt, 2);
    sigterm(&cleanup.1[0]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(entries_at(&mnt).len(), 2, "the mount on top stays");
    assert_eq!(std::fs::read(mnt.join("hello")).unwrap(), b"from the host");
    sigterm(&cleanup.1[1]);
    assert!(exits(&mut cleanup.1[1]), "the top client exits");
    assert!(exits(&mut cleanup.1[0]), "then the lower one");
    assert!(entries_at(&mnt).is_empty(), "{:?}", entries_at(&mnt));
}

/// `mount -a -T FSTAB`, three times, in a mount namespace of its own whose /sbin holds only
/// `mount.crossfs` (this build's), so that no installed helper is run and the mounts are
/// this test's alone.
#[test]
fn mount_a_three_times_leaves_one_mount() {
    let (work, addr, mnt, _serve) = host();
    let sbin = work.path().join("sbin");
    std::fs::create_dir(&sbin).unwrap();
    std::os::unix::fs::symlink(crossfs_bin(), sbin.join("mount.crossfs")).unwrap();
    let fstab = work.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "{addr} {} crossfs cache=auto,_netdev,nofail 0 0\n",
            mnt.display()
        ),
    )
    .unwrap();
    let script = format!(
        "set -e
         mount --bind {sbin} /sbin
         for i in 1 2 3; do mount -a -T {fstab}; done
         echo mounts $(grep -c ' {mnt} ' /proc/self/mountinfo)
         findmnt -n -t fuse.crossfs -o SOURCE,FSTYPE --mountpoint {mnt}
         cat {mnt}/hello; echo
         umount {mnt}
         echo after umount $(grep -c ' {mnt} ' /proc/self/mountinfo || true)",
        sbin = sbin.display(),
        fstab = fstab.display(),
        mnt = mnt.display()
    );
    let out = run_ok(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(script),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("mounts 1\n{addr} fuse.crossfs\nfrom the host\nafter umount 0\n")
    );
}

#[test]
fn mount_dash_o_takes_the_options_of_mount_crossfs() {
    let (work, addr, mnt, _serve) = host();
    let helper = work.path().join("mount.crossfs");
    std::os::unix::fs::symlink(crossfs_bin(), &helper).unwrap();
    let options = "ro,noexec,cache=never,default_permissions,reconnect,_netdev";

    // The same words through both doors give the same mount.
    run_ok(
        Command::new(&helper)
            .arg(&addr)
            .arg(&mnt)
            .args(["-o", options]),
    );
    let through_helper = entries_at(&mnt);
    run_ok(Command::new("umount").arg(&mnt));
    wait_entries(&mnt, 0);
    let mut cleanup = Cleanup(&mnt, vec![]);
    cleanup.1.push(spawn_mount(&addr, &mnt, &["-o", options]));
    wait_entries(&mnt, 1);
    assert_eq!(entries_at(&mnt), through_helper);
    let (_, _, flags) = &through_helper[0];
    for flag in ["ro", "noexec", "nosuid", "nodev"] {
        assert!(flags.split(',').any(|f| f == flag), "{flag} in {flags}");
    }
    let err = std::fs::write(mnt.join("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));

    // The same refusals, by name.
    for (bad, message) in [
        (
            "cache=auto,colour=blue",
            "unknown option `colour=blue` (see `crossfs mount --help`; mount options are \
             its flags without the dashes)",
        ),
        (
            "allow_root",
            "option `allow_root` is not supported: use allow_other (every user) or private \
             (only the one mounting)",
        ),
        (
            "reconnect,no_reconnect",
            "options `reconnect` and `no-reconnect` contradict each other",
        ),
    ] {
        let out = Command::new(crossfs_bin())
            .args(["mount", &addr, "/nonexistent", "-o", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
        assert_eq!(stderr_of(&out), format!("crossfs mount: {message}\n"));
        let out = Command::new(&helper)
            .args([&addr, "/nonexistent", "-o", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
        assert!(
            stderr_of(&out).starts_with(&format!("mount.crossfs: {message}\n")),
            "{}",
            stderr_of(&out)
        );
    }
}
