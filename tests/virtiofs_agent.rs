//! `crossfs agent` in a QEMU guest (TCG) on a virtiofs mount of `crossfs serve` with
//! `--cache always`: an inotify watcher in the guest sees each host change (a create, a
//! modify, a rename within and across directories, a chmod, a delete, a directory made with
//! a file in it), with the right names; after `crossfs sync` the guest reads the host's new
//! contents of a file it had in its page cache, and finds renamed names at their new place.
//! The door counts the replays apart. An agent restarted after the host changed a file
//! while none followed makes the guest exact again (its first event is a rescan). Prints the
//! host-to-guest round trip of a create (the watcher answers each by making a file the host
//! waits for): measured, never asserted.
//!
//! Needs the guest image with the virtiofs module (`scripts/guest/build-image.sh`, run by
//! `scripts/test`); the test fails, not skips, without it.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// What the guest runs: the agent, the watcher, then waits for the host's last change.
const GUEST: &str = r#"
set -e
mount -t virtiofs crossfs /mnt
crossfs agent /mnt 2>/tmp/agent.log &
AGENT=$!
# The agent follows once a sync succeeds.
i=0
until crossfs sync /mnt 2>/tmp/sync.log; do
    i=$((i+1)); [ $i -lt 150 ] || { cat /tmp/agent.log /tmp/sync.log; exit 1; }
    sleep 0.2
done
inotify_watch -a /mnt/ack /mnt /mnt/sub /mnt/lat > /tmp/events &
until grep -q WATCHING /tmp/events; do sleep 0.1; done
# In the page cache, kept there by --cache always.
cat /mnt/data.txt
touch /mnt/ready
i=0
until grep -q zz-done /tmp/events; do
    i=$((i+1)); [ $i -lt 900 ] || break
    sleep 0.2
done
crossfs sync /mnt
echo "=== events begin"
cat /tmp/events
echo "=== events end"
echo "=== contents begin"
cat /mnt/data.txt
ls /mnt/newdir
cat /mnt/sub/b.txt
ls /mnt | grep -cx 'a.txt' || true
echo "=== contents end"
# Restarted: what the host changed while no agent followed shows after the sync.
kill $AGENT
wait $AGENT || true
touch /mnt/agent-stopped
# Listings are not cached (names are, for a day): wait for the host's marker there.
i=0
until ls /mnt | grep -q zz-done2; do
    i=$((i+1)); [ $i -lt 300 ] || break
    sleep 0.2
done
crossfs agent /mnt 2>>/tmp/agent.log &
AGENT=$!
i=0
until crossfs sync /mnt 2>/tmp/sync.log; do
    i=$((i+1)); [ $i -lt 150 ] || { cat /tmp/agent.log /tmp/sync.log; exit 1; }
    sleep 0.2
done
echo "=== restarted begin"
cat /mnt/data.txt
echo "=== restarted end"
kill $AGENT
"#;

/// Makes `what` on the host, then waits a little, so that the hub publishes each change
/// apart (it coalesces changes to one path within 20 ms).
fn step(what: impl FnOnce()) {
    what();
    std::thread::sleep(Duration::from_millis(300));
}

/// The host's part: waits for the guest's `ready`, makes the changes, times `rounds`
/// creates answered by the guest's watcher, then makes `zz-done`. Returns the round trips.
fn host_changes(export: &Path, rounds: usize) -> Vec<Duration> {
    wait_until("the guest to be ready", Duration::from_secs(240), || {
        export.join("ready").exists()
    });
    let e = |p: &str| export.join(p);
    step(|| std::fs::write(e("new.txt"), "new").unwrap());
    step(|| std::fs::write(e("data.txt"), "changed on the host\n").unwrap());
    step(|| std::fs::rename(e("a.txt"), e("b.txt")).unwrap());
    step(|| std::fs::rename(e("b.txt"), e("sub/b.txt")).unwrap());
    step(|| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(e("perm.txt"), PermissionsExt::from_mode(0o600)).unwrap()
    });
    step(|| std::fs::remove_file(e("gone.txt")).unwrap());
    step(|| {
        std::fs::create_dir(e("newdir")).unwrap();
        std::fs::write(e("newdir/inner.txt"), "inner").unwrap();
    });
    let mut trips = Vec::new();
    for i in 0..rounds {
        let ack = e(&format!("ack/ack-lat{i}"));
        let start = Instant::now();
        std::fs::write(e(&format!("lat/lat{i}")), "").unwrap();
        while !ack.exists() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_micros(500));
        }
        if ack.exists() {
            trips.push(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(e("zz-done"), "").unwrap();
    wait_until(
        "the guest's agent to stop",
        Duration::from_secs(120),
        || export.join("agent-stopped").exists(),
    );
    std::fs::write(e("data.txt"), "changed while no agent followed\n").unwrap();
    std::fs::write(e("zz-done2"), "").unwrap();
    trips
}

#[test]
fn host_changes_reach_guest_watchers_and_caches_through_the_agent() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    for dir in ["", "sub", "lat", "ack"] {
        std::fs::create_dir_all(export.join(dir)).unwrap();
    }
    for (name, text) in [
        ("data.txt", "original\n"),
        ("a.txt", "renamed twice\n"),
        ("perm.txt", "x"),
        ("gone.txt", "x"),
    ] {
        std::fs::write(export.join(name), text).unwrap();
    }
    let sock = work.path().join("vfs.sock");
    let serve = Serve::start(
        &export,
        &format!("vhost-user-fs:{}", sock.display()),
        &["--cache", "always"],
    );
    wait_until("the vhost-user socket", Duration::from_secs(20), || {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(&sock).is_ok_and(|m| m.file_type().is_socket())
    });
    let watcher = work.path().join("inotify_watch");
    run_ok(
        Command::new("cc")
            .args(["-static", "-O2", "-o"])
            .arg(&watcher)
            .arg(repo_root().join("tests/scripts/inotify_watch.c")),
    );

    // Without its debug information the binary boots in a smaller initramfs.
    let crossfs = work.path().join("crossfs");
    run_ok(
        Command::new("strip")
            .arg("-o")
            .arg(&crossfs)
            .arg(crossfs_bin()),
    );

    // A few dozen by default; CROSSFS_AGENT_ROUNDS for the figure in docs/bench.md.
    let rounds = std::env::var("CROSSFS_AGENT_ROUNDS").map_or(30, |v| v.parse().unwrap());
    let host = {
        let export = export.clone();
        std::thread::spawn(move || host_changes(&export, rounds))
    };
    let dir = tempfile::tempdir().unwrap();
    let out = guest_command(dir.path(), GUEST, 1, 300)
        .args(["--mem", "768"])
        .arg("--add-binary")
        .arg(format!("{}:/usr/local/bin/crossfs", crossfs.display()))
        .arg("--add-binary")
        .arg(format!(
            "{}:/usr/local/bin/inotify_watch",
            watcher.display()
        ))
        .arg("--virtiofs")
        .arg(format!("{}:crossfs", sock.display()))
        .output()
        .expect("running scripts/guest/run.sh");
    let stdout = guest_stdout(out);
    let trips = host.join().expect("the host's changes");

    let events = section(&stdout, "events");
    for (kinds, path) in [
        ("CREATE", "/mnt/new.txt"),
        ("MODIFY", "/mnt/data.txt"),
        ("CLOSE_WRITE", "/mnt/data.txt"),
        ("MOVED_FROM", "/mnt/a.txt"),
        ("MOVED_TO", "/mnt/b.txt"),
        ("MOVED_FROM", "/mnt/b.txt"),
        ("MOVED_TO", "/mnt/sub/b.txt"),
        ("ATTRIB", "/mnt/perm.txt"),
        ("DELETE", "/mnt/gone.txt"),
        ("CREATE,ISDIR", "/mnt/newdir"),
    ] {
        let line = format!("{kinds} {path}");
        assert!(
            events.lines().any(|l| l == line),
            "the guest's watcher did not see `{line}`:\n{events}"
        );
    }
    assert!(
        !events.contains("ack-lat"),
        "the guest's own creates were replayed again:\n{events}"
    );
    let contents = section(&stdout, "contents");
    assert_eq!(
        contents, "changed on the host\ninner.txt\nrenamed twice\n0\n",
        "after crossfs sync the guest shows the host's contents and names"
    );
    assert_eq!(
        trips.len(),
        rounds,
        "every timed create reached the guest's watcher"
    );

    let agent = &serve.stats()["virtiofs"][0]["agent"];
    println!("door's agent counters: {agent}");
    assert!(agent["replays"].as_u64().unwrap() >= 10, "{agent}");
    assert_eq!(agent["refused"], 0, "{agent}");
    assert_eq!(agent["streams"], 2, "{agent}");

    let mut ms: Vec<f64> = trips.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    println!(
        "host create -> guest inotify -> guest create -> host sees it, {} rounds: \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms.len(),
        pct(0.5),
        pct(0.99),
        ms[ms.len() - 1]
    );
}
