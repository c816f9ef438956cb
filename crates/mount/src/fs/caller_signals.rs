//! Whether the process behind a FUSE request got a signal, so that a request waiting for
//! the server to come back can answer EINTR and let it go.
//!
//! The kernel's way is FUSE_INTERRUPT, but the session answers the first INTERRUPT with
//! ENOSYS (as fuser 0.18, which the mount was built on, did, never showing it to the file
//! system); after that answer the kernel sends no more, and a process whose request is in userspace waits
//! uninterruptibly, through SIGKILL, until the request is answered. So the mount asks the
//! kernel another way: while a request waits for a lost connection to be replaced, the
//! client checks (every `crossfs_client::GIVE_UP_POLL`) whether the caller's thread has an
//! unblocked signal pending in /proc/TID/status. A fatal signal shows there as SIGKILL,
//! which cannot be blocked; a signal with a handler stays pending until the request is
//! answered, which is what makes the call fail with EINTR and the handler run.

/// Whether thread `tid` has a signal pending that it does not block, or is gone.
pub(crate) fn signal_pending(tid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        // Gone: nobody waits for the answer.
        return true;
    };
    let mask = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = mask("SigPnd:") | mask("ShdPnd:");
    pending & !mask("SigBlk:") != 0
}

/// What requests made on this thread for `pid` (the caller's thread id, as FUSE gives
/// it) give up on.
pub(crate) fn give_up_for(pid: u32) -> Option<crossfs_client::GiveUp> {
    // Pid 0: a caller outside the mount's PID namespace, which /proc here cannot name.
    (pid != 0).then_some(crossfs_client::GiveUp {
        check: signal_pending,
        arg: pid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::process::{kill_process, Pid, Signal};

    #[test]
    fn a_pending_signal_is_seen_and_a_gone_caller_given_up_on() {
        // A stopped process keeps what it is sent pending (but SIGKILL and SIGCONT).
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        kill_process(pid, Signal::STOP).unwrap();
        let stopped = || {
            std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
                .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('T')))
        };
        while !stopped() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!signal_pending(child.id()), "nothing pending yet");
        kill_process(pid, Signal::USR1).unwrap();
        assert!(signal_pending(child.id()), "SIGUSR1 pending");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(signal_pending(child.id()), "a gone caller is given up on");
        assert!(
            give_up_for(0).is_none(),
            "pid 0: a caller /proc cannot name"
        );
    }
}
