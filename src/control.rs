//! The control endpoint: a unix socket that answers every connection with one JSON document
//! (the counters of a server or a mount) and closes. `crossfs stats` is its client.
//!
//! Reading statistics must never disturb the file traffic, so the endpoint has its own thread
//! and socket and shares nothing with the 9P connections but the counters.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// A running control endpoint; removes its socket file when dropped.
pub struct ControlEndpoint {
    path: PathBuf,
}

impl ControlEndpoint {
    /// Binds `path` (mode 0600: counters reveal file activity) and answers each connection
    /// with `report()` on a background thread.
    pub fn start(
        path: &Path,
        report: impl Fn() -> serde_json::Value + Send + 'static,
    ) -> Result<ControlEndpoint> {
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                bail!(
                    "control socket {} is in use by another process (stop it, or choose \
                     another --control PATH)",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing stale control socket {}", path.display()))?;
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("binding control socket {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting control socket {}", path.display()))?;
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    let mut doc = report().to_string();
                    doc.push('\n');
                    // A client that goes away early is not our problem.
                    let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
                    let _ = conn.write_all(doc.as_bytes());
                }
            })
            .context("starting the control thread")?;
        Ok(ControlEndpoint {
            path: path.to_owned(),
        })
    }
}

impl Drop for ControlEndpoint {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How long a control endpoint may take to start answering: it answers at once, so a
/// socket silent for this long is something else (a 9P socket waits for its client).
const FIRST_BYTE_WAIT: Duration = Duration::from_secs(1);

/// The control socket every `crossfs mount` serves besides any `--control`, so that
/// `crossfs stats MOUNTPOINT` finds it: named by the mount's device number (unique among
/// live mounts, whatever path reaches them), under /run/crossfs/mounts for root and
/// $XDG_RUNTIME_DIR/crossfs/mounts for other users (`None` without either).
pub fn mount_socket(device: u64) -> Option<PathBuf> {
    let dir = if rustix::process::geteuid().is_root() {
        PathBuf::from("/run/crossfs/mounts")
    } else {
        PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?).join("crossfs/mounts")
    };
    let (major, minor) = (rustix::fs::major(device), rustix::fs::minor(device));
    Some(dir.join(format!("{major}:{minor}.ctl")))
}

/// Reads the JSON document a control endpoint serves.
pub fn query(path: &Path) -> Result<serde_json::Value> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("control socket {}", path.display()))?;
    if !std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) {
        bail!(
            "{} is not a control socket (give the --control PATH of `crossfs serve` or \
             `crossfs mount`, or a mount point of `crossfs mount`)",
            path.display()
        );
    }
    let mut conn = UnixStream::connect(path).with_context(|| {
        format!(
            "connecting to control socket {} (is the `crossfs serve --control` or \
             `crossfs mount` that made it still running?)",
            path.display()
        )
    })?;
    conn.set_read_timeout(Some(FIRST_BYTE_WAIT))?;
    let mut first = [0u8; 1];
    match conn.read(&mut first) {
        Ok(1) => {}
        Ok(_) => bail!("control socket {} closed without an answer", path.display()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            bail!(
                "{} said nothing within {} s: it is not a control socket (a 9P --listen \
                 socket waits for its client to speak first); give the --control PATH of \
                 `crossfs serve` or `crossfs mount`, or a mount point",
                path.display(),
                FIRST_BYTE_WAIT.as_secs()
            )
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("reading from control socket {}", path.display()))
        }
    }
    // The rest follows at once; the longer wait only guards against a stuck peer.
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest)
        .with_context(|| format!("reading from control socket {}", path.display()))?;
    let mut bytes = first.to_vec();
    bytes.extend(rest);
    let text = String::from_utf8_lossy(&bytes);
    serde_json::from_str(&text).with_context(|| {
        format!(
            "control socket {} sent something that is not JSON",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_the_current_report_to_each_client() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl");
        let n = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let n2 = n.clone();
        let _ep = ControlEndpoint::start(
            &path,
            move || serde_json::json!({ "n": n2.load(std::sync::atomic::Ordering::SeqCst) }),
        )
        .unwrap();
        assert_eq!(query(&path).unwrap()["n"], 0);
        n.store(7, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(query(&path).unwrap()["n"], 7);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A second endpoint on a live socket is refused rather than stealing it.
        assert!(ControlEndpoint::start(&path, || serde_json::json!({})).is_err());
    }
}
