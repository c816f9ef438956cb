//! CREATE: a file made and opened, with its node and attributes, in one round trip with
//! the crossfs extension (Tcreateattr, or Tcreateattrdir with what the creation left of
//! the directory), else Tlcreate, a walk and a getattr.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::session::{Errno, FileHandle, INodeNo};
use crossfs_client::ClientError;
use crossfs_wire::{Rmessage, Tcreateattr, Tcreateattrdir, Tlcreate, Tmessage};

use super::open::{wire_open_flags, writes};
use super::reply::{Created, Opened};
use super::{errno, Caller, MountState};
use crate::fid::FidRef;
use crate::known::handle::{Reopen, Unannounced};
use crate::known::listed_attrs::{ChangeInFlight, Fetched};
use crate::known::replica::DirLeft;
use crate::remote::{clone_fid, expect_reply, resolve_one, ATTR_MASK};

/// A file created and opened: the open fid, the node's fid, its attributes, what the
/// creation left of its directory, if the server said, and when the creation was asked
/// for (see `ListedAttrs::created`).
type NewFile = (
    Arc<FidRef>,
    Arc<FidRef>,
    crossfs_wire::Rgetattr,
    Option<DirLeft>,
    Option<Fetched>,
);

impl MountState {
    /// Tlcreate on a clone of the directory's fid (which then names the new, open file),
    /// then a walk for the node's own fid and a getattr, in one round trip.
    ///
    /// The kernel sends CREATE only for a name it believes missing; with negative caching
    /// the name may have appeared on the host since. Without O_EXCL that must open the
    /// existing file, so EEXIST falls back to lookup + open.
    ///
    /// With `--changes behind`, a create the mount can answer exactly is answered here
    /// and sent after (`fs/create_behind.rs`); `change` marks the directory and the name
    /// as changing, `pid` is the caller's thread.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create(
        self: &Arc<Self>,
        parent: INodeNo,
        name: &[u8],
        mode: u32,
        flags: i32,
        (caller, pid): (Caller, u32),
        change: &ChangeInFlight,
    ) -> Result<Created, Errno> {
        self.writable()?;
        let dir = self.node(parent)?;
        let wire = wire_open_flags(flags, self.config.cache.writeback());
        let behind = (mode, flags, wire);
        if let Some(created) =
            self.create_behind((parent, &dir), name, behind, (caller, pid), change)
        {
            return Ok(created);
        }
        if self.client.has_extensions() {
            // The server charges the open file before it creates anything: a refusal for
            // want of descriptors may be tried again.
            let create = || self.create_in_one((parent.0, &dir), name, wire, mode, caller);
            match self.short_of_descriptors(create) {
                Ok(created) => return Ok(self.created((parent, name), created, (flags, wire))),
                Err(ClientError::Errno(libc::EEXIST)) if flags & libc::O_EXCL == 0 => {}
                Err(e) => return Err(errno(&e)),
            }
        }
        let created = clone_fid(&self.client, &dir).and_then(|fid| {
            let msg = Tmessage::Lcreate(Tlcreate {
                fid: fid.fid(),
                name: name.to_vec(),
                flags: wire,
                mode: mode & 0o7777,
                gid: caller.gid,
            });
            let call = || self.client.call(msg.clone());
            expect_reply!(self.short_of_descriptors(call), Lcreate).map(|_| fid)
        });
        let opened = match created {
            Ok(fid) => Ok((fid, Some(caller), wire)),
            Err(ClientError::Errno(libc::EEXIST)) if flags & libc::O_EXCL == 0 => {
                resolve_one(&self.client, &dir, name, None)
                    .and_then(|(node, _)| self.open_fid(&node, flags & !libc::O_CREAT))
                    .map(|(fid, wire)| (fid, None, wire))
            }
            Err(e) => Err(e),
        };
        let (fid, created_for, wire) = opened.map_err(|e| errno(&e))?;
        let found =
            resolve_one(&self.client, &dir, name, None).and_then(|(node, a)| match created_for {
                Some(c) => Ok((node.clone(), self.give_to(c, &node, a)?)),
                None => Ok((node, a)),
            });
        let (node, a) = found.map_err(|e| errno(&e))?;
        Ok(self.created((parent, name), (fid, node, a, None, None), (flags, wire)))
    }

    /// The crossfs extension's Tcreateattr: the file created and opened, a fid for its
    /// node and its attributes, in one round trip; as Tcreateattrdir where the server has
    /// it, also what the creation left of the directory (see
    /// [`crate::known::replica::DirReplicas::left_attrs`]). Returns (open fid, node fid,
    /// attributes, what it left of the directory).
    pub(super) fn create_in_one(
        &self,
        (parent, dir): (u64, &FidRef),
        name: &[u8],
        wire: u32,
        mode: u32,
        caller: Caller,
    ) -> Result<NewFile, ClientError> {
        let (nodefid, openfid) = (self.client.alloc_fid(), self.client.alloc_fid());
        let create = Tcreateattr {
            dfid: dir.fid(),
            nodefid,
            openfid,
            name: name.to_vec(),
            flags: wire,
            mode: mode & 0o7777,
            gid: caller.gid,
            request_mask: ATTR_MASK,
        };
        let before = self.ticket_for_left(parent);
        let asked = self.known.listed.before_fetch();
        let sent = match before {
            Some(_) => self.call_left(Tmessage::Createattrdir(Tcreateattrdir {
                create: create.clone(),
            })),
            None => None,
        };
        let answer = match sent {
            Some(r) => r,
            None => self.client.call(Tmessage::Createattr(create)),
        };
        let (created, left) = match answer {
            Ok(Rmessage::Createattr(c)) => (c, None),
            Ok(Rmessage::Createattrdir(c)) => {
                let left = before.map(|before| DirLeft {
                    before,
                    attrs: c.dir,
                });
                (c.created, left)
            }
            Ok(other) => return Err(crate::remote::unexpected(other)),
            Err(e) => {
                self.client.free_fid(nodefid);
                self.client.free_fid(openfid);
                return Err(e);
            }
        };
        let (fid, node) = (
            FidRef::new(&self.client, openfid),
            FidRef::new(&self.client, nodefid),
        );
        let made = (created.attr.uid, created.attr.gid);
        let a = self.give_to(caller, &node, created.attr)?;
        self.note_new_file_owner(caller, made);
        Ok((fid, node, a, left, Some(asked)))
    }

    /// The answer to a CREATE: the new file's node, and its open handle.
    fn created(
        &self,
        (parent, name): (INodeNo, &[u8]),
        (fid, node, a, left, asked): NewFile,
        (flags, wire): (i32, u32),
    ) -> Created {
        // A new file (see `create_entry` in `fs/entry.rs`); its attributes as the creation
        // answered may answer again (for a change sent behind) while nothing marks it.
        let fetched = match asked {
            Some(asked) => self.known.listed.created(&a, &asked),
            None => {
                self.known.listed.changed([a.qid.path]);
                None
            }
        };
        if let Some(fetched) = fetched {
            // A new file has no capability: the kernel's question before the first write
            // is answered here (while nothing but its echo marked the file).
            let capability = crate::known::missing_xattrs::CAPABILITY;
            self.known.missing_xattrs.found_missing(
                &self.known.listed,
                a.qid.path,
                capability,
                fetched,
            );
        }
        self.known.replicas.own_created(parent.0, name, &a, left);
        let fa = self.remember((parent, name), node, &a, fetched);
        self.open_created(fa, fid, (flags, wire))
    }

    /// The answer to a CREATE of the file with attributes `fa`, opened as `fid` with
    /// (Linux) `flags` and `wire` (the server's): its handle.
    pub(super) fn open_created(
        &self,
        fa: crate::session::FileAttr,
        fid: Arc<FidRef>,
        (flags, wire): (i32, u32),
    ) -> Created {
        let ino = fa.ino.0;
        let open_flags = self.fopen_flags(ino, flags);
        if self.may_leave_opens_unannounced() {
            // The kernel sends no RELEASE for any handle once it opens files without asking
            // (not even for one a CREATE answered): the new file's open fid becomes the
            // node's unannounced handle, and the kernel gets handle 0.
            self.known
                .handles
                .opens_unannounced
                .store(true, Ordering::Relaxed);
            let what = match flags & libc::O_ACCMODE {
                libc::O_RDONLY => Unannounced::Read,
                _ => self.unannounced_write(flags),
            };
            self.ahead.page_push.touched(ino, true);
            self.known
                .handles
                .adopt_unannounced(ino, what, fid, Reopen::new(ino, wire));
            // Until the kernel has had an OPEN answered ENOSYS it sends RELEASE for this
            // open: one open of the file by the mount teaches it (`crate::ahead::no_opens`).
            self.created_unannounced(ino);
            return Created {
                attr: fa,
                ttl: self.entry_ttl(),
                attr_ttl: self.entry_ttl(),
                opened: Opened(FileHandle(0), open_flags),
            };
        }
        let fh = self.known.handles.insert(fid, Reopen::new(ino, wire));
        if writes(flags) {
            self.ahead.page_push.write_opened(fh, ino);
        }
        Created {
            attr: fa,
            ttl: self.entry_ttl(),
            attr_ttl: self.entry_ttl(),
            opened: Opened(FileHandle(fh), open_flags),
        }
    }
}
