//! Error types: [`BenchError`] stops a whole run; [`WorkloadError`] is one failed
//! (workload, target, run) cell, recorded in the report and never fatal.

use std::io;
use std::path::PathBuf;

/// Why [`crate::run`] (or writing a report) could not proceed at all.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("no targets to benchmark")]
    NoTargets,
    #[error("--runs must be at least 1")]
    NoRuns,
    #[error("scale must be a positive finite number, got {0}")]
    BadScale(f64),
    #[error("two targets are both named {0:?}: names identify targets in the report")]
    DuplicateTarget(String),
    #[error("target {name:?}: {dir} is not a directory")]
    TargetDir { name: String, dir: PathBuf },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("drawing the SVG chart: {0}")]
    Svg(String),
}

impl BenchError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// Why one workload produced no figure on one target in one run. Its
/// `Display` text is what the table and the JSON show, so it says what
/// happened in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A program the workload shells out to is not installed here.
    #[error("not run: {tool} not found")]
    ToolMissing { tool: String },
    /// The target's filesystem refuses something the workload needs
    /// (for example O_DIRECT): a property of the target, not a failure of the bench.
    #[error("not supported by this target: {what} ({source})")]
    Unsupported {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// A command ran but failed; `output` is the tail of what it printed.
    #[error("`{command}` failed ({status}): {output}")]
    Command {
        command: String,
        status: String,
        output: String,
    },
    /// The workload ran but saw something other than what it set up
    /// (a file of the wrong size, a header found in the wrong place).
    #[error("unexpected result: {0}")]
    Check(String),
    /// The workload's input could not be prepared (shared by all its runs).
    #[error("preparing input: {0}")]
    Prepare(String),
    /// The change-event hub could not start, or its subscriber failed.
    #[error("change events: {0}")]
    Events(String),
    #[error("reading the 9P message counters: {0}")]
    Counters(#[source] io::Error),
}

impl WorkloadError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// Attach a context string to an `io::Result`, the way every workload reports I/O failures.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, WorkloadError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, WorkloadError> {
        self.map_err(|e| WorkloadError::io(context(), e))
    }
}
