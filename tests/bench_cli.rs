//! `crossfs bench --quick --json` end to end: every workload of --quick ran on every target it
//! applies to (all of them, except the watcher cost, which runs natively only and says so), and
//! the JSON has the documented shape; every target's watcher saw every host change; npm, which --quick runs only when named, is skipped with
//! its reason when it has no cache and no registry (a closed local port: no test touches the
//! network). Speed is never asserted here; figures live in docs/bench.md.

mod common;

use std::process::Command;

use common::*;

#[test]
fn quick_bench_runs_every_workload_on_every_target() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let svg = dir.path().join("bench.svg");
    // --scale shrinks every size so the plumbing is checked in seconds, not a minute.
    let out = run_ok(
        Command::new(crossfs_bin())
            .args([
                "bench", "--quick", "--runs", "1", "--scale", "0.05", "--json",
            ])
            .arg(&json)
            .arg("--svg")
            .arg(&svg),
    );
    let table = String::from_utf8_lossy(&out.stdout);
    println!("{table}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();

    let targets: Vec<&str> = report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        targets,
        [
            "native",
            "crossfs",
            "crossfs --changes behind",
            "crossfs --msize 65536 --max-pages 32",
            "crossfs --negative-ttl 0",
            "crossfs --send-opens",
            "crossfs --cache never",
            "crossfs --io-uring",
            "crossfs --idle-poll 0"
        ]
    );
    let workloads = report["workloads"].as_array().unwrap();
    let ids: Vec<&str> = workloads
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "seq-read",
            "seq-write",
            "random",
            "meta",
            "negative",
            "symlink",
            "build",
            "git",
            "watcher",
            "untar",
            "tree",
            "latency"
        ]
    );
    for w in workloads {
        let results = w["results"].as_array().unwrap();
        assert_eq!(
            results.len(),
            targets.len(),
            "workload {} on every target",
            w["id"]
        );
        for r in results {
            // Only the watcher cost skips a target, only mounts, and never silently.
            let native = r["target"] == "native";
            if let Some(reason) = r["not_applicable"].as_str() {
                assert!(
                    w["id"] == "watcher" && !native,
                    "{} on {}",
                    w["id"],
                    r["target"]
                );
                assert!(reason.starts_with("native only"), "{reason}");
                assert!(r["runs"].as_array().unwrap().is_empty());
                continue;
            }
            assert!(
                w["id"] != "watcher" || native,
                "the watcher cost ran on mount {}",
                r["target"]
            );
            assert!(r["not_applicable"].is_null(), "{r}");
            assert!(
                r["ok"].as_bool().unwrap(),
                "workload {} failed on {}: {}",
                w["id"],
                r["target"],
                r["errors"]
            );
            assert!(!r["figures"].as_array().unwrap().is_empty());
            for fig in r["figures"].as_array().unwrap() {
                assert!(fig["summary"]["median"].as_f64().is_some(), "{fig}");
            }
            // Mount targets report the 9P messages each figure cost (the watch latency
            // times events, not requests).
            if !native && w["id"] != "latency" {
                assert!(
                    r["figures"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|f| f["messages"].is_object()),
                    "no message counts for {} on {}",
                    w["id"],
                    r["target"]
                );
            }
        }
    }
    // Memory of every crossfs server and client is reported.
    for t in report["targets"].as_array().unwrap().iter().skip(1) {
        let roles: Vec<&str> = t["memory"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["server", "client"], "{t}");
    }
    // The watcher cost reports both modes and their ratio, and the hub it ran.
    let watcher = &workloads[8]["results"][0];
    let metrics: Vec<&str> = watcher["figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["events-off", "events-on", "on-off-ratio"]);
    let notes = watcher["warnings"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("watcher;")),
        "{notes:?}"
    );
    // Every target passes every host change on to a watcher on it: the share seen is 1.
    let latency = workloads.iter().find(|w| w["id"] == "latency").unwrap();
    for r in latency["results"].as_array().unwrap() {
        let seen = r["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["metric"] == "seen")
            .unwrap_or_else(|| panic!("no share seen on {}", r["target"]));
        assert_eq!(
            seen["summary"]["median"].as_f64(),
            Some(1.0),
            "{}: {}",
            r["target"],
            r["warnings"]
        );
    }
    assert!(table.contains("n/a = native only"), "{table}");
    assert!(table.contains("last column: the requests"), "{table}");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    for name in targets {
        assert!(table.contains(name), "table names target {name}");
    }
}

/// npm with no filled cache and no registry (a closed local port, set through the
/// environment the CLI documents): skipped on every target with the reason, exit 0, and
/// nothing downloaded or written to the cache directory.
#[test]
fn npm_without_a_cache_or_a_registry_is_skipped_not_failed() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let cache = dir.path().join("npm-cache");
    let out = run_ok(
        Command::new(crossfs_bin())
            .args([
                "bench",
                "--quick",
                "--default-only",
                "--workloads",
                "npm",
                "--json",
            ])
            .arg(&json)
            .env("CROSSFS_BENCH_NPM_CACHE", &cache)
            .env("CROSSFS_BENCH_NPM_REGISTRY", "http://127.0.0.1:9"),
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let npm = &report["workloads"][0];
    assert_eq!(npm["id"], "npm");
    for r in npm["results"].as_array().unwrap() {
        let reason = r["not_applicable"].as_str().unwrap_or_default();
        assert!(reason.starts_with("skipped: "), "{r}");
        assert!(r["ok"].as_bool().unwrap() && r["runs"].as_array().unwrap().is_empty());
        assert!(table.contains(&format!("n/a = {reason}")), "{table}");
        assert!(stderr.contains(reason), "progress says it too: {stderr}");
    }
    assert!(!cache.join("crossfs-bench-filled").exists());
}

/// A bench stopped with SIGTERM (or Ctrl-C) unmounts what it mounted, stops its servers and
/// removes its work directory before it exits.
#[test]
fn an_interrupted_bench_leaves_no_mount_process_or_directory_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut bench = Command::new(crossfs_bin())
        .args(["bench", "--runs", "3", "--workloads", "untar,tree"])
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let mounted = || {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .filter(|l| l.contains(tmp.path().to_str().unwrap()))
            .count()
    };
    // Once the first workload ran on the first target, the bench is under way on the
    // next, with every target's mount up.
    wait_until(
        "the bench's first figure",
        std::time::Duration::from_secs(120),
        || std::fs::read_to_string(log.path()).is_ok_and(|l| l.contains("[1/")),
    );
    // crossfs, changes behind, small messages, no negative cache, --send-opens, --cache
    // never, --io-uring, --idle-poll 0.
    assert_eq!(mounted(), 8);
    let pid = rustix::process::Pid::from_child(&bench);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = bench.wait().unwrap();
    let stderr = std::fs::read_to_string(log.path()).unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_eq!(mounted(), 0, "mounts left behind");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}\n{stderr}");
    // No crossfs process serves or mounts beneath the directory any more.
    let procs = std::fs::read_dir("/proc").unwrap().filter_map(|e| {
        let cmdline = std::fs::read(e.ok()?.path().join("cmdline")).ok()?;
        Some(String::from_utf8_lossy(&cmdline).replace('\0', " "))
    });
    let ours: Vec<String> = procs
        .filter(|c| c.contains(tmp.path().to_str().unwrap()))
        .collect();
    assert!(ours.is_empty(), "still running: {ours:?}");
    println!("{stderr}");
}
