//! Changes sent behind under faults, as a property: any sequence of file (and empty
//! directory) changes through a `--changes behind` mount, with the server stopped for a
//! while or killed and started again between any two of them, leaves on the host exactly
//! what the same sequence leaves in a local directory, once `crossfs sync` returns; and the
//! mount then shows exactly what the host has (attributes to the nanosecond).
//!
//! Each case runs against a real `crossfs serve` and a real FUSE mount, and compares with
//! the same calls made on a local directory (the model). Runs as root; the same property
//! holds for the calls of another user (`nobody`, whose files the root server makes as
//! itself and the mount gives away, with a chown sent behind after each create), owners
//! included. Nothing asserts how fast anything is.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::*;
use proptest::prelude::*;

const NAMES: [&str; 3] = ["a", "b", "c"];
const MODES: [u32; 5] = [0o600, 0o644, 0o640, 0o604, 0o755];

#[derive(Clone, Debug)]
enum Step {
    /// `len` bytes of `byte` at `offset` through a new open (small: sent behind).
    Write {
        name: usize,
        offset: u64,
        len: usize,
        byte: u8,
    },
    Chmod {
        name: usize,
        mode: usize,
    },
    /// Access and modification time, as `touch -d` sets them.
    SetTimes {
        name: usize,
        secs: u64,
    },
    /// These wait for the server, in either mode.
    Truncate {
        name: usize,
        len: u64,
    },
    Create {
        name: usize,
    },
    Remove {
        name: usize,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Fsync {
        name: usize,
    },
    /// An empty directory under the name (both go behind once the first create came). The
    /// steps above then fail on it as on any directory.
    Mkdir {
        name: usize,
    },
    Rmdir {
        name: usize,
    },
    /// Faults: the server stops reading for a while (what is sent waits in the socket,
    /// what waits for an answer waits), or dies and another takes its place.
    StopServer {
        ms: u64,
    },
    KillServer,
}

fn step() -> impl Strategy<Value = Step> {
    let name = 0..NAMES.len();
    prop_oneof![
        6 => (name.clone(), 0..70_000u64, 1..9000usize, any::<u8>())
            .prop_map(|(name, offset, len, byte)| Step::Write { name, offset, len, byte }),
        3 => (name.clone(), 0..MODES.len()).prop_map(|(name, mode)| Step::Chmod { name, mode }),
        2 => (name.clone(), 1_000_000_000..1_700_000_000u64)
            .prop_map(|(name, secs)| Step::SetTimes { name, secs }),
        1 => (name.clone(), 0..80_000u64).prop_map(|(name, len)| Step::Truncate { name, len }),
        2 => name.clone().prop_map(|name| Step::Create { name }),
        1 => name.clone().prop_map(|name| Step::Remove { name }),
        1 => (name.clone(), name.clone()).prop_map(|(from, to)| Step::Rename { from, to }),
        1 => name.clone().prop_map(|name| Step::Fsync { name }),
        1 => name.clone().prop_map(|name| Step::Mkdir { name }),
        1 => name.prop_map(|name| Step::Rmdir { name }),
        1 => (20..300u64).prop_map(|ms| Step::StopServer { ms }),
        1 => Just(Step::KillServer),
    ]
}

/// Makes `step` in directory `dir`; what it returns is compared between the mount and
/// the model (`Ok` or the errno).
fn apply(dir: &Path, step: &Step) -> Result<(), i32> {
    let path = |i: usize| dir.join(NAMES[i]);
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(-1);
    match *step {
        Step::Write {
            name,
            offset,
            len,
            byte,
        } => {
            let f = OpenOptions::new()
                .write(true)
                .open(path(name))
                .map_err(errno)?;
            f.write_all_at(&vec![byte; len], offset).map_err(errno)
        }
        Step::Chmod { name, mode } => {
            fs::set_permissions(path(name), fs::Permissions::from_mode(MODES[mode])).map_err(errno)
        }
        Step::SetTimes { name, secs } => {
            let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
            let times = fs::FileTimes::new().set_accessed(t).set_modified(t);
            OpenOptions::new()
                .write(true)
                .open(path(name))
                .and_then(|f| f.set_times(times))
                .map_err(errno)
        }
        Step::Truncate { name, len } => OpenOptions::new()
            .write(true)
            .open(path(name))
            .and_then(|f| f.set_len(len))
            .map_err(errno),
        Step::Create { name } => OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path(name))
            .map(drop)
            .map_err(errno),
        Step::Remove { name } => fs::remove_file(path(name)).map_err(errno),
        Step::Rename { from, to } => fs::rename(path(from), path(to)).map_err(errno),
        Step::Fsync { name } => fs::File::open(path(name))
            .and_then(|f| f.sync_all())
            .map_err(errno),
        Step::Mkdir { name } => fs::create_dir(path(name)).map_err(errno),
        Step::Rmdir { name } => fs::remove_dir(path(name)).map_err(errno),
        Step::StopServer { .. } | Step::KillServer => Ok(()),
    }
}

/// A file's type, its content as runs of one byte (none for a directory), its permission
/// bits, its owner, its modification time.
type Kept = (u32, Vec<(u8, usize)>, u32, (u32, u32), Option<i64>);

/// `nobody`, the user [`run_case`] may make its calls as.
const NOBODY: u32 = 65534;

/// Runs `f` with this thread's file system ids set to `uid` (and group `uid`), as a
/// process of that user would make its calls (FUSE and local permission checks both go by
/// them), then root's again. `None`: as root.
fn as_user<T>(uid: Option<u32>, f: impl FnOnce() -> T) -> T {
    let Some(uid) = uid else {
        return f();
    };
    // SAFETY: setfsuid and setfsgid change only this thread's file system ids; they take
    // and return plain integers.
    unsafe {
        libc::setfsgid(uid);
        libc::setfsuid(uid);
    }
    let out = f();
    // SAFETY: as above.
    unsafe {
        libc::setfsuid(0);
        libc::setfsgid(0);
    }
    out
}

/// What the host and the model must agree on: each name's content (as runs of one byte:
/// what the steps write), permission bits, and modification time where the sequence set
/// it last (else the host's clock decides it).
fn state(dir: &Path, steps: &[Step]) -> Vec<Option<Kept>> {
    (0..NAMES.len())
        .map(|i| {
            let p = dir.join(NAMES[i]);
            let m = fs::metadata(&p).ok()?;
            let times_set =
                last_change(steps, i).is_some_and(|s| matches!(s, Step::SetTimes { .. }));
            let content = if m.is_dir() {
                Vec::new()
            } else {
                runs(&fs::read(&p).unwrap())
            };
            Some((
                m.mode() & libc::S_IFMT,
                content,
                m.mode() & 0o7777,
                (m.uid(), m.gid()),
                times_set.then(|| m.mtime()),
            ))
        })
        .collect()
}

fn runs(bytes: &[u8]) -> Vec<(u8, usize)> {
    let mut runs: Vec<(u8, usize)> = Vec::new();
    for &b in bytes {
        match runs.last_mut() {
            Some((last, n)) if *last == b => *n += 1,
            _ => runs.push((b, 1)),
        }
    }
    runs
}

/// The last step that changed name `i`'s content or times (renames carry a file's times
/// along, so they end the tracking: the mtime is then not compared).
fn last_change(steps: &[Step], i: usize) -> Option<&Step> {
    steps.iter().rev().find(|s| match **s {
        Step::Write { name, .. } | Step::SetTimes { name, .. } | Step::Truncate { name, .. } => {
            name == i
        }
        Step::Create { name }
        | Step::Remove { name }
        | Step::Mkdir { name }
        | Step::Rmdir { name } => name == i,
        Step::Rename { from, to } => from == i || to == i,
        _ => false,
    })
}

/// Runs `steps` through a mount and on the model, as root or as `user`, in a directory
/// anyone may write in.
fn run_case(steps: &[Step], user: Option<u32>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let (top, model) = (dir.path().join("export"), dir.path().join("model"));
    fs::create_dir(&top).unwrap();
    fs::create_dir(&model).unwrap();
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let mut serve = Serve::start(&top, &addr, &[]);
    let mount = Mount::start(&addr, &["--changes", "behind"]);
    mount.wait_following();
    // Reachable by the user, as a shared directory would be.
    for d in [dir.path(), mount.mountpoint.parent().unwrap()] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    fs::create_dir(mount.mountpoint.join("u")).unwrap();
    fs::create_dir(model.join("u")).unwrap();
    for d in [mount.mountpoint.join("u"), model.join("u")] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o1777)).unwrap();
    }
    let (export, model) = (top.join("u"), model.join("u"));
    let mnt = mount.mountpoint.join("u");
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::StopServer { ms } => {
                let pid = serve.child.id().to_string();
                run_ok(Command::new("kill").args(["-STOP", &pid]));
                // Woken from another thread: the next steps may wait for the server.
                let ms = *ms;
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    let _ = Command::new("kill").args(["-CONT", &pid]).status();
                });
            }
            Step::KillServer => {
                serve.child.kill().unwrap();
                serve.child.wait().unwrap();
                serve = Serve::start(&top, &addr, &[]);
            }
            _ => {
                let (got, want) = as_user(user, || (apply(&mnt, step), apply(&model, step)));
                prop_assert_eq!(got, want, "step {} {:?}", i, step);
            }
        }
    }
    // A server stopped last is woken by its thread; the sync waits for it.
    let out = Command::new(crossfs_bin())
        .arg("sync")
        .arg(&mnt)
        .output()
        .unwrap();
    prop_assert!(
        out.status.success(),
        "sync: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let behind = &mount.stats()["behind"];
    prop_assert_eq!(behind["refused"].as_u64(), Some(0), "{}", behind);
    // No host program changes anything here: nothing may be kept beside as a conflict.
    prop_assert_eq!(behind["conflicts"].as_u64(), Some(0), "{}", behind);
    for name in NAMES {
        let shown_if_there = |p: &Path| p.exists().then(|| shown(p));
        prop_assert_eq!(
            shown_if_there(&mnt.join(name)),
            shown_if_there(&export.join(name)),
            "{} as the mount shows it after the sync",
            name
        );
    }
    if let Some(uid) = user {
        // The user's calls were the user's (on the model too), and its creates went
        // behind, with the chowns that give them away.
        let files = state(&model, steps);
        prop_assert!(
            files.iter().flatten().all(|k| k.3 == (uid, uid)),
            "{:?}",
            files
        );
        let sent = mount.stats()["9p"]["Tcreatebehindmarked"]["count"].as_u64();
        prop_assert!(sent.unwrap_or(0) > 0, "no create went behind");
    }
    // Contents last: reading them moves the host's access times.
    prop_assert_eq!(state(&export, steps), state(&model, steps));
    Ok(())
}

proptest! {
    // Each case starts a server and a mount (and more servers for its faults): few cases,
    // long sequences.
    #![proptest_config(ProptestConfig { cases: 16, max_shrink_iters: 100, ..ProptestConfig::default() })]
    #[test]
    fn changes_sent_behind_survive_stops_and_restarts_of_the_server(
        steps in prop::collection::vec(step(), 10..60)
    ) {
        // Every name starts as a file with content, so that most steps find one.
        let mut all = NAMES.iter().enumerate().flat_map(|(name, _)| {
            [Step::Create { name }, Step::Write { name, offset: 0, len: 5000, byte: b'x' }]
        }).collect::<Vec<_>>();
        all.extend(steps);
        run_case(&all, None)?;
    }
}

proptest! {
    // The same, by `nobody` (fewer cases: what differs is who owns what, and the chown
    // a create sends after it).
    #![proptest_config(ProptestConfig { cases: 8, max_shrink_iters: 100, ..ProptestConfig::default() })]
    #[test]
    fn another_users_changes_sent_behind_survive_stops_and_restarts_of_the_server(
        steps in prop::collection::vec(step(), 10..60)
    ) {
        let mut all = NAMES.iter().enumerate().flat_map(|(name, _)| {
            [Step::Create { name }, Step::Write { name, offset: 0, len: 5000, byte: b'x' }]
        }).collect::<Vec<_>>();
        all.extend(steps);
        run_case(&all, Some(NOBODY))?;
    }
}

/// A case the property found (2026-12-02): a chmod and then the removal of a file sent
/// behind while the server is stopped, and lost with it: the new server still has the
/// name, and the chmod sent again must find the file through it.
#[test]
fn a_chmod_and_a_removal_lost_with_the_connection_are_both_sent_again() {
    use Step::*;
    let mut steps: Vec<Step> = (0..NAMES.len())
        .flat_map(|name| {
            [
                Create { name },
                Write {
                    name,
                    offset: 0,
                    len: 5000,
                    byte: b'x',
                },
            ]
        })
        .collect();
    steps.extend([
        StopServer { ms: 20 },
        Chmod { name: 1, mode: 0 },
        Remove { name: 1 },
        KillServer,
        SetTimes {
            name: 0,
            secs: 1404083259,
        },
    ]);
    run_case(&steps, None).unwrap();
}
