//! What a server exports and the limits it enforces.

use std::path::PathBuf;

/// Configuration of a [`crate::Server`]. `Default` gives sane limits and an empty export path,
/// which the caller must fill in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// The directory to export. Nothing outside it is reachable.
    pub export: PathBuf,
    /// The largest msize the server accepts; the negotiated msize is the smaller of this and
    /// the client's. At least [`crossfs_wire::MIN_MSIZE`].
    pub max_msize: u32,
    /// Refuse every mutation with `EROFS`.
    pub read_only: bool,
    /// Allow Tmknod of character and block devices, and opening existing ones (otherwise
    /// `EPERM`): a device node in the export would give the client the device.
    pub allow_devices: bool,
    /// Keep the set-user-ID and set-group-ID bits in modes clients set (Tlcreate, Tmkdir,
    /// Tmknod, Tsetattr). Off by default: a client could otherwise make setuid programs on
    /// the host, owned by any uid it names when the server runs as root. With it off, a
    /// file with either bit loses them when a client opens it for writing or truncates it
    /// (Linux exempts a root server's own writes from clearing them).
    pub allow_setuid: bool,
    /// Offer the crossfs extension of 9P2000.L (docs/protocol.md) to clients that ask for
    /// it. Off, every client gets plain 9P2000.L (for comparisons and tests).
    pub extensions: bool,
    /// Threads that execute requests that may block (reads from disk, writes, fsync, opening
    /// fifos, ...), per connection; the connection's reader runs the others itself.
    pub workers_per_connection: usize,
    /// Requests waiting for or running on workers, per connection. When reached, the server
    /// stops reading from that connection until one has been answered (back-pressure).
    pub max_in_flight: usize,
    /// Bytes of requests (whole frames) waiting for or running on workers, per connection.
    /// Past it the server stops reading from that connection, as for `max_in_flight`; one
    /// request is always admitted, however large (it is at most msize).
    pub max_buffered_bytes: usize,
    /// Connections served at once. One more is closed as soon as it is handed over, with a
    /// warning in the log; the others carry on.
    pub max_connections: usize,
    /// Fids one connection may hold; past it, requests that create fids get `EMFILE`.
    pub max_fids: usize,
    /// Largest extended attribute value (or list) read or written, in bytes.
    pub max_xattr_size: usize,
    /// Bytes of extended attribute values that one connection's xattr fids (Txattrwalk
    /// results not yet clunked, Txattrcreate values being written) may hold together; past
    /// it, the Txattrwalk or Twrite that would exceed it gets `ENOSPC`.
    pub max_pending_xattr_bytes: usize,
    /// Descriptors the server may hold for all clients together (fid handles, the
    /// directories fids were found in, open files). `None`: the open-file limit (raised to
    /// its hard maximum) less a reserve of an eighth, at least 64. The budget is per
    /// [`crate::Server`]; several servers in one process should divide the limit by hand.
    pub fd_budget: Option<usize>,
    /// A shared secret clients must present (Tauth, then a Twrite of the token to the auth
    /// fid, named as `afid` in Tattach); `None`: no authentication, Tauth is `EOPNOTSUPP`.
    pub auth_token: Option<AuthToken>,
    /// Send Rread payloads of regular files from the file to the socket with `splice(2)`,
    /// through a pipe per worker, instead of reading them into the server's memory first
    /// (`crate::splice`). Only where the connection is a socket or pipe handed over with
    /// [`crate::Server::serve_socket`]; anything the kernel refuses is copied as before.
    pub splice_reads: bool,
    /// Write the payloads of Twrite and Twriteattr requests over 64 KiB into the file with
    /// `splice(2)`, from the socket through a pipe, instead of reading them into the
    /// server's memory first (`crate::piped`). Only where the connection was handed over
    /// with [`crate::Server::serve_socket`]; anything the kernel refuses is copied as
    /// before.
    pub splice_writes: bool,
}

/// A shared secret. Its `Debug` form hides the bytes, so logging a configuration never
/// prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(Vec<u8>);

impl AuthToken {
    /// A token of these bytes.
    ///
    /// # Errors
    /// [`crate::ServerError::Config`] when empty or longer than 4096 bytes.
    pub fn new(bytes: Vec<u8>) -> Result<Self, crate::ServerError> {
        if bytes.is_empty() || bytes.len() > crate::ops::MAX_TOKEN {
            return Err(crate::ServerError::Config(
                "the token must hold between 1 and 4096 bytes",
            ));
        }
        Ok(AuthToken(bytes))
    }

    /// Whether `presented` is the token, in time that depends only on the lengths.
    pub(crate) fn matches(&self, presented: &[u8]) -> bool {
        presented.len() == self.0.len()
            && presented
                .iter()
                .zip(&self.0)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

impl std::fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuthToken({} bytes)", self.0.len())
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            export: PathBuf::new(),
            max_msize: crossfs_wire::DEFAULT_MSIZE,
            read_only: false,
            allow_devices: false,
            allow_setuid: false,
            extensions: true,
            workers_per_connection: 4,
            max_in_flight: 64,
            // Four 1 MiB writes: one per default worker.
            max_buffered_bytes: 4 * 1024 * 1024,
            max_connections: 256,
            max_fids: 65536,
            // Linux's XATTR_SIZE_MAX.
            max_xattr_size: 64 * 1024,
            // Sixteen values of the largest size Linux allows.
            max_pending_xattr_bytes: 1024 * 1024,
            fd_budget: None,
            auth_token: None,
            splice_reads: true,
            splice_writes: true,
        }
    }
}
