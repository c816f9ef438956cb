//! Hub configuration: every bound and timing knob, with the defaults the issue asks for.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which kernel interface watches the export.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// inotify (watching the export's directories only, polling past the watch budget),
    /// else fanotify when permitted and supported, else polling.
    Auto,
    /// fanotify with `FAN_REPORT_DFID_NAME` on the export's filesystem (`CAP_SYS_ADMIN`).
    Fanotify,
    /// inotify, one watch per directory within [`HubConfig::watch_budget`].
    Inotify,
    /// No kernel notifications: rescan every [`HubConfig::poll_interval`].
    Poll,
}

/// How an [`crate::EventHub`] watches, coalesces and queues.
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// The watcher to use.
    pub backend: BackendKind,
    /// A path's changes are published after it has been quiet this long (20 ms).
    pub quiet: Duration,
    /// ... or at the latest this long after its first pending change (200 ms).
    pub max_delay: Duration,
    /// The first change after a quiet period is published after one more read of the
    /// kernel queue (0.5 ms) rather than the quiet window: a lone change reaches watchers at
    /// once, and only what follows it is coalesced (on by default).
    pub first_at_once: bool,
    /// More pending paths than this collapse into one rescan of their deepest common directory;
    /// a rescan with more differences than this publishes one `Rescan` instead (2048).
    pub burst_limit: usize,
    /// Events a subscriber may have queued before it gets one "fell behind" rescan (4096).
    pub ring_capacity: usize,
    /// Published events kept for `subscribe_since` resumes (4096).
    pub history: usize,
    /// Most inotify watches; deeper directories are polled (8192).
    pub watch_budget: usize,
    /// How often unwatched subtrees (and everything, while polling) are rescanned (2 s).
    pub poll_interval: Duration,
    /// This many kernel queue overflows ... (3)
    pub overflow_threshold: usize,
    /// ... within this long (30 s) ...
    pub overflow_window: Duration,
    /// ... switch to polling for this long (10 s), then re-arm the watcher.
    pub overflow_backoff: Duration,
    /// Top-level names starting with this are the hub's sync cookies: files that exist only
    /// while a sync waits for them, and are never reported (".crossfs-sync-").
    pub cookie_prefix: Vec<u8>,
    /// How long a sync cookie may take to show up before the engine rescans instead (1 s).
    pub cookie_grace: Duration,
    /// How long `sync_cookie` waits in all (10 s).
    pub sync_timeout: Duration,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self {
            backend: BackendKind::Auto,
            quiet: Duration::from_millis(20),
            max_delay: Duration::from_millis(200),
            first_at_once: true,
            burst_limit: 2048,
            ring_capacity: 4096,
            history: 4096,
            watch_budget: 8192,
            poll_interval: Duration::from_secs(2),
            overflow_threshold: 3,
            overflow_window: Duration::from_secs(30),
            overflow_backoff: Duration::from_secs(10),
            cookie_prefix: b".crossfs-sync-".to_vec(),
            cookie_grace: Duration::from_secs(1),
            sync_timeout: Duration::from_secs(10),
        }
    }
}
