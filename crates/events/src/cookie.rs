//! Sync cookies (the Watchman technique): to know that every change made before a moment has
//! been observed, make one more change — create a uniquely named file — and wait for the
//! watcher to see it. Kernel queues are ordered, so by then everything before it has been
//! read; the engine flushes all it holds, publishes a `Sync` marker and removes the file.

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{openat, unlinkat, AtFlags, Mode, OFlags};

use crate::beneath::Root;
use crate::path::RelPath;

/// Where sync cookies are made: files named `<prefix><epoch in hex>-<id>` at the top of the
/// export, which exist only while a sync waits for its own (nothing is left in the export,
/// and a file adds no link to the root, so its `st_nlink` stays what clients expect).
#[derive(Debug)]
pub(crate) struct CookieDir {
    root: OwnedFd,
    prefix: Vec<u8>,
}

impl CookieDir {
    /// Prepares cookies for `root` under names starting with `prefix`.
    pub(crate) fn open(root: &Root, prefix: &[u8]) -> io::Result<Self> {
        Ok(Self {
            root: root.fd().try_clone()?,
            prefix: prefix.to_vec(),
        })
    }

    fn name(&self, epoch: u64, id: u64) -> Vec<u8> {
        let mut name = self.prefix.clone();
        name.extend_from_slice(format!("{epoch:x}-{id}").as_bytes());
        name
    }

    /// Creates the cookie file for `id`.
    pub(crate) fn create(&self, epoch: u64, id: u64) -> io::Result<()> {
        let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW;
        openat(
            &self.root,
            self.name(epoch, id).as_slice(),
            flags | OFlags::CLOEXEC,
            Mode::RUSR,
        )?;
        Ok(())
    }

    /// Removes the cookie file for `id` (already gone is fine).
    pub(crate) fn remove(&self, epoch: u64, id: u64) {
        let _ = unlinkat(
            &self.root,
            self.name(epoch, id).as_slice(),
            AtFlags::empty(),
        );
    }

    /// The cookie id if `path` is one of this hub's cookie files.
    pub(crate) fn parse(&self, path: &RelPath, epoch: u64) -> Option<u64> {
        if path.parent().as_ref() != Some(&RelPath::root()) {
            return None;
        }
        let rest = path.file_name().strip_prefix(self.prefix.as_slice())?;
        let (e, id) = std::str::from_utf8(rest).ok()?.split_once('-')?;
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
