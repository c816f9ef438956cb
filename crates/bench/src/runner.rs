//! The run loop: validate targets, find where to prepare input, interleave
//! targets (A B A B ...) for every run of every workload, collect memory.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::{BenchConfig, Sizes, WorkloadId};
use crate::error::{BenchError, WorkloadError};
use crate::memory::read_process_memory;
use crate::progress::{Progress, Step};
use crate::report::{RawResults, Report, RunRecord, TargetReport};
use crate::target::{Target, TargetKind};
use crate::workloads::pool::{self, Pools};
use crate::workloads::{self, cmd, Ctx, Readiness, Setup};

/// Run the selected workloads on every target and summarise them.
///
/// Order: for each workload, for each run, every target in turn, so that
/// drift over time (thermal, background load, page cache growth) spreads
/// evenly over targets instead of favouring whichever ran first. A failure of
/// one (workload, target, run) is recorded in the report and the run goes on;
/// only invalid input stops it.
///
/// # Errors
/// Invalid config or targets: no targets, zero runs, a scale that is not a
/// positive number, duplicate names, a directory that does not exist.
pub fn run(
    config: &BenchConfig,
    targets: &[Target],
    progress: &mut dyn Progress,
) -> Result<Report, BenchError> {
    validate(config, targets)?;
    let started = Instant::now();
    let sizes = config.sizes();
    let ids = config.selected_workloads();
    if config.quick && config.workloads.is_empty() {
        progress.note(&format!(
            "{}: not in --quick unless named in --workloads (its time is node's own, on every target)",
            WorkloadId::LEFT_OUT_OF_QUICK
        ));
    }
    let nonce = nonce();

    let prep_dirs: Vec<PathBuf> = targets
        .iter()
        .enumerate()
        .map(|(ti, t)| {
            let found = native_backing(ti, t, targets, &nonce);
            if let Some(dir) = &found {
                progress.note(&format!(
                    "{}: input is prepared natively in {} (the same tree)",
                    t.name,
                    dir.display()
                ));
            }
            found.unwrap_or_else(|| t.dir.clone())
        })
        .collect();

    // What each workload needs of the machine (npm's cache), found or made before the
    // first step, so that the step count knows which workloads are skipped.
    let readiness: Vec<Readiness> = ids
        .iter()
        .map(|&id| {
            let r = workloads::setup(id, config, progress);
            if let Readiness::Skip(reason) = &r {
                progress.note(&format!("{id}: {reason}"));
            }
            r
        })
        .collect();

    // Cells of a workload that does not apply to a target (watcher cost on a
    // mount), or is skipped here, are not steps: the report states why they have no runs.
    let total: usize = ids
        .iter()
        .zip(&readiness)
        .filter(|(_, r)| !matches!(r, Readiness::Skip(_)))
        .map(|(&id, _)| {
            let applicable = targets
                .iter()
                .filter(|t| workloads::not_applicable(id, t.kind).is_none())
                .count();
            applicable * config.runs
        })
        .sum();
    progress.begin(total);
    let mut cells = Vec::with_capacity(ids.len());
    let mut warnings = Vec::new();
    let mut index = 0;
    let mut skipped = Vec::with_capacity(ids.len());
    for (&id, readiness) in ids.iter().zip(&readiness) {
        let mut per_target: Vec<Vec<RunRecord>> = vec![Vec::new(); targets.len()];
        let (setup, unready) = match readiness {
            Readiness::Ready(setup) => (setup, None),
            Readiness::Skip(reason) => {
                skipped.push(Some(reason.clone()));
                cells.push(per_target);
                continue;
            }
            Readiness::Fail(why) => (&Setup::Nothing, Some(why)),
        };
        skipped.push(None);
        let missing = workloads::required_tools(id)
            .iter()
            .find(|tool| !cmd::on_path(tool));
        let mut pools = Pools::new(id, &nonce);
        // Targets whose first run of this workload took longer than the
        // budget: their other runs are skipped (one real figure, not three).
        let mut too_slow = vec![false; targets.len()];
        for run in 0..config.runs {
            for (ti, target) in targets.iter().enumerate() {
                if workloads::not_applicable(id, target.kind).is_some() {
                    continue;
                }
                if too_slow[ti] {
                    index += 1;
                    continue;
                }
                let step = Step {
                    index,
                    total,
                    workload: id,
                    target: &target.name,
                    run,
                    runs: config.runs,
                };
                progress.step_started(&step);
                let mut record = match (missing, unready) {
                    (Some(tool), _) => failed(
                        run,
                        WorkloadError::ToolMissing {
                            tool: (*tool).into(),
                        },
                    ),
                    (None, Some(why)) => failed(run, WorkloadError::Prepare(why.clone())),
                    (None, None) => {
                        let cell = Cell {
                            id,
                            target_index: ti,
                            run,
                            target,
                            prep_root: &prep_dirs[ti],
                            sizes: &sizes,
                            setup,
                            nonce: &nonce,
                        };
                        run_cell(&cell, &mut pools)
                    }
                };
                let outcome = match &record.error {
                    Some(e) => Err(e.as_str()),
                    None => Ok(Duration::from_secs_f64(record.wall_s)),
                };
                progress.step_finished(&step, outcome);
                // Preparing the shared input happens once, in whichever run
                // comes first: it says nothing of what a repeat would cost.
                let budget = sizes.repeat_budget_ms as f64 / 1000.0;
                let own = record.wall_s - record.prepare_s;
                if run == 0 && config.runs > 1 && own > budget {
                    too_slow[ti] = true;
                    record.warnings.push(format!(
                        "1 run instead of {}: the first took {own:.0} s (input preparation \
                         aside), over the {budget:.0} s after which a workload is not repeated \
                         on a target",
                        config.runs
                    ));
                }
                per_target[ti].push(record);
                index += 1;
            }
        }
        // A pool can be large (the sequential file): gone before the next workload.
        warnings.extend(pools.remove_all());
        cells.push(per_target);
    }
    progress.end();

    let target_reports = targets
        .iter()
        .zip(prep_dirs)
        .map(|(t, prepared_in)| TargetReport {
            name: t.name.clone(),
            kind: t.kind,
            dir: t.dir.clone(),
            prepared_in,
            counters: t.counters.is_some(),
            memory: t
                .pids
                .iter()
                .map(|(role, pid)| read_process_memory(role, *pid))
                .collect(),
            control_of: t.control_of.clone(),
            explanations: t.explanations.clone(),
        })
        .collect();
    let raw = RawResults {
        workloads: ids,
        skipped,
        cells,
    };
    let mut report = Report::assemble(config, target_reports, raw, started.elapsed().as_secs_f64());
    report.warnings = warnings;
    Ok(report)
}

fn validate(config: &BenchConfig, targets: &[Target]) -> Result<(), BenchError> {
    if targets.is_empty() {
        return Err(BenchError::NoTargets);
    }
    if config.runs == 0 {
        return Err(BenchError::NoRuns);
    }
    if !(config.scale.is_finite() && config.scale > 0.0) {
        return Err(BenchError::BadScale(config.scale));
    }
    for (i, t) in targets.iter().enumerate() {
        if targets[..i].iter().any(|o| o.name == t.name) {
            return Err(BenchError::DuplicateTarget(t.name.clone()));
        }
        if !t.dir.is_dir() {
            return Err(BenchError::TargetDir {
                name: t.name.clone(),
                dir: t.dir.clone(),
            });
        }
    }
    Ok(())
}

/// Distinguishes this bench run's directories from any earlier run's, so a
/// mount that cached an old name (negative or positive) cannot be confused.
fn nonce() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{:x}{:04x}", std::process::id(), nanos & 0xffff)
}

/// For a mount, the native target whose directory is the same tree, found by
/// writing a probe file through the mount and looking for it natively.
/// Preparing input there keeps the mount's caches cold for the first timed
/// pass and makes setup fast. Native targets prepare in place.
fn native_backing(ti: usize, target: &Target, all: &[Target], nonce: &str) -> Option<PathBuf> {
    if target.kind == TargetKind::Native {
        return None;
    }
    let name = format!(".crossfs-bench-probe-{nonce}-t{ti}");
    let through = target.dir.join(&name);
    let token = format!("crossfs bench probe {nonce} {ti}\n");
    let written = fs::File::create(&through).and_then(|mut f| {
        use std::io::Write;
        f.write_all(token.as_bytes())?;
        f.sync_all()
    });
    let found = written.ok().and_then(|()| {
        all.iter()
            .filter(|o| o.kind == TargetKind::Native)
            .find(|o| fs::read(o.dir.join(&name)).ok().as_deref() == Some(token.as_bytes()))
            .map(|o| o.dir.clone())
    });
    // Best effort: a probe left behind is a small hidden file, not a wrong figure.
    let _ = fs::remove_file(&through);
    found
}

/// Lets a `crossfs mount` apply the change events of the input just prepared natively (a
/// `crossfs sync`: reading the mount root's `user.crossfs.sync`). Without it, events about
/// the setup arrive during the timed phases and drop the very caches being measured. Other
/// targets answer the read with an error, ignored.
fn settle(target: &Target) {
    if target.kind != TargetKind::Native {
        let mut value = [0u8; 64];
        let _ = rustix::fs::getxattr(&target.dir, "user.crossfs.sync", &mut value);
    }
}

struct Cell<'a> {
    id: WorkloadId,
    target_index: usize,
    run: usize,
    target: &'a Target,
    prep_root: &'a Path,
    sizes: &'a Sizes,
    setup: &'a Setup,
    nonce: &'a str,
}

fn failed(run: usize, error: WorkloadError) -> RunRecord {
    RunRecord {
        run,
        samples: Vec::new(),
        error: Some(error.to_string()),
        warnings: Vec::new(),
        wall_s: 0.0,
        prepare_s: 0.0,
    }
}

/// One workload on one target, in a fresh directory that is removed afterwards.
fn run_cell(cell: &Cell<'_>, pools: &mut Pools) -> RunRecord {
    let started = Instant::now();
    let name = format!(
        "crossfs-bench-{}-w{}-{}-t{}-r{}",
        cell.nonce,
        cell.id.number(),
        cell.id,
        cell.target_index,
        cell.run
    );
    let work = cell.target.dir.join(&name);
    let prep = cell.prep_root.join(&name);
    let mut ctx = Ctx {
        target: cell.target,
        work: work.clone(),
        prep: prep.clone(),
        sizes: cell.sizes,
        setup: cell.setup,
        samples: Vec::new(),
        warnings: Vec::new(),
    };
    let mut prepare = Duration::ZERO;
    let outcome = fs::create_dir(&prep)
        .map_err(|e| WorkloadError::io(format!("mkdir {}", prep.display()), e))
        .and_then(|()| {
            if workloads::has_input(cell.id) {
                let t = Instant::now();
                let pool = pools.get(cell.prep_root, cell.sizes)?;
                prepare = t.elapsed();
                pool::replicate(&pool, &prep, &workloads::copy_if(cell.id))?;
                workloads::before_run(cell.id, &prep)?;
            }
            // Even an empty work directory was made natively: the mount must know it
            // exists (its parent's replica may say it does not until the event comes).
            settle(cell.target);
            workloads::run(cell.id, &mut ctx)
        });
    // Cleanup goes through the target, the way the files were written, so a
    // client with cached state sees its own removals; natively only if that fails.
    if let Err(e) = fs::remove_dir_all(&work) {
        let left = if prep == work {
            Some(e)
        } else {
            fs::remove_dir_all(&prep).err()
        };
        if let Some(e) = left.filter(|e| e.kind() != std::io::ErrorKind::NotFound) {
            ctx.warnings
                .push(format!("cleaning up {}: {e}", work.display()));
        }
    }
    RunRecord {
        run: cell.run,
        samples: ctx.samples,
        error: outcome.err().map(|e| e.to_string()),
        warnings: ctx.warnings,
        wall_s: started.elapsed().as_secs_f64(),
        prepare_s: prepare.as_secs_f64(),
    }
}
