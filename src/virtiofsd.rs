//! `virtiofsd`: crossfs under virtiofsd's name (a link called `virtiofsd`, or
//! `crossfs virtiofsd ...`), taking the command line that libvirt, Kata and podman give
//! virtiofsd and serving the export on crossfs's virtio door (`crossfs serve
//! --listen vhost-user-fs:PATH` or `--vhost-user-fs-fd N`).
//!
//! The options are virtiofsd's (its `--help`, and the legacy `-o` list libvirt and older
//! Kata still pass). Each is mapped to what the virtio door does, accepted where crossfs
//! already does what it asks (the README lists which and why), or refused by name with
//! the reason: nothing is silently ignored. As virtiofsd, the process serves one VMM and
//! exits when it disconnects, serves no extended attributes without `--xattr`, announces
//! submounts unless `--no-announce-submounts`, and logs at `--log-level` to stderr or,
//! with `--syslog`, to the system log.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use tracing::level_filters::LevelFilter;

/// The name libvirt, Kata and podman run.
pub const DROP_IN_NAME: &str = "virtiofsd";

/// How messages start, so that a VMM's log says who refused.
const PREFIX: &str = "virtiofsd (crossfs)";

/// Exit status for a command line we refuse (clap's, as virtiofsd's).
const USAGE: u8 = 2;

/// Whether this process was started under virtiofsd's name.
pub fn invoked_as_virtiofsd(argv0: &OsString) -> bool {
    Path::new(argv0).file_name() == Some(DROP_IN_NAME.as_ref())
}

/// What the command line asks of the process.
#[derive(Debug, PartialEq)]
enum Action {
    Serve,
    Help,
    Version,
    PrintCapabilities,
}

/// Where the VMM connects.
#[derive(Debug, PartialEq)]
enum Socket {
    Path(String),
    Fd(i32),
}

/// A virtiofsd command line, understood.
#[derive(Debug, PartialEq)]
struct Plan {
    action: Action,
    shared_dir: Option<String>,
    /// `-o source=`: the same as `--shared-dir`; both must agree.
    source: Option<String>,
    socket: Option<Socket>,
    /// crossfs's word for the cache mode.
    cache: &'static str,
    /// `--writeback` (true) or `-o no_writeback` (false, as without either), checked
    /// against the cache mode.
    writeback: Option<bool>,
    xattr: bool,
    readonly: bool,
    readdirplus: bool,
    announce_submounts: bool,
    level: LevelFilter,
    syslog: bool,
    rlimit_nofile: Option<u64>,
    /// Options accepted because crossfs already does what they ask, said in the log.
    notes: Vec<String>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            action: Action::Serve,
            shared_dir: None,
            source: None,
            socket: None,
            cache: "auto",
            writeback: None,
            xattr: false,
            readonly: false,
            readdirplus: true,
            // virtiofsd's default.
            announce_submounts: true,
            level: LevelFilter::INFO,
            syslog: false,
            rlimit_nofile: None,
            notes: Vec::new(),
        }
    }
}

/// virtiofsd's long options that take a value; every other long option is a flag.
const TAKES_VALUE: &[&str] = &[
    "shared-dir",
    "tag",
    "socket",
    "socket-path",
    "socket-group",
    "fd",
    "thread-pool-size",
    "xattrmap",
    "sandbox",
    "seccomp",
    "inode-file-handles",
    "cache",
    "modcaps",
    "log-level",
    "rlimit-nofile",
    "uid-map",
    "gid-map",
    "translate-uid",
    "translate-gid",
    "migration-mode",
    "migration-on-error",
];

/// The refusal of `option` (as the user typed it), with the reason.
fn refuse(option: &str, why: &str) -> String {
    format!("`{option}` is not supported: {why}")
}

fn parse(args: &[String]) -> Result<Plan, String> {
    let mut plan = Plan::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (long, None),
            };
            let value = if TAKES_VALUE.contains(&name) {
                match inline {
                    Some(v) => Some(v),
                    None => Some(
                        it.next()
                            .ok_or_else(|| format!("`--{name}` needs a value"))?
                            .clone(),
                    ),
                }
            } else if inline.is_some() {
                return Err(format!("`--{name}` takes no value"));
            } else {
                None
            };
            long_option(&mut plan, name, value.as_deref())?;
        } else if arg == "-o" {
            let list = it.next().ok_or("`-o` needs a list of options")?;
            compat_options(&mut plan, list)?;
        } else if let Some(list) = arg.strip_prefix("-o") {
            compat_options(&mut plan, list)?;
        } else {
            match arg.as_str() {
                "-d" => plan.level = LevelFilter::DEBUG,
                // virtiofsd always runs in the foreground; so does crossfs.
                "-f" => {}
                "-h" => plan.action = Action::Help,
                "-V" => plan.action = Action::Version,
                other => return Err(format!("unexpected argument `{other}`")),
            }
        }
    }
    Ok(plan)
}

fn number<T: std::str::FromStr>(option: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("`{option}`: `{value}` is not a number"))
}

fn long_option(plan: &mut Plan, name: &str, value: Option<&str>) -> Result<(), String> {
    let typed = format!("--{name}");
    let value = value.unwrap_or_default();
    let with_value = || format!("--{name}={value}");
    match name {
        "help" => plan.action = Action::Help,
        "version" => plan.action = Action::Version,
        "print-capabilities" => plan.action = Action::PrintCapabilities,
        "shared-dir" => plan.shared_dir = Some(value.to_owned()),
        "socket" | "socket-path" => plan.socket = Some(Socket::Path(value.to_owned())),
        "fd" => plan.socket = Some(Socket::Fd(number(&typed, value)?)),
        "cache" => plan.cache = cache_mode(&typed, value)?,
        "readonly" => plan.readonly = true,
        "xattr" => plan.xattr = true,
        "no-readdirplus" => plan.readdirplus = false,
        "writeback" => plan.writeback = Some(true),
        "log-level" => plan.level = log_level(&typed, value)?,
        "syslog" => plan.syslog = true,
        "rlimit-nofile" => plan.rlimit_nofile = Some(number(&typed, value)?),
        "thread-pool-size" => {
            number::<usize>(&typed, value)?;
            plan.notes.push(format!(
                "{}: crossfs serves each request queue on a thread of its own; the size \
                 changes nothing",
                with_value()
            ));
        }
        "sandbox" => match value {
            "namespace" | "chroot" | "none" => plan.notes.push(format!(
                "{}: crossfs makes no namespace and no chroot; it resolves every name \
                 beneath the shared directory with openat2(RESOLVE_BENEATH), so the guest \
                 cannot reach past it",
                with_value()
            )),
            _ => return Err(format!("`{typed}`: use namespace, chroot or none")),
        },
        "seccomp" => match value {
            "none" => {}
            "kill" | "log" | "trap" => {
                return Err(refuse(
                    &with_value(),
                    "crossfs installs no seccomp filter; pass --seccomp=none",
                ))
            }
            _ => return Err(format!("`{typed}`: use none, kill, log or trap")),
        },
        "inode-file-handles" => match value {
            "prefer" | "fallback" => plan.notes.push(format!(
                "{}: crossfs keeps O_PATH descriptors up to its budget and reopens the \
                 others by file handle where the file system gives them",
                with_value()
            )),
            "never" | "mandatory" => {
                return Err(refuse(
                    &with_value(),
                    "crossfs keeps O_PATH descriptors and reopens by file handle only past \
                     its descriptor budget; use --inode-file-handles=prefer",
                ))
            }
            _ => return Err(format!("`{typed}`: use never, prefer or mandatory")),
        },
        "announce-submounts" => plan.announce_submounts = true,
        "no-announce-submounts" => plan.announce_submounts = false,
        // Both are what crossfs does: it passes O_DIRECT and O_NOATIME on as the guest
        // gave them.
        "allow-direct-io" | "preserve-noatime" => {}
        "no-killpriv-v2" => {}
        _ => return Err(refused_long(&typed)),
    }
    Ok(())
}

/// Why each long option crossfs cannot honour is refused; unknown ones say so.
fn refused_long(typed: &str) -> String {
    let why = match typed {
        "--tag" => {
            "crossfs does not advertise a tag over vhost-user; give it to the VMM \
             (QEMU: -device vhost-user-fs-pci,tag=...)"
        }
        "--socket-group" => {
            "crossfs cannot give the socket to a group; make the socket yourself and pass \
             it with --fd"
        }
        "--posix-acl" => "crossfs does not offer POSIX ACLs to the guest (FUSE_POSIX_ACL)",
        "--xattrmap" => "crossfs passes extended attribute names through unchanged",
        "--security-label" => "crossfs does not take security labels with a create",
        "--allow-mmap" => {
            "crossfs reads with direct I/O under --cache never and metadata, where a shared \
             mmap fails in the guest; use --cache auto or always"
        }
        "--modcaps" => "crossfs keeps the capabilities it was started with",
        "--killpriv-v2" => "crossfs does not offer FUSE_HANDLE_KILLPRIV_V2",
        "--uid-map" | "--gid-map" => "crossfs makes no user namespace",
        "--translate-uid" | "--translate-gid" => "crossfs does not translate ids",
        "--migration-mode"
        | "--migration-on-error"
        | "--migration-verify-handles"
        | "--migration-confirm-paths" => "crossfs cannot migrate a device's state",
        _ => return format!("unknown option `{typed}` (see `crossfs virtiofsd --help`)"),
    };
    refuse(typed, why)
}

/// The legacy `-o a,b=c` list (libvirt before separate options, older Kata).
fn compat_options(plan: &mut Plan, list: &str) -> Result<(), String> {
    for option in list.split(',').filter(|o| !o.is_empty()) {
        let typed = format!("-o {option}");
        match option.split_once('=') {
            Some(("source", dir)) => plan.source = Some(dir.to_owned()),
            Some(("cache", "none")) => plan.cache = "never",
            Some(("cache", mode @ ("auto" | "always" | "metadata"))) => {
                plan.cache = cache_mode(&typed, mode)?
            }
            Some(("cache", _)) => {
                return Err(format!("`{typed}`: use auto, always, none or metadata"))
            }
            Some(("loglevel" | "log_level", level)) => {
                plan.level = match level {
                    "debug" => LevelFilter::DEBUG,
                    "info" => LevelFilter::INFO,
                    "warn" => LevelFilter::WARN,
                    "err" => LevelFilter::ERROR,
                    _ => return Err(format!("`{typed}`: use debug, info, warn or err")),
                }
            }
            Some(("sandbox", mode)) => long_option(plan, "sandbox", Some(mode))?,
            Some(("xattrmap", _)) => {
                return Err(refused_long("--xattrmap").replace("--xattrmap", &typed))
            }
            Some(("modcaps", _)) => {
                return Err(refused_long("--modcaps").replace("--modcaps", &typed))
            }
            Some(_) => return Err(format!("unknown option `{typed}`")),
            None => compat_flag(plan, option, &typed)?,
        }
    }
    Ok(())
}

fn compat_flag(plan: &mut Plan, option: &str, typed: &str) -> Result<(), String> {
    match option {
        "xattr" => plan.xattr = true,
        "no_xattr" => plan.xattr = false,
        "readdirplus" => plan.readdirplus = true,
        "no_readdirplus" => plan.readdirplus = false,
        "writeback" => plan.writeback = Some(true),
        "no_writeback" => plan.writeback = Some(false),
        "debug" => plan.level = LevelFilter::DEBUG,
        "allow_direct_io" | "no_killpriv_v2" | "no_posix_acl" | "no_security_label" => {}
        // The guest's kernel keeps its locks itself: what virtiofsd does with these.
        "no_posix_lock" | "no_flock" => {}
        "posix_lock" | "flock" => {
            return Err(refuse(
                typed,
                "crossfs's virtio door takes no FUSE locks; the guest's kernel keeps them",
            ))
        }
        "no_allow_direct_io" => {
            return Err(refuse(
                typed,
                "crossfs passes O_DIRECT on to the host as the guest gave it",
            ))
        }
        "announce_submounts" => plan.announce_submounts = true,
        "killpriv_v2" => return Err(refused_long("--killpriv-v2").replace("--killpriv-v2", typed)),
        "posix_acl" => return Err(refused_long("--posix-acl").replace("--posix-acl", typed)),
        "security_label" => {
            return Err(refused_long("--security-label").replace("--security-label", typed))
        }
        _ => return Err(format!("unknown option `{typed}`")),
    }
    Ok(())
}

fn cache_mode(typed: &str, value: &str) -> Result<&'static str, String> {
    Ok(match value {
        "auto" => "auto",
        "always" => "always",
        "never" | "none" => "never",
        "metadata" => "metadata",
        _ => return Err(format!("`{typed}`: use auto, always, never or metadata")),
    })
}

fn log_level(typed: &str, value: &str) -> Result<LevelFilter, String> {
    value
        .parse()
        .map_err(|_| format!("`{typed}`: use error, warn, info, debug, trace or off"))
}

impl Plan {
    /// The `crossfs serve` arguments that do what the plan asks.
    fn serve_args(&self) -> Result<Vec<String>, String> {
        let dir = match (&self.shared_dir, &self.source) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!(
                    "`--shared-dir {a}` and `-o source={b}` name different directories; \
                     give one"
                ))
            }
            (Some(dir), _) | (None, Some(dir)) => dir.clone(),
            (None, None) => return Err("missing `--shared-dir` or `-o source`".into()),
        };
        let writeback = self.writeback == Some(true);
        if writeback && self.cache != "always" {
            return Err(refuse(
                "--writeback",
                "crossfs offers writeback caching with --cache always only",
            ));
        }
        let mut args = vec![
            "serve".to_owned(),
            dir,
            // No 9P door here, so no one to stream change events to.
            "--events".into(),
            "off".into(),
            "--exit-with-vmm".into(),
            "--cache".into(),
            self.cache.into(),
        ];
        match &self.socket {
            Some(Socket::Path(path)) => {
                args.extend(["--listen".into(), format!("vhost-user-fs:{path}")])
            }
            Some(Socket::Fd(fd)) => args.extend(["--vhost-user-fs-fd".into(), fd.to_string()]),
            None => return Err("missing `--socket-path` or `--fd`".into()),
        }
        if self.readonly {
            args.push("--read-only".into());
        }
        if !self.xattr {
            args.push("--no-xattr".into());
        }
        if !self.readdirplus {
            args.push("--no-readdirplus".into());
        }
        if self.announce_submounts {
            args.push("--announce-submounts".into());
        }
        if writeback {
            args.push("--writeback".into());
        }
        Ok(args)
    }
}

/// What `--help` prints: the options and what each becomes.
const HELP: &str = "\
crossfs as virtiofsd: serves a shared directory to one VMM over vhost-user-fs

usage: virtiofsd --shared-dir DIR (--socket-path PATH | --fd N) [OPTIONS]
       crossfs virtiofsd ... (the same)

  --shared-dir DIR, -o source=DIR     the directory to serve
  --socket-path PATH, --socket PATH   make the vhost-user socket here
  --fd N                              the listening unix socket inherited as N
  --cache auto|always|never|metadata  as `crossfs serve --cache` (-o cache=none: never)
  --readonly                          refuse every change (EROFS)
  --xattr, -o xattr                   serve extended attributes (off without it)
  --no-readdirplus                    do not offer READDIRPLUS
  --announce-submounts (default)      the guest mounts a directory on another device
  --no-announce-submounts               than its parent's as a submount; or does not
  --writeback, -o writeback           writeback caching; only with --cache always
  --log-level LEVEL, -d, -o loglevel  error, warn, info (default), debug, trace, off
  --syslog                            log to the system log instead of stderr
  --rlimit-nofile N                   set the open-file limit to N first (0: leave it)
  --print-capabilities                print the vhost-user backend capabilities
  accepted, crossfs already does what they ask: --thread-pool-size, --sandbox,
    --seccomp=none, --inode-file-handles=prefer, --allow-direct-io, --preserve-noatime,
    --no-killpriv-v2, -f, -o no_posix_lock, -o no_flock
  every other virtiofsd option is refused by name, with the reason

The process serves one VMM and exits when it disconnects. The README's \"Drop-in for
virtiofsd\" lists every option and what it maps to.
";

/// Runs crossfs as virtiofsd; `args` is the whole command line after the program name.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let args: Result<Vec<String>, _> = args.into_iter().map(OsString::into_string).collect();
    let Ok(args) = args else {
        eprintln!("{PREFIX}: arguments must be valid UTF-8");
        return ExitCode::from(USAGE);
    };
    let serve = parse(&args).and_then(|plan| {
        let serve = match plan.action {
            Action::Serve => plan.serve_args()?,
            _ => Vec::new(),
        };
        Ok((plan, serve))
    });
    let (plan, serve) = match serve {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("{PREFIX}: {msg}");
            return ExitCode::from(USAGE);
        }
    };
    match plan.action {
        Action::Serve => {}
        Action::Help => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Action::Version => {
            println!("crossfs {} (as virtiofsd)", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Action::PrintCapabilities => {
            // What the vhost-user backend spec asks: no migration, and the options as
            // separate arguments (libvirt then passes --shared-dir rather than -o).
            println!(
                "{{\n  \"type\": \"fs\",\n  \"features\": [\n    \"separate-options\"\n  ]\n}}"
            );
            return ExitCode::SUCCESS;
        }
    }
    crate::syslog::init_logging(plan.level, plan.syslog);
    for note in &plan.notes {
        tracing::info!("{note}");
    }
    if let Some(n) = plan.rlimit_nofile.filter(|&n| n > 0) {
        let limit = rustix::process::Rlimit {
            current: Some(n),
            maximum: Some(n),
        };
        if let Err(e) = rustix::process::setrlimit(rustix::process::Resource::Nofile, limit) {
            eprintln!("{PREFIX}: --rlimit-nofile {n}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let cli = match crate::args::Cli::try_parse_from(std::iter::once("crossfs".into()).chain(serve))
    {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("{PREFIX}: {e}");
            return ExitCode::from(USAGE);
        }
    };
    match crate::cmd::run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if plan.syslog {
                tracing::error!("{err:#}");
            }
            eprintln!("{PREFIX}: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn serve(list: &[&str]) -> Result<Vec<String>, String> {
        parse(&args(list))?.serve_args()
    }

    fn refusal(list: &[&str]) -> String {
        serve(list).unwrap_err()
    }

    #[test]
    fn writeback_is_asked_for_as_virtiofsd_asks() {
        let writeback = |extra: &[&str]| {
            let list = [&["--shared-dir=/srv", "--fd=3", "--cache=always"], extra].concat();
            serve(&list).unwrap().contains(&"--writeback".to_owned())
        };
        // `always` alone keeps no writeback cache, as virtiofsd's.
        assert!(!writeback(&[]));
        assert!(writeback(&["--writeback"]));
        assert!(writeback(&["-o", "writeback"]));
        assert!(!writeback(&["-o", "no_writeback"]));
    }

    #[test]
    fn libvirt_kata_and_podman_command_lines_map() {
        // libvirt, legacy form.
        assert_eq!(
            serve(&[
                "--fd=3",
                "-o",
                "source=/srv/share,cache=always,sandbox=chroot,xattr,no_flock,no_posix_lock",
                "--thread-pool-size=16",
                "-d"
            ])
            .unwrap(),
            args(&[
                "serve",
                "/srv/share",
                "--events",
                "off",
                "--exit-with-vmm",
                "--cache",
                "always",
                "--vhost-user-fs-fd",
                "3",
                "--announce-submounts"
            ])
        );
        // libvirt, separate options.
        let plan = parse(&args(&[
            "--fd=3",
            "--shared-dir",
            "/srv/share",
            "--cache",
            "never",
            "--sandbox",
            "namespace",
            "--xattr",
            "--thread-pool-size=4",
            "--rlimit-nofile=4096",
            "--log-level=debug",
        ]))
        .unwrap();
        assert_eq!(
            (plan.rlimit_nofile, plan.level),
            (Some(4096), LevelFilter::DEBUG)
        );
        assert_eq!(plan.notes.len(), 2, "{:?}", plan.notes);
        assert_eq!(
            plan.serve_args().unwrap()[5..],
            args(&[
                "--cache",
                "never",
                "--vhost-user-fs-fd",
                "3",
                "--announce-submounts"
            ])
        );
        // Kata.
        let plan = parse(&args(&[
            "--syslog",
            "--cache=auto",
            "--shared-dir=/run/kata/shared",
            "--fd=3",
            "--thread-pool-size=1",
            "--announce-submounts",
        ]))
        .unwrap();
        assert!(plan.syslog);
        assert_eq!(
            plan.serve_args().unwrap(),
            args(&[
                "serve",
                "/run/kata/shared",
                "--events",
                "off",
                "--exit-with-vmm",
                "--cache",
                "auto",
                "--vhost-user-fs-fd",
                "3",
                "--no-xattr",
                "--announce-submounts"
            ])
        );
        // Older Kata.
        assert_eq!(
            serve(&[
                "--syslog",
                "-o",
                "cache=none",
                "-o",
                "no_posix_lock",
                "-o",
                "source=/run/kata/shared",
                "--fd=3",
                "-f"
            ])
            .unwrap()[5..7],
            args(&["--cache", "never"])
        );
        // podman machine.
        assert_eq!(
            serve(&[
                "--sandbox",
                "none",
                "--socket-path",
                "/run/user/1000/podman/vm.sock",
                "--shared-dir",
                ".",
                "--seccomp=none",
                "--readonly",
                "--no-readdirplus",
                "--no-announce-submounts"
            ])
            .unwrap(),
            args(&[
                "serve",
                ".",
                "--events",
                "off",
                "--exit-with-vmm",
                "--cache",
                "auto",
                "--listen",
                "vhost-user-fs:/run/user/1000/podman/vm.sock",
                "--read-only",
                "--no-xattr",
                "--no-readdirplus"
            ])
        );
        assert_eq!(
            parse(&args(&["--print-capabilities"])).unwrap().action,
            Action::PrintCapabilities
        );
    }

    #[test]
    fn each_refusal_names_its_option_and_why() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--posix-acl"],
                "`--posix-acl` is not supported: crossfs does not offer POSIX ACLs to the \
                 guest (FUSE_POSIX_ACL)",
            ),
            (
                &["-o", "posix_acl"],
                "`-o posix_acl` is not supported: crossfs does not offer POSIX ACLs to the \
                 guest (FUSE_POSIX_ACL)",
            ),
            (
                &["--seccomp", "kill"],
                "`--seccomp=kill` is not supported: crossfs installs no seccomp filter; pass \
                 --seccomp=none",
            ),
            (
                &["--tag", "fs0"],
                "`--tag` is not supported: crossfs does not advertise a tag over vhost-user; \
                 give it to the VMM (QEMU: -device vhost-user-fs-pci,tag=...)",
            ),
            (
                &["--socket-group=kvm"],
                "`--socket-group` is not supported: crossfs cannot give the socket to a \
                 group; make the socket yourself and pass it with --fd",
            ),
            (
                &["--xattrmap", ":map::user.virtiofs.:"],
                "`--xattrmap` is not supported: crossfs passes extended attribute names \
                 through unchanged",
            ),
            (
                &["-o", "xattrmap=:map::user.virtiofs.:"],
                "`-o xattrmap=:map::user.virtiofs.:` is not supported: crossfs passes \
                 extended attribute names through unchanged",
            ),
            (
                &["--security-label"],
                "`--security-label` is not supported: crossfs does not take security labels \
                 with a create",
            ),
            (
                &["--allow-mmap"],
                "`--allow-mmap` is not supported: crossfs reads with direct I/O under --cache \
                 never and metadata, where a shared mmap fails in the guest; use --cache auto \
                 or always",
            ),
            (
                &["--modcaps=-mknod:-setfcap"],
                "`--modcaps` is not supported: crossfs keeps the capabilities it was started \
                 with",
            ),
            (
                &["--killpriv-v2"],
                "`--killpriv-v2` is not supported: crossfs does not offer \
                 FUSE_HANDLE_KILLPRIV_V2",
            ),
            (
                &["--uid-map", ":0:100000:65536:"],
                "`--uid-map` is not supported: crossfs makes no user namespace",
            ),
            (
                &["--translate-gid", "guest:0:1000:1"],
                "`--translate-gid` is not supported: crossfs does not translate ids",
            ),
            (
                &["--migration-mode=file-handles"],
                "`--migration-mode` is not supported: crossfs cannot migrate a device's state",
            ),
            (
                &["--inode-file-handles=mandatory"],
                "`--inode-file-handles=mandatory` is not supported: crossfs keeps O_PATH \
                 descriptors and reopens by file handle only past its descriptor budget; use \
                 --inode-file-handles=prefer",
            ),
            (
                &["-o", "source=/srv,posix_lock"],
                "`-o posix_lock` is not supported: crossfs's virtio door takes no FUSE locks; \
                 the guest's kernel keeps them",
            ),
            (
                &["-o", "no_allow_direct_io"],
                "`-o no_allow_direct_io` is not supported: crossfs passes O_DIRECT on to the \
                 host as the guest gave it",
            ),
            (
                &["--shared-dir=/srv", "--fd=3", "--writeback"],
                "`--writeback` is not supported: crossfs offers writeback caching with \
                 --cache always only",
            ),
            (
                &["--bogus"],
                "unknown option `--bogus` (see `crossfs virtiofsd --help`)",
            ),
            (&["-o", "norace"], "unknown option `-o norace`"),
            (&["--fd", "three"], "`--fd`: `three` is not a number"),
            (
                &["--cache", "sometimes"],
                "`--cache`: use auto, always, never or metadata",
            ),
            (&["--fd"], "`--fd` needs a value"),
            (&["--xattr=1"], "`--xattr` takes no value"),
            (
                &["--socket-path=/s"],
                "missing `--shared-dir` or `-o source`",
            ),
            (&["--shared-dir=/srv"], "missing `--socket-path` or `--fd`"),
            (
                &["--shared-dir=/srv", "-o", "source=/", "--fd=3"],
                "`--shared-dir /srv` and `-o source=/` name different directories; give one",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(refusal(line), *want, "{line:?}");
        }
    }

    #[test]
    fn the_serve_command_it_makes_parses() {
        use clap::Parser;
        let argv = serve(&["--fd=3", "--shared-dir=/srv", "--cache=metadata", "--xattr"]).unwrap();
        let cli =
            crate::args::Cli::try_parse_from(std::iter::once("crossfs".to_owned()).chain(argv))
                .unwrap();
        let crate::args::Command::Serve(s) = cli.command else {
            panic!("not serve");
        };
        assert_eq!(s.vhost_user_fs_fd, Some(3));
        assert!(s.exit_with_vmm && !s.no_xattr && s.listen.is_empty());
        assert_eq!(s.cache, crossfs_virtiofs::CacheMode::Metadata);
        assert!(invoked_as_virtiofsd(&"/usr/libexec/virtiofsd".into()));
        assert!(!invoked_as_virtiofsd(&"/usr/bin/crossfs".into()));
    }
}
