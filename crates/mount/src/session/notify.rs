//! Telling the kernel what changed, unasked: drop a name, drop a node's attributes and
//! pages, fill its pages.

use std::ffi::OsStr;
use std::io::{self, IoSlice};
use std::os::unix::ffi::OsStrExt;

use crossfs_fuse_abi::notify;

use super::reply::ReplySender;
use super::types::INodeNo;

/// Sends notifications to the kernel; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct Notifier(pub(crate) ReplySender);

impl Notifier {
    fn send(&self, message: Result<Vec<u8>, notify::NotifyError>) -> io::Result<()> {
        let message = message.map_err(io::Error::other)?;
        match self.0.send(&[IoSlice::new(&message)]) {
            // The kernel holds no such node or name: nothing to drop.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r,
        }
    }

    /// Drops the name `name` in directory `parent` from the kernel's cache.
    ///
    /// # Errors
    /// The kernel's refusal (ENOENT is not one: the name was not held).
    pub fn inval_entry(&self, parent: INodeNo, name: &OsStr) -> io::Result<()> {
        self.send(notify::inval_entry(parent.0, name.as_bytes()))
    }

    /// Drops node `ino`'s attributes, and its pages from `offset` for `len` bytes (0: to
    /// the end; a negative `offset`: no pages).
    ///
    /// # Errors
    /// The kernel's refusal (ENOENT is not one: the node was not held).
    pub fn inval_inode(&self, ino: INodeNo, offset: i64, len: i64) -> io::Result<()> {
        self.send(Ok(notify::inval_inode(ino.0, offset, len)))
    }

    /// Puts `data` into node `ino`'s page cache at `offset`.
    ///
    /// # Errors
    /// The kernel's refusal (ENOENT is not one: the node was not held).
    pub fn store(&self, ino: INodeNo, offset: u64, data: &[u8]) -> io::Result<()> {
        self.send(notify::store(ino.0, offset, data))
    }
}
