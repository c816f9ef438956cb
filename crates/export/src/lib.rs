//! The export core both doors of crossfs share: the 9P server (`crossfs-server`) and the
//! virtio door (`crossfs-virtiofs`) confine, police and budget a client through these
//! functions, so each rule exists once.
//!
//! # What it owns, what it does not
//! - [`sys`]: every system call on exported files, and the only `unsafe` (each block with
//!   its `SAFETY:`). Files are reached through `O_PATH` descriptors, one name at a time with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
//!   ([`sys::walk_one`]), and reopened through `/proc/self/fd` ([`sys::reopen`]).
//! - [`names`]: the rule that a name from a client is one component ("", ".", "..", "/" and
//!   NUL refused; longer than 255 bytes is `ENAMETOOLONG`).
//! - [`policy`]: read-only, device nodes, set-user-ID and set-group-ID bits.
//! - [`budget`]: descriptors shared fairly between clients, and byte budgets.
//! - [`lookup`]: one confined lookup step, name rule included, as both doors walk.
//! - [`Export`]: an opened export (root, `/proc/self/fd`, policy, descriptor pool).
//! - [`policy::finish_create`]: ownership and exact permission bits of a new file.
//!
//! It speaks no protocol (no 9P, no FUSE types), owns no sockets, threads or sessions, and
//! keeps no table of clients' handles: each door keeps its own (fids, FUSE node ids).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod budget;
mod error;
mod export;
pub mod names;
pub mod policy;
pub mod sys;

use std::os::fd::{BorrowedFd, OwnedFd};

pub use error::{ExportError, ExportResult};
pub use export::{Export, OpenError};
pub use rustix::fs::Statx;

/// One confined lookup step: checks `name` with [`names::component`], opens it beneath `dir`
/// as an `O_PATH|O_NOFOLLOW` handle ([`sys::walk_one`]; a symlink is returned as itself,
/// never followed) and reads its attributes.
///
/// # Errors
/// [`ExportError::InvalidName`] for a name that is not one component, otherwise what the
/// kernel says (`ENOENT`, `ENOTDIR`, `EXDEV` for an escape `openat2` caught, ...).
pub fn lookup(dir: BorrowedFd<'_>, name: &[u8], openat2: bool) -> ExportResult<(OwnedFd, Statx)> {
    let name = names::component(name)?;
    let fd = sys::walk_one(dir, &name, openat2)?;
    let st = sys::stat(std::os::fd::AsFd::as_fd(&fd))?;
    Ok((fd, st))
}

/// Locks a mutex, going on with the data if a panicking thread poisoned it (the data is
/// counters and tables that stay consistent between statements).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
