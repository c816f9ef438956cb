//! Workload 10: extract a tarball of a generated source tree, then `syncfs`.
//!
//! The tarball is made once per workload in the pool with the system's `tar`, from a tree
//! [`gentree`](super::gentree) writes natively and removes again, so only the archive is
//! replicated into each run. Each run extracts it, through the target, into a fresh
//! directory (`tar -xf`, as root: owners, modes and times restored, each a setattr), then
//! `syncfs` on the target flushes what the extraction left cached. Both are timed apart: a
//! client that defers work past the extraction shows it in the second figure. They are not
//! the same work everywhere: natively `syncfs` writes the new files to the disk, while on a
//! FUSE mount it writes back the client's dirty pages (a writeback mount's) and, unless the
//! file system answers FUSE_SYNCFS, reaches no further: the host's disk is not flushed. The tree is then counted (untimed), so a
//! target that loses an entry fails instead of looking fast.

use std::fs;
use std::path::Path;
use std::process::Command;

use super::gentree;
use super::{cmd, thousands, Ctx, MetricDef, Work};
use crate::config::Sizes;
use crate::error::{IoContext, WorkloadError};
use crate::stats::Unit;

pub(crate) const TOOLS: &[&str] = &["tar"];

pub(crate) const METRICS: &[MetricDef] = &[
    MetricDef {
        id: "extract",
        label: "tar -xf",
        unit: Unit::Seconds,
        key_messages: &["Tlcreate", "Tmkdir", "Tsetattr", "Twrite"],
    },
    MetricDef {
        id: "syncfs",
        label: "syncfs after it (on a mount: what the client flushes)",
        unit: Unit::Seconds,
        key_messages: &["Twrite", "Tfsync"],
    },
];

const TARBALL: &str = "tree.tar";
const SEED: u64 = 10;

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "extract a {}-entry source tarball (about 20 entries a directory), then syncfs",
        thousands(s.untar_entries as u64)
    )
}

pub(crate) fn prepare(pool: &Path, sizes: &Sizes) -> Result<(), WorkloadError> {
    let staging = pool.join("staging");
    // The generator makes exactly the entries asked for: the run checks against that.
    gentree::generate(Some(&staging), sizes.untar_entries, SEED)?;
    // Fixed owners, times and order, so the archive is the same bytes on every machine.
    cmd::run(
        Command::new("tar")
            .args([
                "--sort=name",
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "--mtime=@1767225600",
                "-cf",
            ])
            .arg(pool.join(TARBALL))
            .arg("."),
        &staging,
    )?;
    fs::remove_dir_all(&staging).ctx(|| format!("removing {}", staging.display()))
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let tarball = ctx.work.join(TARBALL);
    let out = ctx.work.join("out");
    fs::create_dir(&out).ctx(|| format!("mkdir {}", out.display()))?;
    ctx.measure(&METRICS[0], |_| {
        cmd::run(Command::new("tar").arg("-xf").arg(&tarball), &out)?;
        Ok(Work::Once)
    })?;
    ctx.measure(&METRICS[1], |_| {
        let dir = fs::File::open(&out).ctx(|| format!("opening {}", out.display()))?;
        rustix::fs::syncfs(&dir)
            .map_err(std::io::Error::from)
            .ctx(|| format!("syncfs on {}", out.display()))?;
        Ok(Work::Once)
    })?;
    let found = count_entries(&out)?;
    let want = gentree::generate(None, ctx.sizes.untar_entries, SEED)?.entries();
    if found != want {
        return Err(WorkloadError::Check(format!(
            "{} holds {found} entries after extraction, the tarball {want}",
            out.display()
        )));
    }
    Ok(())
}

/// Entries beneath `dir` (not following symlinks), through the target.
pub(crate) fn count_entries(dir: &Path) -> Result<usize, WorkloadError> {
    let mut n = 0;
    let mut work = vec![dir.to_path_buf()];
    while let Some(d) = work.pop() {
        for e in fs::read_dir(&d).ctx(|| format!("reading {}", d.display()))? {
            let e = e.ctx(|| format!("reading {}", d.display()))?;
            n += 1;
            if e.file_type()
                .ctx(|| format!("stat {}", e.path().display()))?
                .is_dir()
            {
                work.push(e.path());
            }
        }
    }
    Ok(n)
}
