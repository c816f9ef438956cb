//! Changes sent behind (`--changes behind`): a setattr, a small write or a create the
//! mount can answer exactly from what it holds is answered at once, and sent to the
//! server after.
//!
//! The contract (also in the README and docs/changes-behind.md):
//! - **Order.** A change sent behind is written to the connection before the mount
//!   answers it, and the server runs these requests (Tsetattrbehind, Twritebehind of at
//!   most [`crossfs_wire::INLINE_WRITE_MAX`] bytes, Tcreatebehind; Tsetattrget and
//!   Twriteattr to a server without `CONDITIONAL_BEHIND`) on the connection's reader, in
//!   the order they arrive (Tunlinkbehind too), before it reads the next request: every later request of this
//!   mount, sent behind or not, finds them done.
//! - **Conflicts.** A setattr or write of a regular file is made only onto the file as the
//!   mount saw it ([`crossfs_wire::BehindBase`]); where a host program changed it first,
//!   the server keeps the change in a copy beside it, and the mount reports it as a
//!   refusal with [`KEPT_BESIDE`] (docs/changes-behind.md, "Conflicts").
//! - **What goes behind.** Only what the server will accept, as far as the mount can tell:
//!   the node's attributes are known exactly (fetched and unchanged since, or a change
//!   sent behind predicted them), the kernel has checked permissions against them
//!   (`default_permissions`), and the change keeps set-user-ID and set-group-ID bits out of
//!   it (which the host's kernel may strip) and ownership as it is (which the host's
//!   kernel may refuse). A create or a mkdir goes behind where the directory's replica
//!   shows the name missing (`crate::fs::create_behind`), a removal of a file where it
//!   shows the file (`crate::fs::unlink_behind`). Everything else, and every other
//!   change of names, waits for the server as in the exact mode.
//! - **What the guest sees.** The attributes the change will leave, predicted, given to
//!   the kernel to keep until the server has answered, when the kernel is told to drop
//!   them ([`ChangesBehind::tell_kernel`]); after, the server's own, so that after
//!   `crossfs sync` a stat shows exactly what the host has.
//! - **Errors.** A change the server refuses is logged, counted (`crossfs stats`), and
//!   its errno is returned once, by the next fsync of that file or (where the kernel
//!   sends FLUSH: `--send-opens`) the next close of it by the process that made the
//!   change, whichever comes first, as the page cache returns a failed write-back; the
//!   next `crossfs sync` fails with EIO too. The kernel
//!   then drops its attributes and pages of the file and asks the server: the mount
//!   shows what the host has.
//! - **Waiting.** fsync, `crossfs sync` and unmount return once every change sent behind
//!   before them is answered.
//! - **Memory.** At most [`BYTES_LIMIT`] bytes of changes are unanswered at once (and no
//!   more requests than the connection has tags); past it, a change waits for room.
//! - **Faults.** A change whose connection was lost is sent again, in order, on the new
//!   connection before anything else (setattrs and writes at an offset do the same thing
//!   twice; a create is marked, `Tcreatebehindmarked`, and a mkdir too, so that sent
//!   again it finds the file or directory an earlier try made). One the mount cannot
//!   tell the fate of otherwise (lost again, or lost by a mount that does not reconnect)
//!   counts as refused with EIO.
//!
//! What this must not do: decide what the kernel is told (the FUSE side does), or send
//! anything but the changes handed to it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crossfs_client::{Client, ClientError};
use crossfs_wire::{Fid, Rgetattr, Rmessage, Tmessage};
use serde_json::{json, Value};

use crate::sync::lock;

/// Bytes of changes sent behind and not yet answered, at most (a write counts its data).
pub(crate) const BYTES_LIMIT: usize = 16 << 20;

/// What a change costs against [`BYTES_LIMIT`] besides its data.
const OVERHEAD: usize = 128;

/// Why [`ChangesBehind::wait_answered`] returned before the answers came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotAnswered {
    TimedOut,
    /// The caller (the process behind a FUSE request) got a signal.
    Interrupted,
}

/// One change sent and not answered.
struct Unanswered {
    ino: u64,
    /// Another node the change predicts attributes of: a create's directory.
    also: Option<u64>,
    /// See [`Change::removes`].
    removes: Option<(u64, Vec<u8>)>,
    /// The process that made the change.
    process: u32,
    msg: Tmessage,
    bytes: usize,
    sent: Instant,
    /// Written to a connection (the call returned): an answer or a loss will come.
    submitted: bool,
    on_answer: OnAnswer,
}

#[derive(Default)]
struct Queue {
    next_seq: u64,
    /// Sent, in order, not yet answered.
    unanswered: BTreeMap<u64, Unanswered>,
    /// Lost with their connection: sent again first on the next one.
    lost: BTreeMap<u64, Unanswered>,
    bytes: usize,
    /// ino -> the attributes the newest unanswered change predicts, and its sequence.
    predicted: HashMap<u64, (u64, Rgetattr)>,
    /// ino -> its unanswered create or mkdir (a node the server has not made yet).
    creating: HashMap<u64, Making>,
    /// ino -> the errno of a refused change and the process that made it, until an
    /// fsync, or a close by that process, reports it.
    refused: HashMap<u64, (i32, u32)>,
    /// Thread -> its process, for the threads that made changes lately (FUSE names the
    /// thread; a close is told of its process's refused changes).
    processes: HashMap<u32, u32>,
    /// Refused since the last `crossfs sync` reported them.
    refused_unsynced: u64,
    /// Work after a refusal still under way (see [`ChangesBehind::hold`]).
    holds: usize,
    /// The copies the server kept changes in (node, name), logged and counted once.
    kept: std::collections::HashSet<(u64, Vec<u8>)>,
}

/// A node created behind that the server has not made yet.
struct Making {
    /// The sequence of its create or mkdir.
    seq: u64,
    /// Whether that is answered (the server has the node; its fids are bound).
    made: bool,
    /// The sequence of the last change that is part of making it: the create, or the
    /// chown that gives it away after ([`ChangesBehind::send_making`]).
    until: u64,
    /// The thread that created a file, until its first GETATTR (see
    /// [`ChangesBehind::wait_made`]).
    opener: Option<u32>,
}

/// Counters for `crossfs stats`.
#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    answered: AtomicU64,
    refused: AtomicU64,
    resent: AtomicU64,
    waited_for_room: AtomicU64,
    /// Creates the server made beside a name a host program took first, and files a host
    /// program changed first, whose guest's changes the server kept in a copy beside them.
    conflicts: AtomicU64,
}

/// The changes this mount sent behind and has not yet seen answered (see the module doc).
#[derive(Default)]
pub(crate) struct ChangesBehind {
    queue: Mutex<Queue>,
    /// Signalled whenever a change is answered or lost.
    answered: Condvar,
    counters: Counters,
    /// From the mount's answer to the server's, by request type: how long the host took
    /// to see each change (a resent one counts from its first sending).
    to_host: crossfs_wire::LatencyHistograms,
    /// Tells the kernel to drop a node's attributes once no prediction of them is left:
    /// the kernel keeps a prediction it was given as long as any other attributes, and
    /// must then ask for the server's.
    kernel: std::sync::OnceLock<crate::session::Notifier>,
}

/// What the server answered to a change sent behind.
pub(crate) struct Answered {
    /// The node's attributes after the change (`valid` 0: not said).
    pub attrs: Rgetattr,
    /// For a create: the name the file was made under (the one asked for, or a conflict
    /// name beside it).
    pub made_as: Option<Vec<u8>>,
    /// For a create, a removal or a rename: the directory's attributes after it.
    pub dir: Option<Rgetattr>,
}

/// What the mount does once a change sent behind is answered: update what it knows of
/// the node from the server's answer (`Ok`), or forget it (`Err`).
pub(crate) type OnAnswer = Box<dyn FnOnce(Result<&Answered, i32>) + Send>;

/// A change to send behind: the node it changes, the thread that made it, the message,
/// and the attributes it leaves the node with.
pub(crate) struct Change {
    pub ino: u64,
    pub pid: u32,
    pub msg: Tmessage,
    /// `None` where the mount cannot tell them (a rename of a file whose attributes it
    /// does not know exactly): the node's attributes are then asked of the server, which
    /// answers after the change.
    pub predicted: Option<Rgetattr>,
    /// Another node's attributes the change predicts: a create's directory.
    pub also: Option<(u64, Rgetattr)>,
    /// The name a removal or a rename takes from the node (its directory's node, the
    /// name): until the change is answered the server still has it, and a reconnect binds
    /// the node through it.
    pub removes: Option<(u64, Vec<u8>)>,
}

impl ChangesBehind {
    /// Has the kernel drop the attributes of each node whose predictions have all been
    /// answered, so that it asks for the server's (see [`ChangesBehind::predicted`]).
    pub(crate) fn tell_kernel(&self, notifier: crate::session::Notifier) {
        let _ = self.kernel.set(notifier);
    }

    /// The attributes the newest unanswered change of `ino` predicts. The kernel may keep
    /// them for its usual attribute timeout: once they are answered (or refused), it is
    /// told to drop them ([`ChangesBehind::tell_kernel`]).
    pub(crate) fn predicted(&self, ino: u64) -> Option<Rgetattr> {
        lock(&self.queue)
            .predicted
            .get(&ino)
            .map(|(_, a)| a.clone())
    }

    /// Whether node `ino` is a file created behind that the server has not made yet
    /// (as far as the mount knows: its create is unanswered).
    pub(crate) fn is_creating(&self, ino: u64) -> bool {
        lock(&self.queue)
            .creating
            .get(&ino)
            .is_some_and(|m| !m.made)
    }

    /// Whether node `ino` was created behind and its stats still wait
    /// ([`Self::wait_made`]): its create, or a change that is part of making it, is
    /// unanswered.
    pub(crate) fn is_being_made(&self, ino: u64) -> bool {
        lock(&self.queue).creating.contains_key(&ino)
    }

    /// Waits until node `ino`, if created behind, is made (its create or mkdir answered,
    /// or refused, and the chown giving it to its creator if one was sent): its attributes
    /// are then the server's, change time included. Except for the first GETATTR from
    /// thread `pid` that created a file: the kernel's permission
    /// check as it opens the file it just created, which the prediction answers (a stat
    /// after it waits). A directory has no such exception: the kernel's GETATTR as a path
    /// is walked through it cannot be told from a stat's.
    pub(crate) fn wait_made(&self, ino: u64, pid: u32) -> Result<(), NotAnswered> {
        let mut q = lock(&self.queue);
        if let Some(m) = q.creating.get_mut(&ino) {
            if m.opener == Some(pid) {
                m.opener = None;
                return Ok(());
            }
        }
        if q.creating.contains_key(&ino) {
            crossfs_client::before_wait();
        }
        while q.creating.contains_key(&ino) {
            if crossfs_client::caller_gave_up() {
                return Err(NotAnswered::Interrupted);
            }
            q = self
                .answered
                .wait_timeout(q, crossfs_client::GIVE_UP_POLL)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        Ok(())
    }

    /// Whether a change of node `ino` is unanswered (sent, or lost and to be sent again).
    pub(crate) fn has_pending(&self, ino: u64) -> bool {
        let q = lock(&self.queue);
        q.unanswered
            .values()
            .chain(q.lost.values())
            .any(|c| c.ino == ino)
    }

    /// The nodes created behind that the server has not made yet.
    pub(crate) fn creating_nodes(&self) -> std::collections::HashSet<u64> {
        let q = lock(&self.queue);
        let unmade = q.creating.iter().filter(|(_, m)| !m.made);
        unmade.map(|(&ino, _)| ino).collect()
    }

    /// Sends `change` (a Tsetattrbehind or Tsetattrget, a Twritebehind or Twriteattr of at
    /// most [`crossfs_wire::INLINE_WRITE_MAX`] bytes, or a Tcreatebehind); `on_answer` runs
    /// on the thread reading replies. Waits while [`BYTES_LIMIT`] bytes are unanswered.
    pub(crate) fn send(
        self: &std::sync::Arc<Self>,
        client: &Client,
        change: Change,
        on_answer: OnAnswer,
    ) {
        self.enqueue(client, change, on_answer, false);
    }

    /// [`Self::send`] of a change that is part of making its node (the chown that gives a
    /// file created behind to its creator): the node is made once it is answered too, so
    /// that no stat sees its change time move ([`Self::wait_made`]).
    pub(crate) fn send_making(
        self: &std::sync::Arc<Self>,
        client: &Client,
        change: Change,
        on_answer: OnAnswer,
    ) {
        self.enqueue(client, change, on_answer, true);
    }

    fn enqueue(
        self: &std::sync::Arc<Self>,
        client: &Client,
        change: Change,
        on_answer: OnAnswer,
        making: bool,
    ) {
        let Change {
            ino,
            pid,
            msg,
            predicted,
            also,
            removes,
        } = change;
        let bytes = OVERHEAD + written(&msg);
        let seq = {
            let mut q = lock(&self.queue);
            if q.bytes + bytes > BYTES_LIMIT && !q.unanswered.is_empty() {
                self.counters.waited_for_room.fetch_add(1, Relaxed);
                crossfs_client::before_wait();
                while q.bytes + bytes > BYTES_LIMIT && !q.unanswered.is_empty() {
                    q = self
                        .answered
                        .wait(q)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
            let seq = q.next_seq;
            q.next_seq += 1;
            let process = q.process_of(pid);
            q.bytes += bytes;
            if let Some(predicted) = predicted {
                q.predicted.insert(ino, (seq, predicted));
            }
            if let Some((other, a)) = &also {
                q.predicted.insert(*other, (seq, a.clone()));
            }
            if made_name(&msg).is_some() {
                let opener = (!matches!(msg, Tmessage::Mkdirbehind(_))).then_some(pid);
                let (made, until) = (false, seq);
                q.creating.insert(
                    ino,
                    Making {
                        seq,
                        made,
                        until,
                        opener,
                    },
                );
            } else if let Some(m) = q.creating.get_mut(&ino).filter(|_| making) {
                m.until = seq;
            }
            q.unanswered.insert(
                seq,
                Unanswered {
                    ino,
                    also: also.map(|(other, _)| other),
                    removes,
                    process,
                    msg: msg.clone(),
                    bytes,
                    sent: Instant::now(),
                    submitted: false,
                    on_answer,
                },
            );
            seq
        };
        self.counters.sent.fetch_add(1, Relaxed);
        let this = self.clone();
        let redials = client.reconnects_enabled();
        // The change is the mount's now, not its caller's: a caller that gives up while
        // the connection is being replaced must not take the change with it (it would be
        // refused with EINTR, never sent); it waits for the new connection, as long as
        // `--reconnect-wait` allows, as the changes sent before it do.
        let caller = crossfs_client::give_up_now();
        crossfs_client::give_up_when(None);
        client.call_async(msg, Box::new(move |r| this.answer(seq, r, redials)));
        crossfs_client::give_up_when(caller);
        if let Some(change) = lock(&self.queue).unanswered.get_mut(&seq) {
            change.submitted = true;
        }
    }

    /// Records the server's answer to change `seq`; `redials`: whether a lost connection
    /// is replaced (else a change it lost is refused with EIO at once).
    fn answer(&self, seq: u64, r: Result<Rmessage, ClientError>, redials: bool) {
        let mut q = lock(&self.queue);
        let Some(change) = q.unanswered.remove(&seq) else {
            return;
        };
        if let (Err(ClientError::Disconnected(why)), true) = (&r, redials) {
            // Sent again by `resend_lost`, first on the next connection.
            tracing::debug!(seq, "a change sent behind lost its connection ({why})");
            q.lost.insert(seq, change);
            drop(q);
            self.answered.notify_all();
            return;
        }
        let attrs = attrs_after(&change.msg, r);
        self.settle(q, seq, change, attrs);
    }

    /// A change the server kept beside the file (a host program changed it first): the
    /// copy logged and counted once (the changes after it go there too), and the change
    /// refused as far as the file is concerned.
    fn kept_beside(&self, q: &mut Queue, change: &Unanswered, kept_as: Vec<u8>) -> i32 {
        if q.kept.len() >= PROCESSES_KEPT {
            q.kept.clear();
        }
        let name = String::from_utf8_lossy(&kept_as).into_owned();
        if q.kept.insert((change.ino, kept_as)) {
            self.counters.conflicts.fetch_add(1, Relaxed);
            tracing::warn!(
                node = change.ino,
                "a host program changed the file first: the guest's changes are kept beside it as '{name}'"
            );
        }
        KEPT_BESIDE
    }

    /// Ends change `seq` with the server's attributes after it, or its errno.
    fn settle(
        &self,
        mut q: std::sync::MutexGuard<'_, Queue>,
        seq: u64,
        change: Unanswered,
        attrs: Result<Answered, Refusal>,
    ) {
        let attrs = attrs.map_err(|r| match r {
            Refusal::Errno(errno) => errno,
            Refusal::KeptBeside(name) => self.kept_beside(&mut q, &change, name),
        });
        q.bytes -= change.bytes;
        self.to_host
            .record(change.msg.msg_type(), change.sent.elapsed());
        match &attrs {
            Ok(a) => {
                self.counters.answered.fetch_add(1, Relaxed);
                if let (Some(made), Some(name)) = (&a.made_as, made_name(&change.msg)) {
                    if made != name {
                        self.counters.conflicts.fetch_add(1, Relaxed);
                        tracing::warn!(
                            node = change.ino,
                            "a host program made '{}' first: the guest's file is kept beside it as '{}'",
                            String::from_utf8_lossy(name),
                            String::from_utf8_lossy(made)
                        );
                    }
                }
            }
            Err(errno) => self.refused(&mut q, &change, *errno),
        }
        // Before anyone waiting learns of it: what the mount does with the answer is part
        // of it.
        q.holds += 1;
        drop(q);
        let (ino, also) = (change.ino, change.also);
        (change.on_answer)(attrs.as_ref().map_err(|e| *e));
        // The prediction answers until the mount has taken in the server's answer: a
        // directory replica, say, still shows the file as it was until then.
        let mut q = lock(&self.queue);
        let mut settled = Vec::new();
        for node in std::iter::once(ino).chain(also) {
            if q.predicted.get(&node).is_some_and(|(s, _)| *s == seq) {
                q.predicted.remove(&node);
                settled.push(node);
            }
        }
        if let Some(m) = q.creating.get_mut(&ino) {
            if m.until == seq {
                q.creating.remove(&ino);
            } else if m.seq == seq {
                m.made = true;
            }
        }
        drop(q);
        // Before anyone waiting (a sync) goes on: the kernel then shows the server's.
        // A reply carrying the prediction sent meanwhile is older than this, and the
        // kernel takes nothing from it (its attribute version moved).
        if let Some(kernel) = self.kernel.get() {
            for node in settled {
                // ENOENT: the kernel holds no such inode, nothing to drop.
                let _ = kernel.inval_inode(crate::session::INodeNo(node), -1, 0);
            }
        }
        lock(&self.queue).holds -= 1;
        self.answered.notify_all();
    }

    /// Keeps waiters waiting until the returned guard is dropped: for work that follows an
    /// answer (dropping the kernel's pages after a refusal, on a thread of its own).
    pub(crate) fn hold(self: &std::sync::Arc<Self>) -> Hold {
        lock(&self.queue).holds += 1;
        Hold(self.clone())
    }

    fn release(&self) {
        lock(&self.queue).holds -= 1;
        self.answered.notify_all();
    }

    fn refused(&self, q: &mut Queue, change: &Unanswered, errno: i32) {
        self.counters.refused.fetch_add(1, Relaxed);
        q.refused_unsynced += 1;
        q.refused
            .entry(change.ino)
            .or_insert((errno, change.process));
        // Nothing predicted of the node holds any more: the server says what it has.
        q.predicted.remove(&change.ino);
        tracing::warn!(
            node = change.ino,
            request = crossfs_wire::message_name(change.msg.msg_type()).unwrap_or("?"),
            "the server refused a change sent behind: {}",
            std::io::Error::from_raw_os_error(errno)
        );
    }

    /// Waits (a moment at most) until every change written to the lost connection is
    /// answered and taken in, or lost: what the reconnect hooks look at (the nodes not made
    /// yet, the changes to send again) must not move under them. A change still being sent
    /// waits for the hooks to end (sent after the lost ones, as it came after them); one
    /// sent on the old connection fails as it dies, and the answers that connection read
    /// before are taken in by its reader meanwhile.
    pub(crate) fn settle_lost_connection(&self) {
        drop(self.settled());
    }

    /// [`Self::settle_lost_connection`], keeping the queue locked.
    fn settled(&self) -> std::sync::MutexGuard<'_, Queue> {
        let deadline = Instant::now() + Duration::from_secs(2);
        // What this thread holds unwritten would never be answered.
        crossfs_client::before_wait();
        let mut q = lock(&self.queue);
        while (q.holds > 0 || q.unanswered.values().any(|c| c.submitted))
            && Instant::now() < deadline
        {
            q = self
                .answered
                .wait_timeout(q, Duration::from_millis(20))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        q
    }

    /// The fids of the changes not yet answered, each with its node and whether it must be
    /// open for writing (a write's): a change holds its fid until the server has used it,
    /// past its file's close, so a reconnect binds these again with the open files.
    pub(crate) fn pending_fids(&self) -> Vec<(u64, Fid, bool)> {
        let q = lock(&self.queue);
        let fid_of = |c: &Unanswered| match &c.msg {
            Tmessage::Writebehind(w) => Some((c.ino, w.fid, true)),
            Tmessage::Writeattr(w) => Some((c.ino, w.fid, true)),
            Tmessage::Setattrbehind(s) => Some((c.ino, s.set.fid, false)),
            Tmessage::Setattrget(s) => Some((c.ino, s.set.fid, false)),
            _ => None,
        };
        q.unanswered
            .values()
            .chain(q.lost.values())
            .filter_map(fid_of)
            .collect()
    }

    /// The names removed by changes not yet answered (sent, or lost and to be sent
    /// again), as `(directory node, name, node)`: the server still has them, and a
    /// reconnect binds the nodes through them.
    pub(crate) fn pending_removals(&self) -> Vec<(u64, Vec<u8>, u64)> {
        let q = lock(&self.queue);
        q.unanswered
            .values()
            .chain(q.lost.values())
            .filter_map(|c| c.removes.clone().map(|(dir, name)| (dir, name, c.ino)))
            .collect()
    }

    /// Sends again, in order and before anything else, the changes lost with the last
    /// connection: run by the client's reconnect hook, which alone may use the new
    /// connection. First waits (a moment) for the old connection's requests to fail.
    pub(crate) fn resend_lost(&self, client: &Client) -> Result<(), ClientError> {
        let mut q = self.settled();
        let lost = std::mem::take(&mut q.lost);
        drop(q);
        // Nodes a lost change removes: if the lost connection made that removal, the
        // node could not be bound again, and the changes of it before the removal find
        // no fid; the guest removed the file after them, so they are done with it.
        let removed: std::collections::HashSet<u64> = lost
            .values()
            .filter(|c| matches!(c.msg, Tmessage::Unlinkbehind(_) | Tmessage::Rmdirbehind(_)))
            .map(|c| c.ino)
            .collect();
        for (seq, change) in lost {
            self.counters.resent.fetch_add(1, Relaxed);
            // Lost again, this connection is gone too: refused rather than kept hanging.
            // Sent as it was, unless its base was the old connection's: whether the lost
            // change was made cannot be told (a server killed after making it and before
            // answering), so a change is made again as it stands, as it was before changes
            // were made only onto the file the mount saw.
            let msg = unconditional(&change.msg);
            let mut attrs = attrs_after(&msg, client.call(msg.clone()));
            // A removal the lost connection made already, and the changes before it of
            // the file it removed: done.
            let gone = match msg {
                Tmessage::Unlinkbehind(_) | Tmessage::Rmdirbehind(_) => libc::ENOENT,
                _ if removed.contains(&change.ino) => libc::EBADF,
                _ => 0,
            };
            if matches!(attrs, Err(Refusal::Errno(e)) if e == gone) {
                attrs = Ok(Answered {
                    attrs: Rgetattr::default(),
                    made_as: None,
                    dir: None,
                });
            }
            self.settle(lock(&self.queue), seq, change, attrs);
        }
        Ok(())
    }

    /// The errno of a refused change of `ino` not yet reported, now reported (by an
    /// fsync).
    pub(crate) fn take_refused(&self, ino: u64) -> Option<i32> {
        lock(&self.queue)
            .refused
            .remove(&ino)
            .map(|(errno, _)| errno)
    }

    /// As [`Self::take_refused`], for a close by thread `pid`: only a thread of the
    /// process that made the change is told. A close by any other (a child closing what
    /// it inherited as it runs another program, say) would take the error from the
    /// writer's own close.
    pub(crate) fn take_refused_by(&self, ino: u64, pid: u32) -> Option<i32> {
        let mut q = lock(&self.queue);
        let (errno, by) = *q.refused.get(&ino)?;
        if by != q.process_of(pid) {
            return None;
        }
        q.refused.remove(&ino);
        Some(errno)
    }

    /// Waits until every change sent before the call is answered, or `timeout` passes.
    /// Returns whether they all were.
    pub(crate) fn wait_answered(&self, timeout: Duration) -> Result<(), NotAnswered> {
        let deadline = Instant::now() + timeout;
        let mut q = lock(&self.queue);
        let Some(last) = q.next_seq.checked_sub(1) else {
            return Ok(());
        };
        let pending = |q: &Queue| {
            q.unanswered.range(..=last).next().is_some()
                || q.lost.range(..=last).next().is_some()
                || q.holds > 0
        };
        if pending(&q) {
            crossfs_client::before_wait();
        }
        while pending(&q) {
            let now = Instant::now();
            if now >= deadline {
                return Err(NotAnswered::TimedOut);
            }
            // A caller that gets a signal stops waiting, as its calls to a server that is
            // away do.
            if crossfs_client::caller_gave_up() {
                return Err(NotAnswered::Interrupted);
            }
            q = self
                .answered
                .wait_timeout(q, (deadline - now).min(crossfs_client::GIVE_UP_POLL))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        Ok(())
    }

    /// Refused changes no `crossfs sync` has reported yet, now reported.
    pub(crate) fn take_refused_unsynced(&self) -> u64 {
        std::mem::take(&mut lock(&self.queue).refused_unsynced)
    }

    /// The queue, for `crossfs stats`.
    pub(crate) fn stats_json(&self) -> Value {
        let q = lock(&self.queue);
        let oldest = q
            .unanswered
            .values()
            .chain(q.lost.values())
            .map(|c| c.sent)
            .min()
            .map_or(0, |t| t.elapsed().as_micros() as u64);
        let c = &self.counters;
        let to_host: serde_json::Map<String, Value> = self
            .to_host
            .snapshot()
            .types
            .iter()
            .map(|(name, h)| {
                let s = h.summary();
                let summary = json!({
                    "count": s.count,
                    "p50_us": s.p50_us,
                    "p90_us": s.p90_us,
                    "p99_us": s.p99_us,
                    "max_us": s.max_us,
                });
                ((*name).to_string(), summary)
            })
            .collect();
        json!({
            "to_host": to_host,
            "queued": q.unanswered.len() + q.lost.len(),
            "queued_bytes": q.bytes,
            "oldest_us": oldest,
            "sent": c.sent.load(Relaxed),
            "answered": c.answered.load(Relaxed),
            "refused": c.refused.load(Relaxed),
            "resent": c.resent.load(Relaxed),
            "waited_for_room": c.waited_for_room.load(Relaxed),
            "conflicts": c.conflicts.load(Relaxed),
            "unreported_refusals": q.refused.len(),
        })
    }
}

impl Queue {
    /// The process of thread `tid`, looked up once per thread (a thread that is gone
    /// counts as its own process).
    fn process_of(&mut self, tid: u32) -> u32 {
        if let Some(&p) = self.processes.get(&tid) {
            return p;
        }
        if self.processes.len() >= PROCESSES_KEPT {
            // Threads come and go: the oldest are not worth telling apart.
            self.processes.clear();
        }
        let p = thread_group(tid).unwrap_or(tid);
        self.processes.insert(tid, p);
        p
    }
}

/// Threads whose process [`Queue::process_of`] keeps at most.
const PROCESSES_KEPT: usize = 4096;

/// The process of thread `tid`, while the thread lives (`Tgid` in /proc).
fn thread_group(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Tgid:"))?;
    line["Tgid:".len()..].trim().parse().ok()
}

/// Holds waiters of [`ChangesBehind::wait_answered`] until dropped.
pub(crate) struct Hold(std::sync::Arc<ChangesBehind>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// The errno a change the server kept beside its file is reported with, at the file's
/// next fsync: the guest's view of the file was stale (a host program changed it first).
pub(crate) const KEPT_BESIDE: i32 = libc::ESTALE;

/// The name of the file or directory `msg` makes behind, if it makes one.
fn made_name(msg: &Tmessage) -> Option<&[u8]> {
    match msg {
        Tmessage::Createbehind(c) => Some(&c.create.name),
        Tmessage::Createbehindmarked(c) => Some(&c.create.name),
        Tmessage::Mkdirbehind(m) => Some(&m.mkdir.name),
        _ => None,
    }
}

/// Bytes a write carries (0 for anything else).
fn written(msg: &Tmessage) -> usize {
    match msg {
        Tmessage::Writeattr(w) => w.data.0.len(),
        Tmessage::Writebehind(w) => w.data.0.len(),
        _ => 0,
    }
}

/// `msg`, made onto the file however the file is now: a change whose base (the old
/// connection's) the new connection cannot check.
fn unconditional(msg: &Tmessage) -> Tmessage {
    match msg {
        Tmessage::Setattrbehind(s) => Tmessage::Setattrget(crossfs_wire::Tsetattrget {
            set: s.set.clone(),
            request_mask: s.request_mask,
        }),
        Tmessage::Writebehind(w) => Tmessage::Writeattr(crossfs_wire::Twriteattr {
            fid: w.fid,
            offset: w.offset,
            data: w.data.clone(),
        }),
        Tmessage::Unlinkbehind(u) => Tmessage::Unlinkbehind(crossfs_wire::Tunlinkbehind {
            base: crossfs_wire::BehindBase::after_previous(),
            ..u.clone()
        }),
        other => other.clone(),
    }
}

/// Why a change sent behind did not leave the file as predicted.
enum Refusal {
    /// The server refused it.
    Errno(i32),
    /// A host program changed the file first: the server made the change on a copy of
    /// it, under this name beside it.
    KeptBeside(Vec<u8>),
}

/// What change `msg` left, from the server's answer `r`, or why it did not.
fn attrs_after(msg: &Tmessage, r: Result<Rmessage, ClientError>) -> Result<Answered, Refusal> {
    let attrs = |attrs| Answered {
        attrs,
        made_as: None,
        dir: None,
    };
    let whole = |count: u32| count as usize == written(msg);
    match r {
        Ok(Rmessage::Setattrget(s)) => Ok(attrs(s.attr)),
        Ok(Rmessage::Writeattr(w)) if whole(w.count) => Ok(attrs(w.attr)),
        Ok(Rmessage::Setattrbehind(s)) if s.kept_as.is_empty() => Ok(attrs(s.attr)),
        Ok(Rmessage::Writebehind(w)) if w.kept_as.is_empty() && whole(w.count) => Ok(attrs(w.attr)),
        Ok(Rmessage::Setattrbehind(s)) => Err(Refusal::KeptBeside(s.kept_as)),
        Ok(Rmessage::Writebehind(w)) if !w.kept_as.is_empty() => {
            Err(Refusal::KeptBeside(w.kept_as))
        }
        Ok(
            Rmessage::Createbehind(c)
            | Rmessage::Createbehindmarked(crossfs_wire::Rcreatebehindmarked { made: c }),
        ) => Ok(Answered {
            attrs: c.created.attr,
            made_as: Some(c.name),
            dir: Some(c.dir),
        }),
        Ok(Rmessage::Mkdirbehind(m)) => Ok(Answered {
            attrs: m.attr,
            made_as: Some(m.name),
            dir: Some(m.dir),
        }),
        Ok(
            Rmessage::Unlinkbehind(crossfs_wire::Runlinkbehind { attr, dir })
            | Rmessage::Rmdirbehind(crossfs_wire::Rrmdirbehind { attr, dir }),
        ) => Ok(Answered {
            attrs: attr,
            made_as: None,
            dir: Some(dir),
        }),
        Ok(Rmessage::Renamebehind(r)) => Ok(Answered {
            attrs: Rgetattr::default(),
            made_as: None,
            dir: Some(r.dir),
        }),
        // Short: the rest did not reach the host (a full disk, say).
        Ok(Rmessage::Writeattr(_) | Rmessage::Writebehind(_)) => Err(Refusal::Errno(libc::ENOSPC)),
        Ok(_) => Err(Refusal::Errno(libc::EIO)),
        Err(e) => Err(Refusal::Errno(e.errno())),
    }
}
