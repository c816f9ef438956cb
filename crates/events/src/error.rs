//! The crate's error type.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::BackendKind;

/// Why a hub could not start or a sync did not complete.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The export root could not be opened.
    #[error("cannot open export root {path}: {source}")]
    Root {
        /// The root as given.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The requested watcher could not be started.
    #[error("{backend:?} watcher unavailable: {source}")]
    Backend {
        /// The watcher asked for.
        backend: BackendKind,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The export root could not be prepared for sync cookies.
    #[error("sync cookies: {0}")]
    Cookies(io::Error),
    /// A cookie file could not be created.
    #[error("sync cookie: {0}")]
    Cookie(io::Error),
    /// The sync marker was not published in time.
    #[error("sync timed out after {0:?}")]
    SyncTimeout(Duration),
    /// The event thread could not be started.
    #[error("cannot start the event thread: {0}")]
    Thread(io::Error),
}
