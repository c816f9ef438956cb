//! The virtio door to an export: a vhost-user-fs backend, so that a QEMU or
//! cloud-hypervisor guest mounts the export with its kernel's own virtiofs driver
//! (`mount -t virtiofs TAG /mnt`), with nothing installed in the guest.
//!
//! # What it owns, what it does not
//! - [`fuse`]: the FUSE ABI (`crossfs-fuse-abi`, shared with the mount); a decoder from bytes
//!   that never panics and reply encoders. No I/O.
//! - `fs`: FUSE requests answered from the export core (`crossfs-export`): node ids and
//!   file handles over `O_PATH` and open descriptors. Confinement (one-component names,
//!   `openat2` walks beneath the root, no symlink followed), read-only, device and set-id
//!   policy, and the descriptor budget are the core's, the same functions the 9P server
//!   calls.
//! - `device`: the vhost-user-fs device on rust-vmm's `vhost-user-backend`: the hiprio
//!   queue and `request_queues` request queues, one thread each; it moves buffers between
//!   descriptor chains and the file system. `guest`: a chain's buffers in guest memory
//!   (vm-memory volatile slices), every descriptor checked against the guest's memory map.
//!   A READ's file data is read straight into them and a WRITE's written straight from
//!   them (`fs/in_guest.rs`, through the core's `sys::preadv_volatile` and
//!   `sys::pwritev_volatile`); everything else is copied.
//! - `fs/agent`: the guest agent's door: the hidden control file through which it reads
//!   the export's change events (reads wait for events, parked off their queue), and its
//!   replays of them, answered without touching the export (docs/virtiofs-agent.md).
//! - [`Stats`]: counters per FUSE opcode, with READ and WRITE sizes; the bytes of file data
//!   by the path they took ([`DataPath`]); the agent's replays apart.
//!
//! It does not parse command lines, serve 9P, or watch the export (it subscribes to the
//! event hub it is given).
//!
//! # Connections
//! [`VirtioFs::serve`] listens on a unix socket for the VMM (`-chardev socket,path=...`),
//! made at a path or handed over already listening ([`Socket`]), serves it until it goes
//! away, then listens again: a guest that reboots sends FUSE_INIT again and starts afresh;
//! a VMM that exits and comes back reconnects to the same socket. Each connection gets a
//! fresh node table. With [`VirtioFs::exit_with_vmm`] it returns instead, as virtiofsd
//! exits.
//!
//! # Caching (FUSE_INIT)
//! Offered: FUSE_MAX_PAGES with `min(--max-pages, queue size - 4)` pages per request (the
//! kernel's own cap for virtio-fs), READDIRPLUS (auto), FUSE_CACHE_SYMLINKS, parallel
//! directory operations, atomic O_TRUNC; writeback caching only when asked for
//! ([`FsConfig::writeback`], with [`CacheMode::Always`]: as virtiofsd, `always` alone does
//! not turn it on, since the guest then asks again for the attributes of every file it
//! closed);
//! FUSE_SUBMOUNTS with [`FsConfig::announce_submounts`], a directory on another device than
//! its parent's then being flagged `FUSE_ATTR_SUBMOUNT` in lookups and listings.
//! A missing name is answered with a negative entry (node id 0) that the guest keeps for the
//! negative timeout. What was negotiated is logged and shown by `crossfs stats`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod device;
mod fs;
mod guest;
pub use crossfs_fuse_abi as fuse;
mod stats;

use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;

use crossfs_export::Export;
use vhost_user_backend::VhostUserDaemon;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

pub use device::MAX_QUEUE_SIZE;
pub use fs::{CacheMode, FsConfig, FuseFs, Handled, LaterReplies};
pub use stats::AgentCounters;
pub use stats::{DataPath, Negotiated, Stats};

/// Why the device could not be served.
#[derive(Debug, thiserror::Error)]
pub enum VirtioFsError {
    /// The vhost-user daemon failed (socket, protocol).
    #[error("vhost-user-fs on {socket}: {message}")]
    Daemon {
        /// The socket: its path, or `fd:N` for an inherited one.
        socket: String,
        /// What rust-vmm's daemon said.
        message: String,
    },
}

/// Where the VMM connects.
#[derive(Debug)]
pub enum Socket {
    /// A unix socket made at this path (a stale one there is replaced).
    Path(PathBuf),
    /// A listening unix socket made by whoever started us (virtiofsd's `--fd`), with the
    /// name to log it by.
    Listening(UnixListener, String),
}

impl std::fmt::Display for Socket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Socket::Path(path) => write!(f, "{}", path.display()),
            Socket::Listening(_, name) => f.write_str(name),
        }
    }
}

/// A vhost-user-fs device serving one export on one socket.
#[derive(Debug)]
pub struct VirtioFs {
    export: Arc<Export>,
    socket: Socket,
    config: FsConfig,
    request_queues: usize,
    stats: Arc<Stats>,
    exit_with_vmm: bool,
    events: Option<Arc<crossfs_events::EventHub>>,
}

impl VirtioFs {
    /// A device for `export` on `socket` with `request_queues` request queues (at least 1).
    pub fn new(
        export: Arc<Export>,
        socket: impl Into<Socket>,
        config: FsConfig,
        request_queues: usize,
    ) -> VirtioFs {
        VirtioFs {
            export,
            socket: socket.into(),
            config,
            request_queues: request_queues.max(1),
            stats: Arc::new(Stats::default()),
            exit_with_vmm: false,
            events: None,
        }
    }

    /// Streams the export's change events (`hub` watches the same export) to a guest
    /// agent through the hidden control file, and answers its replays
    /// (docs/virtiofs-agent.md). The export's reserved names must include the hub's.
    pub fn with_events(mut self, hub: Option<Arc<crossfs_events::EventHub>>) -> VirtioFs {
        self.events = hub;
        self
    }

    /// Makes [`VirtioFs::serve`] return once the first VMM goes away, as virtiofsd does,
    /// rather than wait for another.
    pub fn exit_with_vmm(mut self, exit: bool) -> VirtioFs {
        self.exit_with_vmm = exit;
        self
    }

    /// The device's counters.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Serves one VMM connection after another, forever (a VMM that goes away is waited for
    /// again on the same socket), or until the first goes away with
    /// [`VirtioFs::exit_with_vmm`].
    ///
    /// # Errors
    /// [`VirtioFsError::Daemon`] when the socket cannot be bound or the daemon cannot be
    /// made; a connection that fails is logged and the next one is awaited.
    pub fn serve(&self) -> Result<(), VirtioFsError> {
        let name = self.socket.to_string();
        let err = |message: String| VirtioFsError::Daemon {
            socket: name.clone(),
            message,
        };
        // One listening socket for the life of the device: a VMM that comes back finds it.
        let mut listener = match &self.socket {
            Socket::Path(path) => {
                vhost::vhost_user::Listener::new(path, true).map_err(|e| err(e.to_string()))?
            }
            Socket::Listening(listener, _) => listener
                .try_clone()
                .map(vhost::vhost_user::Listener::from)
                .map_err(|e| err(e.to_string()))?,
        };
        loop {
            let fs = FuseFs::new(self.export.clone(), self.config.clone(), self.stats.clone())
                .with_events(self.events.clone());
            let backend = device::FsBackend::new(fs, self.request_queues);
            let mut daemon = VhostUserDaemon::new(
                "crossfs-virtiofs".into(),
                backend,
                GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            )
            .map_err(|e| err(e.to_string()))?;
            tracing::info!(socket = %name, "vhost-user-fs: waiting for the VMM");
            if let Err(e) = daemon.start(&mut listener) {
                tracing::warn!(socket = %name, "vhost-user-fs: accept: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
            self.stats.record_connection();
            tracing::info!(socket = %name, "vhost-user-fs: VMM connected");
            match daemon.wait() {
                Ok(())
                | Err(vhost_user_backend::Error::HandleRequest(
                    vhost::vhost_user::Error::Disconnected
                    | vhost::vhost_user::Error::PartialMessage,
                )) => {
                    tracing::info!(socket = %name, "vhost-user-fs: VMM disconnected")
                }
                Err(e) => {
                    tracing::warn!(socket = %name, "vhost-user-fs: connection ended: {e}")
                }
            }
            // Dropping the daemon stops its queue threads and closes the guest's node table.
            drop(daemon);
            if self.exit_with_vmm {
                return Ok(());
            }
        }
    }
}

impl From<PathBuf> for Socket {
    fn from(path: PathBuf) -> Socket {
        Socket::Path(path)
    }
}
