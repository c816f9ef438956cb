//! `mount.crossfs`: the binary under mount(8)'s helper name, so that `mount -t crossfs` and
//! `/etc/fstab` lines work:
//!
//! ```text
//! mount.crossfs ADDR DIR [-o OPTIONS] [-s] [-f] [-n] [-v]
//! ```
//!
//! Each `-o` option is a `crossfs mount` flag without its dashes (`cache=auto`,
//! `negative-ttl=0` or `negative_ttl=0`, `no-events`, `private`, ...; `ro` is
//! `--read-only`); mount(8)'s own options (`defaults`, `rw`, `auto`, `noauto`, `user`,
//! `users`, `nofail`, `_netdev`, `x-*`, `comment=*`, ...) are accepted and left alone. The
//! helper starts `crossfs mount` detached, returns 0 once the mount is in place, and
//! otherwise returns 32 (mount(8)'s "mount failure") with the client's error; a bad
//! invocation, an unknown option or a bad value returns 1. The client logs to
//! /var/log/crossfs/NAME.log ([`log_path`]).

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::CommandFactory;

/// The name mount(8) runs for `-t crossfs`.
pub const HELPER_NAME: &str = "mount.crossfs";

/// mount(8)'s exit statuses that a helper returns.
const USAGE: u8 = 1;
const MOUNT_FAILURE: u8 = 32;

/// How long the client may take to connect and mount before the helper gives up.
const MOUNT_WAIT: Duration = Duration::from_secs(60);

/// Whether this process was started under the helper's name.
pub fn invoked_as_helper(argv0: &OsString) -> bool {
    Path::new(argv0).file_name() == Some(HELPER_NAME.as_ref())
}

/// What mount(8) asked for.
#[derive(Debug, Default, PartialEq)]
struct Request {
    addr: String,
    dir: PathBuf,
    options: Vec<String>,
    /// `-s`: ignore options `crossfs mount` does not know.
    sloppy: bool,
    /// `-f`: do everything but the mount.
    fake: bool,
    verbose: bool,
}

fn parse_request(args: &[String]) -> Result<Request, String> {
    let mut req = Request::default();
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-o" => {
                let opts = it.next().ok_or("-o needs a list of options")?;
                req.options.extend(split_options(opts));
            }
            "-s" => req.sloppy = true,
            "-f" => req.fake = true,
            "-n" => {} // no /etc/mtab to write
            "-v" => req.verbose = true,
            "-h" | "--help" => return Err(String::new()),
            o if o.starts_with("-o") => req.options.extend(split_options(&o[2..])),
            o if o.starts_with('-') && o.len() > 1 => return Err(format!("unknown flag {o}")),
            p => positional.push(p.to_owned()),
        }
    }
    match <[String; 2]>::try_from(positional) {
        Ok([addr, dir]) => {
            req.addr = addr;
            req.dir = PathBuf::from(dir);
            Ok(req)
        }
        Err(_) => Err("expected the export's address and a mount point".into()),
    }
}

fn split_options(list: &str) -> impl Iterator<Item = String> + '_ {
    list.split(',').filter(|o| !o.is_empty()).map(str::to_owned)
}

/// Options mount(8) itself interprets (or keeps for userspace tools); not for the client.
fn is_mount_option(name: &str) -> bool {
    matches!(
        name,
        "defaults"
            | "rw"
            | "auto"
            | "noauto"
            | "user"
            | "nouser"
            | "users"
            | "owner"
            | "group"
            | "nofail"
            | "_netdev"
            | "exec"
            | "noexec"
            | "suid"
            | "nosuid"
            | "dev"
            | "nodev"
            | "atime"
            | "noatime"
            | "relatime"
            | "loud"
            | "comment"
    ) || name.starts_with("x-")
}

/// `crossfs mount` flags for `-o` options, checked against the mount command's own
/// arguments (so every flag maps, and no list is kept twice).
fn translate(options: &[String], sloppy: bool) -> Result<Vec<String>, String> {
    let cli = crate::args::Cli::command();
    let mount = cli.find_subcommand("mount").ok_or("no mount subcommand")?;
    let mut flags = Vec::new();
    for option in options {
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (option.as_str(), None),
        };
        if is_mount_option(name) {
            continue;
        }
        let long = match name {
            "ro" => "read-only".to_owned(),
            n => n.replace('_', "-"),
        };
        let arg = mount
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && !a.is_positional());
        let Some(arg) = arg else {
            if sloppy {
                continue;
            }
            return Err(format!(
                "unknown option `{option}` (see `crossfs mount --help`; mount options are \
                 its flags without the dashes)"
            ));
        };
        let takes_value = arg.get_action().takes_values();
        match (takes_value, value) {
            (true, Some(v)) => {
                // Checked here, so that a bad value is reported as the option the user
                // wrote (`cache=`), not as the flag it maps to.
                check_value(arg, v).map_err(|why| format!("option `{option}`: {why}"))?;
                flags.extend([format!("--{long}"), v.to_owned()])
            }
            (false, None) => flags.push(format!("--{long}")),
            (true, None) => return Err(format!("option `{name}` needs a value: {name}=...")),
            (false, Some(_)) => return Err(format!("option `{name}` takes no value")),
        }
    }
    Ok(flags)
}

/// Whether `value` is one the mount command's `arg` takes; if not, what is wrong with it,
/// without clap's framing (which names the `--flag <VALUE>` the option maps to, not the
/// option the user wrote). The argument is parsed alone, its ties to others cut.
fn check_value(arg: &clap::Arg, value: &str) -> Result<(), String> {
    use clap::builder::Resettable;
    let alone = arg
        .clone()
        .required(false)
        .requires(Resettable::Reset)
        .conflicts_with(Resettable::Reset);
    let long = alone.get_long().unwrap_or_default().to_owned();
    let parsed = clap::Command::new(HELPER_NAME)
        .no_binary_name(true)
        .arg(alone)
        .try_get_matches_from([format!("--{long}"), value.to_owned()]);
    match parsed {
        Ok(_) => Ok(()),
        Err(e) => Err(match std::error::Error::source(&e) {
            Some(reason) => reason.to_string(),
            None => e.kind().to_string(),
        }),
    }
}

/// Runs the helper; returns mount(8)'s exit status.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let args: Vec<String> = args
        .into_iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let usage = |msg: &str| {
        if !msg.is_empty() {
            eprintln!("{HELPER_NAME}: {msg}");
        }
        eprintln!(
            "usage: {HELPER_NAME} ADDR DIR [-o OPTIONS] [-s] [-f] [-n] [-v]\n\
             OPTIONS are `crossfs mount` flags without their dashes, e.g. -o cache=auto,private"
        );
        ExitCode::from(USAGE)
    };
    let req = match parse_request(&args) {
        Ok(r) => r,
        Err(msg) => return usage(&msg),
    };
    let flags = match translate(&req.options, req.sloppy) {
        Ok(f) => f,
        Err(msg) => {
            eprintln!("{HELPER_NAME}: {msg}");
            return ExitCode::from(USAGE);
        }
    };
    if req.verbose {
        eprintln!(
            "{HELPER_NAME}: crossfs mount {} {} {}",
            req.addr,
            req.dir.display(),
            flags.join(" ")
        );
    }
    if req.fake {
        return ExitCode::SUCCESS;
    }
    match mount_detached(&req, &flags) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!(
                "{HELPER_NAME}: mounting {} on {}: {msg}",
                req.addr,
                req.dir.display()
            );
            ExitCode::from(MOUNT_FAILURE)
        }
    }
}

/// Where the clients that the helper starts log: one file per mount point, appended to.
const LOG_DIR: &str = "/var/log/crossfs";

/// The log file of the client mounted at `dir` (canonical): the path with `/` as `-`
/// (`/src`: src.log, `/mnt/src`: mnt-src.log, `/`: -.log).
pub fn log_path(dir: &Path) -> PathBuf {
    let path = dir.to_string_lossy();
    let name = match path.trim_start_matches('/') {
        "" => "-".to_owned(),
        p => p.replace('/', "-"),
    };
    Path::new(LOG_DIR).join(format!("{name}.log"))
}

/// The client's log: [`log_path`], or, where that cannot be written (a read-only /var, a
/// user mount), an unlinked file that shows the client's error if it fails to mount.
/// Returns the file and where this client's lines begin in it.
fn open_log(dir: &Path) -> Result<(std::fs::File, u64), String> {
    let path = log_path(dir);
    let opened = std::fs::create_dir_all(LOG_DIR).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
    });
    match opened {
        Ok(file) => {
            let start = file.metadata().map(|m| m.len()).unwrap_or(0);
            Ok((file, start))
        }
        Err(e) => {
            eprintln!(
                "{HELPER_NAME}: cannot write {} ({e}); the client's later log lines are lost",
                path.display()
            );
            let file = tempfile::tempfile().map_err(|e| format!("a log file: {e}"))?;
            Ok((file, 0))
        }
    }
}

/// Starts `crossfs mount` in its own session, logging to [`log_path`], and waits until the
/// mount is in place or the client gives up.
fn mount_detached(req: &Request, flags: &[String]) -> Result<(), String> {
    let dir = std::fs::canonicalize(&req.dir).map_err(|e| e.to_string())?;
    let (mut log, start) = open_log(&dir)?;
    let exe = std::env::current_exe().map_err(|e| format!("finding crossfs: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("mount")
        .arg(&req.addr)
        .arg(&dir)
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.try_clone().map_err(|e| e.to_string())?);
    detach(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting crossfs mount: {e}"))?;
    let started = Instant::now();
    loop {
        if is_crossfs_mount(&dir) {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut text = String::new();
            let _ = std::io::Seek::seek(&mut log, std::io::SeekFrom::Start(start));
            let _ = log.read_to_string(&mut text);
            return Err(format!(
                "crossfs mount exited ({status}):\n{}",
                text.trim_end()
            ));
        }
        if started.elapsed() > MOUNT_WAIT {
            let _ = child.kill();
            return Err(format!("not mounted after {MOUNT_WAIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The client outlives the helper: a session of its own, so that neither mount(8)'s
/// terminal nor its process group takes it down.
fn detach(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()?;
            Ok(())
        });
    }
}

/// Whether a crossfs FUSE mount is at `dir` (the last mount there: a FUSE file system whose
/// source is `crossfs:ADDR`).
fn is_crossfs_mount(dir: &Path) -> bool {
    crate::mountinfo::mounts().is_ok_and(|mounts| {
        crate::mountinfo::at(&mounts, dir).is_some_and(|m| m.crossfs_addr().is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn mount_8_forms_parse() {
        let r = parse_request(&strings(&[
            "vsock:2:5640",
            "/src",
            "-o",
            "cache=auto,_netdev",
            "-n",
        ]))
        .unwrap();
        assert_eq!(
            (r.addr.as_str(), r.dir.as_path()),
            ("vsock:2:5640", Path::new("/src"))
        );
        assert_eq!(r.options, ["cache=auto", "_netdev"]);
        let r = parse_request(&strings(&["-sf", "a", "b"]));
        assert!(r.is_err(), "combined flags are not mount(8)'s form");
        let r = parse_request(&strings(&["-s", "-f", "-oro", "a", "b"])).unwrap();
        assert!(r.sloppy && r.fake);
        assert_eq!(r.options, ["ro"]);
        assert!(parse_request(&strings(&["only-one"])).is_err());
    }

    #[test]
    fn options_map_to_the_mount_command_flags() {
        let opts = strings(&[
            "defaults",
            "rw",
            "_netdev",
            "x-systemd.automount",
            "cache=always",
            "negative_ttl=0",
            "negative-ttl=5",
            "ro",
            "private",
            "no-events",
        ]);
        assert_eq!(
            translate(&opts, false).unwrap(),
            [
                "--cache",
                "always",
                "--negative-ttl",
                "0",
                "--negative-ttl",
                "5",
                "--read-only",
                "--private",
                "--no-events"
            ]
        );
        let err = translate(&strings(&["cache=auto", "bogus=1"]), false).unwrap_err();
        assert!(err.contains("`bogus=1`"), "{err}");
        assert_eq!(
            translate(&strings(&["bogus"]), true).unwrap(),
            Vec::<String>::new()
        );
        assert!(translate(&strings(&["cache"]), false)
            .unwrap_err()
            .contains("needs a value"));
        assert!(translate(&strings(&["private=1"]), false)
            .unwrap_err()
            .contains("no value"));
    }
}
