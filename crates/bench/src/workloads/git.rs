//! Workload 8: `git status` and `git checkout` of another branch on a
//! generated repository.
//!
//! The repository (work tree, index, packed objects, and a branch `other`) is
//! built once per workload in its pool and replicated into each run: work
//! tree files and objects hard-linked, the rest of `.git` copied because git
//! appends to some of it in place.
//!
//! The pool's work tree gets an mtime in the past that its index does not
//! record, so in every replica the first `git status` finds every file's
//! stat data stale and re-reads every file to verify it, as it does in a
//! guest whose view of the host's timestamps or inodes differs from the one
//! that wrote the index. That status rewrites the index; because the files
//! are older than the index, none is "racily clean", and the repeated status
//! is git's stat-only fast path. Both are the same work on every target and
//! run, whatever the timing of setup.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use super::rng::Rng;
use super::{cmd, thousands, Ctx, MetricDef, Work};
use crate::config::Sizes;
use crate::error::{IoContext, WorkloadError};
use crate::stats::Unit;

pub(crate) const TOOLS: &[&str] = &["git"];

pub(crate) const METRICS: &[MetricDef] = &[
    MetricDef {
        id: "status-first",
        label: "git status, first (stale stat data: reads every file)",
        unit: Unit::Seconds,
        key_messages: &["Tgetattr", "Twalk"],
    },
    MetricDef {
        id: "status-repeat",
        label: "git status, repeated (stat only)",
        unit: Unit::Seconds,
        key_messages: &["Tgetattr", "Twalk"],
    },
    MetricDef {
        id: "checkout",
        label: "git checkout of another branch",
        unit: Unit::Seconds,
        key_messages: &["Twrite", "Tlcreate"],
    },
];

const FILES_PER_DIR: usize = 100;
/// On the other branch: every MODIFY_EVERY-th file changed, every
/// DELETE_EVERY-th deleted, and files/DELETE_EVERY new ones added.
const MODIFY_EVERY: usize = 10;
const DELETE_EVERY: usize = 50;

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "git on a {}-file repository: status (first, repeated), checkout of a branch changing {}%",
        thousands(s.git_files as u64),
        100 / MODIFY_EVERY + 2 * 100 / DELETE_EVERY
    )
}

/// A git command isolated from the user's and system's configuration, which
/// could otherwise turn on fsmonitor, hooks or signing and change the figure.
fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE");
    for setting in [
        // Through a mount the owner may differ from ours; git would refuse the repo.
        "safe.directory=*",
        "core.fsmonitor=false",
        "gc.auto=0",
        "maintenance.auto=false",
        "advice.detachedHead=false",
        "user.name=crossfs bench",
        "user.email=bench@crossfs.invalid",
    ] {
        c.args(["-c", setting]);
    }
    c
}

fn git_run(dir: &Path, args: &[&str]) -> Result<String, WorkloadError> {
    let out = cmd::run(git(dir).args(args), dir)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn file_path(i: usize) -> String {
    let ext = ["c", "h", "md", "txt"][i % 4];
    format!("src/d{:03}/f{i:05}.{ext}", i / FILES_PER_DIR)
}

fn file_text(i: usize, rng: &mut Rng) -> String {
    let mut text = format!("// file {i}\n");
    for line in 0..4 + rng.below(40) {
        let _ = writeln!(text, "line {line}: value {}", rng.next_u64());
    }
    text
}

fn write_file(root: &Path, rel: &str, text: &str) -> Result<(), WorkloadError> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).ctx(|| format!("mkdir {}", parent.display()))?;
    }
    fs::write(&path, text).ctx(|| format!("writing {}", path.display()))
}

/// Files of the replica that must be copies: `.git` outside `objects/`
/// (reflogs are appended to in place; the index, refs and config are small).
pub(crate) fn must_copy(rel: &Path) -> bool {
    rel.starts_with("repo/.git") && !rel.starts_with("repo/.git/objects")
}

/// The repository in `pool/repo`: branch `main` with all files checked out,
/// branch `other` changing a tenth and deleting/adding a fiftieth, packed so
/// that replicas link a few pack files rather than 10,000 loose objects.
pub(crate) fn prepare(pool: &Path, sizes: &Sizes) -> Result<(), WorkloadError> {
    let files = sizes.git_files;
    let repo = pool.join("repo");
    fs::create_dir(&repo).ctx(|| format!("mkdir {}", repo.display()))?;
    // No template: the sample hooks would be a dozen more files to copy per run.
    git_run(&repo, &["init", "-q", "--template=", "-b", "main"])?;
    let mut rng = Rng::new(files as u64);
    for i in 0..files {
        write_file(&repo, &file_path(i), &file_text(i, &mut rng))?;
    }
    git_run(&repo, &["add", "-A"])?;
    git_run(&repo, &["commit", "-q", "-m", "generated tree"])?;
    git_run(&repo, &["checkout", "-q", "-b", "other"])?;
    for i in 0..files {
        if i % MODIFY_EVERY == 3 {
            let mut text = file_text(i, &mut rng);
            text.push_str("changed on branch other\n");
            write_file(&repo, &file_path(i), &text)?;
        } else if i % DELETE_EVERY == 7 {
            let path = repo.join(file_path(i));
            fs::remove_file(&path).ctx(|| format!("removing {}", path.display()))?;
        }
    }
    for n in 0..files / DELETE_EVERY {
        write_file(
            &repo,
            &format!("src/new/n{n:05}.txt"),
            &file_text(n, &mut rng),
        )?;
    }
    git_run(&repo, &["add", "-A"])?;
    git_run(&repo, &["commit", "-q", "-m", "other branch"])?;
    git_run(&repo, &["checkout", "-q", "main"])?;
    git_run(&repo, &["repack", "-a", "-d", "-q"])?;
    git_run(&repo, &["prune-packed", "-q"])?;
    set_work_tree_mtime(
        &repo,
        &repo,
        SystemTime::UNIX_EPOCH + Duration::from_secs(STALE_MTIME),
    )
}

/// 2026-01-01T00:00:00Z: any fixed time well before the run.
const STALE_MTIME: u64 = 1_767_225_600;

/// Give every work tree file under `dir` (not `.git`) the modification time `t`.
fn set_work_tree_mtime(repo: &Path, dir: &Path, t: SystemTime) -> Result<(), WorkloadError> {
    for entry in fs::read_dir(dir).ctx(|| format!("reading {}", dir.display()))? {
        let entry = entry.ctx(|| format!("reading {}", dir.display()))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .ctx(|| format!("stat {}", path.display()))?;
        if kind.is_dir() {
            if path != repo.join(".git") {
                set_work_tree_mtime(repo, &path, t)?;
            }
        } else if kind.is_file() {
            fs::File::open(&path)
                .and_then(|f| f.set_modified(t))
                .ctx(|| format!("setting the mtime of {}", path.display()))?;
        }
    }
    Ok(())
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let repo = ctx.work.join("repo");
    for metric in &METRICS[..2] {
        let mut out = String::new();
        ctx.measure(metric, |_| {
            out = git_run(&repo, &["status", "--porcelain"])?;
            Ok(Work::Once)
        })?;
        if !out.trim().is_empty() {
            // Not fatal (the figure is real) but a share should show a clean tree.
            let first: Vec<&str> = out.lines().take(3).collect();
            ctx.warnings.push(format!(
                "{}: git status on a fresh replica is not clean: {} ...",
                metric.id,
                first.join("; ")
            ));
        }
    }
    ctx.measure(&METRICS[2], |_| {
        git_run(&repo, &["checkout", "-q", "other"])?;
        Ok(Work::Once)
    })?;
    let changed = repo.join(file_path(3));
    let text = fs::read_to_string(&changed).ctx(|| format!("reading {}", changed.display()))?;
    if !text.ends_with("changed on branch other\n") {
        return Err(WorkloadError::Check(format!(
            "{} does not have branch other's content after checkout",
            changed.display()
        )));
    }
    Ok(())
}
