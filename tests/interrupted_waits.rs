//! Calls that wait for an absent server can be interrupted: with the server down and the
//! mount waiting to reconnect (`--reconnect-wait 60`), a call whose process gets a signal
//! returns EINTR, a killed process is gone within a second, and the mount logs no error
//! for the requests it answered that way. When the server is back, the mount carries on.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const PATIENCE: Duration = Duration::from_secs(20);

/// Whether process `pid` waits for a FUSE request's answer.
fn waits_on_fuse(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w == "request_wait_answer")
}

/// Runs `python3 -c CODE ARGS` and returns what it printed.
fn python(code: &str, args: &[&Path]) -> String {
    let out = run_ok(Command::new("python3").arg("-c").arg(code).args(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A mkdir(2) that the process's own SIGALRM, with a handler, interrupts after 0.3 s: the
/// errno it got. (Straight from libc: Python's os.mkdir would retry after EINTR.)
const MKDIR_ALARMED: &str = r#"
import ctypes, errno, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGALRM, lambda *a: None)
signal.setitimer(signal.ITIMER_REAL, 0.3)
r = libc.mkdir(sys.argv[1].encode(), 0o755)
print("ok" if r == 0 else errno.errorcode[ctypes.get_errno()])
"#;

#[test]
fn a_call_waiting_for_the_server_is_interrupted_by_a_signal() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let addr = format!("unix:{}", work.path().join("s.sock").display());
    let mut server = Serve::start(&export, &addr, &[]);
    let log = work.path().join("mount.log");
    let mut client = Command::new(crossfs_bin())
        .args(["mount", &addr])
        .arg(&mnt)
        .args(["--reconnect-wait", "60"])
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _cleanup = scopeguard(&mnt);
    wait_until("the mount", PATIENCE, || is_mounted(&mnt));
    std::fs::create_dir(mnt.join("before")).unwrap();

    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let logged = |text: &str| std::fs::read_to_string(&log).unwrap().contains(text);
    wait_until("the mount to see the server go", PATIENCE, || {
        logged("connection lost")
    });

    // A signal with a handler: the call returns EINTR (the handler then runs).
    let got = python(MKDIR_ALARMED, &[&mnt.join("alarmed")]);
    assert_eq!(got.trim(), "EINTR");

    // A killed process goes at once, not when the server is back.
    let mut mkdir = Command::new("mkdir")
        .arg(mnt.join("killed"))
        .spawn()
        .unwrap();
    wait_until("mkdir to wait for the server", PATIENCE, || {
        waits_on_fuse(mkdir.id())
    });
    let killed_at = Instant::now();
    mkdir.kill().unwrap();
    mkdir.wait().unwrap();
    let took = killed_at.elapsed();
    assert!(took < Duration::from_secs(1), "SIGKILL took {took:?}");

    // Once the server is back, the mount carries on, and nothing above was an error.
    let _server = Serve::start(&export, &addr, &[]);
    wait_until("the mount to work again", PATIENCE, || {
        std::fs::create_dir(mnt.join("after")).is_ok()
    });
    assert!(export.join("after").is_dir());
    assert!(!export.join("alarmed").exists() && !export.join("killed").exists());
    assert!(
        !logged("Failed to send FUSE reply"),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    run_ok(Command::new("kill").args(["-TERM", &client.id().to_string()]));
    client.wait().unwrap();
}

/// Unmounts `mnt` (lazily) when dropped, whatever the test left.
fn scopeguard(mnt: &Path) -> impl Drop + '_ {
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            if is_mounted(self.0) {
                let _ = Command::new("umount").arg("-l").arg(self.0).status();
            }
        }
    }
    Unmount(mnt)
}
