//! Workload 4: metadata operations on one large directory.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::{create_files, thousands, Ctx, Deadline, MetricDef, Work};
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

/// `op` on each of `items` in order until `deadline`; returns how many were done.
fn each_until<T>(
    items: &[T],
    deadline: &Deadline,
    mut op: impl FnMut(&T) -> Result<(), WorkloadError>,
) -> Result<usize, WorkloadError> {
    for (done, item) in items.iter().enumerate() {
        if deadline.passed() {
            return Ok(done);
        }
        op(item)?;
    }
    Ok(items.len())
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let n = ctx.sizes.meta_files;

    // Paths are built before timing so the loops measure only the syscalls.
    let dir = ctx.work.join("dir");
    let existing: Vec<PathBuf> = (0..n).map(|i| dir.join(name(i))).collect();
    let stat = |p: &PathBuf| {
        fs::metadata(p)
            .map(drop)
            .ctx(|| format!("stat {}", p.display()))
    };
    // At the time cap, the repeated stat revisits only what the first reached.
    let mut first = 0;
    ctx.measure(&METRICS[0], |deadline| {
        first = each_until(&existing, deadline, stat)?;
        Ok(Work::Ops(first as u64))
    })?;
    ctx.measure(&METRICS[1], |deadline| {
        each_until(&existing[..first], deadline, stat).map(|k| Work::Ops(k as u64))
    })?;
    ctx.measure(&METRICS[2], |deadline| {
        each_until(&existing, deadline, |p| {
            File::open(p)
                .map(drop)
                .ctx(|| format!("open {}", p.display()))
        })
        .map(|k| Work::Ops(k as u64))
    })?;
    // One listing of the whole directory: not capped, and checked complete.
    let mut listed = 0u64;
    ctx.measure(&METRICS[3], |_| {
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
    // At the time cap, rename and unlink work on the files that exist.
    let mut made = 0;
    ctx.measure(&METRICS[4], |deadline| {
        made = each_until(&created, deadline, |p| {
            File::create(p)
                .map(drop)
                .ctx(|| format!("create {}", p.display()))
        })?;
        Ok(Work::Ops(made as u64))
    })?;
    let pairs: Vec<(&PathBuf, &PathBuf)> = created.iter().zip(&renamed).take(made).collect();
    let mut moved = 0;
    ctx.measure(&METRICS[5], |deadline| {
        moved = each_until(&pairs, deadline, |(from, to)| {
            fs::rename(from, to).ctx(|| format!("rename {}", from.display()))
        })?;
        Ok(Work::Ops(moved as u64))
    })?;
    // Every file that exists, renamed or not; what the cap leaves, cleanup removes.
    let existing: Vec<&PathBuf> = renamed[..moved]
        .iter()
        .chain(&created[moved..made])
        .collect();
    ctx.measure(&METRICS[6], |deadline| {
        each_until(&existing, deadline, |p| {
            fs::remove_file(p).ctx(|| format!("unlink {}", p.display()))
        })
        .map(|k| Work::Ops(k as u64))
    })
}
