//! Read-only open fids kept for a while after their file is closed, so that opening the same
//! file again (git opens `.git/HEAD`, its config and its index on every command; a build
//! opens the same headers for every unit) costs no round trip.
//!
//! An open fid on the server names the file itself (crossfs's fids hold the inode), not a
//! path, so reusing one for another open of the same node reads exactly what a fresh open
//! would. Only opens for reading, without truncation, are kept. An idle fid keeps the file
//! open on the server (a file removed on the host keeps its space until then), and takes
//! one of the server's descriptors, which it shares between all its clients. So they are
//! few ([`IDLE_MAX`]); young ([`IDLE_FOR`]: a thread of the mount drops them when they
//! expire, [`IdleOpens::expire`], so a mount that went quiet holds none); dropped when the
//! kernel forgets the node, when a change event names the file, and on a reconnect; and
//! given back at once when the server refuses an open for want of descriptors
//! (`MountState::short_of_descriptors` in `fs/open.rs`). Otherwise 28 quiet mounts, each
//! holding its last 64, take every open file a server under `ulimit -n 4096` allows, and
//! the next mount's opens fail with `EMFILE` (tests/small_limits.rs, tests/scale.rs).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::fid::FidRef;

/// Idle open fids kept at most.
const IDLE_MAX: usize = 64;
/// How long an idle open fid is kept.
pub(crate) const IDLE_FOR: Duration = Duration::from_secs(10);

struct Idle<F> {
    node: u64,
    flags: u32,
    fid: F,
    since: Instant,
}

/// Open fids of closed files, by node and open flags. (Generic only so that the tests can
/// keep something else than fids.)
pub(crate) struct IdleOpens<F = Arc<FidRef>> {
    idle: Mutex<VecDeque<Idle<F>>>,
}

impl<F> Default for IdleOpens<F> {
    fn default() -> Self {
        IdleOpens {
            idle: Mutex::default(),
        }
    }
}

impl IdleOpens {
    /// Whether an open with these 9P2000.L flags may be kept and reused.
    pub(crate) fn keeps(flags: u32) -> bool {
        use crossfs_wire::open_flags as of;
        flags & of::ACCMODE == of::RDONLY && flags & (of::TRUNC | of::CREATE | of::APPEND) == 0
    }
}

impl<F> IdleOpens<F> {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Idle<F>>> {
        crate::sync::lock(&self.idle)
    }

    /// Keeps `fid`, open on `node` with `flags`, for a later open.
    pub(crate) fn put(&self, node: u64, flags: u32, fid: F) {
        let now = Instant::now();
        let mut idle = self.lock();
        let mut gone: Vec<Idle<F>> = Vec::new();
        while idle.len() >= IDLE_MAX || idle.front().is_some_and(|i| i.since + IDLE_FOR < now) {
            gone.extend(idle.pop_front());
        }
        idle.push_back(Idle {
            node,
            flags,
            fid,
            since: now,
        });
        drop(idle);
        drop(gone); // clunked outside the lock
    }

    /// An idle fid open on `node` with `flags`, if one is kept and young enough.
    pub(crate) fn take(&self, node: u64, flags: u32) -> Option<F> {
        let found = {
            let mut idle = self.lock();
            let i = idle
                .iter()
                .rposition(|i| i.node == node && i.flags == flags)?;
            idle.remove(i)?
        };
        // Too old: dropped (and clunked) here, outside the lock.
        (found.since.elapsed() < IDLE_FOR).then_some(found.fid)
    }

    /// Drops the idle fids of `node`.
    pub(crate) fn forget(&self, node: u64) {
        let gone: VecDeque<Idle<F>> = {
            let mut idle = self.lock();
            let (keep, gone) = idle.drain(..).partition(|i| i.node != node);
            *idle = keep;
            gone
        };
        drop(gone);
    }

    /// Drops every idle fid; returns how many there were.
    pub(crate) fn clear(&self) -> usize {
        let gone: VecDeque<Idle<F>> = std::mem::take(&mut *self.lock());
        let n = gone.len();
        drop(gone);
        n
    }

    /// Drops the idle fids kept for [`IDLE_FOR`] or longer at `now`; returns when the next
    /// one will have been, if any is left.
    pub(crate) fn expire(&self, now: Instant) -> Option<Instant> {
        let mut gone = Vec::new();
        let next = {
            let mut idle = self.lock();
            while idle.front().is_some_and(|i| i.since + IDLE_FOR <= now) {
                gone.extend(idle.pop_front());
            }
            idle.front().map(|i| i.since + IDLE_FOR)
        };
        drop(gone); // clunked outside the lock
        next
    }

    /// Starts a thread that drops expired idle fids for as long as `owner` (which holds
    /// the cache `idle` returns) is alive: it sleeps until the oldest expires, or for
    /// [`IDLE_FOR`] when none is kept (a fid kept meanwhile expires after the wake-up). So an
    /// idle fid lives [`IDLE_FOR`], whether or not the mount does anything else.
    pub(crate) fn expire_while<T: Send + Sync + 'static>(
        owner: std::sync::Weak<T>,
        idle: impl Fn(&T) -> &Self + Send + 'static,
    ) -> std::io::Result<()>
    where
        F: 'static,
    {
        std::thread::Builder::new()
            .name("crossfs-idle".into())
            .spawn(move || loop {
                let next = match owner.upgrade() {
                    Some(owner) => idle(&owner).expire(Instant::now()),
                    None => return,
                };
                let now = Instant::now();
                let wake = next.unwrap_or(now + IDLE_FOR);
                std::thread::sleep(wake.saturating_duration_since(now));
            })
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossfs_wire::open_flags as of;

    /// Something kept that counts its drops, as a fid's drop clunks it.
    struct Counted(Arc<std::sync::atomic::AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn idle_fids_expire_without_another_put() {
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let idle: IdleOpens<Counted> = IdleOpens::default();
        let start = Instant::now();
        for node in 0..64 {
            idle.put(node, of::RDONLY, Counted(dropped.clone()));
        }
        let next = idle.expire(start).expect("kept");
        assert!(next >= start + IDLE_FOR);
        assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
        // Nothing else happens on the mount: the expiry alone gives the fids back.
        assert_eq!(idle.expire(next + Duration::from_millis(1)), None);
        assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 64);
        assert!(idle.take(1, of::RDONLY).is_none());
    }

    #[test]
    fn the_expiry_thread_empties_a_quiet_cache_and_ends_with_its_owner() {
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let owner: Arc<IdleOpens<Counted>> = Arc::default();
        // Kept long ago, as far as the cache knows.
        owner.put(1, of::RDONLY, Counted(dropped.clone()));
        crate::sync::lock(&owner.idle)[0].since -= IDLE_FOR;
        IdleOpens::<Counted>::expire_while(Arc::downgrade(&owner), |o| o).unwrap();
        let t = Instant::now();
        while dropped.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            assert!(t.elapsed() < Duration::from_secs(5), "never expired");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(owner.clear(), 0);
    }

    #[test]
    fn clear_says_how_many_it_gave_back() {
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let idle: IdleOpens<Counted> = IdleOpens::default();
        for node in 0..3 {
            idle.put(node, of::RDONLY, Counted(dropped.clone()));
        }
        assert_eq!(idle.clear(), 3);
        assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 3);
        assert_eq!(idle.clear(), 0);
    }

    #[test]
    fn only_plain_read_only_opens_are_kept() {
        assert!(IdleOpens::keeps(of::RDONLY));
        assert!(IdleOpens::keeps(of::RDONLY | of::DIRECTORY | of::NOATIME));
        for flags in [
            of::WRONLY,
            of::RDWR,
            of::RDONLY | of::TRUNC,
            of::RDONLY | of::APPEND,
        ] {
            assert!(!IdleOpens::keeps(flags), "{flags:o}");
        }
    }
}
