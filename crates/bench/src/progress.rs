//! Telling the user where a long run is: a bar on a terminal, plain lines
//! otherwise (logs, CI), nothing in tests.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::config::WorkloadId;

/// One (workload, target, run) cell of the run.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// 0-based position among `total` steps.
    pub index: usize,
    pub total: usize,
    pub workload: WorkloadId,
    pub target: &'a str,
    /// 0-based run number, of `runs`.
    pub run: usize,
    pub runs: usize,
}

/// Receives the run's progress. Every method has a do-nothing default.
pub trait Progress {
    fn begin(&mut self, _total_steps: usize) {}
    fn step_started(&mut self, _step: &Step<'_>) {}
    /// `outcome` is the step's wall time (setup included) or its error text.
    fn step_finished(&mut self, _step: &Step<'_>, _outcome: Result<Duration, &str>) {}
    /// Something worth a line that is not a step (preparing templates, probing targets).
    fn note(&mut self, _message: &str) {}
    fn end(&mut self) {}
}

/// Reports nothing: for tests and for callers that print their own.
pub struct NoProgress;

impl Progress for NoProgress {}

/// A progress bar on stderr when it is a terminal, one plain line per
/// finished step when it is not.
pub struct TerminalProgress {
    tty: bool,
    /// Made in `begin`, when the length is known; notes before that are plain lines.
    bar: Option<ProgressBar>,
}

impl TerminalProgress {
    /// Picks the bar or plain lines by whether stderr is a terminal.
    pub fn new() -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            bar: None,
        }
    }

    /// Plain lines whatever stderr is.
    pub fn plain() -> Self {
        Self {
            tty: false,
            bar: None,
        }
    }

    fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => {
                // Progress must never fail the bench: a closed stderr just loses lines.
                let _ = writeln!(std::io::stderr(), "{text}");
            }
        }
    }
}

impl Default for TerminalProgress {
    fn default() -> Self {
        Self::new()
    }
}

fn describe(step: &Step<'_>) -> String {
    format!(
        "{} on {} (run {}/{})",
        step.workload,
        step.target,
        step.run + 1,
        step.runs
    )
}

impl Progress for TerminalProgress {
    fn begin(&mut self, total_steps: usize) {
        if !self.tty {
            return;
        }
        let bar =
            ProgressBar::with_draw_target(Some(total_steps as u64), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        // Steps can take many seconds (a full build): keep the clock moving.
        bar.enable_steady_tick(Duration::from_millis(500));
        self.bar = Some(bar);
    }

    fn step_started(&mut self, step: &Step<'_>) {
        if let Some(bar) = &self.bar {
            bar.set_message(describe(step));
        }
    }

    fn step_finished(&mut self, step: &Step<'_>, outcome: Result<Duration, &str>) {
        match (&self.bar, outcome) {
            (Some(bar), Ok(_)) => bar.inc(1),
            (Some(bar), Err(e)) => {
                bar.println(format!("{}: {e}", describe(step)));
                bar.inc(1);
            }
            (None, outcome) => {
                let result = match outcome {
                    Ok(d) => format!("{:.2} s", d.as_secs_f64()),
                    Err(e) => format!("error: {e}"),
                };
                self.line(&format!(
                    "[{}/{}] {}: {result}",
                    step.index + 1,
                    step.total,
                    describe(step)
                ));
            }
        }
    }

    fn note(&mut self, message: &str) {
        self.line(message);
    }

    fn end(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
