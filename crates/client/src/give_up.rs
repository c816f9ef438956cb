//! Giving up a wait for a lost connection: the caller a call waits for (the process behind
//! a FUSE request) may stop wanting the answer, as when it gets a signal.
//!
//! A thread says once, before its calls, what to check ([`give_up_when`]); a call that
//! waits for a new connection checks it every [`GIVE_UP_POLL`] and fails with
//! [`ClientError::Interrupted`](crate::ClientError::Interrupted) once it holds. A thread
//! that says nothing waits the whole time, as before. Only that wait is cut short: a
//! request already written to a live connection waits for its answer.

use std::cell::Cell;
use std::time::Duration;

/// How often a waiting call checks whether its caller gave up.
pub const GIVE_UP_POLL: Duration = Duration::from_millis(50);

/// What a waiting call checks: `check(arg)` is true once its caller no longer wants the
/// answer. A plain function and a number, so that setting it for every request costs no
/// allocation.
#[derive(Clone, Copy, Debug)]
pub struct GiveUp {
    /// The check.
    pub check: fn(u32) -> bool,
    /// Its argument (for a FUSE request, the caller's thread id).
    pub arg: u32,
}

thread_local! {
    static GIVE_UP: Cell<Option<GiveUp>> = const { Cell::new(None) };
}

/// Sets what calls made on this thread from now on check while they wait for a lost
/// connection to be replaced (`None`: nothing; they wait the whole time).
pub fn give_up_when(give_up: Option<GiveUp>) {
    GIVE_UP.with(|g| g.set(give_up));
}

/// What this thread's calls check (to carry it to a thread that waits for the same
/// caller).
pub fn current() -> Option<GiveUp> {
    GIVE_UP.with(Cell::get)
}

/// Whether this thread's caller gave up (see [`give_up_when`]): for waits of the caller's
/// own outside this client that should end the same way (checked every [`GIVE_UP_POLL`]).
pub fn caller_gave_up() -> bool {
    current().is_some_and(|g| (g.check)(g.arg))
}
