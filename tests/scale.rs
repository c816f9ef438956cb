//! Promises that hold under load (issue 24, "Scale"): many `crossfs mount`s of one export of
//! 10,000 entries, served by one `crossfs serve` whose open-file limit is 4,096. Every mount
//! walks the whole tree (a listing of every directory, an lstat of every entry, a read of
//! every file), one mount after another and then all at once in a few threads, and must
//! see exactly the export's entries and contents with no error. Throughout, the server's
//! descriptors stay within its budget (sampled from `crossfs stats` and /proc), no open is
//! refused, and the memory the server reports per connection is printed with the server's
//! and each mount's RSS.
//!
//! By default 16 mounts (30 s here, 2 cores); `CROSSFS_LONG=1` runs the 64 mounts,
//! which take over two minutes here (figures in docs/reliability.md, "Scale"). The test
//! asserts what the mounts see and what the server holds, never how long it took. The 64
//! found the bug that tests/small_limits.rs now checks in seconds: quiet mounts kept
//! their idle opens for good, and the 27th mount's reads failed with EMFILE.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{make_source_tree, Mount, Serve};

/// The server's open-file limit (soft and hard), as a user's `ulimit -n` would leave it.
const NOFILE: u32 = 4096;
/// Directories of `make_source_tree` (20 entries each): 10,000 entries.
const DIRS: usize = 500;
/// Threads walking the mounts at once in the second round.
const THREADS: usize = 4;

/// What a walk found: every entry beneath the root by its relative path, with a file's
/// content (`None` for a directory).
type Tree = BTreeMap<String, Option<Vec<u8>>>;

/// A directory on tmpfs where there is one, so the disk plays no part.
fn scratch() -> tempfile::TempDir {
    match tempfile::tempdir_in("/dev/shm") {
        Ok(dir) => dir,
        Err(_) => tempfile::tempdir().unwrap(),
    }
}

fn mounts() -> usize {
    if std::env::var_os("CROSSFS_LONG").is_some_and(|v| v == "1") {
        64
    } else {
        16
    }
}

/// Walks `root`: lists every directory, lstats every entry, reads every file. Errors are
/// collected (with the call and the path), never hidden.
fn walk(root: &Path) -> (Tree, Vec<String>) {
    let mut tree = Tree::new();
    let mut errors = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel) = dirs.pop() {
        let listing = match std::fs::read_dir(root.join(&rel)) {
            Ok(listing) => listing,
            Err(e) => {
                errors.push(format!("readdir {}: {e}", rel.display()));
                continue;
            }
        };
        for entry in listing {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    errors.push(format!("readdir {}: {e}", rel.display()));
                    break;
                }
            };
            let rel = rel.join(entry.file_name());
            let path = root.join(&rel);
            let name = rel.to_string_lossy().into_owned();
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {
                    tree.insert(name, None);
                    dirs.push(rel);
                }
                Ok(m) if m.is_file() => match std::fs::read(&path) {
                    Ok(data) => {
                        tree.insert(name, Some(data));
                    }
                    Err(e) => errors.push(format!("read {name}: {e}")),
                },
                Ok(m) => errors.push(format!("{name}: unexpected type {:?}", m.file_type())),
                Err(e) => errors.push(format!("lstat {name}: {e}")),
            }
        }
    }
    (tree, errors)
}

/// Panics with the first differences when `seen` (through mount `i`) is not `export`.
fn assert_same_tree(i: usize, export: &Tree, seen: &Tree, errors: &[String]) {
    assert!(
        errors.is_empty(),
        "mount {i}: {} errors, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(10)]
    );
    if seen == export {
        return;
    }
    let missing: Vec<_> = export
        .keys()
        .filter(|k| !seen.contains_key(*k))
        .take(10)
        .collect();
    let extra: Vec<_> = seen
        .keys()
        .filter(|k| !export.contains_key(*k))
        .take(10)
        .collect();
    let differ: Vec<_> = export
        .iter()
        .filter(|(k, v)| seen.get(*k).is_some_and(|s| s != *v))
        .map(|(k, _)| k)
        .take(10)
        .collect();
    panic!(
        "mount {i} sees {} entries, the export has {}; missing {missing:?}, extra {extra:?}, \
         content differs {differ:?}",
        seen.len(),
        export.len()
    );
}

/// VmRSS of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Descriptors process `pid` has open now.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// What the sampler saw of the server while the mounts walked.
#[derive(Debug, Default)]
struct Peak {
    /// `live.fds` of `crossfs stats` (handle descriptors kept and open files).
    fds: u64,
    /// Entries of /proc/PID/fd (everything: sockets, listeners, the event watcher too).
    process_fds: usize,
    samples: usize,
}

/// Samples the server's descriptors every 100 ms until `stop`.
fn sample(serve: &Serve, stop: &AtomicBool, peak: &Mutex<Peak>) {
    let pid = serve.child.id();
    while !stop.load(Ordering::Relaxed) {
        let fds = serve.stats()["live"]["fds"].as_u64().unwrap();
        let process_fds = open_fds(pid);
        let mut p = peak.lock().unwrap();
        p.fds = p.fds.max(fds);
        p.process_fds = p.process_fds.max(process_fds);
        p.samples += 1;
        drop(p);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sets the flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

#[test]
fn many_mounts_of_a_10000_entry_tree_under_a_4096_descriptor_server() {
    let n = mounts();
    let started = Instant::now();
    let work = scratch();
    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();
    make_source_tree(&export, DIRS);
    let (expected, errors) = walk(&export);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(expected.len(), 20 * DIRS);

    let sock = work.path().join("s.sock");
    let serve = Serve::start_limited(&export, &format!("unix:{}", sock.display()), &[], NOFILE);
    let pid = serve.child.id();
    let rss_idle = rss_kib(pid);
    let mounts: Vec<Mount> = (0..n).map(|_| Mount::start(&serve.listen, &[])).collect();
    let mounted = started.elapsed();

    let stop = AtomicBool::new(false);
    let peak = Mutex::new(Peak::default());
    let (one_by_one, together) = std::thread::scope(|s| {
        s.spawn(|| sample(&serve, &stop, &peak));
        // Stops the sampler however this ends, a failed walk included.
        let _stop = StopOnDrop(&stop);
        // One mount after another...
        let t = Instant::now();
        for (i, m) in mounts.iter().enumerate() {
            let (seen, errors) = walk(&m.mountpoint);
            assert_same_tree(i, &expected, &seen, &errors);
        }
        let one_by_one = t.elapsed();
        // ...then all again at once, in a few threads.
        let t = Instant::now();
        let walkers: Vec<_> = (0..THREADS)
            .map(|k| {
                let (mounts, expected) = (&mounts, &expected);
                s.spawn(move || {
                    for (i, m) in mounts.iter().enumerate().skip(k).step_by(THREADS) {
                        let (seen, errors) = walk(&m.mountpoint);
                        assert_same_tree(i, expected, &seen, &errors);
                    }
                })
            })
            .collect();
        for w in walkers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
        (one_by_one, t.elapsed())
    });

    // What the server holds now, with every mount still holding what it walked.
    let stats = serve.stats();
    let live = &stats["live"];
    let (handles, open_files) = (&live["handles"], &live["open_files"]);
    let budget = handles["capacity"].as_u64().unwrap() + open_files["budget"].as_u64().unwrap();
    let connections = stats["connections"].as_array().unwrap();
    let peak = peak.into_inner().unwrap();
    let mount_rss: Vec<u64> = mounts.iter().map(|m| rss_kib(m.child.id())).collect();
    let mut per_conn: Vec<u64> = connections
        .iter()
        .map(|c| c["memory"]["bytes"].as_u64().unwrap())
        .collect();
    per_conn.sort_unstable();
    let largest = connections
        .iter()
        .max_by_key(|c| c["memory"]["bytes"].as_u64().unwrap())
        .unwrap();
    let mut sorted_rss = mount_rss.clone();
    sorted_rss.sort_unstable();

    println!(
        "--- {n} mounts x {} entries, server under nofile={NOFILE} ---",
        expected.len()
    );
    println!(
        "time: started and mounted {:.1} s; walks one by one {:.1} s ({:.2} s a mount); \
         together in {THREADS} threads {:.1} s; in all {:.1} s",
        mounted.as_secs_f64(),
        one_by_one.as_secs_f64(),
        one_by_one.as_secs_f64() / n as f64,
        together.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "server: VmRSS {} KiB idle, {} KiB after the walks; {} connections, {} fids",
        rss_idle,
        rss_kib(pid),
        live["connections"],
        live["fids"]
    );
    println!(
        "memory per connection: min {}, median {}, max {}; all connections {}; \
         handle cache {} ({} handles, shared)",
        kib(per_conn[0]),
        kib(per_conn[per_conn.len() / 2]),
        kib(per_conn[per_conn.len() - 1]),
        kib(live["memory"]["connections"].as_u64().unwrap()),
        kib(live["memory"]["handles"].as_u64().unwrap()),
        handles["handles"]
    );
    println!("largest connection: {}", largest["memory"]);
    println!(
        "descriptors: budget {budget} (handles {} + open files {}); peak live.fds {}, peak \
         /proc/{pid}/fd {} ({} samples); now {} handle descriptors ({} closed to make room, \
         {} reopened), {} open files, {} opens refused",
        handles["capacity"],
        open_files["budget"],
        peak.fds,
        peak.process_fds,
        peak.samples,
        handles["open"],
        handles["closed"],
        handles["reopened"],
        open_files["held"],
        open_files["refused"]
    );
    println!(
        "mount VmRSS: min {} KiB, median {} KiB, max {} KiB, sum {} KiB",
        sorted_rss[0],
        sorted_rss[n / 2],
        sorted_rss[n - 1],
        mount_rss.iter().sum::<u64>()
    );

    // Every mount is still up, and still served.
    for (i, m) in mounts.iter().enumerate() {
        assert!(common::is_mounted(&m.mountpoint), "mount {i} is gone");
    }
    assert!(
        connections.len() >= n,
        "{} connections for {n} mounts",
        connections.len()
    );
    // Descriptors: a cache within the budget, never a refusal. A handle in use by a
    // request is never closed under it, so the cache may briefly hold one more per
    // request running (each connection runs at most 1 + 4 at once, 2 handles each).
    assert_eq!(open_files["refused"], 0, "{live}");
    assert!(
        handles["closed"].as_u64().unwrap() > 0,
        "the tree never outgrew the handle cache: {live}"
    );
    let running = 2 * 5 * connections.len() as u64;
    assert!(
        peak.fds <= budget + running,
        "peak {} descriptors for a budget of {budget}",
        peak.fds
    );
    assert!(peak.process_fds < NOFILE as usize, "{peak:?}");
    // Memory is reported per connection and adds up.
    assert!(per_conn[0] > 0);
    assert_eq!(
        live["memory"]["connections"].as_u64().unwrap(),
        per_conn.iter().sum::<u64>()
    );
}
