//! Binding the mount's fids again after the client reconnected to a restarted server.
//!
//! The client keeps fid numbers across a reconnect (see
//! [`crossfs_client::Client::on_reconnect`]); the new server knows none of them. This hook
//! runs after the export root was attached again (by whoever set up the connection) and
//! before any FUSE request may use the new connection:
//!
//! 1. Nodes: each known name is walked from its directory's fid to the node's fid number,
//!    level by level from the root (the inode table's names are the paths). A walk that
//!    reaches another file than the node had (`qid.path` differs: the name was replaced
//!    while the server was down) is clunked again. Nodes left unbound answer ESTALE until a
//!    lookup finds their file again; for path-based calls the kernel retries the walk with
//!    revalidation on ESTALE, so most callers never see it.
//! 2. Open files: each open fid is walked from its node's fid and opened with the flags it
//!    was opened with (never create, exclusive or truncate again). One that cannot be
//!    opened again answers ESTALE, as an NFS file handle would.
//! 3. Fids of changes sent behind and not answered (`crate::behind`), which a change holds
//!    past its file's close: walked from the node, and opened for writing for a write.
//!    A node whose name a removal sent behind took is walked through that name while
//!    the removal is unanswered (the server has the name until it is made).
//!
//! First it waits for the old connection's requests to settle (`crate::behind`), so that
//! what it binds does not move under it.
//!
//! What cannot come back: files unlinked while open (there is no name to walk), and POSIX
//! locks (the server that held them is gone; a warning says so). Requests that were in flight
//! when the connection died failed with EIO; the client cannot know if the server did them.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;

use crossfs_client::{Client, ClientError};
use crossfs_wire::{Fid, Rmessage, Tlopen, Tmessage, Twalk};

use crate::fs::MountState;
use crate::known::inode::{NodeFids, ROOT};

/// Requests sent together per round trip (well under the client's tags).
const BATCH: usize = 64;

/// Binds every node and open file of `shared` again on `client`'s new connection.
///
/// # Errors
/// Only a lost connection ([`ClientError::Disconnected`]), so that the client dials again;
/// a file that cannot be bound again is logged and left unbound.
pub(crate) fn restore(shared: &MountState, client: &Client) -> Result<(), ClientError> {
    // A create the old connection answered changes its node's `qid.path`: taken in first.
    shared.behind.settle_lost_connection();
    // The files may have changed while the server was away.
    shared.known.listed.all_changed();
    // Idle open fids are not in the handle table: not worth reopening.
    shared.known.idle.clear();
    let (mut nodes, mut lazy, mut names) = shared.known.inodes.snapshot();
    // Names removed behind and not answered: the server has them until the removal,
    // sent again after this hook, is made.
    names.extend(shared.behind.pending_removals());
    // Files created behind and not made yet: their create, sent again after this hook
    // (`crate::behind`), binds their fids.
    let unmade = shared.behind.creating_nodes();
    nodes.retain(|ino, _| !unmade.contains(ino));
    lazy.retain(|(ino, _)| !unmade.contains(ino));
    names.retain(|(_, _, ino)| !unmade.contains(ino));
    // Nodes answered from a replica have no fid yet; a directory among them may hold
    // bound nodes, and an open file may be one. Each gets a fid now if its name leads
    // to it; the others stay without one (walked when next needed).
    for &(ino, qid_path) in &lazy {
        nodes.insert(ino, (client.alloc_fid(), qid_path));
    }
    let bound = rebind_nodes(client, &nodes, &names)?;
    for (ino, _) in lazy {
        let fid = nodes[&ino].0;
        if bound.contains_key(&ino) {
            shared
                .known
                .inodes
                .bind(ino, crate::fid::FidRef::new(&shared.client, fid));
        } else {
            client.free_fid(fid);
        }
    }
    // A node bound after the snapshot (a lookup racing with the restore) is bound on the
    // old connection only: stale like the rest, until looked up again.
    shared.known.inodes.mark_stale_except(&bound, &unmade);
    let files = shared.known.handles.all();
    let mut reopen = Vec::new();
    let mut locks_lost = 0;
    for file in &files {
        if !crate::sync::lock(&file.lock_owners).is_empty() {
            locks_lost += 1;
        }
        match (bound.get(&file.reopen.node), file.fid()) {
            // Its create, sent again, opens it.
            _ if unmade.contains(&file.reopen.node) => {}
            // It lists through its node's fid, bound again above.
            (Some(_), _) if file.listing_only => {}
            // A deferred open: its first read opens it through the node, as bound now.
            (_, None) => {}
            (Some(&(node_fid, _)), Some(fid)) => {
                reopen.push((node_fid, fid.fid(), Some(file.reopen.flags)))
            }
            (None, Some(_)) => file.stale.store(true, Relaxed),
        }
    }
    let reopened = reopen_files(client, &reopen)?;
    // Changes sent behind hold their fids past their files' close until answered: those
    // still to be answered (or sent again) need theirs, walked from the node (and opened
    // for writing, for a write).
    let node_fids: HashSet<Fid> = bound.values().map(|&(fid, _)| fid).collect();
    let mut held: HashMap<Fid, (Fid, Option<u32>)> = HashMap::new();
    for (ino, fid, write) in shared.behind.pending_fids() {
        if unmade.contains(&ino) || node_fids.contains(&fid) || reopened.contains(&fid) {
            continue;
        }
        if let Some(&(node_fid, _)) = bound.get(&ino) {
            let h = held.entry(fid).or_insert((node_fid, None));
            if write {
                h.1 = Some(crossfs_wire::open_flags::WRONLY);
            }
        }
    }
    let held: Vec<_> = held
        .into_iter()
        .map(|(fid, (node, flags))| (node, fid, flags))
        .collect();
    let held = reopen_files(client, &held)?.len();
    for file in &files {
        let lost = file.fid().is_some_and(|f| !reopened.contains(&f.fid()))
            && !unmade.contains(&file.reopen.node);
        if !file.listing_only && lost {
            file.stale.store(true, Relaxed);
        }
    }
    if locks_lost > 0 {
        tracing::warn!(
            "{locks_lost} open files held POSIX locks; the restarted server does not have them"
        );
    }
    tracing::info!(
        nodes = format!("{}/{}", bound.len(), nodes.len()),
        open_files = format!("{}/{}", reopened.len(), files.len()),
        held_by_changes = held,
        "bound the mount's files again after reconnecting"
    );
    Ok(())
}

/// Walks every node reachable through known names to its fid number again. Returns the nodes
/// bound (the root included), with their fid and `qid.path`.
fn rebind_nodes(
    client: &Client,
    nodes: &NodeFids,
    names: &[(u64, Vec<u8>, u64)],
) -> Result<NodeFids, ClientError> {
    let mut bound = HashMap::new();
    if let Some(&root) = nodes.get(&ROOT) {
        bound.insert(ROOT, root);
    }
    let mut tried = vec![false; names.len()];
    loop {
        // One name per unbound node whose directory is bound: a level of the tree.
        let mut claimed = HashSet::new();
        let round: Vec<usize> = (0..names.len())
            .filter(|&i| {
                let (dir, _, ino) = &names[i];
                !tried[i]
                    && bound.contains_key(dir)
                    && !bound.contains_key(ino)
                    && claimed.insert(*ino)
            })
            .collect();
        if round.is_empty() {
            return Ok(bound);
        }
        for chunk in round.chunks(BATCH) {
            let msgs = chunk
                .iter()
                .map(|&i| {
                    tried[i] = true;
                    let (dir, name, ino) = &names[i];
                    Tmessage::Walk(Twalk {
                        fid: bound[dir].0,
                        newfid: nodes[ino].0,
                        wnames: vec![name.clone()],
                    })
                })
                .collect();
            for (&i, reply) in chunk.iter().zip(client.call_all(msgs)) {
                let ino = names[i].2;
                let (fid, qid_path) = nodes[&ino];
                match reply {
                    Ok(Rmessage::Walk(w)) if w.wqids.len() == 1 => {
                        if w.wqids[0].path == qid_path {
                            bound.insert(ino, (fid, qid_path));
                        } else {
                            // Another file has the name now: not this node.
                            unbind(client, fid)?;
                        }
                    }
                    Err(e @ ClientError::Disconnected(_)) => return Err(e),
                    // Gone, or a partial walk (which binds nothing).
                    _ => {}
                }
            }
        }
    }
}

/// Opens each `(node fid, open fid, flags)` again (only walks it, without flags); returns
/// the fids bound.
fn reopen_files(
    client: &Client,
    files: &[(Fid, Fid, Option<u32>)],
) -> Result<HashSet<Fid>, ClientError> {
    let mut opened = HashSet::new();
    for chunk in files.chunks(BATCH) {
        let walks = chunk
            .iter()
            .map(|&(node, fid, _)| {
                Tmessage::Walk(Twalk {
                    fid: node,
                    newfid: fid,
                    wnames: Vec::new(),
                })
            })
            .collect();
        let mut walked = Vec::new();
        for (&(_, fid, flags), reply) in chunk.iter().zip(client.call_all(walks)) {
            match (reply, flags) {
                (Ok(_), Some(flags)) => walked.push((fid, flags)),
                (Ok(_), None) => {
                    opened.insert(fid);
                }
                (Err(e @ ClientError::Disconnected(_)), _) => return Err(e),
                (Err(_), _) => {}
            }
        }
        // Sent after the walks are answered: 9P does not order a connection's requests.
        let opens = walked
            .iter()
            .map(|&(fid, flags)| Tmessage::Lopen(Tlopen { fid, flags }))
            .collect();
        for (&(fid, _), reply) in walked.iter().zip(client.call_all(opens)) {
            match reply {
                Ok(_) => {
                    opened.insert(fid);
                }
                Err(e @ ClientError::Disconnected(_)) => return Err(e),
                Err(e) => {
                    tracing::info!("cannot reopen an open file after reconnecting: {e}");
                    unbind(client, fid)?;
                }
            }
        }
    }
    Ok(opened)
}

/// Clunks a fid bound by mistake, keeping its number with its owner.
fn unbind(client: &Client, fid: Fid) -> Result<(), ClientError> {
    match client.unbind_fid(fid) {
        Err(e @ ClientError::Disconnected(_)) => Err(e),
        _ => Ok(()),
    }
}
