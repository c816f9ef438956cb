//! The export core both doors of crossfs share: the 9P server (`crossfs-server`) and the
//! virtio door (`crossfs-virtiofs`) reach exported files only through [`Export`]'s
//! operations, so each rule (confinement, names, reserved names, policy, ownership,
//! descriptor budget) exists once. The doors are translators: protocol in, one core call,
//! protocol out.
//!
//! # What it owns, what it does not
//! - [`sys`]: every system call on exported files, and the only `unsafe` (each block with
//!   its `SAFETY:`). Files are reached through `O_PATH` descriptors, one name at a time with
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`
//!   ([`sys::walk_one`]), and reopened through `/proc/self/fd` ([`sys::reopen`]).
//! - [`names`]: the rule that a name from a client is one component ("", ".", "..", "/" and
//!   NUL refused; longer than 255 bytes is `ENAMETOOLONG`).
//! - [`policy`]: read-only, device nodes, set-user-ID and set-group-ID bits.
//! - [`handles`]: the handles clients hold, whose `O_PATH` descriptors are a cache: closed
//!   when the budget is spent, opened again on demand (by file handle, or by a confined walk
//!   that must find the same inode).
//! - [`budget`]: open files shared fairly between clients, and byte budgets.
//! - [`memory`]: bytes held, counted from what was allocated, for the doors' statistics.
//! - [`Export`]: an opened export (root, `/proc/self/fd`, policy, descriptor pool, reserved
//!   names) and the operations both doors carry, each written once (`ops.rs`): lookup,
//!   list, mkdir, symlink, mknod, link, rename, unlink, create, tmpfile, open, setattr,
//!   fallocate and the extended attribute changes. Each does the writable check, the name
//!   rule, the reserved names, the policy, the system call, the new file's owner and mode
//!   ([`policy::finish_create`]) and its attributes; a door only translates.
//!
//! It speaks no protocol (no 9P, no FUSE types), owns no sockets, threads or sessions, and
//! keeps no table of clients' handles: each door keeps its own (fids, FUSE node ids).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod budget;
mod error;
mod export;
pub mod handles;
pub mod memory;
pub mod names;
mod ops;
pub mod policy;
pub mod sys;

pub use error::{ExportError, ExportResult};
pub use export::{Export, OpenError, AGENT_CONTROL_NAME};
pub use ops::{open_writes, Caller, Created, Dir, Made, SetAttr};
pub use rustix::fs::Statx;

/// Locks a mutex, going on with the data if a panicking thread poisoned it: the host's
/// crates (the core, both doors) keep only counters and tables under their mutexes, each
/// consistent between statements, so one panicked request must not stop the others.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
