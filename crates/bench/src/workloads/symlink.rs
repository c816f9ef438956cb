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

use super::{create_files, thousands, Ctx, Deadline, MetricDef, Work};
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

/// `a` and `b` merged in proportion (a a b a a b ...), so that a pass stopped
/// at the time cap has still gone through both kinds of symlink.
fn interleave<T>(a: Vec<T>, b: Vec<T>) -> Vec<T> {
    let (na, nb) = (a.len(), b.len());
    let (mut a, mut b) = (a.into_iter(), b.into_iter());
    let mut out = Vec::with_capacity(na + nb);
    let (mut ta, mut tb) = (0, 0);
    while ta < na || tb < nb {
        // Take from `a` while its share so far is behind `b`'s.
        if tb == nb || (ta < na && ta * nb <= tb * na) {
            out.extend(a.next());
            ta += 1;
        } else {
            out.extend(b.next());
            tb += 1;
        }
    }
    out
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let s = ctx.sizes;

    let file_links: Vec<PathBuf> = (0..s.symlink_files)
        .map(|i| ctx.work.join(format!("links/link_{i:05}")))
        .collect();
    let mut through_dirs = Vec::new();
    for k in 0..s.symlink_dirs {
        let dir = ctx.work.join(format!("dirs/dir_{k:03}"));
        through_dirs.extend((0..s.symlink_files_per_dir).map(|i| dir.join(file_name(i))));
    }
    let paths = interleave(file_links, through_dirs);
    // Stats `paths` in order until `deadline`; returns how many were done.
    let pass = |paths: &[PathBuf], deadline: &Deadline| -> Result<usize, WorkloadError> {
        for (done, p) in paths.iter().enumerate() {
            if deadline.passed() {
                return Ok(done);
            }
            let m = fs::metadata(p).ctx(|| format!("stat {}", p.display()))?;
            if !m.is_file() {
                return Err(WorkloadError::Check(format!(
                    "{} does not resolve to a file",
                    p.display()
                )));
            }
        }
        Ok(paths.len())
    };
    // At the time cap, repeated passes revisit only the paths the first reached.
    let mut reached = 0;
    ctx.measure(&METRICS[0], |deadline| {
        reached = pass(&paths, deadline)?;
        Ok(Work::Ops(reached as u64))
    })?;
    ctx.measure(&METRICS[1], |deadline| {
        let mut total = 0;
        for _ in 1..s.symlink_passes {
            let done = pass(&paths[..reached], deadline)?;
            total += done as u64;
            if done < reached {
                break;
            }
        }
        Ok(Work::Ops(total))
    })
}

#[cfg(test)]
mod tests {
    use super::interleave;

    #[test]
    fn interleave_keeps_proportions_and_everything() {
        let merged = interleave(vec![1, 1, 1, 1], vec![2, 2]);
        assert_eq!(merged, [1, 2, 1, 1, 2, 1]);
        assert_eq!(interleave(vec![1], Vec::new()), [1]);
        assert_eq!(interleave(Vec::new(), vec![2, 2]), [2, 2]);
        let big = interleave(vec![1; 1000], vec![2; 1000]);
        assert_eq!(big.iter().filter(|&&x| x == 2).count(), 1000);
        assert!(big[..10].contains(&2));
    }
}
