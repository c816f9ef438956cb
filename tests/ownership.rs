//! Who owns what a caller creates through a `crossfs mount` made by root (shared with every
//! user by default, as `--allow-other`), and who may touch it: the same as on a local
//! directory. `--private` keeps everyone else out. Runs as root (the server gives files
//! away only as root) and switches to the user `nobody` with `setpriv`, as pjdfstest does
//! with seteuid.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use common::*;

const NOBODY: u32 = 65534;

/// Runs `argv` as uid/gid `NOBODY` with no supplementary groups; returns whether it worked.
fn as_nobody(argv: &[&str]) -> bool {
    Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--",
        ])
        .args(argv)
        .status()
        .unwrap_or_else(|e| panic!("running setpriv (util-linux): {e}"))
        .success()
}

/// Creates files of every kind in `dir` as root and as `nobody`, in a plain and in a
/// set-group-ID directory, and says who owns each and what `nobody` may not do. The
/// set-group-ID directory is made in `host`, the same directory as seen by the host: a
/// default server does not let clients set set-id bits (README, "Setuid and setgid").
fn scenario(dir: &Path, host: &Path) -> Vec<String> {
    let mut seen = Vec::new();
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    run_ok(Command::new("chmod").arg("1777").arg(&open));
    let on_host = host.join("sgid");
    std::fs::create_dir(&on_host).unwrap();
    run_ok(Command::new("chown").arg("0:1234").arg(&on_host));
    run_ok(Command::new("chmod").arg("2777").arg(&on_host));
    if host != dir {
        // A change on the host shows through a mount once synced (its event may come
        // after the next step otherwise).
        run_ok(Command::new(crossfs_bin()).arg("sync").arg(dir));
    }
    let sgid = dir.join("sgid");
    for d in [&open, &sgid] {
        let p = |n: &str| d.join(n).to_str().unwrap().to_owned();
        assert!(
            as_nobody(&["touch", &p("file")]),
            "nobody creates {}",
            p("file")
        );
        assert!(as_nobody(&["mkdir", &p("dir")]));
        assert!(as_nobody(&["ln", "-s", "target", &p("link")]));
        assert!(as_nobody(&["mkfifo", &p("fifo")]));
        // After a first create, in a directory the mount knows whole (listed): what a
        // mount sending changes behind sends behind.
        assert!(std::fs::read_dir(d).unwrap().count() >= 4);
        let more = format!(
            "touch {0}/file2 && mkdir {0}/dir2 && echo x > {0}/dir2/file3",
            p("")
        );
        assert!(as_nobody(&["sh", "-c", &more]));
        std::fs::write(d.join("roots"), b"root's").unwrap();
        run_ok(Command::new("chmod").arg("644").arg(p("roots")));
        for name in [
            "file",
            "dir",
            "link",
            "fifo",
            "roots",
            "file2",
            "dir2",
            "dir2/file3",
        ] {
            let m = std::fs::symlink_metadata(d.join(name)).unwrap();
            let name = format!("{}/{name}", d.file_name().unwrap().to_str().unwrap());
            seen.push(format!("{name}: uid {} gid {}", m.uid(), m.gid()));
        }
        // Permission checks for other users: root's 0644 file is not nobody's to change,
        // and in a sticky directory not nobody's to remove.
        let writes = as_nobody(&["sh", "-c", &format!("echo x >> {}", p("roots"))]);
        let removes = as_nobody(&["rm", "-f", &p("roots")]);
        seen.push(format!(
            "nobody writes root's file: {writes}, removes it: {removes}"
        ));
    }
    seen
}

/// Who owns each file [`scenario`] made under `dir`.
fn scenario_owners(dir: &Path) -> Vec<String> {
    let mut owners = Vec::new();
    for d in ["open", "sgid"] {
        for name in ["file", "dir", "link", "fifo", "file2", "dir2", "dir2/file3"] {
            let m = std::fs::symlink_metadata(dir.join(d).join(name)).unwrap();
            owners.push(format!("{d}/{name}: uid {} gid {}", m.uid(), m.gid()));
        }
    }
    owners
}

#[test]
fn files_belong_to_their_creator_as_on_a_local_directory() {
    let local = tempfile::tempdir().unwrap();
    // The local directory must be reachable by nobody, as the mount is.
    run_ok(Command::new("chmod").arg("755").arg(local.path()));
    let expected = scenario(local.path(), local.path());

    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let sock = dir.path().join("s.sock");
    let addr = format!("unix:{}", sock.display());
    let _serve = Serve::start(&export, &addr, &[]);
    // Root's mount is shared by default; `--allow-other` says the same explicitly. With
    // changes sent behind, a user's creates after the first go behind, and so does the
    // chown that gives each to its creator (the server, as root, makes files as itself).
    let configs: [(&str, &[&str]); 3] = [
        ("auto", &["--cache", "auto"]),
        ("never", &["--cache", "never", "--allow-other"]),
        ("behind", &["--changes", "behind"]),
    ];
    for (mode, args) in configs {
        let mut mount = Mount::start(&addr, args);
        // Changes go behind only while the server's events are followed.
        mount.wait_following();
        let parent = mount.mountpoint.parent().unwrap();
        run_ok(Command::new("chmod").arg("755").arg(parent));
        let sub = mount.mountpoint.join(mode);
        std::fs::create_dir(&sub).unwrap();
        let actual = scenario(&sub, &export.join(mode));
        assert_same_output(
            "local directory",
            &expected.join("\n"),
            &format!("crossfs mount {}", args.join(" ")),
            &actual.join("\n"),
        );
        // The host sees the same owners.
        run_ok(Command::new(crossfs_bin()).arg("sync").arg(&sub));
        let on_host = scenario_owners(&export.join(mode));
        assert_eq!(on_host, scenario_owners(&sub), "{mode}: the host's owners");
        let m = std::fs::metadata(export.join(mode).join("sgid/file")).unwrap();
        assert_eq!((m.uid(), m.gid()), (NOBODY, 1234));
        if mode == "behind" {
            let stats = mount.stats();
            let sent = |m: &str| stats["9p"][m]["count"].as_u64().unwrap_or(0);
            // open/file2, open/dir2/file3; open/dir, open/dir2 (not in the set-group-ID
            // directory, whose group the first create there shows).
            assert!(
                sent("Tcreatebehindmarked") >= 2 && sent("Tmkdirbehind") >= 2,
                "nobody's creates and mkdirs after the first went behind: {}",
                stats["9p"]
            );
        }
        assert!(mount.stop().success());
    }
}

#[test]
fn a_private_mount_keeps_other_users_out() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::write(export.join("readable"), b"for all").unwrap();
    let sock = dir.path().join("s.sock");
    let addr = format!("unix:{}", sock.display());
    let _serve = Serve::start(&export, &addr, &[]);
    for (args, others_read) in [(&[][..], true), (&["--private"][..], false)] {
        let mut mount = Mount::start(&addr, args);
        run_ok(
            Command::new("chmod")
                .arg("755")
                .arg(mount.mountpoint.parent().unwrap()),
        );
        let file = mount.mountpoint.join("readable");
        let file = file.to_str().unwrap();
        assert_eq!(
            std::fs::read(file).unwrap(),
            b"for all",
            "root reads {args:?}"
        );
        assert_eq!(
            as_nobody(&["cat", file]),
            others_read,
            "nobody reads a 0644 file through a mount made with {args:?}"
        );
        assert!(mount.stop().success());
    }
}

/// Writes and truncates set-id files in `dir` as `nobody` and as root, and says what mode
/// each file then has in `host` (the same directory as the host sees it): `nobody` lacks
/// `CAP_FSETID`, so its write or truncate clears `S_ISUID`, and `S_ISGID` where group
/// execute is set; root's keeps them.
fn set_id_scenario(dir: &Path, host: &Path) -> Vec<String> {
    let cases: [(&str, &str, &str); 7] = [
        ("suid", "4777", "nobody writes"),
        ("sgid_gx", "2777", "nobody writes"),
        ("sgid_no_gx", "2767", "nobody writes"),
        ("both_root", "6777", "root writes"),
        ("both_truncated", "6777", "nobody truncates"),
        ("both_opened_o_trunc", "6777", "nobody opens with O_TRUNC"),
        ("both_root_truncated", "6777", "root truncates"),
    ];
    for (name, mode, _) in cases {
        std::fs::write(host.join(name), b"before\n").unwrap();
        run_ok(Command::new("chmod").arg(mode).arg(host.join(name)));
    }
    if dir != host {
        // The mount has seen the host's changes.
        run_ok(Command::new(crossfs_bin()).arg("sync").arg(dir));
    }
    let mut seen = Vec::new();
    for (name, mode, act) in cases {
        let p = dir.join(name).to_str().unwrap().to_owned();
        let done = match act {
            "nobody writes" => as_nobody(&["sh", "-c", &format!("echo more >> {p}")]),
            "nobody truncates" => as_nobody(&["truncate", "-s", "2", &p]),
            "nobody opens with O_TRUNC" => as_nobody(&["sh", "-c", &format!(": > {p}")]),
            "root writes" => std::fs::OpenOptions::new()
                .append(true)
                .open(&p)
                .and_then(|mut f| std::io::Write::write_all(&mut f, b"more\n"))
                .is_ok(),
            "root truncates" => run_ok(Command::new("truncate").args(["-s", "2", &p]))
                .status
                .success(),
            _ => unreachable!(),
        };
        let m = std::fs::metadata(host.join(name)).unwrap();
        seen.push(format!(
            "{name} ({mode}), {act}: {done}, mode {:o}, size {}",
            m.mode() & 0o7777,
            m.len()
        ));
    }
    seen
}

#[test]
fn a_write_or_truncate_by_a_user_without_cap_fsetid_clears_set_id_bits_on_the_host() {
    let local = tempfile::tempdir().unwrap();
    run_ok(Command::new("chmod").arg("755").arg(local.path()));
    let expected = set_id_scenario(local.path(), local.path());

    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let sock = dir.path().join("s.sock");
    let addr = format!("unix:{}", sock.display());
    // A root server keeps set-id bits through its own writes (it has CAP_FSETID): the
    // mount asks it to clear them for a caller who lacks it (FUSE_HANDLE_KILLPRIV_V2).
    let _serve = Serve::start(&export, &addr, &["--allow-setuid"]);
    for (mode, args) in [("auto", &[][..]), ("behind", &["--changes", "behind"][..])] {
        let mut mount = Mount::start(&addr, args);
        // Changes go behind only while the server's events are followed.
        mount.wait_following();
        let parent = mount.mountpoint.parent().unwrap();
        run_ok(Command::new("chmod").arg("755").arg(parent));
        let sub = mount.mountpoint.join(mode);
        std::fs::create_dir(&sub).unwrap();
        run_ok(Command::new("chmod").arg("755").arg(&sub));
        mount.wait_following();
        let actual = set_id_scenario(&sub, &export.join(mode));
        assert_same_output(
            "local directory",
            &expected.join("\n"),
            &format!("crossfs mount ({mode})"),
            &actual.join("\n"),
        );
        assert!(mount.stop().success());
    }
}
