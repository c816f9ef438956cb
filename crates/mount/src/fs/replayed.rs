//! The FUSE side of replaying: requests from the change feed's thread (see
//! `crate::changes`) answered locally, and the sync attribute of the mount's root.
//!
//! The feed decides what a replayed LOOKUP is answered with ([`ChangeState::intended`]);
//! this only answers it. Nothing here sends a change to the server.
//!
//! [`ChangeState::intended`]: crate::changes::ChangeState::intended

use std::sync::Arc;
use std::time::Duration;

use crate::session::{Errno, INodeNo, ReplyXattr};

use super::reply::{answer, Entry, Later, NowOrLater, Xattr};
use super::MountState;
use crate::attr;
use crate::changes::{Intended, Present};

impl MountState {
    /// A LOOKUP: answered here when the feed thread is replaying a change to this very
    /// name; otherwise `None`, for the ordinary lookup.
    pub(crate) fn replay_lookup(
        &self,
        pid: u32,
        parent: INodeNo,
        name: &[u8],
    ) -> Option<Result<Entry, Errno>> {
        if !self.changes.is_replay(pid) {
            return None;
        }
        let present = match self.changes.intended(parent.0, name)? {
            Intended::Missing => return Some(Err(Errno::ENOENT)),
            Intended::Present(present) => present,
        };
        let at = (parent, name);
        let fa = match present {
            Present::Found(fid, a) => self.remember(at, fid, &a, None),
            Present::Gone(kind, format) => {
                let Some(dir) = self.known.inodes.fid(parent.0) else {
                    return Some(Err(Errno::ENOENT));
                };
                let ino = self.known.inodes.placeholder((parent.0, name), dir, format);
                attr::placeholder(ino, kind)
            }
        };
        Some(Ok(Entry {
            attr: fa,
            attr_ttl: Duration::ZERO,
            entry_ttl: Duration::ZERO,
        }))
    }

    /// The part of a sync that concerns changes sent behind: waits until the server has
    /// answered every one sent before it; fails with EIO if it refused any since the
    /// last sync (each is logged, and its file's next close or fsync fails too).
    fn sync_behind(&self) -> Result<(), Errno> {
        match self.behind.wait_answered(crate::changes::SYNC_TIMEOUT) {
            Ok(()) => {}
            Err(crate::behind::NotAnswered::TimedOut) => {
                tracing::warn!(
                    "sync: changes sent behind unanswered for {:?}",
                    crate::changes::SYNC_TIMEOUT
                );
                return Err(Errno::ETIMEDOUT);
            }
            Err(crate::behind::NotAnswered::Interrupted) => return Err(Errno::EINTR),
        }
        match self.behind.take_refused_unsynced() {
            0 => Ok(()),
            n => {
                tracing::warn!(
                    "sync: the server refused {n} changes sent behind since the last sync"
                );
                Err(Errno::EIO)
            }
        }
    }

    /// Reading `user.crossfs.sync` on the mount's root: a sync (see
    /// [`crate::changes::ChangeState::sync`]); the value is the sync's marker, 16 hex
    /// digits.
    ///
    /// The sync waits on a thread of its own, so that however many programs sync at once,
    /// the FUSE threads stay free for the replays the syncs wait for.
    pub(crate) fn sync_xattr(
        self: &Arc<Self>,
        size: u32,
    ) -> Result<NowOrLater<'static, Xattr, ReplyXattr>, Errno> {
        const LEN: u32 = 16;
        if size == 0 {
            return Ok(NowOrLater::Now(Xattr::Size(LEN)));
        }
        if size < LEN {
            return Err(Errno::ERANGE);
        }
        let shared = self.clone();
        // The caller's signals end the wait, on the sync's thread too.
        let give_up = crossfs_client::give_up_now();
        Ok(NowOrLater::Later(Later::new(move |reply: ReplyXattr| {
            let spawned = std::thread::Builder::new()
                .name("crossfs-sync".into())
                .spawn(move || {
                    crossfs_client::give_up_when(give_up);
                    let marker = shared.sync_behind().and_then(|()| shared.changes.sync());
                    let value = marker.map(|m| Xattr::Data(format!("{m:016x}").into_bytes()));
                    answer(reply, value);
                });
            if let Err(e) = spawned {
                // The reply, dropped with the closure, answers EIO.
                crate::stats::io_error(&format_args!("cannot start a thread to sync: {e}"));
            }
        })))
    }
}
