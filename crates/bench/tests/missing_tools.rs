//! Without gcc, make or git the build and git workloads must say so in the
//! report, for every target and run, instead of vanishing; without npm the npm
//! workload is skipped on every target, with that reason. A test binary of its
//! own: it empties PATH, which is process-wide.

use crossfs_bench::{run, BenchConfig, NoProgress, Target, WorkloadId};

#[test]
fn missing_tools_are_explicit_errors() {
    let empty = tempfile::tempdir().unwrap();
    std::env::set_var("PATH", empty.path());
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let targets = [
        Target::native("native", dirs.0.path()),
        Target::native("other", dirs.1.path()),
    ];
    let config = BenchConfig {
        quick: true,
        runs: 2,
        scale: 0.05,
        workloads: vec![WorkloadId::Build, WorkloadId::Git, WorkloadId::Npm],
        // Never the user's cache: without npm it is not even looked at, but be sure.
        npm_cache: Some(empty.path().join("npm-cache")),
        ..BenchConfig::default()
    };
    let report = run(&config, &targets, &mut NoProgress).unwrap();
    for (w, tool) in report.workloads[..2].iter().zip(["make", "git"]) {
        for r in &w.results {
            assert!(!r.ok);
            assert_eq!(r.errors, vec![format!("not run: {tool} not found")]);
            assert_eq!(r.runs.len(), 2);
            assert!(r.figures.iter().all(|f| f.summary.is_none()));
        }
    }
    // A skip, not a failure: no runs, and the reason in place of "native only".
    for r in &report.workloads[2].results {
        assert!(r.ok && r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.not_applicable.as_deref(), Some("skipped: npm not found"));
        assert!(r.runs.is_empty());
    }
    let table = report.table();
    assert!(table.contains("n/a = skipped: npm not found"), "{table}");
    assert!(table.contains("error: not run: make not found"), "{table}");
    assert!(table.contains("error: not run: git not found"), "{table}");
    let json = report.to_json();
    assert_eq!(
        json["workloads"][1]["results"][0]["errors"][0],
        "not run: git not found"
    );
}
