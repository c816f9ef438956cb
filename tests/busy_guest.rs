//! A guest busy with other programs: one that holds 40,000 open files (an IDE, a browser
//! and a build hold as many on a developer's machine). The mount looks for file watchers in
//! `/proc`, where every open file of every process is a link to read; that must never make
//! it fall behind the host's changes: a burst of host changes is followed, and `crossfs
//! sync` returns within its own timeout, however many files the guest holds open. And a
//! watcher started on that busy guest still sees every host change under it, and so does
//! a program that was running before and starts watching later.
//!
//! Against a real `crossfs serve` and a real FUSE mount, as root. Nothing asserts how
//! fast anything is; the sync's timeout is the product's own promise.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

/// Processes holding `n` descriptors of /dev/null open in all, 10,000 each (under the
/// hard limits users have), until dropped.
struct Hoarders(Vec<Child>);

impl Hoarders {
    fn start(n: usize) -> Hoarders {
        const EACH: usize = 10_000;
        let script = format!(
            "import os, resource, time\n\
             hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n\
             resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))\n\
             fds = [os.open('/dev/null', os.O_RDONLY) for _ in range({EACH})]\n\
             print('open', flush=True)\n\
             time.sleep(3600)\n"
        );
        let mut hoarders = Hoarders(Vec::new());
        for _ in 0..n.div_ceil(EACH) {
            let mut child = Command::new("python3")
                .arg("-c")
                .arg(&script)
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3");
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            hoarders.0.push(child);
            assert_eq!(line.trim(), "open", "the descriptors were not opened");
        }
        hoarders
    }
}

impl Drop for Hoarders {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn a_burst_of_host_changes_is_followed_on_a_guest_holding_many_open_files() {
    tools::assert_root();
    let _busy = Hoarders::start(40_000);
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    fs::create_dir_all(export.join("d")).unwrap();
    const FILES: usize = 2_000;
    for i in 0..FILES {
        fs::write(export.join(format!("d/f{i}")), b"before").unwrap();
    }
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let _serve = Serve::start(&export, &addr, &[]);
    let mount = Mount::start(&addr, &[]);
    mount.wait_following();
    // The guest knows every file (so each host change is news to its caches).
    let mnt = mount.mountpoint.clone();
    assert_eq!(fs::read_dir(mnt.join("d")).unwrap().count(), FILES);
    for i in 0..FILES {
        assert_eq!(fs::read(mnt.join(format!("d/f{i}"))).unwrap(), b"before");
    }

    // The host changes each of them, in bursts.
    for i in 0..FILES {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(export.join(format!("d/f{i}")))
            .unwrap();
        f.write_all(b" after").unwrap();
        if i % 100 == 99 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    let out = mount.sync();
    assert!(
        out.status.success(),
        "crossfs sync: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in (0..FILES).step_by(97) {
        assert_eq!(
            fs::read(mnt.join(format!("d/f{i}"))).unwrap(),
            b"before after",
            "f{i} after the sync"
        );
    }
}

#[test]
fn a_watcher_started_on_a_busy_guest_sees_every_host_change_under_it() {
    let busy = BusyGuest::start();
    let (export, mount) = (busy.dir.path().join("export"), &busy.mount);
    let watched = mount.mountpoint.join("w");
    // inotifywait (inotify-tools) prints each event as it comes; started now, after the
    // mount has looked for watchers many times.
    let mut watcher = Command::new("inotifywait")
        .args(["-m", "-e", "create", "--format", "%f"])
        .arg(&watched)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("inotifywait (inotify-tools)");
    let mut ready = String::new();
    let mut err = BufReader::new(watcher.stderr.take().unwrap());
    while !ready.contains("Watches established") {
        ready.clear();
        assert_ne!(err.read_line(&mut ready).unwrap(), 0, "inotifywait ended");
    }
    // Host changes right after the watch was made.
    for i in 0..20 {
        fs::write(export.join(format!("w/new{i}")), b"x").unwrap();
    }
    let out = mount.sync();
    assert!(out.status.success(), "{out:?}");
    let seen = names_printed(BufReader::new(watcher.stdout.take().unwrap()).lines(), 20);
    let _ = watcher.kill();
    let _ = watcher.wait();
    assert_eq!(
        seen,
        new_names(20),
        "the guest watcher saw each host create"
    );
}

#[test]
fn a_program_running_before_that_starts_watching_later_sees_every_host_change() {
    let busy = BusyGuest::start();
    let (export, mount) = (busy.dir.path().join("export"), &busy.mount);
    let watched = mount.mountpoint.join("w");
    // A program (an editor, a dev server) that watches nothing yet: inotify through libc,
    // once told to on its stdin.
    let script = "import ctypes, os, struct, sys\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         print('running', flush=True)\n\
         path = sys.stdin.readline().strip().encode()\n\
         fd = libc.inotify_init1(0)\n\
         assert libc.inotify_add_watch(fd, path, 0x100) >= 0\n\
         print('watching', flush=True)\n\
         while True:\n\
         \x20   buf = os.read(fd, 65536)\n\
         \x20   i = 0\n\
         \x20   while i < len(buf):\n\
         \x20       wd, mask, cookie, n = struct.unpack_from('iIII', buf, i)\n\
         \x20       print(buf[i + 16:i + 16 + n].rstrip(b'\\0').decode(), flush=True)\n\
         \x20       i += 16 + n\n";
    let mut program = Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut lines = BufReader::new(program.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "running");
    // Host changes while it runs, so the mount has looked at it and found no watch.
    for i in 0..5 {
        fs::write(export.join(format!("w/before{i}")), b"x").unwrap();
    }
    assert!(mount.sync().status.success());
    writeln!(program.stdin.as_mut().unwrap(), "{}", watched.display()).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "watching");
    for i in 0..20 {
        fs::write(export.join(format!("w/new{i}")), b"x").unwrap();
    }
    let out = mount.sync();
    assert!(out.status.success(), "{out:?}");
    let seen = names_printed(lines, 20);
    let _ = program.kill();
    let _ = program.wait();
    assert_eq!(
        seen,
        new_names(20),
        "the program saw each host create after it began watching"
    );
}

/// A served export with a directory `w` the guest has listed, mounted beside processes
/// holding 40,000 open files; dropped in order (the mount before its server).
struct BusyGuest {
    mount: Mount,
    _serve: Serve,
    dir: tempfile::TempDir,
    _busy: Hoarders,
}

impl BusyGuest {
    fn start() -> BusyGuest {
        tools::assert_root();
        let busy = Hoarders::start(40_000);
        let dir = tempfile::tempdir().unwrap();
        let export = dir.path().join("export");
        fs::create_dir_all(export.join("w")).unwrap();
        let addr = format!("unix:{}", dir.path().join("s.sock").display());
        let serve = Serve::start(&export, &addr, &[]);
        let mount = Mount::start(&addr, &[]);
        mount.wait_following();
        fs::read_dir(mount.mountpoint.join("w"))
            .unwrap()
            .for_each(drop);
        BusyGuest {
            mount,
            _serve: serve,
            dir,
            _busy: busy,
        }
    }
}

/// The names `new0` .. `new{n-1}`, as the host creates them.
fn new_names(n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("new{i}")).collect()
}

/// The distinct lines a watcher prints, until `n` came or none came for 30 s.
fn names_printed(
    lines: impl Iterator<Item = std::io::Result<String>> + Send + 'static,
    n: usize,
) -> BTreeSet<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines {
            let _ = tx.send(line.unwrap());
        }
    });
    let mut seen = BTreeSet::new();
    while seen.len() < n {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(name) => {
                seen.insert(name);
            }
            Err(_) => break,
        }
    }
    seen
}

mod tools;
