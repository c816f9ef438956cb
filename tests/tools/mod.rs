//! Outside test programs (pjdfstest, fsx, fio), installed by `scripts/install-test-deps.sh`:
//! finding them at the pinned version, and running them with a time limit.
#![allow(dead_code)] // each test file uses a different subset

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The path of `name` whose `--version` output contains `version`: from PATH, else from
/// `~/.cargo/bin` (where `cargo install` puts it). Panics with what to run if it is missing.
pub fn tool(name: &str, version: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    let mut seen = Vec::new();
    for path in dirs.into_iter().map(|d| d.join(name)) {
        let Ok(out) = Command::new(&path).arg("--version").output() else {
            continue;
        };
        let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if said.contains(version) {
            return path;
        }
        seen.push(format!("{} says {said:?}", path.display()));
    }
    panic!(
        "{name} {version} is not installed ({}): run scripts/install-test-deps.sh",
        if seen.is_empty() {
            "not found".to_owned()
        } else {
            seen.join("; ")
        }
    );
}

/// Asserts that the tests run as root (they mount, and switch users).
pub fn assert_root() {
    let out = Command::new("id").arg("-u").output().expect("running id");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0",
        "this test mounts and switches users: run it as root"
    );
}

/// A running program whose output goes to a file, killed if it outlives its time limit.
pub struct Run {
    pub what: String,
    pub log: PathBuf,
    child: std::process::Child,
    deadline: Instant,
}

impl Run {
    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub fn start(what: &str, cmd: &mut Command, log: &Path, limit: Duration) -> Run {
        let file = std::fs::File::create(log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Run {
            what: what.to_owned(),
            log: log.to_owned(),
            child,
            deadline: Instant::now() + limit,
        }
    }

    /// Waits for the exit; past the time limit, kills the program and panics (a hang is
    /// a failure).
    pub fn wait(mut self) -> (ExitStatus, String) {
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let out = std::fs::read(&self.log).unwrap_or_default();
                return (status, String::from_utf8_lossy(&out).into_owned());
            }
            if Instant::now() > self.deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let out = std::fs::read(&self.log).unwrap_or_default();
                let tail: String = String::from_utf8_lossy(&out)
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                panic!(
                    "{} did not finish in time (killed); last output:\n{tail}",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs to the end (or panics at the limit) and returns the exit status and the output.
pub fn run_logged(
    what: &str,
    cmd: &mut Command,
    log: &Path,
    limit: Duration,
) -> (ExitStatus, String) {
    Run::start(what, cmd, log, limit).wait()
}

/// Makes `dir` reachable by every user (tempfile makes directories 0700), so tests that
/// switch users can get into it.
pub fn open_to_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

// pjdfstest: its configuration, and what its output says.

pub const PJDFSTEST_VERSION: &str = "0.2.2";

/// naptime 0.01 s: longer than any timestamp granularity involved. The features are those
/// Linux and ext4 have; `dummy_auth` names the users pjdfstest switches to.
pub const PJDFSTEST_CONFIG: &str = r#"
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
naptime = 0.01
allow_remount = false

[dummy_auth]
entries = [["nobody", "nogroup"], ["tests", "tests"]]
"#;

/// Each test's outcome: "ok", "FAILED" or "skipped".
pub type Outcomes = BTreeMap<String, String>;

/// Each test's outcome from pjdfstest's output (`label` names the run in panics).
pub fn parse_outcomes(out: &str, label: &str) -> Outcomes {
    let mut outcomes = Outcomes::new();
    for line in out.lines() {
        let words: Vec<_> = line.split_whitespace().collect();
        if let [name, outcome @ ("ok" | "FAILED" | "skipped")] = words[..] {
            if name.contains("::") {
                outcomes.insert(name.to_owned(), outcome.to_owned());
            }
        }
    }
    let summary = out
        .lines()
        .find(|l| l.starts_with("Summary:"))
        .unwrap_or_else(|| panic!("pjdfstest on {label} printed no summary:\n{out}"));
    let total: usize = summary
        .rsplit(", ")
        .next()
        .and_then(|t| t.strip_suffix(" total"))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the total in {summary:?}"));
    assert_eq!(outcomes.len(), total, "{label}: every test's line was read");
    let count = |o: &str| outcomes.values().filter(|v| *v == o).count();
    println!(
        "pjdfstest on {label}: {} passed, {} failed, {} skipped, {total} total",
        count("ok"),
        count("FAILED"),
        count("skipped")
    );
    outcomes
}

/// Tests that pass locally and do not pass (fail or are skipped) on the mount.
pub fn lost(local: &Outcomes, mount: &Outcomes) -> BTreeSet<String> {
    local
        .iter()
        .filter(|(name, o)| *o == "ok" && mount.get(*name).map(String::as_str) != Some("ok"))
        .map(|(name, _)| name.clone())
        .collect()
}

/// The pjdfstest names (`syscall::case...`, in backquotes) that the README lists under
/// "Differences from a local directory".
pub fn documented_differences() -> BTreeSet<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("## Differences from a local directory")
        .expect("README has a \"Differences from a local directory\" section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            t.contains("::")
                && t.starts_with(|c: char| c.is_ascii_lowercase())
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_:".contains(c))
        })
        .map(str::to_owned)
        .collect()
}
