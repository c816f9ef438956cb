//! Workload 13: how soon a watcher on the target sees a change made on the host.
//!
//! The mission's promise is watchers that never miss a host change; this is how long they
//! wait for it. The change is made natively, in the tree behind the target (`Ctx::prep`),
//! and an inotify watch on the target's directory (`Ctx::work`) waits for its event. Each
//! change follows a pause longer than the event hub's quiet window (30 ms), as an editor's
//! save does: what is measured is a lone change, not a burst (which is coalesced on
//! purpose). The changes cycle through create (a file written), append, chmod, rename,
//! unlink, mkdir and rmdir, each awaited by the event a local program's change would give.
//! One change before them is not counted: the first event after a watch is added includes
//! the target finding the watch, once.
//!
//! A target that does not pass host changes on (a mount that follows no events, sshfs,
//! bindfs) never gives the event: after [`PATIENCE`] a change counts as missed, and after
//! [`MISSES_BEFORE_GIVING_UP`] misses the run stops. The figures are then the share of
//! changes seen and the latency of those that were.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fd::OwnedFd;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use super::{Ctx, MetricDef};
use crate::config::Sizes;
use crate::error::{IoContext, WorkloadError};
use crate::stats::Unit;
use crate::target::TargetKind;

pub(crate) const METRICS: &[MetricDef] = &[
    MetricDef {
        id: "latency-p50",
        label: "host change -> watcher's event on the target, median (ms)",
        unit: Unit::Milliseconds,
        key_messages: &[],
    },
    MetricDef {
        id: "latency-p99",
        label: "host change -> watcher's event on the target, p99 (ms)",
        unit: Unit::Milliseconds,
        key_messages: &[],
    },
    MetricDef {
        id: "seen",
        label: "host changes the watcher saw (1.00 = all)",
        unit: Unit::Ratio,
        key_messages: &[],
    },
];

/// The pause before each change: longer than the event hub's quiet window (20 ms), so
/// each change is the first of a quiet period.
const PAUSE: Duration = Duration::from_millis(30);
/// How long a change's event is awaited before the change counts as missed.
const PATIENCE: Duration = Duration::from_secs(1);
/// Misses after which the run stops: the target does not pass host changes on.
const MISSES_BEFORE_GIVING_UP: usize = 3;
/// The file of the change made before the measured ones.
const WARM_UP: &str = "warm-up";

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "watch latency: {} changes made on the host one at a time ({} ms apart), each awaited \
         by inotify on the target",
        s.latency_changes,
        PAUSE.as_millis()
    )
}

/// One change of the cycle, made natively, and the event a watcher on the target awaits.
struct Step {
    /// Which of the cycle's seven changes.
    kind: usize,
    /// Which pass over the cycle (names are new in each).
    round: usize,
}

impl Step {
    fn nth(i: usize) -> Self {
        Self {
            kind: i % 7,
            round: i / 7,
        }
    }

    fn file(&self) -> String {
        format!("f{}", self.round)
    }

    fn moved(&self) -> String {
        format!("g{}", self.round)
    }

    fn dir(&self) -> String {
        format!("d{}", self.round)
    }

    /// The name the awaited event carries.
    fn name(&self) -> String {
        match self.kind {
            0..=2 => self.file(),
            3 | 4 => self.moved(),
            _ => self.dir(),
        }
    }

    /// Events of which any one is the awaited one.
    fn awaited(&self) -> ReadFlags {
        match self.kind {
            0 | 5 => ReadFlags::CREATE,
            1 => ReadFlags::MODIFY | ReadFlags::CLOSE_WRITE,
            2 => ReadFlags::ATTRIB,
            3 => ReadFlags::MOVED_TO,
            _ => ReadFlags::DELETE,
        }
    }

    /// Makes the change in `dir` (the host's side).
    fn make(&self, dir: &Path) -> std::io::Result<()> {
        use std::io::Write;
        match self.kind {
            0 => fs::write(dir.join(self.file()), b"one\n"),
            1 => fs::OpenOptions::new()
                .append(true)
                .open(dir.join(self.file()))?
                .write_all(b"two\n"),
            2 => fs::set_permissions(dir.join(self.file()), fs::Permissions::from_mode(0o600)),
            3 => fs::rename(dir.join(self.file()), dir.join(self.moved())),
            4 => fs::remove_file(dir.join(self.moved())),
            5 => fs::create_dir(dir.join(self.dir())),
            _ => fs::remove_dir(dir.join(self.dir())),
        }
    }
}

/// An inotify watch on one directory, read until an awaited event comes.
struct Watch {
    fd: OwnedFd,
    buf: Vec<std::mem::MaybeUninit<u8>>,
}

impl Watch {
    fn on(dir: &Path) -> Result<Self, WorkloadError> {
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)
            .map_err(|e| WorkloadError::io("inotify_init1", e.into()))?;
        let mask = WatchFlags::CREATE
            | WatchFlags::MODIFY
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::ATTRIB
            | WatchFlags::MOVED_TO
            | WatchFlags::MOVED_FROM
            | WatchFlags::DELETE;
        inotify::add_watch(&fd, dir, mask)
            .map_err(std::io::Error::from)
            .ctx(|| format!("inotify_add_watch {dir:?}"))?;
        Ok(Self {
            fd,
            buf: vec![std::mem::MaybeUninit::uninit(); 64 << 10],
        })
    }

    /// Waits until `deadline` for an event on `name` with one of `awaited`; returns when
    /// it was read, or `None` at the deadline.
    fn await_event(
        &mut self,
        name: &str,
        awaited: ReadFlags,
        deadline: Instant,
    ) -> Result<Option<Instant>, WorkloadError> {
        loop {
            {
                let mut reader = inotify::Reader::new(&self.fd, &mut self.buf);
                loop {
                    match reader.next() {
                        Ok(ev) => {
                            let on_name = ev.file_name().map(|n| OsStr::from_bytes(n.to_bytes()))
                                == Some(OsStr::new(name));
                            if on_name && ev.events().intersects(awaited) {
                                return Ok(Some(Instant::now()));
                            }
                        }
                        Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => break,
                        Err(e) => return Err(WorkloadError::io("reading inotify", e.into())),
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let left = deadline - now;
            let ts = Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match poll(&mut fds, Some(&ts)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(WorkloadError::io("poll on inotify", e.into())),
            }
        }
    }
}

/// The value at quantile `q` of sorted `xs` (nearest rank).
fn quantile(xs: &[f64], q: f64) -> f64 {
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    if ctx.target.kind == TargetKind::Mount && ctx.prep == ctx.work {
        return Err(WorkloadError::Prepare(
            "the tree behind this mount is not known, so no change can be made on the host".into(),
        ));
    }
    let mut watch = Watch::on(&ctx.work)?;
    // One change first, not counted: the first event after a watch is added pays for a
    // mount finding the watch (crossfs reads /proc, some milliseconds), and with 98
    // changes the p99 is the slowest one.
    std::thread::sleep(PAUSE);
    fs::write(ctx.prep.join(WARM_UP), b"").ctx(|| "the warm-up change on the host".to_string())?;
    watch.await_event(WARM_UP, ReadFlags::CREATE, Instant::now() + PATIENCE)?;
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut misses = 0;
    let mut made = 0;
    for i in 0..ctx.sizes.latency_changes {
        let step = Step::nth(i);
        std::thread::sleep(PAUSE);
        let before = Instant::now();
        step.make(&ctx.prep)
            .ctx(|| format!("change {i} ({}) on the host", step.name()))?;
        made += 1;
        match watch.await_event(&step.name(), step.awaited(), before + PATIENCE)? {
            Some(at) => latencies.push((at - before).as_secs_f64() * 1e3),
            None => {
                misses += 1;
                if misses >= MISSES_BEFORE_GIVING_UP {
                    break;
                }
            }
        }
    }
    let elapsed = start.elapsed();
    latencies.sort_by(f64::total_cmp);
    if !latencies.is_empty() {
        let n = latencies.len() as u64;
        ctx.record(&METRICS[0], quantile(&latencies, 0.50), elapsed, n, false);
        ctx.record(&METRICS[1], quantile(&latencies, 0.99), elapsed, n, false);
    }
    let seen = latencies.len() as f64 / made.max(1) as f64;
    ctx.record(&METRICS[2], seen, elapsed, made as u64, false);
    if misses > 0 {
        ctx.warnings.push(format!(
            "{misses} of {made} host changes gave the watcher no event within {} s{}",
            PATIENCE.as_secs(),
            if misses >= MISSES_BEFORE_GIVING_UP {
                "; stopped there"
            } else {
                ""
            }
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&xs, 0.5), 50.0);
        assert_eq!(quantile(&xs, 0.99), 99.0);
        assert_eq!(quantile(&[7.0], 0.99), 7.0);
    }

    #[test]
    fn a_native_directory_sees_every_change_of_the_cycle() {
        let dir = tempfile::tempdir().unwrap();
        let mut watch = Watch::on(dir.path()).unwrap();
        for i in 0..14 {
            let step = Step::nth(i);
            step.make(dir.path()).unwrap();
            let seen = watch
                .await_event(&step.name(), step.awaited(), Instant::now() + PATIENCE)
                .unwrap();
            assert!(seen.is_some(), "change {i} on {}", step.name());
        }
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the cycle cleans up"
        );
    }
}
