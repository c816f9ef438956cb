//! Workload 6: stat through file symlinks and through symlinked directories.
//!
//! Layout (relative links, as source trees use):
//!   real/file_N            the files
//!   links/link_N  -> ../real/file_N
//!   dirs/dir_K    -> ../real            then dirs/dir_K/file_N is stat'ed
//! Every stat follows one symlink; with a symlink cache the repeated passes
//! cost no Treadlink at all.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::{create_files, thousands, Ctx, MetricDef, Work};
use crate::config::Sizes;
use crate::error::{IoContext, WorkloadError};
use crate::stats::Unit;

pub(crate) const METRICS: &[MetricDef] = &[
    MetricDef {
        id: "stat-first",
        label: "stat through symlinks, first pass",
        unit: Unit::OpsPerSec,
        key_messages: &["Treadlink", "Twalk"],
    },
    MetricDef {
        id: "stat-repeat",
        label: "stat through symlinks, repeated passes",
        unit: Unit::OpsPerSec,
        key_messages: &["Treadlink", "Twalk"],
    },
];

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "symlinks: {} file links + {} directory links x {} files, {} passes ({} stats a pass)",
        thousands(s.symlink_files as u64),
        s.symlink_dirs,
        s.symlink_files_per_dir,
        s.symlink_passes,
        thousands((s.symlink_files + s.symlink_dirs * s.symlink_files_per_dir) as u64)
    )
}

fn file_name(i: usize) -> String {
    format!("file_{i:05}")
}

pub(crate) fn prepare(pool: &Path, s: &Sizes) -> Result<(), WorkloadError> {
    let files = s.symlink_files.max(s.symlink_files_per_dir);
    create_files(&pool.join("real"), files, file_name, b"target\n")?;
    for (sub, n) in [("links", s.symlink_files), ("dirs", s.symlink_dirs)] {
        let dir = pool.join(sub);
        fs::create_dir(&dir).ctx(|| format!("mkdir {}", dir.display()))?;
        for i in 0..n {
            let (link, to) = if sub == "links" {
                (
                    dir.join(format!("link_{i:05}")),
                    format!("../real/{}", file_name(i)),
                )
            } else {
                (dir.join(format!("dir_{i:03}")), "../real".to_owned())
            };
            symlink(&to, &link).ctx(|| format!("symlink {}", link.display()))?;
        }
    }
    Ok(())
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let s = ctx.sizes;

    let mut paths: Vec<PathBuf> = (0..s.symlink_files)
        .map(|i| ctx.work.join(format!("links/link_{i:05}")))
        .collect();
    for k in 0..s.symlink_dirs {
        let dir = ctx.work.join(format!("dirs/dir_{k:03}"));
        paths.extend((0..s.symlink_files_per_dir).map(|i| dir.join(file_name(i))));
    }
    let pass = || -> Result<u64, WorkloadError> {
        for p in &paths {
            let m = fs::metadata(p).ctx(|| format!("stat {}", p.display()))?;
            if !m.is_file() {
                return Err(WorkloadError::Check(format!(
                    "{} does not resolve to a file",
                    p.display()
                )));
            }
        }
        Ok(paths.len() as u64)
    };
    ctx.measure(&METRICS[0], || pass().map(Work::Ops))?;
    ctx.measure(&METRICS[1], || {
        let mut total = 0;
        for _ in 1..s.symlink_passes {
            total += pass()?;
        }
        Ok(Work::Ops(total))
    })
}
