//! The Linux kernel's own 9p client, in a QEMU guest, against `crossfs serve` on this host:
//! the same script of file operations must print the same thing through the 9p mount as on a
//! local directory.
//!
//! Needs the guest image (`scripts/guest/build-image.sh`, run by `scripts/test`); the test
//! fails, not skips, without it.

mod common;

use common::*;

/// The msize option of a /proc/mounts line; Linux omits it when it is the kernel's default.
fn msize_of(mounts_line: &str) -> Option<u64> {
    mounts_line
        .split([',', ' '])
        .find_map(|o| o.strip_prefix("msize="))
        .map(|v| v.parse().unwrap())
}

/// An empty export directory, and what the ops script prints on a local directory.
fn export_and_expected_output() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let work = tempfile::tempdir().unwrap();
    let (export, local) = (work.path().join("export"), work.path().join("local"));
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&local).unwrap();
    let expected = run_ops_script(&local);
    (work, export, expected)
}

#[test]
fn kernel_9p_client_sees_what_a_local_program_sees() {
    let (_work, export, expected) = export_and_expected_output();

    let port = free_port();
    let serve = Serve::start(&export, &format!("tcp:127.0.0.1:{port}"), &[]);
    let stdout = run_guest(
        port,
        r#"
set -e
opts=trans=tcp,port=564,version=9p2000.L
mount -t 9p -o $opts,msize=1048576 10.0.2.100 /mnt
echo "=== ops begin"
sh /test/ops.sh /mnt
echo "=== ops end"
echo "=== mounts-1m begin"
grep ' 9p ' /proc/mounts
echo "=== mounts-1m end"
umount /mnt
mount -t 9p -o $opts 10.0.2.100 /mnt
echo "=== mounts-default begin"
grep ' 9p ' /proc/mounts
echo "=== mounts-default end"
umount /mnt
"#,
        &[],
    );

    let through_9p = section(&stdout, "ops");
    println!("--- ops.sh through the kernel 9p client ---\n{through_9p}");
    assert_same_output("local ext4", &expected, "kernel 9p client", through_9p);

    let with_1m = section(&stdout, "mounts-1m");
    let default = section(&stdout, "mounts-default");
    println!("kernel mount with msize=1048576: {with_1m}");
    println!("kernel mount with no msize option: {default}");
    assert_eq!(
        msize_of(with_1m),
        Some(1 << 20),
        "the kernel asked for 1 MiB, below the server's maximum, and got it"
    );
    // Without the option the kernel asks for its default (128 KiB since Linux 5.15), which
    // the server grants; /proc/mounts then shows no msize.
    assert_eq!(msize_of(default), None);

    let stats = serve.stats();
    println!("crossfs stats --json after the run:\n{stats:#}");
    let total = &stats["total"];
    assert!(
        total["Tversion"]["count"].as_u64().unwrap() >= 2,
        "two mounts: {stats}"
    );
    assert!(total["Twalk"]["count"].as_u64().unwrap() > 0);
    assert!(total["Tread"]["count"].as_u64().unwrap() > 0);
    assert!(total["Twrite"]["count"].as_u64().unwrap() > 0);
}

/// Boots the guest with `script` as its test, the ops script at /test/ops.sh and `binaries`
/// (host path, guest path) copied in with their libraries; returns what the guest printed.
fn run_guest(port: u16, script: &str, binaries: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = guest_command(dir.path(), script, port, 240);
    for (host, guest) in binaries {
        cmd.arg("--add-binary").arg(format!("{host}:{guest}"));
    }
    guest_stdout(cmd.output().expect("running scripts/guest/run.sh"))
}

/// `crossfs mount --kernel` inside the guest: crossfs connects, then hands the socket to the
/// kernel's 9p client with trans=fd (as WSL does), so any transport crossfs speaks works with
/// the kernel client.
#[test]
fn crossfs_mount_kernel_hands_the_socket_to_v9fs() {
    let (_work, export, expected) = export_and_expected_output();
    let port = free_port();
    let serve = Serve::start(&export, &format!("tcp:127.0.0.1:{port}"), &[]);
    let stdout = run_guest(
        port,
        r#"
set -e
crossfs mount --kernel tcp:10.0.2.100:564 /mnt
echo "=== mounts begin"
grep ' 9p ' /proc/mounts
echo "=== mounts end"
echo "=== ops begin"
sh /test/ops.sh /mnt
echo "=== ops end"
umount /mnt
"#,
        &[(crossfs_bin(), "/usr/local/bin/crossfs")],
    );
    let mounts = section(&stdout, "mounts");
    println!("crossfs mount --kernel: {mounts}");
    assert!(mounts.contains("trans=fd"), "{mounts}");
    assert_eq!(msize_of(mounts), Some(1 << 20), "the fd transport's cap");
    assert_same_output(
        "local ext4",
        &expected,
        "crossfs mount --kernel",
        section(&stdout, "ops"),
    );
    assert!(serve.count("Twrite") > 0);
}
