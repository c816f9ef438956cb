//! `crossfs agent MOUNTPOINT`: in a guest, follows the host's changes for a virtiofs mount
//! of `crossfs serve` and replays each through the guest kernel, so that the guest's
//! watchers see them and its caches follow the host (docs/virtiofs-agent.md).
//!
//! The stream comes through the virtiofs device itself: reads of the door's hidden control
//! file, which wait for events. Each batch read is replayed in full before the next read
//! (the next read tells the door the batch is done, which ends the syncs it carried). The
//! calls are `crossfs_mount::replay_calls`, the ones `crossfs mount` replays with; the door
//! answers them itself, so nothing is made, removed or changed on the host.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use crossfs_events::{Event, EventKind, RelPath};
use crossfs_export::AGENT_CONTROL_NAME;
use crossfs_mount::replay_calls::{self, DirOnMount};

use crate::args::AgentArgs;
use crate::mountinfo;

/// Bytes asked for by one read of the stream: less than any FUSE request may carry (the
/// kernel would split a larger read, and a split read would wait for more events).
const READ_BYTES: usize = 64 << 10;

/// How long to wait before opening the stream again after it ended or failed.
const RETRY: Duration = Duration::from_secs(1);

pub fn run(args: AgentArgs) -> Result<()> {
    let mountpoint = virtiofs_mountpoint(&args.mountpoint)?;
    tracing::info!(mountpoint = %mountpoint.display(), "following the host's changes");
    loop {
        match follow(&mountpoint) {
            Ok(()) => tracing::info!("the change stream ended; opening it again"),
            Err(e) => tracing::warn!("{e:#}; trying again"),
        }
        std::thread::sleep(RETRY);
    }
}

/// The mount point of the virtiofs mount at `path`.
fn virtiofs_mountpoint(path: &Path) -> Result<PathBuf> {
    let canonical = path
        .canonicalize()
        .with_context(|| format!("resolving {}", path.display()))?;
    let mounts = mountinfo::mounts().context("reading /proc/self/mountinfo")?;
    match mountinfo::containing(&mounts, &canonical) {
        Some(m) if m.fstype == "virtiofs" && m.mountpoint == canonical => Ok(canonical),
        Some(m) => bail!(
            "{} is not the mount point of a virtiofs mount (it is on the {} mount at {})",
            path.display(),
            m.fstype,
            m.mountpoint.display()
        ),
        None => bail!("{} is not a virtiofs mount point", path.display()),
    }
}

/// Reads the stream and replays it until it ends (`Ok`) or fails.
fn follow(mountpoint: &Path) -> Result<()> {
    let control = mountpoint.join(std::str::from_utf8(AGENT_CONTROL_NAME)?);
    let mut stream = std::fs::File::open(&control).with_context(|| {
        format!(
            "opening the change stream of {} (is it served by `crossfs serve` with change \
             events on, and is this the only agent, running as root?)",
            mountpoint.display()
        )
    })?;
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            // EAGAIN: no events for a while (the door answers a waiting read after 1 s, so
            // that a signalled agent can stop: Linux's virtiofs sends no FUSE_INTERRUPT).
            Err(e)
                if e.kind() == std::io::ErrorKind::Interrupted
                    || e.kind() == std::io::ErrorKind::WouldBlock =>
            {
                continue
            }
            Err(e) => return Err(e).context("reading the change stream"),
        };
        for line in buf[..n].split_inclusive(|&b| b == b'\n') {
            match Event::from_json_line(line) {
                Ok(ev) => replay(mountpoint, &ev),
                Err(e) => tracing::warn!("an event the agent does not understand: {e}"),
            }
        }
    }
}

/// Replays one event; a replay that fails is logged (the guest then shows the host's state
/// at its next lookup, without the event).
fn replay(mountpoint: &Path, ev: &Event) {
    let dir = |path: &RelPath| DirOnMount::open(mountpoint, &path.parent().unwrap_or_default());
    let name = ev.path.file_name();
    let result = match &ev.kind {
        EventKind::Created => {
            let mode = ev
                .attrs
                .map_or(rustix::fs::FileType::RegularFile.as_raw_mode(), |a| a.mode);
            dir(&ev.path).and_then(|d| replay_calls::create(&d, name, mode))
        }
        EventKind::Removed => dir(&ev.path).and_then(|d| {
            let is_dir = ev.attrs.is_some_and(|a| a.is_dir());
            match replay_calls::remove(&d, name, is_dir) {
                // Removed without attributes: the type is not known.
                Err(e)
                    if ev.attrs.is_none()
                        && e.raw_os_error() == Some(rustix::io::Errno::ISDIR.raw_os_error()) =>
                {
                    replay_calls::remove(&d, name, true)
                }
                r => r,
            }
        }),
        EventKind::Renamed { from } => dir(from).and_then(|from_dir| {
            let to_dir = dir(&ev.path)?;
            replay_calls::rename((&from_dir, from.file_name()), (&to_dir, name))
        }),
        EventKind::Modified | EventKind::Attrib if ev.path.is_root() => Ok(()),
        EventKind::Modified | EventKind::Attrib => dir(&ev.path).and_then(|d| {
            let modified = matches!(ev.kind, EventKind::Modified);
            replay_calls::touch(&d, name, modified)?;
            host_mtime(&d, name, ev)
        }),
        EventKind::Rescan { reason } => {
            tracing::info!(path = %ev.path, "rescan ({reason}): dropping the guest's caches");
            drop_caches()
        }
        EventKind::Sync { .. } => Ok(()),
        EventKind::Warning { message } => {
            tracing::warn!("the server says: {message}");
            Ok(())
        }
    };
    match result {
        Ok(()) => tracing::debug!("replayed {ev}"),
        Err(e) => tracing::debug!("replaying {ev}: {e}"),
    }
}

/// Gives a regular file the host's mtime, as the event saw it. With `--cache always
/// --writeback` (a writeback cache) the guest kernel keeps its own times for a regular
/// file and never takes the server's: a content replay's truncate stamps the guest's
/// clock, and a host `touch` would not show at all.
fn host_mtime(d: &DirOnMount, name: &[u8], ev: &Event) -> std::io::Result<()> {
    match ev.attrs {
        Some(a) if a.file_type() == rustix::fs::FileType::RegularFile.as_raw_mode() => {
            replay_calls::set_mtime(d, name, a.mtime_ns)
        }
        _ => Ok(()),
    }
}

/// After a rescan the changes cannot be replayed one by one: the guest kernel drops the
/// dentries, inodes and clean pages it holds that nothing uses (all file systems: the
/// kernel offers no finer way without FUSE notifications), so the next access asks the
/// host.
fn drop_caches() -> std::io::Result<()> {
    std::fs::write("/proc/sys/vm/drop_caches", "3")
}
