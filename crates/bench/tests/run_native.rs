//! End to end: the whole `run` on local directories, at a tiny scale.
//! Checks shape and completeness only, never speed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossfs_bench::{run, BenchConfig, MessageCounts, NoProgress, Target, WorkloadId};

/// Never the network: the npm workload gets a cache directory that does not exist and a
/// registry on a closed local port, so it is skipped (see `npm_is_skipped_...`).
fn tiny(runs: usize) -> BenchConfig {
    BenchConfig {
        quick: true,
        runs,
        scale: 0.03,
        npm_cache: Some(std::env::temp_dir().join("crossfs-bench-test-no-npm-cache")),
        npm_registry: Some(CLOSED_REGISTRY.to_owned()),
        ..BenchConfig::default()
    }
}

const CLOSED_REGISTRY: &str = "http://127.0.0.1:9";

#[test]
fn every_workload_gives_a_figure_on_every_target() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let targets = [
        Target::native("native", a.path()),
        Target::native("other", b.path()).with_pid("self", std::process::id()),
    ];
    let report = run(&tiny(2), &targets, &mut NoProgress).unwrap();

    // All but npm, which --quick leaves out unless named (its own test is below).
    let quick_set = WorkloadId::ALL.len() - 1;
    assert_eq!(report.workloads.len(), quick_set);
    assert!(report.workloads.iter().all(|w| w.id != WorkloadId::Npm));
    for w in &report.workloads {
        assert_eq!(w.results.len(), 2, "{}", w.id);
        for r in &w.results {
            assert!(r.ok, "{} on {}: {:?}", w.id, r.target, r.errors);
            assert_eq!(r.runs.len(), 2);
            for f in &r.figures {
                let s = f
                    .summary
                    .unwrap_or_else(|| panic!("{} {} {}", w.id, r.target, f.metric));
                assert_eq!(s.runs, 2);
                assert!(s.min <= s.median && s.median <= s.max && s.min > 0.0);
                assert!(f.ratio_to_native.is_some());
                assert!(f.messages.is_none(), "native targets have no counters");
            }
        }
        // The reference is exactly 1.0 against itself.
        assert!(w.results[0]
            .figures
            .iter()
            .all(|f| f.ratio_to_native == Some(1.0)));
    }
    // Every workload cleaned up after itself.
    for dir in [a.path(), b.path()] {
        let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    let json = report.to_json();
    assert_eq!(json["workloads"].as_array().unwrap().len(), quick_set);
    assert_eq!(json["targets"][1]["memory"][0]["role"], "self");
    assert!(
        json["targets"][1]["memory"][0]["vm_hwm_kib"]
            .as_u64()
            .unwrap()
            > 0
    );
    let table = report.table();
    for name in crossfs_bench::workload_names()
        .iter()
        .filter(|n| **n != "npm")
    {
        assert!(
            table.contains(&format!("] {name}:")),
            "{name} missing in\n{table}"
        );
    }
    assert!(table.contains("memory (KiB)"));
    let dir = tempfile::tempdir().unwrap();
    report.write_svg(&dir.path().join("bench.svg")).unwrap();
}

/// A "mount" that is really the native directory: exercises the mount code
/// paths (finding the native tree behind it, dropping the client cache) and
/// the counter plumbing, with a fake counter that ticks on every read.
#[test]
fn mount_targets_find_their_native_tree_and_report_message_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let ticks = Arc::new(AtomicU64::new(0));
    let counter = {
        let ticks = ticks.clone();
        move || -> std::io::Result<MessageCounts> {
            let n = ticks.fetch_add(3, Ordering::Relaxed) + 3;
            Ok([("Twalk".to_owned(), n)].into())
        }
    };
    let targets = [
        Target::native("native", dir.path()),
        Target::mount("loop", dir.path()).with_counters(counter),
    ];
    let config = BenchConfig {
        workloads: vec![WorkloadId::SeqRead, WorkloadId::Negative],
        ..tiny(1)
    };
    let report = run(&config, &targets, &mut NoProgress).unwrap();
    assert_eq!(report.targets[1].prepared_in, dir.path());
    for w in &report.workloads {
        assert!(w.results[1].not_applicable.is_none());
        let r = &w.results[1];
        assert!(r.ok, "{:?}", r.errors);
        for f in &r.figures {
            // Each figure is bracketed by two snapshots, 3 apart.
            assert_eq!(f.messages.as_ref().unwrap()["Twalk"], 3, "{}", f.metric);
        }
    }
    assert!(report.table().contains("Twalk 3"));
}

#[test]
fn failing_counters_are_an_explicit_error_not_a_silent_gap() {
    let dir = tempfile::tempdir().unwrap();
    let targets = [
        Target::native("native", dir.path()),
        Target::mount("broken", dir.path())
            .with_counters(|| Err(std::io::Error::other("stats socket gone"))),
    ];
    let config = BenchConfig {
        workloads: vec![WorkloadId::Meta],
        ..tiny(1)
    };
    let report = run(&config, &targets, &mut NoProgress).unwrap();
    let r = &report.workloads[0].results[1];
    assert!(!r.ok);
    assert!(r.errors[0].contains("stats socket gone"), "{:?}", r.errors);
    assert!(report.table().contains("stats socket gone"));
}

#[test]
fn invalid_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tiny(1);
    assert!(run(&cfg, &[], &mut NoProgress).is_err());
    let twice = [
        Target::native("x", dir.path()),
        Target::native("x", dir.path()),
    ];
    assert!(run(&cfg, &twice, &mut NoProgress).is_err());
    let missing = [Target::native("x", dir.path().join("nope"))];
    assert!(run(&cfg, &missing, &mut NoProgress).is_err());
    let zero = BenchConfig { runs: 0, ..tiny(1) };
    assert!(run(&zero, &[Target::native("x", dir.path())], &mut NoProgress).is_err());
}

/// The watcher cost runs natively only: a mount target gets no runs and a
/// stated reason, never a silent gap or a failure.
#[test]
fn the_watcher_cost_runs_natively_and_says_why_not_on_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let targets = [
        Target::native("native", dir.path()),
        Target::mount("loop", dir.path()),
    ];
    let config = BenchConfig {
        workloads: vec![WorkloadId::Watcher],
        ..tiny(1)
    };
    let report = run(&config, &targets, &mut NoProgress).unwrap();
    let w = &report.workloads[0];
    let (native, mount) = (&w.results[0], &w.results[1]);
    assert!(native.ok && native.not_applicable.is_none(), "{native:?}");
    let metrics: Vec<&str> = native.figures.iter().map(|f| f.metric).collect();
    assert_eq!(metrics, ["events-off", "events-on", "on-off-ratio"]);
    assert!(native.figures.iter().all(|f| f.summary.is_some()));
    // The hub was really on: its watcher and what the subscriber read are noted.
    assert!(
        native.warnings.iter().any(|n| n.contains("watcher;")),
        "{:?}",
        native.warnings
    );
    assert!(mount
        .not_applicable
        .as_deref()
        .unwrap()
        .starts_with("native only"));
    assert!(mount.runs.is_empty() && mount.errors.is_empty());
    assert!(mount.figures.iter().all(|f| f.summary.is_none()));
    let json = report.to_json();
    assert!(json["workloads"][0]["results"][0]["not_applicable"].is_null());
    assert!(json["workloads"][0]["results"][1]["not_applicable"].is_string());
    assert!(report.table().contains("n/a = native only"));
    // The hub's control directory and the rounds' directories are gone.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// No filled npm cache and no registry (a closed local port): the npm workload is skipped on
/// every target with the reason, the others run, and nothing fails.
#[test]
fn npm_is_skipped_without_a_cache_or_a_registry() {
    let (a, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let targets = [Target::native("native", a.path())];
    let config = BenchConfig {
        workloads: vec![WorkloadId::Npm, WorkloadId::Meta],
        npm_cache: Some(cache.path().join("npm")),
        ..tiny(1)
    };
    let report = run(&config, &targets, &mut NoProgress).unwrap();
    let meta = &report.workloads[0];
    assert_eq!(meta.id, WorkloadId::Meta);
    assert!(meta.results[0].ok && !meta.results[0].runs.is_empty());
    let npm = &report.workloads[1];
    assert_eq!(npm.id, WorkloadId::Npm);
    let r = &npm.results[0];
    let reason = r.not_applicable.as_deref().unwrap_or_default();
    assert!(reason.starts_with("skipped: "), "{reason:?}");
    assert!(r.ok && r.errors.is_empty() && r.runs.is_empty(), "{r:?}");
    assert!(r.figures.iter().all(|f| f.summary.is_none()));
    assert!(report.table().contains(&format!("n/a = {reason}")));
    assert!(!cache
        .path()
        .join("npm")
        .join("crossfs-bench-filled")
        .exists());
    // Nothing was created on the target either.
    assert_eq!(std::fs::read_dir(a.path()).unwrap().count(), 0);
}
