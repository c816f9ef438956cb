//! Mount options, the words of an fstab line and of `-o`: one parser for both doors,
//! mount(8)'s helper (`mount.crossfs ADDR DIR -o OPTIONS`) and `crossfs mount -o OPTIONS`.
//!
//! Each option is a `crossfs mount` flag without its dashes (`cache=auto`, `negative-ttl=0`
//! or `negative_ttl=0`, `no-events`, `private`, ...), checked against the mount command's own
//! arguments, so that every flag maps and no list is kept twice. Besides those:
//! - `ro` is `--read-only`; sshfs's `allow_other`, `default_permissions`, `uid=N` and
//!   `gid=N` are crossfs's flags of the same meaning; sshfs's `reconnect` asks for what
//!   crossfs does unless `no-reconnect` is given, and is refused with it.
//! - mount(8)'s own (`defaults`, `rw`, `auto`, `noauto`, `user`, `nofail`, `_netdev`,
//!   `x-*`, `comment=*`, ...) are for mount(8) and are accepted; `nosuid`, `nodev`,
//!   `exec`, `relatime` and `atime` ask for what every crossfs mount is; `noexec` and
//!   `noatime` are flags.
//! - What crossfs cannot honour (`suid`, `dev`, libfuse's and sshfs's own options such as
//!   `allow_root` or `idmap=user`) is refused by name, with what to use instead where
//!   there is something: an option is never ignored.

use std::ffi::OsString;

use clap::CommandFactory;

/// Options mount(8) itself interprets (or keeps for userspace tools), or that ask for what
/// every crossfs mount is: nothing for the client to do.
fn is_granted(name: &str) -> bool {
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
            | "loud"
            | "comment"
            // Every crossfs mount is nosuid and nodev, and executes with relatime.
            | "exec"
            | "nosuid"
            | "nodev"
            | "atime"
            | "relatime"
    ) || name.starts_with("x-")
}

/// Options other FUSE file systems take that crossfs cannot honour, and what to say.
fn refusal(name: &str) -> Option<&'static str> {
    Some(match name {
        "suid" | "dev" => "crossfs mounts are always nosuid and nodev",
        "allow_root" => "use allow_other (every user) or private (only the one mounting)",
        "nonempty" => "crossfs mounts over a directory whatever it holds",
        "auto_unmount" => "the client unmounts on SIGINT and SIGTERM",
        "idmap" | "uidfile" | "gidfile" | "nomap" => {
            "use uid=N and gid=N to show every file as one owner's"
        }
        "kernel_cache" | "auto_cache" => "use cache=always or cache=auto",
        "direct_io" => "use cache=never",
        "entry_timeout" | "attr_timeout" | "negative_timeout" | "cache_timeout"
        | "dcache_timeout" | "dir_cache" => "use cache= and negative_ttl= (milliseconds)",
        "follow_symlinks" | "transform_symlinks" => {
            "symlinks are shown as the server has them, resolved by this kernel"
        }
        "sync" | "dirsync" => "not supported: crossfs mounts are asynchronous",
        _ => return None,
    })
}

/// Splits `-o` lists (`a,b=c`) into options.
pub fn split<'a>(lists: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    lists
        .into_iter()
        .flat_map(|list| list.split(','))
        .filter(|o| !o.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `crossfs mount` flags for `options`. With `sloppy` (mount(8)'s `-s`), options crossfs
/// does not know are skipped rather than refused.
///
/// # Errors
/// The message for an unknown option, one crossfs cannot honour, or a value where none
/// belongs (or none where one does).
pub fn translate(options: &[String], sloppy: bool) -> Result<Vec<String>, String> {
    let cli = crate::args::Cli::command();
    let mount = cli.find_subcommand("mount").ok_or("no mount subcommand")?;
    let mut flags = Vec::new();
    let named = |n: &str| {
        options
            .iter()
            .any(|o| o.split('=').next().map(|o| o.replace('_', "-")) == Some(n.into()))
    };
    for option in options {
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (option.as_str(), None),
        };
        if is_granted(name) {
            continue;
        }
        if name == "reconnect" {
            // sshfs's word for what crossfs does by default.
            if named("no-reconnect") {
                return Err("options `reconnect` and `no-reconnect` contradict each other".into());
            }
            continue;
        }
        if let Some(why) = refusal(name) {
            if sloppy {
                continue;
            }
            return Err(format!("option `{option}` is not supported: {why}"));
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
    let parsed = clap::Command::new("crossfs mount -o")
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

/// `crossfs ... mount ...` with the flags its `options` stand for put right after `mount`
/// (before any `--`), to be parsed again.
///
/// # Errors
/// As [`translate`].
pub fn expand_mount_argv(argv: &[OsString], options: &[String]) -> Result<Vec<OsString>, String> {
    let flags = translate(&split(options.iter().map(String::as_str)), false)?;
    // The first word that is not a flag is the subcommand: the global flags (-v, -q) take
    // no values.
    let at = argv
        .iter()
        .skip(1)
        .position(|a| !a.to_string_lossy().starts_with('-'))
        .map_or(argv.len(), |i| i + 2);
    let mut expanded = argv[..at].to_vec();
    expanded.extend(flags.into_iter().map(OsString::from));
    expanded.extend_from_slice(&argv[at..]);
    Ok(expanded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_map_to_the_mount_command_flags() {
        let opts = strings(&[
            "defaults",
            "rw",
            "_netdev",
            "x-systemd.automount",
            "nosuid",
            "cache=always",
            "negative_ttl=0",
            "negative-ttl=5",
            "ro",
            "private",
            "no-events",
            "noexec",
            "io_uring",
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
                "--no-events",
                "--noexec",
                "--io-uring",
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

    #[test]
    fn sshfs_words_mean_what_they_mean_there() {
        let opts = strings(&[
            "default_permissions",
            "allow_other",
            "reconnect",
            "uid=1000",
            "gid=100",
        ]);
        assert_eq!(
            translate(&opts, false).unwrap(),
            [
                "--default-permissions",
                "--allow-other",
                "--uid",
                "1000",
                "--gid",
                "100"
            ]
        );
        let err = translate(&strings(&["reconnect", "no_reconnect"]), false).unwrap_err();
        assert!(err.contains("contradict"), "{err}");
        for refused in [
            "allow_root",
            "idmap=user",
            "suid",
            "direct_io",
            "kernel_cache",
        ] {
            let err = translate(&strings(&[refused]), false).unwrap_err();
            assert!(
                err.starts_with(&format!("option `{refused}` is not supported: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn flags_go_right_after_the_subcommand() {
        let argv: Vec<OsString> = ["crossfs", "-v", "mount", "-o", "ro,cache=never", "a", "b"]
            .map(OsString::from)
            .to_vec();
        let got = expand_mount_argv(&argv, &strings(&["ro,cache=never"])).unwrap();
        assert_eq!(
            got,
            [
                "crossfs",
                "-v",
                "mount",
                "--read-only",
                "--cache",
                "never",
                "-o",
                "ro,cache=never",
                "a",
                "b"
            ]
            .map(OsString::from)
        );
    }
}
