//! Typed errors inside the server, mapped to a Linux errno only at the protocol edge.

use std::path::PathBuf;

use crossfs_wire::Fid;
use rustix::io::Errno;

/// Why a [`crate::Server`] could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is unusable.
    #[error("invalid server configuration: {0}")]
    Config(&'static str),
    /// The export directory could not be opened.
    #[error("cannot open export {path}: {source}")]
    Export {
        /// The configured export.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// `/proc/self/fd` is unavailable; fids could not be reopened safely.
    #[error("/proc/self/fd is unavailable ({0}); crossfs-server needs procfs mounted at /proc")]
    NoProc(std::io::Error),
}

/// Why one request failed. Every variant has an errno for Rlerror.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpError {
    /// A system call failed.
    #[error("{0}")]
    Os(#[from] Errno),
    /// The fid is not known on this connection.
    #[error("unknown fid {0:?}")]
    UnknownFid(Fid),
    /// The fid is in use where a new one was required.
    #[error("fid {0:?} is already in use")]
    FidInUse(Fid),
    /// The connection holds as many fids as it may.
    #[error("too many fids")]
    TooManyFids,
    /// The connection holds its share of the server's descriptors.
    #[error("descriptor share used up")]
    TooManyFds,
    /// The connection's xattr fids hold as many value bytes as they may.
    #[error("pending xattr values use up the connection's budget")]
    XattrBudget,
    /// A name was empty, ".", "..", or held "/" or NUL.
    #[error("invalid name")]
    InvalidName,
    /// The export is read-only.
    #[error("read-only export")]
    ReadOnly,
    /// The request does not make sense for this fid or these arguments.
    #[error("invalid request: {0}")]
    Invalid(&'static str),
    /// The operation is refused by policy.
    #[error("not permitted: {0}")]
    NotPermitted(&'static str),
    /// The message is not supported.
    #[error("not supported")]
    NotSupported,
}

impl OpError {
    /// The Linux errno carried by Rlerror.
    pub(crate) fn errno(&self) -> i32 {
        match self {
            OpError::Os(e) => e.raw_os_error(),
            OpError::UnknownFid(_) => libc::EBADF,
            OpError::FidInUse(_) => libc::EBADF,
            OpError::TooManyFids => libc::EMFILE,
            OpError::TooManyFds => libc::EMFILE,
            OpError::XattrBudget => libc::ENOSPC,
            OpError::InvalidName => libc::EINVAL,
            OpError::ReadOnly => libc::EROFS,
            OpError::Invalid(_) => libc::EINVAL,
            OpError::NotPermitted(_) => libc::EPERM,
            OpError::NotSupported => libc::EOPNOTSUPP,
        }
    }
}

impl From<crossfs_export::ExportError> for OpError {
    fn from(e: crossfs_export::ExportError) -> Self {
        use crossfs_export::ExportError as E;
        match e {
            E::Os(errno) => OpError::Os(errno),
            E::InvalidName => OpError::InvalidName,
            E::Nul => OpError::Invalid("NUL inside a string"),
            E::ReadOnly => OpError::ReadOnly,
            E::NotPermitted(why) => OpError::NotPermitted(why),
            E::TooManyFds => OpError::TooManyFds,
            E::ByteBudget => OpError::XattrBudget,
            E::Vanished => OpError::Os(rustix::io::Errno::NOENT),
        }
    }
}

/// Shorthand for request handlers.
pub(crate) type OpResult<T> = Result<T, OpError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_are_linux_values() {
        assert_eq!(OpError::Os(Errno::NOENT).errno(), 2);
        assert_eq!(OpError::UnknownFid(Fid(3)).errno(), 9);
        assert_eq!(OpError::TooManyFids.errno(), 24);
        assert_eq!(OpError::TooManyFds.errno(), 24);
        assert_eq!(OpError::XattrBudget.errno(), 28);
        assert_eq!(OpError::ReadOnly.errno(), 30);
        assert_eq!(OpError::NotSupported.errno(), 95);
    }
}
