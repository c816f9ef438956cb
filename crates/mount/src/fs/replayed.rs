//! The FUSE side of replaying: requests from the change feed's thread (see
//! `crate::changes`) answered locally, and the sync attribute of the mount's root.
//!
//! The feed decides what a replayed LOOKUP is answered with ([`ChangeState::intended`]);
//! this only answers it. Nothing here sends a change to the server.
//!
//! [`ChangeState::intended`]: crate::changes::ChangeState::intended

use std::time::Duration;

use fuser::{Errno, Generation, INodeNo, ReplyEntry};

use super::reply::Xattr;
use super::MountState;
use crate::attr;
use crate::changes::{Intended, Present};

impl MountState {
    /// A LOOKUP: answered here when the feed thread is replaying a change to this very
    /// name; otherwise handed back for the ordinary lookup.
    pub(crate) fn replay_lookup(
        &self,
        pid: u32,
        parent: INodeNo,
        name: &[u8],
        reply: ReplyEntry,
    ) -> Option<ReplyEntry> {
        if !self.changes.is_replay(pid) {
            return Some(reply);
        }
        let present = match self.changes.intended(parent.0, name) {
            None => return Some(reply),
            Some(Intended::Missing) => {
                reply.error(Errno::ENOENT);
                return None;
            }
            Some(Intended::Present(present)) => present,
        };
        let at = (parent, name);
        match present {
            Present::Found(fid, a) => {
                let fa = self.remember(at, fid, &a, None);
                reply.entry_with_ttls(&Duration::ZERO, &Duration::ZERO, &fa, Generation(0));
            }
            Present::Gone(kind, format) => {
                let Some(dir) = self.known.inodes.fid(parent.0) else {
                    reply.error(Errno::ENOENT);
                    return None;
                };
                let ino = self.known.inodes.placeholder((parent.0, name), dir, format);
                let fa = attr::placeholder(ino, kind);
                reply.entry_with_ttls(&Duration::ZERO, &Duration::ZERO, &fa, Generation(0));
            }
        }
        None
    }

    /// Reading `user.crossfs.sync` on the mount's root: a sync (see
    /// [`crate::changes::ChangeState::sync`]); the value is the sync's marker, 16 hex
    /// digits.
    pub(crate) fn sync_xattr(&self, size: u32) -> Result<Xattr, Errno> {
        const LEN: u32 = 16;
        if size == 0 {
            return Ok(Xattr::Size(LEN));
        }
        if size < LEN {
            return Err(Errno::ERANGE);
        }
        let marker = self.changes.sync(self.config.threads)?;
        Ok(Xattr::Data(format!("{marker:016x}").into_bytes()))
    }
}
