//! Workload 12: `npm ci --offline` of a fixed lockfile, from an npm cache filled once.
//!
//! The dependency sets are committed under `crates/bench/npm/`: `full/` (express, webpack,
//! webpack-cli, babel, eslint: 399 packages, about 9,400 entries in `node_modules`) and, for
//! `--quick --workloads npm`, `quick/` (express alone: 72 packages, about 780 entries), each a
//! `package.json` and the `package-lock.json` npm made of it. Both are compiled into the
//! binary, written into the workload's pool and replicated into each run.
//!
//! The cache: npm's own content-addressed cache, in a directory that outlives the bench
//! ([`cache_dir`]: `--npm-cache`, `$CROSSFS_BENCH_NPM_CACHE`, `$XDG_CACHE_HOME/crossfs/npm`
//! or `~/.cache/crossfs/npm`). Before the workload's first run, [`setup`] looks for the
//! [`Marker`] a finished fill leaves there; when it is missing or names other lockfiles,
//! it asks the registry (`npm ping`, no retries) and, when that answers, fills the cache
//! natively with `npm ci` of both sets (untimed, once per machine), then writes the
//! marker. When there is no cache and no registry, or no npm, the workload is skipped on
//! every target with the reason in the table and the JSON: not a failure. A fill that
//! fails with the registry reachable is one, on every target.
//!
//! Each run is one timed `npm ci --offline` in the run's fresh directory through the
//! target: npm reads the lockfile, unpacks every tarball from the cache (creates, writes,
//! mkdirs, chmods) and links the `.bin` entries. Scripts are not run (`--ignore-scripts`: no
//! package of either set has an install script, and one would time node, not the file
//! system); audit, fund, progress and the update check are off, and the user's `.npmrc` is
//! not read, so nothing but the flags below shapes the install. npm's cache keys include the
//! registry URL, so every run names the registry the cache was filled from. Afterwards
//! (untimed) each package of the lockfile must have its `package.json` in place, so a target
//! that loses files fails instead of looking fast.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::{cmd, thousands, Ctx, MetricDef, Readiness, Setup, Work};
use crate::config::{BenchConfig, NpmSet, Sizes};
use crate::error::{IoContext, WorkloadError};
use crate::progress::Progress;
use crate::stats::Unit;

pub(crate) const METRICS: &[MetricDef] = &[MetricDef {
    id: "ci-offline",
    label: "npm ci --offline, from a filled cache",
    unit: Unit::Seconds,
    key_messages: &["Tlcreate", "Tmkdir", "Twrite", "Tsetattr"],
}];

/// The environment variable naming the cache directory (below `--npm-cache`).
pub const CACHE_ENV: &str = "CROSSFS_BENCH_NPM_CACHE";
/// The environment variable naming the registry a fill uses (below `--npm-registry`).
pub const REGISTRY_ENV: &str = "CROSSFS_BENCH_NPM_REGISTRY";

/// What a finished fill leaves in the cache directory.
const MARKER: &str = "crossfs-bench-filled";
/// npm's registry when its configuration cannot be read.
const DEFAULT_REGISTRY: &str = "https://registry.npmjs.org/";

/// One fixed dependency set.
pub(crate) struct Lockfile {
    pub name: &'static str,
    pub package_json: &'static str,
    pub lock: &'static str,
    /// Packages in `lock` (checked by a test), for the title.
    pub packages: usize,
}

pub(crate) const FULL: Lockfile = Lockfile {
    name: "full",
    package_json: include_str!("../../npm/full/package.json"),
    lock: include_str!("../../npm/full/package-lock.json"),
    packages: 399,
};

pub(crate) const QUICK: Lockfile = Lockfile {
    name: "quick",
    package_json: include_str!("../../npm/quick/package.json"),
    lock: include_str!("../../npm/quick/package-lock.json"),
    packages: 72,
};

/// Every set a fill installs: both, so that a later run of either size needs no network.
const ALL: [&Lockfile; 2] = [&FULL, &QUICK];

pub(crate) fn lockfile(set: NpmSet) -> &'static Lockfile {
    match set {
        NpmSet::Full => &FULL,
        NpmSet::Quick => &QUICK,
    }
}

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "npm ci --offline of a fixed {}-package lockfile ({}), from an npm cache filled once",
        thousands(s.npm_set.packages() as u64),
        match s.npm_set {
            NpmSet::Full => "express, webpack, babel, eslint",
            NpmSet::Quick => "express",
        }
    )
}

/// The cache found ready: where it is and the registry it was filled from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cache {
    pub dir: PathBuf,
    pub registry: String,
}

/// The cache directory: `explicit` (`--npm-cache`), else `$CROSSFS_BENCH_NPM_CACHE`, else
/// `crossfs/npm` in the XDG cache directory (`$XDG_CACHE_HOME`, else `~/.cache`). `None`
/// when none of these is set. `env` reads a variable (empty counts as unset).
pub(crate) fn cache_dir(
    explicit: Option<&Path>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Option<PathBuf> {
    let var = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = explicit {
        return Some(dir.to_path_buf());
    }
    if let Some(dir) = var(CACHE_ENV) {
        return Some(dir);
    }
    // The XDG spec: a relative $XDG_CACHE_HOME is invalid and must be ignored.
    let xdg = var("XDG_CACHE_HOME").filter(|d| d.is_absolute());
    xdg.or_else(|| var("HOME").map(|home| home.join(".cache")))
        .map(|base| base.join("crossfs").join("npm"))
}

/// A registry URL as npm's cache keys see it: with one trailing slash.
fn normalize_registry(url: &str) -> String {
    format!("{}/", url.trim().trim_end_matches('/'))
}

/// FNV-1a over the lockfile's bytes: tells a marker written for other lockfiles apart.
fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The marker a finished fill writes: the registry, and each lockfile it installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker {
    pub registry: String,
    pub lockfiles: Vec<(String, u64)>,
}

const MARKER_HEADER: &str = "crossfs bench npm cache, filled from";

impl Marker {
    fn for_sets(registry: &str, sets: &[&Lockfile]) -> Self {
        Self {
            registry: normalize_registry(registry),
            lockfiles: sets
                .iter()
                .map(|s| (s.name.to_owned(), fingerprint(s.lock)))
                .collect(),
        }
    }

    fn render(&self) -> String {
        let mut text = format!("{MARKER_HEADER} {}\n", self.registry);
        for (name, print) in &self.lockfiles {
            let _ = writeln!(text, "lockfile {name} {print:016x}");
        }
        text
    }

    /// `None` for anything [`Marker::render`] did not write.
    fn parse(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        let registry = lines.next()?.strip_prefix(MARKER_HEADER)?.trim();
        if registry.is_empty() {
            return None;
        }
        let lockfiles = lines
            .map(|line| {
                let mut words = line.split_whitespace();
                let (Some("lockfile"), Some(name), Some(print), None) =
                    (words.next(), words.next(), words.next(), words.next())
                else {
                    return None;
                };
                Some((name.to_owned(), u64::from_str_radix(print, 16).ok()?))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            registry: registry.to_owned(),
            lockfiles,
        })
    }

    /// Whether this fill serves `sets` (all of them, these very lockfiles) and, when one
    /// is asked for, the registry `wanted`.
    fn covers(&self, sets: &[&Lockfile], wanted: Option<&str>) -> bool {
        let registry_ok = wanted.is_none_or(|r| normalize_registry(r) == self.registry);
        registry_ok
            && sets.iter().all(|s| {
                self.lockfiles
                    .iter()
                    .any(|(name, print)| name == s.name && *print == fingerprint(s.lock))
            })
    }
}

/// Find the cache ready, or fill it, or say why the workload cannot run (see the module
/// doc). Talks to the registry only when the cache is not filled for these lockfiles.
pub(crate) fn setup(config: &BenchConfig, progress: &mut dyn Progress) -> Readiness {
    let env = |name: &str| std::env::var_os(name);
    let wanted = config
        .npm_registry
        .clone()
        .or_else(|| env(REGISTRY_ENV).and_then(|v| v.into_string().ok()))
        .filter(|r| !r.trim().is_empty());
    let Some(dir) = cache_dir(config.npm_cache.as_deref(), env) else {
        return Readiness::Skip(format!(
            "skipped: no npm cache directory (set --npm-cache, ${CACHE_ENV}, $XDG_CACHE_HOME or $HOME)"
        ));
    };
    setup_in(&dir, wanted.as_deref(), progress)
}

fn setup_in(dir: &Path, wanted: Option<&str>, progress: &mut dyn Progress) -> Readiness {
    if !cmd::on_path("npm") {
        return Readiness::Skip("skipped: npm not found".to_owned());
    }
    let marker = fs::read_to_string(dir.join(MARKER))
        .ok()
        .and_then(|t| Marker::parse(&t));
    if let Some(m) = marker.filter(|m| m.covers(&ALL, wanted)) {
        return Readiness::Ready(Setup::Npm(Cache {
            dir: dir.to_path_buf(),
            registry: m.registry,
        }));
    }
    let registry = normalize_registry(&wanted.map_or_else(configured_registry, str::to_owned));
    if let Err(e) = ping(&registry) {
        return Readiness::Skip(format!(
            "skipped: no filled npm cache in {} and the registry {registry} did not answer \
             ({e}); a run with the registry reachable fills it once",
            dir.display()
        ));
    }
    progress.note(&format!(
        "npm: filling the npm cache in {} from {registry} (once: later runs install offline)",
        dir.display()
    ));
    let started = Instant::now();
    match fill(dir, &registry) {
        Ok(()) => {
            progress.note(&format!(
                "npm: cache filled in {:.0} s",
                started.elapsed().as_secs_f64()
            ));
            Readiness::Ready(Setup::Npm(Cache {
                dir: dir.to_path_buf(),
                registry,
            }))
        }
        Err(e) => Readiness::Fail(format!(
            "filling the npm cache in {} from {registry}: {e}",
            dir.display()
        )),
    }
}

/// The registry in npm's own configuration (the user's `.npmrc` included).
fn configured_registry() -> String {
    let out = Command::new("npm")
        .args(["config", "get", "registry"])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            if text.starts_with("http") {
                text
            } else {
                DEFAULT_REGISTRY.to_owned()
            }
        }
        _ => DEFAULT_REGISTRY.to_owned(),
    }
}

/// One request to the registry, no retries: an unreachable registry costs well under a
/// second here, where `npm ci` would retry for over a minute.
fn ping(registry: &str) -> Result<(), String> {
    let dir = std::env::temp_dir();
    let out = cmd::run(
        Command::new("npm").args([
            "ping",
            "--registry",
            registry,
            "--fetch-retries=0",
            "--fetch-timeout=15000",
            "--logs-max=0",
            "--no-update-notifier",
        ]),
        &dir,
    );
    out.map(drop).map_err(|e| match e {
        // The end of npm's output says why ("connect ECONNREFUSED ...").
        WorkloadError::Command { output, .. } => last_error_line(&output),
        other => other.to_string(),
    })
}

/// The first line of npm's error output that says what went wrong.
fn last_error_line(output: &str) -> String {
    output
        .lines()
        .map(|l| l.trim_start_matches("npm error").trim())
        .find(|l| !l.is_empty() && !l.starts_with("code ") && !l.starts_with("errno "))
        .unwrap_or("no answer")
        .to_owned()
}

/// `npm ci` of every set natively, each in a scratch directory in the cache directory,
/// with the user's npm configuration (a proxy, a mirror); then the marker.
fn fill(dir: &Path, registry: &str) -> Result<(), WorkloadError> {
    fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    for set in ALL {
        let scratch = dir.join(format!(".fill-{}-{}", set.name, std::process::id()));
        let result = write_set(&scratch, set).and_then(|()| {
            cmd::run(
                Command::new("npm")
                    .arg("ci")
                    .arg("--cache")
                    .arg(dir)
                    .args(["--registry", registry])
                    .args(COMMON_FLAGS),
                &scratch,
            )
        });
        let _ = fs::remove_dir_all(&scratch);
        result?;
    }
    let marker = dir.join(MARKER);
    fs::write(&marker, Marker::for_sets(registry, &ALL).render())
        .ctx(|| format!("writing {}", marker.display()))
}

/// Flags of every install, filling or timed: what shapes the tree, and no noise.
const COMMON_FLAGS: &[&str] = &[
    "--ignore-scripts",
    "--install-strategy=hoisted",
    "--no-audit",
    "--no-fund",
    "--no-progress",
    "--no-update-notifier",
    "--loglevel=error",
];

fn write_set(dir: &Path, set: &Lockfile) -> Result<(), WorkloadError> {
    fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    for (name, text) in [
        ("package.json", set.package_json),
        ("package-lock.json", set.lock),
    ] {
        let path = dir.join(name);
        fs::write(&path, text).ctx(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

pub(crate) fn prepare(pool: &Path, sizes: &Sizes) -> Result<(), WorkloadError> {
    write_set(pool, lockfile(sizes.npm_set))
}

pub(crate) fn run(ctx: &mut Ctx<'_>, cache: &Cache) -> Result<(), WorkloadError> {
    let dir = ctx.work.clone();
    ctx.measure(&METRICS[0], |_| {
        cmd::run(
            Command::new("npm")
                .args(["ci", "--offline"])
                .arg("--cache")
                .arg(&cache.dir)
                .args(["--registry", &cache.registry])
                .args(COMMON_FLAGS)
                // Only the flags shape the install, not a `.npmrc` of the user's.
                .env("NPM_CONFIG_USERCONFIG", "/dev/null"),
            &dir,
        )?;
        Ok(Work::Once)
    })?;
    let set = lockfile(ctx.sizes.npm_set);
    let paths = package_paths(set.lock)
        .map_err(|e| WorkloadError::Check(format!("the {} lockfile: {e}", set.name)))?;
    for p in &paths {
        let manifest = dir.join(p).join("package.json");
        if !manifest.is_file() {
            return Err(WorkloadError::Check(format!(
                "{} is missing after npm ci",
                manifest.display()
            )));
        }
    }
    Ok(())
}

/// The install path of every package in a lockfile (`node_modules/a/node_modules/b`).
fn package_paths(lock: &str) -> Result<Vec<String>, serde_json::Error> {
    let doc: serde_json::Value = serde_json::from_str(lock)?;
    Ok(doc["packages"]
        .as_object()
        .map(|m| {
            m.keys()
                .filter(|k| k.starts_with("node_modules/"))
                .cloned()
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;

    #[test]
    fn the_lockfiles_hold_the_packages_the_titles_state() {
        for set in ALL {
            assert_eq!(
                package_paths(set.lock).unwrap().len(),
                set.packages,
                "{}",
                set.name
            );
            // The sets name no registry: npm takes the one the cache was filled from.
            assert!(!set.lock.contains("\"resolved\""), "{}", set.name);
            // --ignore-scripts skips nothing (the module doc says so).
            assert!(!set.lock.contains("hasInstallScript"), "{}", set.name);
        }
        const { assert!(FULL.packages >= 300) };
    }

    #[test]
    fn cache_dir_follows_flag_env_xdg_home() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let all = env(&[(CACHE_ENV, "/c"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(
            cache_dir(Some(Path::new("/flag")), all),
            Some("/flag".into())
        );
        assert_eq!(cache_dir(None, all), Some("/c".into()));
        let xdg = env(&[(CACHE_ENV, ""), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(cache_dir(None, xdg), Some("/x/crossfs/npm".into()));
        let relative_xdg = env(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")]);
        assert_eq!(
            cache_dir(None, relative_xdg),
            Some("/h/.cache/crossfs/npm".into())
        );
        assert_eq!(cache_dir(None, env(&[])), None);
    }

    #[test]
    fn marker_round_trips_and_covers_only_its_lockfiles_and_registry() {
        let m = Marker::for_sets("https://registry.npmjs.org", &ALL);
        assert_eq!(m.registry, "https://registry.npmjs.org/");
        let text = m.render();
        assert_eq!(Marker::parse(&text), Some(m.clone()));
        assert!(m.covers(&ALL, None));
        assert!(m.covers(&ALL, Some("https://registry.npmjs.org/")));
        assert!(!m.covers(&ALL, Some("http://127.0.0.1:9")));
        // A fill of the quick set alone does not serve a full run.
        let quick_only = Marker::for_sets("https://registry.npmjs.org/", &[&QUICK]);
        assert!(!quick_only.covers(&ALL, None));
        // A changed lockfile is another fingerprint.
        let stale = text.replace(&format!("{:016x}", fingerprint(FULL.lock)), "0123");
        assert!(!Marker::parse(&stale).unwrap().covers(&ALL, None));
        for junk in [
            "",
            "hello\n",
            "crossfs bench npm cache, filled from \n",
            &(text.clone() + "lockfile x\n"),
        ] {
            assert_eq!(Marker::parse(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn npm_error_output_gives_its_reason() {
        let out = "npm error code ECONNREFUSED\nnpm error errno ECONNREFUSED\n\
                   npm error request to http://127.0.0.1:9/-/ping failed, reason: connect ECONNREFUSED 127.0.0.1:9\n\
                   npm error A complete log ...";
        assert_eq!(
            last_error_line(out),
            "request to http://127.0.0.1:9/-/ping failed, reason: connect ECONNREFUSED 127.0.0.1:9"
        );
        assert_eq!(last_error_line(""), "no answer");
    }

    /// No cache and a registry on a closed local port: skipped, quickly, with the reason.
    /// No network is used (the port is on loopback). Needs npm; without it the skip says so.
    #[test]
    fn no_cache_and_no_registry_is_a_clean_skip() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("npm");
        let started = Instant::now();
        let readiness = setup_in(&cache, Some("http://127.0.0.1:9"), &mut NoProgress);
        let Readiness::Skip(reason) = readiness else {
            panic!("expected a skip, got {readiness:?}");
        };
        assert!(reason.starts_with("skipped: "), "{reason}");
        if cmd::on_path("npm") {
            assert!(reason.contains("http://127.0.0.1:9/"), "{reason}");
            assert!(reason.contains(&cache.display().to_string()), "{reason}");
            assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
            assert!(!cache.join(MARKER).exists());
        } else {
            assert_eq!(reason, "skipped: npm not found");
        }
    }

    /// A marker for these lockfiles is trusted without asking any registry.
    #[test]
    fn a_filled_cache_is_ready_without_the_network() {
        if !cmd::on_path("npm") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let marker = Marker::for_sets("http://127.0.0.1:9", &ALL);
        fs::write(dir.path().join(MARKER), marker.render()).unwrap();
        let readiness = setup_in(dir.path(), None, &mut NoProgress);
        assert_eq!(
            readiness,
            Readiness::Ready(Setup::Npm(Cache {
                dir: dir.path().to_path_buf(),
                registry: "http://127.0.0.1:9/".to_owned()
            }))
        );
    }
}
