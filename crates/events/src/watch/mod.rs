//! Kernel watchers: each turns the kernel's notifications into [`Raw`] changes for the engine.
//!
//! - [`fanotify`]: one mark on the whole filesystem, events carry a directory handle and a
//!   name (needs `CAP_SYS_ADMIN` and a filesystem that reports file ids).
//! - [`inotify`]: one watch per directory within a budget; subtrees past it are polled.
//! - [`poll`]: no kernel help at all; the engine rescans the whole tree periodically.
//!
//! A watcher only reads and translates. It never blocks on anything but its own fd (which is
//! non-blocking), reads into one buffer allocated when it is created, and never talks to
//! subscribers: that is what keeps watching from slowing down the programs making changes.

pub(crate) mod fanotify;
pub(crate) mod inotify;
pub(crate) mod poll;

use std::io;
use std::os::fd::BorrowedFd;

use crate::beneath::Root;
use crate::coalesce::Hints;
use crate::path::RelPath;

/// Size of a watcher's read buffer.
pub(crate) const READ_BUFFER: usize = 64 * 1024;

/// Most kernel records one `read_into` call translates before returning to the engine, so a
/// flood cannot starve flushing.
pub(crate) const MAX_RECORDS_PER_CALL: usize = 16 * 1024;

/// One translated kernel notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Raw {
    /// Something happened to `path`.
    Change { path: RelPath, hints: Hints },
    /// `from` was renamed to `to` (both inside the export).
    Rename { from: RelPath, to: RelPath },
    /// The kernel queue overflowed: events were lost.
    Overflow,
    /// Something asked for `path` to be rescanned (a 9P handler, for instance).
    Rescan { path: RelPath },
}

/// A source of kernel notifications.
pub(crate) trait Watcher: Send {
    /// For logs and `EventHub::backend`.
    fn kind(&self) -> crate::BackendKind;
    /// The fd to poll for readability; `None` when disarmed (or polling only).
    fn fd(&self) -> Option<BorrowedFd<'_>>;
    /// Starts (or restarts) watching the whole export.
    ///
    /// # Errors
    /// The kernel refused to watch.
    fn arm(&mut self, root: &Root) -> io::Result<()>;
    /// Stops watching (while backing off to polling).
    fn disarm(&mut self);
    /// Reads what is queued, without blocking, and appends it to `out`.
    ///
    /// # Errors
    /// Reading the fd failed for a reason other than "nothing queued".
    fn read_into(&mut self, root: &Root, out: &mut Vec<Raw>) -> io::Result<()>;
    /// Subtrees the kernel does not watch (past the watch budget): the engine polls them.
    fn unwatched(&self) -> Vec<RelPath>;
}
