//! Workload 5: negative lookups, the way a C preprocessor probes include paths.
//!
//! For each header it tries every -I directory in order and opens the first
//! that has it. All headers live in the last directory, so each costs
//! (dirs - 1) failed lookups and one open: the pattern that makes builds slow
//! over 9P without a negative-lookup cache.

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::{create_files, thousands, Ctx, Deadline, MetricDef, Work};
use crate::config::Sizes;
use crate::error::WorkloadError;
use crate::stats::Unit;

pub(crate) const METRICS: &[MetricDef] = &[
    MetricDef {
        id: "probe-first",
        label: "include probing, first pass",
        unit: Unit::LookupsPerSec,
        key_messages: &["Twalk"],
    },
    MetricDef {
        id: "probe-repeat",
        label: "include probing, repeated passes",
        unit: Unit::LookupsPerSec,
        key_messages: &["Twalk"],
    },
];

/// Unrelated headers in every directory but the last, as real include dirs have.
const DECOYS: usize = 5;

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "include-path probing: {} -I dirs, {} headers found in the last one, {} passes ({} lookups a pass)",
        s.negative_dirs,
        s.negative_headers,
        s.negative_passes,
        thousands((s.negative_dirs * s.negative_headers) as u64)
    )
}

fn dir_name(d: usize) -> String {
    format!("inc{d:02}")
}

fn header_name(h: usize) -> String {
    format!("header_{h:04}.h")
}

pub(crate) fn prepare(pool: &Path, sizes: &Sizes) -> Result<(), WorkloadError> {
    let (dirs, headers) = (sizes.negative_dirs, sizes.negative_headers);
    for d in 0..dirs - 1 {
        create_files(
            &pool.join(dir_name(d)),
            DECOYS,
            |k| format!("other_{k}.h"),
            b"#pragma once\n",
        )?;
    }
    create_files(
        &pool.join(dir_name(dirs - 1)),
        headers,
        header_name,
        b"#pragma once\nint probe_target;\n",
    )
    .map(drop)
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let (dirs, headers) = (ctx.sizes.negative_dirs, ctx.sizes.negative_headers);

    // candidates[h] = the path of header h in every directory, in -I order.
    let candidates: Vec<Vec<PathBuf>> = (0..headers)
        .map(|h| {
            (0..dirs)
                .map(|d| ctx.work.join(dir_name(d)).join(header_name(h)))
                .collect()
        })
        .collect();
    // Probes headers in order until `deadline`; returns (headers done, lookups).
    let pass = |headers: &[Vec<PathBuf>],
                deadline: &Deadline|
     -> Result<(usize, u64), WorkloadError> {
        let mut lookups = 0;
        for (h, paths) in headers.iter().enumerate() {
            if deadline.passed() {
                return Ok((h, lookups));
            }
            let mut found = None;
            for (d, p) in paths.iter().enumerate() {
                lookups += 1;
                // cpp opens each candidate; ENOENT sends it to the next directory.
                match File::open(p) {
                    Ok(_) => {
                        found = Some(d);
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(WorkloadError::io(format!("open {}", p.display()), e)),
                }
            }
            if found != Some(dirs - 1) {
                return Err(WorkloadError::Check(format!(
                    "{} found in include directory {found:?}, expected the last ({})",
                    header_name(h),
                    dirs - 1
                )));
            }
        }
        Ok((headers.len(), lookups))
    };
    let passes = ctx.sizes.negative_passes;
    // At the time cap, repeated passes revisit only the headers the first reached.
    let mut reached = 0;
    ctx.measure(&METRICS[0], |deadline| {
        let (h, lookups) = pass(&candidates, deadline)?;
        reached = h;
        Ok(Work::Ops(lookups))
    })?;
    ctx.measure(&METRICS[1], |deadline| {
        let mut total = 0;
        for _ in 1..passes {
            let (h, lookups) = pass(&candidates[..reached], deadline)?;
            total += lookups;
            if h < reached {
                break;
            }
        }
        Ok(Work::Ops(total))
    })
}
