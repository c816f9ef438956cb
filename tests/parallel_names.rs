//! Names changed in parallel in one directory (issue 24, item 4: the rename/mkdir race that
//! parallel pjdfstest found). Two checks, each on a `--cache always` and a default mount:
//!
//! - **Workers that own their names.** Several threads share one directory, each changing
//!   only its own names (mkdir then rmdir; create, rename, then unlink; a directory renamed
//!   over an empty one; link, chown through the new name, unlink the old), so every outcome
//!   is known, and each step checks what a local directory would show right after it: the
//!   new name is there with the file's inode, the old one is gone, both names show the
//!   chown and the link count. The others' changes keep the change events coming late,
//!   behind the worker's own: what found both bugs this pins (a late removal event taken
//!   as the last word on a name renamed over since, and a late event of a removed file
//!   whose inode number the host had reused, which gave a hard link made next a second
//!   node in the kernel).
//! - **pjdfstest in parallel.** Four runs at once in one mount (rename, chown, link,
//!   rename), as `prove -j4` ran the C suite's files: every test passes.
//!
//! The short mode runs each for a few seconds; `CROSSFS_LONG=1` runs the workers for 60 s
//! and pjdfstest for 10 loops per mount.

mod common;
mod tools;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use tools::*;

fn long() -> bool {
    std::env::var_os("CROSSFS_LONG").is_some_and(|v| v == "1")
}

/// One worker: rounds of changes to its own names in `dir` until `until`; returns how many
/// rounds and what went wrong (nothing when every step showed what a local directory does).
fn worker(dir: &Path, w: usize, until: Instant) -> (u64, Vec<String>) {
    let mut wrong = Vec::new();
    let mut rounds = 0u64;
    let mut rng = Rng(0x9e37_79b9 ^ (w as u64 + 1));
    while Instant::now() < until && wrong.len() < 10 {
        rounds += 1;
        let a = dir.join(format!("w{w}-a{}", rounds % 7));
        let b = dir.join(format!("w{w}-b{}", rounds % 5));
        // The first worker only renames directories over empty ones, the step whose
        // answers the late removal events of its own earlier rounds contradict.
        let kind = if w == 0 { 2 } else { rng.below(4) };
        if let Err(e) = step(kind, &a, &b) {
            wrong.push(format!("worker {w}, round {rounds}: {e}"));
            // Leave nothing behind that would make the next rounds fail for this one.
            for p in [&a, &b] {
                let _ = std::fs::remove_dir(p).or_else(|_| std::fs::remove_file(p));
            }
        }
    }
    (rounds, wrong)
}

/// Checks that `path` has inode `ino` (and, for a file, `nlink` links and owner `uid`).
fn expect(path: &Path, ino: u64, file: Option<(u64, u32)>, after: &str) -> Result<(), String> {
    let md = std::fs::symlink_metadata(path)
        .map_err(|e| format!("lstat {} after {after}: {e}", path.display()))?;
    if md.ino() != ino {
        return Err(format!(
            "{} has inode {} after {after}, not {ino}",
            path.display(),
            md.ino()
        ));
    }
    if let Some((nlink, uid)) = file {
        if (md.nlink(), md.uid()) != (nlink, uid) {
            return Err(format!(
                "{} after {after}: {} links, owner {} (expected {nlink}, {uid})",
                path.display(),
                md.nlink(),
                md.uid()
            ));
        }
    }
    Ok(())
}

fn expect_gone(path: &Path, after: &str) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("lstat {} after {after}: {e}", path.display())),
        Ok(md) => Err(format!(
            "{} still there (inode {}) after {after}",
            path.display(),
            md.ino()
        )),
    }
}

fn step(kind: usize, a: &Path, b: &Path) -> Result<(), String> {
    let io = |what: &str, r: std::io::Result<()>| r.map_err(|e| format!("{what}: {e}"));
    let ino = |p: &Path| {
        std::fs::symlink_metadata(p)
            .map(|m| m.ino())
            .map_err(|e| format!("lstat {}: {e}", p.display()))
    };
    match kind {
        0 => {
            io("mkdir", std::fs::create_dir(a))?;
            let i = ino(a)?;
            expect(a, i, None, "mkdir")?;
            io("rmdir", std::fs::remove_dir(a))?;
            expect_gone(a, "rmdir")
        }
        1 => {
            io("create", std::fs::File::create_new(a).map(drop))?;
            let i = ino(a)?;
            io("rename", std::fs::rename(a, b))?;
            expect_gone(a, "rename")?;
            expect(b, i, Some((1, 0)), "rename")?;
            io("unlink", std::fs::remove_file(b))
        }
        2 => {
            io("mkdir a", std::fs::create_dir(a))?;
            io("mkdir b", std::fs::create_dir(b))?;
            let i = ino(a)?;
            io("rename over a directory", std::fs::rename(a, b))?;
            expect_gone(a, "rename over a directory")?;
            expect(b, i, None, "rename over a directory")?;
            io("rmdir", std::fs::remove_dir(b))
        }
        _ => {
            io("create", std::fs::File::create_new(a).map(drop))?;
            let i = ino(a)?;
            io("link", std::fs::hard_link(a, b))?;
            io(
                "chown",
                std::os::unix::fs::lchown(b, Some(65534), Some(65534)),
            )?;
            expect(a, i, Some((2, 65534)), "link and chown of the link")?;
            io("unlink", std::fs::remove_file(a))?;
            expect(b, i, Some((1, 65534)), "unlink of the other name")?;
            io("unlink", std::fs::remove_file(b))
        }
    }
}

fn serve_and_mount(cache: &str) -> (tempfile::TempDir, Serve, Mount) {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let serve = Serve::start(&export, &addr, &["--allow-devices", "--allow-setuid"]);
    let mount = Mount::start(&addr, &["--cache", cache, "--allow-other"]);
    mount.wait_following();
    (dir, serve, mount)
}

#[test]
fn workers_changing_their_own_names_in_one_directory_see_each_step_as_locally() {
    assert_root();
    let seconds = if long() { 60 } else { 4 };
    let mut report = String::new();
    let mut failed = false;
    for cache in ["always", "auto"] {
        let (_dir, _serve, mount) = serve_and_mount(cache);
        let shared = mount.mountpoint.join("shared");
        std::fs::create_dir(&shared).unwrap();
        let until = Instant::now() + Duration::from_secs(seconds);
        let results: Vec<(u64, Vec<String>)> = std::thread::scope(|s| {
            let running: Vec<_> = (0..4)
                .map(|w| {
                    let shared = &shared;
                    s.spawn(move || worker(shared, w, until))
                })
                .collect();
            running.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let rounds: u64 = results.iter().map(|(r, _)| r).sum();
        let wrong: Vec<&String> = results.iter().flat_map(|(_, w)| w).collect();
        report.push_str(&format!(
            "--cache {cache}: {rounds} rounds by 4 workers, {} wrong{}\n",
            wrong.len(),
            wrong.iter().fold(String::new(), |s, l| s + "\n  " + l)
        ));
        failed |= !wrong.is_empty() || rounds < 40;
    }
    eprintln!("{report}");
    assert!(!failed, "names changed in parallel:\n{report}");
}

#[test]
fn pjdfstest_runs_in_parallel_on_one_mount_all_pass() {
    assert_root();
    let status = Command::new("id").arg("tests").output().unwrap().status;
    assert!(
        status.success(),
        "pjdfstest needs the user \"tests\": run scripts/install-test-deps.sh"
    );
    let loops = if long() { 10 } else { 2 };
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("pjdfstest.toml");
    std::fs::write(&config, PJDFSTEST_CONFIG).unwrap();
    let second = tempfile::tempdir_in("/dev/shm").expect("a tmpfs at /dev/shm");
    std::fs::set_permissions(
        second.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let mut failures = Vec::new();
    for cache in ["always", "auto"] {
        let (dir, _serve, mut mount) = serve_and_mount(cache);
        open_to_all(dir.path());
        open_to_all(mount.mountpoint.parent().unwrap());
        for l in 0..loops {
            let runs: Vec<Run> = ["rename", "chown", "link", "rename"]
                .iter()
                .enumerate()
                .map(|(i, pattern)| {
                    let at = mount.mountpoint.join(format!("loop{l}-{i}"));
                    std::fs::create_dir(&at).unwrap();
                    open_to_all(&at);
                    let log = work.path().join(format!("{cache}-{l}-{i}.log"));
                    Run::start(
                        &format!("pjdfstest {pattern} on --cache {cache}"),
                        Command::new(tool("pjdfstest", PJDFSTEST_VERSION))
                            .arg("-c")
                            .arg(&config)
                            .arg("-p")
                            .arg(&at)
                            .arg("-s")
                            .arg(second.path())
                            .arg(pattern)
                            .current_dir(&at),
                        &log,
                        Duration::from_secs(300),
                    )
                })
                .collect();
            for run in runs {
                let what = run.what.clone();
                let (_, out) = run.wait();
                let outcomes: BTreeMap<String, String> = parse_outcomes(&out, &what);
                assert!(!outcomes.is_empty(), "{what} ran no test:\n{out}");
                failures.extend(
                    outcomes
                        .iter()
                        .filter(|(_, o)| *o == "FAILED")
                        .map(|(name, _)| format!("{what}, loop {l}: {name}")),
                );
            }
        }
        assert!(mount.stop().success(), "crossfs mount exits cleanly");
    }
    assert!(
        failures.is_empty(),
        "failed in parallel runs:\n{}",
        failures.join("\n")
    );
}
