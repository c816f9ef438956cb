//! Figures that contradict another, each printed with what explains it, so that no
//! surprising ratio is left for the reader to puzzle out: a control (a setup with one fix
//! taken away) beating the setup it controls, and a mount above native.

use crate::config::WorkloadId;
use crate::report::{Report, WorkloadReport};
use crate::table::format_value;
use crate::workloads::MetricDef;

/// How much better than its target a control must be before it is called out: figures
/// of one setup vary by about this much from run to run here (docs/bench.md's spreads).
const CONTROL_MARGIN: f64 = 1.2;

/// How far above native a mount must be before it is called out (ratios near 1.00 are
/// noise).
const ABOVE_NATIVE: f64 = 1.1;

/// What the bench cannot explain: said rather than left out.
const UNEXPLAINED: &str = "not explained by the bench: compare the spreads [min .. max] \
                           and the requests before drawing a conclusion";

/// The notes to print under workload `w`'s figures.
pub(crate) fn notes(report: &Report, w: &WorkloadReport) -> Vec<String> {
    let mut notes = Vec::new();
    for (m, def) in w.metrics.iter().enumerate() {
        notes.extend(controls_ahead(report, w, m, def));
        notes.extend(above_native(report, w, m, def));
    }
    notes
}

/// Controls that beat the target they control on metric `m`.
fn controls_ahead(report: &Report, w: &WorkloadReport, m: usize, def: &MetricDef) -> Vec<String> {
    let median = |name: &str| {
        w.results
            .iter()
            .find(|r| r.target == name && r.not_applicable.is_none())
            .and_then(|r| r.figures.get(m))
            .and_then(|f| f.summary)
            .map(|s| s.median)
    };
    let mut notes = Vec::new();
    for target in &report.targets {
        let Some(of) = &target.control_of else {
            continue;
        };
        let (Some(control), Some(default)) = (median(&target.name), median(of)) else {
            continue;
        };
        let better = if def.unit.higher_is_better() {
            control / default
        } else {
            default / control
        };
        // A NaN (a zero figure) is no contradiction either.
        if better.is_nan() || better < CONTROL_MARGIN {
            continue;
        }
        let why = target
            .explanations
            .iter()
            .find(|e| e.workload == w.id && e.metric == def.id)
            .map_or(UNEXPLAINED, |e| e.why.as_str());
        notes.push(format!(
            "{}: `{}` beats `{of}` ({} against {} {}): {why}",
            def.label,
            target.name,
            format_value(control),
            format_value(default),
            def.unit.label()
        ));
    }
    notes
}

/// One note for the mounts above native on metric `m`, if any.
fn above_native(report: &Report, w: &WorkloadReport, m: usize, def: &MetricDef) -> Option<String> {
    let native = report.native_reference.as_deref()?;
    let above: Vec<String> = w
        .results
        .iter()
        .filter(|r| r.target != native && r.not_applicable.is_none())
        .filter_map(|r| {
            let ratio = r.figures.get(m)?.ratio_to_native?;
            (ratio > ABOVE_NATIVE).then(|| format!("`{}` {ratio:.2}x", r.target))
        })
        .collect();
    if above.is_empty() {
        return None;
    }
    let why = above_native_reason(w.id, def.id).unwrap_or(UNEXPLAINED);
    Some(format!(
        "{}: {} above native: {why}",
        def.label,
        above.join(", ")
    ))
}

/// What makes a figure of the bench's own design come out above native.
fn above_native_reason(workload: WorkloadId, metric: &str) -> Option<&'static str> {
    match (workload, metric) {
        (WorkloadId::Random, "read-1t" | "read-8t" | "write-1t" | "write-8t") => Some(
            "native's O_DIRECT I/O goes to the host's disk, while a mount's O_DIRECT only \
             keeps the guest's page cache out: its server reads and writes through the \
             host's page cache (the file is read into it before each run), so this ratio \
             is the host's memory against its disk, not a mount faster than native",
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn a_control_ahead_of_its_target_gets_a_note_with_its_explanation() {
        let mut r = sample_report();
        // The negative workload: crossfs's probe-first median is 20 lookups/s. Make the
        // native row a "control" of crossfs, 200 against 20: far ahead.
        r.targets[0].control_of = Some("crossfs".into());
        let t = r.table();
        assert!(
            t.contains(&format!(
                "note: include probing, first pass: `native` beats `crossfs` (200.0 against \
                 20.00 lookups/s): {UNEXPLAINED}"
            )),
            "{t}"
        );
        r.targets[0].explanations.push(crate::Explanation {
            workload: WorkloadId::Negative,
            metric: "probe-first",
            why: "it caches".into(),
        });
        let t = r.table();
        assert!(
            t.contains("(200.0 against 20.00 lookups/s): it caches"),
            "{t}"
        );
        // The target it controls does not beat it: no note the other way round.
        assert!(!t.contains("`crossfs` beats"), "{t}");
    }

    #[test]
    fn a_mount_above_native_gets_one_note_per_figure() {
        let mut r = sample_report();
        assert!(!r.table().contains("above native"));
        r.workloads[0].results[1].figures[0].ratio_to_native = Some(2.97);
        let t = r.table();
        let notes: Vec<&str> = t.lines().filter(|l| l.contains("above native")).collect();
        assert_eq!(
            notes,
            [format!(
                "  note: include probing, first pass: `crossfs` 2.97x above native: \
                 {UNEXPLAINED}"
            )]
        );
    }
}
