//! `crossfs sync`: returns once every change made on the host so far is visible in a mount.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::args::SyncArgs;
use crate::mountinfo;

/// The attribute of a mount's root whose read is a sync (see crossfs-mount's `changes`).
const SYNC_XATTR: &str = "user.crossfs.sync";

pub fn run(args: SyncArgs) -> Result<()> {
    let root = mount_root(&args.path)?;
    let mut value = [0u8; 64];
    let n = rustix::fs::getxattr(&root, SYNC_XATTR, &mut value).with_context(|| {
        format!(
            "syncing the crossfs mount at {} (does its server stream change events?)",
            root.display()
        )
    })?;
    tracing::debug!("synced (marker {})", String::from_utf8_lossy(&value[..n]));
    Ok(())
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
        Some(m) => bail!(
            "{} is not in a crossfs mount (it is on the {} mount at {})",
            path.display(),
            m.fstype,
            m.mountpoint.display()
        ),
        None => bail!("{} is not in a crossfs mount", path.display()),
    }
}
