//! `crossfs sync`: returns once every change made on the host so far is visible in a mount.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::args::SyncArgs;
use crate::mountinfo;

/// The attribute of a mount's root whose read is a sync (see crossfs-mount's `changes`).
const SYNC_XATTR: &str = "user.crossfs.sync";

/// How long the mount waits for a sync, in all (crossfs-mount's `changes::SYNC_TIMEOUT`).
const SYNC_TIMEOUT_SECS: u64 = 20;

pub fn run(args: SyncArgs) -> Result<()> {
    let root = mount_root(&args.path)?;
    let mut value = [0u8; 64];
    let n = rustix::fs::getxattr(&root, SYNC_XATTR, &mut value).map_err(|e| {
        anyhow::anyhow!(
            "syncing the crossfs mount at {}: {}",
            root.display(),
            why(e, &root)
        )
    })?;
    tracing::debug!("synced (marker {})", String::from_utf8_lossy(&value[..n]));
    Ok(())
}

/// What a failed sync means, in words: the errno alone misleads ("Connection timed out"
/// when the server is there and the mount has only not caught up yet).
fn why(e: rustix::io::Errno, root: &Path) -> String {
    use rustix::io::Errno;
    match e {
        Errno::TIMEDOUT => format!(
            "the mount did not catch up with the export's changes within \
             {SYNC_TIMEOUT_SECS} s (the server or the mount's change feed is that far \
             behind, or the event connection was lost meanwhile); changes made before the \
             sync may not show yet. Try again"
        ),
        Errno::AGAIN => "too many syncs are waiting in this mount already; try again".into(),
        Errno::NOSPC | Errno::DQUOT | Errno::ROFS => format!(
            "the server could not make its sync marker, a file at the top of the export:              {e} (a sync needs a free inode there; a full or read-only export cannot sync)"
        ),
        Errno::NOTSUP | Errno::NODATA if is_virtiofs(root) => "no `crossfs agent` follows \
             this virtiofs mount (start it: `crossfs agent MOUNTPOINT`, as root), or its \
             server is not `crossfs serve` with change events on"
            .into(),
        Errno::NOTCONN => "the `crossfs agent` of this virtiofs mount stopped during the sync; \
             try again"
            .into(),
        Errno::NOTSUP | Errno::NODATA => match change_events(root).as_deref() {
            Some("off") => "the mount does not follow change events: it was mounted with \
                 --no-events (fstab: no-events), so there is nothing to wait for; host \
                 changes show as its --cache timeouts allow"
                .into(),
            Some("none from the server") => "the mount does not follow change events: its \
                 server streams none (not a crossfs server, or `crossfs serve --events off`)"
                .into(),
            _ => "the mount does not follow change events (mounted with --no-events, or its \
                 server streams none)"
                .into(),
        },
        _ => format!("the mount or its server failed the sync: {e}"),
    }
}

/// Why the mount at `root` follows no change events, as its control socket reports it
/// (`change_events`: "off" or "none from the server"); `None` if it cannot be asked.
fn is_virtiofs(root: &Path) -> bool {
    let Ok(mounts) = mountinfo::mounts() else {
        return false;
    };
    mountinfo::containing(&mounts, root).is_some_and(|m| m.fstype == "virtiofs")
}

fn change_events(root: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let socket = crate::control::mount_socket(std::fs::metadata(root).ok()?.dev())?;
    let doc = crate::control::query(&socket).ok()?;
    doc["change_events"].as_str().map(str::to_owned)
}

/// The mount point of the crossfs mount `path` is in. The path need not exist yet (a file the
/// host has just made is what one syncs for): its nearest existing ancestor decides.
fn mount_root(path: &Path) -> Result<PathBuf> {
    let canonical = path
        .ancestors()
        .filter(|p| !p.as_os_str().is_empty())
        .chain([Path::new(".")])
        .find_map(|p| p.canonicalize().ok())
        .with_context(|| format!("resolving {}", path.display()))?;
    let mounts = mountinfo::mounts().context("reading /proc/self/mountinfo")?;
    match mountinfo::containing(&mounts, &canonical) {
        Some(m) if m.crossfs_addr().is_some() => Ok(m.mountpoint.clone()),
        // Served by `crossfs serve`'s virtio door, with `crossfs agent` following it.
        Some(m) if m.fstype == "virtiofs" => Ok(m.mountpoint.clone()),
        Some(m) => bail!(
            "{} is not in a crossfs mount (it is on the {} mount at {})",
            path.display(),
            m.fstype,
            m.mountpoint.display()
        ),
        None => bail!("{} is not in a crossfs mount", path.display()),
    }
}
