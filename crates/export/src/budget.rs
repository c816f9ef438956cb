//! What a client can make the server hold, bounded: open files (server-wide, shared fairly
//! between connections) and bytes of extended attribute values held by xattr fids (per
//! connection). The `O_PATH` descriptors of the handles clients hold are not charged here:
//! they are a cache ([`crate::handles`]) that never refuses a lookup.
//!
//! Open files: every open descriptor that outlives a request (an open fid or FUSE file, a
//! directory opened for one listing) is charged before it is made and released when it is
//! closed. A connection may take one more only if afterwards at least `min(what it then
//! holds, budget / 4)` stay free; and any connection may hold a small floor (budget / 64,
//! at most 64) while any is free. So one connection alone can use three quarters of the
//! budget, and whatever it does, the others (and new connections) still find a quarter
//! free; several greedy connections split that quarter, each leaving at least as many free
//! as it holds. Past its share a client's open is refused with `EMFILE`, logged once a
//! second and counted ([`FdPool::refused`]).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::{lock, ExportError, ExportResult};

/// Descriptors the whole server may hold for its clients.
#[derive(Debug)]
pub struct FdPool {
    /// The most descriptors charged at once, over every connection.
    budget: usize,
    /// What any connection may hold regardless of how much others hold (while any is free).
    floor: usize,
    /// What a connection holding this much or more must leave free.
    headroom: usize,
    /// Descriptors charged now.
    held: Mutex<usize>,
    /// Opens refused for want of a descriptor, since the start.
    refused: AtomicU64,
    /// When a refusal was last logged (seconds since `started`), so a flood logs once a
    /// second.
    logged: AtomicU64,
    started: Instant,
}

impl FdPool {
    /// A pool of `budget` descriptors.
    pub fn new(budget: usize) -> Arc<FdPool> {
        Arc::new(FdPool {
            budget,
            floor: (budget / 64).min(64),
            headroom: budget / 4,
            held: Mutex::new(0),
            refused: AtomicU64::new(0),
            logged: AtomicU64::new(u64::MAX),
            started: Instant::now(),
        })
    }

    /// The budget for a process whose open-file limit is `limit`: the limit less a reserve of
    /// an eighth (at least 64, at most half) for what is not charged.
    pub fn budget_for_limit(limit: u64) -> usize {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX).min(1 << 24);
        let reserve = (limit / 8).max(64).min(limit / 2);
        limit - reserve
    }

    /// The most descriptors that may be charged at once.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Opens refused for want of a descriptor, since the start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Counts a refused open and logs it, at most once a second.
    fn refuse(&self, mine: usize, total: usize) {
        let refused = self.refused.fetch_add(1, Relaxed) + 1;
        let now = self.started.elapsed().as_secs();
        if self.logged.swap(now, Relaxed) != now {
            tracing::warn!(
                budget = self.budget,
                held = total,
                this_client = mine,
                refused,
                "open files: a client's share is used up; its opens get EMFILE (raise the \
                 open-file limit or --fd-budget)"
            );
        }
    }

    /// Descriptors charged now, over every connection.
    pub fn held(&self) -> usize {
        *lock(&self.held)
    }
}

/// One connection's share of an [`FdPool`].
#[derive(Debug)]
pub struct FdAccount {
    pool: Arc<FdPool>,
    /// Descriptors this connection holds (changed only under the pool's lock).
    held: AtomicUsize,
}

impl FdAccount {
    /// A new connection's (or client's) empty share of `pool`.
    pub fn new(pool: Arc<FdPool>) -> Arc<FdAccount> {
        Arc::new(FdAccount {
            pool,
            held: AtomicUsize::new(0),
        })
    }

    /// Charges one descriptor to this connection, or `EMFILE` when its share is used up.
    ///
    /// # Errors
    /// [`ExportError::TooManyFds`].
    pub fn charge(self: &Arc<Self>) -> ExportResult<FdCharge> {
        let pool = &self.pool;
        let mut total = lock(&pool.held);
        let free = pool.budget.saturating_sub(*total);
        let mine = self.held.load(Relaxed);
        // After taking one, as many as this connection then holds (up to the headroom) must
        // stay free.
        let keep = (mine + 1).min(pool.headroom);
        if free == 0 || (mine >= pool.floor && free - 1 < keep) {
            pool.refuse(mine, *total);
            return Err(ExportError::TooManyFds);
        }
        *total += 1;
        self.held.store(mine + 1, Relaxed);
        Ok(FdCharge {
            account: self.clone(),
        })
    }

    /// Descriptors this connection holds.
    pub fn held(&self) -> usize {
        self.held.load(Relaxed)
    }
}

/// One charged descriptor; released when dropped.
#[derive(Debug)]
pub struct FdCharge {
    account: Arc<FdAccount>,
}

impl Drop for FdCharge {
    fn drop(&mut self) {
        let mut total = lock(&self.account.pool.held);
        *total -= 1;
        self.account.held.fetch_sub(1, Relaxed);
    }
}

/// An open descriptor the server keeps across requests, with its charge.
#[derive(Debug)]
pub struct OpenFd {
    fd: OwnedFd,
    _charge: FdCharge,
}

impl OpenFd {
    /// A charged descriptor.
    pub fn new(fd: OwnedFd, charge: FdCharge) -> OpenFd {
        OpenFd {
            fd,
            _charge: charge,
        }
    }
}

impl AsFd for OpenFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Bytes of extended attribute values one connection's xattr fids may hold.
#[derive(Debug)]
pub struct ByteBudget {
    total: usize,
    left: Mutex<usize>,
}

impl ByteBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Arc<ByteBudget> {
        Arc::new(ByteBudget {
            total: bytes,
            left: Mutex::new(bytes),
        })
    }

    /// Bytes charged now.
    pub fn held(&self) -> usize {
        self.total - *lock(&self.left)
    }

    /// An empty charge against this budget, grown with [`ByteCharge::grow`].
    pub fn empty(self: &Arc<Self>) -> ByteCharge {
        ByteCharge {
            budget: self.clone(),
            bytes: 0,
        }
    }
}

/// Bytes charged to a [`ByteBudget`]; given back when dropped.
#[derive(Debug)]
pub struct ByteCharge {
    budget: Arc<ByteBudget>,
    bytes: usize,
}

impl ByteCharge {
    /// Bytes charged.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Charges `n` more bytes, or `ENOSPC` when the budget does not have them.
    ///
    /// # Errors
    /// [`ExportError::ByteBudget`].
    pub fn grow(&mut self, n: usize) -> ExportResult<()> {
        let mut left = lock(&self.budget.left);
        if *left < n {
            return Err(ExportError::ByteBudget);
        }
        *left -= n;
        self.bytes += n;
        Ok(())
    }
}

impl Drop for ByteCharge {
    fn drop(&mut self) {
        *lock(&self.budget.left) += self.bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Charges `account` until refused; returns the charges.
    fn take_all(account: &Arc<FdAccount>) -> Vec<FdCharge> {
        std::iter::from_fn(|| account.charge().ok()).collect()
    }

    #[test]
    fn a_greedy_connection_leaves_a_quarter_free() {
        let pool = FdPool::new(1000);
        let greedy = FdAccount::new(pool.clone());
        let held = take_all(&greedy);
        assert_eq!(held.len(), 750);
        // Others split the rest, each leaving at least as many free as it holds.
        let second = FdAccount::new(pool.clone());
        let theirs = take_all(&second);
        assert_eq!(theirs.len(), 125);
        assert_eq!(second.held(), 125);
        let third = FdAccount::new(pool.clone());
        assert_eq!(take_all(&third).len(), 62);
        // Everything comes back when dropped.
        drop(held);
        drop(theirs);
        assert_eq!(*lock(&pool.held), 0);
        assert_eq!(greedy.held(), 0);
        assert_eq!(take_all(&third).len(), 750);
    }

    #[test]
    fn the_floor_may_take_the_last_descriptors() {
        let pool = FdPool::new(64);
        assert_eq!((pool.floor, pool.headroom), (1, 16));
        let accounts: Vec<_> = (0..7).map(|_| FdAccount::new(pool.clone())).collect();
        let held: Vec<Vec<FdCharge>> = accounts.iter().map(take_all).collect();
        let counts: Vec<usize> = held.iter().map(Vec::len).collect();
        assert_eq!(counts, [48, 8, 4, 2, 1, 1, 0]);
    }

    #[test]
    fn budget_keeps_a_reserve() {
        assert_eq!(FdPool::budget_for_limit(20000), 17500);
        assert_eq!(FdPool::budget_for_limit(256), 192);
        assert_eq!(FdPool::budget_for_limit(100), 50);
        assert_eq!(FdPool::budget_for_limit(u64::MAX), (1 << 24) - (1 << 21));
    }

    #[test]
    fn byte_budget_is_given_back_on_drop() {
        let b = ByteBudget::new(100);
        let mut one = b.empty();
        one.grow(60).unwrap();
        let mut two = b.empty();
        assert!(two.grow(50).is_err());
        two.grow(40).unwrap();
        drop(one);
        two.grow(60).unwrap();
        assert!(two.grow(1).is_err());
        assert_eq!(b.held(), 100);
        drop(two);
        assert_eq!(b.held(), 0);
    }
}
