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
    // Directories are opened and listed without asking either (no-opendir mode): what is
    // left is grep's fstatfs, nothing per directory or file.
    for op in ["OPENDIR", "RELEASEDIR", "READDIR", "READDIRPLUS"] {
        assert_eq!(count(&fuse1, op), count(&fuse0, op), "{op} in {fuse:?}");
    }
    let total: u64 = fuse.iter().map(|(_, n)| n).sum();
    assert!(total <= 2, "{total} FUSE requests: {fuse:?}");
    // grep asks for the file system's statistics once (fstatfs): nothing else crosses.
    assert!(
        sent.iter().all(|(m, _)| m == "Tstatfs"),
        "9P requests for a repeated grep: {sent:?}"
    );
    for op in ["OPEN", "OPENDIR"] {
        assert!(
            count(&fuse1, op) <= 1,
            "at most the first {op}, answered ENOSYS"
        );
    }
}

/// A first walk over a tree the mount has listed, reading every file as `grep -r` does
/// (depth first, in listing order), finds the small files of the directories ahead of it
/// fetched already: once it has read two directories, the next ones' files are fetched a
/// directory at a time (Treadfiles) before it opens them, not one by one. The walk takes
/// a millisecond a file, so that what is checked is which directories the mount fetches,
/// not how fast its helper thread runs beside the walker. Without the read-ahead every
/// directory's first file is read one by one (81); with it, 7 to 16 here, and 34 once in
/// CI beside the other tests: the bound says the read-ahead served a quarter at least.
#[test]
fn a_first_walk_reads_the_directories_ahead_whole() {
    let s = setup(40, &[]);
    // Each directory has a subdirectory, walked before the next directory.
    for d in 0..40 {
        make_source_tree(&s.export.join(format!("d{d:03}")), 1);
    }
    let dirs = 80;
    let out = Command::new("find")
        .arg(&s.mount.mountpoint)
        .output()
        .unwrap();
    assert!(out.status.success());
    let (_, wire0) = counts(&s.mount);
    assert_eq!(read_tree(&s.mount.mountpoint), dirs * 19);
    let (_, wire1) = counts(&s.mount);
    let sent = delta(&wire0, &wire1, true);
    println!("9P requests: {sent:?}");
    let one_by_one = count(&wire1, "Twalkread") - count(&wire0, "Twalkread");
    assert!(
        one_by_one <= dirs as u64 * 3 / 4,
        "{one_by_one} files of {dirs} directories read one by one: {sent:?}"
    );
}

/// Reads every file beneath `dir` depth first in listing order, a millisecond apart;
/// returns how many there were.
fn read_tree(dir: &Path) -> usize {
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            files += read_tree(&entry.path());
        } else {
            assert!(!std::fs::read(entry.path()).unwrap().is_empty());
            std::thread::sleep(std::time::Duration::from_millis(1));
            files += 1;
        }
    }
    files
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
        std::fs::read_dir(s.mount.mountpoint.join("d000"))
            .unwrap()
            .for_each(drop);
    }
    let (fuse, _) = counts(&s.mount);
    assert!(count(&fuse, "OPEN") >= 3, "{fuse}");
    assert!(count(&fuse, "OPENDIR") >= 3, "{fuse}");
    wait_until(
        "the closes to reach the mount",
        std::time::Duration::from_secs(5),
        || {
            let fuse = counts(&s.mount).0;
            count(&fuse, "RELEASE") >= 3 && count(&fuse, "RELEASEDIR") >= 3
        },
    );
}

/// Directories the kernel opens without asking (no-opendir mode) are read at any offset
/// from listings the mount makes per request: while other names come and go, in the guest
/// and on the host, every name that stays is listed exactly once by every pass (each many
/// reads of a page, the kernel's cache of the listing dropped by the changes), by several
/// readers at once; with no replica (the server's listing, read
/// on from its cookies) and with one. After a sync, a listing is the host's.
#[test]
fn listings_without_opendir_stay_exact_while_names_change() {
    for extra in [&["--replica-entries", "0"][..], &[]] {
        let s = setup(0, extra);
        let (host, guest) = (s.export.join("big"), s.mount.mountpoint.join("big"));
        std::fs::create_dir(&host).unwrap();
        let stay: Vec<String> = (0..1500).map(|i| format!("stays-{i:04}")).collect();
        for name in &stay {
            std::fs::write(host.join(name), "").unwrap();
        }
        sync(&s.mount);
        // The first OPENDIR is answered ENOSYS: from then on none is sent.
        std::fs::read_dir(&guest).unwrap().for_each(drop);
        let (before, _) = counts(&s.mount);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let churn = |dir: &Path, tag: &str| {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let p = dir.join(format!("{tag}-{}", i % 50));
                if i % 100 < 50 {
                    std::fs::write(&p, "").unwrap();
                } else {
                    std::fs::remove_file(&p).unwrap();
                }
                i += 1;
            }
        };
        std::thread::scope(|t| {
            t.spawn(|| churn(&host, "host"));
            t.spawn(|| churn(&guest, "guest"));
            let readers: Vec<_> = (0..3)
                .map(|_| {
                    t.spawn(|| {
                        for _ in 0..15 {
                            let names: Vec<String> = std::fs::read_dir(&guest)
                                .unwrap()
                                .map(|e| e.unwrap().file_name().into_string().unwrap())
                                .collect();
                            for name in &stay {
                                let n = names.iter().filter(|x| *x == name).count();
                                assert_eq!(n, 1, "{name} listed {n} times");
                            }
                        }
                    })
                })
                .collect();
            for r in readers {
                let done = r.join();
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                done.unwrap();
            }
        });
        sync(&s.mount);
        let names = |d: &Path| {
            let mut v: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&guest), names(&host), "{extra:?}");
        let (after, _) = counts(&s.mount);
        for op in ["OPENDIR", "RELEASEDIR"] {
            assert_eq!(count(&after, op), count(&before, op), "{op}: {after}");
        }
    }
}
