//! The terminal table: one block per workload, one line per (metric, target).

use std::fmt::Write as _;

use crate::report::{Figure, Report, TargetResult, RATIO_CONVENTION};
use crate::stats::Unit;
use crate::workloads::{thousands, MetricDef};

impl Report {
    /// The report as a plain-text table for the terminal.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let width = self
            .targets
            .iter()
            .map(|t| t.name.len())
            .max()
            .unwrap_or(0)
            .max(6);
        let _ = writeln!(
            out,
            "crossfs bench: {} sizes, {} run{} per figure, shown as median [min .. max]",
            if self.config.quick { "quick" } else { "full" },
            self.config.runs,
            if self.config.runs == 1 { "" } else { "s" },
        );
        match &self.native_reference {
            Some(native) => {
                let _ = writeln!(out, "{RATIO_CONVENTION}; native = {native:?}");
            }
            None => {
                let _ = writeln!(out, "no native target: no ratios");
            }
        }
        let capped = self
            .workloads
            .iter()
            .flat_map(|w| &w.results)
            .flat_map(|r| &r.figures)
            .any(|f| f.capped_runs > 0);
        if capped {
            let _ = writeln!(
                out,
                "\"capped\": the figure stopped at the {:.1} s time cap; its rate is over the amount shown",
                self.sizes.time_cap_ms as f64 / 1000.0
            );
        }

        for w in &self.workloads {
            let _ = writeln!(out, "\n[{}] {}: {}", w.number, w.id, w.title);
            for (m, def) in w.metrics.iter().enumerate() {
                let direction = if def.unit.higher_is_better() {
                    "higher is better"
                } else {
                    "lower is better"
                };
                let _ = writeln!(out, "  {} ({}, {direction})", def.label, def.unit.label());
                for result in &w.results {
                    let line = figure_line(result, &result.figures[m], def);
                    let _ = writeln!(out, "    {:<width$}  {line}", result.target);
                }
            }
            // Once per workload, not on every line: which targets it skips and why.
            let mut reasons: Vec<&str> = Vec::new();
            for reason in w.results.iter().filter_map(|r| r.not_applicable.as_deref()) {
                if !reasons.contains(&reason) {
                    reasons.push(reason);
                }
            }
            for reason in reasons {
                let _ = writeln!(out, "  n/a = {reason}");
            }
            for result in &w.results {
                let failed = result.runs.iter().filter(|r| r.error.is_some()).count();
                let any_figure = result.figures.iter().any(|f| f.summary.is_some());
                // Errors of targets with no figure at all are already on their lines.
                if failed > 0 && any_figure {
                    for e in &result.errors {
                        let _ = writeln!(
                            out,
                            "    {}: {failed} of {} runs failed: {e}",
                            result.target,
                            result.runs.len()
                        );
                    }
                }
                for warning in &result.warnings {
                    let _ = writeln!(out, "    {}: note: {warning}", result.target);
                }
            }
            for note in crate::notes::notes(self, w) {
                let _ = writeln!(out, "  note: {}", note.heading);
                for figure in &note.figures {
                    let _ = writeln!(out, "    {figure}");
                }
            }
        }
        if self.targets.iter().any(|t| t.counters) {
            out.push('\n');
            out.push_str(REQUESTS_LEGEND);
        }

        self.memory_section(&mut out, width);
        for warning in &self.warnings {
            let _ = writeln!(out, "note: {warning}");
        }
        let _ = writeln!(out, "\ntotal time {:.1} s", self.elapsed_s);
        out
    }

    fn memory_section(&self, out: &mut String, width: usize) {
        if self.targets.iter().all(|t| t.memory.is_empty()) {
            return;
        }
        let _ = writeln!(
            out,
            "\nmemory (KiB)\n    {:<width$}  {:<8} {:>8} {:>14} {:>14}",
            "target", "role", "pid", "peak (VmHWM)", "now (VmRSS)"
        );
        for t in &self.targets {
            for m in &t.memory {
                let kib = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), thousands);
                let _ = write!(
                    out,
                    "    {:<width$}  {:<8} {:>8} {:>14} {:>14}",
                    t.name,
                    m.role,
                    m.pid,
                    kib(m.vm_hwm_kib),
                    kib(m.vm_rss_kib)
                );
                if let Some(e) = &m.error {
                    let _ = write!(out, "  ({e})");
                }
                out.push('\n');
            }
        }
    }
}

/// What the last column of a figure's line means, printed under the table.
const REQUESTS_LEGEND: &str = "\
last column: the requests the target's server received for the figure (median over
  runs): `all N` counts every 9P request; then those that matter to the workload, by
  type, with crossfs's compound requests that stand in for them (docs/protocol.md), so
  `all 64: Tread 63 Twalkread 1` is 64 requests, 63 reads and one walk, open and read in
  one; `-`: no counters (native, other file systems)
";

fn figure_line(result: &TargetResult, fig: &Figure, def: &MetricDef) -> String {
    if result.not_applicable.is_some() {
        return "n/a".to_owned();
    }
    let Some(s) = fig.summary else {
        return match result.errors.first() {
            Some(e) => format!("error: {e}"),
            None => "no figure".to_owned(),
        };
    };
    let ratio = fig
        .ratio_to_native
        .map_or_else(|| "-".to_owned(), format_ratio);
    let spread = format!("[{} .. {}]", format_value(s.min), format_value(s.max));
    let mut line = format!(
        "{:>10} {:<24} {:>7}   {}",
        format_value(s.median),
        spread,
        ratio,
        format_messages(fig, def.key_messages)
    );
    if fig.capped_runs > 0 {
        let amount = fig.amount.unwrap_or(0);
        let done = match def.unit {
            Unit::MibPerSec => format!("{} MiB", thousands(amount >> 20)),
            _ => format!("{} ops", thousands(amount)),
        };
        let runs = if s.runs > 1 {
            format!(" in {} of {} runs", fig.capped_runs, s.runs)
        } else {
            String::new()
        };
        let _ = write!(line, "   (capped{runs}: {done})");
    }
    line
}

/// The key messages of a figure: "Twalk 11,700 Tgetattr 300"; "-" without counters.
fn format_messages(fig: &Figure, key_messages: &[&str]) -> String {
    let Some(counts) = &fig.messages else {
        return "-".to_owned();
    };
    // Alternatives (Trenameat/Trename) are listed together; show those that
    // occurred, or the first at zero so the reader sees that none did.
    // The crossfs extension's compounds (docs/protocol.md) stand in for the plain
    // messages they replace, so those that occurred are shown too; and every figure
    // starts with all requests sent.
    let extension = crossfs_wire::Tmessage::TABLE
        .iter()
        .filter(|m| m.number >= crossfs_wire::EXTENSION_FIRST)
        .map(|m| m.name);
    let mut shown: Vec<String> = key_messages
        .iter()
        .copied()
        .chain(extension)
        .filter_map(|k| counts.get(k).map(|&n| format!("{k} {}", thousands(n))))
        .collect();
    if shown.is_empty() {
        shown.extend(key_messages.first().map(|k| format!("{k} 0")));
    }
    let total: u64 = counts
        .iter()
        .filter(|(k, _)| k.starts_with('T'))
        .map(|(_, &n)| n)
        .sum();
    format!("all {}: {}", thousands(total), shown.join(" "))
}

/// Four significant digits or so, whatever the magnitude.
pub(crate) fn format_value(x: f64) -> String {
    let a = x.abs();
    if a >= 10_000.0 {
        thousands(x.round() as u64)
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

pub(crate) fn format_ratio(r: f64) -> String {
    if r >= 0.01 {
        format!("{r:.2}x")
    } else {
        format!("{r:.4}x")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn values_and_ratios_format() {
        assert_eq!(format_value(12_345.6), "12,346");
        assert_eq!(format_value(950.04), "950.0");
        assert_eq!(format_value(4.206), "4.21");
        assert_eq!(format_value(0.0123), "0.012");
        assert_eq!(format_ratio(1.0), "1.00x");
        assert_eq!(format_ratio(0.005), "0.0050x");
    }

    #[test]
    fn table_shows_figures_ratios_messages_and_errors() {
        let t = sample_report().table();
        assert!(t.contains("quick sizes, 3 runs"), "{t}");
        assert!(t.contains("1.00 = native"), "{t}");
        assert!(t.contains("[5] negative"), "{t}");
        assert!(t.contains("(lookups/s, higher is better)"), "{t}");
        assert!(t.contains("(s, lower is better)"), "{t}");
        let crossfs_line = t
            .lines()
            .find(|l| l.trim_start().starts_with("crossfs") && l.contains("0.10x"))
            .unwrap_or_else(|| panic!("no crossfs ratio line in\n{t}"));
        assert!(crossfs_line.contains("Twalk 11,700"), "{crossfs_line}");
        assert!(crossfs_line.contains("[10.00 .. 30.00]"), "{crossfs_line}");
        let native_line = t.lines().find(|l| l.contains("200.0")).unwrap();
        assert!(native_line.contains("1.00x") && native_line.trim_end().ends_with('-'));
        assert!(t.contains("error: not run: gcc not found"), "{t}");
        // Probe-repeat had zero walks: shown as such, not hidden.
        assert!(t.contains("Twalk 0"), "{t}");
        // The last column is explained under the table, once.
        assert_eq!(t.matches("last column: the requests").count(), 1, "{t}");
        assert!(t.contains("`all N` counts every 9P request"), "{t}");
    }

    #[test]
    fn a_workload_that_does_not_apply_says_why_once() {
        let mut r = sample_report();
        let reason = "native only: the producer is the host";
        r.workloads[1].results[1].not_applicable = Some(reason.to_owned());
        let t = r.table();
        let build = t.split("[7] build").nth(1).unwrap();
        let crossfs_line = build
            .lines()
            .find(|l| l.trim_start().starts_with("crossfs"))
            .unwrap();
        assert_eq!(crossfs_line.split_whitespace().last(), Some("n/a"));
        assert_eq!(t.matches(reason).count(), 1, "{t}");
    }

    #[test]
    fn capped_figures_say_so_with_their_amount() {
        let mut r = sample_report();
        assert!(!r.table().contains("capped"));
        let fig = &mut r.workloads[0].results[1].figures[0];
        fig.capped_runs = 2;
        fig.amount = Some(2_400);
        let t = r.table();
        assert!(
            t.contains("time cap; its rate is over the amount shown"),
            "{t}"
        );
        let line = t.lines().find(|l| l.contains("0.10x")).unwrap();
        assert!(
            line.ends_with("(capped in 2 of 3 runs: 2,400 ops)"),
            "{line}"
        );
    }
}
