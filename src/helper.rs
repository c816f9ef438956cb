//! `mount.crossfs`: the binary under mount(8)'s helper name, so that `mount -t crossfs` and
//! `/etc/fstab` lines work:
//!
//! ```text
//! mount.crossfs ADDR DIR [-o OPTIONS] [-s] [-f] [-n] [-v]
//! ```
//!
//! The `-o` options are those of `crossfs mount -o`, read by one parser (`crate::options`).
//! The helper starts `crossfs mount` detached, with ADDR as given (the mount table shows
//! it as the source, so mount(8) knows the fstab line is mounted), returns 0 once the mount
//! is in place, and otherwise returns 32 (mount(8)'s "mount failure") with the client's
//! error; a bad invocation, an unknown option or a bad value returns 1. The client logs to
//! /var/log/crossfs/NAME.log ([`log_path`]).

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;

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
                req.options.extend(crate::options::split([opts.as_str()]));
            }
            "-s" => req.sloppy = true,
            "-f" => req.fake = true,
            "-n" => {} // no /etc/mtab to write
            "-v" => req.verbose = true,
            "-h" | "--help" => return Err(String::new()),
            o if o.starts_with("-o") => req.options.extend(crate::options::split([&o[2..]])),
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
    let flags = match crate::options::translate(&req.options, req.sloppy) {
        Ok(f) => f,
        Err(msg) => {
            eprintln!("{HELPER_NAME}: {msg}");
            return ExitCode::from(USAGE);
        }
    };
    // A bad value (`cache=sometimes`) is a usage error too, found before the client starts.
    let mut argv = vec!["crossfs".to_owned(), "mount".to_owned()];
    argv.extend(flags.iter().cloned());
    argv.extend([req.addr.clone(), req.dir.display().to_string()]);
    if let Err(e) = crate::args::Cli::try_parse_from(&argv) {
        eprintln!("{HELPER_NAME}: {}", e.render().to_string().trim_end());
        return ExitCode::from(USAGE);
    }
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
        // Read too: a client that fails is reported with what it wrote.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
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
    // With allow_stacked a crossfs mount may be there already: wait for a new one.
    let before = mount_ids_at(&dir);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting crossfs mount: {e}"))?;
    let started = Instant::now();
    loop {
        if has_new_crossfs_mount(&dir, &before) {
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

/// The ids of the mounts at `dir`.
fn mount_ids_at(dir: &Path) -> Vec<u64> {
    let mounts = crate::mountinfo::mounts().unwrap_or_default();
    mounts
        .iter()
        .filter(|m| m.mountpoint == dir)
        .map(|m| m.id)
        .collect()
}

/// Whether the last mount at `dir` is a crossfs mount not among `before`.
fn has_new_crossfs_mount(dir: &Path, before: &[u64]) -> bool {
    crate::mountinfo::mounts().is_ok_and(|mounts| {
        crate::mountinfo::at(&mounts, dir)
            .is_some_and(|m| m.is_crossfs() && !before.contains(&m.id))
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
}
