//! Installing crossfs as a user would: `scripts/install` into a temporary prefix and back
//! out, and the Debian package of `scripts/build-deb` installed with apt, mounted through
//! `mount -t crossfs` from an fstab line while `crossfs-serve@.service`'s command line
//! serves a `/etc/crossfs/NAME.conf`, and purged.
//!
//! systemd need not run here (CI machines and containers often lack it as PID 1): the
//! service's command line is run as systemd would run it (its EnvironmentFile read, its
//! variables expanded), and the unit file is checked with `systemd-analyze verify` where
//! that is installed.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// Subcommands whose pages and completions an install must carry.
const PAGES: [&str; 6] = ["serve", "mount", "stats", "watch", "sync", "bench"];

/// Unmounts `dir`, waits for its client to let go, and removes the log that mount(8)'s
/// helper gave the client (/var/log/crossfs/NAME.log).
fn unmount(dir: &Path) {
    run_ok(Command::new("umount").arg(dir));
    wait_until("the unmount", Duration::from_secs(10), || !is_mounted(dir));
    let _ = std::fs::remove_file(helper_client_log(dir));
}

/// `systemd-analyze verify` on a unit file, where systemd's tools are installed.
fn verify_unit(unit: &Path) {
    let present = Command::new("systemd-analyze")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        // --man=no: whether man(1) finds the pages is checked on its own.
        run_ok(
            Command::new("systemd-analyze")
                .args(["verify", "--man=no"])
                .arg(unit),
        );
    } else {
        eprintln!(
            "systemd-analyze is not installed: {} not verified",
            unit.display()
        );
    }
}

/// The path `ExecStart=` runs in a unit file.
fn exec_start(unit: &str) -> Vec<String> {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart=");
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn install_and_uninstall_into_a_temporary_prefix() {
    let root = tempfile::tempdir().unwrap();
    let prefix = root.path().join("usr/local");
    let sbin = root.path().join("sbin");
    run_ok(
        Command::new(repo_root().join("scripts/install"))
            .arg("--prefix")
            .arg(&prefix)
            .arg("--sbindir")
            .arg(&sbin)
            .arg("--bin")
            .arg(crossfs_bin()),
    );

    let installed = prefix.join("bin/crossfs");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(crossfs_bin()).unwrap()
    );
    // The helper points at the installed binary, never into a checkout.
    assert_eq!(
        std::fs::read_link(sbin.join("mount.crossfs")).unwrap(),
        installed
    );
    for page in
        std::iter::once("crossfs".to_owned()).chain(PAGES.iter().map(|p| format!("crossfs-{p}")))
    {
        let file = prefix.join(format!("share/man/man1/{page}.1.gz"));
        let out = run_ok(
            Command::new("man")
                .arg("-l")
                .arg(&file)
                .env("MANPAGER", "cat"),
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("NAME") && text.contains(&page),
            "{page}: {text}"
        );
    }
    let bash =
        std::fs::read_to_string(prefix.join("share/bash-completion/completions/crossfs")).unwrap();
    assert!(bash.contains("--reconnect-wait"), "bash completion");
    assert!(prefix.join("share/zsh/site-functions/_crossfs").exists());
    assert!(prefix
        .join("share/fish/vendor_completions.d/crossfs.fish")
        .exists());
    let unit_path = prefix.join("lib/systemd/system/crossfs-serve@.service");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    assert_eq!(exec_start(&unit)[0], installed.to_str().unwrap());
    verify_unit(&unit_path);

    // mount(8)'s helper, as installed, mounts.
    let host = serve_one_file("f", b"installed");
    let (mnt, addr) = (host.mnt.clone(), host.addr.clone());
    run_ok(
        Command::new(sbin.join("mount.crossfs"))
            .arg(&addr)
            .arg(&mnt)
            .args(["-o", "cache=auto"]),
    );
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"installed");
    unmount(&mnt);

    run_ok(
        Command::new(repo_root().join("scripts/install"))
            .arg("--uninstall")
            .arg("--prefix")
            .arg(&prefix),
    );
    let left: Vec<_> = walk(root.path())
        .into_iter()
        .filter(|p| !p.is_dir() || p.is_symlink())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Every path under `dir`, links not followed.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// What the Debian package test changed on this machine, undone when dropped: the
/// package purged, the instance's config removed, the server stopped.
struct Installed {
    conf: PathBuf,
    /// Whether the test made /etc/crossfs (removed again if so).
    made_conf_dir: bool,
    server: Option<Child>,
    mnt: PathBuf,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = std::fs::remove_file(&self.conf);
        if self.made_conf_dir {
            let _ = std::fs::remove_dir("/etc/crossfs");
        }
        if package_installed() {
            let _ = Command::new("dpkg").args(["--purge", "crossfs"]).status();
        }
    }
}

fn package_installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "crossfs"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// systemd's reading of an EnvironmentFile: KEY=VALUE lines, comments and blanks skipped.
fn environment_file(text: &str) -> HashMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
        .collect()
}

/// systemd's expansion of an ExecStart= command line: `${VAR}` is one word, `$VAR` is
/// split at white space (none if empty), `%i` is the instance name.
fn expand(words: &[String], env: &HashMap<String, String>, instance: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in words {
        let word = word.replace("%i", instance);
        if let Some(name) = word.strip_prefix("${").and_then(|w| w.strip_suffix('}')) {
            out.push(env.get(name).cloned().unwrap_or_default());
        } else if let Some(name) = word.strip_prefix('$') {
            let value = env.get(name).cloned().unwrap_or_default();
            out.extend(value.split_whitespace().map(str::to_owned));
        } else {
            out.push(word);
        }
    }
    out
}

#[test]
fn the_debian_package_installs_mounts_and_purges() {
    assert!(
        !package_installed(),
        "a crossfs package is installed on this machine; this test installs and purges its \
         own, so remove that one first (dpkg --purge crossfs)"
    );
    assert!(
        Path::new("/usr/sbin/mount.crossfs")
            .symlink_metadata()
            .is_err(),
        "/usr/sbin/mount.crossfs exists (scripts/install?); this test installs and purges \
         the package, which would replace it and then remove it: uninstall it first"
    );
    let out = run_ok(
        Command::new(repo_root().join("scripts/build-deb"))
            .arg("--bin")
            .arg(crossfs_bin()),
    );
    let deb = String::from_utf8(out.stdout).unwrap();
    let deb = PathBuf::from(
        deb.lines()
            .last()
            .expect("build-deb prints the package's path"),
    );
    assert!(deb.exists(), "{}", deb.display());

    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(export.join("f"), b"from the package").unwrap();
    let instance = format!("test-{}", std::process::id());
    let mut installed = Installed {
        conf: PathBuf::from(format!("/etc/crossfs/{instance}.conf")),
        made_conf_dir: !Path::new("/etc/crossfs").exists(),
        server: None,
        mnt: mnt.clone(),
    };
    run_ok(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .arg(&deb)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    );
    assert!(package_installed());
    assert_eq!(
        std::fs::read_link("/usr/sbin/mount.crossfs").unwrap(),
        Path::new("/usr/bin/crossfs")
    );
    let out = run_ok(Command::new("man").args(["-w", "crossfs-mount"]));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "/usr/share/man/man1/crossfs-mount.1.gz"
    );
    let unit_path = Path::new("/usr/lib/systemd/system/crossfs-serve@.service");
    let unit = std::fs::read_to_string(unit_path).unwrap();
    verify_unit(unit_path);

    // crossfs-serve@INSTANCE as systemd would start it, from the config format the README
    // gives.
    let sock = work.path().join("s.sock");
    std::fs::create_dir_all("/etc/crossfs").unwrap();
    std::fs::write(
        &installed.conf,
        format!(
            "# written by tests/install.rs\nEXPORT={}\nLISTEN=unix:{}\nOPTIONS=--read-only\n",
            export.display(),
            sock.display()
        ),
    )
    .unwrap();
    let env_file = unit
        .lines()
        .find_map(|l| l.strip_prefix("EnvironmentFile="))
        .expect("the unit reads an EnvironmentFile")
        .replace("%i", &instance);
    assert_eq!(Path::new(&env_file), installed.conf);
    let env = environment_file(&std::fs::read_to_string(&env_file).unwrap());
    let argv = expand(&exec_start(&unit), &env, &instance);
    assert_eq!(argv[0], "/usr/bin/crossfs");
    // RuntimeDirectory=crossfs: systemd makes /run/crossfs for the control socket.
    std::fs::create_dir_all("/run/crossfs").unwrap();
    let control = PathBuf::from(format!("/run/crossfs/{instance}.ctl"));
    installed.server = Some(
        Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until(
        "the service's control socket",
        Duration::from_secs(20),
        || std::os::unix::net::UnixStream::connect(&control).is_ok(),
    );
    let out = run_ok(
        Command::new("/usr/bin/crossfs")
            .arg("stats")
            .arg(&control)
            .arg("--json"),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"total\""));

    // An fstab line, mounted by mount(8) through the package's mount.crossfs.
    let fstab = work.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "unix:{} {} crossfs cache=auto,_netdev,nofail 0 0\n",
            sock.display(),
            mnt.display()
        ),
    )
    .unwrap();
    run_ok(Command::new("mount").arg("-T").arg(&fstab).arg(&mnt));
    assert!(is_mounted(&mnt));
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"from the package");
    // OPTIONS=--read-only reached the server.
    assert!(std::fs::write(mnt.join("g"), b"x").is_err());
    unmount(&mnt);

    run_ok(
        Command::new("apt-get")
            .args(["purge", "-y", "-q", "crossfs"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    );
    assert!(!package_installed());
    for gone in [
        "/usr/bin/crossfs",
        "/usr/sbin/mount.crossfs",
        "/usr/share/man/man1/crossfs-mount.1.gz",
        "/usr/lib/systemd/system/crossfs-serve@.service",
    ] {
        assert!(
            Path::new(gone).symlink_metadata().is_err(),
            "{gone} is left after the purge"
        );
    }
    drop(installed);
}
