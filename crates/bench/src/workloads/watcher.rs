//! Workload 9: what watching the export costs the program that writes into it.
//!
//! Lesson 5 of the brief: change notification must never slow the producer
//! (VsChromium's watcher made creating and deleting 1,000 files ten times
//! slower on Windows). The producer is the host writing into the export
//! natively, so this workload runs on native targets only
//! ([`NATIVE_ONLY`]): the same loop (create 1,000 small files in a fresh
//! directory, then delete them) with nothing watching, and with an
//! [`EventHub`] (default config) watching while one subscriber drains it on
//! another thread. Rounds alternate off on on off ..., and each run reports
//! both rates and their ratio, which should stay close to 1.
//!
//! The loop runs in a directory beside the export, on the same file system:
//! the bench's own `crossfs serve` processes watch the export itself (with
//! inotify, see the CLI), and the "off" rounds must have nothing watching.

use std::fs;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossfs_events::{EventHub, HubConfig, Subscriber};

use super::{thousands, Ctx, MetricDef};
use crate::config::Sizes;
use crate::error::{IoContext, WorkloadError};
use crate::stats::Unit;

pub(crate) const METRICS: &[MetricDef] = &[
    MetricDef {
        id: "events-off",
        label: "create + delete, nothing watching",
        unit: Unit::FilesPerSec,
        key_messages: &[],
    },
    MetricDef {
        id: "events-on",
        label: "create + delete, EventHub watching, 1 subscriber draining",
        unit: Unit::FilesPerSec,
        key_messages: &[],
    },
    MetricDef {
        id: "on-off-ratio",
        label: "events on / events off in the same run (1.00 = no slowdown)",
        unit: Unit::Ratio,
        key_messages: &[],
    },
];

/// Why mounts are not targets of this workload (the report and JSON say it).
pub(crate) const NATIVE_ONLY: &str = "native only: the producer is the host writing into \
     the export natively, which a mount target does not do";

/// Bytes per long-poll read of the draining subscriber, as a client would ask for.
const DRAIN_BYTES: usize = 64 << 10;

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "watcher cost (native targets only): create then delete {} files, {} round{} \
         with nothing watching and as many with an EventHub on the export and 1 subscriber \
         draining, alternated",
        thousands(s.watcher_files as u64),
        s.watcher_rounds,
        if s.watcher_rounds == 1 { "" } else { "s" }
    )
}

/// Files done and time taken over the rounds of one mode.
#[derive(Default)]
struct Tally {
    files: u64,
    elapsed: Duration,
}

impl Tally {
    fn rate(&self) -> f64 {
        self.files as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What the hub did over the watched rounds of one run.
#[derive(Default)]
struct Seen {
    backend: String,
    read: u64,
    published: u64,
    rescans: u64,
    overflows: u64,
    sync_failures: Vec<String>,
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let n = ctx.sizes.watcher_files;
    let beside = Beside::create(&ctx.target.dir, &ctx.work)?;
    let export = beside.0.clone();
    let (mut off, mut on, mut seen) = (Tally::default(), Tally::default(), Seen::default());
    for round in 0..2 * ctx.sizes.watcher_rounds {
        // off on, on off, off on ...: each pair swaps the order of the one before,
        // so a drift over the run (page cache, journal, load) favours neither mode.
        let watched = (round % 2 == 1) != ((round / 2) % 2 == 1);
        let dir = export.join(format!("round{round}"));
        if watched {
            let watch = Watching::start(&export)?;
            let timed = create_delete(&dir, n);
            // Stop the hub even if the loop failed: no watcher outlives its round.
            watch.stop(&mut seen)?;
            add(&mut on, timed?);
        } else {
            add(&mut off, create_delete(&dir, n)?);
        }
    }
    for (metric, t) in [(&METRICS[0], &off), (&METRICS[1], &on)] {
        ctx.record(metric, t.rate(), t.elapsed, t.files, false);
    }
    // Both rates are positive: every round makes all its files (at least 20).
    ctx.record(
        &METRICS[2],
        on.rate() / off.rate(),
        off.elapsed + on.elapsed,
        on.files,
        false,
    );
    ctx.warnings.push(format!(
        "events on: {} watcher; the subscriber read {} events ({} published, {} rescans, \
         {} kernel queue overflows) over {} watched round{}",
        seen.backend,
        thousands(seen.read),
        thousands(seen.published),
        seen.rescans,
        seen.overflows,
        ctx.sizes.watcher_rounds,
        if ctx.sizes.watcher_rounds == 1 {
            ""
        } else {
            "s"
        }
    ));
    ctx.warnings.extend(seen.sync_failures);
    Ok(())
}

fn add(total: &mut Tally, (files, elapsed): (u64, Duration)) {
    total.files += files;
    total.elapsed += elapsed;
}

/// The producer: create `n` files of one line in the new directory `dir`, then
/// delete them; only the creates and deletes are timed. Not stopped at the
/// time cap: both modes must do the same work (the seed's 1,000 files), and
/// only native targets run this, so no slow mount can stretch it.
fn create_delete(dir: &Path, n: usize) -> Result<(u64, Duration), WorkloadError> {
    fs::create_dir(dir).ctx(|| format!("mkdir {}", dir.display()))?;
    let names: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("f{i:05}"))).collect();
    let start = Instant::now();
    for path in &names {
        fs::write(path, b"crossfs bench\n").ctx(|| format!("create {}", path.display()))?;
    }
    for path in &names {
        fs::remove_file(path).ctx(|| format!("unlink {}", path.display()))?;
    }
    let elapsed = start.elapsed();
    fs::remove_dir(dir).ctx(|| format!("rmdir {}", dir.display()))?;
    Ok((n as u64, elapsed))
}

/// An event hub on the export with one subscriber draining it on its own thread.
struct Watching {
    hub: EventHub,
    drain: JoinHandle<u64>,
}

impl Watching {
    /// Untimed: the hub's first snapshot of the export and arming the watcher.
    fn start(export: &Path) -> Result<Self, WorkloadError> {
        let hub = EventHub::start(export, HubConfig::default())
            .map_err(|e| WorkloadError::Events(e.to_string()))?;
        let sub = hub.subscribe();
        let drain = std::thread::Builder::new()
            .name("bench-subscriber".into())
            .spawn(move || drain(&sub))
            .ctx(|| "starting the subscriber thread".to_owned())?;
        Ok(Self { hub, drain })
    }

    /// Untimed: wait until the hub has seen everything the round did (a sync
    /// cookie), so none of its work spills into the next round; then stop it.
    fn stop(self, seen: &mut Seen) -> Result<(), WorkloadError> {
        if let Err(e) = self.hub.sync_cookie() {
            seen.sync_failures.push(format!("events on: {e}"));
        }
        let stats = self.hub.stats();
        seen.backend = format!("{:?}", self.hub.backend()).to_lowercase();
        seen.published += stats.published;
        seen.rescans += stats.rescans;
        seen.overflows += stats.overflows;
        // Dropping the hub closes the subscriber, which then reads what is queued and ends.
        drop(self.hub);
        seen.read += self
            .drain
            .join()
            .map_err(|_| WorkloadError::Events("the subscriber thread panicked".into()))?;
        Ok(())
    }
}

/// The consumer: long-poll reads until the hub is gone and nothing is queued.
/// Returns the events read (one JSON line each).
fn drain(sub: &Subscriber) -> u64 {
    let mut events = 0;
    loop {
        let chunk = sub.read_blocking(DRAIN_BYTES, Duration::from_millis(100));
        events += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        // Closed means nothing more will be published; pending covers events
        // published between a read that timed out and the close.
        if chunk.is_empty() && sub.is_closed() && sub.pending() == 0 {
            return events;
        }
    }
}

/// A fresh directory beside the export (same file system, watched by nobody else),
/// removed when dropped.
struct Beside(PathBuf);

impl Beside {
    fn create(export: &Path, work: &Path) -> Result<Self, WorkloadError> {
        let parent = export.parent().unwrap_or(export);
        let name = work.file_name().unwrap_or_default().to_string_lossy();
        let dir = parent.join(format!(".{name}-beside"));
        fs::create_dir(&dir).ctx(|| format!("mkdir {}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        // Best effort: a leftover is an empty directory, not a wrong figure.
        let _ = fs::remove_dir_all(&self.0);
    }
}
