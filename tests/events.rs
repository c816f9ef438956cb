//! Change events end to end, with the real binary: `crossfs serve` watching its export,
//! `crossfs mount` following the events, inotify-tools' `inotifywait` watching the mount
//! as a program in the guest would, and changes made directly in the exported directory
//! as a program on the host would.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// How long an event may take before the test fails. The issue's bar is one second; this
/// is wider so a loaded CI machine does not fail a working feature. Measured latencies are
/// printed (see docs/events.md).
const EVENT_DEADLINE: Duration = Duration::from_secs(10);

struct Setup {
    _dir: tempfile::TempDir,
    export: PathBuf,
    serve: Serve,
    mount: Mount,
}

impl Setup {
    fn new(serve_args: &[&str], mount_args: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let export = dir.path().join("export");
        std::fs::create_dir(&export).unwrap();
        let addr = format!("unix:{}", dir.path().join("s.sock").display());
        let serve = Serve::start(&export, &addr, serve_args);
        let mount = Mount::start(&addr, mount_args);
        wait_until(
            "the mount to follow change events",
            Duration::from_secs(10),
            || {
                std::os::unix::net::UnixStream::connect(&mount.control).is_ok()
                    && mount.stats()["changes"]["enabled"] == true
            },
        );
        Setup {
            _dir: dir,
            export,
            serve,
            mount,
        }
    }

    fn host(&self, rel: &str) -> PathBuf {
        self.export.join(rel)
    }

    fn guest(&self, rel: &str) -> PathBuf {
        self.mount.mountpoint.join(rel)
    }

    fn sync(&self) {
        run_ok(
            Command::new(crossfs_bin())
                .arg("sync")
                .arg(&self.mount.mountpoint),
        );
    }

    fn changes(&self, counter: &str) -> u64 {
        self.mount.stats()["changes"][counter].as_u64().unwrap()
    }
}

#[test]
fn repeated_listings_cost_nothing_per_entry_while_events_are_followed_and_show_host_changes_after_sync(
) {
    let s = Setup::new(&[], &[]);
    for i in 0..20 {
        std::fs::write(s.host(&format!("f{i}")), "x").unwrap();
    }
    s.sync();
    // `ls -l`: name -> size, each from the attributes the READDIRPLUS carried.
    let list = || -> BTreeMap<String, u64> {
        std::fs::read_dir(s.guest(""))
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect()
    };
    // Requests about single entries: what a listing of known files must not cost.
    let per_entry = || {
        let stats = s.mount.stats();
        ["Twalk", "Twalkgetattr", "Treaddir", "Treaddirattr"]
            .iter()
            .map(|m| stats["9p"][m]["count"].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    assert_eq!(list().len(), 20);
    // Older than `auto`'s 1 s timeout, the attributes are still good: no event said
    // otherwise, so the listing costs nothing per entry (the directory's replica, or the
    // kernel's own cache of the listing, answers).
    std::thread::sleep(Duration::from_millis(1200));
    let before = per_entry();
    assert_eq!(list().len(), 20);
    assert_eq!(per_entry() - before, 0);
    // Changed on the host (same file, new size): once the mount has the event, the next
    // listing shows it, long before any timeout, and only that file is asked about.
    std::fs::write(s.host("f3"), "three").unwrap();
    s.sync();
    let before = per_entry();
    assert_eq!(list()["f3"], 5);
    assert!(
        per_entry() - before <= 2,
        "an event drops only what it names"
    );
}

/// `inotifywait -m -r` on a directory, its lines collected as they come.
struct Inotify {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Inotify {
    fn start(dir: &Path) -> Inotify {
        let mut child = Command::new("inotifywait")
            .args(["-m", "-r", "--format", "%e %w%f"])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("inotifywait (inotify-tools) must be installed: scripts/install-test-deps.sh");
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let mut ready = false;
        for line in stderr.lines() {
            if line.unwrap().contains("Watches established") {
                ready = true;
                break;
            }
        }
        assert!(ready, "inotifywait did not start watching");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Inotify { child, lines }
    }

    /// Waits for a line with events `flags` (all of them, e.g. "MOVED_TO") on `path`;
    /// returns how long it took.
    fn expect(&self, flags: &str, path: &Path) -> Duration {
        let start = Instant::now();
        let want = path.to_str().unwrap();
        loop {
            let found = self.lines.lock().unwrap().iter().any(|l| {
                let (events, p) = l.split_once(' ').unwrap_or(("", ""));
                p == want && flags.split(',').all(|f| events.split(',').any(|e| e == f))
            });
            if found {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < EVENT_DEADLINE,
                "no {flags} for {want} within {EVENT_DEADLINE:?}; inotifywait saw:\n{}",
                self.lines.lock().unwrap().join("\n")
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn count(&self, flag: &str, path: &Path) -> usize {
        let want = path.to_str().unwrap();
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| {
                let (events, p) = l.split_once(' ').unwrap_or(("", ""));
                p == want && events.split(',').any(|e| e == flag)
            })
            .count()
    }
}

impl Drop for Inotify {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn host_changes_reach_inotify_watchers_in_the_guest() {
    let s = Setup::new(&[], &["--cache", "always"]);
    let watch = Inotify::start(&s.mount.mountpoint);
    let mut latencies = Vec::new();
    let mut step = |what: &str, flags: &str, path: PathBuf, change: &dyn Fn()| {
        change();
        let took = watch.expect(flags, &path);
        latencies.push(format!("{what}: {} ms", took.as_millis()));
    };

    step("create", "CREATE", s.guest("a.txt"), &|| {
        std::fs::write(s.host("a.txt"), "one\n").unwrap()
    });
    step("modify", "MODIFY", s.guest("a.txt"), &|| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(s.host("a.txt"))
            .unwrap();
        f.write_all(b"two\n").unwrap();
    });
    step("mkdir", "CREATE,ISDIR", s.guest("d"), &|| {
        std::fs::create_dir(s.host("d")).unwrap()
    });
    step("rename (from)", "MOVED_FROM", s.guest("a.txt"), &|| {
        std::fs::rename(s.host("a.txt"), s.host("d/b.txt")).unwrap()
    });
    step("rename (to)", "MOVED_TO", s.guest("d/b.txt"), &|| {});
    step("chmod", "ATTRIB", s.guest("d/b.txt"), &|| {
        std::fs::set_permissions(s.host("d/b.txt"), std::fs::Permissions::from_mode(0o600)).unwrap()
    });
    step("delete", "DELETE", s.guest("d/b.txt"), &|| {
        std::fs::remove_file(s.host("d/b.txt")).unwrap()
    });
    step("rmdir", "DELETE,ISDIR", s.guest("d"), &|| {
        std::fs::remove_dir(s.host("d")).unwrap()
    });
    println!("host change -> inotify event in the guest: {latencies:?}");

    // What the guest itself does is reported once, by its own kernel: never replayed.
    // (Empty: the echo of a create and its write may come as two events, the first
    // showing a size the mount never saw, and only a whole echo counts as "own".)
    std::fs::File::create(s.guest("g.txt")).unwrap();
    watch.expect("CREATE", &s.guest("g.txt"));
    s.sync();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(watch.count("CREATE", &s.guest("g.txt")), 1);
    assert!(s.changes("own") >= 1);
    assert!(s.changes("replayed") >= 7, "{}", s.mount.stats());
    assert_eq!(s.changes("replay_failures"), 0, "{}", s.mount.stats());

    // Sync cookies are the server's business only, and gone once a sync returns.
    let names = |dir: &Path| -> Vec<_> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect()
    };
    assert_eq!(
        names(&s.mount.mountpoint),
        vec![std::ffi::OsString::from("g.txt")]
    );
    assert_eq!(names(&s.export), names(&s.mount.mountpoint));
    std::fs::write(s.host(".crossfs-sync-0-0"), "").unwrap();
    assert!(std::fs::symlink_metadata(s.guest(".crossfs-sync-0-0")).is_err());
    let err = std::fs::create_dir(s.guest(".crossfs-sync-x")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
}

#[test]
fn a_cache_always_mount_is_coherent_after_sync() {
    let s = Setup::new(&[], &["--cache", "always"]);
    std::fs::write(s.host("c.txt"), "v1").unwrap();
    std::fs::create_dir(s.host("dir")).unwrap();
    s.sync();
    assert_eq!(std::fs::read_to_string(s.guest("c.txt")).unwrap(), "v1");
    assert!(std::fs::read_dir(s.guest("dir")).unwrap().next().is_none());
    assert!(
        std::fs::metadata(s.guest("late")).is_err(),
        "cached as missing now"
    );

    std::fs::write(s.host("c.txt"), "version two").unwrap();
    std::fs::write(s.host("dir/new"), "x").unwrap();
    std::fs::write(s.host("late"), "here").unwrap();
    s.sync();
    assert_eq!(
        std::fs::read_to_string(s.guest("c.txt")).unwrap(),
        "version two"
    );
    let listed: Vec<_> = std::fs::read_dir(s.guest("dir"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(listed, vec![std::ffi::OsString::from("new")]);
    assert_eq!(std::fs::read_to_string(s.guest("late")).unwrap(), "here");
    assert!(s.changes("syncs") >= 2);
}

#[test]
fn a_sync_of_any_path_in_the_mount_syncs_the_mount_and_a_path_elsewhere_is_refused() {
    let s = Setup::new(&[], &[]);
    std::fs::create_dir(s.host("dir")).unwrap();
    s.sync();
    assert!(std::fs::metadata(s.guest("dir/late")).is_err());
    let syncs = s.changes("syncs");
    std::fs::write(s.host("dir/late"), "here").unwrap();
    // The name the host just made, not yet shown: its nearest existing ancestor decides.
    run_ok(
        Command::new(crossfs_bin())
            .arg("sync")
            .arg(s.guest("dir/late")),
    );
    assert_eq!(s.changes("syncs"), syncs + 1);
    assert_eq!(
        std::fs::read_to_string(s.guest("dir/late")).unwrap(),
        "here"
    );
    run_ok(Command::new(crossfs_bin()).arg("sync").arg(s.guest("dir")));
    assert_eq!(s.changes("syncs"), syncs + 2);

    let elsewhere = s.export.parent().unwrap();
    let out = Command::new(crossfs_bin())
        .arg("sync")
        .arg(elsewhere)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("is not in a crossfs mount"), "{stderr}");
}

#[test]
fn an_overflow_while_the_mount_is_paused_rescans_to_a_correct_view() {
    let s = Setup::new(&[], &["--cache", "always"]);
    std::fs::create_dir(s.host("big")).unwrap();
    s.sync();
    assert_eq!(std::fs::read_dir(s.guest("big")).unwrap().count(), 0);
    // A shell working in the directory: a rescan must not pull it from under its feet.
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg("cd \"$1\" && read go && pwd -P && ls | wc -l")
        .arg("sh")
        .arg(s.guest("big"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // A stopped client reads nothing: its queue on the server fills and overflows.
    let pid = s.mount.child.id().to_string();
    run_ok(Command::new("kill").args(["-STOP", &pid]));
    for i in 0..20_000 {
        std::fs::write(s.host(&format!("big/f{i}")), b"").unwrap();
    }
    run_ok(Command::new("kill").args(["-CONT", &pid]));
    s.sync();
    assert_eq!(std::fs::read_dir(s.guest("big")).unwrap().count(), 20_000);
    assert!(s.changes("rescans") >= 1, "{}", s.mount.stats());
    {
        use std::io::Write;
        shell.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    let out = shell.wait_with_output().unwrap();
    assert!(out.status.success(), "the shell lost its working directory");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text,
        format!("{}\n20000\n", s.guest("big").display()),
        "pwd and ls in the working directory after the rescan"
    );
}

/// Runs `crossfs watch ... --json` until it has printed a line matching `done`.
fn watch_until(args: &[&str], done: impl Fn(&serde_json::Value) -> bool) -> Vec<serde_json::Value> {
    let mut child = Command::new(crossfs_bin())
        .arg("watch")
        .args(args)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + EVENT_DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match rx.recv_timeout(left) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("crossfs watch {args:?} never printed the expected event: {seen:?}");
            }
        };
        let ev: serde_json::Value = serde_json::from_str(&line).unwrap();
        seen.push(ev.clone());
        if done(&ev) {
            let _ = child.kill();
            let _ = child.wait();
            return seen;
        }
    }
}

#[test]
fn watch_prints_events_and_resumes_after_a_sequence_number() {
    let s = Setup::new(&[], &[]);
    let addr = s.serve.listen.clone();
    let writer = {
        let path = s.host("x");
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            std::fs::write(path, "x").unwrap();
        })
    };
    let seen = watch_until(&[&addr], |e| e["kind"] == "created" && e["path"] == "x");
    writer.join().unwrap();
    let last = seen.last().unwrap();
    let (epoch, seq) = (
        last["epoch"].as_u64().unwrap(),
        last["seq"].as_u64().unwrap(),
    );

    // Changes made while nobody watches are replayed to a watcher resuming after `seq`,
    // here through the mount point rather than the address.
    std::fs::write(s.host("y"), "y").unwrap();
    std::fs::remove_file(s.host("x")).unwrap();
    s.sync();
    let since = format!("{epoch}:{seq}");
    let mountpoint = s.mount.mountpoint.to_str().unwrap().to_owned();
    let resumed = watch_until(&[&mountpoint, "--since", &since], |e| {
        e["kind"] == "removed" && e["path"] == "x"
    });
    assert!(resumed.iter().all(|e| e["seq"].as_u64().unwrap() > seq));
    assert!(resumed
        .iter()
        .any(|e| e["kind"] == "created" && e["path"] == "y"));

    // Another epoch (a restarted server) is answered with an explicit rescan.
    let fresh = watch_until(&[&addr, "--since", "1:1"], |e| e["kind"] == "rescan");
    assert_eq!(fresh.last().unwrap()["reason"], "fresh start");
}

/// Everything under `root` as path -> description.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for entry in std::fs::read_dir(root.join(&rel)).unwrap() {
            let entry = entry.unwrap();
            let rel = rel.join(entry.file_name());

            let md = std::fs::symlink_metadata(root.join(&rel)).unwrap();
            let desc = if md.is_dir() {
                stack.push(rel.clone());
                format!("dir {:o}", md.mode() & 0o7777)
            } else {
                let content = std::fs::read(root.join(&rel)).unwrap();
                format!("file {:o} {}B {:?}", md.mode() & 0o7777, md.len(), content)
            };
            out.insert(rel.to_string_lossy().into_owned(), desc);
        }
    }
    out
}

/// Random host changes (create, write, truncate, chmod, rename, mkdir, rmdir, unlink) in
/// batches, with faults between them: a stalled client (SIGSTOP) and a tiny per-client
/// queue of 4 events (forcing "fell behind" rescans). After every sync the mount shows
/// exactly the export, although it caches everything (`--cache always`).
#[test]
fn random_host_changes_with_faults_leave_an_identical_view() {
    let s = Setup::new(&["--event-queue", "4"], &["--cache", "always"]);
    let pid = s.mount.child.id().to_string();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let names = ["a", "b", "c", "d", "e"];
    let dirs = ["", "p/", "q/"];
    for d in ["p", "q"] {
        std::fs::create_dir(s.host(d)).unwrap();
    }
    for batch in 0..12 {
        let stalled = batch % 3 == 1;
        if stalled {
            run_ok(Command::new("kill").args(["-STOP", &pid]));
        }
        // A stalled client misses more than its queue of 4 holds.
        for _ in 0..if stalled { 80 } else { 25 } {
            let path = format!("{}{}", dirs[rng.below(3)], names[rng.below(5)]);
            let host = s.host(&path);
            let other = s.host(&format!("{}{}", dirs[rng.below(3)], names[rng.below(5)]));
            // Failures (a name that is not there, a directory that is not empty) are part
            // of the game: the host simply did not change then.
            let _ = match rng.below(8) {
                0 => std::fs::write(&host, format!("{batch}-{}", rng.below(1000))),
                1 => std::fs::OpenOptions::new()
                    .append(true)
                    .open(&host)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, b"+")),
                2 => std::fs::OpenOptions::new()
                    .write(true)
                    .open(&host)
                    .and_then(|f| f.set_len(rng.below(3) as u64)),
                3 => std::fs::set_permissions(
                    &host,
                    std::fs::Permissions::from_mode([0o600, 0o644, 0o755][rng.below(3)]),
                ),
                4 => std::fs::rename(&host, &other),
                5 => std::fs::create_dir(&host),
                6 => std::fs::remove_dir(&host),
                _ => std::fs::remove_file(&host),
            };
        }
        if stalled {
            run_ok(Command::new("kill").args(["-CONT", &pid]));
        }
        s.sync();
        assert_eq!(
            tree(&s.mount.mountpoint),
            tree(&s.export),
            "after batch {batch} (stalled: {stalled})"
        );
    }
    println!("mount after the run: {}", s.mount.stats()["changes"]);
    assert!(
        s.changes("rescans") >= 1,
        "the tiny queue must have overflowed"
    );
}

/// Attribute `name` of `path`: its value, or the error's errno.
fn xattr(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; 256];
    rustix::fs::getxattr(path, name, &mut buf)
        .map(|n| buf[..n].to_vec())
        .map_err(|e| e.raw_os_error())
}

/// The kernel asks for a file's `security.capability` before every write it passes on.
/// While events are followed the mount answers from what it knows missing (a file it
/// created, an earlier answer), and a host change of the file's attributes shows after a
/// sync.
#[test]
fn attributes_known_missing_spare_a_request_per_write_and_host_changes_show_after_sync() {
    use std::io::Write;
    let s = Setup::new(&[], &[]);
    let asked = || {
        s.mount.stats()["9p"]["Txattrwalk"]["count"]
            .as_u64()
            .unwrap_or(0)
    };
    let kernel_asked = || {
        let stats = s.mount.stats();
        let count = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        (
            count(&stats["fuse"]["GETXATTR"]["count"]),
            count(&stats["caches"]["missing_xattrs_answered"]),
        )
    };
    let before = asked();
    let (getxattrs_before, answered_before) = kernel_asked();
    let mut f = std::fs::File::create(s.guest("new")).unwrap();
    for _ in 0..50 {
        f.write_all(b"data").unwrap();
    }
    drop(f);
    // Without it 50; each change event naming the file may cost one more question.
    let writes_asked = asked() - before;
    eprintln!("50 writes to a new file asked the server {writes_asked} times");
    assert!(writes_asked <= 5, "{writes_asked} questions for 50 writes");
    // The kernel asks before a write unless it knows the file has none (FUSE's
    // FUSE_HANDLE_KILLPRIV_V2 lets it skip the question while the file's attributes
    // stay as they were); whatever it asked, the mount answered but those few.
    let (getxattrs, answered) = kernel_asked();
    let (getxattrs, answered) = (getxattrs - getxattrs_before, answered - answered_before);
    assert!(getxattrs <= 50, "{getxattrs} questions for 50 writes");
    assert!(
        answered + writes_asked >= getxattrs,
        "{getxattrs} questions, {answered} answered in the mount, {writes_asked} sent"
    );
    assert_eq!(std::fs::read(s.host("new")).unwrap(), b"data".repeat(50));

    // Known missing, then set on the host: there after a sync, and gone after a removal.
    s.sync();
    assert_eq!(xattr(&s.guest("new"), "user.tag"), Err(libc::ENODATA));
    assert_eq!(xattr(&s.guest("new"), "user.tag"), Err(libc::ENODATA));
    let flags = rustix::fs::XattrFlags::empty();
    rustix::fs::setxattr(s.host("new"), "user.tag", b"host", flags).unwrap();
    s.sync();
    assert_eq!(xattr(&s.guest("new"), "user.tag"), Ok(b"host".to_vec()));
    rustix::fs::removexattr(s.host("new"), "user.tag").unwrap();
    s.sync();
    assert_eq!(xattr(&s.guest("new"), "user.tag"), Err(libc::ENODATA));
    // Set through the mount: there at once.
    rustix::fs::setxattr(s.guest("new"), "user.tag", b"guest", flags).unwrap();
    assert_eq!(xattr(&s.guest("new"), "user.tag"), Ok(b"guest".to_vec()));
    assert_eq!(xattr(&s.host("new"), "user.tag"), Ok(b"guest".to_vec()));

    // A capability set on the host shows, and a write through the mount drops it, as a
    // write on the host would.
    std::fs::write(s.host("tool"), "#!/bin/sh\n").unwrap();
    s.sync();
    assert_eq!(
        xattr(&s.guest("tool"), "security.capability"),
        Err(libc::ENODATA)
    );
    // VFS_CAP_REVISION_2 with CAP_NET_RAW (13) permitted.
    let mut cap = 0x0200_0000u32.to_le_bytes().to_vec();
    cap.extend_from_slice(&(1u32 << 13).to_le_bytes());
    cap.extend_from_slice(&[0; 12]);
    rustix::fs::setxattr(s.host("tool"), "security.capability", &cap, flags).unwrap();
    s.sync();
    assert_eq!(xattr(&s.guest("tool"), "security.capability"), Ok(cap));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(s.guest("tool"))
        .unwrap();
    f.write_all(b"exit 0\n").unwrap();
    drop(f);
    assert_eq!(
        xattr(&s.host("tool"), "security.capability"),
        Err(libc::ENODATA)
    );
    assert_eq!(
        xattr(&s.guest("tool"), "security.capability"),
        Err(libc::ENODATA)
    );
}

/// A unix socket at `path` that forwards each connection to `server`, the second and later
/// ones (a mount's event connection) after `delay`: a busy machine's slow connect.
fn slow_after_first(path: &Path, server: &Path, delay: Duration) {
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    let server = server.to_path_buf();
    std::thread::spawn(move || {
        for (n, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { return };
            let server = server.clone();
            std::thread::spawn(move || {
                if n > 0 {
                    std::thread::sleep(delay);
                }
                let Ok(upstream) = std::os::unix::net::UnixStream::connect(&server) else {
                    return;
                };
                let (mut c_in, mut u_out) =
                    (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_in, &mut u_out);
                    let _ = u_out.shutdown(std::net::Shutdown::Write);
                });
                let (mut u_in, mut c_out) = (upstream, client);
                let _ = std::io::copy(&mut u_in, &mut c_out);
                let _ = c_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
}

#[test]
fn a_sync_made_as_soon_as_the_mount_appears_waits_for_its_change_events() {
    // `mount ...; crossfs sync ...` in a script: the file system appears before the mount
    // process has connected its change events (slow here on purpose), and the sync used to
    // fail then with "the mount does not follow change events".
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let served = dir.path().join("s.sock");
    let _serve = Serve::start(&export, &format!("unix:{}", served.display()), &[]);
    let slow = dir.path().join("slow.sock");
    slow_after_first(&slow, &served, Duration::from_millis(500));
    let addr = format!("unix:{}", slow.display());
    let mount = Mount::start_mounted(&addr, &[]);
    let out = mount.sync();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without events there is nothing to wait for: it says so at once.
    let mount = Mount::start_mounted(&addr, &["--no-events"]);
    let out = mount.sync();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not follow change events"),
        "{out:?}"
    );
}
