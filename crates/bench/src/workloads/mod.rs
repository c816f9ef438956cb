//! The twelve workloads and the frame they run in.
//!
//! A workload is a `prepare(pool)` that writes its input (untimed, once) and a
//! `run(&mut Ctx)` that calls [`Ctx::measure`] once per figure, so that only the measured
//! operations sit between the two `Instant`s and between the two counter
//! snapshots. Each module also lists its [`MetricDef`]s (what it reports and
//! which 9P messages matter for each) and a title stating its sizes.
//!
//! A workload that needs something of the machine beyond its tools (npm's filled cache)
//! finds or makes it once, before its first run ([`setup`]); when it cannot, the workload
//! is skipped on every target and the report says why.
//!
//! Where input is prepared: each workload's `prepare` writes its input once
//! into a pool (see `pool.rs`), and the runner replicates the pool into every
//! run's directory before the run starts. Both happen through the native
//! directory behind a mount when the runner found one (the usual case: the
//! CLI serves a directory and mounts it), so the mount's client has never seen
//! the files before the timed part, as with a tree the host just checked out;
//! otherwise through the target itself. Timed operations always go through
//! [`Ctx::work`], the target's own path.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{BenchConfig, Sizes, WorkloadId};
use crate::error::WorkloadError;
use crate::progress::Progress;
use crate::stats::{counts_delta, Unit};
use crate::target::{MessageCounts, Target, TargetKind};

pub(crate) mod build;
pub(crate) mod cmd;
pub(crate) mod gentree;
pub(crate) mod git;
pub(crate) mod latency;
pub(crate) mod meta;
pub(crate) mod negative;
pub(crate) mod npm;
pub(crate) mod pool;
pub(crate) mod random;
pub(crate) mod rng;
pub(crate) mod seq;
pub(crate) mod symlink;
pub(crate) mod tree;
pub(crate) mod untar;
pub(crate) mod watcher;

/// One figure a workload reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MetricDef {
    /// Stable id, used in the JSON (`"stat-first"`).
    pub id: &'static str,
    /// What a reader sees in the table (`"stat, first pass"`).
    pub label: &'static str,
    pub unit: Unit,
    /// The 9P messages the table shows for this figure; the JSON keeps all.
    pub key_messages: &'static [&'static str],
}

/// One figure of one run, with everything needed to check it by hand.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    pub metric: &'static str,
    pub value: f64,
    pub unit: Unit,
    /// Wall time of the timed part only.
    pub elapsed_s: f64,
    /// Bytes moved or operations done in the timed part (1 for a duration).
    pub amount: u64,
    /// The timed part stopped at the time cap ([`Sizes::time_cap_ms`]) before
    /// doing all it was sized for: `value` is the rate over `amount`.
    pub capped: bool,
    /// 9P messages the timed part cost, per type; `None` when the target has no counters.
    pub messages: Option<MessageCounts>,
}

/// What a timed closure did, so [`Ctx::measure`] can turn time into the figure.
pub(crate) enum Work {
    /// Bytes moved, for MiB/s.
    Bytes(u64),
    /// Operations done, for any per-second unit.
    Ops(u64),
    /// One job whose duration is the figure (seconds).
    Once,
}

/// When a timed figure must stop: [`Sizes::time_cap_ms`] after it started.
/// Loops ask [`Deadline::passed`] before each operation (or block, or header)
/// and stop there; the figure is then the rate over what was done, and the
/// sample says it was capped. Shared by threads (random I/O).
pub(crate) struct Deadline {
    at: Instant,
    hit: AtomicBool,
}

impl Deadline {
    pub fn after(cap: Duration) -> Self {
        Self {
            at: Instant::now() + cap,
            hit: AtomicBool::new(false),
        }
    }

    /// True once the cap is reached; remembers that it was, for the sample.
    pub fn passed(&self) -> bool {
        if self.hit.load(Ordering::Relaxed) {
            return true;
        }
        let passed = Instant::now() >= self.at;
        if passed {
            self.hit.store(true, Ordering::Relaxed);
        }
        passed
    }

    fn was_hit(&self) -> bool {
        self.hit.load(Ordering::Relaxed)
    }
}

/// The frame of one (workload, target, run).
pub(crate) struct Ctx<'a> {
    pub target: &'a Target,
    /// This run's fresh directory as seen through the target, holding a
    /// replica of the workload's pool: the timed part uses it.
    pub work: PathBuf,
    /// The same directory in the tree input is prepared in: natively behind a mount when
    /// the runner found the native tree, else `work` itself. Never for timed reads or
    /// writes; for flushing the host's side of what the target wrote (untar's sync).
    pub prep: PathBuf,
    pub sizes: &'a Sizes,
    /// What the workload's [`setup`] found before its first run.
    pub setup: &'a Setup,
    pub samples: Vec<Sample>,
    /// Things worth knowing that did not stop the run (unexpected git status output...).
    pub warnings: Vec<String>,
}

impl Ctx<'_> {
    /// Time `f` and record its figure under `metric`, with the 9P messages it
    /// cost. Counter snapshots are taken outside the timed window because
    /// reading them may itself be a round trip to the server. `f` gets the
    /// figure's [`Deadline`]; a loop that checks it stops at the time cap.
    pub fn measure(
        &mut self,
        metric: &MetricDef,
        f: impl FnOnce(&Deadline) -> Result<Work, WorkloadError>,
    ) -> Result<(), WorkloadError> {
        let before = self.counters()?;
        let deadline = Deadline::after(Duration::from_millis(self.sizes.time_cap_ms));
        let start = Instant::now();
        let work = f(&deadline)?;
        let elapsed = start.elapsed().as_secs_f64();
        let after = self.counters()?;
        let messages = before.zip(after).map(|(b, a)| counts_delta(&b, &a));
        // A zero duration cannot happen with Instant on Linux, but a rate over
        // it would be infinite: clamp to one nanosecond rather than report inf.
        let secs = elapsed.max(1e-9);
        let (value, amount) = match (metric.unit, work) {
            (Unit::Seconds, _) => (elapsed, 1),
            (_, Work::Bytes(b)) => (b as f64 / (1u64 << 20) as f64 / secs, b),
            (_, Work::Ops(n)) => (n as f64 / secs, n),
            (_, Work::Once) => (1.0 / secs, 1),
        };
        self.samples.push(Sample {
            metric: metric.id,
            value,
            unit: metric.unit,
            elapsed_s: elapsed,
            amount,
            capped: deadline.was_hit(),
            messages,
        });
        Ok(())
    }

    /// Record a figure the workload computed itself from several timed parts
    /// (the watcher cost alternates two modes within one run and reports their
    /// ratio). No message counts: such a workload runs on native targets only.
    pub fn record(
        &mut self,
        metric: &MetricDef,
        value: f64,
        elapsed: Duration,
        amount: u64,
        capped: bool,
    ) {
        self.samples.push(Sample {
            metric: metric.id,
            value,
            unit: metric.unit,
            elapsed_s: elapsed.as_secs_f64(),
            amount,
            capped,
            messages: None,
        });
    }

    fn counters(&self) -> Result<Option<MessageCounts>, WorkloadError> {
        match &self.target.counters {
            Some(read) => read().map(Some).map_err(WorkloadError::Counters),
            None => Ok(None),
        }
    }

    /// Forget what the target's client cached of `file`'s data, so the next
    /// read crosses the boundary. Native targets keep their page cache: native
    /// is the page-cache limit the others are measured against.
    pub fn drop_client_cache(&self, file: &File) -> Result<(), WorkloadError> {
        if self.target.kind == TargetKind::Native {
            return Ok(());
        }
        // FUSE drops its own page cache for the inode; the server's page cache
        // on the other side stays warm, so the figure is the crossing itself.
        rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed)
            .map_err(|e| WorkloadError::io("posix_fadvise(DONTNEED) on the target", e.into()))
    }
}

/// The figures `id` reports, in table order.
pub(crate) fn metrics(id: WorkloadId) -> &'static [MetricDef] {
    match id {
        WorkloadId::SeqRead => seq::READ_METRICS,
        WorkloadId::SeqWrite => seq::WRITE_METRICS,
        WorkloadId::Random => random::METRICS,
        WorkloadId::Meta => meta::METRICS,
        WorkloadId::Negative => negative::METRICS,
        WorkloadId::Symlink => symlink::METRICS,
        WorkloadId::Build => build::METRICS,
        WorkloadId::Git => git::METRICS,
        WorkloadId::Watcher => watcher::METRICS,
        WorkloadId::Untar => untar::METRICS,
        WorkloadId::Tree => tree::METRICS,
        WorkloadId::Npm => npm::METRICS,
        WorkloadId::Latency => latency::METRICS,
    }
}

/// A one-line description of `id` at these sizes, for the table and the chart.
pub(crate) fn title(id: WorkloadId, sizes: &Sizes) -> String {
    match id {
        WorkloadId::SeqRead => seq::read_title(sizes),
        WorkloadId::SeqWrite => seq::write_title(sizes),
        WorkloadId::Random => random::title(sizes),
        WorkloadId::Meta => meta::title(sizes),
        WorkloadId::Negative => negative::title(sizes),
        WorkloadId::Symlink => symlink::title(sizes),
        WorkloadId::Build => build::title(sizes),
        WorkloadId::Git => git::title(sizes),
        WorkloadId::Watcher => watcher::title(sizes),
        WorkloadId::Untar => untar::title(sizes),
        WorkloadId::Tree => tree::title(sizes),
        WorkloadId::Npm => npm::title(sizes),
        WorkloadId::Latency => latency::title(sizes),
    }
}

/// Programs `id` shells out to; checked once before it runs anywhere.
pub(crate) fn required_tools(id: WorkloadId) -> &'static [&'static str] {
    match id {
        WorkloadId::Build => build::TOOLS,
        WorkloadId::Git => git::TOOLS,
        WorkloadId::Untar => untar::TOOLS,
        WorkloadId::Tree => tree::TOOLS,
        _ => &[],
    }
}

/// Why `id` does not run on a target of `kind`, or `None` when it does. The
/// report keeps such a (workload, target) with no runs and this reason.
pub(crate) fn not_applicable(id: WorkloadId, kind: TargetKind) -> Option<&'static str> {
    match (id, kind) {
        (WorkloadId::Watcher, TargetKind::Mount) => Some(watcher::NATIVE_ONLY),
        _ => None,
    }
}

/// What a workload's [`setup`] found, shared by all its runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Setup {
    /// The workload needs nothing beyond its tools.
    Nothing,
    /// npm's cache, filled for the committed lockfiles.
    Npm(npm::Cache),
}

/// Whether a workload can run at all here, decided once before its first run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Readiness {
    Ready(Setup),
    /// Not run on any target, for this reason ("skipped: ..."): not a failure. The report
    /// keeps every (workload, target) with no runs and this reason.
    Skip(String),
    /// Every run of the workload fails with this (a cache fill that failed).
    Fail(String),
}

/// Find or make what `id` needs of the machine (untimed, once per bench run). Only npm
/// needs anything: its cache, filled once from the registry (see `npm.rs`).
pub(crate) fn setup(
    id: WorkloadId,
    config: &BenchConfig,
    progress: &mut dyn Progress,
) -> Readiness {
    match id {
        WorkloadId::Npm => npm::setup(config, progress),
        _ => Readiness::Ready(Setup::Nothing),
    }
}

/// Whether `id` has input to prepare (a pool to replicate into each run).
pub(crate) fn has_input(id: WorkloadId) -> bool {
    !matches!(
        id,
        WorkloadId::SeqWrite | WorkloadId::Watcher | WorkloadId::Latency
    )
}

/// Write `id`'s input into `pool`, an existing empty directory. Untimed, once
/// per workload per prepare directory.
pub(crate) fn prepare(id: WorkloadId, pool: &Path, sizes: &Sizes) -> Result<(), WorkloadError> {
    match id {
        WorkloadId::SeqRead => seq::prepare_read(pool, sizes),
        WorkloadId::SeqWrite | WorkloadId::Watcher | WorkloadId::Latency => Ok(()),
        WorkloadId::Random => random::prepare(pool, sizes),
        WorkloadId::Meta => meta::prepare(pool, sizes),
        WorkloadId::Negative => negative::prepare(pool, sizes),
        WorkloadId::Symlink => symlink::prepare(pool, sizes),
        WorkloadId::Build => build::prepare(pool, sizes),
        WorkloadId::Git => git::prepare(pool, sizes),
        WorkloadId::Untar => untar::prepare(pool, sizes),
        WorkloadId::Tree => tree::prepare(pool, sizes),
        WorkloadId::Npm => npm::prepare(pool, sizes),
    }
}

/// Puts `id`'s replica in `dir` (this run's, in the prepare directory) in the same state
/// before every target's run, where earlier runs on other targets could have changed it
/// (untimed).
pub(crate) fn before_run(id: WorkloadId, dir: &Path) -> Result<(), WorkloadError> {
    match id {
        WorkloadId::Random => random::warm(dir),
        _ => Ok(()),
    }
}

/// Files of `id`'s pool (relative paths) that each run must own outright,
/// because the workload changes them in place in ways that must not leak.
pub(crate) fn copy_if(id: WorkloadId) -> fn(&Path) -> bool {
    match id {
        WorkloadId::Git => git::must_copy,
        _ => |_| false,
    }
}

/// Run `id` in `ctx`; its figures accumulate in `ctx.samples` even if it fails midway.
pub(crate) fn run(id: WorkloadId, ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    match id {
        WorkloadId::SeqRead => seq::run_read(ctx),
        WorkloadId::SeqWrite => seq::run_write(ctx),
        WorkloadId::Random => random::run(ctx),
        WorkloadId::Meta => meta::run(ctx),
        WorkloadId::Negative => negative::run(ctx),
        WorkloadId::Symlink => symlink::run(ctx),
        WorkloadId::Build => build::run(ctx),
        WorkloadId::Git => git::run(ctx),
        WorkloadId::Watcher => watcher::run(ctx),
        WorkloadId::Untar => untar::run(ctx),
        WorkloadId::Tree => tree::run(ctx),
        WorkloadId::Npm => match ctx.setup {
            Setup::Npm(cache) => npm::run(ctx, cache),
            Setup::Nothing => Err(WorkloadError::Prepare("no npm cache was set up".into())),
        },
        WorkloadId::Latency => latency::run(ctx),
    }
}

/// Create `n` files named by `name(i)` in `dir`, each holding `content`.
pub(crate) fn create_files(
    dir: &Path,
    n: usize,
    name: impl Fn(usize) -> String,
    content: &[u8],
) -> Result<Vec<PathBuf>, WorkloadError> {
    use crate::error::IoContext;
    std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    (0..n)
        .map(|i| {
            let path = dir.join(name(i));
            std::fs::write(&path, content).ctx(|| format!("writing {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

/// Thousands separators for titles: 10000 -> "10,000".
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "64 MiB" for titles.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn every_workload_declares_metrics_with_unique_ids() {
        for id in WorkloadId::ALL {
            let m = metrics(id);
            assert!(!m.is_empty(), "{id}");
            let mut ids: Vec<_> = m.iter().map(|d| d.id).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), m.len(), "{id}");
            assert!(!title(id, &Sizes::new(true, 1.0)).is_empty());
        }
    }
}
