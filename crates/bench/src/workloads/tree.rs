//! Workload 11: walk a generated source tree with `find`, then read all of it with
//! `grep -r`, each first (names and data never seen by the target's client) and repeated.
//!
//! The tree ([`gentree`](super::gentree)) is prepared once in the pool and hard-linked
//! into each run. `find . -name '*.c'` is a listing of every directory (GNU find takes
//! file types from the listing and stats nothing else); `grep -r -l` opens and reads
//! every file. Both print what they found and the run checks it against the generator's
//! counts, so a target that loses a name or a byte fails instead of looking fast.

use std::path::Path;
use std::process::Command;

use super::gentree::{self, Shape};
use super::{cmd, thousands, Ctx, MetricDef, Work};
use crate::config::Sizes;
use crate::error::WorkloadError;
use crate::stats::Unit;

pub(crate) const TOOLS: &[&str] = &["find", "grep"];

pub(crate) const METRICS: &[MetricDef] = &[
    MetricDef {
        id: "find-first",
        label: "find -name '*.c', first",
        unit: Unit::Seconds,
        key_messages: &["Treaddir", "Twalk", "Tgetattr"],
    },
    MetricDef {
        id: "find-repeat",
        label: "find -name '*.c', repeated",
        unit: Unit::Seconds,
        key_messages: &["Treaddir", "Twalk", "Tgetattr"],
    },
    MetricDef {
        id: "grep-first",
        label: "grep -r of every file, first",
        unit: Unit::Seconds,
        key_messages: &["Tlopen", "Tread", "Twalk"],
    },
    MetricDef {
        id: "grep-repeat",
        label: "grep -r of every file, repeated",
        unit: Unit::Seconds,
        key_messages: &["Tlopen", "Tread", "Twalk"],
    },
];

const TOP: &str = "tree";
const SEED: u64 = 11;

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "find, then grep -r, over a {}-entry source tree (about 20 entries a directory)",
        thousands(s.tree_entries as u64)
    )
}

pub(crate) fn prepare(pool: &Path, sizes: &Sizes) -> Result<(), WorkloadError> {
    gentree::generate(Some(&pool.join(TOP)), sizes.tree_entries, SEED).map(|_| ())
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let top = ctx.work.join(TOP);
    // What the generator made, recomputed without writing: the answers to check.
    let want: Shape = gentree::generate(None, ctx.sizes.tree_entries, SEED)?;
    let count = |out: &[u8]| out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
    for metric in &METRICS[..2] {
        let mut lines = 0;
        ctx.measure(metric, |_| {
            let out = cmd::run(
                Command::new("find").args([".", "-name", "*.c", "-type", "f"]),
                &top,
            )?;
            lines = count(&out.stdout);
            Ok(Work::Once)
        })?;
        check(metric, "*.c files", lines, want.c_files)?;
    }
    for metric in &METRICS[2..] {
        let mut lines = 0;
        ctx.measure(metric, |_| {
            let out = cmd::run(
                Command::new("grep").args(["-r", "-l", gentree::NEEDLE, "."]),
                &top,
            )?;
            lines = count(&out.stdout);
            Ok(Work::Once)
        })?;
        check(metric, "files with the needle", lines, want.needle_files)?;
    }
    Ok(())
}

fn check(metric: &MetricDef, what: &str, found: usize, want: usize) -> Result<(), WorkloadError> {
    if found == want {
        return Ok(());
    }
    Err(WorkloadError::Check(format!(
        "{}: found {found} {what}, the tree has {want}",
        metric.id
    )))
}
