//! Workload 4: metadata operations on one large directory.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::{create_files, thousands, Ctx, MetricDef, Work};
use crate::config::Sizes;
use crate::error::{IoContext, WorkloadError};
use crate::stats::Unit;

pub(crate) const METRICS: &[MetricDef] = &[
    MetricDef {
        id: "stat-first",
        label: "stat, first pass",
        unit: Unit::OpsPerSec,
        key_messages: &["Twalk", "Tgetattr"],
    },
    MetricDef {
        id: "stat-repeat",
        label: "stat, repeated",
        unit: Unit::OpsPerSec,
        key_messages: &["Twalk", "Tgetattr"],
    },
    MetricDef {
        id: "open-close",
        label: "open + close",
        unit: Unit::OpsPerSec,
        key_messages: &["Tlopen", "Tclunk"],
    },
    MetricDef {
        id: "readdir",
        label: "readdir",
        unit: Unit::EntriesPerSec,
        key_messages: &["Treaddir"],
    },
    MetricDef {
        id: "create",
        label: "create",
        unit: Unit::OpsPerSec,
        key_messages: &["Tlcreate"],
    },
    MetricDef {
        id: "rename",
        label: "rename",
        unit: Unit::OpsPerSec,
        key_messages: &["Trenameat", "Trename"],
    },
    MetricDef {
        id: "unlink",
        label: "unlink",
        unit: Unit::OpsPerSec,
        key_messages: &["Tunlinkat", "Tremove"],
    },
];

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "metadata on a {}-entry directory: stat, open+close, readdir; then create, rename, unlink {} files",
        thousands(s.meta_files as u64),
        thousands(s.meta_creates as u64)
    )
}

fn name(i: usize) -> String {
    format!("file{i:06}.txt")
}

pub(crate) fn prepare(pool: &Path, sizes: &Sizes) -> Result<(), WorkloadError> {
    create_files(
        &pool.join("dir"),
        sizes.meta_files,
        name,
        b"crossfs bench\n",
    )
    .map(drop)
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let n = ctx.sizes.meta_files;

    // Paths are built before timing so the loops measure only the syscalls.
    let dir = ctx.work.join("dir");
    let existing: Vec<PathBuf> = (0..n).map(|i| dir.join(name(i))).collect();
    for metric in &METRICS[..2] {
        ctx.measure(metric, || {
            for p in &existing {
                fs::metadata(p).ctx(|| format!("stat {}", p.display()))?;
            }
            Ok(Work::Ops(n as u64))
        })?;
    }
    ctx.measure(&METRICS[2], || {
        for p in &existing {
            drop(File::open(p).ctx(|| format!("open {}", p.display()))?);
        }
        Ok(Work::Ops(n as u64))
    })?;
    let mut listed = 0u64;
    ctx.measure(&METRICS[3], || {
        for entry in fs::read_dir(&dir).ctx(|| format!("opendir {}", dir.display()))? {
            entry.ctx(|| format!("readdir {}", dir.display()))?;
            listed += 1;
        }
        Ok(Work::Ops(listed))
    })?;
    if listed != n as u64 {
        return Err(WorkloadError::Check(format!(
            "readdir listed {listed} entries, expected {n}"
        )));
    }

    let n = ctx.sizes.meta_creates;
    let new = ctx.work.join("new");
    fs::create_dir(&new).ctx(|| format!("mkdir {}", new.display()))?;
    let created: Vec<PathBuf> = (0..n).map(|i| new.join(format!("c{i:06}"))).collect();
    let renamed: Vec<PathBuf> = (0..n).map(|i| new.join(format!("r{i:06}"))).collect();
    ctx.measure(&METRICS[4], || {
        for p in &created {
            drop(File::create(p).ctx(|| format!("create {}", p.display()))?);
        }
        Ok(Work::Ops(n as u64))
    })?;
    ctx.measure(&METRICS[5], || {
        for (from, to) in created.iter().zip(&renamed) {
            fs::rename(from, to).ctx(|| format!("rename {}", from.display()))?;
        }
        Ok(Work::Ops(n as u64))
    })?;
    ctx.measure(&METRICS[6], || {
        for p in &renamed {
            fs::remove_file(p).ctx(|| format!("unlink {}", p.display()))?;
        }
        Ok(Work::Ops(n as u64))
    })
}
