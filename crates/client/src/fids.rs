//! The fid allocator: numbers from 0 upward, recycled through a free list.
//!
//! A fid returns to the pool only once the server has forgotten it (its Rclunk or Rremove has
//! arrived, or the caller says it was never bound). Reusing it earlier would let a new walk
//! race with the old clunk for the same number.

use std::sync::Mutex;

use crossfs_wire::{Fid, NOFID};

/// Allocates fids for one connection.
#[derive(Default)]
pub(crate) struct FidPool {
    state: Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    /// The lowest number never handed out.
    next: u32,
    /// Numbers handed out and given back.
    free: Vec<u32>,
}

impl FidPool {
    /// A fid nobody else holds.
    ///
    /// # Panics
    /// When all 2^32 - 1 fids are live at once, which memory exhausts long before.
    pub(crate) fn alloc(&self) -> Fid {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fid) = s.free.pop() {
            return Fid(fid);
        }
        assert!(s.next != NOFID.0, "fid space exhausted");
        let fid = s.next;
        s.next += 1;
        Fid(fid)
    }

    /// Gives `fid` back. Ignores numbers this pool never handed out (NOFID, for one).
    pub(crate) fn release(&self, fid: Fid) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if fid.0 >= s.next {
            tracing::warn!(fid = fid.0, "released a fid that was never allocated");
            return;
        }
        // Releasing twice would hand one number to two owners; catch it in tests.
        debug_assert!(!s.free.contains(&fid.0), "fid {} released twice", fid.0);
        s.free.push(fid.0);
    }

    /// Fids currently handed out.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        let s = self.state.lock().unwrap();
        s.next as usize - s.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn counts_up_from_zero() {
        let p = FidPool::default();
        assert_eq!((p.alloc(), p.alloc(), p.alloc()), (Fid(0), Fid(1), Fid(2)));
        assert_eq!(p.live(), 3);
    }

    #[test]
    fn released_fids_are_recycled_before_new_ones() {
        let p = FidPool::default();
        let a = p.alloc();
        let b = p.alloc();
        p.release(a);
        assert_eq!(p.alloc(), a);
        assert_eq!(p.alloc(), Fid(2));
        p.release(b);
        assert_eq!(p.live(), 2);
    }

    #[test]
    fn never_allocated_fids_are_ignored() {
        let p = FidPool::default();
        p.release(NOFID);
        p.release(Fid(5));
        assert_eq!(p.alloc(), Fid(0));
    }

    #[test]
    fn concurrent_allocations_are_unique() {
        let p = std::sync::Arc::new(FidPool::default());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..1000 {
                        let f = p.alloc();
                        if i % 3 == 0 {
                            p.release(f);
                        } else {
                            mine.push(f);
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut all = HashSet::new();
        for h in handles {
            for f in h.join().unwrap() {
                assert!(all.insert(f), "{f:?} handed out twice");
            }
        }
        assert_eq!(p.live(), all.len());
    }
}
