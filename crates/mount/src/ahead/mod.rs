//! What the mount fetches ahead of the programs that will ask: small files a directory at
//! a time (`small_files`), their content pushed into the kernel's page cache
//! (`pushed_pages`), directories listed ahead of a program looking names up in them
//! (`primed_dirs`), and the replicas of subdirectories during a walk of a tree
//! (`tree_walk`); and the one open of a file that teaches the kernel to send no OPEN and
//! RELEASE (`no_opens`).
//!
//! Everything here only saves round trips: dropping any of it changes no answer. The
//! modules keep the bookkeeping; the requests themselves are sent by the FUSE side
//! (`crate::fs`), on the helper threads whose queues [`Ahead`] holds. What this part must
//! not do: answer for a file unless what made the fetch exact (see each module's doc)
//! still holds.

pub(crate) mod no_opens;
pub(crate) mod primed_dirs;
pub(crate) mod pushed_pages;
pub(crate) mod small_files;
pub(crate) mod tree_walk;

use std::sync::atomic::AtomicU32;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, OnceLock};

use no_opens::NoOpens;
use primed_dirs::DirPriming;
use pushed_pages::PagePush;
use small_files::{SmallFile, SmallFiles};
use tree_walk::TreeWalk;

/// The mount's fetching ahead, and the queues of the threads that do it (each started
/// with the FUSE session).
#[derive(Default)]
pub(crate) struct Ahead {
    /// Small files fetched a directory at a time, for first reads.
    pub small_files: SmallFiles,
    /// Small files pushed into the kernel's page cache, by the thread this sends them to.
    /// Shared with the change feed, which settles a push before it drops pages.
    pub page_push: Arc<PagePush>,
    pub pages_to_push: OnceLock<SyncSender<Vec<SmallFile>>>,
    /// Directories a program reading a tree has reached, for the thread that asks for the
    /// small files of those it will read next.
    pub dirs_to_read_ahead: OnceLock<SyncSender<u64>>,
    /// Lookups per directory, for listing directories ahead, by the thread this sends
    /// them to.
    pub dir_priming: DirPriming,
    pub dirs_to_prime: OnceLock<SyncSender<u64>>,
    /// The thread id of the thread that lists directories ahead.
    pub priming_tid: AtomicU32,
    /// Whether a program walks a tree, and the thread that fetches the replicas of the
    /// subdirectories it will list.
    pub tree_walk: TreeWalk,
    pub subdirs_to_fetch: OnceLock<SyncSender<u64>>,
    /// Whether the kernel still sends OPEN and RELEASE, and the thread that opens a
    /// created file once to make it stop.
    pub no_opens: NoOpens,
    pub files_to_open: OnceLock<SyncSender<u64>>,
}
