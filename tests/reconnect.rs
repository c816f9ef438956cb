//! Faults: `crossfs serve` killed with SIGKILL and started again under a workload on a real
//! `crossfs mount`. The mount reconnects by itself (re-attach, re-walk, reopen); callers see
//! at most EIO for calls in flight; nothing acknowledged by fsync is lost; file descriptors
//! opened before the restart keep working; host changes made while the server was down show
//! up after `crossfs sync`.

mod common;

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{crossfs_bin, run_ok, wait_until, Mount, Serve};

const RECORD: usize = 4096;
/// Generous: CI machines are loaded.
const PATIENCE: Duration = Duration::from_secs(60);

/// Record `n`: its number, then a byte pattern that depends on it.
fn record(n: u64) -> Vec<u8> {
    let mut r = vec![(n % 251) as u8; RECORD];
    r[..8].copy_from_slice(&n.to_le_bytes());
    r
}

/// What one workload thread saw.
#[derive(Default)]
struct Outcome {
    /// Errors by kind, with the call that got them.
    errors: Vec<(String, std::io::Error)>,
}

fn serve(export: &Path, sock: &Path) -> Serve {
    Serve::start(export, &format!("unix:{}", sock.display()), &[])
}

#[test]
fn the_mount_survives_a_server_restart() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir_all(export.join("deep/er/still")).unwrap();
    std::fs::write(export.join("deep/er/still/read.me"), b"stable contents\n").unwrap();
    let sock = dir.path().join("crossfs.sock");
    let mut server = serve(&export, &sock);
    let mount = Mount::start(
        &format!("unix:{}", sock.display()),
        &["--reconnect-wait", "60"],
    );
    let mnt = mount.mountpoint.clone();

    // Opened before the restart, used after it: reopened by the mount.
    let mut reader = File::open(mnt.join("deep/er/still/read.me")).unwrap();
    let writer = OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(mnt.join("journal"))
        .unwrap();
    let writer = Arc::new(writer);

    // Writer: record n at offset n * RECORD, fsync, then note n as durable. A failed call
    // is retried (a pwrite at a fixed offset is idempotent).
    let stop = Arc::new(AtomicBool::new(false));
    let durable = Arc::new(AtomicU64::new(0));
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let w = {
        let (stop, durable, outcome, file) = (
            stop.clone(),
            durable.clone(),
            outcome.clone(),
            writer.clone(),
        );
        thread::spawn(move || {
            let mut n = 1u64;
            while !stop.load(Ordering::SeqCst) {
                let r = file
                    .write_all_at(&record(n), n * RECORD as u64)
                    .and_then(|()| file.sync_data());
                match r {
                    Ok(()) => {
                        durable.store(n, Ordering::SeqCst);
                        n += 1;
                    }
                    Err(e) => outcome.lock().unwrap().errors.push(("write".into(), e)),
                }
            }
        })
    };
    // Metadata: stat a deep path and list a directory, over and over.
    let m = {
        let (stop, outcome, mnt) = (stop.clone(), outcome.clone(), mnt.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let r = std::fs::metadata(mnt.join("deep/er/still/read.me"))
                    .and_then(|_| std::fs::read_dir(mnt.join("deep/er")).map(drop));
                if let Err(e) = r {
                    outcome.lock().unwrap().errors.push(("stat".into(), e));
                }
                thread::sleep(Duration::from_millis(2));
            }
        })
    };

    wait_until("the workload to write", PATIENCE, || {
        durable.load(Ordering::SeqCst) >= 20
    });
    let before = durable.load(Ordering::SeqCst);
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    // Changed on the host while no server runs: seen after the restart.
    std::fs::write(export.join("while-down"), b"made while the server was down").unwrap();
    thread::sleep(Duration::from_millis(300));
    server = serve(&export, &sock);

    // The workload goes on through the new server.
    wait_until("writes to resume after the restart", PATIENCE, || {
        durable.load(Ordering::SeqCst) >= before + 20
    });
    stop.store(true, Ordering::SeqCst);
    w.join().unwrap();
    m.join().unwrap();

    // Callers saw EIO at most, and only for the few calls around the restart.
    let outcome = outcome.lock().unwrap();
    for (call, e) in &outcome.errors {
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{call}: {e}");
    }
    assert!(outcome.errors.len() <= 8, "{:?}", outcome.errors);

    // Every record acknowledged by fsync is on the host, intact.
    let last = durable.load(Ordering::SeqCst);
    let mut journal = File::open(export.join("journal")).unwrap();
    for n in 1..=last {
        let mut buf = vec![0u8; RECORD];
        journal.seek(SeekFrom::Start(n * RECORD as u64)).unwrap();
        journal.read_exact(&mut buf).unwrap();
        assert!(
            buf == record(n),
            "record {n} of {last} is damaged or missing"
        );
    }

    // The descriptors opened before the restart still work.
    let mut text = String::new();
    reader.read_to_string(&mut text).unwrap();
    assert_eq!(text, "stable contents\n");
    writer.write_all_at(b"after", 0).unwrap();
    writer.sync_all().unwrap();
    assert_eq!(
        &std::fs::read(export.join("journal")).unwrap()[..5],
        b"after"
    );

    // Change events resumed: a host change made now is visible after a sync, and so is the
    // one made while the server was down.
    std::fs::write(export.join("after-restart"), b"x").unwrap();
    run_ok(Command::new(crossfs_bin()).arg("sync").arg(&mnt));
    assert!(mnt.join("after-restart").exists());
    assert_eq!(
        std::fs::read(mnt.join("while-down")).unwrap(),
        b"made while the server was down"
    );
    assert_eq!(mount.stats()["reconnects"], 1);
    drop(server);
}

#[test]
fn calls_fail_with_eio_while_the_server_stays_down() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::write(export.join("file"), b"contents").unwrap();
    let sock = dir.path().join("crossfs.sock");
    let mut server = serve(&export, &sock);
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
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir_all(export.join("a/b")).unwrap();
    std::fs::write(export.join("a/b/file"), b"old").unwrap();
    std::fs::write(export.join("kept"), b"kept").unwrap();
    let sock = dir.path().join("crossfs.sock");
    let mut server = serve(&export, &sock);
    // No change events: only the reconnect itself can notice the replacement. Long cache
    // timeouts keep the kernel's entries for the old files.
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
