//! Why a confined operation was refused, each with the errno a door answers.

use rustix::io::Errno;

/// Why the export core refused or failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A system call failed.
    #[error("{0}")]
    Os(#[from] Errno),
    /// A name was empty, ".", "..", or held "/" or NUL.
    #[error("invalid name")]
    InvalidName,
    /// A string that must become a C string held a NUL.
    #[error("NUL inside a string")]
    Nul,
    /// The export is read-only.
    #[error("read-only export")]
    ReadOnly,
    /// Refused by policy (device nodes, reserved names).
    #[error("not permitted: {0}")]
    NotPermitted(&'static str),
    /// The client's share of descriptors is used up.
    #[error("descriptor share used up")]
    TooManyFds,
    /// A byte budget (pending xattr values) is used up.
    #[error("byte budget used up")]
    ByteBudget,
    /// A file was made, and its name led nowhere right after: another client removed or
    /// renamed it at once. The creation happened; a door that can answer it without the
    /// file's handle does (9P's Rmkdir, Rsymlink, Rmknod), the others say ENOENT.
    #[error("made, then removed or renamed by another client at once")]
    Vanished,
}

impl ExportError {
    /// The Linux errno a door answers with.
    pub fn errno(&self) -> i32 {
        match self {
            ExportError::Os(e) => e.raw_os_error(),
            ExportError::InvalidName | ExportError::Nul => libc::EINVAL,
            ExportError::ReadOnly => libc::EROFS,
            ExportError::NotPermitted(_) => libc::EPERM,
            ExportError::TooManyFds => libc::EMFILE,
            ExportError::ByteBudget => libc::ENOSPC,
            ExportError::Vanished => libc::ENOENT,
        }
    }
}

/// Shorthand.
pub type ExportResult<T> = Result<T, ExportError>;
