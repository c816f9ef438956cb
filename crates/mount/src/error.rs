//! The mount's error type.

use std::io;

/// Why a mount could not be made or ended badly.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The configuration is not usable.
    #[error("invalid mount configuration: {0}")]
    InvalidConfig(String),
    /// Mounting (opening /dev/fuse, mount(2), the FUSE handshake) failed.
    #[error("cannot mount at {mountpoint}: {cause}")]
    Mount {
        /// Where the mount was attempted.
        mountpoint: String,
        /// The underlying error (in the message, so not also a `source`: a report that
        /// prints the chain would say it twice).
        cause: io::Error,
    },
    /// The FUSE session failed while mounted.
    #[error("FUSE session failed: {0}")]
    Session(io::Error),
    /// Unmounting failed.
    #[error("cannot unmount {mountpoint}: {cause}")]
    Unmount {
        /// The mount point.
        mountpoint: String,
        /// The underlying error (in the message, as for `Mount`).
        cause: io::Error,
    },
}
