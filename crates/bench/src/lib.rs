//! `crossfs-bench`: the workloads, statistics and reporting behind `crossfs bench`.
//!
//! What this crate owns:
//! - the eight workloads of the issue ([`WorkloadId`], `workloads/`): sequential
//!   read and write, random O_DIRECT I/O, metadata, include-path negative
//!   lookups, symlink resolution, a generated C build, and git; a ninth,
//!   the watcher cost of the brief's lesson 5, on native targets only; and
//!   issue #11's metadata in bulk: extracting a tarball, and `find` + `grep -r`
//!   over a tree; and `npm ci --offline` of a committed lockfile from an npm
//!   cache filled once per machine (skipped, with the reason, where there is no
//!   filled cache and no registry, or no npm);
//! - the run loop ([`run`]): targets interleaved A B A B for every run, each
//!   (workload, target, run) in its own fresh directory, removed afterwards;
//!   only the measured operations are timed and counted;
//! - statistics ([`Summary`], [`ratio_to_native`]): median, min and max over
//!   runs, and one ratio convention, "x native", where 1.00 = native and higher
//!   is always better (durations are inverted);
//! - reporting ([`Report`]): the terminal table, JSON with every raw run, and
//!   an SVG bar chart per workload; progress on the terminal ([`Progress`]).
//!
//! | # | workload  | figures | full | `--quick` |
//! |---|-----------|---------|------|-----------|
//! | 1 | seq-read  | MiB/s: one file, then 8 files at once (aggregate) | 512 MiB, 1 MiB blocks; 8 x 64 MiB | 64 MiB; 8 x 8 MiB |
//! | 2 | seq-write | MiB/s (fsync timed) | 512 MiB | 64 MiB |
//! | 3 | random    | IOPS, 4 KiB O_DIRECT read/write x 1 and 8 threads | 128 MiB file, 5,000 / 16,000 ops | 16 MiB, 1,000 / 2,000 ops |
//! | 4 | meta      | ops/s: stat first/repeat, open+close, readdir (entries/s), create, rename, unlink | 10,000 entries, 1,000 creates | 2,000 / 200 |
//! | 5 | negative  | lookups/s, first pass and repeats | 40 dirs x 300 headers, 3 passes | 40 x 300, 2 passes |
//! | 6 | symlink   | ops/s, first pass and repeats | 1,000 links + 20 dir links x 50, 3 passes | 200 + 10 x 20, 3 passes |
//! | 7 | build     | seconds | 120 .c, 40 -I dirs (10 symlinked) | 12 .c, 8 -I dirs |
//! | 8 | git       | seconds: status first/repeat, checkout | 10,000 files | 500 files |
//! | 9 | watcher   | files/s created + deleted, events off and on, and on/off (native only) | 1,000 files, 2 rounds each | 1,000 files, 1 round each |
//! | 10 | untar    | seconds: tar -xf, then syncfs, and both | 10,000 entries | 1,000 |
//! | 11 | tree     | seconds: find, grep -r, each first and repeated | 10,000 entries | 2,000 |
//! | 12 | npm      | seconds: npm ci --offline from a filled cache | 399 packages, ~9,400 entries | only if named in `--workloads`: 72 packages, ~780 entries |
//! | | runs per figure (`--runs`) | | 3, median | 1 |
//! | | time cap per looping figure | | 3 s | 0.5 s |
//! | | no repeats on a target after a first run longer than | | 15 s | 15 s |
//!
//! Every figure that loops (all but build, git, watcher, untar, tree and npm) stops at the time cap
//! ([`Sizes::time_cap_ms`]), so a slow target cannot stretch a run: the
//! figure is then the rate over what was done, the sample says `capped`, and
//! the table shows the amount. Repeated passes revisit only what the first
//! pass reached. The quick sizes are smaller only where per-operation costs
//! stay the same (fewer files, fewer compile units); a quick run is a check
//! of every figure on every target in under a minute, a full run the figures
//! to quote.
//!
//! [`BenchConfig::scale`] shrinks all of these for tests (not npm's lockfiles, which are
//! fixed); [`Sizes`] is the authority and is recorded in every report.
//!
//! npm's cache ([`BenchConfig::npm_cache`], else `$CROSSFS_BENCH_NPM_CACHE`, else
//! `$XDG_CACHE_HOME/crossfs/npm` or `~/.cache/crossfs/npm`) is the one thing the bench
//! keeps between runs: filled natively with `npm ci` of both lockfiles the first time the
//! registry answers (untimed), then only read. Every timed install is offline.
//!
//! What it must not touch: serving, mounting, and finding processes. The CLI
//! creates [`Target`]s (a directory, its kind, a hook reading the server's 9P
//! message counters, pids to report memory of) and tears them down; this
//! crate only runs workloads in their directories. It never drops the
//! system's caches either: for a mount it drops only that file's client cache
//! (`posix_fadvise(DONTNEED)` through the mount) before cold reads.
//!
//! Where input files are prepared (untimed): once per workload, in a pool
//! directory that every run gets a hard-linked replica of, so each run sees
//! fresh names at the cost of one link per file. Pools and replicas are made
//! natively in the directory behind a mount when the run can find it (a probe
//! file written through the mount that appears in a native target's
//! directory), otherwise through the target itself. Timed operations always
//! go through the target. See the `workloads` module.
//!
//! ```no_run
//! use crossfs_bench::{run, BenchConfig, Target, TerminalProgress};
//! let targets = [
//!     Target::native("native", "/srv/export"),
//!     Target::mount("crossfs", "/mnt/crossfs").with_pid("client", 4242),
//! ];
//! let config = BenchConfig { quick: true, ..BenchConfig::default() };
//! let report = run(&config, &targets, &mut TerminalProgress::new())?;
//! print!("{}", report.table());
//! # Ok::<(), crossfs_bench::BenchError>(())
//! ```

#![forbid(unsafe_code)]

mod config;
mod error;
mod memory;
mod notes;
mod progress;
mod report;
mod runner;
mod stats;
mod svg;
mod table;
mod target;
mod workloads;

pub use config::{
    workload_names, BenchConfig, NpmSet, Sizes, UnknownWorkload, WorkloadId, FULL_RUNS,
    FULL_TIME_CAP_MS, QUICK_RUNS, QUICK_TIME_CAP_MS,
};
pub use error::{BenchError, WorkloadError};
pub use memory::{read_process_memory, ProcessMemory};
pub use progress::{NoProgress, Progress, Step, TerminalProgress};
pub use report::{
    Figure, Report, RunRecord, TargetReport, TargetResult, WorkloadReport, RATIO_CONVENTION,
    SCHEMA_VERSION,
};
pub use runner::run;
pub use stats::{ratio_to_native, Summary, Unit};
pub use target::{CounterFn, Explanation, MessageCounts, Target, TargetKind};
pub use workloads::npm::{CACHE_ENV as NPM_CACHE_ENV, REGISTRY_ENV as NPM_REGISTRY_ENV};
pub use workloads::{MetricDef, Sample};
