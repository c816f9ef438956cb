//! An opened export: the root handle, `/proc/self/fd`, the policy and the descriptor pool
//! that a door needs before it serves anyone.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::budget::FdPool;
use crate::handles::{HandleCache, PathHandle};
use crate::policy::Policy;
use crate::sys;

/// Why an export could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory could not be opened.
    #[error("cannot open export {path}: {source}")]
    Export {
        /// The export as given.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// `/proc/self/fd` is not procfs.
    #[error("/proc/self/fd is unavailable ({0}); crossfs needs procfs mounted at /proc")]
    NoProc(std::io::Error),
}

/// One exported directory, opened.
#[derive(Debug)]
pub struct Export {
    /// The export as given, for logs.
    pub path: PathBuf,
    /// `O_PATH` handle on the root; every handle a client holds descends from it.
    pub root: Arc<PathHandle>,
    /// The descriptors of the handles clients hold, kept as a cache.
    pub handles: Arc<HandleCache>,
    /// `O_PATH` handle on `/proc/self/fd`, through which handles are reopened.
    proc_fd: OwnedFd,
    /// Whether walks use `openat2(RESOLVE_BENEATH|...)`.
    pub openat2: bool,
    /// What clients may change.
    pub policy: Policy,
    /// Whether the server runs as root (then created files are given to the caller).
    pub is_root: bool,
    /// Open files held for clients (a handle's `O_PATH` descriptor is the cache's).
    pub fds: Arc<FdPool>,
    /// The open-file limit after raising it (for logs).
    pub fd_limit: u64,
    /// The root's device and inode number.
    pub root_dev_ino: (u64, u64),
    /// Top-level names with this prefix are not the clients' (the event hub's sync
    /// cookies): looking one up finds nothing, listings skip them, making or removing one
    /// is `EPERM`. While it is set (change events are on), [`AGENT_CONTROL_NAME`] is
    /// reserved as well.
    pub reserved_prefix: Option<Vec<u8>>,
}

/// The top-level name of the virtio door's control file, through which the guest's agent
/// reads the change stream (`crates/virtiofs`, `fs/agent`). Reserved like the sync cookies
/// whenever change events are on: the export's own file of that name, if any, is hidden.
pub const AGENT_CONTROL_NAME: &[u8] = b".crossfs-agent";

impl Export {
    /// Opens `path` (a directory) and `/proc/self/fd`, raises the open-file limit to its hard
    /// maximum and divides the descriptors (`fd_budget`, or the limit less an eighth) in
    /// two: half for the handle cache, half for open files.
    ///
    /// # Errors
    /// [`OpenError`].
    pub fn open(
        path: &Path,
        policy: Policy,
        fd_budget: Option<usize>,
    ) -> Result<Export, OpenError> {
        let export_err = |e: rustix::io::Errno| OpenError::Export {
            path: path.to_owned(),
            source: e.into(),
        };
        let root = sys::open_root(path).map_err(export_err)?;
        let st = sys::stat(root.as_fd()).map_err(export_err)?;
        let proc_fd = sys::open_proc_fd_dir().map_err(|e| OpenError::NoProc(e.into()))?;
        let openat2 = sys::has_openat2(root.as_fd());
        let limit = sys::raise_fd_limit();
        let budget = fd_budget.unwrap_or_else(|| FdPool::budget_for_limit(limit));
        let handles = HandleCache::new(&root, &proc_fd, budget / 2, openat2, true);
        let root = handles.root(root, &st);
        Ok(Export {
            path: path.to_owned(),
            root,
            handles,
            proc_fd,
            openat2,
            policy,
            is_root: sys::euid() == 0,
            fds: FdPool::new(budget - budget / 2),
            fd_limit: limit,
            root_dev_ino: (
                rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
                st.stx_ino,
            ),
            reserved_prefix: None,
        })
    }

    /// Whether `name` in a directory (`in_root`: the export root) is reserved (see
    /// [`Export::reserved_prefix`]).
    pub fn is_reserved(&self, in_root: bool, name: &[u8]) -> bool {
        in_root
            && self
                .reserved_prefix
                .as_ref()
                .is_some_and(|p| name.starts_with(p) || name == AGENT_CONTROL_NAME)
    }

    /// Refuses to make, remove or rename a reserved name.
    ///
    /// # Errors
    /// [`crate::ExportError::NotPermitted`].
    pub fn check_not_reserved(&self, in_root: bool, name: &[u8]) -> crate::ExportResult<()> {
        if self.is_reserved(in_root, name) {
            return Err(crate::ExportError::NotPermitted(
                "name reserved for change events",
            ));
        }
        Ok(())
    }

    /// The descriptor of `/proc/self/fd`.
    pub fn proc_fd(&self) -> BorrowedFd<'_> {
        self.proc_fd.as_fd()
    }
}
