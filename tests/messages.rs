//! What the user reads when something is wrong, word for word: every error names the flag or
//! option that fixes it as the user typed it, says the address once, and hints where a hint
//! helps; logs carry no colour codes when they do not go to a terminal.
//!
//! Each case runs the real binary against real sockets and mounts. Waits have generous
//! limits that only turn a hang into a failure; nothing asserts how fast anything is.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Runs `cmd` to its end, failing the test instead of hanging if it runs past 20 s.
fn run_bounded(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("{cmd:?} still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Runs `crossfs ARGS`, expecting it to fail with `message` as the last line of stderr
/// (after any log lines), said once; returns stderr.
fn fails_saying(args: &[&str], message: &str) -> String {
    let out = run_bounded(Command::new(crossfs_bin()).args(args));
    assert!(!out.status.success(), "crossfs {args:?} succeeded");
    let text = stderr_of(&out);
    assert_eq!(
        text.lines().last(),
        Some(message),
        "crossfs {args:?}: {text}"
    );
    assert_eq!(text.matches(message).count(), 1, "{text}");
    text
}

#[test]
fn a_remote_tcp_listener_names_the_flags_that_allow_it() {
    let export = tempfile::tempdir().unwrap();
    fails_saying(
        &[
            "serve",
            export.path().to_str().unwrap(),
            "--listen",
            "tcp:0.0.0.0:5641",
        ],
        "crossfs: refusing to listen on tcp:0.0.0.0:5641: 0.0.0.0 is not a loopback address, \
         and 9P2000.L has no encryption; to serve other machines anyway, add --allow-remote \
         --token-file PATH (clients then need the token)",
    );
}

#[test]
fn a_refused_connect_says_the_address_once_and_asks_for_the_server() {
    let work = tempfile::tempdir().unwrap();
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let port = free_port();
    let addr = format!("tcp:127.0.0.1:{port}");
    fails_saying(
        &["mount", &addr, mnt.to_str().unwrap()],
        &format!("crossfs: connecting to {addr}: Connection refused (is `crossfs serve` running?)"),
    );
    fails_saying(
        &["watch", &addr],
        &format!("crossfs: connecting to {addr}: Connection refused (is `crossfs serve` running?)"),
    );
    let sock = work.path().join("nobody.sock");
    let addr = format!("unix:{}", sock.display());
    fails_saying(
        &["watch", &addr],
        &format!(
            "crossfs: connecting to {addr}: No such file or directory (is `crossfs serve` \
             running?)"
        ),
    );
}

#[test]
fn a_busy_address_is_reported_before_any_watch_is_set_up() {
    let export = tempfile::tempdir().unwrap();
    common::make_source_tree(export.path(), 20);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("tcp:{}", taken.local_addr().unwrap());
    let message = format!(
        "crossfs: listening on {addr}: the address is in use (another `crossfs serve` or \
         another program listens there); stop it or choose another --listen"
    );
    let text = fails_saying(
        &["serve", export.path().to_str().unwrap(), "--listen", &addr],
        &message,
    );
    // Nothing else on stderr: no line of the watcher (which logs once its watches are set)
    // nor of the export, which both come after the listeners now.
    assert_eq!(text, format!("{message}\n"));
}

#[test]
fn stats_takes_a_mount_point_and_refuses_what_is_not_a_control_socket() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let sock = work.path().join("data.sock");
    let addr = format!("unix:{}", sock.display());
    let _serve = Serve::start(&export, &addr, &[]);
    let mount = Mount::start(&addr, &[]);

    // A mount point, as `sync` and `watch` take it: the mount's own counters.
    let out = run_ok(
        Command::new(crossfs_bin())
            .arg("stats")
            .arg(&mount.mountpoint)
            .arg("--json"),
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["mountpoint"],
        mount.mountpoint.to_str().unwrap(),
        "{doc}"
    );

    // The data socket speaks 9P: it waits for its client, and stats says what it is.
    let data = sock.to_str().unwrap();
    fails_saying(
        &["stats", data],
        &format!(
            "crossfs: {data} said nothing within 1 s: it is not a control socket (a 9P \
             --listen socket waits for its client to speak first); give the --control PATH \
             of `crossfs serve` or `crossfs mount`, or a mount point"
        ),
    );
    let file = export.join("plain");
    std::fs::write(&file, b"x").unwrap();
    let file = file.to_str().unwrap();
    fails_saying(
        &["stats", file],
        &format!(
            "crossfs: {file} is not a control socket (give the --control PATH of `crossfs \
             serve` or `crossfs mount`, or a mount point of `crossfs mount`)"
        ),
    );
    let plain_dir = work.path().to_str().unwrap();
    fails_saying(
        &["stats", plain_dir],
        &format!(
            "crossfs: {plain_dir} is not a crossfs mount (give a mount point of `crossfs \
             mount`, or a --control PATH)"
        ),
    );
}

#[test]
fn sync_on_a_mount_without_events_names_the_flag_not_the_server() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let addr = format!("unix:{}", work.path().join("s.sock").display());
    let _serve = Serve::start(&export, &addr, &[]);
    let mount = Mount::start(&addr, &["--no-events"]);
    let mnt = mount.mountpoint.to_str().unwrap();
    fails_saying(
        &["sync", mnt],
        &format!(
            "crossfs: syncing the crossfs mount at {mnt}: the mount does not follow change \
             events: it was mounted with --no-events (fstab: no-events), so there is nothing \
             to wait for; host changes show as its --cache timeouts allow"
        ),
    );

    // And a server without events: then it is the server's doing, and says which flag.
    let export2 = work.path().join("export2");
    std::fs::create_dir(&export2).unwrap();
    let addr2 = format!("unix:{}", work.path().join("s2.sock").display());
    let _serve2 = Serve::start(&export2, &addr2, &["--events", "off"]);
    let mount2 = Mount::start(&addr2, &[]);
    let mnt2 = mount2.mountpoint.to_str().unwrap();
    fails_saying(
        &["sync", mnt2],
        &format!(
            "crossfs: syncing the crossfs mount at {mnt2}: the mount does not follow change \
             events: its server streams none (not a crossfs server, or `crossfs serve \
             --events off`)"
        ),
    );
}

#[test]
fn a_bad_fstab_value_is_reported_as_the_option_typed() {
    let bin = tempfile::tempdir().unwrap();
    let helper = bin.path().join("mount.crossfs");
    std::os::unix::fs::symlink(crossfs_bin(), &helper).unwrap();
    let work = tempfile::tempdir().unwrap();
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let addr = format!("unix:{}", work.path().join("s.sock").display());
    for (option, why) in [
        (
            "cache=bogus",
            "unknown cache mode \"bogus\" (expected never, metadata, auto or always)",
        ),
        ("max_pages=0", "0 is not in 1..=65536"),
        ("uid=me", "invalid digit found in string"),
    ] {
        let out = run_bounded(
            Command::new(&helper)
                .arg(&addr)
                .arg(&mnt)
                .args(["-o", &format!("_netdev,{option}")]),
        );
        assert_eq!(out.status.code(), Some(1), "{option}: {}", stderr_of(&out));
        assert_eq!(
            stderr_of(&out),
            format!("mount.crossfs: option `{option}`: {why}\n")
        );
    }
}

/// The first byte that starts an ANSI escape sequence.
const ESC: u8 = 0x1b;

#[test]
fn logs_to_files_and_pipes_carry_no_colour_codes() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();

    // stderr into a file.
    let log = work.path().join("stderr.log");
    let addr = format!("unix:{}", work.path().join("a.sock").display());
    let mut serve = Command::new(crossfs_bin())
        .args(["serve", export.to_str().unwrap(), "--listen", &addr])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until("serving", Duration::from_secs(20), || {
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("serving on")
    });
    let _ = serve.kill();
    let _ = serve.wait();
    let text = std::fs::read(&log).unwrap();
    assert!(!text.contains(&ESC), "{}", String::from_utf8_lossy(&text));

    // --log-file: the log goes there, uncoloured, and nothing to stderr.
    let log = work.path().join("crossfs.log");
    let addr = format!("unix:{}", work.path().join("b.sock").display());
    let mut serve = Command::new(crossfs_bin())
        .args(["serve", export.to_str().unwrap(), "--listen", &addr])
        .arg("--log-file")
        .arg(&log)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("serving", Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("serving on"))
    });
    let _ = serve.kill();
    let mut err = String::new();
    serve
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let _ = serve.wait();
    assert_eq!(err, "");
    let text = std::fs::read(&log).unwrap();
    assert!(!text.contains(&ESC), "{}", String::from_utf8_lossy(&text));

    let dir = Path::new("/nonexistent-dir");
    fails_saying(
        &[
            "--log-file",
            "/nonexistent-dir/x.log",
            "serve",
            dir.to_str().unwrap(),
            "--listen",
            &addr,
        ],
        "crossfs: --log-file /nonexistent-dir/x.log: No such file or directory (os error 2)",
    );
}

#[test]
fn a_refused_attach_points_at_the_token() {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let token = work.path().join("token");
    let wrong = work.path().join("wrong");
    for (path, secret) in [(&token, "right\n"), (&wrong, "wrong\n")] {
        std::fs::write(path, secret).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let addr = format!("unix:{}", work.path().join("s.sock").display());
    let _serve = Serve::start(&export, &addr, &["--token-file", token.to_str().unwrap()]);
    let mnt = mnt.to_str().unwrap();
    let no_token = format!(
        "crossfs: attaching to {addr}: the server refused (permission denied); if it was \
         started with --token-file, give the same secret with --token-file PATH"
    );
    fails_saying(&["mount", &addr, mnt], &no_token);
    fails_saying(&["watch", &addr], &no_token);
    fails_saying(
        &["mount", &addr, mnt, "--token-file", wrong.to_str().unwrap()],
        &format!(
            "crossfs: attaching to {addr}: the server refused the token (permission denied); \
             --token-file must hold the secret of the server's --token-file"
        ),
    );
}
