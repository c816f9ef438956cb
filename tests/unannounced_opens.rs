//! Opens the kernel does not announce (FUSE's no-open mode, the default while change events
//! are followed): a repeated `grep -r` over an unchanged tree costs no open, close or read
//! request, and nothing on the wire; what the host changes still reaches the next read;
//! writes through such opens land as the opener asked (appends at the host's end);
//! `--send-opens` brings every open back to the mount.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use common::*;

struct Setup {
    _dir: tempfile::TempDir,
    export: std::path::PathBuf,
    _serve: Serve,
    mount: Mount,
}

fn setup(dirs: usize, extra: &[&str]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    make_source_tree(&export, dirs);
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let serve = Serve::start(&export, &addr, &[]);
    let mount = Mount::start(&addr, extra);
    mount.wait_following();
    Setup {
        _dir: dir,
        export,
        _serve: serve,
        mount,
    }
}

fn sync(mount: &Mount) {
    run_ok(
        Command::new(crossfs_bin())
            .arg("sync")
            .arg(&mount.mountpoint),
    );
}

fn grep(dir: &Path) -> String {
    let out = Command::new("grep")
        .args(["-r", "int x"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "grep -r: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// FUSE requests by opcode and 9P requests by type, from the mount's stats.
fn counts(mount: &Mount) -> (serde_json::Value, serde_json::Value) {
    let stats = mount.stats();
    (stats["fuse"].clone(), stats["9p"].clone())
}

fn count(table: &serde_json::Value, name: &str) -> u64 {
    table[name]["count"].as_u64().unwrap_or(0)
}

/// Requests (FUSE opcodes, or 9P T-messages) counted between two snapshots, by name.
fn delta(
    before: &serde_json::Value,
    after: &serde_json::Value,
    requests: bool,
) -> Vec<(String, u64)> {
    let names = after
        .as_object()
        .map(|o| o.keys().cloned())
        .into_iter()
        .flatten();
    names
        .filter(|n| !requests || n.starts_with('T'))
        .map(|n| (n.clone(), count(after, &n) - count(before, &n)))
        .filter(|(_, d)| *d > 0)
        .collect()
}

#[test]
fn a_repeated_grep_costs_no_open_close_or_read_and_nothing_on_the_wire() {
    let dirs = 20;
    let s = setup(dirs, &[]);
    let first = grep(&s.mount.mountpoint);
    assert_eq!(first.lines().count(), dirs * 19);
    // The second pass still asks for the attributes of the files the first read through
    // the mount (the kernel forgets a file's access time after a READ); the mount answers
    // them itself. From the third on, a pass is what this measures.
    assert_eq!(grep(&s.mount.mountpoint), first);
    let (fuse0, wire0) = counts(&s.mount);
    let again = grep(&s.mount.mountpoint);
    let (fuse1, wire1) = counts(&s.mount);
    assert_eq!(again, first);
    let fuse = delta(&fuse0, &fuse1, false);
    let sent = delta(&wire0, &wire1, true);
    println!("FUSE requests: {fuse:?}\n9P requests: {sent:?}");
    for op in ["OPEN", "RELEASE", "FLUSH", "READ"] {
        assert_eq!(count(&fuse1, op), count(&fuse0, op), "{op} in {fuse:?}");
    }
    // What is left is per directory (OPENDIR, RELEASEDIR, a GETATTR or two), not per file.
    let total: u64 = fuse.iter().map(|(_, n)| n).sum();
    assert!(
        total <= 2 * (dirs as u64 + 2) + 1,
        "{total} FUSE requests: {fuse:?}"
    );
    // grep asks for the file system's statistics once (fstatfs): nothing else crosses.
    assert!(
        sent.iter().all(|(m, _)| m == "Tstatfs"),
        "9P requests for a repeated grep: {sent:?}"
    );
    assert!(
        count(&fuse1, "OPEN") <= 1,
        "at most the first OPEN, answered ENOSYS"
    );
}

#[test]
fn a_host_change_reaches_the_next_read() {
    let s = setup(2, &[]);
    let (host, guest) = (
        s.export.join("d000/f00.c"),
        s.mount.mountpoint.join("d000/f00.c"),
    );
    let old = std::fs::read(&guest).unwrap();
    assert_eq!(
        std::fs::read(&guest).unwrap(),
        old,
        "read twice, from the page cache"
    );
    // The same length, so that only the content (and the times) say it changed.
    let new: Vec<u8> = old.iter().map(|b| b.to_ascii_uppercase()).collect();
    assert_ne!(new, old);
    std::fs::write(&host, &new).unwrap();
    sync(&s.mount);
    assert_eq!(std::fs::read(&guest).unwrap(), new);
    // And a longer one, through a file the guest keeps open across the change.
    let kept = std::fs::File::open(&guest).unwrap();
    std::fs::write(&host, b"longer content than before\n").unwrap();
    sync(&s.mount);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut &kept, &mut text).unwrap();
    assert_eq!(text, "longer content than before\n");
}

#[test]
fn appends_land_at_the_hosts_end_and_writes_reach_the_host() {
    let s = setup(1, &[]);
    let (host, guest) = (s.export.join("log"), s.mount.mountpoint.join("log"));
    std::fs::write(&host, "a\n").unwrap();
    sync(&s.mount);
    let append = |text: &str| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&guest)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    };
    append("b\n");
    // The host appends behind the guest's back; the guest's next append goes after it
    // even before the event comes (the server appends, whatever the kernel's size).
    let mut h = std::fs::OpenOptions::new()
        .append(true)
        .open(&host)
        .unwrap();
    h.write_all(b"c\n").unwrap();
    append("d\n");
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "a\nb\nc\nd\n");
    // An existing file written over in place, then truncated.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&guest)
        .unwrap();
    f.write_all(b"X").unwrap();
    f.set_len(4).unwrap();
    drop(f);
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "X\nb\n");
    sync(&s.mount);
    assert_eq!(std::fs::read_to_string(&guest).unwrap(), "X\nb\n");
}

#[test]
fn send_opens_sends_every_open_and_close() {
    let s = setup(1, &["--send-opens"]);
    let file = s.mount.mountpoint.join("d000/f00.c");
    for _ in 0..3 {
        std::fs::read(&file).unwrap();
    }
    let (fuse, _) = counts(&s.mount);
    assert!(count(&fuse, "OPEN") >= 3, "{fuse}");
    wait_until(
        "the closes to reach the mount",
        std::time::Duration::from_secs(5),
        || count(&counts(&s.mount).0, "RELEASE") >= 3,
    );
}

/// The kernel sends no RELEASE once it opens files without asking, not even for the files
/// it created (a CREATE's handle): their opens on the server must not pile up.
#[test]
fn created_files_do_not_stay_open_on_the_server() {
    let s = setup(1, &[]);
    let n = 300;
    for i in 0..n {
        std::fs::write(s.mount.mountpoint.join(format!("new{i}")), format!("{i}")).unwrap();
    }
    for i in 0..n {
        let host = std::fs::read_to_string(s.export.join(format!("new{i}"))).unwrap();
        assert_eq!(host, format!("{i}"));
    }
    let live = &s._serve.stats()["live"];
    let held = live["open_files"]["held"].as_u64().unwrap();
    assert!(
        held <= 80,
        "{held} files held open on the server after {n} creations: {live}"
    );
}
