//! Faults: `crossfs serve` killed with SIGKILL and started again under a workload on a real
//! `crossfs mount`. The mount reconnects by itself (re-attach, re-walk, reopen); callers see
//! at most EIO for calls in flight; nothing acknowledged by fsync is lost; file descriptors
//! opened before the restart keep working; host changes made while the server was down show
//! up after `crossfs sync`.

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{crossfs_bin, repo_root, run_ok, wait_until, Mount, Serve};

/// The workload's records: small writes, which the server copies on the connection's
/// reader.
const RECORD: usize = 4096;
/// Large ones, which it splices from the socket into the file on a worker (1 MiB and a page:
/// a WRITE of 1 MiB and one of a page each).
const LARGE_RECORD: usize = (1 << 20) + 4096;
/// Generous: CI machines are loaded.
const PATIENCE: Duration = Duration::from_secs(60);

/// Record `n` of `size` bytes: its number, then a byte pattern that depends on it.
fn record(n: u64, size: usize) -> Vec<u8> {
    let mut r = vec![(n % 251) as u8; size];
    r[..8].copy_from_slice(&n.to_le_bytes());
    r
}

fn serve(export: &Path, sock: &Path) -> Serve {
    Serve::start(export, &format!("unix:{}", sock.display()), &[])
}

/// A temporary directory holding an export with `files` (directories made as needed), and
/// where the server's socket goes; the server is started.
fn host(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, PathBuf, Serve) {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    for (path, contents) in files {
        let path = export.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    let sock = dir.path().join("crossfs.sock");
    let server = serve(&export, &sock);
    (dir, export, sock, server)
}

#[test]
fn the_mount_survives_server_restarts() {
    for cache in ["always", "auto"] {
        survives_restarts(cache, 3, RECORD);
    }
}

/// As above, the server killed while large writes are on their way from the socket into
/// the file through its pipes: what an fsync covered is there, whole.
#[test]
fn spliced_writes_survive_server_restarts() {
    let spliced = survives_restarts("auto", 2, LARGE_RECORD);
    assert!(spliced > 0, "the last server spliced no write");
}

/// Kills and restarts the server `restarts` times under a workload on a mount with `cache`,
/// writing records of `record_size` bytes; returns the bytes the last server spliced into
/// files.
fn survives_restarts(cache: &str, restarts: u64, record_size: usize) -> u64 {
    let (_dir, export, sock, mut server) = host(&[("deep/er/still/read.me", "stable contents\n")]);
    let mount = Mount::start(
        &format!("unix:{}", sock.display()),
        &["--reconnect-wait", "60", "--cache", cache],
    );
    let mnt = mount.mountpoint.clone();

    // The workload opens its files before the first restart and uses them after the last.
    let mut workload = Command::new("python3")
        .arg(repo_root().join("tests/scripts/restart_workload.py"))
        .arg(&mnt)
        .arg(record_size.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the workload");
    let durable = Arc::new(AtomicU64::new(0));
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = workload.stdout.take().unwrap();
    let (d, l) = (durable.clone(), lines.clone());
    let reading = thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let line = line.unwrap();
            match line.strip_prefix("durable ") {
                Some(n) => d.store(n.parse().unwrap(), Ordering::SeqCst),
                None => l.lock().unwrap().push(line),
            }
        }
    });

    wait_until("the workload to write", PATIENCE, || {
        durable.load(Ordering::SeqCst) >= 20
    });
    for restart in 0..restarts {
        let before = durable.load(Ordering::SeqCst);
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        // Changed on the host while no server runs: seen after the restart.
        std::fs::write(export.join("while-down"), format!("restart {restart}")).unwrap();
        thread::sleep(Duration::from_millis(300));
        server = serve(&export, &sock);
        // The workload goes on through the new server.
        wait_until("writes to resume after the restart", PATIENCE, || {
            durable.load(Ordering::SeqCst) >= before + 20
        });
    }
    writeln!(workload.stdin.take().unwrap(), "stop").unwrap();
    assert!(workload.wait().unwrap().success(), "the workload failed");
    reading.join().unwrap();
    let lines = lines.lock().unwrap();

    // Callers saw EIO at most, and only for the few calls around each restart.
    let errors: Vec<&String> = lines.iter().filter(|l| l.starts_with("error")).collect();
    for e in &errors {
        assert!(e.ends_with(&format!(" {}", libc::EIO)), "{cache}: {e}");
    }
    assert!(errors.len() as u64 <= 4 * restarts, "{cache}: {errors:?}");
    let last = durable.load(Ordering::SeqCst);
    eprintln!(
        "{cache}: {last} records durable, {} calls failed with EIO over {restarts} restarts",
        errors.len()
    );

    // Every record acknowledged by fsync is on the host, intact (record 0's place now
    // holds the final write).
    let journal = std::fs::read(export.join("journal")).unwrap();
    for n in 1..=last {
        let at = n as usize * record_size;
        assert!(
            journal.get(at..at + record_size) == Some(&record(n, record_size)[..]),
            "{cache}: record {n} of {last} is damaged or missing"
        );
    }
    // The descriptors opened before the restarts still worked after them.
    assert!(
        lines.contains(&r#"read b'stable contents\n'"#.to_string()),
        "{lines:?}"
    );
    assert_eq!(&journal[..5], b"after");
    assert_eq!(lines.last().map(String::as_str), Some("done"));

    // Change events resumed: a host change made now is visible after a sync, and so is the
    // one made while the server was down.
    std::fs::write(export.join("after-restart"), b"x").unwrap();
    run_ok(Command::new(crossfs_bin()).arg("sync").arg(&mnt));
    assert!(mnt.join("after-restart").exists());
    assert_eq!(
        std::fs::read_to_string(mnt.join("while-down")).unwrap(),
        format!("restart {}", restarts - 1)
    );
    assert_eq!(mount.stats()["reconnects"], restarts);
    let spliced = server.stats()["data"]["write_spliced"].as_u64().unwrap();
    drop(server);
    spliced
}

#[test]
fn calls_fail_with_eio_while_the_server_stays_down() {
    let (_dir, export, sock, mut server) = host(&[("file", "contents")]);
    let mount = Mount::start(
        &format!("unix:{}", sock.display()),
        &["--reconnect-wait", "1", "--cache", "never"],
    );
    let file = mount.mountpoint.join("file");
    assert_eq!(std::fs::read(&file).unwrap(), b"contents");
    server.child.kill().unwrap();
    server.child.wait().unwrap();

    // Within the wait, then after it: EIO, never a hang.
    let started = Instant::now();
    for _ in 0..3 {
        let e = std::fs::metadata(&file).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    }
    assert!(started.elapsed() < PATIENCE);
    // Each was logged with its cause and counted (issue 24: no silent EIO).
    let given = mount.stats()["io_errors"].as_u64().unwrap();
    assert!(given >= 3, "{given} EIOs counted, 3 given");

    // Back: the same path works again.
    let _server = serve(&export, &sock);
    wait_until("the mount to reconnect", PATIENCE, || {
        match std::fs::read(&file) {
            Ok(data) => {
                assert_eq!(data, b"contents");
                true
            }
            Err(e) if e.kind() != ErrorKind::NotFound => false,
            Err(e) => panic!("{e}"),
        }
    });
}

#[test]
fn files_replaced_while_the_server_was_down_are_looked_up_again() {
    let (_dir, export, sock, mut server) = host(&[("a/b/file", "old"), ("kept", "kept")]);
    // No change events: only the reconnect itself can notice the replacement. Long cache
    // timeouts keep the kernel's entries for the old files. (This test holds files on the
    // mount while it starts a server; without a writeback cache, closing them at the
    // server's exec needs no server.)
    let mount = Mount::start(
        &format!("unix:{}", sock.display()),
        &["--no-events", "--cache", "metadata"],
    );
    let mnt = mount.mountpoint.clone();
    let mut old = File::open(mnt.join("a/b/file")).unwrap();
    let kept = File::open(mnt.join("kept")).unwrap();
    assert_eq!(std::fs::read(mnt.join("a/b/file")).unwrap(), b"old");

    server.child.kill().unwrap();
    server.child.wait().unwrap();
    // Replaced on the host: the directory and the file are other inodes now.
    std::fs::rename(export.join("a"), export.join("a.old")).unwrap();
    std::fs::create_dir_all(export.join("a/b")).unwrap();
    std::fs::write(export.join("a/b/file"), b"new").unwrap();
    server = serve(&export, &sock);

    // The path reaches the new file (the kernel retries a stale walk).
    wait_until("the mount to reconnect", PATIENCE, || {
        std::fs::metadata(mnt.join("kept")).is_ok()
    });
    assert_eq!(std::fs::read(mnt.join("a/b/file")).unwrap(), b"new");
    // The descriptor of the replaced file is stale; the other one was reopened.
    let mut buf = Vec::new();
    let e = old.read_to_end(&mut buf).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
    let mut text = [0u8; 4];
    kept.read_exact_at(&mut text, 0).unwrap();
    assert_eq!(&text, b"kept");
    drop(server);
}

#[test]
fn watch_carries_on_through_a_server_restart() {
    let (_dir, export, sock, mut server) = host(&[]);
    let mut watch = Command::new(crossfs_bin())
        .args(["watch", &format!("unix:{}", sock.display()), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = BufReader::new(watch.stdout.take().unwrap());
    thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let ev: serde_json::Value = serde_json::from_str(&line).unwrap();
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
    // Waits for an event on `path` of `kind`, returning it.
    let expect = |kind: &str, path: &str| loop {
        let ev = rx
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("crossfs watch never printed {kind} {path}"));
        if ev["kind"] == kind && ev["path"] == path {
            return ev;
        }
    };
    // Created until seen: the watch may not be attached yet when the first file appears.
    let mut n = 0;
    let first = loop {
        std::fs::write(export.join(format!("before-{n}")), b"x").unwrap();
        match rx.recv_timeout(Duration::from_secs(2)) {
            Ok(ev) if ev["kind"] == "created" => break ev,
            _ => n += 1,
        }
    };
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    server = serve(&export, &sock);
    let rescan = expect("rescan", "");
    assert_ne!(rescan["epoch"], first["epoch"], "a new server, a new epoch");
    std::fs::write(export.join("after"), b"x").unwrap();
    expect("created", "after");
    let _ = watch.kill();
    let _ = watch.wait();
    drop(server);
}

#[test]
fn an_open_file_renewed_by_a_host_change_is_reopened_after_a_restart() {
    let (_dir, export, sock, mut server) = host(&[("file", "first")]);
    let mount = Mount::start(
        &format!("unix:{}", sock.display()),
        &["--reconnect-wait", "60", "--cache", "always"],
    );
    mount.wait_following();
    let mnt = mount.mountpoint.clone();
    // A process of its own holds the file open (see restart_workload.py for why): it
    // reads it when told, and then writes and fsyncs through the same descriptor.
    let holder = "import os, sys\n\
        fd = os.open(sys.argv[1], os.O_RDWR)\n\
        print('open', flush=True)\n\
        for line in sys.stdin:\n\
        \x20   try:\n\
        \x20       os.pwrite(fd, b'guest', 0); os.fsync(fd)\n\
        \x20       print('read', os.pread(fd, 64, 0), flush=True)\n\
        \x20   except OSError as e:\n\
        \x20       print('error', e.errno, flush=True)\n";
    let mut child = Command::new("python3")
        .args(["-c", holder])
        .arg(mnt.join("file"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(out.next().unwrap().unwrap(), "open");

    // A host change to the open file: with the writeback cache the mount gives the file a
    // new node (the kernel keeps its own size for the old one), and a lookup makes it.
    std::fs::write(export.join("file"), "second").unwrap();
    run_ok(Command::new(crossfs_bin()).arg("sync").arg(&mnt));
    assert_eq!(std::fs::read(mnt.join("file")).unwrap(), b"second");

    server.child.kill().unwrap();
    server.child.wait().unwrap();
    server = serve(&export, &sock);
    wait_until("the mount to reconnect", PATIENCE, || {
        mount.stats()["reconnects"] == 1 && std::fs::metadata(mnt.join("file")).is_ok()
    });
    // The descriptor opened before the change and the restart still reaches the file (its
    // old inode's size is the kernel's own, 5 bytes: the read may stop there).
    writeln!(stdin, "go").unwrap();
    let read = out.next().unwrap().unwrap();
    assert!(read.starts_with("read b'guest"), "{read}");
    assert_eq!(std::fs::read(export.join("file")).unwrap(), b"guestd");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    drop(server);
}
