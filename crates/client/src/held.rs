//! Sends held until the caller has answered its own caller: a FUSE worker that answers a
//! request itself and sends the server a change behind it (`crossfs mount --changes
//! behind`) answers the kernel first, and writes the change after, so that the program
//! waiting in the kernel runs on while the worker writes to the socket and wakes the
//! server ([`holding_sends`]).
//!
//! Order is kept: a held request is written before any later request of the connection,
//! held or not, from any thread (each write first writes what is held, under the
//! connection's writer lock), and a thread about to wait for the server writes its own
//! held requests first ([`crate::before_wait`]). Only asynchronous requests that own their
//! bytes are held; a blocking call is written at once (after what is held).

use std::cell::RefCell;
use std::sync::Arc;

use crate::conn::Connection;

thread_local! {
    /// `Some` while this thread holds its sends: the connections holding some of them.
    static HOLDING: RefCell<Option<Vec<Arc<Connection>>>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's asynchronous requests held, then writes them, in order.
/// Within `f`, a request goes out when a later request of the connection is written, when
/// this thread waits for the server, or when `f` returns (or unwinds).
pub fn holding_sends<R>(f: impl FnOnce() -> R) -> R {
    struct WriteOnDrop;
    impl Drop for WriteOnDrop {
        fn drop(&mut self) {
            let held = HOLDING.with(|h| h.borrow_mut().take());
            for conn in held.into_iter().flatten() {
                conn.write_held();
            }
        }
    }
    let nested = HOLDING.with(|h| {
        let mut h = h.borrow_mut();
        let nested = h.is_some();
        h.get_or_insert_with(Vec::new);
        nested
    });
    if nested {
        return f();
    }
    let _write = WriteOnDrop;
    f()
}

/// Whether this thread holds its sends; if so, `conn` is noted as holding some, to be
/// written when the thread stops holding.
pub(crate) fn hold_on(conn: &Arc<Connection>) -> bool {
    HOLDING.with(|h| match &mut *h.borrow_mut() {
        Some(list) => {
            if !list.iter().any(|c| Arc::ptr_eq(c, conn)) {
                list.push(conn.clone());
            }
            true
        }
        None => false,
    })
}

/// Writes what this thread holds now (it is about to wait for the server), and holds on.
pub(crate) fn write_own_held() {
    let held = HOLDING.with(|h| h.borrow().clone());
    for conn in held.into_iter().flatten() {
        conn.write_held();
    }
}
