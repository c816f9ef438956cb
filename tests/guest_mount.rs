//! `crossfs mount` inside a real VM: the QEMU guest of `scripts/guest` (TCG, Debian's kernel
//! and its fuse module, busybox) gets the static binary of `scripts/build-static` and mounts
//! `crossfs serve` on the host over the harness's TCP forward, as a guest mounts its host's
//! source tree at boot. The ops script must print what it prints on a local directory; an
//! unprivileged user of the guest uses the root-made mount with the permissions the modes
//! give; a file created on the host reaches a watcher in the guest (inotifywait: Debian's
//! busybox has no inotifyd), and so do 30 timed ones (the round trip's p50 and p99 are
//! printed); and busybox's mount(8) mounts it from an /etc/fstab line.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The static binary (built once; `scripts/build-static` prints its path last).
fn static_crossfs() -> PathBuf {
    let out =
        run_ok(Command::new(repo_root().join("scripts/build-static")).stderr(Stdio::inherit()));
    let path = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(
        path.lines()
            .last()
            .expect("build-static prints the binary's path"),
    )
}

const GUEST: &str = r#"
set -e
printf 'root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n' > /etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' > /etc/group
crossfs mount tcp:10.0.2.100:564 /mnt --control /tmp/mctl > /tmp/mount.log 2>&1 &
i=0
until grep -q ' /mnt fuse' /proc/mounts; do
    i=$((i + 1)); [ $i -lt 600 ] || { cat /tmp/mount.log; exit 1; }; sleep 0.1
done
mkdir /mnt/ops
echo "=== ops begin"
sh /test/ops.sh /mnt/ops
echo "=== ops end"

# A second stat pass over an unchanged directory, more than the 1 s attribute timeout
# after the first, is answered in the guest: the mount's request counters do not move.
# (By name: a listing in between would cost one GETATTR of the directory, whose access
# time the kernel takes as changed by every read of it.)
stat_pass() { i=0; while [ $i -lt 200 ]; do stat -c %s /mnt/many/f$i; i=$((i + 1)); done > /dev/null; }
stat_pass
sleep 1.2
crossfs stats --json /tmp/mctl > /tmp/before
stat_pass
crossfs stats --json /tmp/mctl > /tmp/after
echo "=== stats begin"
cat /tmp/before /tmp/after
echo "=== stats end"

# Another user of the guest, on a mount made by root.
mkdir /mnt/shared && chmod 1777 /mnt/shared
echo "root's" > /mnt/rootfile && chmod 644 /mnt/rootfile
echo "=== user begin"
su -s /bin/sh nobody -c '
    echo mine > /mnt/shared/byuser && cat /mnt/shared/byuser && stat -c %u /mnt/shared/byuser
    cat /mnt/rootfile
    if echo more >> /mnt/rootfile; then echo "wrote root'"'"'s file"; else echo "refused"; fi
' 2>&1
echo "=== user end"

# A watcher in the guest; the host test creates watched/from-host once it sees `ready`.
mkdir /mnt/watched
inotifywait -m -e create /mnt/watched > /tmp/events 2>/dev/null &
sleep 0.5
touch /mnt/ready
i=0
until grep -q from-host /tmp/events; do
    i=$((i + 1)); [ $i -lt 300 ] || break; sleep 0.1
done
echo "=== events begin"
cat /tmp/events
echo "=== events end"

# Latency: each file the host makes in lat/ is answered by one made in ack/ through the
# mount, for the host to time the round trip (`inotify_watch -a`).
mkdir /mnt/lat /mnt/ack
inotify_watch -a /mnt/ack /mnt/lat > /tmp/lat 2>&1 &
LAT=$!
sleep 0.5
touch /mnt/lat-ready
i=0
until [ -e /mnt/lat-done ]; do
    i=$((i + 1)); [ $i -lt 1200 ] || break; sleep 0.1
done
kill $LAT

# The same mount from an fstab line, through mount(8)'s helper.
umount /mnt
ln -s /bin/crossfs /sbin/mount.crossfs
echo 'tcp:10.0.2.100:564 /mnt crossfs cache=auto,_netdev 0 0' > /etc/fstab
mount /mnt
echo "=== fstab begin"
grep ' /mnt ' /proc/mounts | cut -d' ' -f1-3
cat /mnt/watched/from-host; echo
echo "=== fstab end"
umount /mnt

# Changes sent behind (fstab's changes=behind): every call answers as locally.
echo 'tcp:10.0.2.100:564 /mnt crossfs cache=auto,changes=behind,_netdev 0 0' > /etc/fstab
mount /mnt
mkdir /mnt/behind
echo "=== behind begin"
sh /test/ops.sh /mnt/behind
echo "=== behind end"
crossfs sync /mnt > /dev/null
umount /mnt
"#;

/// Host creates timed through the guest's watcher (docs/bench.md quotes the figure).
const ROUNDS: usize = 30;

/// Once the guest's watcher is ready, times `rounds` host creates in lat/, each until the
/// guest's answer in ack/ appears on the host; then tells the guest it is done.
fn latency_rounds(export: &Path, rounds: usize) -> Vec<Duration> {
    wait_until(
        "the guest's latency watcher (lat-ready)",
        Duration::from_secs(240),
        || export.join("lat-ready").exists(),
    );
    let mut trips = Vec::new();
    for i in 0..rounds {
        let ack = export.join(format!("ack/ack-lat{i}"));
        let start = Instant::now();
        std::fs::write(export.join(format!("lat/lat{i}")), "").unwrap();
        while !ack.exists() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_micros(500));
        }
        if ack.exists() {
            trips.push(start.elapsed());
        }
        // Longer than the hub's quiet window: each create is a lone change.
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(export.join("lat-done"), "").unwrap();
    trips
}

#[test]
fn crossfs_mount_in_a_guest() {
    let crossfs = static_crossfs();
    let work = tempfile::tempdir().unwrap();
    let (export, local) = (work.path().join("export"), work.path().join("local"));
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&local).unwrap();
    let expected = run_ops_script(&local);
    std::fs::create_dir(export.join("many")).unwrap();
    for i in 0..200 {
        std::fs::write(export.join(format!("many/f{i}")), format!("{i}")).unwrap();
    }
    let watcher = work.path().join("inotify_watch");
    run_ok(
        Command::new("cc")
            .args(["-static", "-O2", "-o"])
            .arg(&watcher)
            .arg(repo_root().join("tests/scripts/inotify_watch.c")),
    );
    let port = free_port();
    let _serve = Serve::start(&export, &format!("tcp:127.0.0.1:{port}"), &[]);

    let guest = guest_command(work.path(), GUEST, port, 240)
        .arg("--add")
        .arg(format!("{}:/bin/crossfs", crossfs.display()))
        .arg("--add-binary")
        .arg("/usr/bin/inotifywait:/usr/local/bin/inotifywait")
        .arg("--add-binary")
        .arg(format!(
            "{}:/usr/local/bin/inotify_watch",
            watcher.display()
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running scripts/guest/run.sh");
    // The host's change, once the guest's watcher is in place.
    wait_until(
        "the guest's watcher (ready)",
        Duration::from_secs(240),
        || export.join("ready").exists(),
    );
    std::fs::write(export.join("watched/from-host"), b"made on the host").unwrap();
    let trips = latency_rounds(&export, ROUNDS);
    let stdout = guest_stdout(guest.wait_with_output().unwrap());

    assert_same_output(
        "local directory",
        &expected,
        "crossfs mount in the guest",
        section(&stdout, "ops"),
    );
    assert_same_output(
        "local directory",
        &expected,
        "crossfs mount --changes behind in the guest",
        section(&stdout, "behind"),
    );
    let requests = |json: &str| -> u64 {
        let stats: serde_json::Value = serde_json::from_str(json).expect("crossfs stats --json");
        stats["9p"]
            .as_object()
            .expect("9p counters")
            .iter()
            .filter(|(k, _)| k.starts_with('T'))
            .map(|(_, v)| v["count"].as_u64().unwrap_or(0))
            .sum()
    };
    let counters: Vec<&str> = section(&stdout, "stats")
        .lines()
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(counters.len(), 2, "two counter snapshots: {counters:?}");
    let (before, after) = (requests(counters[0]), requests(counters[1]));
    assert!(before > 0, "the counters count: {}", counters[0]);
    assert_eq!(
        after - before,
        0,
        "a second stat pass over an unchanged directory in the guest sent requests:\n{}\n{}",
        counters[0],
        counters[1]
    );
    assert_eq!(
        section(&stdout, "user"),
        "mine\n65534\nroot's\nsh: can't create /mnt/rootfile: Permission denied\nrefused\n",
        "nobody creates and reads its own file, reads root's and may not write it"
    );
    assert!(
        section(&stdout, "events").contains("/mnt/watched/ CREATE from-host"),
        "the host's file reached inotifywait in the guest: {}",
        section(&stdout, "events")
    );
    assert_eq!(
        section(&stdout, "fstab"),
        "tcp:10.0.2.100:564 /mnt fuse.crossfs\nmade on the host\n",
        "mount /mnt from the fstab line"
    );
    assert_eq!(
        trips.len(),
        ROUNDS,
        "every host create reached the guest's watcher, which answered through the mount"
    );
    let mut ms: Vec<f64> = trips.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    println!(
        "9P mount in the guest: host create -> guest inotify -> guest create -> host sees \
         it, {} rounds: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms.len(),
        pct(0.5),
        pct(0.99),
        ms[ms.len() - 1]
    );
    let made = std::fs::metadata(export.join("shared/byuser")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&made),
        65534,
        "owned by its creator on the host too"
    );
}
