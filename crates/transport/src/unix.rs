//! Unix-domain stream sockets: binding with safe permissions and stale-file
//! handling, connecting, and removing the socket file afterwards.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rustix::fs::Mode;
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::addr::{check_unix_path, Addr};
use crate::error::TransportError;
use crate::options::{apply_buffers, ListenOptions, SocketOptions};
use crate::socket::{self, peer_name, stream_socket, BACKLOG};
use crate::stream::Stream;

/// The socket file a listener created, identified so that it is removed
/// only if it is still that file.
#[derive(Debug)]
pub(crate) struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// Removes the file if it is still the one we created.
    pub(crate) fn remove(&self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.dev() == self.dev && meta.ino() == self.ino => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!(path = %self.path.display(), "cannot remove socket file: {e}");
                }
            }
            _ => tracing::debug!(
                path = %self.path.display(),
                "socket file already gone or replaced; leaving it"
            ),
        }
    }
}

fn sockaddr(addr: &Addr, path: &Path) -> Result<SocketAddrUnix, TransportError> {
    check_unix_path(&addr.to_string(), path)?;
    SocketAddrUnix::new(path).map_err(|e| TransportError::sys(addr, "socket address", e))
}

/// Binds and listens on a unix socket at `path`.
pub(crate) fn bind(
    addr: &Addr,
    path: &Path,
    opts: &ListenOptions,
) -> Result<(OwnedFd, SocketFile), TransportError> {
    let sa = sockaddr(addr, path)?;
    remove_stale(addr, path, &sa)?;
    let fd =
        stream_socket(AddressFamily::UNIX).map_err(|e| TransportError::sys(addr, "socket", e))?;
    // Linux creates the socket file with the socket inode's mode minus the
    // umask, so restricting the inode first means the file is never more
    // permissive than asked, not even briefly.
    let mode = Mode::from_raw_mode(opts.unix_mode & 0o777);
    rustix::fs::fchmod(&fd, mode).map_err(|e| TransportError::sys(addr, "fchmod", e))?;
    apply_buffers(fd.as_fd(), AddressFamily::UNIX, addr, &opts.stream)?;
    socket::retry(|| rustix::net::bind(&fd, &sa)).map_err(|e| match e {
        Errno::ADDRINUSE => TransportError::AddrInUse {
            addr: addr.to_string(),
        },
        e => TransportError::sys(addr, "bind", e),
    })?;
    let meta = std::fs::symlink_metadata(path).map_err(|source| TransportError::Sys {
        addr: addr.to_string(),
        op: "lstat",
        source,
    })?;
    let file = SocketFile {
        path: path.to_owned(),
        dev: meta.dev(),
        ino: meta.ino(),
    };
    // The umask may have removed bits that were asked for; set them exactly.
    let finish = || -> Result<(), TransportError> {
        rustix::fs::chmod(path, mode).map_err(|e| TransportError::sys(addr, "chmod", e))?;
        rustix::net::listen(&fd, BACKLOG).map_err(|e| TransportError::sys(addr, "listen", e))
    };
    if let Err(e) = finish() {
        file.remove();
        return Err(e);
    }
    Ok((fd, file))
}

/// Removes an existing socket file at `path` if nothing answers on it.
fn remove_stale(addr: &Addr, path: &Path, sa: &SocketAddrUnix) -> Result<(), TransportError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(TransportError::Sys {
                addr: addr.to_string(),
                op: "lstat",
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(TransportError::PathNotSocket {
            addr: addr.to_string(),
        });
    }
    // A non-blocking probe: a live listener with a full backlog answers
    // EAGAIN instead of making us wait.
    let probe = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(|e| TransportError::sys(addr, "socket", e))?;
    match socket::retry(|| rustix::net::connect(&probe, sa)) {
        Ok(()) | Err(Errno::AGAIN) => Err(TransportError::AddrInUse {
            addr: addr.to_string(),
        }),
        Err(Errno::CONNREFUSED) => match std::fs::remove_file(path) {
            Ok(()) => {
                tracing::info!(%addr, "removed stale socket file (nothing was listening on it)");
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(TransportError::Sys {
                addr: addr.to_string(),
                op: "unlink stale socket",
                source,
            }),
        },
        Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(TransportError::sys(
            addr,
            "connect (probing existing socket)",
            e,
        )),
    }
}

/// Connects to the unix socket at `path`.
pub(crate) fn connect(
    addr: &Addr,
    path: &Path,
    opts: &SocketOptions,
) -> Result<Stream, TransportError> {
    let sa = sockaddr(addr, path)?;
    let fd =
        stream_socket(AddressFamily::UNIX).map_err(|e| TransportError::sys(addr, "socket", e))?;
    apply_buffers(fd.as_fd(), AddressFamily::UNIX, addr, opts)?;
    socket::connect(fd.as_fd(), &sa).map_err(|e| TransportError::sys(addr, "connect", e))?;
    let peer = peer_name(fd.as_fd(), addr);
    Ok(Stream::new(fd, addr.clone(), peer, None))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use crate::testutil::{echo, errno};
    use crate::{connect, Addr, ListenOptions, Listener, SocketOptions, TransportError};

    fn mode(path: &std::path::Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn listen_connect_echo_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crossfs.sock");
        let addr = Addr::Unix(path.clone());
        let listener = Listener::bind(&addr, &ListenOptions::default()).unwrap();
        assert_eq!(listener.local_addr(), &addr);
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
        assert_eq!(mode(&path), 0o600);

        let mut client = connect(&addr, &SocketOptions::default()).unwrap();
        let mut server = listener.accept().unwrap();
        echo(&mut client, &mut server);
        let pid = std::process::id();
        assert_eq!(
            server.peer(),
            format!(
                "{addr} (pid {pid}, uid {})",
                rustix::process::getuid().as_raw()
            )
        );
        assert!(
            client.peer().starts_with(&format!("{addr} (pid {pid},")),
            "{}",
            client.peer()
        );

        drop(listener);
        assert!(
            !path.exists(),
            "dropping the listener removes its socket file"
        );
        // Established connections outlive the listener.
        echo(&mut client, &mut server);
    }

    #[test]
    fn mode_is_exact_despite_umask() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let opts = ListenOptions {
            unix_mode: 0o666,
            ..ListenOptions::default()
        };
        let _listener = Listener::bind(&Addr::Unix(path.clone()), &opts).unwrap();
        assert_eq!(mode(&path), 0o666);
    }

    #[test]
    fn stale_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap()); // leaves the file
        assert!(path.exists());
        let addr = Addr::Unix(path.clone());
        let listener = Listener::bind(&addr, &ListenOptions::default()).unwrap();
        let mut client = connect(&addr, &SocketOptions::default()).unwrap();
        echo(&mut client, &mut listener.accept().unwrap());
    }

    #[test]
    fn live_socket_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let live = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let addr = Addr::Unix(path.clone());
        let err = Listener::bind(&addr, &ListenOptions::default()).unwrap_err();
        assert!(matches!(err, TransportError::AddrInUse { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            format!("{addr}: address in use: another process is listening on this socket")
        );
        // The live listener still works.
        let _c = std::os::unix::net::UnixStream::connect(&path).unwrap();
        live.accept().unwrap();
    }

    #[test]
    fn non_socket_file_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("precious");
        std::fs::write(&path, b"data").unwrap();
        let addr = Addr::Unix(path.clone());
        let err = Listener::bind(&addr, &ListenOptions::default()).unwrap_err();
        assert!(matches!(err, TransportError::PathNotSocket { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("precious: path exists and is not a socket"),
            "{err}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
    }

    #[test]
    fn drop_leaves_a_replaced_file_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener =
            Listener::bind(&Addr::Unix(path.clone()), &ListenOptions::default()).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"someone else's").unwrap();
        drop(listener);
        assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    }

    #[test]
    fn connect_error_names_address_and_call() {
        let dir = tempfile::tempdir().unwrap();
        let addr = Addr::Unix(dir.path().join("missing"));
        let err = connect(&addr, &SocketOptions::default()).unwrap_err();
        assert!(
            matches!(err, TransportError::Sys { op: "connect", .. }),
            "{err}"
        );
        assert_eq!(errno(&err), libc::ENOENT);
        assert!(
            err.to_string()
                .starts_with(&format!("{addr}: connect failed: ")),
            "{err}"
        );
    }

    #[test]
    fn overlong_path_is_a_parse_error() {
        let addr = Addr::Unix(format!("/{}", "x".repeat(200)).into());
        let err = connect(&addr, &SocketOptions::default()).unwrap_err();
        assert!(
            matches!(
                err,
                TransportError::Parse(crate::AddrParseError::PathTooLong { .. })
            ),
            "{err}"
        );
    }
}
