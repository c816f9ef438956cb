//! Changes sent behind (`crossfs mount --changes behind`), against a real `crossfs serve`
//! and a real FUSE mount: creates, setattrs and small writes are answered by the mount and
//! reach the host after, in order with everything else; a name a host program took first
//! keeps the host's file, with the guest's beside it; after `crossfs sync` the host and the
//! mount agree exactly (attributes to the nanosecond, contents); a change the host refuses
//! fails the file's next fsync or close and the next sync, and the mount's view goes back
//! to the host's; changes lost with the connection are sent again on the next one; a
//! mount killed mid-work leaves on the host everything an fsync covered.
//!
//! Runs as root (FUSE, tmpfs). Nothing asserts how fast anything is.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use common::*;

const PATIENCE: Duration = Duration::from_secs(60);

struct Setup {
    dir: tempfile::TempDir,
    export: PathBuf,
    addr: String,
    serve: Serve,
    mount: Mount,
    /// Dropped last, after the mount and the server.
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

/// These tests stop the server and time how long a change waits: run side by side on a
/// 2-core machine, a loaded one could take a change held up by the load for one that
/// waited for the server. They take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A server exporting `export` (made here unless given) and a mount of it with changes sent
/// behind, following events, and `extra` options.
fn setup(export: Option<&Path>, extra: &[&str]) -> Setup {
    let one_at_a_time = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().unwrap();
    let export = match export {
        Some(e) => e.to_path_buf(),
        None => {
            let e = dir.path().join("export");
            fs::create_dir(&e).unwrap();
            e
        }
    };
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let serve = Serve::start(&export, &addr, &[]);
    let mut args = vec!["--changes", "behind"];
    args.extend_from_slice(extra);
    let mount = Mount::start(&addr, &args);
    mount.wait_following();
    Setup {
        dir,
        export,
        addr,
        serve,
        mount,
        _one_at_a_time: one_at_a_time,
    }
}

fn behind(mount: &Mount, counter: &str) -> u64 {
    mount.stats()["behind"][counter].as_u64().unwrap()
}

/// Runs `work` (changes through the mount) with the server stopped (SIGSTOP): what the mount
/// sends waits unanswered in the socket. A change that waits for the server instead would
/// hang `work`: after 20 s the server goes on and the test fails. The mount knows every
/// file exactly first (see [`settle`]).
fn while_stopped<T: Send + 'static>(s: &Setup, work: impl FnOnce() -> T + Send + 'static) -> T {
    settle(s);
    let serve = &s.serve;
    let pid = serve.child.id().to_string();
    stop(serve);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(work()));
    let done = rx.recv_timeout(Duration::from_secs(20));
    if done.is_err() {
        run_ok(Command::new("kill").args(["-CONT", &pid]));
        panic!("a change waited for the stopped server: it was not sent behind");
    }
    done.unwrap()
}

/// Brings the mount to know every file exactly, as changes sent behind need (docs/
/// changes-behind.md): the host's change events applied (a sync), then each file's
/// attributes and its missing `security.capability` (the kernel's question before a
/// write) asked again. An event that showed a file otherwise than the mount had seen it
/// (the echo of its own create, which shows the server's times, not the predicted ones,
/// handled after the file's last GETATTR on a loaded machine) leaves the next change
/// waiting for the server: correct, but not what these tests time. The kernel keeps its
/// attributes through the echo of its own change, so a plain stat may not reach the
/// mount: [`force_stat`] does.
fn settle(s: &Setup) {
    assert!(s.mount.sync().status.success());
    let mut dirs = vec![s.mount.mountpoint.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let md = fs::symlink_metadata(&path).unwrap();
            if md.is_dir() {
                dirs.push(path);
            } else if md.is_file() {
                let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
                force_stat(&c);
                // SAFETY: a NUL-terminated path and name; a zero size asks for no value.
                let r = unsafe {
                    libc::getxattr(
                        c.as_ptr(),
                        c"security.capability".as_ptr(),
                        std::ptr::null_mut(),
                        0,
                    )
                };
                assert_eq!(r, -1, "{}: no capability", path.display());
            }
        }
    }
}

/// A stat of `path` that the kernel sends to the mount whatever it has cached
/// (statx(2) with `AT_STATX_FORCE_SYNC`).
fn force_stat(path: &std::ffi::CStr) {
    // SAFETY: a NUL-terminated path and a statx buffer of the right type to fill.
    let r = unsafe {
        let mut st: libc::statx = std::mem::zeroed();
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_FORCE_SYNC,
            libc::STATX_BASIC_STATS,
            &mut st,
        )
    };
    assert_eq!(r, 0, "statx {path:?}: {}", std::io::Error::last_os_error());
}

/// Stops the server and waits until every thread of it has stopped. SIGSTOP stops a
/// process only once the thread the kernel gave the signal runs: on a loaded machine the
/// others may go on meanwhile, and answer a change sent right after `kill` returned.
fn stop(serve: &Serve) {
    let pid = serve.child.id();
    run_ok(Command::new("kill").args(["-STOP", &pid.to_string()]));
    let stopped = |task: fs::DirEntry| {
        fs::read_to_string(task.path().join("stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('T')))
    };
    wait_until("the server's threads to stop", PATIENCE, || {
        fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .all(|t| stopped(t.unwrap()))
    });
}

fn resume(serve: &Serve) {
    run_ok(Command::new("kill").args(["-CONT", &serve.child.id().to_string()]));
}

fn errno_of(r: std::io::Result<()>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

#[test]
fn changes_sent_behind_reach_the_host_in_order_and_match_it_after_a_sync() {
    let s = setup(None, &[]);
    let mnt = &s.mount.mountpoint;
    let long_ago = SystemTime::UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789);
    for i in 0..40 {
        let path = mnt.join(format!("f{i}"));
        let mut f = File::create(&path).unwrap();
        // Writes, as tar and npm make them, then what tar does after: owner, mode, times.
        for chunk in 0..3u8 {
            f.write_all(&[b'a' + chunk; 1000]).unwrap();
        }
        std::os::unix::fs::fchown(&f, Some(0), Some(0)).unwrap();
        f.set_permissions(fs::Permissions::from_mode(0o600 + i % 8))
            .unwrap();
        f.set_times(
            fs::FileTimes::new()
                .set_modified(long_ago)
                .set_accessed(long_ago),
        )
        .unwrap();
    }
    // Changes that wait for the server come after those sent behind before them: a write
    // then a truncation, a write then a rename, a write at an offset then a chmod by path.
    let cut = mnt.join("cut");
    fs::write(&cut, b"abcdef").unwrap();
    OpenOptions::new()
        .write(true)
        .open(&cut)
        .unwrap()
        .set_len(2)
        .unwrap();
    let moved = mnt.join("moved");
    fs::write(mnt.join("before-rename"), b"renamed after it was written").unwrap();
    fs::rename(mnt.join("before-rename"), &moved).unwrap();
    let sparse = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(mnt.join("sparse"))
        .unwrap();
    sparse.write_all_at(b"end", 100_000).unwrap();
    fs::set_permissions(mnt.join("sparse"), fs::Permissions::from_mode(0o640)).unwrap();
    drop(sparse);

    let out = s.mount.sync();
    assert!(out.status.success(), "crossfs sync: {out:?}");
    // Most went behind (one after an echo that showed the file otherwise than the mount
    // last saw it waits for the server).
    assert!(
        behind(&s.mount, "sent") >= 40 * 3,
        "{}",
        s.mount.stats()["behind"]
    );
    assert_eq!(behind(&s.mount, "refused"), 0);
    assert_eq!(behind(&s.mount, "queued"), 0);
    // How long the host took to see them, by request.
    let to_host = &s.mount.stats()["behind"]["to_host"];
    for request in ["Tsetattrbehind", "Twritebehind"] {
        assert!(to_host[request]["count"].as_u64().unwrap() > 0, "{to_host}");
    }

    // Exactly what the host has, change time included (the mount predicted its own),
    // before anything here reads the host's files (which moves their access times).
    for name in ["f0", "f7", "f39", "cut", "moved", "sparse"] {
        assert_eq!(
            shown(&mnt.join(name)),
            shown(&s.export.join(name)),
            "{name}"
        );
    }
    assert_eq!(fs::read(s.export.join("cut")).unwrap(), b"ab");
    assert_eq!(
        fs::read(s.export.join("moved")).unwrap(),
        b"renamed after it was written"
    );
    let host_sparse = fs::read(s.export.join("sparse")).unwrap();
    assert_eq!(host_sparse.len(), 100_003);
    assert_eq!(&host_sparse[100_000..], b"end");
    for i in 0..40 {
        let name = format!("f{i}");
        let host = s.export.join(&name);
        let data = fs::read(&host).unwrap();
        assert_eq!(data.len(), 3000, "{name}");
        assert!(data[2000..].iter().all(|&b| b == b'c'), "{name}");
        let m = fs::metadata(&host).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o600 + i % 8, "{name}");
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_000_000_000, 123_456_789));
    }
}

/// A tmpfs of `size` bytes, unmounted when dropped.
struct SmallFs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(size: u64) -> SmallFs {
        Self::mount_with(&format!("size={size}"))
    }

    /// A tmpfs with these mount options.
    fn mount_with(options: &str) -> SmallFs {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fs");
        fs::create_dir(&path).unwrap();
        run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("{options},mode=0755")])
                .arg("tmpfs")
                .arg(&path),
        );
        SmallFs { path, _dir: dir }
    }
}

fn free_bytes(path: &Path) -> u64 {
    let st = rustix::fs::statvfs(path).unwrap();
    st.f_bavail * st.f_frsize
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

#[test]
fn a_refused_change_fails_the_next_fsync_and_sync_and_the_host_wins() {
    refused(&[]);
}

/// With opens sent (`--send-opens`), the kernel sends FLUSH at each close of a file
/// opened for writing: a close by the process that made a refused change reports it.
#[test]
fn a_refused_change_fails_the_next_close_with_opens_sent() {
    refused(&["--send-opens"]);
}

fn refused(extra: &[&str]) {
    let small = SmallFs::mount(1 << 20);
    let s = setup(Some(&small.path), extra);
    let closes_report = extra.contains(&"--send-opens");
    let mnt = s.mount.mountpoint.clone();
    // The host leaves about 64 KiB free.
    fs::write(s.export.join("filler"), vec![1u8; 960 << 10]).unwrap();
    let free = free_bytes(&small.path);
    let mut f = File::create(mnt.join("big")).unwrap();
    f.write_all(b"start").unwrap();
    f.sync_all().unwrap();

    // More than that, each write answered by the mount while the server is stopped.
    let f = while_stopped(&s, move || {
        for i in 0..24u64 {
            f.write_all_at(&[b'x'; 4096], 4096 * i).unwrap();
        }
        f
    });
    resume(&s.serve);
    // fsync reports the host's refusal, once, as a failed write-back is.
    assert_eq!(errno_of(f.sync_all()), Some(libc::ENOSPC));
    f.sync_all().unwrap();
    drop(f);
    assert!(behind(&s.mount, "refused") >= 1);
    // A sync fails once for the refusals since the last one.
    let out = s.mount.sync();
    assert!(!out.status.success(), "{out:?}");
    assert!(s.mount.sync().status.success());
    // The mount shows what the host has, not what it was told.
    let on_mount = shown(&mnt.join("big"));
    let host = fs::read(s.export.join("big")).unwrap();
    assert!(host.len() < 24 * 4096, "{}", host.len());
    assert_eq!(on_mount.3, host.len() as u64);
    assert!(fs::read(mnt.join("big")).unwrap() == host);

    if !closes_report {
        return;
    }
    // A close reports a refusal found by then.
    fs::remove_file(mnt.join("big")).unwrap();
    // Its space comes back once the server closes it, after the kernel's RELEASE, which
    // the kernel sends without waiting for it.
    wait_until("the removed file's space to come back", PATIENCE, || {
        free_bytes(&small.path) >= free
    });
    let mut f = File::create(mnt.join("second")).unwrap();
    f.write_all(b"start").unwrap();
    f.sync_all().unwrap();
    let refused = behind(&s.mount, "refused");
    let f = while_stopped(&s, move || {
        f.write_all_at(&[b'y'; 65536], 0).unwrap();
        f.write_all_at(&[b'y'; 65536], 65536).unwrap();
        f
    });
    resume(&s.serve);
    wait_until("the refusal to be counted", PATIENCE, || {
        behind(&s.mount, "refused") > refused
    });
    let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
    // SAFETY: `fd` was just taken from the File, which no longer owns it.
    let closed = unsafe { libc::close(fd) };
    assert_eq!(closed, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOSPC)
    );
}

#[test]
fn changes_lost_with_the_connection_are_sent_again_in_order() {
    let mut s = setup(None, &[]);
    let mnt = s.mount.mountpoint.clone();
    let mut f = File::create(mnt.join("kept")).unwrap();
    f.write_all(b"first").unwrap();
    f.sync_all().unwrap();
    fs::write(s.export.join("gone"), b"removed by the guest").unwrap();
    fs::create_dir(mnt.join("emptied")).unwrap();
    let sent_before = behind(&s.mount, "sent");

    // The server stops reading: what the mount sends behind waits in the socket, unanswered.
    let m = mnt.clone();
    let f = while_stopped(&s, move || {
        for i in 0..16u64 {
            f.write_all_at(&[b'0' + i as u8; 4096], 4096 * i).unwrap();
        }
        f.set_permissions(fs::Permissions::from_mode(0o604))
            .unwrap();
        fs::remove_file(m.join("gone")).unwrap();
        fs::remove_dir(m.join("emptied")).unwrap();
        f
    });
    // At least one change a call: the kernel may split a write where copying it from the
    // caller's memory faults.
    assert!(behind(&s.mount, "sent") >= sent_before + 19);
    let queued = behind(&s.mount, "queued");
    assert!(queued >= 19);
    // It dies with them; another takes its place.
    s.serve.child.kill().unwrap();
    s.serve.child.wait().unwrap();
    s.serve = Serve::start(&s.export, &s.addr, &[]);
    wait_until("the changes to be sent again", PATIENCE, || {
        behind(&s.mount, "queued") == 0
    });
    assert!(s.mount.sync().status.success());
    assert_eq!(behind(&s.mount, "resent"), queued);
    assert_eq!(behind(&s.mount, "refused"), 0);
    assert!(!s.export.join("gone").exists());
    assert!(!s.export.join("emptied").exists());
    let host = fs::read(s.export.join("kept")).unwrap();
    assert_eq!(host.len(), 16 * 4096);
    for i in 0..16 {
        assert!(host[i * 4096..(i + 1) * 4096]
            .iter()
            .all(|&b| b == b'0' + i as u8));
    }
    let mode = fs::metadata(s.export.join("kept")).unwrap().mode();
    assert_eq!(mode & 0o7777, 0o604);
    drop(f);
    let _ = &s.dir;
}

#[test]
fn a_killed_mount_leaves_on_the_host_everything_an_fsync_covered() {
    let mut s = setup(None, &[]);
    let mnt = s.mount.mountpoint.clone();
    // A writer that reports each file once its fsync returned.
    let script = r#"
import os, sys
d = sys.argv[1]
for i in range(100000):
    p = os.path.join(d, "f%d" % i)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    for k in range(4):
        os.write(fd, bytes([i % 251]) * 4096)
    os.fchmod(fd, 0o640)
    os.fsync(fd)
    os.close(fd)
    print(i, flush=True)
"#;
    let mut writer = Command::new("python3")
        .args(["-c", script])
        .arg(&mnt)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(writer.stdout.take().unwrap()).lines();
    let mut synced = Vec::new();
    while synced.len() < 40 {
        synced.push(lines.next().unwrap().unwrap().parse::<u64>().unwrap());
    }
    s.mount.child.kill().unwrap();
    s.mount.child.wait().unwrap();
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    // The writer fails once the mount is gone; files it reported after those read here
    // were covered too.
    synced.extend(
        lines
            .map_while(Result::ok)
            .filter_map(|l| l.parse::<u64>().ok()),
    );
    let _ = writer.kill();
    let _ = writer.wait();
    for i in synced {
        let host = s.export.join(format!("f{i}"));
        let data = fs::read(&host).unwrap();
        assert_eq!(data.len(), 4 * 4096, "f{i}");
        assert!(data.iter().all(|&b| b == (i % 251) as u8), "f{i}");
        assert_eq!(fs::metadata(&host).unwrap().mode() & 0o7777, 0o640, "f{i}");
    }
}

/// A stat right after a chmod sent behind shows the new mode, however the answers and the
/// kernel's lookups interleave: a lookup answered from a directory replica filled before
/// the change once showed the mode before it (about 1 in 100 in this loop).
#[test]
fn a_stat_after_a_change_sent_behind_shows_it() {
    let s = setup(None, &[]);
    let mnt = &s.mount.mountpoint;
    let dir = mnt.join("dir");
    fs::create_dir(&dir).unwrap();
    let file = mnt.join("file");
    fs::write(&file, b"x").unwrap();
    let modes = [0o111, 0o222, 0o444, 0o555, 0o666, 0o777, 0o000, 0o755];
    let mut wrong = Vec::new();
    for round in 0..250 {
        for path in [&dir, &file] {
            for mode in modes {
                fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
                let shown = fs::metadata(path).unwrap().mode() & 0o7777;
                if shown != mode {
                    wrong.push((round, path.clone(), mode, shown));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} stats showed another mode: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert!(behind(&s.mount, "sent") > 0);
}

/// Without reconnecting (`--no-reconnect`), changes the lost connection carried are
/// refused with EIO at once: counted, reported, never left waiting.
#[test]
fn changes_lost_without_reconnecting_are_refused_not_kept() {
    let mut s = setup(None, &["--no-reconnect"]);
    let mnt = s.mount.mountpoint.clone();
    let mut f = File::create(mnt.join("lost")).unwrap();
    f.write_all(b"first").unwrap();
    f.sync_all().unwrap();
    let f = while_stopped(&s, move || {
        for i in 0..4u64 {
            f.write_all_at(&[b'x'; 4096], 4096 * i).unwrap();
        }
        f
    });
    // At least one change a write(2); the kernel may split one where copying it from the
    // caller's memory faults.
    let lost = behind(&s.mount, "queued");
    assert!(lost >= 4, "{lost} changes queued");
    s.serve.child.kill().unwrap();
    s.serve.child.wait().unwrap();
    wait_until("the lost changes to be refused", PATIENCE, || {
        behind(&s.mount, "refused") == lost
    });
    assert_eq!(behind(&s.mount, "queued"), 0);
    assert_eq!(errno_of(f.sync_all()), Some(libc::EIO));
}

/// A getxattr(2) of the mount's sync name that the process's own SIGALRM, with a handler,
/// interrupts after 0.3 s: the errno it got and how long it took. (Straight from libc:
/// Python's os.getxattr would retry after EINTR.)
const SYNC_ALARMED: &str = r#"
import ctypes, errno, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGALRM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.3)
buf = ctypes.create_string_buffer(64)
start = time.monotonic()
r = libc.getxattr(sys.argv[1].encode(), b"user.crossfs.sync", buf, 64)
took = time.monotonic() - start
print("ok" if r >= 0 else errno.errorcode[ctypes.get_errno()], f"{took:.2f}")
"#;

/// With the server stopped, a sync through the mount's root (`SYNC_ALARMED`) ends with
/// EINTR at its caller's signal, within 5 s; the server goes on after.
fn sync_is_interrupted(s: &Setup) {
    // Whatever else waits, the server goes on after 20 s: a failure, not a hang.
    let pid = s.serve.child.id().to_string();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(20));
        let _ = Command::new("kill").args(["-CONT", &pid]).status();
    });
    let out = run_ok(
        Command::new("python3")
            .args(["-c", SYNC_ALARMED])
            .arg(&s.mount.mountpoint),
    );
    resume(&s.serve);
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let (errno, took) = out.trim().split_once(' ').unwrap();
    assert_eq!(errno, "EINTR", "{out}");
    assert!(took.parse::<f64>().unwrap() < 5.0, "{out}");
}

#[test]
fn a_sync_waiting_for_changes_sent_behind_is_interrupted_by_a_signal() {
    let s = setup(None, &[]);
    let mnt = s.mount.mountpoint.clone();
    let f = File::create(mnt.join("f")).unwrap();
    f.sync_all().unwrap();
    let sent_before = behind(&s.mount, "sent");
    // The server stops reading: the chmod is sent behind and stays unanswered, so a sync
    // waits for it (20 s at most).
    let f = while_stopped(&s, move || {
        f.set_permissions(fs::Permissions::from_mode(0o640))
            .unwrap();
        f
    });
    stop(&s.serve);
    assert_eq!(behind(&s.mount, "sent"), sent_before + 1);
    sync_is_interrupted(&s);
    // The change itself is not lost: a sync after the server goes on finds it answered.
    assert!(s.mount.sync().status.success());
    assert_eq!(
        fs::metadata(s.export.join("f")).unwrap().mode() & 0o7777,
        0o640
    );
    drop(f);
}

#[test]
fn a_sync_waiting_for_a_stopped_server_is_interrupted_by_a_signal() {
    let s = setup(None, &[]);
    let mnt = s.mount.mountpoint.clone();
    // Nothing sent behind: the sync waits for the server to take its marker. The root's
    // attributes fresh first (a sync's cookie moves them), or the kernel's permission check
    // would wait for the stopped server before the sync began.
    assert!(s.mount.sync().status.success());
    fs::metadata(&mnt).unwrap();
    stop(&s.serve);
    sync_is_interrupted(&s);
    assert!(s.mount.sync().status.success());
}

/// The first file a mount creates waits for the server (it shows whom the server makes new
/// files for); creates after it go behind.
fn first_create(mnt: &Path) {
    fs::write(mnt.join("first"), b"first").unwrap();
}

#[test]
fn files_created_behind_reach_the_host_and_a_name_a_host_program_took_keeps_both() {
    let s = setup(None, &[]);
    let mnt = s.mount.mountpoint.clone();
    fs::create_dir(mnt.join("d")).unwrap();
    first_create(&mnt);
    let export = s.export.clone();

    // The server stopped: creates, writes and chmods are answered by the mount.
    let m = mnt.clone();
    while_stopped(&s, move || {
        for i in 0..20 {
            let mut f = File::create(m.join(format!("d/new{i}"))).unwrap();
            f.write_all(format!("guest {i}").as_bytes()).unwrap();
            f.set_permissions(fs::Permissions::from_mode(0o600 + i % 8))
                .unwrap();
        }
        File::create(m.join("d/taken"))
            .unwrap()
            .write_all(b"the guest's")
            .unwrap();
        // (A stat, a read or a listing would wait for the server: a stat shows the host's
        // times, and a listing the server's order.)
    });
    // A host program takes "taken" before the server reads the guest's create.
    fs::write(export.join("d/taken"), b"the host's").unwrap();
    resume(&s.serve);
    let out = s.mount.sync();
    assert!(out.status.success(), "crossfs sync: {out:?}");

    let stats = s.mount.stats()["behind"].clone();
    assert_eq!(
        stats["to_host"]["Tcreatebehindmarked"]["count"], 21,
        "{stats}"
    );
    assert_eq!(behind(&s.mount, "refused"), 0);
    assert_eq!(behind(&s.mount, "conflicts"), 1);
    // Host data is never overwritten: the guest's file is beside it.
    assert_eq!(fs::read(export.join("d/taken")).unwrap(), b"the host's");
    let beside = export.join("d/taken.crossfs-conflict-1");
    assert_eq!(fs::read(&beside).unwrap(), b"the guest's");
    for i in 0..20 {
        let name = format!("d/new{i}");
        assert_eq!(
            shown(&mnt.join(&name)),
            shown(&export.join(&name)),
            "{name}"
        );
        let host = export.join(&name);
        assert_eq!(fs::read(&host).unwrap(), format!("guest {i}").as_bytes());
        assert_eq!(fs::metadata(&host).unwrap().mode() & 0o7777, 0o600 + i % 8);
    }
    // After the sync the mount shows what the host has, under both names.
    assert_eq!(fs::read(mnt.join("d/taken")).unwrap(), b"the host's");
    assert_eq!(
        fs::read(mnt.join("d/taken.crossfs-conflict-1")).unwrap(),
        b"the guest's"
    );
    assert_eq!(fs::read_dir(mnt.join("d")).unwrap().count(), 22);
}

#[test]
fn directories_made_behind_reach_the_host_and_a_name_a_host_program_took_keeps_both() {
    let s = setup(None, &[]);
    let (mnt, export) = (s.mount.mountpoint.clone(), s.export.clone());
    fs::create_dir(mnt.join("d")).unwrap();
    first_create(&mnt);

    // The server stopped: mkdirs answered by the mount. (A path walked through one of
    // them waits for its mkdir: the kernel's GETATTR of a directory as it walks through
    // it cannot be told from a stat's, which shows the host's times.)
    let m = mnt.clone();
    while_stopped(&s, move || {
        for dir in ["t", "u", "taken"] {
            fs::create_dir(m.join("d").join(dir)).unwrap();
        }
    });
    // A host program makes "taken" before the server reads the guest's mkdir.
    fs::create_dir(export.join("d/taken")).unwrap();
    fs::write(export.join("d/taken/host"), b"the host's").unwrap();
    resume(&s.serve);
    // Trees made in the new directories as untar and npm make them: what is made in a
    // directory made behind goes behind too (its replica is complete from the start).
    for dir in ["d/t/a", "d/t/a/b", "d/t/c", "d/u/e"] {
        fs::create_dir(mnt.join(dir)).unwrap();
    }
    let filled = ["d/t", "d/t/a", "d/t/a/b", "d/t/c", "d/u", "d/u/e"];
    for dir in filled {
        for i in 0..3 {
            fs::write(mnt.join(dir).join(format!("f{i}")), format!("{dir} {i}")).unwrap();
        }
    }
    let out = s.mount.sync();
    assert!(out.status.success(), "crossfs sync: {out:?}");

    let stats = s.mount.stats()["behind"].clone();
    assert_eq!(stats["to_host"]["Tmkdirbehind"]["count"], 7, "{stats}");
    assert_eq!(
        stats["to_host"]["Tcreatebehindmarked"]["count"], 18,
        "{stats}"
    );
    assert_eq!(behind(&s.mount, "refused"), 0, "{stats}");
    assert_eq!(behind(&s.mount, "conflicts"), 1, "{stats}");
    // Host data is never overwritten: the guest's directory is beside the host's.
    let names = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
    assert_eq!(listed(&export.join("d/taken")), names(&["host"]));
    let beside = "d/taken.crossfs-conflict-1";
    assert!(listed(&export.join(beside)).is_empty());
    for dir in filled {
        for i in 0..3 {
            let file = export.join(dir).join(format!("f{i}"));
            assert_eq!(fs::read(file).unwrap(), format!("{dir} {i}").as_bytes());
        }
    }
    assert_eq!(
        listed(&export.join("d/t")),
        names(&["a", "c", "f0", "f1", "f2"])
    );
    // After the sync the mount shows exactly what the host has, times included.
    for dir in [
        "d", "d/t", "d/t/a", "d/t/a/b", "d/t/c", "d/u", "d/taken", beside,
    ] {
        assert_eq!(shown(&mnt.join(dir)), shown(&export.join(dir)), "{dir}");
        assert_eq!(listed(&mnt.join(dir)), listed(&export.join(dir)), "{dir}");
    }
    assert_eq!(fs::read(mnt.join("d/taken/host")).unwrap(), b"the host's");
    // A directory made behind is removed like any other.
    fs::remove_dir_all(mnt.join("d/t")).unwrap();
    assert!(s.mount.sync().status.success());
    assert!(!export.join("d/t").exists());
}

/// The names in `dir`, sorted.
fn listed(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    names
}

#[test]
fn files_removed_behind_leave_the_host_and_one_a_host_program_changed_first_stays() {
    let s = setup(None, &[]);
    let (mnt, export) = (s.mount.mountpoint.clone(), s.export.clone());
    // Made through the mount, so that the mount has its fid: a directory known only from
    // its parent's replica is walked at the first change in it, which waits.
    fs::create_dir(mnt.join("d")).unwrap();
    for i in 0..20 {
        fs::write(export.join(format!("d/f{i}")), format!("host {i}")).unwrap();
    }
    for name in ["changed", "replaced"] {
        fs::write(export.join("d").join(name), b"as the guest saw it").unwrap();
    }
    fs::write(export.join("d/open"), b"read on after its removal").unwrap();
    std::os::unix::fs::symlink("f0", export.join("d/link")).unwrap();
    // A second name of f5, which stays.
    fs::hard_link(export.join("d/f5"), export.join("d/linked")).unwrap();
    first_create(&mnt);
    // The host's files are in the mount's view of d once their events came.
    assert!(s.mount.sync().status.success());

    // The server stopped: the removals (and a create of a name removed) are answered by
    // the mount. One file is open as its name goes.
    let (m, open) = (mnt.clone(), File::open(mnt.join("d/open")).unwrap());
    let open = while_stopped(&s, move || {
        for i in 0..20 {
            fs::remove_file(m.join(format!("d/f{i}"))).unwrap();
        }
        fs::write(m.join("d/f3"), b"the guest's again").unwrap();
        for name in ["changed", "replaced", "open", "link"] {
            fs::remove_file(m.join("d").join(name)).unwrap();
        }
        open
    });
    // Before the server reads the removals, a host program changes one file and puts a
    // new file under another name.
    fs::write(export.join("d/changed"), b"changed by the host").unwrap();
    fs::remove_file(export.join("d/replaced")).unwrap();
    fs::write(export.join("d/replaced"), b"a host program's new file").unwrap();
    resume(&s.serve);
    // The two refused removals fail one sync.
    let out = s.mount.sync();
    assert!(!out.status.success(), "{out:?}");
    assert!(s.mount.sync().status.success());

    let stats = s.mount.stats()["behind"].clone();
    assert_eq!(stats["to_host"]["Tunlinkbehind"]["count"], 24, "{stats}");
    assert_eq!(behind(&s.mount, "refused"), 2, "{stats}");
    // The host: the guest's removals in order, the second name of a file removed under
    // its first, and the host programs' files kept.
    assert_eq!(
        listed(&export.join("d")),
        ["changed", "f3", "linked", "replaced"].map(std::ffi::OsString::from)
    );
    assert_eq!(fs::read(export.join("d/linked")).unwrap(), b"host 5");
    assert_eq!(fs::read(export.join("d/f3")).unwrap(), b"the guest's again");
    assert_eq!(
        fs::read(export.join("d/changed")).unwrap(),
        b"changed by the host"
    );
    assert_eq!(
        fs::read(export.join("d/replaced")).unwrap(),
        b"a host program's new file"
    );
    // The file open as its name went reads on.
    let mut read = String::new();
    std::io::Read::read_to_string(&mut &open, &mut read).unwrap();
    assert_eq!(read, "read on after its removal");
    assert_eq!(open.metadata().unwrap().nlink(), 0);
    // The mount shows what the host has.
    assert_eq!(listed(&mnt.join("d")), listed(&export.join("d")));
    for name in ["changed", "f3", "linked", "replaced"] {
        let (on_mount, host) = (mnt.join("d").join(name), export.join("d").join(name));
        assert_eq!(
            fs::read(&on_mount).unwrap(),
            fs::read(&host).unwrap(),
            "{name}"
        );
        assert_eq!(shown(&on_mount), shown(&host), "{name}");
    }
}

#[test]
fn directories_removed_behind_leave_the_host_and_one_a_host_program_filled_first_stays() {
    let s = setup(None, &[]);
    let (mnt, export) = (s.mount.mountpoint.clone(), s.export.clone());
    // Made through the mount, so that the mount has their fids (as above); their files
    // by a host program.
    let dirs = ["t", "t/a", "t/b", "t/b/c", "t/keep"];
    for dir in dirs {
        fs::create_dir(mnt.join(dir)).unwrap();
    }
    for dir in &dirs[1..] {
        for i in 0..3 {
            fs::write(export.join(dir).join(format!("f{i}")), "host").unwrap();
        }
    }
    first_create(&mnt);

    // The server stopped: `rm -r` of the tree, answered by the mount.
    let m = mnt.clone();
    while_stopped(&s, move || fs::remove_dir_all(m.join("t")).unwrap());
    assert!(!mnt.join("t").exists());
    // Before the server reads the removals, a host program puts a file into one of the
    // directories: it stays, and so does the directory above it.
    fs::write(export.join("t/keep/new"), b"a host program's").unwrap();
    resume(&s.serve);
    let out = s.mount.sync();
    assert!(
        !out.status.success(),
        "the refused removals fail one sync: {out:?}"
    );
    assert!(s.mount.sync().status.success());

    let stats = s.mount.stats()["behind"].clone();
    assert_eq!(stats["to_host"]["Trmdirbehind"]["count"], 5, "{stats}");
    assert_eq!(stats["to_host"]["Tunlinkbehind"]["count"], 12, "{stats}");
    assert_eq!(behind(&s.mount, "refused"), 2, "t/keep and t: {stats}");
    assert_eq!(
        listed(&export.join("t")),
        ["keep"].map(std::ffi::OsString::from)
    );
    assert_eq!(
        listed(&export.join("t/keep")),
        ["new"].map(std::ffi::OsString::from)
    );
    assert_eq!(
        fs::read(export.join("t/keep/new")).unwrap(),
        b"a host program's"
    );
    // The mount shows what the host has.
    assert_eq!(listed(&mnt.join("t")), listed(&export.join("t")));
    assert_eq!(listed(&mnt.join("t/keep")), listed(&export.join("t/keep")));
    assert_eq!(
        fs::read(mnt.join("t/keep/new")).unwrap(),
        b"a host program's"
    );
    // And it removes them, now empty but for the host's file, as any mount does.
    fs::remove_dir_all(mnt.join("t")).unwrap();
    assert!(s.mount.sync().status.success());
    assert!(!export.join("t").exists());
}

#[test]
fn files_renamed_behind_move_on_the_host_and_a_name_a_host_program_took_first_stays() {
    let s = setup(None, &[]);
    let (mnt, export) = (s.mount.mountpoint.clone(), s.export.clone());
    fs::create_dir(mnt.join("d")).unwrap();
    // Made through the mount, so that the mount holds their fids (a file known only from
    // a replica is renamed waiting, as in the exact mode).
    for i in 0..10 {
        fs::write(mnt.join(format!("d/a{i}")), format!("guest {i}")).unwrap();
    }
    for name in ["to-taken", "edited", "gone", "open"] {
        fs::write(mnt.join("d").join(name), name).unwrap();
    }
    first_create(&mnt);
    assert!(s.mount.sync().status.success());

    // The server stopped: the renames are answered by the mount. One file is open as
    // it moves.
    let (m, open) = (mnt.clone(), File::open(mnt.join("d/open")).unwrap());
    let open = while_stopped(&s, move || {
        for i in 0..10 {
            fs::rename(m.join(format!("d/a{i}")), m.join(format!("d/b{i}"))).unwrap();
        }
        for (from, to) in [
            ("to-taken", "taken"),
            ("edited", "edited2"),
            ("gone", "gone2"),
            ("open", "open2"),
        ] {
            fs::rename(m.join("d").join(from), m.join("d").join(to)).unwrap();
        }
        // The guest sees its renames at once.
        assert!(!m.join("d/a0").exists() && m.join("d/b0").exists());
        open
    });
    // Before the server reads the renames, host programs put a file under one new name,
    // change one file's data (which does not stop its rename), and remove another.
    fs::write(export.join("d/taken"), b"the host's").unwrap();
    fs::write(export.join("d/edited"), b"edited by the host").unwrap();
    fs::remove_file(export.join("d/gone")).unwrap();
    resume(&s.serve);
    // The two refused renames fail one sync.
    let out = s.mount.sync();
    assert!(!out.status.success(), "{out:?}");
    assert!(s.mount.sync().status.success());

    let stats = s.mount.stats()["behind"].clone();
    assert_eq!(stats["to_host"]["Trenamebehind"]["count"], 14, "{stats}");
    assert_eq!(behind(&s.mount, "refused"), 2, "{stats}");
    let mut expected: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    expected.extend(["edited2", "open2", "taken", "to-taken"].map(String::from));
    expected.sort();
    let expected: Vec<std::ffi::OsString> = expected.into_iter().map(Into::into).collect();
    assert_eq!(listed(&export.join("d")), expected);
    for i in 0..10 {
        let host = export.join(format!("d/b{i}"));
        assert_eq!(fs::read(host).unwrap(), format!("guest {i}").as_bytes());
    }
    // The host's file under the taken name is its own; the guest's stayed where it was.
    assert_eq!(fs::read(export.join("d/taken")).unwrap(), b"the host's");
    assert_eq!(fs::read(export.join("d/to-taken")).unwrap(), b"to-taken");
    assert_eq!(
        fs::read(export.join("d/edited2")).unwrap(),
        b"edited by the host"
    );
    let mut read = String::new();
    std::io::Read::read_to_string(&mut &open, &mut read).unwrap();
    assert_eq!(read, "open");
    // The mount shows what the host has.
    assert_eq!(listed(&mnt.join("d")), expected);
    for name in &expected {
        let (on_mount, host) = (mnt.join("d").join(name), export.join("d").join(name));
        assert_eq!(
            fs::read(&on_mount).unwrap(),
            fs::read(&host).unwrap(),
            "{name:?}"
        );
        assert_eq!(shown(&on_mount), shown(&host), "{name:?}");
    }
}

#[test]
fn a_create_the_host_refuses_fails_the_next_fsync_and_sync_and_the_file_is_gone() {
    let small = SmallFs::mount_with("size=1m,nr_inodes=16");
    let s = setup(Some(&small.path), &[]);
    let mnt = s.mount.mountpoint.clone();
    first_create(&mnt);
    // The host fills every inode but one.
    let mut filled = 0;
    while File::create(s.export.join(format!("fill{filled}"))).is_ok() {
        filled += 1;
    }
    fs::remove_file(s.export.join("fill0")).unwrap();

    let m = mnt.clone();
    let (made, refused) = while_stopped(&s, move || {
        let mut made = File::create(m.join("made")).unwrap();
        made.write_all(b"room for this one").unwrap();
        let mut refused = File::create(m.join("refused")).unwrap();
        refused.write_all(b"no room for this one").unwrap();
        (made, refused)
    });
    resume(&s.serve);
    made.sync_all().unwrap();
    assert_eq!(errno_of(refused.sync_all()), Some(libc::ENOSPC));
    // Reported once; the file was never made, so its descriptor is stale from then on
    // (as an NFS file's is once the file is gone).
    assert_eq!(errno_of(refused.sync_all()), Some(libc::ESTALE));
    drop((made, refused));
    let out = s.mount.sync();
    assert!(!out.status.success(), "{out:?}");
    // A sync's marker is a file the server makes at the top of the export: with no inode
    // free, the server fails the sync, and says why.
    let out = s.mount.sync();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("sync marker"),
        "{out:?}"
    );
    // The host makes room (removing a file would not: the server holds the files the
    // mount knows open).
    run_ok(
        Command::new("mount")
            .args(["-o", "remount,nr_inodes=64"])
            .arg(&small.path),
    );
    let out = s.mount.sync();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        fs::read(s.export.join("made")).unwrap(),
        b"room for this one"
    );
    assert!(!s.export.join("refused").exists());
    // The mount shows what the host has.
    assert_eq!(fs::read(mnt.join("made")).unwrap(), b"room for this one");
    let gone = fs::metadata(mnt.join("refused"))
        .err()
        .and_then(|e| e.raw_os_error());
    assert_eq!(gone, Some(libc::ENOENT));
}

#[test]
fn files_created_behind_and_lost_with_the_connection_are_made_on_the_next() {
    let mut s = setup(None, &[]);
    let mnt = s.mount.mountpoint.clone();
    first_create(&mnt);
    // Two directories made behind too (after a first mkdir, which waits). What goes into
    // them waits for their mkdirs: a path walked through a directory not made yet waits.
    fs::create_dir(mnt.join("first.d")).unwrap();
    let name = |i: usize| format!("f{i}");
    let m = mnt.clone();
    let files = while_stopped(&s, move || {
        fs::create_dir(m.join("d")).unwrap();
        fs::create_dir(m.join("e")).unwrap();
        (0..8)
            .map(|i| {
                let mut f = File::create(m.join(name(i))).unwrap();
                f.write_all(&[b'0' + i as u8; 3000]).unwrap();
                f
            })
            .collect::<Vec<_>>()
    });
    // The server dies with the creates unread; another takes its place.
    s.serve.child.kill().unwrap();
    s.serve.child.wait().unwrap();
    s.serve = Serve::start(&s.export, &s.addr, &[]);
    wait_until("the changes to be sent again", PATIENCE, || {
        behind(&s.mount, "queued") == 0
    });
    // The files stayed open through it: a write and an fsync after reach the new server.
    for (i, mut f) in files.into_iter().enumerate() {
        f.write_all(b"after").unwrap();
        f.sync_all().unwrap();
        let host = fs::read(s.export.join(name(i))).unwrap();
        assert_eq!(host.len(), 3005, "f{i}");
        assert!(host[..3000].iter().all(|&b| b == b'0' + i as u8), "f{i}");
    }
    assert!(s.mount.sync().status.success());
    assert_eq!(behind(&s.mount, "refused"), 0);
    assert_eq!(behind(&s.mount, "conflicts"), 0);
    assert!(behind(&s.mount, "resent") >= 18);
    for dir in ["d", "e"] {
        assert!(s.export.join(dir).is_dir(), "{dir}");
        fs::write(mnt.join(dir).join("after"), dir).unwrap();
    }
    assert!(s.mount.sync().status.success());
    for dir in ["d", "e"] {
        assert_eq!(
            fs::read(s.export.join(dir).join("after")).unwrap(),
            dir.as_bytes()
        );
    }
    let _ = &s.dir;
}

#[test]
fn a_host_change_first_keeps_the_guests_writes_and_chmods_beside_it_and_fails_the_fsync() {
    let s = setup(None, &[]);
    let (mnt, export) = (s.mount.mountpoint.clone(), s.export.clone());
    for name in ["mine", "theirs", "moded"] {
        fs::write(export.join(name), b"0123456789").unwrap();
    }
    let open = |name: &str| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(mnt.join(name))
            .unwrap()
    };
    let files = (open("mine"), open("theirs"), open("moded"));
    // Each written once (the same byte), so that its open reached the server.
    for f in [&files.0, &files.1, &files.2] {
        f.write_all_at(b"0", 0).unwrap();
        f.sync_all().unwrap();
    }
    // The server stopped: each write and chmod is answered by the mount, predicted from
    // the files as the host had them.
    let files = while_stopped(&s, move || {
        for f in [&files.0, &files.1, &files.2] {
            f.write_all_at(b"guest", 0).unwrap();
            f.write_all_at(b"!", 9).unwrap();
            f.set_permissions(fs::Permissions::from_mode(0o600))
                .unwrap();
        }
        files
    });
    // Before the server reads them, host programs change two of the files.
    fs::write(export.join("theirs"), b"the host's").unwrap();
    fs::set_permissions(export.join("moded"), fs::Permissions::from_mode(0o640)).unwrap();
    resume(&s.serve);

    // The file nobody else touched has the guest's changes; fsync has nothing to report.
    // (Its content is checked last: a read on the host moves its access time with no
    // event, and the mount shows the access time of its last change, as documented.)
    files.0.sync_all().unwrap();
    assert_eq!(
        fs::metadata(export.join("mine")).unwrap().mode() & 0o7777,
        0o600
    );
    // The other two keep the host's changes; the guest's are beside each, made onto the
    // file as the host had it then; fsync says the guest's view was stale, once.
    assert_eq!(errno_of(files.1.sync_all()), Some(libc::ESTALE));
    files.1.sync_all().unwrap();
    assert_eq!(errno_of(files.2.sync_all()), Some(libc::ESTALE));
    assert_eq!(fs::read(export.join("theirs")).unwrap(), b"the host's");
    let beside = export.join("theirs.crossfs-conflict-1");
    let mut kept = b"the host's".to_vec();
    kept[..5].copy_from_slice(b"guest");
    kept[9] = b'!';
    assert_eq!(fs::read(&beside).unwrap(), kept);
    assert_eq!(fs::metadata(&beside).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(fs::read(export.join("moded")).unwrap(), b"0123456789");
    assert_eq!(
        fs::metadata(export.join("moded")).unwrap().mode() & 0o7777,
        0o640
    );
    let beside = export.join("moded.crossfs-conflict-1");
    assert_eq!(fs::read(&beside).unwrap(), b"guest5678!");
    assert_eq!(fs::metadata(&beside).unwrap().mode() & 0o7777, 0o600);
    assert_eq!(behind(&s.mount, "conflicts"), 2);
    // A sync fails once for them, then the mount shows what the host has.
    assert!(!s.mount.sync().status.success());
    assert!(s.mount.sync().status.success());
    for name in [
        "mine",
        "theirs",
        "moded",
        "theirs.crossfs-conflict-1",
        "moded.crossfs-conflict-1",
    ] {
        assert_eq!(shown(&mnt.join(name)), shown(&export.join(name)), "{name}");
        assert_eq!(
            fs::read(mnt.join(name)).unwrap(),
            fs::read(export.join(name)).unwrap(),
            "{name}"
        );
    }
    assert_eq!(fs::read(export.join("mine")).unwrap(), b"guest5678!");
}

/// One change in the window while the server is stopped: by the guest through the mount
/// (sent behind) or by a host program on the export, to file `name`.
#[derive(Clone, Debug)]
enum Racing {
    GuestWrite {
        name: usize,
        offset: u64,
        len: usize,
        byte: u8,
    },
    GuestChmod {
        name: usize,
        mode: u32,
    },
    HostWrite {
        name: usize,
        offset: u64,
        len: usize,
        byte: u8,
    },
    HostChmod {
        name: usize,
        mode: u32,
    },
}

const RACED: [&str; 3] = ["r0", "r1", "r2"];
const RACED_MODES: [u32; 3] = [0o600, 0o640, 0o604];

fn racing() -> impl proptest::strategy::Strategy<Value = Racing> {
    use proptest::prelude::*;
    let name = 0..RACED.len();
    let mode = proptest::sample::select(&RACED_MODES[..]);
    // Guest bytes and host bytes differ, so that whose a byte is can be told.
    prop_oneof![
        4 => (name.clone(), 0..6000u64, 1..3000usize, 1..100u8)
            .prop_map(|(name, offset, len, byte)| Racing::GuestWrite { name, offset, len, byte }),
        1 => (name.clone(), mode.clone()).prop_map(|(name, mode)| Racing::GuestChmod { name, mode }),
        2 => (name.clone(), 0..6000u64, 1..3000usize, 150..250u8)
            .prop_map(|(name, offset, len, byte)| Racing::HostWrite { name, offset, len, byte }),
        1 => (name, mode).prop_map(|(name, mode)| Racing::HostChmod { name, mode }),
    ]
}

/// What a file holds: its bytes and permission bits.
type Content = (Vec<u8>, u32);

fn write_into(c: &mut Content, offset: u64, len: usize, byte: u8) {
    let end = offset as usize + len;
    if c.0.len() < end {
        c.0.resize(end, 0);
    }
    c.0[offset as usize..end].fill(byte);
}

fn content(path: &Path) -> Option<Content> {
    let mode = fs::metadata(path).ok()?.mode() & 0o7777;
    Some((fs::read(path).unwrap(), mode))
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: 8, max_shrink_iters: 50, ..proptest::test_runner::Config::default()
    })]
    /// Guest changes sent behind and host programs' changes of the same files, made while
    /// the server is stopped (so every guest change there was predicted from the file
    /// before the host's): after a sync, a file a host program changed holds exactly the
    /// host's changes, and the guest's are in `NAME.crossfs-conflict-1`, made onto the
    /// host's version, in order; a file only the guest changed has the guest's changes;
    /// each conflict fails its file's fsync once and the sync once; and the mount then
    /// shows exactly what the host has.
    #[test]
    fn host_changes_first_are_never_overwritten_by_changes_sent_behind(
        window in proptest::collection::vec(racing(), 1..24)
    ) {
        let s = setup(None, &[]);
        let (mnt, export) = (s.mount.mountpoint.clone(), s.export.clone());
        let start: Content = (vec![b'.'; 4000], 0o644);
        for name in RACED {
            fs::write(export.join(name), &start.0).unwrap();
            fs::set_permissions(export.join(name), fs::Permissions::from_mode(start.1)).unwrap();
        }
        let files: Vec<File> = RACED
            .iter()
            .map(|name| {
                let f = OpenOptions::new().write(true).open(mnt.join(name)).unwrap();
                // Its open reaches the server now, not in the window.
                f.write_all_at(b".", 0).unwrap();
                f.sync_all().unwrap();
                f
            })
            .collect();
        let guest: Vec<Racing> = window
            .iter()
            .filter(|r| matches!(r, Racing::GuestWrite { .. } | Racing::GuestChmod { .. }))
            .cloned()
            .collect();
        let files = while_stopped(&s, move || {
            for r in &guest {
                match *r {
                    Racing::GuestWrite { name, offset, len, byte } => {
                        files[name].write_all_at(&vec![byte; len], offset).unwrap()
                    }
                    Racing::GuestChmod { name, mode } => files[name]
                        .set_permissions(fs::Permissions::from_mode(mode))
                        .unwrap(),
                    _ => unreachable!(),
                }
            }
            files
        });
        // The host programs' changes, before the server reads the guest's.
        for r in &window {
            match *r {
                Racing::HostWrite { name, offset, len, byte } => OpenOptions::new()
                    .write(true)
                    .open(export.join(RACED[name]))
                    .unwrap()
                    .write_all_at(&vec![byte; len], offset)
                    .unwrap(),
                Racing::HostChmod { name, mode } => fs::set_permissions(
                    export.join(RACED[name]),
                    fs::Permissions::from_mode(mode),
                )
                .unwrap(),
                _ => {}
            }
        }
        resume(&s.serve);

        // The files' fsyncs first, then the syncs, then how the mount shows each file,
        // before anything here reads the host's files (which moves their access times).
        let fsynced: Vec<Option<i32>> = files.iter().map(|f| errno_of(f.sync_all())).collect();
        let first_sync_ok = s.mount.sync().status.success();
        proptest::prop_assert!(s.mount.sync().status.success());
        let listed = |dir: &Path| {
            let mut names: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
            names.sort();
            names
        };
        let names = listed(&export);
        proptest::prop_assert_eq!(&listed(&mnt), &names);
        for name in &names {
            proptest::prop_assert_eq!(shown(&mnt.join(name)), shown(&export.join(name)), "{:?}", name);
        }

        // The model: the host's changes, then the guest's, onto the file or its copy.
        let mut conflicts = 0;
        for (i, name) in RACED.iter().enumerate() {
            let mut host = start.clone();
            let (mut host_wrote, mut guest_changed) = (false, false);
            for r in &window {
                match *r {
                    Racing::HostWrite { name, offset, len, byte } if name == i => {
                        write_into(&mut host, offset, len, byte);
                        host_wrote = true;
                    }
                    Racing::HostChmod { name, mode } if name == i => host.1 = mode,
                    Racing::GuestWrite { name, .. } | Racing::GuestChmod { name, .. }
                        if name == i => guest_changed = true,
                    _ => {}
                }
            }
            // A chmod back to the mode the file had leaves nothing to tell.
            let host_changed = host_wrote || host.1 != start.1;
            let mut guest = if host_changed { host.clone() } else { start.clone() };
            for r in &window {
                match *r {
                    Racing::GuestWrite { name, offset, len, byte } if name == i => {
                        write_into(&mut guest, offset, len, byte)
                    }
                    Racing::GuestChmod { name, mode } if name == i => guest.1 = mode,
                    _ => {}
                }
            }
            let beside = export.join(format!("{name}.crossfs-conflict-1"));
            if host_changed && guest_changed {
                conflicts += 1;
                proptest::prop_assert_eq!(fsynced[i], Some(libc::ESTALE), "{}", name);
                proptest::prop_assert_eq!(content(&export.join(name)), Some(host), "{} (host's)", name);
                proptest::prop_assert_eq!(content(&beside), Some(guest), "{} beside", name);
            } else {
                proptest::prop_assert_eq!(fsynced[i], None, "{}", name);
                let want = if guest_changed { guest } else { host };
                proptest::prop_assert_eq!(content(&export.join(name)), Some(want), "{}", name);
                proptest::prop_assert!(!beside.exists(), "{}: no copy", name);
            }
        }
        proptest::prop_assert_eq!(behind(&s.mount, "conflicts"), conflicts);
        proptest::prop_assert_eq!(first_sync_ok, conflicts == 0, "the first sync fails for conflicts");
    }
}
