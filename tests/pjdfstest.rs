//! POSIX conformance with a suite no one here wrote: pjdfstest (the Rust rewrite, pinned in
//! `scripts/install-test-deps.sh`), run as root on a local directory and on `crossfs mount`
//! of `crossfs serve`. Every test that passes locally must pass on the mount, except those
//! the README lists under "Differences from a local directory": a new failure fails this
//! test, and so does a listed difference that has gone away (the list must shrink).

mod common;
mod tools;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use tools::*;

/// Whether pjdfstest's test `name` compares a file's times across calls: with changes sent
/// behind, a regular file's times within the clock tick of its create are the mount's
/// prediction, and the test may fail depending on timing (README, "Differences from a
/// local directory").
fn compares_times(name: &str) -> bool {
    (name.contains("time") || name.contains("update"))
        && !name.ends_with("::dir")
        && !name.ends_with("::symlink")
        && !name.ends_with("::fifo")
        && !name.ends_with("::socket")
        && !name.ends_with("::block")
        && !name.ends_with("::char")
}

/// Runs pjdfstest in `dir`, with `second` as the "other file system" of the EXDEV tests.
fn pjdfstest(dir: &Path, second: &Path, config: &Path, label: &str) -> Outcomes {
    let log = config.with_file_name(format!("{label}.log"));
    let (_, out) = run_logged(
        &format!("pjdfstest on {label}"),
        Command::new(tool("pjdfstest", PJDFSTEST_VERSION))
            .arg("-c")
            .arg(config)
            .arg("-p")
            .arg(dir)
            .arg("-s")
            .arg(second)
            .current_dir(dir),
        &log,
        Duration::from_secs(300),
    );
    parse_outcomes(&out, label)
}

fn report(label: &str, local: &Outcomes, mount: &Outcomes) {
    for (name, o) in local {
        let m = mount.get(name).map_or("missing", String::as_str);
        if o != m {
            println!("  {name}: local {o}, {label} {m}");
        }
    }
}

/// Serves a fresh export with `serve_args`, mounts it with `mount_args` plus
/// `--allow-other` (pjdfstest switches to other users), and runs pjdfstest in it.
fn on_mount(serve_args: &[&str], mount_args: &[&str], config: &Path, label: &str) -> Outcomes {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let sock = dir.path().join("s.sock");
    let addr = format!("unix:{}", sock.display());
    let _serve = Serve::start(&export, &addr, serve_args);
    let mut args = vec!["--allow-other"];
    args.extend_from_slice(mount_args);
    let mut mount = Mount::start(&addr, &args);
    open_to_all(mount.mountpoint.parent().unwrap());
    let second = tempfile::tempdir_in("/dev/shm").expect("a tmpfs at /dev/shm");
    open_to_all(second.path());
    let outcomes = pjdfstest(&mount.mountpoint, second.path(), config, label);
    assert!(mount.stop().success(), "crossfs mount exits cleanly");
    outcomes
}

#[test]
fn pjdfstest_on_crossfs_mount_matches_local_directory() {
    assert_root();
    let status = Command::new("id").arg("tests").output().unwrap().status;
    assert!(
        status.success(),
        "pjdfstest needs the user \"tests\": run scripts/install-test-deps.sh"
    );
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("pjdfstest.toml");
    std::fs::write(&config, PJDFSTEST_CONFIG).unwrap();

    let local = tempfile::tempdir().unwrap();
    open_to_all(local.path());
    let second = tempfile::tempdir_in("/dev/shm").expect("a tmpfs at /dev/shm");
    open_to_all(second.path());
    let native = pjdfstest(local.path(), second.path(), &config, "local directory");

    let known = documented_differences();
    // Device nodes are exported only with --allow-devices, and clients' set-id bits kept
    // only with --allow-setuid (README); the rest of the semantics do not depend on them.
    // Each cache mode, and changes sent behind (which must not change what any call
    // answers).
    let configs: [&[&str]; 4] = [
        &["--cache", "auto"],
        &["--cache", "never"],
        &["--cache", "always"],
        &["--changes", "behind"],
    ];
    for mount_args in configs {
        let label = format!("crossfs mount {}", mount_args.join(" "));
        let serve = ["--allow-devices", "--allow-setuid"];
        let mount = on_mount(&serve, mount_args, &config, &label);
        report(&label, &native, &mount);
        let lost = lost(&native, &mount);
        let new: Vec<_> = lost
            .difference(&known)
            .filter(|name| !(mount_args == ["--changes", "behind"] && compares_times(name)))
            .collect();
        let gone: Vec<_> = known.difference(&lost).collect();
        assert!(
            new.is_empty() && gone.is_empty(),
            "{label}: passing locally but not through the mount, and not in the README: \
             {new:?}; listed in the README but now passing (remove them): {gone:?}"
        );
    }

    // A default server loses exactly the device-node and set-id cases in addition.
    let label = "crossfs mount, server without --allow-devices and --allow-setuid";
    let mount = on_mount(&[], &[], &config, label);
    let extra: Vec<_> = lost(&native, &mount).difference(&known).cloned().collect();
    assert!(
        !extra.is_empty(),
        "mknod of device nodes must be refused by default"
    );
    assert!(
        extra.iter().any(|n| n == "chmod::clear_isgid_bit"),
        "set-id bits from clients must be dropped by default: {extra:?}"
    );
    let others: Vec<_> = extra
        .iter()
        .filter(|n| !n.ends_with("::block") && !n.ends_with("::char"))
        .filter(|n| *n != "chmod::clear_isgid_bit")
        .collect();
    assert!(
        others.is_empty(),
        "{label}: lost more than device-node and set-id cases: {others:?}"
    );
    println!(
        "{label}: {} device-node and set-id cases refused",
        extra.len()
    );
}
