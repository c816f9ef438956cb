//! The one way this crate takes a mutex.
//!
//! A thread that panicked while holding a lock has left nothing half-done that matters more
//! than the mount going on serving: every guarded structure here is a cache or a table that
//! stays consistent between statements, so a poisoned lock is taken as it is.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, ignoring poisoning (see the module doc).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
