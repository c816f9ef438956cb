//! What the bench runs on. The CLI builds [`Target`]s (serving, mounting,
//! finding pids); this crate only uses them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::config::WorkloadId;

/// 9P message counts of a server, keyed by message name as the protocol spells
/// it (`"Twalk"`, `"Tread"`, `"Treadlink"`, ...). The closure in
/// [`Target::counters`] returns monotonic totals; the bench computes deltas.
pub type MessageCounts = BTreeMap<String, u64>;

/// Reads the current totals of the server behind a target.
pub type CounterFn = Box<dyn Fn() -> std::io::Result<MessageCounts> + Send + Sync>;

/// How a target's directory is reached, which decides cache handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// The local directory itself: caches are never dropped, so its figures are
    /// the page-cache limit every other target is compared with.
    Native,
    /// A mounted share: its client cache is dropped (fadvise DONTNEED) before cold reads.
    Mount,
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Native => "native",
            Self::Mount => "mount",
        })
    }
}

/// One place to run workloads: a directory, plus optional hooks.
pub struct Target {
    /// Shown in the report: "native", "crossfs", "crossfs --msize 65536 --max-pages 32", "sshfs"...
    pub name: String,
    /// Where workloads create their files. Each (workload, run) uses its own
    /// fresh subdirectory and removes it afterwards.
    pub dir: PathBuf,
    pub kind: TargetKind,
    /// 9P message counts of the server behind this target (monotonic totals).
    pub counters: Option<CounterFn>,
    /// Processes whose memory to report, e.g. `("server", pid)`, `("client", pid)`.
    pub pids: Vec<(String, u32)>,
    /// The target this one is a control of: the same setup with one fix taken away
    /// (`crossfs --cache never` of `crossfs`). Where it beats that target, the table
    /// says so under the figure.
    pub control_of: Option<String>,
    /// What explains a figure of this target that contradicts another (a control that
    /// beats its target), printed with the note.
    pub explanations: Vec<Explanation>,
}

/// Why one figure of a target is what it is, where it looks wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub workload: WorkloadId,
    /// The metric's id (`MetricDef::id`), e.g. `"read"`.
    pub metric: &'static str,
    pub why: String,
}

impl Target {
    /// A local directory, the reference every ratio is computed against.
    pub fn native(name: impl Into<String>, dir: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            dir: dir.into(),
            kind: TargetKind::Native,
            counters: None,
            pids: Vec::new(),
            control_of: None,
            explanations: Vec::new(),
        }
    }

    /// A mounted directory (crossfs, the kernel 9p client, sshfs, ...).
    pub fn mount(name: impl Into<String>, dir: impl Into<PathBuf>) -> Self {
        Self {
            kind: TargetKind::Mount,
            ..Self::native(name, dir)
        }
    }

    /// Report 9P message deltas using `counters`.
    pub fn with_counters(
        mut self,
        counters: impl Fn() -> std::io::Result<MessageCounts> + Send + Sync + 'static,
    ) -> Self {
        self.counters = Some(Box::new(counters));
        self
    }

    /// Marks this target as a control of the target named `of` (see
    /// [`Target::control_of`](field@Target::control_of)).
    pub fn control_of(mut self, of: impl Into<String>) -> Self {
        self.control_of = Some(of.into());
        self
    }

    /// Says why this target's `metric` of `workload` may beat the target it controls.
    pub fn explain(
        mut self,
        workload: WorkloadId,
        metric: &'static str,
        why: impl Into<String>,
    ) -> Self {
        self.explanations.push(Explanation {
            workload,
            metric,
            why: why.into(),
        });
        self
    }

    /// Report the memory of process `pid` under `role` ("server", "client").
    pub fn with_pid(mut self, role: impl Into<String>, pid: u32) -> Self {
        self.pids.push((role.into(), pid));
        self
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("kind", &self.kind)
            .field("counters", &self.counters.as_ref().map(|_| "<fn>"))
            .field("pids", &self.pids)
            .field("control_of", &self.control_of)
            .field("explanations", &self.explanations)
            .finish()
    }
}
