//! crossfs under virtiofsd's name, without a guest: what it refuses and how it says so,
//! what it tells a VMM manager that probes it, and that it takes an inherited listening
//! socket and exits when its VMM goes away. The guest served this way:
//! `tests/virtiofs.rs::crossfs_as_virtiofsd_serves_a_guest_as_libvirt_starts_it`.

mod common;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// A link named `virtiofsd` to the crossfs binary, as a VMM manager would find it.
fn virtiofsd(dir: &Path) -> PathBuf {
    let link = dir.join("virtiofsd");
    std::os::unix::fs::symlink(crossfs_bin(), &link).unwrap();
    link
}

#[test]
fn refusals_name_the_option_as_typed_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bin = virtiofsd(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (
            &["--fd=3", "--shared-dir=/srv", "--posix-acl"],
            "virtiofsd (crossfs): `--posix-acl` is not supported: crossfs does not offer \
             POSIX ACLs to the guest (FUSE_POSIX_ACL)\n",
        ),
        (
            &["--fd=3", "-o", "source=/srv,cache=always,flock"],
            "virtiofsd (crossfs): `-o flock` is not supported: crossfs's virtio door takes \
             no FUSE locks; the guest's kernel keeps them\n",
        ),
        (
            &[
                "--socket-path=/tmp/s",
                "--shared-dir",
                "/srv",
                "--seccomp=trap",
            ],
            "virtiofsd (crossfs): `--seccomp=trap` is not supported: crossfs installs no \
             seccomp filter; pass --seccomp=none\n",
        ),
        (
            &["--socket-path=/tmp/s"],
            "virtiofsd (crossfs): missing `--shared-dir` or `-o source`\n",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(&bin).args(*args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), *want, "{args:?}");
        // The subcommand says the same.
        let out = Command::new(crossfs_bin())
            .arg("virtiofsd")
            .args(*args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), *want, "{args:?}");
    }
    // Given something that is not a listening unix socket as --fd (here a file): refused,
    // naming the descriptor.
    let file = std::fs::File::create(dir.path().join("not-a-socket")).unwrap();
    let out = Command::new(&bin)
        .arg("--shared-dir")
        .arg(dir.path())
        .stdin(file.try_clone().unwrap())
        .arg("--fd=0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).ends_with(
            "virtiofsd (crossfs): serving virtio-fs on an inherited socket: fd:0: file \
             descriptor is not a socket, not a listening unix socket\n"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A socket that cannot be made fails the command, as virtiofsd fails (not a warning and
/// exit status 0, which a VMM manager would take for a clean end).
#[test]
fn a_socket_path_that_cannot_be_bound_fails() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("missing/vhost.sock");
    let out = Command::new(virtiofsd(dir.path()))
        .arg("--shared-dir")
        .arg(dir.path())
        .arg("--socket-path")
        .arg(&sock)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.ends_with(&format!(
            "virtiofsd (crossfs): vhost-user-fs on {}: socket error: No such file or \
             directory (os error 2)\n",
            sock.display()
        )),
        "{stderr}"
    );
}

#[test]
fn capabilities_say_separate_options_and_no_migration() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(virtiofsd(dir.path()))
        .arg("--print-capabilities")
        .output()
        .unwrap();
    assert!(out.status.success());
    let caps: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        caps,
        serde_json::json!({"type": "fs", "features": ["separate-options"]})
    );
}

/// Handed a listening socket as descriptor 3, as libvirt and Kata hand it, crossfs serves
/// the first VMM to connect and exits when it goes (here a VMM that connects and leaves
/// before saying anything), under the open-file limit `--rlimit-nofile` set.
#[test]
fn an_inherited_socket_is_served_until_its_vmm_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let sock = dir.path().join("vhost.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let raw = listener.as_raw_fd();
    let mut cmd = Command::new(virtiofsd(dir.path()));
    cmd.args(["--fd=3", "--rlimit-nofile=512", "-o"])
        .arg(format!("source={}", export.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    pass_as_fd3(&mut cmd, raw);
    let mut child = cmd.spawn().unwrap();
    drop(listener);
    drop(std::os::unix::net::UnixStream::connect(&sock).unwrap());
    let mut status = None;
    wait_until(
        "crossfs as virtiofsd to exit",
        Duration::from_secs(20),
        || {
            status = child.try_wait().unwrap();
            status.is_some()
        },
    );
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    assert!(status.unwrap().success(), "{log}");
    assert!(log.contains("vhost-user-fs: VMM connected"), "{log}");
    // --rlimit-nofile set the limit the export's descriptor budget comes from.
    assert!(log.contains("fd_limit=512 "), "{log}");
    assert!(!log.contains('\x1b'), "no colour in a pipe: {log}");
}
