//! Who watches this mount: replaying a change is only worth its system calls (and the
//! lookup it costs) when some program in the guest has an inotify watch on the directory
//! or file, or a fanotify mark on it, its mount or its file system. The kernel lists every
//! watch in `/proc/PID/fdinfo/FD` of the inotify and fanotify descriptors, so the list is
//! read from there when it may have changed (see [`MAX_AGE`], [`MAX_AGE_UNWATCHED`]): a host
//! `git checkout` of 10,000 files, published in bursts, then costs a guest that nobody
//! watches a few scans and the invalidations. A scan reads a link for every open file of
//! every process (milliseconds on a busy machine), so a list that says "watched" is renewed
//! in the background: the watcher's event does not wait for it.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How old the list may be when it says "watched" (a watch that went away meanwhile costs
/// one needless replay).
const MAX_AGE: Duration = Duration::from_millis(1000);
/// How old it may be when it says "not watched". Recursive watchers add a watch on each new
/// directory as soon as they see it created, and the next event may be inside it; a watch
/// added within this long before an event may still miss it.
const MAX_AGE_UNWATCHED: Duration = Duration::from_millis(10);

#[derive(Default)]
struct Seen {
    at: Option<Instant>,
    /// Node ids (inode numbers on the mount) with an inotify watch or fanotify inode mark.
    nodes: HashSet<u64>,
    /// A fanotify mark on the whole mount or file system.
    everything: bool,
}

/// The watches on one mount, refreshed lazily.
pub(crate) struct Watchers {
    scanner: Scanner,
    seen: Arc<Mutex<Seen>>,
    /// A background scan is under way.
    renewing: Arc<AtomicBool>,
}

/// What tells this mount's watches apart in /proc.
#[derive(Clone, Copy)]
struct Scanner {
    /// The mount's device as the kernel prints it in fdinfo (`sdev`).
    sdev: u64,
    /// The mount's id as fdinfo prints fanotify mount marks (`mnt_id`).
    mnt_id: Option<u64>,
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}

impl Watchers {
    /// The watches on the file system mounted at `mountpoint`.
    pub(crate) fn new(mountpoint: &Path) -> Watchers {
        let sdev = rustix::fs::stat(mountpoint)
            .map(|st| {
                let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
                (u64::from(major) << 20) | u64::from(minor)
            })
            .unwrap_or(u64::MAX);
        Watchers {
            scanner: Scanner {
                sdev,
                mnt_id: mount_id(mountpoint),
            },
            seen: Arc::default(),
            renewing: Arc::default(),
        }
    }

    /// Whether any of `nodes` is watched (or the whole mount is).
    pub(crate) fn any_watched(&self, nodes: &[u64]) -> bool {
        let mut seen = lock(&self.seen);
        let watched = |s: &Seen| s.everything || nodes.iter().any(|n| s.nodes.contains(n));
        let age = seen.at.map_or(Duration::MAX, |t| t.elapsed());
        if age > MAX_AGE_UNWATCHED && !watched(&seen) {
            *seen = self.scanner.scan();
        } else if age > MAX_AGE {
            drop(seen);
            self.renew_in_background();
            return true;
        }
        watched(&seen)
    }

    /// Scans on a thread of its own (unless one already does), replacing the list after.
    fn renew_in_background(&self) {
        if self.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (scanner, seen, renewing) = (self.scanner, self.seen.clone(), self.renewing.clone());
        let renew = move || {
            let fresh = scanner.scan();
            *lock(&seen) = fresh;
            renewing.store(false, Ordering::Release);
        };
        let spawned = std::thread::Builder::new()
            .name("crossfs-watchers".into())
            .spawn(renew);
        if spawned.is_err() {
            // No thread to spare: the list stays as it is until the next call tries again.
            self.renewing.store(false, Ordering::Release);
        }
    }
}

impl Scanner {
    fn scan(&self) -> Seen {
        let mut seen = Seen {
            at: Some(Instant::now()),
            ..Seen::default()
        };
        let Ok(procs) = std::fs::read_dir("/proc") else {
            // No /proc to tell: replay everything rather than nothing.
            seen.everything = true;
            return seen;
        };
        for proc in procs.flatten() {
            let pid = proc.file_name();
            if !pid.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
                continue;
            }
            let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                let Ok(target) = std::fs::read_link(fd.path()) else {
                    continue;
                };
                let target = target.as_os_str().as_encoded_bytes();
                if !target.starts_with(b"anon_inode:inotify")
                    && !target.starts_with(b"anon_inode:[fanotify]")
                {
                    continue;
                }
                let info = proc.path().join("fdinfo").join(fd.file_name());
                if let Ok(text) = std::fs::read_to_string(info) {
                    self.parse_fdinfo(&text, &mut seen);
                }
            }
        }
        seen
    }

    fn parse_fdinfo(&self, text: &str, seen: &mut Seen) {
        for line in text.lines() {
            let Some(rest) = line
                .strip_prefix("inotify ")
                .or_else(|| line.strip_prefix("fanotify "))
            else {
                continue;
            };
            let field = |name: &str| {
                rest.split(' ')
                    .find_map(|f| f.strip_prefix(name))
                    .and_then(|v| u64::from_str_radix(v, 16).ok())
            };
            match (field("ino:"), field("sdev:"), field("mnt_id:")) {
                (Some(ino), Some(sdev), _) if sdev == self.sdev => {
                    seen.nodes.insert(ino);
                }
                // A file-system mark (sdev, no inode) or a mount mark.
                (None, Some(sdev), _) if sdev == self.sdev => seen.everything = true,
                (None, None, Some(id)) if Some(id) == self.mnt_id => seen.everything = true,
                _ => {}
            }
        }
    }
}

/// The mount id of `mountpoint` (the first field of its /proc/self/mountinfo line).
fn mount_id(mountpoint: &Path) -> Option<u64> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mountpoint.to_str()?;
    info.lines().find_map(|l| {
        let mut f = l.split(' ');
        let id = f.next()?.parse().ok()?;
        (f.nth(3)? == want).then_some(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watchers() -> Scanner {
        Scanner {
            sdev: 0x2d,
            mnt_id: Some(0x30),
        }
    }

    #[test]
    fn fdinfo_lines_name_the_watched_nodes() {
        let w = watchers();
        let mut seen = Seen::default();
        w.parse_fdinfo(
            "pos:\t0\nflags:\t00\nmnt_id:\t15\ninotify wd:1 ino:1 sdev:2d mask:fce ignored_mask:0\n\
             inotify wd:2 ino:1f sdev:2d mask:fce ignored_mask:0\n\
             inotify wd:3 ino:7 sdev:800001 mask:fce ignored_mask:0\n",
            &mut seen,
        );
        assert_eq!(seen.nodes, HashSet::from([1, 0x1f]));
        assert!(!seen.everything);
        w.parse_fdinfo(
            "fanotify mnt_id:30 mflags:0 mask:3b ignored_mask:0\n",
            &mut seen,
        );
        assert!(seen.everything, "a mark on the whole mount");
        let mut seen = Seen::default();
        w.parse_fdinfo(
            "fanotify sdev:2d mflags:0 mask:3b ignored_mask:0\n",
            &mut seen,
        );
        assert!(seen.everything, "a mark on the whole file system");
    }
}
