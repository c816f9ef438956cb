//! `crossfs bench`: serve a temporary directory, mount it in several configurations, and run
//! every workload on each mount and natively, interleaved. The workloads and statistics live
//! in `crossfs-bench`; this module only builds the targets and tears them down.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use crossfs_bench::{
    BenchConfig, MessageCounts, Sizes, Target, TerminalProgress, WorkloadId, FULL_RUNS, QUICK_RUNS,
};

use crate::control;

/// Arguments of `crossfs bench`.
#[derive(Args, Debug)]
#[command(after_help = workloads_help())]
pub struct BenchArgs {
    /// Smaller sizes, a 0.5 s time cap per figure, and one run per figure unless --runs:
    /// a check of every figure on every target in about a minute and a half, not figures to quote.
    #[arg(long)]
    pub quick: bool,
    /// Repetitions of each workload on each target; the median is reported with min and
    /// max [default: 3, or 1 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub runs: Option<u16>,
    /// Only these workloads, by name or number, comma-separated (see the list below).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub workloads: Vec<WorkloadId>,
    /// Add an already mounted directory as a target, e.g. `sshfs=/mnt/sshfs` (repeatable).
    /// Workloads create and remove their own subdirectories there. When it shows the same
    /// tree as --dir, input is prepared natively in --dir (see below).
    #[arg(long, value_name = "NAME=PATH")]
    pub compare: Vec<String>,
    /// Only the native and default crossfs targets (`crossfs`, and `crossfs --changes
    /// behind`), not the configurations that show each fix's effect (small messages, no
    /// negative cache, no cache).
    #[arg(long)]
    pub default_only: bool,
    /// Directory to export and to measure natively (default: a new temporary directory).
    /// Use the directory that --compare mounts show, so that every target works on one tree.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Write every raw run as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a bar chart per workload as SVG to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// The npm workload's cache, kept between benches: filled once from the registry, then
    /// only read [default: $CROSSFS_BENCH_NPM_CACHE, else $XDG_CACHE_HOME/crossfs/npm or
    /// ~/.cache/crossfs/npm].
    #[arg(long, value_name = "DIR")]
    pub npm_cache: Option<PathBuf>,
    /// The registry that fills the npm cache when it is not filled yet, or was filled from
    /// another registry [default: $CROSSFS_BENCH_NPM_REGISTRY, else npm's configuration].
    #[arg(long, value_name = "URL")]
    pub npm_registry: Option<String>,
    /// Multiply every workload size (tests use a small value to check the plumbing fast).
    #[arg(long, hide = true, default_value_t = 1.0)]
    pub scale: f64,
}

fn workloads_help() -> String {
    let mut s = String::from("Workloads (--workloads takes names or numbers):\n");
    for id in WorkloadId::ALL {
        s.push_str(&format!(
            "  {:>2}. {:<10} {}\n",
            id.number(),
            id.name(),
            id.summary()
        ));
    }
    let (full, quick) = (Sizes::new(false, 1.0), Sizes::new(true, 1.0));
    s.push_str(&format!(
        "\nSizes, full (quick): sequential {} MiB ({} MiB); random I/O in a {} MiB file ({} MiB);\n\
         metadata on {} entries ({}); include probing {} dirs x {} headers, {} passes ({});\n\
         symlinks {} + {} x {} ({} + {} x {}); build {} .c files ({}); git {} files ({});\n\
         watcher cost {} files, {} rounds with events off and {} on ({} and {}), natively only;\n\
         untar {} entries ({}); tree {} entries ({}); npm {} packages ({}).\n\
         Each figure that loops stops at a time cap of {} s ({} s) and is then the rate over\n\
         what it did, marked \"capped\" with the amount. Build, git, watcher, untar, tree and\n\
         npm run to completion; a workload whose first run on a target takes over {} s ({} s)\n\
         is not repeated there.\n\
         npm installs a lockfile committed with crossfs (crates/bench/npm/) offline, from an\n\
         npm cache (--npm-cache) filled natively the first time the registry answers; with\n\
         no filled cache and no registry, or no npm, it is skipped and the table says why.\n\
         --quick leaves npm out unless --workloads names it (its time is mostly node's).\n\
         --quick (one run per figure) takes about 80 s on 2 cores; a full run (three\n\
         runs, median) is meant to stay under 15 minutes.\n",
        full.seq_bytes >> 20,
        quick.seq_bytes >> 20,
        full.random_file_bytes >> 20,
        quick.random_file_bytes >> 20,
        full.meta_files,
        quick.meta_files,
        full.negative_dirs,
        full.negative_headers,
        full.negative_passes,
        quick.negative_passes,
        full.symlink_files,
        full.symlink_dirs,
        full.symlink_files_per_dir,
        quick.symlink_files,
        quick.symlink_dirs,
        quick.symlink_files_per_dir,
        full.build_sources,
        quick.build_sources,
        full.git_files,
        quick.git_files,
        full.watcher_files,
        full.watcher_rounds,
        full.watcher_rounds,
        quick.watcher_rounds,
        quick.watcher_rounds,
        full.untar_entries,
        quick.untar_entries,
        full.tree_entries,
        quick.tree_entries,
        full.npm_set.packages(),
        quick.npm_set.packages(),
        full.time_cap_ms as f64 / 1000.0,
        quick.time_cap_ms as f64 / 1000.0,
        full.repeat_budget_ms / 1000,
        quick.repeat_budget_ms / 1000,
    ));
    s.push_str(
        "\nTargets, run interleaved (each workload on every target in turn, for every run):\n\
         \x20 native                                the directory itself (page cache: the limit)\n\
         \x20 crossfs                               crossfs serve + crossfs mount, defaults\n\
         \x20 crossfs --changes behind              the same, creates, setattrs and small writes sent behind\n\
         and unless --default-only, what each fix is worth:\n\
         \x20 crossfs --msize 65536 --max-pages 32  small messages and FUSE requests\n\
         \x20 crossfs --negative-ttl 0              no negative-lookup cache\n\
         \x20 crossfs --send-opens                  opens, closes and locks sent as without FUSE's no-open mode\n\
         \x20 crossfs --cache never                 no caching at all\n\
         \x20 crossfs --io-uring                    FUSE over io_uring where the kernel offers it\n\
         \x20                                       (off by default; the default where it does not)\n\
         \x20 crossfs --idle-poll 0                 the mount's CPUs left to halt between requests\n\
         \x20                                       (the default polls in a VM whose idle CPUs halt at once)\n\
         plus every --compare NAME=PATH.\n\
         \nRatios are \"x native\": the target's performance as a multiple of native's, 1.00 =\n\
         native, higher is always better (rates: target/native; durations: native/target).\n\
         \nPeers: scripts/bench-peers.sh [BENCH OPTIONS] sets up sshfs (a private sshd on\n\
         loopback) and bindfs over one export and runs\n\
         \x20 crossfs bench --dir EXPORT --compare sshfs=MNT1 --compare bindfs=MNT2 [BENCH OPTIONS]\n\
         Any other mount of --dir works the same way (the kernel 9p client, virtiofs...):\n\
         input is prepared natively in --dir, found by a probe file written through the\n\
         mount, and every timed operation goes through the mount.\n\
         \nNeeds root (FUSE mounts).",
    );
    s
}

/// The target every crossfs configuration is compared with.
const DEFAULT_TARGET: &str = "crossfs";

/// Whether configuration `name` is a control: the default with one fix taken away (the
/// rows after `--default-only`'s), which should not beat the default.
fn is_control(name: &str) -> bool {
    !crossfs_configs(true).iter().any(|(n, _)| *n == name)
}

/// Why a control may beat the default on a figure, where the bench knows.
fn explanations(name: &str) -> Vec<(WorkloadId, &'static str, &'static str)> {
    // Opens sent to the mount (not FUSE's no-open mode) let the kernel run O_DIRECT writes
    // of several threads to one file in parallel (README, "differences").
    const PARALLEL_DIRECT_WRITES: &str = "with opens sent to the mount, the kernel lets \
        several threads' O_DIRECT writes to one file run at once; in the default's no-open \
        mode it runs them one at a time (the README's differences, `--send-opens`)";
    match name {
        "crossfs --send-opens" => vec![(WorkloadId::Random, "write-8t", PARALLEL_DIRECT_WRITES)],
        "crossfs --cache never" => vec![
            (
                WorkloadId::SeqRead,
                "read",
                "a mount that caches nothing reads with direct I/O, each block copied \
                 once, into the program's buffer; the default also fills the guest's page \
                 cache (a copy more), which pays off when a file is read again, not in this \
                 one cold read",
            ),
            (WorkloadId::Random, "write-8t", PARALLEL_DIRECT_WRITES),
        ],
        _ => Vec::new(),
    }
}

/// The crossfs configurations measured, by name and `crossfs mount` options.
fn crossfs_configs(default_only: bool) -> Vec<(&'static str, &'static [&'static str])> {
    let mut configs: Vec<(&str, &[&str])> = vec![
        (DEFAULT_TARGET, &[]),
        ("crossfs --changes behind", &["--changes", "behind"]),
    ];
    if !default_only {
        configs.extend([
            (
                "crossfs --msize 65536 --max-pages 32",
                &["--msize", "65536", "--max-pages", "32"][..],
            ),
            ("crossfs --negative-ttl 0", &["--negative-ttl", "0"][..]),
            ("crossfs --send-opens", &["--send-opens"][..]),
            ("crossfs --cache never", &["--cache", "never"][..]),
            ("crossfs --io-uring", &["--io-uring"][..]),
            ("crossfs --idle-poll 0", &["--idle-poll", "0"][..]),
        ]);
    }
    configs
}

pub fn run(args: BenchArgs) -> Result<()> {
    let work = tempfile::Builder::new()
        .prefix("crossfs-bench-")
        .tempdir()
        .context("creating the bench's work directory")?;
    let interruption = Interruption::watch(work.path())?;
    let result = run_in(&args, &work, &interruption);
    // After a signal, the signal thread cleans up and exits with the signal's status: a
    // target that failed meanwhile (its mount stopped under it) must not exit first.
    drop(interruption.checkpoint());
    result
}

fn run_in(args: &BenchArgs, work: &tempfile::TempDir, interruption: &Interruption) -> Result<()> {
    let export = match &args.dir {
        Some(dir) => dir
            .canonicalize()
            .with_context(|| format!("bench directory {}", dir.display()))?,
        None => {
            let dir = work.path().join("export");
            std::fs::create_dir(&dir)?;
            dir
        }
    };

    let mut targets = vec![Target::native("native", &export)];
    let mut mounts = Vec::new();
    for (i, (name, options)) in crossfs_configs(args.default_only).into_iter().enumerate() {
        let mount = CrossfsMount::start(&export, work.path(), i, options)
            .with_context(|| format!("setting up target `{name}`"))?;
        interruption.checkpoint().note(&mount);
        let server_control = mount.server_control.clone();
        let mut target = Target::mount(name, &mount.mountpoint)
            .with_counters(move || server_message_counts(&server_control))
            .with_pid("server", mount.server.id())
            .with_pid("client", mount.client.id());
        if is_control(name) {
            target = target.control_of(DEFAULT_TARGET);
        }
        for (workload, metric, why) in explanations(name) {
            target = target.explain(workload, metric, why);
        }
        targets.push(target);
        mounts.push(mount);
    }
    for spec in &args.compare {
        let (name, path) = spec
            .split_once('=')
            .with_context(|| format!("--compare {spec}: expected NAME=PATH"))?;
        anyhow::ensure!(
            Path::new(path).is_dir(),
            "--compare {spec}: {path} is not a directory"
        );
        targets.push(Target::mount(name, path));
    }

    let config = BenchConfig {
        quick: args.quick,
        runs: args
            .runs
            .map_or(if args.quick { QUICK_RUNS } else { FULL_RUNS }, usize::from),
        workloads: args.workloads.clone(),
        scale: args.scale,
        npm_cache: args.npm_cache.clone(),
        npm_registry: args.npm_registry.clone(),
        ..BenchConfig::default()
    };
    let mut progress = Checkpoints(TerminalProgress::new(), interruption);
    let report = crossfs_bench::run(&config, &targets, &mut progress)?;
    drop(progress);
    print!("{}", report.table());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.to_json())?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.svg {
        report.write_svg(path)?;
    }
    drop(targets);
    // From here on the mounts are stopped here: a signal no longer does it.
    interruption.checkpoint().mounts.clear();
    for mount in mounts {
        mount.stop()?;
    }
    Ok(())
}

/// What an interrupted bench (SIGINT, SIGTERM) must undo before it exits: the workload
/// running, the mounts and servers it started, then its work directory, unless something is
/// still mounted there. The main thread waits at each checkpoint while that runs, so that
/// it creates nothing in the directory being removed.
struct Interruption {
    started: Mutex<Started>,
    /// The main thread waits at a checkpoint (or is about to).
    main_waits: AtomicBool,
}

/// The mounts started: each pair's mount process, server process and mount point.
#[derive(Default)]
struct Started {
    mounts: Vec<(u32, u32, PathBuf)>,
}

impl Started {
    fn note(&mut self, mount: &CrossfsMount) {
        let pids = (mount.client.id(), mount.server.id());
        self.mounts.push((pids.0, pids.1, mount.mountpoint.clone()));
    }
}

/// Longest wait, after a signal, for the main thread to stop at a checkpoint (the workload
/// running was stopped; a figure's time cap is 3 s).
const CHECKPOINT_WAIT: Duration = Duration::from_secs(10);

impl Interruption {
    fn watch(work: &Path) -> Result<Arc<Self>> {
        let this = Arc::new(Interruption {
            started: Mutex::default(),
            main_waits: AtomicBool::new(false),
        });
        let (that, work) = (this.clone(), work.to_path_buf());
        crate::signals::on_termination(move |sig| {
            eprintln!("crossfs bench: interrupted (signal {sig}), stopping its mounts");
            let mut started = that.started.lock().unwrap_or_else(PoisonError::into_inner);
            // The workload running now (tar, make, git...) first: it keeps its mount busy.
            let pairs: Vec<u32> = started.mounts.iter().flat_map(|m| [m.0, m.1]).collect();
            for child in children().into_iter().filter(|c| !pairs.contains(c)) {
                if let Some(pid) = rustix::process::Pid::from_raw(child as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                }
            }
            for (client, server, mountpoint) in started.mounts.drain(..) {
                stop_pair(client, server, &mountpoint);
            }
            let deadline = Instant::now() + CHECKPOINT_WAIT;
            while !that.main_waits.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if is_mounted_beneath(&work) {
                eprintln!(
                    "crossfs bench: left {}: something is still mounted there",
                    work.display()
                );
            } else if let Err(e) = std::fs::remove_dir_all(&work) {
                eprintln!("crossfs bench: removing {}: {e}", work.display());
            }
            std::process::exit(128 + sig);
        })?;
        Ok(this)
    }

    /// Called by the main thread between steps: after a signal, it waits here until the
    /// process exits.
    fn checkpoint(&self) -> std::sync::MutexGuard<'_, Started> {
        self.main_waits.store(true, Ordering::SeqCst);
        let started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        self.main_waits.store(false, Ordering::SeqCst);
        started
    }
}

/// The bench's progress, with a checkpoint at every step.
struct Checkpoints<'a>(TerminalProgress, &'a Interruption);

impl crossfs_bench::Progress for Checkpoints<'_> {
    fn begin(&mut self, total_steps: usize) {
        drop(self.1.checkpoint());
        self.0.begin(total_steps);
    }
    fn step_started(&mut self, step: &crossfs_bench::Step<'_>) {
        drop(self.1.checkpoint());
        self.0.step_started(step);
    }
    fn step_finished(&mut self, step: &crossfs_bench::Step<'_>, outcome: Result<Duration, &str>) {
        drop(self.1.checkpoint());
        self.0.step_finished(step, outcome);
    }
    fn note(&mut self, message: &str) {
        drop(self.1.checkpoint());
        self.0.note(message);
    }
    fn end(&mut self) {
        self.0.end();
    }
}

/// Stops one pair by pid: the mount first (SIGTERM makes it unmount and exit; after 10 s
/// the mount is detached and the process killed), then the server. Both are reaped.
fn stop_pair(client: u32, server: u32, mountpoint: &Path) {
    use rustix::process::{kill_process, waitpid, Pid, Signal, WaitOptions};
    let exited = |pid| !matches!(waitpid(Some(pid), WaitOptions::NOHANG), Ok(None));
    if let Some(client) = Pid::from_raw(client as i32) {
        let _ = kill_process(client, Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !exited(client) {
            if Instant::now() > deadline {
                let _ = rustix::mount::unmount(mountpoint, rustix::mount::UnmountFlags::DETACH);
                let _ = kill_process(client, Signal::KILL);
                let _ = waitpid(Some(client), WaitOptions::empty());
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if let Some(server) = Pid::from_raw(server as i32) {
        let _ = kill_process(server, Signal::KILL);
        let _ = waitpid(Some(server), WaitOptions::empty());
    }
}

/// This process's children (the `ppid` field of every /proc/PID/stat).
fn children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // "PID (COMM) STATE PPID ...": the command may hold spaces and parentheses.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == me).then_some(pid)
        })
        .collect()
}

/// Whether anything is mounted at `dir` or beneath it (/proc/self/mounts).
fn is_mounted_beneath(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .any(|at| {
            // Spaces and other bytes are octal escapes there; bench paths have none.
            Path::new(at).starts_with(dir)
        })
}

/// The server's total message counts, as the bench wants them.
fn server_message_counts(control_path: &Path) -> io::Result<MessageCounts> {
    let doc = control::query(control_path).map_err(|e| io::Error::other(format!("{e:#}")))?;
    let mut counts = MessageCounts::new();
    if let Some(total) = doc["total"].as_object() {
        for (name, v) in total {
            if let Some(n) = v.get("count").and_then(|c| c.as_u64()) {
                counts.insert(name.clone(), n);
            }
        }
    }
    Ok(counts)
}

/// One `crossfs serve` + `crossfs mount` pair over a unix socket, stopped when dropped.
struct CrossfsMount {
    server: Child,
    client: Child,
    mountpoint: PathBuf,
    server_control: PathBuf,
}

impl CrossfsMount {
    fn start(export: &Path, work: &Path, index: usize, options: &[&str]) -> Result<Self> {
        let exe = std::env::current_exe().context("finding the crossfs binary")?;
        let socket = work.join(format!("serve-{index}.sock"));
        let server_control = work.join(format!("serve-{index}.ctl"));
        let mountpoint = work.join(format!("mnt-{index}"));
        std::fs::create_dir(&mountpoint)?;
        let server = Command::new(&exe)
            .arg("--quiet")
            .arg("serve")
            .arg(export)
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .arg("--control")
            .arg(&server_control)
            // Change events on, as deployed, but with inotify: it watches the export's
            // directories only, where fanotify would mark the whole file system and so
            // also the directory beside the export where the watcher cost is measured.
            .args(["--events", "inotify"])
            .stdin(Stdio::null())
            .spawn()
            .context("starting crossfs serve")?;
        // From here on, Drop cleans up whatever was started.
        let mut pair = CrossfsMount {
            server,
            client: Command::new("true").spawn()?,
            mountpoint: mountpoint.clone(),
            server_control: server_control.clone(),
        };
        wait_for("crossfs serve", &mut pair.server, || {
            std::os::unix::net::UnixStream::connect(&server_control).is_ok()
        })?;
        let _ = pair.client.wait();
        pair.client = Command::new(&exe)
            .arg("--quiet")
            .arg("mount")
            .arg(format!("unix:{}", socket.display()))
            .arg(&mountpoint)
            .args(options)
            .stdin(Stdio::null())
            .spawn()
            .context("starting crossfs mount")?;
        let parent_dev = device_of(work)?;
        wait_for("crossfs mount", &mut pair.client, || {
            device_of(&mountpoint).is_ok_and(|dev| dev != parent_dev)
        })?;
        Ok(pair)
    }

    /// Unmounts (SIGTERM makes `crossfs mount` unmount and exit) and stops the server.
    fn stop(mut self) -> Result<()> {
        self.terminate()
    }

    fn terminate(&mut self) -> Result<()> {
        let client_pid = rustix::process::Pid::from_child(&self.client);
        let _ = rustix::process::kill_process(client_pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.client.try_wait()?.is_none() {
            if Instant::now() > deadline {
                // Detach the mount so nothing is left behind, then stop waiting politely.
                let _ =
                    rustix::mount::unmount(&self.mountpoint, rustix::mount::UnmountFlags::DETACH);
                let _ = self.client.kill();
                let _ = self.client.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
        Ok(())
    }
}

impl Drop for CrossfsMount {
    fn drop(&mut self) {
        let _ = self.terminate();
    }
}

fn device_of(path: &Path) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)?.dev())
}

/// Polls `ready` for up to 20 s, failing early if `child` exits.
fn wait_for(what: &str, child: &mut Child, mut ready: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited before it was ready ({status}); its log is above");
        }
        if Instant::now() > deadline {
            bail!("{what} was not ready after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
