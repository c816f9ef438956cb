//! Who watches this mount: replaying a change is only worth its system calls (and the
//! lookup it costs) when some program in the guest has an inotify watch on the directory
//! or file, or a fanotify mark on it, its mount or its file system. The kernel lists every
//! watch in `/proc/PID/fdinfo/FD` of the inotify and fanotify descriptors, so the list is
//! read from there when it may have changed (see [`MAX_AGE`], [`MAX_AGE_UNWATCHED`]): a host
//! `git checkout` of 10,000 files, published in bursts, then costs a guest that nobody
//! watches a few looks and the invalidations.
//!
//! Finding the watch descriptors means reading a link for every open file of every process:
//! 40,000 open files (an IDE, a browser and a build) take half a second of system time.
//! So the event path never does that for the whole machine. It reads the watches of the
//! descriptors found before ([`Known`]), and looks through the open files only of
//! processes it has not looked at yet (a watcher just started) and of small ones whose
//! number of open files changed since (Linux 6.2 gives it as the size of `/proc/PID/fd`;
//! before, every small process is looked through again): a program that starts watching
//! opens a descriptor. A look through every process (a large one that opened a watch
//! descriptor, one that closed a file and opened a watch descriptor in between) runs on a
//! thread of its own, as often as it costs at most a fifth of the time, and at least every
//! [`REDISCOVER_MIN`].

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How old the list may be when it says "watched" (a watch that went away meanwhile costs
/// one needless replay).
const MAX_AGE: Duration = Duration::from_millis(1000);
/// When the list says "not watched", it is read again for each batch of events received
/// after the last read began, so a watch added before the host's change is seen. Those
/// reads may take a fifth of the time, with [`READ_BUDGET`] saved up for a burst; past
/// that, the list is read when it is this old, and a watch added within this long before
/// an event may miss it.
const MAX_AGE_UNWATCHED: Duration = Duration::from_millis(10);
/// The time reads of the list may save up, at a fifth of the time passing.
const READ_BUDGET: Duration = Duration::from_millis(50);
/// The least time between looks through every process's open files, which otherwise run
/// as often as they cost a fifth of the time between them.
const REDISCOVER_MIN: Duration = Duration::from_millis(200);
/// Open files of a process, at most, that the event path looks through again when their
/// number changed (a larger process waits for the next look through everything).
const SMALL_PROCESS: usize = 512;

#[derive(Default)]
struct Seen {
    /// Node ids (inode numbers on the mount) with an inotify watch or fanotify inode mark.
    nodes: HashSet<u64>,
    /// A fanotify mark on the whole mount or file system.
    everything: bool,
}

impl Seen {
    fn any(&self, nodes: &[u64]) -> bool {
        self.everything || nodes.iter().any(|n| self.nodes.contains(n))
    }
}

/// The watch descriptors found, and the processes looked through.
#[derive(Default, Clone)]
struct Known {
    /// (pid, descriptor) of every inotify and fanotify descriptor found.
    descriptors: HashSet<(u32, u32)>,
    /// Processes whose open files were all looked at, and how many there were (as
    /// `/proc/PID/fd` gave their number, 0 where the kernel does not, and as counted).
    processes: HashMap<u32, (u64, usize)>,
}

#[derive(Default)]
struct State {
    seen: Seen,
    /// When the read that gave `seen` began.
    at: Option<Instant>,
    /// The time reads of the list may still take (see [`READ_BUDGET`]), as of `budget_at`.
    budget: Duration,
    budget_at: Option<Instant>,
    /// When the latest batch of events was received.
    batch: Option<Instant>,
    known: Known,
    /// When the last look through every process began, and what it cost.
    rediscovered: Option<Instant>,
    rediscovery_cost: Duration,
}

/// The watches on one mount, refreshed lazily.
pub(crate) struct Watchers {
    scanner: Scanner,
    state: Arc<Mutex<State>>,
    /// A look through every process is under way.
    rediscovering: Arc<AtomicBool>,
}

/// What tells this mount's watches apart in /proc.
#[derive(Clone, Copy)]
struct Scanner {
    /// The mount's device as the kernel prints it in fdinfo (`sdev`).
    sdev: u64,
    /// The mount's id as fdinfo prints fanotify mount marks (`mnt_id`).
    mnt_id: Option<u64>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Watchers {
    /// The watches on the file system mounted at `mountpoint`.
    pub(crate) fn new(mountpoint: &Path) -> Watchers {
        let sdev = rustix::fs::stat(mountpoint)
            .map(|st| {
                let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
                (u64::from(major) << 20) | u64::from(minor)
            })
            .unwrap_or(u64::MAX);
        Watchers {
            scanner: Scanner {
                sdev,
                mnt_id: mount_id(mountpoint),
            },
            state: Arc::default(),
            rediscovering: Arc::default(),
        }
    }

    /// A batch of events was received: a "not watched" read before now may be too old
    /// for them.
    pub(crate) fn batch_received(&self) {
        lock(&self.state).batch = Some(Instant::now());
    }

    /// Whether any of `nodes` is watched (or the whole mount is).
    pub(crate) fn any_watched(&self, nodes: &[u64]) -> bool {
        let mut state = lock(&self.state);
        let age = state.at.map_or(Duration::MAX, |t| t.elapsed());
        let now = Instant::now();
        let saved = state.budget_at.map_or(READ_BUDGET, |t| (now - t) / 5);
        state.budget = (state.budget + saved).min(READ_BUDGET);
        state.budget_at = Some(now);
        let before_batch = match (state.at, state.batch) {
            (Some(at), Some(batch)) => at < batch,
            _ => true,
        };
        let unwatched_too_old =
            age > MAX_AGE_UNWATCHED || (before_batch && !state.budget.is_zero());
        if age > MAX_AGE || (!state.seen.any(nodes) && unwatched_too_old) {
            let State { known, seen, .. } = &mut *state;
            *seen = self.scanner.refresh(known);
            state.at = Some(now);
            state.budget = state.budget.saturating_sub(now.elapsed());
            self.rediscover_if_due(&mut state);
        }
        state.seen.any(nodes)
    }

    /// Starts a look through every process's open files on a thread of its own, unless
    /// one runs or ran too recently for what it costs.
    fn rediscover_if_due(&self, state: &mut State) {
        let gap = (state.rediscovery_cost * 5).max(REDISCOVER_MIN);
        if state.rediscovered.is_some_and(|t| t.elapsed() < gap)
            || self.rediscovering.swap(true, Ordering::AcqRel)
        {
            return;
        }
        state.rediscovered = Some(Instant::now());
        let (scanner, shared, running) =
            (self.scanner, self.state.clone(), self.rediscovering.clone());
        let rediscover = move || {
            let began = Instant::now();
            let mut fresh = Known::default();
            scanner.discover(&mut fresh, |_| true);
            let read = Instant::now();
            let seen = scanner.refresh(&mut fresh);
            let mut state = lock(&shared);
            state.known = fresh;
            state.seen = seen;
            state.at = Some(read);
            state.rediscovery_cost = began.elapsed();
            drop(state);
            running.store(false, Ordering::Release);
        };
        let spawned = std::thread::Builder::new()
            .name("crossfs-watchers".into())
            .spawn(rediscover);
        if spawned.is_err() {
            // No thread to spare: the next call tries again.
            self.rediscovering.store(false, Ordering::Release);
        }
    }
}

impl Scanner {
    /// The watches now: the descriptors in `known`, after looking through the processes
    /// not looked at yet and the small ones whose open files changed in number (those
    /// gone are forgotten).
    fn refresh(&self, known: &mut Known) -> Seen {
        let Ok(procs) = std::fs::read_dir("/proc") else {
            // No /proc to tell: replay everything rather than nothing.
            return Seen {
                everything: true,
                ..Seen::default()
            };
        };
        // The mount's own process watches nothing (and its open files move as it looks).
        let me = std::process::id();
        let alive: HashSet<u32> = procs
            .flatten()
            .filter_map(|p| p.file_name().to_str()?.parse().ok())
            .filter(|&pid| pid != me)
            .collect();
        known.processes.retain(|p, _| alive.contains(p));
        known.descriptors.retain(|(p, _)| alive.contains(p));
        let again: HashSet<u32> = alive
            .iter()
            .copied()
            .filter(|pid| match known.processes.get(pid) {
                None => true,
                Some(&(_, counted)) if counted > SMALL_PROCESS => false,
                Some(&(0, _)) => true,
                Some(&(number, _)) => open_files(*pid) != number,
            })
            .collect();
        self.discover(known, |pid| again.contains(&pid));
        let mut seen = Seen::default();
        let mut gone = Vec::new();
        for &(pid, fd) in &known.descriptors {
            match std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) {
                Ok(text) => self.parse_fdinfo(&text, &mut seen),
                Err(_) => gone.push((pid, fd)),
            }
        }
        for d in gone {
            known.descriptors.remove(&d);
        }
        seen
    }

    /// Looks through every open file of the processes `wanted` says, for watch
    /// descriptors; records them and the processes looked at in `known`.
    fn discover(&self, known: &mut Known, wanted: impl Fn(u32) -> bool) {
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return;
        };
        for proc in procs.flatten() {
            let Some(pid) = proc
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !wanted(pid) || pid == std::process::id() {
                continue;
            }
            let number = open_files(pid);
            let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) else {
                continue;
            };
            known.descriptors.retain(|(p, _)| *p != pid);
            let mut counted = 0;
            for fd in fds.flatten() {
                let Some(n) = fd.file_name().to_str().and_then(|f| f.parse::<u32>().ok()) else {
                    continue;
                };
                counted += 1;
                let Ok(target) = std::fs::read_link(fd.path()) else {
                    continue;
                };
                let target = target.as_os_str().as_encoded_bytes();
                if target.starts_with(b"anon_inode:inotify")
                    || target.starts_with(b"anon_inode:[fanotify]")
                {
                    known.descriptors.insert((pid, n));
                }
            }
            known.processes.insert(pid, (number, counted));
        }
    }

    fn parse_fdinfo(&self, text: &str, seen: &mut Seen) {
        for line in text.lines() {
            let Some(rest) = line
                .strip_prefix("inotify ")
                .or_else(|| line.strip_prefix("fanotify "))
            else {
                continue;
            };
            let field = |name: &str| {
                rest.split(' ')
                    .find_map(|f| f.strip_prefix(name))
                    .and_then(|v| u64::from_str_radix(v, 16).ok())
            };
            match (field("ino:"), field("sdev:"), field("mnt_id:")) {
                (Some(ino), Some(sdev), _) if sdev == self.sdev => {
                    seen.nodes.insert(ino);
                }
                // A file-system mark (sdev, no inode) or a mount mark.
                (None, Some(sdev), _) if sdev == self.sdev => seen.everything = true,
                (None, None, Some(id)) if Some(id) == self.mnt_id => seen.everything = true,
                _ => {}
            }
        }
    }
}

/// How many files process `pid` has open, as the size of `/proc/PID/fd` says (Linux 6.2);
/// 0 where the kernel does not say, or the process is gone.
fn open_files(pid: u32) -> u64 {
    std::fs::metadata(format!("/proc/{pid}/fd")).map_or(0, |m| m.len())
}

/// The mount id of `mountpoint` (the first field of its /proc/self/mountinfo line).
fn mount_id(mountpoint: &Path) -> Option<u64> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mountpoint.to_str()?;
    info.lines().find_map(|l| {
        let mut f = l.split(' ');
        let id = f.next()?.parse().ok()?;
        (f.nth(3)? == want).then_some(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watchers() -> Scanner {
        Scanner {
            sdev: 0x2d,
            mnt_id: Some(0x30),
        }
    }

    #[test]
    fn fdinfo_lines_name_the_watched_nodes() {
        let w = watchers();
        let mut seen = Seen::default();
        w.parse_fdinfo(
            "pos:\t0\nflags:\t00\nmnt_id:\t15\ninotify wd:1 ino:1 sdev:2d mask:fce ignored_mask:0\n\
             inotify wd:2 ino:1f sdev:2d mask:fce ignored_mask:0\n\
             inotify wd:3 ino:7 sdev:800001 mask:fce ignored_mask:0\n",
            &mut seen,
        );
        assert_eq!(seen.nodes, HashSet::from([1, 0x1f]));
        assert!(!seen.everything);
        w.parse_fdinfo(
            "fanotify mnt_id:30 mflags:0 mask:3b ignored_mask:0\n",
            &mut seen,
        );
        assert!(seen.everything, "a mark on the whole mount");
        let mut seen = Seen::default();
        w.parse_fdinfo(
            "fanotify sdev:2d mflags:0 mask:3b ignored_mask:0\n",
            &mut seen,
        );
        assert!(seen.everything, "a mark on the whole file system");
    }
}
