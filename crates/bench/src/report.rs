//! The result of a run: every raw run, and per (workload, target, metric) the
//! median, min, max and ratio to native. Rendering lives in `table.rs` and
//! `svg.rs`; this file is the data and its JSON form.

use std::path::PathBuf;

use serde::Serialize;

use crate::config::{BenchConfig, Sizes, WorkloadId};
use crate::memory::ProcessMemory;
use crate::stats::{median_counts, ratio_to_native, Summary, Unit};
use crate::target::{Explanation, MessageCounts, TargetKind};
use crate::workloads::{self, MetricDef, Sample};

/// Bumped when the JSON changes shape, so scripts reading it can tell.
/// 2: `sizes.random_time_cap_ms` became `sizes.time_cap_ms` (every looping
/// figure is capped); samples have `capped`, figures `amount` and `capped_runs`.
/// 3: workload 9 (watcher, native targets only); results have
/// `not_applicable`; units `files/s` and `ratio`; sizes `watcher_*`; runs
/// have `prepare_s`.
/// 4: workload 12 (npm); `not_applicable` also holds why a workload ran on no target
/// here ("skipped: ..."); config `npm_cache`, `npm_registry`; sizes `npm_set`.
pub const SCHEMA_VERSION: u32 = 4;

/// Stated in the table header and the JSON, so no reader has to guess.
pub const RATIO_CONVENTION: &str =
    "x native = multiple of native's performance: 1.00 = native, higher is better \
     (rates: target/native; durations: native/target)";

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub ratio_convention: &'static str,
    pub config: BenchConfig,
    pub sizes: Sizes,
    /// The target ratios are computed against: the first target of kind native.
    pub native_reference: Option<String>,
    pub targets: Vec<TargetReport>,
    pub workloads: Vec<WorkloadReport>,
    /// Wall time of the whole run, setup included.
    pub elapsed_s: f64,
    /// Problems outside any one run (prepared input that could not be removed).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    pub name: String,
    pub kind: TargetKind,
    pub dir: PathBuf,
    /// Where workload input was prepared: the native directory found behind
    /// this mount, or `dir` itself (see the `workloads` module doc).
    pub prepared_in: PathBuf,
    /// Whether 9P message counts were available.
    pub counters: bool,
    /// Memory of the processes behind the target, read after the last workload.
    pub memory: Vec<ProcessMemory>,
    /// The target this one is a control of ([`crate::Target::control_of`]).
    pub control_of: Option<String>,
    /// Why some of its figures are what they are ([`crate::Target::explain`]).
    pub explanations: Vec<Explanation>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkloadReport {
    pub id: WorkloadId,
    /// 1..=8 as in the issue; 9 is the watcher cost (brief lesson 5).
    pub number: usize,
    pub title: String,
    pub metrics: Vec<MetricDef>,
    /// One entry per target, in target order, whether it ran or failed.
    pub results: Vec<TargetResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    pub target: String,
    /// True when every run completed without error (also when none ran
    /// because the workload does not apply: see `not_applicable`).
    pub ok: bool,
    /// Why this workload does not run on this target ("native only: ..."),
    /// `null` when it does. Such a result has no runs and no figures.
    pub not_applicable: Option<String>,
    /// Distinct errors of the failed runs ("not run: gcc not found", ...).
    pub errors: Vec<String>,
    /// Distinct warnings of all runs.
    pub warnings: Vec<String>,
    /// One per metric of the workload, in its order.
    pub figures: Vec<Figure>,
    /// Every run as measured.
    pub runs: Vec<RunRecord>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub metric: &'static str,
    pub unit: Unit,
    pub higher_is_better: bool,
    /// `None` when no run produced this figure.
    pub summary: Option<Summary>,
    pub ratio_to_native: Option<f64>,
    /// Median over runs of the 9P messages per type; `None` without counters.
    pub messages: Option<MessageCounts>,
    /// Median over runs of the bytes or operations the timed part did.
    pub amount: Option<u64>,
    /// Runs in which this figure stopped at the time cap (`sizes.time_cap_ms`):
    /// its rate is over `amount`, less than the sizes ask for.
    pub capped_runs: usize,
}

/// One (workload, target, run) as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// 0-based.
    pub run: usize,
    pub samples: Vec<Sample>,
    /// Set when the run stopped early; samples taken before that are kept.
    pub error: Option<String>,
    pub warnings: Vec<String>,
    /// Wall time including setup and cleanup.
    pub wall_s: f64,
    /// Of `wall_s`, the time spent preparing the workload's shared input
    /// (once per prepare directory, so in the first run to need it; else 0).
    /// Not counted against `sizes.repeat_budget_ms`.
    pub prepare_s: f64,
}

/// Everything measured, before summarising: `cells[w][t]` holds the runs of
/// workload `w` on target `t`.
pub(crate) struct RawResults {
    pub workloads: Vec<WorkloadId>,
    /// Per workload: why it ran on no target here ("skipped: npm not found"), or `None`.
    pub skipped: Vec<Option<String>>,
    pub cells: Vec<Vec<Vec<RunRecord>>>,
}

impl Report {
    pub(crate) fn assemble(
        config: &BenchConfig,
        targets: Vec<TargetReport>,
        raw: RawResults,
        elapsed_s: f64,
    ) -> Self {
        let sizes = config.sizes();
        let native = targets.iter().position(|t| t.kind == TargetKind::Native);
        let workloads = raw
            .workloads
            .iter()
            .zip(raw.cells)
            .zip(raw.skipped)
            .map(|((&id, per_target), skipped)| {
                let defs = workloads::metrics(id);
                let mut results: Vec<TargetResult> = targets
                    .iter()
                    .zip(per_target)
                    .map(|(t, runs)| {
                        let mut result = summarise(&t.name, defs, runs);
                        result.not_applicable = workloads::not_applicable(id, t.kind)
                            .map(str::to_owned)
                            .or_else(|| skipped.clone());
                        result
                    })
                    .collect();
                if let Some(n) = native {
                    let reference: Vec<Option<f64>> = results[n]
                        .figures
                        .iter()
                        .map(|f| f.summary.map(|s| s.median))
                        .collect();
                    for result in &mut results {
                        for (fig, native_median) in result.figures.iter_mut().zip(&reference) {
                            fig.ratio_to_native = fig
                                .summary
                                .zip(*native_median)
                                .and_then(|(s, n)| ratio_to_native(s.median, n, fig.unit));
                        }
                    }
                }
                WorkloadReport {
                    id,
                    number: id.number(),
                    title: workloads::title(id, &sizes),
                    metrics: defs.to_vec(),
                    results,
                }
            })
            .collect();
        Self {
            schema_version: SCHEMA_VERSION,
            ratio_convention: RATIO_CONVENTION,
            config: config.clone(),
            sizes,
            native_reference: native.map(|n| targets[n].name.clone()),
            targets,
            workloads,
            elapsed_s,
            warnings: Vec::new(),
        }
    }

    /// The whole report, raw runs included, as JSON (`--json FILE`).
    pub fn to_json(&self) -> serde_json::Value {
        // Every field is a string, number, bool, list or string-keyed map, so
        // serialisation cannot fail; NaN cannot occur (figures are finite) and
        // would become null anyway.
        serde_json::to_value(self).expect("report serialises to JSON")
    }
}

fn distinct(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

fn summarise(target: &str, defs: &[MetricDef], runs: Vec<RunRecord>) -> TargetResult {
    let figures = defs
        .iter()
        .map(|def| {
            let samples: Vec<&Sample> = runs
                .iter()
                .flat_map(|r| r.samples.iter().filter(|s| s.metric == def.id))
                .collect();
            let values: Vec<f64> = samples.iter().map(|s| s.value).collect();
            let amounts: Vec<f64> = samples.iter().map(|s| s.amount as f64).collect();
            let counts: Option<Vec<&MessageCounts>> =
                samples.iter().map(|s| s.messages.as_ref()).collect();
            Figure {
                metric: def.id,
                unit: def.unit,
                higher_is_better: def.unit.higher_is_better(),
                summary: Summary::of(&values),
                ratio_to_native: None,
                messages: counts.filter(|c| !c.is_empty()).map(|c| median_counts(&c)),
                amount: Summary::of(&amounts).map(|a| a.median.round() as u64),
                capped_runs: samples.iter().filter(|s| s.capped).count(),
            }
        })
        .collect();
    TargetResult {
        target: target.to_owned(),
        ok: runs.iter().all(|r| r.error.is_none()),
        not_applicable: None,
        errors: distinct(runs.iter().filter_map(|r| r.error.clone())),
        warnings: distinct(runs.iter().flat_map(|r| r.warnings.iter().cloned())),
        figures,
        runs,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::workloads::Sample;

    fn sample(metric: &'static str, unit: Unit, value: f64, walks: Option<u64>) -> Sample {
        Sample {
            metric,
            value,
            unit,
            elapsed_s: 1.0,
            amount: 1,
            capped: false,
            messages: walks.map(|w| [("Twalk".to_owned(), w)].into()),
        }
    }

    fn target(name: &str, kind: TargetKind) -> TargetReport {
        TargetReport {
            name: name.into(),
            kind,
            dir: PathBuf::from("/x"),
            prepared_in: PathBuf::from("/x"),
            counters: kind == TargetKind::Mount,
            memory: vec![],
            control_of: None,
            explanations: vec![],
        }
    }

    /// A small report by hand: native and crossfs on the build and negative
    /// workloads, with one failed run and one target that never ran.
    pub(crate) fn sample_report() -> Report {
        let config = BenchConfig {
            quick: true,
            runs: 3,
            workloads: vec![WorkloadId::Negative, WorkloadId::Build],
            ..BenchConfig::default()
        };
        let neg = |v: [f64; 3], walks: Option<u64>| -> Vec<RunRecord> {
            v.iter()
                .enumerate()
                .map(|(run, &x)| RunRecord {
                    run,
                    samples: vec![
                        sample("probe-first", Unit::LookupsPerSec, x, walks),
                        sample(
                            "probe-repeat",
                            Unit::LookupsPerSec,
                            x * 2.0,
                            walks.map(|_| 0),
                        ),
                    ],
                    error: None,
                    warnings: vec![],
                    wall_s: 1.0,
                    prepare_s: 0.0,
                })
                .collect()
        };
        let build = |v: [Option<f64>; 3]| -> Vec<RunRecord> {
            v.iter()
                .enumerate()
                .map(|(run, x)| RunRecord {
                    run,
                    samples: x
                        .map(|x| sample("build", Unit::Seconds, x, None))
                        .into_iter()
                        .collect(),
                    error: x.is_none().then(|| "not run: gcc not found".to_owned()),
                    warnings: vec![],
                    wall_s: 1.0,
                    prepare_s: 0.0,
                })
                .collect()
        };
        let raw = RawResults {
            workloads: vec![WorkloadId::Negative, WorkloadId::Build],
            skipped: vec![None, None],
            cells: vec![
                vec![
                    neg([100.0, 300.0, 200.0], None),
                    neg([20.0, 10.0, 30.0], Some(11_700)),
                ],
                vec![
                    build([Some(10.0), Some(12.0), Some(11.0)]),
                    build([None, None, None]),
                ],
            ],
        };
        Report::assemble(
            &config,
            vec![
                target("native", TargetKind::Native),
                target("crossfs", TargetKind::Mount),
            ],
            raw,
            42.0,
        )
    }

    #[test]
    fn figures_and_ratios() {
        let r = sample_report();
        assert_eq!(r.native_reference.as_deref(), Some("native"));
        let neg = &r.workloads[0];
        assert_eq!(neg.id, WorkloadId::Negative);
        let native = &neg.results[0].figures[0];
        let s = native.summary.unwrap();
        assert_eq!((s.median, s.min, s.max), (200.0, 100.0, 300.0));
        assert_eq!(native.ratio_to_native, Some(1.0));
        let crossfs = &neg.results[1].figures[0];
        assert_eq!(crossfs.ratio_to_native, Some(0.1));
        assert_eq!(crossfs.messages.as_ref().unwrap()["Twalk"], 11_700);
        assert!(native.messages.is_none());
        // Build: seconds; crossfs never ran, so it has an explicit error and no figure.
        let build = &r.workloads[1];
        assert!(build.results[0].ok);
        assert!(!build.results[1].ok);
        assert_eq!(build.results[1].errors, vec!["not run: gcc not found"]);
        assert!(build.results[1].figures[0].summary.is_none());
        assert_eq!(build.results[1].figures[0].ratio_to_native, None);
    }

    #[test]
    fn json_shape() {
        let j = sample_report().to_json();
        assert_eq!(j["schema_version"], 4);
        assert_eq!(j["config"]["runs"], 3);
        assert_eq!(j["config"]["workloads"][0], "negative");
        assert_eq!(j["targets"][1]["kind"], "mount");
        let w = &j["workloads"][0];
        assert_eq!(w["id"], "negative");
        assert_eq!(w["number"], 5);
        assert_eq!(w["metrics"][0]["unit"], "lookups/s");
        let res = &w["results"][1];
        assert_eq!(res["target"], "crossfs");
        assert_eq!(res["figures"][0]["summary"]["median"], 20.0);
        assert_eq!(res["figures"][0]["higher_is_better"], true);
        assert_eq!(res["runs"].as_array().unwrap().len(), 3);
        assert_eq!(res["runs"][0]["samples"][0]["messages"]["Twalk"], 11_700);
        let b = &j["workloads"][1]["results"][1];
        assert_eq!(b["ok"], false);
        assert_eq!(b["errors"][0], "not run: gcc not found");
        assert!(b["figures"][0]["summary"].is_null());
        assert_eq!(j["workloads"][1]["metrics"][0]["unit"], "s");
    }
}
