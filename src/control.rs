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
                    "control socket {} is in use by another process",
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

/// Reads the JSON document a control endpoint serves.
pub fn query(path: &Path) -> Result<serde_json::Value> {
    let mut conn = UnixStream::connect(path).with_context(|| {
        format!(
            "connecting to control socket {} (is `crossfs serve --control` or `crossfs mount --control` running?)",
            path.display()
        )
    })?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut text = String::new();
    conn.read_to_string(&mut text)
        .with_context(|| format!("reading from control socket {}", path.display()))?;
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
