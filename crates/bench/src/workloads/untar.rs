//! Workload 10: extract a tarball of a generated source tree, then `syncfs`.
//!
//! The tarball is made once per workload in the pool with the system's `tar`, from a tree
//! [`gentree`](super::gentree) writes natively and removes again, so only the archive is
//! replicated into each run. Each run extracts it, through the target, into a fresh
//! directory (`tar -xf`, as root: owners, modes and times restored, each a setattr), then
//! the files are made durable on the host: `syncfs` through the target (a writeback
//! mount's dirty pages go to the server), then, behind a mount, `syncfs` of the host's
//! file system too, because a FUSE mount's `syncfs` stops at the client (crossfs mount
//! does not answer FUSE_SYNCFS) and would otherwise time nothing where native times the
//! disk. Both are timed apart (a client that defers work past the extraction shows it in
//! the second figure), and their sum is the third, the one to compare: how much of the
//! host's writeback the sync finds left depends on how long the extraction took (ext4
//! commits its journal every 5 s), so the sync alone favours a slow extraction. The tree
//! is then counted (untimed), so a target that loses an entry fails instead of looking
//! fast. Behind a crossfs mount the sync also waits for the mount's own sync
//! (`user.crossfs.sync`), which returns once what `--changes behind` answered before the
//! server is on the host.

use std::fs;
use std::path::Path;
use std::process::Command;

use super::gentree;
use super::{cmd, thousands, Ctx, MetricDef, Sample, Work};
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
        label: "then syncfs, through the target and on the host",
        unit: Unit::Seconds,
        key_messages: &["Twrite", "Tfsync"],
    },
    MetricDef {
        id: "extract-durable",
        label: "both: tar -xf until the files are on the host's disk",
        unit: Unit::Seconds,
        key_messages: &["Tlcreate", "Tsetattr", "Twrite"],
    },
];

const TARBALL: &str = "tree.tar";
const SEED: u64 = 10;

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "extract a {}-entry source tarball (about 20 entries a directory), then syncfs (behind a mount: on the host too)",
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
    let host_side = (ctx.prep != ctx.work).then(|| ctx.prep.clone());
    let mount_root =
        (ctx.target.kind == crate::target::TargetKind::Mount).then(|| ctx.target.dir.clone());
    ctx.measure(&METRICS[1], |_| {
        syncfs(&out)?;
        if let Some(root) = &mount_root {
            crossfs_sync(root)?;
        }
        if let Some(dir) = &host_side {
            syncfs(dir)?;
        }
        Ok(Work::Once)
    })?;
    total(ctx, &METRICS[2]);
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

/// The sum of the last two samples (extraction and sync), as one more figure.
fn total(ctx: &mut Ctx<'_>, metric: &MetricDef) {
    let [.., a, b] = ctx.samples.as_slice() else {
        return;
    };
    let elapsed = a.elapsed_s + b.elapsed_s;
    let messages = a.messages.as_ref().zip(b.messages.as_ref()).map(|(x, y)| {
        let mut sum = x.clone();
        for (name, n) in y {
            *sum.entry(name.clone()).or_insert(0) += n;
        }
        sum
    });
    ctx.samples.push(Sample {
        metric: metric.id,
        value: elapsed,
        unit: metric.unit,
        elapsed_s: elapsed,
        amount: 1,
        capped: false,
        messages,
    });
}

fn syncfs(dir: &Path) -> Result<(), WorkloadError> {
    let f = fs::File::open(dir).ctx(|| format!("opening {}", dir.display()))?;
    rustix::fs::syncfs(&f)
        .map_err(std::io::Error::from)
        .ctx(|| format!("syncfs on {}", dir.display()))
}

/// A crossfs mount's own sync (what `crossfs sync` does): returns once every change the
/// mount answered before the server (`--changes behind`) is on the host, which a FUSE
/// mount's `syncfs` does not wait for. Other mounts have no such attribute: nothing to
/// wait for.
fn crossfs_sync(root: &Path) -> Result<(), WorkloadError> {
    let mut marker = [0u8; 64];
    match rustix::fs::getxattr(root, "user.crossfs.sync", &mut marker) {
        Ok(_) => Ok(()),
        Err(e) if e == rustix::io::Errno::NODATA || e == rustix::io::Errno::OPNOTSUPP => Ok(()),
        Err(e) => {
            Err(std::io::Error::from(e)).ctx(|| format!("crossfs sync of {}", root.display()))
        }
    }
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
