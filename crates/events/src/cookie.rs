//! Sync cookies (the Watchman technique): to know that every change made before a moment has
//! been observed, make one more change — create a uniquely named file — and wait for the
//! watcher to see it. Kernel queues are ordered, so by then everything before it has been
//! read; the engine flushes all it holds, publishes a `Sync` marker and removes the file.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{mkdirat, openat, unlinkat, AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::beneath::Root;
use crate::path::RelPath;

/// `<export>/<control>/cookies`, opened beneath the root.
#[derive(Debug)]
pub(crate) struct CookieDir {
    fd: OwnedFd,
    dir: RelPath,
    /// The export root and the control directory, to remove the two when done.
    root: OwnedFd,
    control: OwnedFd,
}

fn mkdir_ok(r: rustix::io::Result<()>) -> io::Result<()> {
    match r {
        Ok(()) | Err(Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn name(epoch: u64, id: u64) -> String {
    format!("{epoch:x}-{id}")
}

impl CookieDir {
    /// Creates (if needed) and opens the cookie directory.
    pub(crate) fn open(root: &Root, control: &[u8]) -> io::Result<Self> {
        let control_rel = RelPath::root()
            .join(control)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        mkdir_ok(mkdirat(root.fd(), control, Mode::from_bits_truncate(0o700)))?;
        let cfd = root
            .open_dir(&control_rel)?
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTDIR))?;
        mkdir_ok(mkdirat(&cfd, "cookies", Mode::from_bits_truncate(0o700)))?;
        let dir = control_rel
            .join(b"cookies")
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let fd = root
            .open_dir(&dir)?
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOTDIR))?;
        Ok(Self {
            fd,
            dir,
            root: root.fd().try_clone()?,
            control: cfd,
        })
    }

    /// Removes the cookie directory and the control directory, if nothing else is in them
    /// (the export is left as it was found).
    pub(crate) fn remove_dirs(&self) {
        let _ = unlinkat(&self.control, "cookies", AtFlags::REMOVEDIR);
        if let Some(control) = self.dir.parent() {
            let _ = unlinkat(&self.root, control.as_bytes(), AtFlags::REMOVEDIR);
        }
    }

    /// Creates the cookie file for `id`.
    pub(crate) fn create(&self, epoch: u64, id: u64) -> io::Result<()> {
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW;
        openat(
            &self.fd,
            name(epoch, id),
            flags | OFlags::CLOEXEC,
            Mode::RUSR,
        )?;
        Ok(())
    }

    /// Removes the cookie file for `id` (already gone is fine).
    pub(crate) fn remove(&self, epoch: u64, id: u64) {
        let _ = unlinkat(&self.fd, name(epoch, id), AtFlags::empty());
    }

    /// The cookie id if `path` is one of this hub's cookie files.
    pub(crate) fn parse(&self, path: &RelPath, epoch: u64) -> Option<u64> {
        if path.parent().as_ref() != Some(&self.dir) {
            return None;
        }
        let text = std::str::from_utf8(path.file_name()).ok()?;
        let (e, id) = text.split_once('-')?;
        (u64::from_str_radix(e, 16).ok()? == epoch)
            .then(|| id.parse().ok())
            .flatten()
    }
}

/// Callers of `sync_cookie` waiting for their marker.
#[derive(Debug, Default)]
pub(crate) struct SyncWaiters {
    done: Mutex<HashMap<u64, bool>>,
    cv: Condvar,
}

impl SyncWaiters {
    pub(crate) fn register(&self, id: u64) {
        let mut m = self.done.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(id, false);
    }

    pub(crate) fn complete(&self, id: u64) {
        let mut m = self.done.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = m.get_mut(&id) {
            *d = true;
        }
        drop(m);
        self.cv.notify_all();
    }

    /// Waits for `id`; `true` when its marker was published.
    pub(crate) fn wait(&self, id: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut m = self.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if m.get(&id).copied().unwrap_or(true) {
                m.remove(&id);
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                m.remove(&id);
                return false;
            }
            m = match self.cv.wait_timeout(m, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }
}
