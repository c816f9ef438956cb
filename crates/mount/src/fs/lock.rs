//! POSIX record locks (fcntl F_GETLK/F_SETLK/F_SETLKW) over Tgetlock and Tlock.
//!
//! The server never blocks on a lock: it answers BLOCKED, and a waiting F_SETLKW is retried
//! here with back-off (10 ms doubling to 1 s), on a thread of its own so that no FUSE worker
//! is held. flock(2) is not sent to the server: without FUSE_FLOCK_LOCKS the kernel keeps
//! flock locks itself, so they exclude processes on this mount only.

use std::sync::Arc;
use std::time::Duration;

use crate::session::{Errno, ReplyEmpty};
use crossfs_client::ClientError;
use crossfs_wire::{lock as wl, Rlock, Tgetlock, Tlock, Tmessage};

use super::reply::{answer, Later, Lock};
use super::{errno, MountState};
use crate::known::handle::OpenFile;
use crate::remote::expect_reply;
use crate::sync::lock;

/// One lock request as FUSE gives it: an inclusive byte range, `end` = OFFSET_MAX for
/// "to the end of the file".
pub(crate) struct Range {
    pub owner: u64,
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
}

const OFFSET_MAX: u64 = i64::MAX as u64;

fn wire_type(typ: i32) -> u8 {
    match typ {
        libc::F_RDLCK => wl::TYPE_RDLCK,
        libc::F_WRLCK => wl::TYPE_WRLCK,
        _ => wl::TYPE_UNLCK,
    }
}

fn local_type(ty: u8) -> i32 {
    match ty {
        wl::TYPE_RDLCK => libc::F_RDLCK,
        wl::TYPE_WRLCK => libc::F_WRLCK,
        _ => libc::F_UNLCK,
    }
}

/// 9P ranges are start + length, length 0 meaning "to the end".
fn length(start: u64, end: u64) -> u64 {
    if end >= OFFSET_MAX {
        0
    } else {
        end.saturating_sub(start) + 1
    }
}

fn end_of(start: u64, length: u64) -> u64 {
    if length == 0 {
        OFFSET_MAX
    } else {
        start.saturating_add(length - 1)
    }
}

impl MountState {
    /// The lock holder's name on the server: this mount, plus the kernel's lock owner.
    fn client_id(&self, owner: u64) -> Vec<u8> {
        format!("{}/{owner:x}", self.lock_client).into_bytes()
    }

    fn tlock(&self, file: &OpenFile, l: &Range) -> Result<Tmessage, Errno> {
        Ok(Tmessage::Lock(Tlock {
            fid: self.file_fid(file)?.fid(),
            ty: wire_type(l.typ),
            flags: 0,
            start: l.start,
            length: length(l.start, l.end),
            proc_id: l.pid,
            client_id: self.client_id(l.owner),
        }))
    }

    pub(super) fn getlk(&self, file: Arc<OpenFile>, l: Range) -> Result<Lock, Errno> {
        let fid = self.file_fid(&file)?.fid();
        let msg = Tmessage::Getlock(Tgetlock {
            fid,
            ty: wire_type(l.typ),
            start: l.start,
            length: length(l.start, l.end),
            proc_id: l.pid,
            client_id: self.client_id(l.owner),
        });
        let g = expect_reply!(self.client.call(msg), Getlock).map_err(|e| errno(&e))?;
        if g.ty == wl::TYPE_UNLCK {
            return Ok(Lock {
                start: 0,
                end: 0,
                typ: libc::F_UNLCK,
                pid: 0,
            });
        }
        Ok(Lock {
            start: g.start,
            end: end_of(g.start, g.length),
            typ: local_type(g.ty),
            pid: g.proc_id,
        })
    }

    /// A lock taken or released; a blocked F_SETLKW is answered later, from a thread that
    /// retries until the server grants it or fails.
    pub(super) fn setlk(
        self: &Arc<Self>,
        file: Arc<OpenFile>,
        l: Range,
        sleep: bool,
    ) -> Result<Later<'static, ReplyEmpty>, Errno> {
        if l.typ != libc::F_UNLCK {
            lock(&file.lock_owners).insert(l.owner);
        }
        let msg = self.tlock(&file, &l)?;
        match status(self.client.call(msg.clone()))? {
            Some(()) => Ok(Later::new(|reply: ReplyEmpty| reply.ok())),
            None if !sleep => Err(Errno::EAGAIN),
            None => {
                let shared = self.clone();
                Ok(Later::new(move |reply| {
                    let spawned = std::thread::Builder::new()
                        .name("crossfs-lockwait".into())
                        .spawn(move || answer(reply, shared.wait_for_lock(msg)));
                    if let Err(e) = spawned {
                        tracing::warn!("cannot start a lock-wait thread: {e}");
                    }
                }))
            }
        }
    }

    /// Retries a blocked F_SETLKW until the server grants it or fails.
    fn wait_for_lock(&self, msg: Tmessage) -> Result<(), Errno> {
        let mut delay = Duration::from_millis(10);
        loop {
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_secs(1));
            if status(self.client.call(msg.clone()))?.is_some() {
                return Ok(());
            }
        }
    }

    /// Releases every lock `owner` holds on the file (on close).
    pub(super) fn unlock_all(&self, file: &OpenFile, owner: u64) -> Result<(), Errno> {
        let l = Range {
            owner,
            start: 0,
            end: OFFSET_MAX,
            typ: libc::F_UNLCK,
            pid: 0,
        };
        status(self.client.call(self.tlock(file, &l)?)).map(|_| ())
    }
}

/// Ok(Some) granted, Ok(None) blocked (or the server is in its grace period), Err failed.
fn status(r: Result<crossfs_wire::Rmessage, ClientError>) -> Result<Option<()>, Errno> {
    match expect_reply!(r, Lock) {
        Ok(Rlock {
            status: wl::STATUS_SUCCESS,
        }) => Ok(Some(())),
        Ok(Rlock {
            status: wl::STATUS_BLOCKED | wl::STATUS_GRACE,
        }) => Ok(None),
        Ok(_) => Err(Errno::ENOLCK),
        Err(e) => Err(errno(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_convert_both_ways() {
        assert_eq!(length(0, OFFSET_MAX), 0);
        assert_eq!(length(10, 19), 10);
        assert_eq!(end_of(10, 10), 19);
        assert_eq!(end_of(5, 0), OFFSET_MAX);
        assert_eq!(local_type(wire_type(libc::F_WRLCK)), libc::F_WRLCK);
        assert_eq!(local_type(wire_type(libc::F_UNLCK)), libc::F_UNLCK);
    }
}
