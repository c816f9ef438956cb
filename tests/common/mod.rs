//! Helpers for the black-box tests: run the real `crossfs` binary, real sockets, real mounts.
#![allow(dead_code)] // each test file uses a different subset

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn crossfs_bin() -> &'static str {
    env!("CARGO_BIN_EXE_crossfs")
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A TCP port on loopback that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `ready` until it holds or `timeout` passes; panics with `what` on timeout.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `crossfs serve` process, killed when dropped.
pub struct Serve {
    pub child: Child,
    pub control: PathBuf,
    pub listen: String,
    _dir: tempfile::TempDir,
}

impl Serve {
    /// Starts `crossfs serve EXPORT --listen LISTEN --control ...` plus `extra` args, and waits
    /// until its control socket answers (so every listener is bound).
    pub fn start(export: &Path, listen: &str, extra: &[&str]) -> Serve {
        Serve::start_with(Command::new(crossfs_bin()), export, listen, extra)
    }

    /// As [`Serve::start`], with the open-file limit (soft and hard) at `nofile`, as a user's
    /// `ulimit -n` would leave it (through util-linux's prlimit, which execs the server).
    pub fn start_limited(export: &Path, listen: &str, extra: &[&str], nofile: u32) -> Serve {
        let mut prlimit = Command::new("prlimit");
        prlimit
            .arg(format!("--nofile={nofile}:{nofile}"))
            .arg("--")
            .arg(crossfs_bin());
        Serve::start_with(prlimit, export, listen, extra)
    }

    fn start_with(mut command: Command, export: &Path, listen: &str, extra: &[&str]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("control.sock");
        let child = command
            .arg("serve")
            .arg(export)
            .args(["--listen", listen, "--control"])
            .arg(&control)
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .expect("starting crossfs serve");
        let mut serve = Serve {
            child,
            control,
            listen: listen.to_owned(),
            _dir: dir,
        };
        let control = serve.control.clone();
        let child = &mut serve.child;
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("crossfs serve exited early: {status}");
            }
            if std::os::unix::net::UnixStream::connect(&control).is_ok() {
                break;
            }
            if started.elapsed() > Duration::from_secs(20) {
                panic!(
                    "timed out waiting for crossfs serve to listen; it is {}",
                    process_state(child.id())
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        serve
    }

    /// `crossfs stats --json` against this server.
    pub fn stats(&self) -> serde_json::Value {
        stats_json(&self.control)
    }

    /// Total count of one message type (e.g. "Twalk") since the server started.
    pub fn count(&self, message: &str) -> u64 {
        self.stats()["total"][message]["count"]
            .as_u64()
            .unwrap_or(0)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What process `pid` is doing, per thread (state and kernel stack), for a test that
/// waited on it in vain.
pub fn process_state(pid: u32) -> String {
    let mut out = String::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
    for task in tasks.into_iter().flatten().flatten() {
        let p = task.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
        out.push_str(&format!(
            "\n-- {} {}\n{}",
            read("stat"),
            read("wchan"),
            read("stack")
        ));
    }
    out
}

/// `crossfs stats --json` against a control socket.
pub fn stats_json(control: &Path) -> serde_json::Value {
    let out = run_ok(
        Command::new(crossfs_bin())
            .arg("stats")
            .arg(control)
            .arg("--json"),
    );
    serde_json::from_slice(&out.stdout).expect("stats --json prints JSON")
}

/// Runs a command, panicking with its output if it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A directory of busybox applet links, so host-side scripts run the same tools as the guest.
/// Built aside and renamed into place, so tests running at once never see it half made.
pub fn busybox_path() -> PathBuf {
    let dir = repo_root().join("target/busybox-bin");
    if !dir.exists() {
        let tmp = repo_root().join(format!("target/busybox-bin.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        run_ok(Command::new("busybox").arg("--install").arg("-s").arg(&tmp));
        if std::fs::rename(&tmp, &dir).is_err() {
            // Another test got there first with an identical directory.
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    dir
}

/// Runs tests/scripts/ops.sh on `dir` with busybox tools and returns what it printed.
///
/// The output goes to a file, not a pipe: busybox `cat` copies with sendfile(2), which into
/// a pipe queues references to the file's page-cache pages rather than copies, so a reader
/// slower than the script would read what the script's next step (a truncation) left in
/// those pages ("hel" and zeros where "hello\nmore" was printed). Into a file the bytes are
/// copied when they are written.
pub fn run_ops_script(dir: &Path) -> String {
    let mut out = tempfile::tempfile().unwrap();
    let mut cmd = Command::new("busybox");
    cmd.arg("sh")
        .arg(repo_root().join("tests/scripts/ops.sh"))
        .arg(dir)
        .env("PATH", busybox_path())
        .stdout(out.try_clone().unwrap());
    let result = run_ok(&mut cmd);
    assert!(result.stdout.is_empty());
    let mut printed = String::new();
    std::io::Seek::rewind(&mut out).unwrap();
    std::io::Read::read_to_string(&mut out, &mut printed).unwrap();
    printed
}

/// Asserts two script outputs are equal, printing a line diff when they are not.
pub fn assert_same_output(expected_label: &str, expected: &str, actual_label: &str, actual: &str) {
    if expected == actual {
        return;
    }
    let mut diff = String::new();
    let (e, a): (Vec<_>, Vec<_>) = (expected.lines().collect(), actual.lines().collect());
    for i in 0..e.len().max(a.len()) {
        let (l, r) = (
            e.get(i).copied().unwrap_or("<none>"),
            a.get(i).copied().unwrap_or("<none>"),
        );
        if l != r {
            diff.push_str(&format!(
                "line {}:\n  {expected_label}: {l}\n  {actual_label}: {r}\n",
                i + 1
            ));
        }
    }
    panic!("{actual_label} differs from {expected_label}:\n{diff}");
}

/// A `crossfs mount` process; unmounted (SIGTERM, then a lazy umount) when dropped.
pub struct Mount {
    pub child: Child,
    pub mountpoint: PathBuf,
    pub control: PathBuf,
    _dir: tempfile::TempDir,
}

fn device_of(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| m.dev()).unwrap_or(0)
}

impl Mount {
    /// Starts `crossfs mount ADDR <tempdir> --control ...` plus `extra`, and waits until the
    /// mount is up (the mount point's device changes) and its control socket answers.
    pub fn start(addr: &str, extra: &[&str]) -> Mount {
        let mount = Mount::start_mounted(addr, extra);
        // The control socket is bound just after the mount appears: a test that asks for
        // the mount's stats at once must not race it.
        let control = mount.control.clone();
        wait_until(
            "the mount's control socket",
            Duration::from_secs(20),
            || std::os::unix::net::UnixStream::connect(&control).is_ok(),
        );
        mount
    }

    /// As [`Mount::start`], returning as soon as the file system is mounted, before the
    /// mount process has connected its change events or bound its control socket.
    pub fn start_mounted(addr: &str, extra: &[&str]) -> Mount {
        let dir = tempfile::tempdir().unwrap();
        let mountpoint = dir.path().join("mnt");
        std::fs::create_dir(&mountpoint).unwrap();
        let control = dir.path().join("mount.ctl");
        let child = Command::new(crossfs_bin())
            .arg("mount")
            .arg(addr)
            .arg(&mountpoint)
            .arg("--control")
            .arg(&control)
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .expect("starting crossfs mount");
        let mut mount = Mount {
            child,
            mountpoint,
            control,
            _dir: dir,
        };
        let parent = device_of(mount._dir.path());
        let (mnt, child) = (mount.mountpoint.clone(), &mut mount.child);
        wait_until(
            "crossfs mount to be mounted",
            Duration::from_secs(20),
            || {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("crossfs mount exited early: {status}");
                }
                device_of(&mnt) != parent
            },
        );
        mount
    }

    /// `crossfs sync` of this mount, as it ended.
    pub fn sync(&self) -> Output {
        Command::new(crossfs_bin())
            .arg("sync")
            .arg(&self.mountpoint)
            .output()
            .unwrap()
    }

    /// `crossfs stats --json` against this mount's control socket.
    pub fn stats(&self) -> serde_json::Value {
        stats_json(&self.control)
    }

    /// Waits (30 s at most) until the mount follows the server's change events, so that
    /// its directory replicas may answer.
    pub fn wait_following(&self) {
        wait_until(
            "the mount to follow change events",
            Duration::from_secs(30),
            || {
                std::os::unix::net::UnixStream::connect(&self.control).is_ok()
                    && self.stats()["replicas"]["following"] == true
            },
        );
    }

    /// Sends SIGTERM and waits for the process to unmount and exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if start.elapsed() > Duration::from_secs(15) {
                let state = process_state(self.child.id());
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&self.mountpoint)
                    .status();
                let _ = self.child.kill();
                panic!("crossfs mount did not exit within 15 s of SIGTERM; its threads:{state}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let pid = self.child.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let start = Instant::now();
            while self.child.try_wait().ok().flatten().is_none()
                && start.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Never leave a mount behind, whatever happened above.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .stderr(Stdio::null())
            .status();
    }
}

/// Whether `path` is a mount point right now (per /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let target = path.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(target))
}

/// The log mount(8)'s helper gives the client it starts for mount point `dir` (the
/// README's /var/log/crossfs/NAME.log).
pub fn helper_client_log(dir: &Path) -> PathBuf {
    let canonical = std::fs::canonicalize(dir).unwrap();
    let name = canonical.to_str().unwrap()[1..].replace('/', "-");
    PathBuf::from(format!("/var/log/crossfs/{name}.log"))
}

/// What a stat shows that the host decides: type and mode, owner, size, times to the
/// nanosecond.
pub fn shown(path: &Path) -> (u32, u32, u32, u64, [(i64, i64); 3]) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    (
        m.mode(),
        m.uid(),
        m.gid(),
        m.size(),
        [
            (m.atime(), m.atime_nsec()),
            (m.mtime(), m.mtime_nsec()),
            (m.ctime(), m.ctime_nsec()),
        ],
    )
}

/// An export holding one file, served on a unix socket, beside an empty mount point.
pub struct OneFileExport {
    pub serve: Serve,
    pub addr: String,
    pub export: PathBuf,
    pub mnt: PathBuf,
    /// Holds `export`, `mnt` and the socket; removed last.
    pub work: tempfile::TempDir,
}

/// Serves a new directory holding file `name` with `content`, with `mnt` made beside it.
pub fn serve_one_file(name: &str, content: &[u8]) -> OneFileExport {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(export.join(name), content).unwrap();
    let addr = format!("unix:{}", work.path().join("s.sock").display());
    let serve = Serve::start(&export, &addr, &[]);
    OneFileExport {
        serve,
        addr,
        export,
        mnt,
        work,
    }
}

/// Makes `cmd`'s child inherit descriptor `raw` as descriptor 3 (as libvirt and Kata hand
/// virtiofsd its listening socket).
pub fn pass_as_fd3(cmd: &mut Command, raw: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe calls (dup2, fcntl) on
    // descriptors this process owns; no memory is touched.
    unsafe {
        cmd.pre_exec(move || {
            // The copy at 3 must survive exec: dup2 makes it without FD_CLOEXEC, and a
            // descriptor already at 3 has the flag cleared instead.
            let ok = if raw == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(raw, 3)
            };
            if ok == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A finished command's standard error, as text.
pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A small deterministic generator (xorshift), so a failure can be replayed by its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Lines between two marker lines (`=== NAME begin`, `=== NAME end`) of a QEMU guest's output.
pub fn section<'a>(output: &'a str, name: &str) -> &'a str {
    let begin = format!("=== {name} begin\n");
    let end = format!("=== {name} end");
    let start = output
        .find(&begin)
        .unwrap_or_else(|| panic!("guest output has no `{name}` section:\n{output}"))
        + begin.len();
    let stop = output[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("guest output has an unterminated `{name}` section:\n{output}"));
    &output[start..start + stop]
}

/// `scripts/guest/run.sh` booting the QEMU guest with `script` (written into `dir`) as its
/// test, the ops script at /test/ops.sh, and the 9P forward to 127.0.0.1:`port` (one host
/// connection per guest connection).
pub fn guest_command(dir: &Path, script: &str, port: u16, timeout_secs: u32) -> Command {
    let guest_script = dir.join("guest.sh");
    std::fs::write(&guest_script, script).unwrap();
    let mut cmd = Command::new(repo_root().join("scripts/guest/run.sh"));
    cmd.args(["--port", &port.to_string(), "--fwd", "socat"])
        .args(["--timeout", &timeout_secs.to_string()])
        .arg("--script")
        .arg(guest_script)
        .arg("--add")
        .arg(format!(
            "{}:/test/ops.sh",
            repo_root().join("tests/scripts/ops.sh").display()
        ));
    cmd
}

/// What the guest printed (also printed here for the test's log), once `run.sh` succeeded.
pub fn guest_stdout(out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("--- the guest ---\n{stdout}");
    assert!(
        out.status.success(),
        "guest failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `dirs` directories of 19 small C files each (every file's content names it): a tree of
/// `20 * dirs` entries, made natively in `root`.
pub fn make_source_tree(root: &Path, dirs: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("d{d:03}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..19 {
            let text = format!("// d{d:03}/f{f:02}\nint x;\n");
            std::fs::write(dir.join(format!("f{f:02}.c")), text).unwrap();
        }
    }
}
