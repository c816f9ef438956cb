//! What the mount knows: node ids and the fid behind each (`inode`), open handles
//! (`handle`), read-only opens kept after a close (`idle`), whole directories with their
//! entries' attributes (`replica`), when fetched attributes may answer again
//! (`listed_attrs`), extended attributes known to be missing (`missing_xattrs`), and the
//! kernel's cache policy with `never` mode's recent lookups (`cache`).
//!
//! Each module here is a table or a cache that the FUSE handlers (`crate::fs`) and the
//! change feed (`crate::changes`) fill and consult. What this part must not do: send
//! anything to the server or talk to the kernel. Every answer it gives is exact for a
//! stated reason, written in the doc of the module that keeps it.

pub(crate) mod cache;
pub(crate) mod handle;
pub(crate) mod idle;
pub(crate) mod inode;
pub(crate) mod listed_attrs;
pub(crate) mod missing_xattrs;
pub(crate) mod replica;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cache::RecentLookups;
use handle::HandleTable;
use idle::IdleOpens;
use inode::InodeTable;
use listed_attrs::ListedAttrs;
use missing_xattrs::MissingXattrs;
use replica::DirReplicas;

/// What the mount knows of the server's files, shared by the FUSE handlers and the change
/// feed (which holds it apart from the rest of the mount's state).
pub(crate) struct Known {
    pub inodes: InodeTable,
    pub handles: HandleTable,
    /// Whole directories with their entries' attributes, while events are followed.
    pub replicas: DirReplicas,
    /// Whether attributes fetched earlier may answer a READDIRPLUS again.
    pub listed: Arc<ListedAttrs>,
    /// Extended attributes known to be missing, while events are followed.
    pub missing_xattrs: MissingXattrs,
    /// Read-only open fids of closed files, for the next open of the same file.
    pub idle: IdleOpens,
    /// `never` mode: each thread's latest LOOKUP, for the GETATTR that follows it.
    pub recent: RecentLookups,
    /// The mount lost track of names the kernel may hold (its name table overflowed):
    /// from then on the kernel gets the cache mode's timeouts, never the long ones that
    /// following events allows.
    pub untracked: AtomicBool,
}

impl Known {
    /// What a new mount knows: its root, and at most `replica_entries` entries in
    /// directory replicas.
    pub(crate) fn new(inodes: InodeTable, replica_entries: usize) -> Self {
        Known {
            inodes,
            handles: HandleTable::default(),
            replicas: DirReplicas::new(replica_entries),
            listed: Arc::default(),
            missing_xattrs: MissingXattrs::default(),
            idle: IdleOpens::default(),
            recent: RecentLookups::default(),
            untracked: AtomicBool::new(false),
        }
    }
}
