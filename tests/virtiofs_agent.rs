//! `crossfs agent` in a QEMU guest (TCG) on a virtiofs mount of `crossfs serve` with
//! `--cache always`: an inotify watcher in the guest sees each host change (a create, a
//! modify, a rename within and across directories, a chmod, a delete, a directory made with
//! a file in it), with the right names; after `crossfs sync` the guest reads the host's new
//! contents of a file it had in its page cache, and finds renamed names at their new place.
//! and the host's mtimes after a host write and a host `touch`. The door counts the replays
//! apart. An agent restarted after the host changed a file while none followed makes the
//! guest exact again (its first event is a rescan). Prints the host-to-guest round trip of
//! a create (the watcher answers each by making a file the host waits for): measured, never
//! asserted.
//!
//! A second guest, with `--writeback` too: a 10,000-change host burst while the agent is
//! stopped overflows its queue (`--event-queue 256`), and after a sync the guest's tree equals the host's; a
//! guest program that is not the agent makes the agent's calls while the door expects them
//! from the agent (stopped mid-batch), and with no agent: its changes reach the host, and
//! no replay answer reaches it.
//!
//! Needs the guest image with the virtiofs module (`scripts/guest/build-image.sh`, run by
//! `scripts/test`); the test fails, not skips, without it.

mod common;

use std::path::{Path, PathBuf};
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
# In the page cache, kept there by --cache always; and attributes in the guest's cache.
cat /mnt/data.txt
stat /mnt/stamp.txt >/dev/null
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
echo "=== mtimes begin"
tree_list /mnt | grep -e '^data.txt ' -e '^stamp.txt ' | sort
echo "=== mtimes end"
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

/// `crossfs serve EXPORT` on a vhost-user-fs socket in `work`, with `--cache always` and
/// `extra`; returns once the socket listens.
fn serve_door(work: &Path, export: &Path, extra: &[&str]) -> (Serve, PathBuf) {
    let sock = work.join("vfs.sock");
    let mut args = vec!["--cache", "always"];
    args.extend_from_slice(extra);
    let serve = Serve::start(export, &format!("vhost-user-fs:{}", sock.display()), &args);
    wait_until("the vhost-user socket", Duration::from_secs(20), || {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(&sock).is_ok_and(|m| m.file_type().is_socket())
    });
    (serve, sock)
}

/// tests/scripts/NAME.c built static into `work` (the guest has no libc).
fn static_tool(work: &Path, name: &str) -> PathBuf {
    let bin = work.join(name);
    run_ok(
        Command::new("cc")
            .args(["-static", "-O2", "-o"])
            .arg(&bin)
            .arg(repo_root().join(format!("tests/scripts/{name}.c"))),
    );
    bin
}

/// The crossfs binary without its debug information: it boots in a smaller initramfs.
fn stripped_crossfs(work: &Path) -> PathBuf {
    let crossfs = work.join("crossfs");
    run_ok(
        Command::new("strip")
            .arg("-o")
            .arg(&crossfs)
            .arg(crossfs_bin()),
    );
    crossfs
}

/// Boots the guest with `script`, each of `tools` at /usr/local/bin/NAME and the virtiofs
/// device on `sock` (tag `crossfs`); returns what the guest printed.
fn boot(script: &str, timeout_secs: u32, sock: &Path, tools: &[(&Path, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = guest_command(dir.path(), script, 1, timeout_secs);
    cmd.args(["--mem", "768"]);
    for (bin, name) in tools {
        cmd.arg("--add-binary")
            .arg(format!("{}:/usr/local/bin/{name}", bin.display()));
    }
    let out = cmd
        .arg("--virtiofs")
        .arg(format!("{}:crossfs", sock.display()))
        .output()
        .expect("running scripts/guest/run.sh");
    guest_stdout(out)
}

/// The host's part: waits for the guest's `ready`, makes the changes, times `rounds`
/// creates answered by the guest's watcher, then makes `zz-done`. Returns the round trips,
/// and the listing lines (`tree_listing`) of the two files whose times it changed.
fn host_changes(export: &Path, rounds: usize) -> (Vec<Duration>, Vec<String>) {
    wait_until("the guest to be ready", Duration::from_secs(240), || {
        export.join("ready").exists()
    });
    let e = |p: &str| export.join(p);
    step(|| std::fs::write(e("new.txt"), "new").unwrap());
    step(|| std::fs::write(e("data.txt"), "changed on the host\n").unwrap());
    step(|| {
        let stamp = std::fs::File::options().write(true).open(e("stamp.txt"));
        let past = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        stamp.unwrap().set_modified(past).unwrap()
    });
    let mut mtimes = tree_listing(export);
    mtimes.retain(|l| l.starts_with("data.txt ") || l.starts_with("stamp.txt "));
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
    (trips, mtimes)
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
        ("stamp.txt", "x"),
    ] {
        std::fs::write(export.join(name), text).unwrap();
    }
    let (serve, sock) = serve_door(work.path(), &export, &[]);
    let watcher = static_tool(work.path(), "inotify_watch");
    let tree_list = static_tool(work.path(), "tree_list");
    let crossfs = stripped_crossfs(work.path());

    // A few dozen by default; CROSSFS_AGENT_ROUNDS for the figure in docs/bench.md.
    let rounds = std::env::var("CROSSFS_AGENT_ROUNDS").map_or(30, |v| v.parse().unwrap());
    let host = {
        let export = export.clone();
        std::thread::spawn(move || host_changes(&export, rounds))
    };
    let stdout = boot(
        GUEST,
        300,
        &sock,
        &[
            (&crossfs, "crossfs"),
            (&watcher, "inotify_watch"),
            (&tree_list, "tree_list"),
        ],
    );
    let (trips, mtimes) = host.join().expect("the host's changes");

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
    assert_same_output(
        "the host",
        &mtimes.join("\n"),
        "the guest after crossfs sync",
        section(&stdout, "mtimes").trim_end(),
    );
    assert_eq!(
        section(&stdout, "restarted"),
        "changed while no agent followed\n",
        "after a restart and a sync the guest reads what the host wrote while no agent followed"
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
    assert!(
        agent["rescans"].as_u64().unwrap() >= 2,
        "one as each stream starts: {agent}"
    );

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

/// The second guest: a host burst while the agent is stopped (its queue overflows), then
/// forged replays with the agent following and without it. The guest and the host take
/// turns through files in /mnt/ctl (the guest's own creates are never replayed to it).
const BURST_AND_FORGERY: &str = r#"
set -e
echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >>/etc/passwd
echo 'nogroup:x:65534:' >>/etc/group
mount -t virtiofs crossfs /mnt
crossfs agent /mnt 2>/tmp/agent.log &
AGENT=$!
# Until a sync succeeds: the agent follows, and has applied every host change before it.
follow() {
    i=0
    until crossfs sync /mnt 2>/tmp/sync.log; do
        i=$((i+1)); [ $i -lt 150 ] || { cat /tmp/agent.log /tmp/sync.log; exit 1; }
        sleep 0.2
    done
}
# Until the host made one of the names given in /mnt/ctl (listings are not cached).
host_says() {
    i=0
    until ls /mnt/ctl | grep -qx "$@"; do
        i=$((i+1)); [ $i -lt 1200 ] || { echo "the host never made $*"; exit 1; }
        sleep 0.1
    done
}
# Runs a command and says whether it succeeded.
try_it() {
    if "$@" >/dev/null 2>&1; then echo "$*: done"; else echo "$*: failed"; fi
}
follow

# 1. Stopped during a 10,000-change burst, the agent falls behind its queue of 256.
tree_list /mnt/burst >/dev/null
kill -STOP $AGENT
touch /mnt/ctl/stopped
host_says burst-done
kill -CONT $AGENT
follow
tree_list /mnt/burst >/mnt/out/burst.txt

# 2. Forged replays while the agent follows: it is stopped in the middle of a batch (by a
# watcher, at its first replayed create), with 150 creates to replay before the host's
# changes to $T, which the door now expects from it. (The host says go once it saw the
# door hand out the batch and the agent not yet through the creates.) The guest kernel
# itself keeps some of the forger's calls from the door: it looks up a mkdir's name and a
# rename's target afresh, finds the host's files there, and answers EEXIST, or renames
# nothing (m2 is m's own file: POSIX). The unlink, the chmod and the truncate reach the
# door.
try=0
while :; do
    try=$((try+1))
    T=/mnt/forge/t$try
    ls -l $T >/dev/null
    ls $T/c $T/m2 >/dev/null 2>&1 || true
    follow
    kill -STOP $AGENT
    touch /mnt/ctl/stop-$try
    inotify_watch -s $AGENT /mnt/forge/f$try >/tmp/stopper &
    STOPPER=$!
    until grep -qs WATCHING /tmp/stopper; do sleep 0.1; done
    host_says queued-$try
    kill -CONT $AGENT
    wait $STOPPER
    touch /mnt/ctl/restopped-$try
    host_says -e go-$try -e retry-$try
    ls /mnt/ctl | grep -qx go-$try && break
    kill -CONT $AGENT
    [ $try -lt 5 ] || { echo "the agent was never stopped with the batch to forge"; exit 1; }
done
cd $T
echo "=== forged begin"
try_it cat /mnt/.crossfs-agent
try_it su -s /bin/sh nobody -c 'cat /mnt/.crossfs-agent'
try_it mkdir c
try_it rm r
try_it mv m m2
try_it chmod 751 p
try_it truncate -s 0 d
try_it sh -c 'echo forged >forged-new'
echo "=== forged end"
cd /
# The host reads the door's counters while the agent is still stopped.
touch /mnt/ctl/forged
host_says counted
kill -CONT $AGENT
follow
tree_list $T >/mnt/out/forge.txt
echo $try >/mnt/out/try

# 3. Forging with no agent.
kill $AGENT
wait $AGENT || true
N=/mnt/forge/n
ls -l $N >/dev/null
ls $N/c >/dev/null 2>&1 || true
touch /mnt/ctl/agent-gone
host_says noagent-ready
cd $N
echo "=== unfollowed begin"
try_it su -s /bin/sh nobody -c 'cat /mnt/.crossfs-agent'
try_it su -s /bin/sh nobody -c "chmod 640 $N/p"
try_it su -s /bin/sh nobody -c "echo mine >$N/mine"
try_it mkdir c
try_it rm r
echo "=== unfollowed end"
cd /
echo "=== agent log begin"
cat /tmp/agent.log
echo "=== agent log end"
"#;

/// Files in each `forge/` directory before the host's changes: removed (`r`), renamed
/// (`m` to `m2`), chmodded (`p`), written (`d`); `c` is created.
const FORGE_FILES: [&str; 4] = ["r", "m", "p", "d"];

/// Tries at stopping the agent with a batch handed to it (see the guest's part 2).
const FORGE_TRIES: usize = 5;

/// Creates before the changes to forge in one batch, so that the agent is stopped well
/// before it reaches them (their lines fit in one READ of the agent, and in the door's
/// queue).
const FILLERS: u64 = 150;

/// The host's changes of one forging round in `dir`: a create, a removal, a rename, a chmod
/// and a write, the replays the agent would make.
fn forge_changes(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(dir.join("c"), "made on the host").unwrap();
    std::fs::remove_file(dir.join("r")).unwrap();
    std::fs::rename(dir.join("m"), dir.join("m2")).unwrap();
    std::fs::set_permissions(dir.join("p"), PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::write(dir.join("d"), "written on the host").unwrap();
}

/// The 10,000 changes of the burst, over the tree `burst_tree` made: 1,000 writes, 500
/// chmods, 500 renames within a directory and 500 across, 500 removals, 10 directories
/// and 6,990 files created. Made in paced chunks, so that the hub publishes each change
/// rather than collapsing the burst into a rescan of its own: the agent's queue is what
/// must overflow.
fn burst(root: &Path) -> usize {
    use std::os::unix::fs::PermissionsExt;
    let mut ops: Vec<Box<dyn Fn()>> = Vec::new();
    let root = root.to_path_buf();
    for k in 0..10 {
        let r = root.clone();
        ops.push(Box::new(move || {
            std::fs::create_dir(r.join(format!("new/d{k}"))).unwrap()
        }));
    }
    for k in 0..10 {
        let old = root.join(format!("old/d{k}"));
        let new = root.join(format!("new/d{k}"));
        for j in 0..300 {
            let (f, old, new) = (old.join(format!("f{j}")), old.clone(), new.clone());
            ops.push(match j {
                0..=99 => Box::new(move || {
                    use std::io::Write;
                    let mut file = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
                    file.write_all(b"appended on the host").unwrap();
                }),
                100..=149 => Box::new(move || {
                    std::fs::set_permissions(&f, PermissionsExt::from_mode(0o640)).unwrap()
                }),
                150..=199 => {
                    Box::new(move || std::fs::rename(&f, old.join(format!("g{j}"))).unwrap())
                }
                200..=249 => {
                    Box::new(move || std::fs::rename(&f, new.join(format!("moved{j}"))).unwrap())
                }
                _ => Box::new(move || std::fs::remove_file(&f).unwrap()),
            });
        }
    }
    for i in 0..6990 {
        let f = root.join(format!("new/d{}/n{i}", i % 10));
        ops.push(Box::new(move || {
            std::fs::write(&f, "n".repeat(i % 97)).unwrap()
        }));
    }
    for chunk in ops.chunks(250) {
        for op in chunk {
            op();
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    ops.len()
}

/// The tree of the burst before it: `old/d0..d9`, 300 one-byte files each, and `new/`.
fn burst_tree(root: &Path) {
    for k in 0..10 {
        let dir = root.join(format!("old/d{k}"));
        std::fs::create_dir_all(&dir).unwrap();
        for j in 0..300 {
            std::fs::write(dir.join(format!("f{j}")), "x").unwrap();
        }
    }
    std::fs::create_dir(root.join("new")).unwrap();
}

/// What `tests/scripts/tree_list.c` prints for `root`, sorted.
fn tree_listing(root: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let m = std::fs::symlink_metadata(&path).unwrap();
            let t = m.file_type();
            let kind = if t.is_file() {
                'f'
            } else if t.is_dir() {
                'd'
            } else if t.is_symlink() {
                'l'
            } else {
                'o'
            };
            let size = if t.is_dir() {
                "-".to_owned()
            } else {
                m.size().to_string()
            };
            out.push(format!(
                "{} {kind} {size} {:o} {}.{:09}",
                path.strip_prefix(root).unwrap().display(),
                m.mode() & 0o7777,
                m.mtime(),
                m.mtime_nsec()
            ));
            if t.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// Sorted lines of a listing the guest wrote.
fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// The door's agent counter `name`.
fn agent_counter(control: &Path, name: &str) -> u64 {
    stats_json(control)["virtiofs"][0]["agent"][name]
        .as_u64()
        .unwrap_or(0)
}

/// The host's part of the second guest: the burst, the forging rounds (returns the round
/// whose batch the door handed to the stopped agent), the changes made with no agent.
fn host_burst_and_forgery(export: &Path, control: &Path) -> usize {
    let e = |p: &str| export.join(p);
    let told = |name: &str| std::fs::write(e(&format!("ctl/{name}")), "").unwrap();
    wait_until(
        "the guest to stop its agent",
        Duration::from_secs(240),
        || e("ctl/stopped").exists(),
    );
    assert_eq!(burst(&e("burst")), 10_000);
    told("burst-done");

    let mut round = 0;
    for t in 1..=FORGE_TRIES {
        wait_until(
            "the guest's next forging round",
            Duration::from_secs(120),
            || e(&format!("ctl/stop-{t}")).exists(),
        );
        // The stopped agent's waiting READ is answered EAGAIN meanwhile: its next READ
        // takes the whole batch at once.
        std::thread::sleep(Duration::from_secs(2));
        for i in 0..FILLERS {
            std::fs::write(e(&format!("forge/f{t}/{i}")), "").unwrap();
        }
        forge_changes(&e(&format!("forge/t{t}")));
        std::thread::sleep(Duration::from_millis(600));
        let (events, replays) = (
            agent_counter(control, "events"),
            agent_counter(control, "replays"),
        );
        told(&format!("queued-{t}"));
        wait_until("the agent stopped again", Duration::from_secs(60), || {
            e(&format!("ctl/restopped-{t}")).exists()
        });
        // Handed out in full, and each create needs at least one replay: the changes to
        // forge/t{t}, last in the batch, wait for the agent.
        let handed = agent_counter(control, "events") - events;
        let replays = agent_counter(control, "replays") - replays;
        println!("forging round {t}: {handed} events handed out, {replays} replays");
        if handed >= FILLERS + 5 && replays < FILLERS {
            let replays = agent_counter(control, "replays");
            told(&format!("go-{t}"));
            wait_until("the guest's forgery", Duration::from_secs(60), || {
                e("ctl/forged").exists()
            });
            assert_eq!(
                agent_counter(control, "replays"),
                replays,
                "the forger's requests were answered as replays"
            );
            told("counted");
            round = t;
            break;
        }
        told(&format!("retry-{t}"));
    }
    assert!(
        round > 0,
        "the agent was never stopped with the batch to forge"
    );

    wait_until(
        "the guest's agent to stop",
        Duration::from_secs(120),
        || e("ctl/agent-gone").exists(),
    );
    std::fs::write(e("forge/n/c"), "made on the host").unwrap();
    std::fs::remove_file(e("forge/n/r")).unwrap();
    told("noagent-ready");
    round
}

#[test]
fn a_burst_overflowing_the_agent_and_forged_replays_leave_the_guest_exact() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    for dir in ["ctl", "out", "burst"] {
        std::fs::create_dir_all(export.join(dir)).unwrap();
    }
    burst_tree(&export.join("burst"));
    for t in 1..=FORGE_TRIES {
        std::fs::create_dir_all(export.join(format!("forge/f{t}"))).unwrap();
    }
    let dirs = (1..=FORGE_TRIES).map(|t| format!("forge/t{t}"));
    for dir in dirs.chain(["forge/n".to_owned()]) {
        std::fs::create_dir_all(export.join(&dir)).unwrap();
        for f in FORGE_FILES {
            std::fs::write(export.join(&dir).join(f), format!("{f} as it was")).unwrap();
        }
    }
    // The unprivileged forger's own directory and file.
    for p in ["forge/n", "forge/n/p"] {
        std::os::unix::fs::chown(export.join(p), Some(65534), Some(65534)).unwrap();
    }
    // With the writeback cache, which the first test goes without.
    let (serve, sock) = serve_door(
        work.path(),
        &export,
        &["--event-queue", "256", "--writeback"],
    );
    let tree_list = static_tool(work.path(), "tree_list");
    let watcher = static_tool(work.path(), "inotify_watch");
    let crossfs = stripped_crossfs(work.path());
    let host = {
        let (export, control) = (export.clone(), serve.control.clone());
        std::thread::spawn(move || host_burst_and_forgery(&export, &control))
    };
    let stdout = boot(
        BURST_AND_FORGERY,
        400,
        &sock,
        &[
            (&crossfs, "crossfs"),
            (&tree_list, "tree_list"),
            (&watcher, "inotify_watch"),
        ],
    );
    let round = host.join().expect("the host's side");
    let agent = &serve.stats()["virtiofs"][0]["agent"];
    println!("door's agent counters: {agent}; forging round {round} of {FORGE_TRIES}");

    // 1. The overflow happened: the agent's stream carried a rescan beyond its first, and
    // the agent says why; then the guest shows the host's tree.
    let log = section(&stdout, "agent log");
    assert!(
        log.contains("rescan (subscriber fell behind)"),
        "the agent's queue never overflowed:\n{log}"
    );
    assert!(
        agent["rescans"].as_u64().unwrap() > agent["streams"].as_u64().unwrap(),
        "{agent}"
    );
    let burst_guest = std::fs::read_to_string(export.join("out/burst.txt")).unwrap();
    let burst_host = tree_listing(&export.join("burst"));
    // old/ and new/, 10 directories in each, 2,000 files left in old/ (3,000 less 500
    // moved out and 500 removed), 500 moved into new/ and 6,990 made there.
    assert_eq!(burst_host.len(), 9_512);
    assert_same_output(
        "the host",
        &burst_host.join("\n"),
        "the guest after the burst and a sync",
        &sorted_lines(&burst_guest).join("\n"),
    );

    // 2. The forger with the agent following got no replay's answer, and its changes
    // reached the host.
    assert_eq!(
        section(&stdout, "forged"),
        "cat /mnt/.crossfs-agent: failed\n\
         su -s /bin/sh nobody -c cat /mnt/.crossfs-agent: failed\n\
         mkdir c: failed\n\
         rm r: failed\n\
         mv m m2: done\n\
         chmod 751 p: done\n\
         truncate -s 0 d: done\n\
         sh -c echo forged >forged-new: done\n",
        "a guest program's requests are served as anyone's while replays of the same names wait"
    );
    let t = export.join(format!("forge/t{round}"));
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&p.metadata().unwrap().permissions()) & 0o7777
    };
    assert_eq!(
        std::fs::read_to_string(t.join("c")).unwrap(),
        "made on the host"
    );
    assert!(!t.join("r").exists() && !t.join("m").exists());
    assert_eq!(
        std::fs::read_to_string(t.join("m2")).unwrap(),
        "m as it was"
    );
    assert_eq!(
        mode(&t.join("p")),
        0o751,
        "the forger's chmod reached the host"
    );
    assert_eq!(
        std::fs::read(t.join("d")).unwrap(),
        b"",
        "the forger's truncate reached the host"
    );
    assert_eq!(
        std::fs::read_to_string(t.join("forged-new")).unwrap(),
        "forged\n"
    );
    assert_eq!(
        std::fs::read_to_string(export.join("out/try"))
            .unwrap()
            .trim(),
        round.to_string()
    );
    // d's mtime aside: the forger's truncate came after the host's write it replays, and
    // the replay gives the guest the host's mtime of that write (the forger's own change is
    // never replayed to the guest: docs/virtiofs-agent.md, "Limits").
    let without_d_mtime = |lines: Vec<String>| {
        let out: Vec<String> = lines
            .into_iter()
            .map(|l| match l.strip_prefix("d f ") {
                Some(rest) => format!("d f {}", rest.rsplit_once(' ').unwrap().0),
                None => l,
            })
            .collect();
        out.join("\n")
    };
    let forge_guest = std::fs::read_to_string(export.join("out/forge.txt")).unwrap();
    assert_same_output(
        "the host",
        &without_d_mtime(tree_listing(&t)),
        "the guest after the agent went on and a sync",
        &without_d_mtime(sorted_lines(&forge_guest)),
    );

    // 3. With no agent: the control file is no one's to find, and every change is real.
    assert_eq!(
        section(&stdout, "unfollowed"),
        "su -s /bin/sh nobody -c cat /mnt/.crossfs-agent: failed\n\
         su -s /bin/sh nobody -c chmod 640 /mnt/forge/n/p: done\n\
         su -s /bin/sh nobody -c echo mine >/mnt/forge/n/mine: done\n\
         mkdir c: failed\n\
         rm r: failed\n",
    );
    let n = export.join("forge/n");
    assert_eq!(mode(&n.join("p")), 0o640);
    assert_eq!(std::fs::read_to_string(n.join("mine")).unwrap(), "mine\n");
    assert!(n.join("c").is_file() && !n.join("r").exists());
    assert_eq!(agent["streams"], 1, "{agent}");
}
