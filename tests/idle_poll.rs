//! Idle polling (`crossfs mount --idle-poll US`): a thread per CPU of the mount, pinned there
//! at `SCHED_IDLE`, spins while FUSE requests come and sleeps once none came for the
//! window; the mount's files read and write as without it. Against a real `crossfs serve`
//! and a real FUSE mount, as root. Nothing asserts how fast anything is.

mod common;

use std::fs;
use std::time::Duration;

use common::*;

/// The mount's polling threads: (thread id, the CPUs it may run on, its scheduling policy,
/// the CPU time it used in clock ticks).
fn pollers(pid: u32) -> Vec<(u32, String, i32, u64)> {
    let mut out = Vec::new();
    for task in fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let name = fs::read_to_string(task.join("comm")).unwrap_or_default();
        if !name.starts_with("crossfs-poll-") {
            continue;
        }
        let tid: u32 = task.file_name().unwrap().to_str().unwrap().parse().unwrap();
        let status = fs::read_to_string(task.join("status")).unwrap();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        let stat = fs::read_to_string(task.join("stat")).unwrap();
        // After the command's closing parenthesis: state is field 3; utime, stime 14, 15;
        // policy 41.
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let policy = fields[38].parse().unwrap();
        out.push((tid, cpus, policy, ticks));
    }
    out.sort();
    out
}

/// A server of a new directory and a mount of it with `mount_args`.
fn served(mount_args: &[&str]) -> (tempfile::TempDir, Serve, Mount) {
    tools::assert_root();
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    fs::create_dir(&export).unwrap();
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let serve = Serve::start(&export, &addr, &[]);
    let mount = Mount::start(&addr, mount_args);
    (dir, serve, mount)
}

fn cpu_time(pid: u32) -> u64 {
    pollers(pid).iter().map(|p| p.3).sum()
}

#[test]
fn polling_threads_spin_at_the_lowest_priority_only_while_requests_come() {
    let (_dir, _serve, mount) = served(&["--idle-poll", "2000"]);
    let pid = mount.child.id();

    // One thread per CPU the mount may run on, each pinned to its own, at SCHED_IDLE.
    let cpus = std::thread::available_parallelism().unwrap().get();
    wait_until("the polling threads", Duration::from_secs(10), || {
        pollers(pid).len() == cpus
    });
    let threads = pollers(pid);
    let mut pinned: Vec<&str> = threads.iter().map(|t| t.1.as_str()).collect();
    pinned.sort();
    pinned.dedup();
    assert_eq!(pinned.len(), cpus, "each on a CPU of its own: {threads:?}");
    for t in &threads {
        assert!(t.1.parse::<usize>().is_ok(), "pinned to one CPU: {t:?}");
        assert_eq!(t.2, libc::SCHED_IDLE, "{t:?}");
    }

    // Files read and write through the mount as ever, and the requests keep the threads
    // busy: they use CPU time while the work goes on.
    let before = cpu_time(pid);
    let mnt = &mount.mountpoint;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut i = 0u32;
    while cpu_time(pid) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the threads never ran"
        );
        let p = mnt.join(format!("f{}", i % 50));
        fs::write(&p, i.to_le_bytes()).unwrap();
        assert_eq!(fs::read(&p).unwrap(), i.to_le_bytes());
        let _ = fs::metadata(mnt.join("missing"));
        i += 1;
    }

    // No requests: after the window they sleep, using no CPU at all.
    std::thread::sleep(Duration::from_millis(300));
    let idle = cpu_time(pid);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(cpu_time(pid), idle, "polling with no requests");
    // They are asleep, not spinning (state S).
    for t in pollers(pid) {
        let stat = fs::read_to_string(format!("/proc/{pid}/task/{}/stat", t.0)).unwrap();
        let state = stat.rsplit_once(") ").unwrap().1.chars().next().unwrap();
        assert_eq!(state, 'S', "{t:?}");
    }
}

#[test]
fn without_the_option_there_are_no_polling_threads() {
    let (_dir, _serve, mount) = served(&["--idle-poll", "0"]);
    fs::write(mount.mountpoint.join("f"), b"x").unwrap();
    assert!(pollers(mount.child.id()).is_empty());
}

mod tools;
