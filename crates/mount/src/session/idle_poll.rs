//! Idle polling (`crossfs mount --idle-poll US`): while FUSE requests keep coming, the
//! CPUs the mount may run on are kept out of their idle halt by a spinning thread each, for
//! at most the window after the last request.
//!
//! Why: a FUSE request is a chain of wake-ups (the program's request wakes a worker, the
//! worker's answer wakes the program, and a 9P round trip two more). On a CPU that sits
//! idle the kernel halts it at once unless its idle driver polls first, and in a VM waking
//! a halted vCPU goes through the hypervisor: 40-50 us on the project's 2-core VM, most of
//! what a request costs there (docs/bench.md, "Why a FUSE request costs what it does
//! here"). A CPU running a thread is never halted: a wake-up aimed at it is an interrupt
//! to a running vCPU.
//!
//! How: one thread per CPU of the mount's affinity mask, pinned there, at `SCHED_IDLE`
//! (the kernel runs it only when that CPU has nothing else to run, and any other thread
//! that wakes there preempts it at once; the scheduler treats such a CPU as idle when it
//! places a waking thread). Each spins while the last request is younger than the window,
//! then sleeps until the next request. Nothing waits for these threads and they touch
//! nothing but two atomics: they only keep CPUs busy, at the cost of that CPU time (and a
//! cgroup's CPU quota, where one is set).
//!
//! What this must not do: run anything for a request (the workers do), or spin while no
//! request came for a window.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Keeps the mount's CPUs awake for `window` after each request (see the module doc).
pub(crate) struct IdlePoll {
    shared: Arc<Shared>,
}

struct Shared {
    epoch: Instant,
    window_ns: u64,
    /// Nanoseconds from `epoch` to the last request (0: none yet).
    last: AtomicU64,
    /// Some thread sleeps (or is about to): a request wakes them.
    sleeping: AtomicBool,
    stop: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

/// How long a sleeping thread waits before looking again, should a wake-up be missed.
const SLEEP_CHECK: Duration = Duration::from_millis(500);

/// The window `auto` gives, where it polls: about twice the gap between the requests of
/// one program's file (tar's create, write and setattrs), so that a CPU stays awake
/// through a file and between files of a busy program.
pub(crate) const AUTO_WINDOW: Duration = Duration::from_micros(200);

/// The most CPUs `auto` keeps awake. Every CPU of the mount spins after each request, so
/// on a larger guest a busy program would have the mount burn that many CPUs of the host
/// for what one or two of them need (the program's and a worker's); polling there waits
/// for a way to keep only those awake.
pub(crate) const AUTO_MAX_CPUS: u32 = 4;

/// What `--idle-poll auto` decides on this machine, and why (for the log); see
/// [`Machine::decide`].
pub fn auto_window() -> (Option<Duration>, &'static str) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    let driver = read("/sys/devices/system/cpu/cpuidle/current_driver").unwrap_or_default();
    let polls = read("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    Machine {
        virtual_machine: cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "hypervisor")),
        kernel_polls: driver == "haltpoll" && polls > 0,
        cpu_quota: cpu_quota(),
        cpus: rustix::thread::sched_getaffinity(None).map_or(0, |set| set.count()),
    }
    .decide()
}

/// What `auto` looks at.
#[derive(Clone, Copy)]
struct Machine {
    /// The CPU flags say `hypervisor`.
    virtual_machine: bool,
    /// cpuidle-haltpoll polls before halting (`guest_halt_poll_ns` above 0).
    kernel_polls: bool,
    /// A cgroup limits this process's CPU time.
    cpu_quota: bool,
    /// The CPUs the mount may run on.
    cpus: u32,
}

impl Machine {
    /// [`AUTO_WINDOW`] in a virtual machine of at most [`AUTO_MAX_CPUS`] CPUs whose kernel
    /// does not poll before halting an idle CPU itself and whose CPU time this process may
    /// spend freely; `None` otherwise.
    fn decide(&self) -> (Option<Duration>, &'static str) {
        if !self.virtual_machine {
            (
                None,
                "not a virtual machine: an idle CPU wakes in microseconds",
            )
        } else if self.kernel_polls {
            (None, "the kernel polls before halting (cpuidle-haltpoll)")
        } else if self.cpu_quota {
            (None, "a CPU quota applies (spinning would spend it)")
        } else if self.cpus > AUTO_MAX_CPUS {
            (
                None,
                "more than 4 CPUs: each would spin after every request",
            )
        } else {
            (
                Some(AUTO_WINDOW),
                "a virtual machine that halts idle CPUs at once",
            )
        }
    }
}

/// Whether this process's cgroup, or one above it, limits its CPU time (cgroup v2
/// `cpu.max`, v1 `cpu.cfs_quota_us`).
fn cpu_quota() -> bool {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (root, file) = match controllers {
            "" => ("/sys/fs/cgroup", "cpu.max"),
            c if c.split(',').any(|c| c == "cpu") => ("/sys/fs/cgroup/cpu", "cpu.cfs_quota_us"),
            _ => continue,
        };
        let mut dir = std::path::PathBuf::from(format!("{root}{path}"));
        loop {
            if let Ok(v) = std::fs::read_to_string(dir.join(file)) {
                let limit = v.split_whitespace().next().unwrap_or("max");
                if limit != "max" && limit != "-1" {
                    return true;
                }
            }
            if dir == std::path::Path::new(root) || !dir.pop() {
                break;
            }
        }
    }
    false
}

impl IdlePoll {
    /// Starts one thread per CPU the process may run on, polling for `window` after each
    /// request. `None` (and a log line) if no thread could be started.
    pub(crate) fn start(window: Duration) -> Option<IdlePoll> {
        let shared = Arc::new(Shared {
            epoch: Instant::now(),
            window_ns: u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
            last: AtomicU64::new(0),
            sleeping: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let cpus = rustix::thread::sched_getaffinity(None).ok()?;
        let mut started = 0;
        for cpu in (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| cpus.is_set(c)) {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("crossfs-poll-{cpu}"))
                .spawn(move || s.poll_on(cpu));
            match spawned {
                Ok(_) => started += 1,
                Err(e) => tracing::info!("idle polling: no thread for CPU {cpu}: {e}"),
            }
        }
        tracing::debug!(cpus = started, ?window, "idle polling started");
        (started > 0).then_some(IdlePoll { shared })
    }

    /// A request came: the CPUs stay awake for the window from now.
    pub(crate) fn request(&self) {
        let s = &self.shared;
        s.last.store(s.now(), SeqCst);
        if s.sleeping.load(SeqCst) {
            s.sleeping.store(false, SeqCst);
            let _held = crate::sync::lock(&s.lock);
            s.wake.notify_all();
        }
    }
}

impl Drop for IdlePoll {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        let _held = crate::sync::lock(&self.shared.lock);
        self.shared.wake.notify_all();
    }
}

impl Shared {
    /// Nanoseconds from `epoch`, from 1.
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).map_or(u64::MAX, |n| n.saturating_add(1))
    }

    fn within_window(&self) -> bool {
        let last = self.last.load(SeqCst);
        last != 0 && self.now().saturating_sub(last) < self.window_ns
    }

    /// The thread of CPU `cpu`: pinned there, at the lowest priority, spinning while
    /// requests come.
    fn poll_on(&self, cpu: usize) {
        let mut only = rustix::thread::CpuSet::new();
        only.set(cpu);
        if rustix::thread::sched_setaffinity(None, &only).is_err() || !lowest_priority() {
            // Spinning at a normal priority would take the CPU from the programs.
            tracing::info!("idle polling: CPU {cpu} cannot be polled at the lowest priority");
            return;
        }
        while !self.stop.load(SeqCst) {
            {
                let mut held = crate::sync::lock(&self.lock);
                // Set before the look at the clock, which a request sets before looking
                // at this: either this sees the request, or the request sees the sleeper.
                self.sleeping.store(true, SeqCst);
                while !self.within_window() && !self.stop.load(SeqCst) {
                    held = self
                        .wake
                        .wait_timeout(held, SLEEP_CHECK)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
            }
            while self.within_window() {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// Moves this thread to `SCHED_IDLE`; false if the kernel refuses.
#[allow(unsafe_code)]
fn lowest_priority() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call, which only reads it; pid 0 is
    // the calling thread.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_opens_at_a_request_and_closes_after_it() {
        let poll = IdlePoll::start(Duration::from_millis(50)).expect("a polling thread");
        assert!(!poll.shared.within_window(), "no request yet");
        poll.request();
        assert!(poll.shared.within_window());
        std::thread::sleep(Duration::from_millis(120));
        assert!(!poll.shared.within_window());
        // The threads went to sleep: a request wakes them (they clear nothing else).
        poll.request();
        assert!(poll.shared.within_window());
    }

    #[test]
    fn auto_polls_only_in_a_small_vm_that_halts_at_once_and_has_no_cpu_quota() {
        let vm = Machine {
            virtual_machine: true,
            kernel_polls: false,
            cpu_quota: false,
            cpus: 2,
        };
        assert_eq!(vm.decide().0, Some(AUTO_WINDOW));
        let at_most = Machine {
            cpus: AUTO_MAX_CPUS,
            ..vm
        };
        assert_eq!(at_most.decide().0, Some(AUTO_WINDOW));
        for other in [
            Machine {
                virtual_machine: false,
                ..vm
            },
            Machine {
                kernel_polls: true,
                ..vm
            },
            Machine {
                cpu_quota: true,
                ..vm
            },
            Machine {
                cpus: AUTO_MAX_CPUS + 1,
                ..vm
            },
        ] {
            let (window, why) = other.decide();
            assert_eq!(window, None, "{why}");
        }
    }
}
