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
const UNEXPLAINED: &str = "the bench has no explanation for this; rerun with more --runs to \
                           tell it from noise";

/// The notes to print under workload `w`'s figures, each a heading (what contradicts what,
/// and why) and the figures it is about, one per line. Figures with the same explanation
/// share one note.
pub(crate) fn notes(report: &Report, w: &WorkloadReport) -> Vec<Note> {
    let mut notes: Vec<Note> = Vec::new();
    let mut add =
        |heading: String, figure: String| match notes.iter_mut().find(|n| n.heading == heading) {
            Some(note) => note.figures.push(figure),
            None => notes.push(Note {
                heading,
                figures: vec![figure],
            }),
        };
    for (m, def) in w.metrics.iter().enumerate() {
        for (why, figure) in controls_ahead(report, w, m, def) {
            add(
                format!("a control ahead of the target it controls: {why}"),
                figure,
            );
        }
        if let Some((why, figure)) = above_native(report, w, m, def) {
            add(format!("above native: {why}"), figure);
        }
    }
    notes
}

/// A note under a workload: what is surprising and why, then the figures concerned.
#[derive(Debug, PartialEq)]
pub(crate) struct Note {
    pub heading: String,
    pub figures: Vec<String>,
}

/// Controls that beat the target they control on metric `m`, in every run, by
/// [`CONTROL_MARGIN`] or more at the median: each with its explanation.
fn controls_ahead(
    report: &Report,
    w: &WorkloadReport,
    m: usize,
    def: &MetricDef,
) -> Vec<(String, String)> {
    let summary = |name: &str| {
        w.results
            .iter()
            .find(|r| r.target == name && r.not_applicable.is_none())
            .and_then(|r| r.figures.get(m))
            .and_then(|f| f.summary)
    };
    let higher = def.unit.higher_is_better();
    // How many times better `a` is than `b`.
    let better = |a: f64, b: f64| if higher { a / b } else { b / a };
    let mut ahead = Vec::new();
    for target in &report.targets {
        let Some(of) = &target.control_of else {
            continue;
        };
        let (Some(control), Some(default)) = (summary(&target.name), summary(of)) else {
            continue;
        };
        // The control's worst run against the default's best, so that run-to-run noise
        // does not make a contradiction; a NaN (a zero figure) is none either.
        let (worst, best) = if higher {
            (control.min, default.max)
        } else {
            (control.max, default.min)
        };
        let median = better(control.median, default.median);
        if median.is_nan() || median < CONTROL_MARGIN || better(worst, best) <= 1.0 {
            continue;
        }
        let why = target
            .explanations
            .iter()
            .find(|e| e.workload == w.id && e.metric == def.id)
            .map_or(UNEXPLAINED, |e| e.why.as_str());
        ahead.push((
            why.to_owned(),
            format!(
                "{}: `{}` {} against `{of}` {} {}",
                def.label,
                target.name,
                format_value(control.median),
                format_value(default.median),
                def.unit.label()
            ),
        ));
    }
    ahead
}

/// The mounts above native on metric `m`, if any: the explanation and the figure.
fn above_native(
    report: &Report,
    w: &WorkloadReport,
    m: usize,
    def: &MetricDef,
) -> Option<(String, String)> {
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
    Some((
        why.to_owned(),
        format!("{}: {}", def.label, above.join(", ")),
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

    fn note_lines(t: &str) -> Vec<&str> {
        t.lines()
            .skip_while(|l| !l.starts_with("  note: "))
            .take_while(|l| l.starts_with("  note: ") || l.starts_with("    "))
            .collect()
    }

    #[test]
    fn a_control_ahead_of_its_target_gets_a_note_with_its_explanation() {
        let mut r = sample_report();
        // The negative workload: crossfs's figures are 10..30 lookups/s, native's
        // 100..300. Make the native row a "control" of crossfs: ahead in every run.
        r.targets[0].control_of = Some("crossfs".into());
        let t = r.table();
        assert_eq!(
            note_lines(&t),
            [
                format!("  note: a control ahead of the target it controls: {UNEXPLAINED}"),
                "    include probing, first pass: `native` 200.0 against `crossfs` 20.00 \
                 lookups/s"
                    .to_owned(),
                "    include probing, repeated passes: `native` 400.0 against `crossfs` 40.00 \
                 lookups/s"
                    .to_owned(),
            ],
            "{t}"
        );
        r.targets[0].explanations.push(crate::Explanation {
            workload: WorkloadId::Negative,
            metric: "probe-first",
            why: "it caches".into(),
        });
        let t = r.table();
        assert!(
            t.contains(
                "  note: a control ahead of the target it controls: it caches\n    include \
                 probing, first pass: `native` 200.0"
            ),
            "{t}"
        );
        // The target it controls does not beat it: no note the other way round.
        assert!(!t.contains("`crossfs` 20.00 against"), "{t}");
    }

    #[test]
    fn a_control_within_the_defaults_spread_is_noise_not_a_note() {
        let mut r = sample_report();
        r.targets[0].control_of = Some("crossfs".into());
        // Native's worst run (100) below crossfs's best (300): the spreads overlap.
        r.workloads[0].results[1].figures[0]
            .summary
            .as_mut()
            .unwrap()
            .max = 300.0;
        let t = r.table();
        assert!(!t.contains("first pass: `native`"), "{t}");
    }

    #[test]
    fn mounts_above_native_share_one_note_per_explanation() {
        let mut r = sample_report();
        assert!(!r.table().contains("above native"));
        r.workloads[0].results[1].figures[0].ratio_to_native = Some(2.97);
        r.workloads[0].results[1].figures[1].ratio_to_native = Some(1.5);
        let t = r.table();
        assert_eq!(
            note_lines(&t),
            [
                format!("  note: above native: {UNEXPLAINED}"),
                "    include probing, first pass: `crossfs` 2.97x".to_owned(),
                "    include probing, repeated passes: `crossfs` 1.50x".to_owned(),
            ],
            "{t}"
        );
    }
}
