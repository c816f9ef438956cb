//! Read-only open fids kept for a while after their file is closed, so that opening the same
//! file again (git opens `.git/HEAD`, its config and its index on every command; a build
//! opens the same headers for every unit) costs no round trip.
//!
//! An open fid on the server names the file itself (crossfs's fids hold the inode), not a
//! path, so reusing one for another open of the same node reads exactly what a fresh open
//! would. Only opens for reading, without truncation, are kept. An idle fid keeps the file
//! open on the server (a file removed on the host keeps its space until then), so they are
//! few ([`IDLE_MAX`]), young ([`IDLE_FOR`]), and dropped when the kernel forgets the node,
//! when a change event names the file, and on a reconnect.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::fid::FidRef;

/// Idle open fids kept at most.
const IDLE_MAX: usize = 64;
/// How long an idle open fid is kept.
const IDLE_FOR: Duration = Duration::from_secs(10);

struct Idle {
    node: u64,
    flags: u32,
    fid: Arc<FidRef>,
    since: Instant,
}

/// Open fids of closed files, by node and open flags.
#[derive(Default)]
pub(crate) struct IdleOpens {
    idle: Mutex<VecDeque<Idle>>,
}

impl IdleOpens {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Idle>> {
        crate::sync::lock(&self.idle)
    }

    /// Whether an open with these 9P2000.L flags may be kept and reused.
    pub(crate) fn keeps(flags: u32) -> bool {
        use crossfs_wire::open_flags as of;
        flags & of::ACCMODE == of::RDONLY && flags & (of::TRUNC | of::CREATE | of::APPEND) == 0
    }

    /// Keeps `fid`, open on `node` with `flags`, for a later open.
    pub(crate) fn put(&self, node: u64, flags: u32, fid: Arc<FidRef>) {
        let now = Instant::now();
        let mut idle = self.lock();
        let mut gone: Vec<Idle> = Vec::new();
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
    pub(crate) fn take(&self, node: u64, flags: u32) -> Option<Arc<FidRef>> {
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
        let gone: VecDeque<Idle> = {
            let mut idle = self.lock();
            let (keep, gone) = idle.drain(..).partition(|i| i.node != node);
            *idle = keep;
            gone
        };
        drop(gone);
    }

    /// Drops every idle fid.
    pub(crate) fn clear(&self) {
        let gone: VecDeque<Idle> = std::mem::take(&mut *self.lock());
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossfs_wire::open_flags as of;

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
