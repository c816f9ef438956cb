//! Extended attributes over Txattrwalk (read, list) and Txattrcreate (set, remove).

use crate::session::{Errno, INodeNo};
use crossfs_client::ClientError;
use crossfs_wire::{xattr_flags, Tmessage, Txattrcreate, Txattrwalk};

use super::reply::Xattr;
use super::{errno, MountState};
use crate::fid::FidRef;
use crate::remote::{clone_fid, expect_reply};

/// Linux's XATTR_SIZE_MAX: no value or list is larger.
const XATTR_SIZE_MAX: u64 = 64 * 1024;

impl MountState {
    /// Reads attribute `name` (the name list when empty). `size` 0 asks only for the length.
    pub(super) fn getxattr(&self, ino: INodeNo, name: &[u8], size: u32) -> Result<Xattr, Errno> {
        if self.behind.is_creating(ino.0) {
            // Created behind and not made yet: no change of the mount's gave it any
            // (those that wait are answered after the create), and the kernel asks for
            // `security.capability` before every write.
            return match name {
                [] if size == 0 => Ok(Xattr::Size(0)),
                [] => Ok(Xattr::Data(Vec::new())),
                _ => Err(Errno::ENODATA),
            };
        }
        // Before the node's fid: a node answered from a replica would be walked for it.
        let known = self.missing_xattr_file(ino, name);
        if let Some(qid_path) = known {
            if self
                .known
                .missing_xattrs
                .is_missing(&self.known.listed, qid_path, name)
            {
                self.stats
                    .caches
                    .missing_xattrs_answered
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(Errno::ENODATA);
            }
        }
        let node = self.node(ino)?;
        let asked = self.known.listed.before_fetch();
        let newfid = self.client.alloc_fid();
        let walk = Tmessage::Xattrwalk(Txattrwalk {
            fid: node.fid(),
            newfid,
            name: name.to_vec(),
        });
        let len = match expect_reply!(self.client.call(walk), Xattrwalk) {
            Ok(w) => w.size,
            Err(e) => {
                if !matches!(e, ClientError::Protocol(_)) {
                    self.client.free_fid(newfid);
                }
                if let (Some(qid_path), ClientError::Errno(libc::ENODATA)) = (known, &e) {
                    self.known.missing_xattrs.found_missing(
                        &self.known.listed,
                        qid_path,
                        name,
                        asked,
                    );
                }
                return Err(errno(&e));
            }
        };
        let fid = FidRef::new(&self.client, newfid);
        if len > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        if size == 0 {
            return Ok(Xattr::Size(len as u32));
        }
        if len > u64::from(size) {
            return Err(Errno::ERANGE);
        }
        let mut value = Vec::with_capacity(len as usize);
        while (value.len() as u64) < len {
            let want = (len - value.len() as u64).min(u64::from(self.client.max_io())) as u32;
            match self.client.read(fid.fid(), value.len() as u64, want) {
                Ok(data) if data.is_empty() => break,
                Ok(data) => value.extend_from_slice(&data),
                Err(e) => return Err(errno(&e)),
            }
        }
        Ok(Xattr::Data(value))
    }

    /// The `qid.path` of node `ino` if what is known missing of its attribute `name` may
    /// answer (see `crate::known::missing_xattrs`): not a list, not the root, events followed.
    fn missing_xattr_file(&self, ino: INodeNo, name: &[u8]) -> Option<u64> {
        if name.is_empty() || ino.0 == crate::known::inode::ROOT || !self.follows_events() {
            return None;
        }
        self.known.inodes.qid_path(ino.0)
    }

    /// An attribute of node `ino` was changed through the mount: marked as changed first,
    /// so that an answer fetched before cannot be kept after what is known goes.
    fn xattrs_changed(&self, ino: INodeNo) {
        if let Some(qid_path) = self.known.inodes.qid_path(ino.0) {
            self.known.listed.changed([qid_path]);
            self.known.missing_xattrs.forget([qid_path]);
        }
    }

    /// Txattrcreate on a clone of the file's fid, the value written through it; the
    /// server sets the attribute when the fid is clunked, so the clunk's answer is the
    /// answer.
    fn write_xattr(
        &self,
        ino: INodeNo,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> Result<(), Errno> {
        self.writable()?;
        let node = self.node(ino)?;
        let fid = clone_fid(&self.client, &node).map_err(|e| errno(&e))?;
        let create = Tmessage::Xattrcreate(Txattrcreate {
            fid: fid.fid(),
            name: name.to_vec(),
            attr_size: value.len() as u64,
            flags,
        });
        expect_reply!(self.client.call(create), Xattrcreate).map_err(|e| errno(&e))?;
        let max = self.client.max_io() as usize;
        let mut done = 0;
        while done < value.len() {
            let chunk = &value[done..value.len().min(done + max)];
            let n = self
                .client
                .write(fid.fid(), done as u64, chunk)
                .map_err(|e| errno(&e))?;
            if n == 0 {
                crate::stats::io_error(&"the server took none of an extended attribute's value");
                return Err(Errno::EIO);
            }
            done += n as usize;
        }
        fid.clunk_now().map_err(|e| errno(&e))
    }

    pub(super) fn setxattr(
        &self,
        ino: INodeNo,
        name: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        let flags = flags as u32 & (xattr_flags::CREATE | xattr_flags::REPLACE);
        self.xattrs_changed(ino);
        let written = self.write_xattr(ino, name, value, flags);
        self.xattrs_changed(ino);
        written
    }

    /// As Linux's v9fs does it: an empty value with XATTR_REPLACE removes the attribute.
    pub(super) fn removexattr(&self, ino: INodeNo, name: &[u8]) -> Result<(), Errno> {
        self.xattrs_changed(ino);
        let written = self.write_xattr(ino, name, &[], xattr_flags::REPLACE);
        self.xattrs_changed(ino);
        written
    }
}
