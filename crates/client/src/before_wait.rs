//! What a thread does just before it waits for the server: a caller whose thread must not
//! sit idle meanwhile (the mount's FUSE-over-io_uring threads, which hand their ring to
//! another thread so that the ring goes on fetching requests) sets a hook once
//! ([`set_before_wait`]), and every wait of this client runs it first: a blocking call
//! whose reply is not in yet, a call waiting for a free tag, a call waiting for a lost
//! connection to be replaced. A caller's own waits on the server outside this client run
//! it too ([`before_wait`]).
//!
//! The hook must not call this client (it may run with the client's locks held).
//! [`before_wait`] also writes the requests the thread holds (`crate::holding_sends`).

use std::cell::Cell;

thread_local! {
    static HOOK: Cell<Option<fn()>> = const { Cell::new(None) };
}

/// Sets what this thread runs before each wait from now on (`None`: nothing).
pub fn set_before_wait(hook: Option<fn()>) {
    HOOK.with(|h| h.set(hook));
}

/// Writes the requests this thread holds (`crate::holding_sends`: the wait may be for
/// their answers), then runs this thread's hook, if it set one. Not with a lock of this
/// client held.
pub fn before_wait() {
    crate::held::write_own_held();
    run_hook();
}

/// Runs this thread's hook, if it set one (safe with the client's locks held).
pub(crate) fn run_hook() {
    if let Some(hook) = HOOK.with(Cell::get) {
        hook();
    }
}

/// True while this thread runs completions (it reads a connection's replies, perhaps within
/// a blocking call of its own): what it does there is for other callers.
pub fn in_completion() -> bool {
    crate::conn::dispatching_any()
}
