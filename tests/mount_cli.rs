//! `crossfs mount` as a user runs it: the real binary serving and mounting, a script of file
//! operations through the mount compared with the same script on a local directory, against
//! crossfs's own server and against diod (a 9P2000.L server no one here wrote).

mod common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;

fn compare_with_local(addr: &str, export: &std::path::Path, mount_args: &[&str], label: &str) {
    let local = tempfile::tempdir().unwrap();
    let expected = run_ops_script(local.path());
    let mut mount = Mount::start(addr, mount_args);
    let actual = run_ops_script(&mount.mountpoint);
    println!("--- ops.sh through {label} ---\n{actual}");
    assert_same_output("local directory", &expected, label, &actual);
    // What the mount left in the export is what the script left locally.
    let listing = |dir: &std::path::Path| {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    assert_eq!(listing(export), listing(local.path()));
    let status = mount.stop();
    assert!(status.success(), "crossfs mount exited with {status}");
    assert!(!is_mounted(&mount.mountpoint), "SIGTERM must unmount");
}

#[test]
fn crossfs_mount_of_crossfs_serve_matches_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let sock = dir.path().join("s.sock");
    let serve = Serve::start(&export, &format!("unix:{}", sock.display()), &[]);
    compare_with_local(
        &format!("unix:{}", sock.display()),
        &export,
        &[],
        "crossfs mount",
    );
    let stats = serve.stats();
    // One connection for files, one for change events.
    assert_eq!(stats["total"]["Tversion"]["count"], 2);
}

/// Changes sent behind answer every call of the script as a local directory does.
#[test]
fn crossfs_mount_with_changes_behind_matches_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let _serve = Serve::start(&export, &addr, &[]);
    compare_with_local(
        &addr,
        &export,
        &["--changes", "behind"],
        "crossfs mount --changes behind",
    );
}

/// Both ends time every request: `crossfs stats` of the server and of a mount show latency
/// per request type, and a request's time on the client (written to answered) holds its
/// time on the server (read to answered). No absolute timing is asserted.
#[test]
fn stats_report_request_latency_on_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::write(export.join("data"), [7u8; 4096]).unwrap();
    let sock = dir.path().join("s.sock");
    let serve = Serve::start(&export, &format!("unix:{}", sock.display()), &[]);
    let mount = Mount::start(&format!("unix:{}", sock.display()), &["--cache", "never"]);
    let mnt = &mount.mountpoint;
    let mut page = [0u8; 4096];
    for i in 0..50 {
        std::fs::metadata(mnt.join("data")).unwrap();
        let name = mnt.join(format!("f{i}"));
        std::fs::File::create(&name).unwrap();
        std::fs::set_permissions(&name, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::File::open(mnt.join("data"))
            .unwrap()
            .read_exact(&mut page)
            .unwrap();
        assert_eq!(page, [7u8; 4096]);
    }
    let (server, client) = (serve.stats(), mount.stats());
    println!(
        "server latency: {:#}\nclient latency: {:#}",
        server["latency"], client["latency"]
    );
    let (on_server, on_client) = (&server["latency"]["reply"], &client["latency"]["reply"]);
    let plausible = |side: &str, name: &str, h: &serde_json::Value| {
        let f = |key: &str| {
            h[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{side} {name} {key}: {h}"))
        };
        assert!(h["count"].as_u64() > Some(0), "{side} {name}: {h}");
        assert!(
            0.0 <= f("p50_us") && f("p50_us") <= f("p90_us") && f("p90_us") <= f("p99_us"),
            "{side} {name}: {h}"
        );
        assert!(
            f("p99_us") <= f("max_us") && f("mean_us") <= f("max_us"),
            "{side} {name}: {h}"
        );
    };
    for (name, h) in on_client.as_object().unwrap() {
        plausible("client", name, h);
    }
    for (name, h) in on_server.as_object().unwrap() {
        plausible("server", name, h);
    }
    for part in ["queued", "exec"] {
        for (name, h) in server["latency"][part].as_object().unwrap() {
            plausible(part, name, h);
        }
    }
    // The types a stat, a create, a chmod and a read cost (which ones depends on the
    // extension): each the client sent often is timed by both, the client's median no
    // shorter than the server's. The server's figures also hold the mount's event
    // connection, whose few requests of these types are quick.
    let mut compared = Vec::new();
    for (name, mine) in on_client.as_object().unwrap() {
        if mine["count"].as_u64().unwrap() < 40 || name == "Tread" {
            continue;
        }
        let theirs = &on_server[name];
        assert!(
            theirs["count"].as_u64() >= mine["count"].as_u64(),
            "{name}: {server}"
        );
        let (c, s) = (
            mine["p50_us"].as_f64().unwrap(),
            theirs["p50_us"].as_f64().unwrap(),
        );
        assert!(c >= s, "{name}: client p50 {c} us, server p50 {s} us");
        compared.push(name.clone());
    }
    assert!(
        compared
            .iter()
            .any(|n| n.contains("getattr") || n.contains("walk")),
        "a stat is timed: {compared:?} in {client}"
    );
    let text = run_ok(Command::new(crossfs_bin()).arg("stats").arg(&mount.control)).stdout;
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("reply (microseconds)"), "{text}");
    let text = run_ok(Command::new(crossfs_bin()).arg("stats").arg(&serve.control)).stdout;
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("latency over all connections"), "{text}");
}

/// Firecracker and cloud-hypervisor hand a guest's vsock connection to host port 5640 to
/// whoever listens on the unix socket `UDS_PATH_5640`, as a plain stream (no handshake on
/// that side): a server listening there is reached like any unix socket (README, "What a
/// VM host runs").
#[test]
fn a_microvm_host_serves_on_the_vsock_unix_path() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::write(export.join("from-host"), b"hello guest").unwrap();
    let uds = format!("unix:{}_5640", dir.path().join("vm.vsock").display());
    let _serve = Serve::start(&export, &uds, &[]);
    let mut mount = Mount::start(&uds, &[]);
    assert_eq!(
        std::fs::read(mount.mountpoint.join("from-host")).unwrap(),
        b"hello guest"
    );
    std::fs::write(mount.mountpoint.join("from-guest"), b"hello host").unwrap();
    assert_eq!(
        std::fs::read(export.join("from-guest")).unwrap(),
        b"hello host"
    );
    assert!(mount.stop().success());
}

#[test]
fn every_cache_mode_matches_local_directory() {
    for mode in ["never", "metadata", "always"] {
        let dir = tempfile::tempdir().unwrap();
        let export = dir.path().join("export");
        std::fs::create_dir(&export).unwrap();
        let sock = dir.path().join("s.sock");
        let _serve = Serve::start(&export, &format!("unix:{}", sock.display()), &[]);
        compare_with_local(
            &format!("unix:{}", sock.display()),
            &export,
            &["--cache", mode],
            &format!("crossfs mount --cache {mode}"),
        );
    }
}

/// diod: a 9P2000.L server no one here wrote, capping msize at 64 KiB.
struct Diod(Child);

impl Drop for Diod {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Diod {
    /// Starts diod exporting `export` on a free loopback port; returns it and the address.
    fn start(export: &std::path::Path) -> (Diod, String) {
        let diod = std::path::Path::new("/usr/sbin/diod");
        assert!(
            diod.exists(),
            "diod is missing: run scripts/install-test-deps.sh"
        );
        let port = free_port();
        let child = Command::new(diod)
            .args(["-f", "-n", "-N", "-c", "/dev/null", "-l"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-e")
            .arg(export)
            .stdin(Stdio::null())
            .spawn()
            .expect("starting diod");
        wait_until("diod to listen", Duration::from_secs(10), || {
            listening_on(port)
        });
        (Diod(child), format!("tcp:127.0.0.1:{port}"))
    }
}

#[test]
fn crossfs_mount_of_diod_matches_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let aname = export.to_str().unwrap();
    // One diod per mount: diod 1.0.24 sometimes segfaults when a client disconnects (see the
    // README), and one diod process serves every connection.
    {
        let (_diod, addr) = Diod::start(&export);
        let mut mount = Mount::start(&addr, &["--aname", aname]);
        let stats = mount.stats();
        println!("msize with diod: {}", stats["msize"]);
        assert_eq!(stats["msize"]["requested"], crossfs_wire::DEFAULT_MSIZE);
        assert_eq!(stats["msize"]["server"], 65536, "diod caps msize at 64 KiB");
        assert_eq!(stats["msize"]["effective"], 65536);
        mount.stop();
    }
    // diod names fids by path, so a fid walked before a rename goes stale; with --cache never
    // the kernel looks every component up again and gets fresh fids (README: "Other servers").
    let (_diod, addr) = Diod::start(&export);
    compare_with_local(
        &addr,
        &export,
        &["--aname", aname, "--cache", "never"],
        "crossfs mount --cache never of diod",
    );
}

#[test]
fn umount_ends_the_mount_process() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let _serve = Serve::start(dir.path(), &format!("unix:{}", sock.display()), &[]);
    let mut mount = Mount::start(&format!("unix:{}", sock.display()), &[]);
    run_ok(Command::new("umount").arg(&mount.mountpoint));
    wait_until(
        "crossfs mount to exit after umount",
        Duration::from_secs(10),
        || mount.child.try_wait().unwrap().is_some(),
    );
    assert!(mount.child.wait().unwrap().success());
}

#[test]
fn lost_server_turns_calls_into_eio_not_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::write(export.join("f"), b"data").unwrap();
    let sock = dir.path().join("s.sock");
    let mut serve = Serve::start(&export, &format!("unix:{}", sock.display()), &[]);
    // Reconnecting (the default) is tested in tests/reconnect.rs.
    let mount = Mount::start(
        &format!("unix:{}", sock.display()),
        &["--cache", "never", "--no-reconnect"],
    );
    assert_eq!(std::fs::read(mount.mountpoint.join("f")).unwrap(), b"data");
    serve.child.kill().unwrap();
    serve.child.wait().unwrap();
    // Run the access on another thread so a hang fails the test instead of blocking it.
    let path = mount.mountpoint.join("f");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read(&path).map_err(|e| e.raw_os_error()));
    });
    let result = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a read on a mount whose server died must not hang");
    assert_eq!(result, Err(Some(libc_eio())));
}

fn libc_eio() -> i32 {
    5 // EIO on Linux
}

#[test]
fn help_explains_every_command() {
    for cmd in ["serve", "mount", "stats", "bench"] {
        let out = run_ok(Command::new(crossfs_bin()).arg(cmd).arg("--help"));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("Usage: crossfs"), "{cmd} --help:\n{text}");
    }
    let out = Command::new(crossfs_bin())
        .args([
            "serve",
            "/nonexistent-dir-for-crossfs",
            "--listen",
            "unix:/tmp/x.sock",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent-dir-for-crossfs"),
        "error names the directory: {err}"
    );
    let out = Command::new(crossfs_bin())
        .args(["serve", ".", "--listen", "bogus:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// Whether something listens on 127.0.0.1:`port`, from `/proc/net/tcp`: probing diod with a
/// connection would be a client disconnecting, after which diod 1.0.24 sometimes segfaults.
fn listening_on(port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|table| {
        table.lines().skip(1).any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&want.as_str()) && fields.get(3) == Some(&"0A")
        })
    })
}
