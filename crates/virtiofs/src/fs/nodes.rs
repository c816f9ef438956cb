//! The guest's node ids: the root is 1; every other id stands for one inode (keyed by
//! device and inode number) and holds its handle (whose `O_PATH` descriptor is the export's
//! handle cache's to keep or close) until the guest forgets it as many times as it was
//! looked up (LOOKUP, CREATE, TMPFILE, MKNOD, MKDIR, SYMLINK, LINK and each READDIRPLUS
//! entry count one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crossfs_export::handles::PathHandle;
use crossfs_export::{lock, ExportError, ExportResult, Statx};
use rustix::io::Errno;

use crate::fuse;

/// One inode the guest knows.
struct Node {
    handle: Arc<PathHandle>,
    key: (u64, u64),
    refs: u64,
}

#[derive(Default)]
struct Nodes {
    map: HashMap<u64, Node>,
    by_key: HashMap<(u64, u64), u64>,
    next: u64,
}

/// The node ids one guest holds.
pub(super) struct NodeTable {
    nodes: Mutex<Nodes>,
}

impl NodeTable {
    /// A table holding the root (`root`, the export's own handle) as node 1.
    pub(super) fn new(root: Arc<PathHandle>) -> NodeTable {
        let mut nodes = Nodes {
            next: fuse::ROOT_ID + 1,
            ..Nodes::default()
        };
        let key = root.key();
        nodes.by_key.insert(key, fuse::ROOT_ID);
        nodes.map.insert(
            fuse::ROOT_ID,
            Node {
                handle: root,
                key,
                refs: 1,
            },
        );
        NodeTable {
            nodes: Mutex::new(nodes),
        }
    }

    /// Node ids held (the root included).
    pub(super) fn len(&self) -> usize {
        lock(&self.nodes).map.len()
    }

    /// The handle behind node `id`; `ESTALE` for an id the guest does not hold.
    pub(super) fn get(&self, id: u64) -> ExportResult<Arc<PathHandle>> {
        lock(&self.nodes)
            .map
            .get(&id)
            .map(|n| n.handle.clone())
            .ok_or(ExportError::Os(Errno::STALE))
    }

    /// Gives the guest a node id for the inode `handle` names (one more lookup of it); a
    /// node it already holds keeps its handle, unless that one was made without a name (a
    /// tmpfile, linked since): the named one can be walked to again if the export's cache
    /// closes its descriptor.
    pub(super) fn remember(&self, handle: Arc<PathHandle>, st: &Statx) -> u64 {
        let key = key_of(st);
        let mut nodes = lock(&self.nodes);
        if let Some(&id) = nodes.by_key.get(&key) {
            if let Some(node) = nodes.map.get_mut(&id) {
                node.refs += 1;
                if node.handle.is_anonymous() && !handle.is_anonymous() {
                    node.handle = handle;
                }
                return id;
            }
        }
        let id = nodes.next;
        nodes.next += 1;
        nodes.by_key.insert(key, id);
        nodes.map.insert(
            id,
            Node {
                handle,
                key,
                refs: 1,
            },
        );
        id
    }

    /// The guest forgot `id` `nlookup` times; at none left, its handle is dropped.
    pub(super) fn forget(&self, id: u64, nlookup: u64) {
        if id == fuse::ROOT_ID {
            return;
        }
        let mut nodes = lock(&self.nodes);
        let Some(node) = nodes.map.get_mut(&id) else {
            return;
        };
        node.refs = node.refs.saturating_sub(nlookup);
        if node.refs == 0 {
            let key = node.key;
            nodes.map.remove(&id);
            if nodes.by_key.get(&key) == Some(&id) {
                nodes.by_key.remove(&key);
            }
        }
    }

    /// Every node but the root is forgotten (the guest unmounted).
    pub(super) fn forget_all(&self) {
        let mut nodes = lock(&self.nodes);
        nodes.map.retain(|&id, _| id == fuse::ROOT_ID);
        let root_key = nodes.map.get(&fuse::ROOT_ID).map(|n| n.key);
        nodes.by_key.retain(|k, _| Some(*k) == root_key);
    }
}

fn key_of(st: &Statx) -> (u64, u64) {
    (
        rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
        st.stx_ino,
    )
}
