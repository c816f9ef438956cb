//! `crossfs sync`: returns once every change made on the host so far is visible in a mount.

use anyhow::{Context, Result};

use crate::args::SyncArgs;

/// The attribute of a mount's root whose read is a sync (see crossfs-mount's `changes`).
const SYNC_XATTR: &str = "user.crossfs.sync";

pub fn run(args: SyncArgs) -> Result<()> {
    let mut value = [0u8; 64];
    let n = rustix::fs::getxattr(&args.mountpoint, SYNC_XATTR, &mut value).with_context(|| {
        format!(
            "syncing {} (is it a crossfs mount following change events?)",
            args.mountpoint.display()
        )
    })?;
    tracing::debug!("synced (marker {})", String::from_utf8_lossy(&value[..n]));
    Ok(())
}
