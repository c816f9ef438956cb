//! The Linux kernel's own 9p client, in a QEMU guest, against `crossfs serve` on this host:
//! the same script of file operations must print the same thing through the 9p mount as on a
//! local directory.
//!
//! Needs the guest image (`scripts/guest/build-image.sh`, run by `scripts/test`); the test
//! fails, not skips, without it.

mod common;

use std::process::Command;

use common::*;

/// Lines between two marker lines of the guest's output.
fn section<'a>(output: &'a str, name: &str) -> &'a str {
    let begin = format!("=== {name} begin\n");
    let end = format!("=== {name} end");
    let start = output
        .find(&begin)
        .unwrap_or_else(|| panic!("guest output has no `{name}` section:\n{output}"))
        + begin.len();
    let stop = output[start..]
        .find(&end)
        .unwrap_or_else(|| panic!("guest output has an unterminated `{name}` section:\n{output}"));
    &output[start..start + stop]
}

fn msize_of(mounts_line: &str) -> u64 {
    let opt = mounts_line
        .split([',', ' '])
        .find_map(|o| o.strip_prefix("msize="))
        .unwrap_or_else(|| panic!("no msize in /proc/mounts line `{mounts_line}`"));
    opt.parse().unwrap()
}

#[test]
fn kernel_9p_client_sees_what_a_local_program_sees() {
    let work = tempfile::tempdir().unwrap();
    let (export, local) = (work.path().join("export"), work.path().join("local"));
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&local).unwrap();
    let expected = run_ops_script(&local);

    let port = free_port();
    let serve = Serve::start(&export, &format!("tcp:127.0.0.1:{port}"), &[]);
    let guest_script = work.path().join("guest.sh");
    std::fs::write(
        &guest_script,
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
    )
    .unwrap();
    let out = Command::new(repo_root().join("scripts/guest/run.sh"))
        .args([
            "--port",
            &port.to_string(),
            "--fwd",
            "socat",
            "--timeout",
            "240",
        ])
        .arg("--script")
        .arg(&guest_script)
        .arg("--add")
        .arg(format!(
            "{}:/test/ops.sh",
            repo_root().join("tests/scripts/ops.sh").display()
        ))
        .output()
        .expect("running scripts/guest/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "guest failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
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
        1 << 20,
        "the kernel asked 1 MiB; server max is 1 MiB"
    );
    assert!(msize_of(default) <= 1 << 20);

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
