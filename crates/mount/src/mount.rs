//! Mounting and unmounting: the FUSE session's life, request-size tuning after mount.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossfs_client::Client;
use crossfs_wire::{Fid, Qid};

use crate::changes::Feed;
use crate::config::{MountConfig, RequestSize, PAGE};
use crate::error::MountError;
use crate::fs::{CrossFs, MountState};
use crate::session::{Acl, Notifier, Session, TransportCounters};
use crate::stats::StatsContext;
use crate::table::Standing;

/// `fs.fuse.max_pages_limit`: the most pages one FUSE request may carry (Linux 6.18+; 256
/// before, which is also the default).
const MAX_PAGES_LIMIT: &str = "/proc/sys/fs/fuse/max_pages_limit";
/// How long [`MountHandle::unmount`] lets a busy, detached mount drain before aborting it.
const DETACH_GRACE: Duration = Duration::from_secs(2);

fn kernel_max_pages() -> u32 {
    fs::read_to_string(MAX_PAGES_LIMIT)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(256)
}

/// Mounts the 9P export behind `client` at `mountpoint`.
///
/// `root` is an attached fid of the export root and its qid; the mount owns it from now on
/// and clunks it when it ends. The file system is served by background threads until
/// [`MountHandle::unmount`], or until someone runs `umount` ([`MountHandle::wait`] returns
/// then).
///
/// # Errors
/// [`MountError::InvalidConfig`] for a config that cannot work (no threads, zero pages),
/// [`MountError::Mount`] if the kernel refuses the mount.
pub fn mount(
    client: Arc<Client>,
    root: (Fid, Qid),
    mountpoint: &Path,
    config: &MountConfig,
) -> Result<MountHandle, MountError> {
    if config.threads == 0 {
        return Err(MountError::InvalidConfig(
            "threads must be at least 1".into(),
        ));
    }
    if config.max_pages == Some(0) || config.max_write < PAGE {
        return Err(MountError::InvalidConfig(
            "max_pages and max_write must allow at least one page".into(),
        ));
    }
    let mut sizes = RequestSize::new(config, kernel_max_pages(), client.max_io());
    let max_read = splice_read_size(config, &sizes);
    if let Some(n) = max_read {
        // A readahead window of 1 MiB over READs of 1020 KiB would be a READ of 1020 KiB
        // and one of 4 KiB: twice the round trips.
        sizes.readahead = sizes.readahead.min(n);
    }
    let state = Arc::new(MountState::new(client, root, config, sizes));
    // After a reconnect (if the caller enabled it), bind the mount's fids again.
    let weak = Arc::downgrade(&state);
    state
        .client
        .on_reconnect(move |client| match weak.upgrade() {
            Some(state) => crate::restore::restore(&state, client),
            None => Ok(()),
        });
    // Then, before anything else uses the new connection, the changes sent behind that
    // the old one lost, in order.
    let weak = Arc::downgrade(&state);
    state
        .client
        .on_reconnect(move |client| match weak.upgrade() {
            Some(state) => state.behind.resend_lost(client),
            None => Ok(()),
        });
    let fs = CrossFs {
        state: state.clone(),
    };

    // Other users reach the files with the server's credentials, so the kernel must check
    // each caller against the modes and owners shown, as on a local file system. A change
    // answered before the server checks it needs the same check.
    let default_permissions = config.allow_other
        || config.default_permissions
        || config.changes == crate::ChangeMode::Behind;
    let acl = if config.allow_other {
        Acl::All
    } else {
        Acl::Owner(rustix::process::getuid().as_raw())
    };
    let mount_err = |cause| MountError::Mount {
        mountpoint: mountpoint.display().to_string(),
        cause,
    };
    let request = crate::direct::Request {
        config,
        default_permissions,
        allow_other: config.allow_other,
        max_read,
    };
    let dev = match crate::direct::mount(mountpoint, &request).map_err(mount_err)? {
        Some(dev) => dev,
        None => crate::session::mount_with_fusermount(
            mountpoint,
            &fusermount_options(config, default_permissions, max_read),
        )
        .map_err(mount_err)?,
    };
    let session = Session::new(fs, dev, acl, config.threads, config.io_uring)
        .with_idle_poll(config.idle_poll);
    let transports = session.counters();
    let notifier = session.notifier();
    let _ = state.notifier.set(notifier.clone());
    state.behind.tell_kernel(notifier.clone());
    state.start_page_push(notifier.clone());
    state.start_dir_priming(mountpoint.to_path_buf());
    state.start_no_opens(mountpoint.to_path_buf());
    state.start_subdir_fetch();
    state.start_dirs_read_ahead();
    crate::known::idle::IdleOpens::expire_while(Arc::downgrade(&state.known), |k| {
        // The unannounced handles expire on the same beat (between one and two periods).
        let idle_since = std::time::Instant::now().checked_sub(crate::known::idle::IDLE_FOR);
        if let Some(before) = idle_since {
            k.handles.expire_unannounced(Some(before));
        }
        &k.idle
    })
    .map_err(mount_err)?;
    let thread = std::thread::Builder::new()
        .name("crossfs-fuse".into())
        .spawn(move || session.run())
        .map_err(mount_err)?;

    let mut handle = MountHandle {
        mountpoint: mountpoint.to_path_buf(),
        state,
        thread: Some(thread),
        notifier,
        transports,
        dev: None,
        readahead_kb: None,
        feed: None,
    };
    // The stat is answered by the session just started.
    match rustix::fs::stat(mountpoint) {
        Ok(st) => {
            let dev = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
            handle.dev = Some(dev);
            handle.readahead_kb = raise_readahead(dev, sizes.readahead);
        }
        Err(e) => tracing::warn!("cannot stat the new mount: {e}"),
    }
    tracing::info!(
        mountpoint = %mountpoint.display(),
        cache = %config.cache,
        max_write = sizes.max_write,
        readahead_kb = handle.readahead_kb,
        "mounted"
    );
    Ok(handle)
}

/// The options of a mount through fusermount3 (for a user who may not mount), as `-o`
/// takes them: the source's commas and backslashes escaped, as libfuse does.
/// The `max_read` to mount with when READs are spliced (`MountConfig::splice_reads`) and a
/// reply of the kernel's request size would not fit the pipe this process may make
/// (`crate::session::largest_read`): READs a page smaller then, rather than none spliced.
fn splice_read_size(config: &MountConfig, sizes: &RequestSize) -> Option<u32> {
    if !config.splice_reads {
        return None;
    }
    let request = sizes.max_pages.saturating_mul(PAGE);
    let fits = crate::session::largest_read(request as usize)?;
    let fits = u32::try_from(fits).ok()?;
    (fits < request && fits > 0).then_some(fits)
}

fn fusermount_options(
    config: &MountConfig,
    default_permissions: bool,
    max_read: Option<u32>,
) -> String {
    let mut fs_name = String::new();
    for c in config.fs_name.chars() {
        if matches!(c, ',' | '\\') {
            fs_name.push('\\');
        }
        fs_name.push(c);
    }
    let mut options = vec![
        format!("fsname={fs_name}"),
        "subtype=crossfs".into(),
        "nodev".into(),
        "nosuid".into(),
    ];
    for (on, option) in [
        (config.read_only, "ro"),
        (config.no_exec, "noexec"),
        (config.no_atime, "noatime"),
        (default_permissions, "default_permissions"),
        (config.allow_other, "allow_other"),
    ] {
        if on {
            options.push(option.into());
        }
    }
    if let Some(n) = max_read {
        options.push(format!("max_read={n}"));
    }
    options.join(",")
}

/// Buffered reads are capped by the mount's readahead (128 KiB by default), whatever
/// FUSE_MAX_PAGES allows; raise it to the request size so a sequential read is one
/// max-size request after another. Returns the value in force.
fn raise_readahead((major, minor): (u32, u32), bytes: u32) -> Option<u32> {
    let path = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    let kb = bytes / 1024;
    match fs::write(&path, format!("{kb}\n")) {
        Ok(()) => Some(kb),
        Err(e) => {
            tracing::warn!("cannot set {path} to {kb}: {e}; buffered reads stay smaller");
            fs::read_to_string(&path).ok()?.trim().parse().ok()
        }
    }
}

fn finishes_within<T>(thread: &JoinHandle<T>, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !thread.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    thread.is_finished()
}

/// Unmounts one mount (see [`MountHandle::unmounter`]), found in the mount table by its
/// device number, so that a mount made over it, or under it, at the same point is left alone.
#[derive(Clone, Debug)]
pub struct Unmounter {
    mountpoint: PathBuf,
    /// The mount's device; `None` if it could not be learned, and then the path is
    /// unmounted as it stands.
    dev: Option<(u32, u32)>,
}

/// What [`Unmounter::unmount`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// Unmounted.
    Done,
    /// It was busy: detached from the tree (as `umount -l`); it ends with its last user.
    Detached,
    /// Not mounted any more (someone ran `umount`).
    AlreadyGone,
    /// Another mount was made over it at the same point: nothing was done, since unmounting
    /// the path would remove that one. Call again once it is gone.
    Covered,
}

impl Unmounter {
    /// The mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts the mount if it is the last one at its point.
    ///
    /// # Errors
    /// [`MountError::Unmount`] if the mount table cannot be read, or the kernel refuses
    /// even a lazy unmount.
    pub fn unmount(&self) -> Result<Unmounted, MountError> {
        let failed = |cause: io::Error| MountError::Unmount {
            mountpoint: self.mountpoint.display().to_string(),
            cause,
        };
        if let Some(dev) = self.dev {
            let mounts = crate::table::mounts().map_err(failed)?;
            match crate::table::standing(&mounts, &self.mountpoint, dev) {
                Standing::OnTop => {}
                Standing::Covered => return Ok(Unmounted::Covered),
                Standing::Gone => return Ok(Unmounted::AlreadyGone),
            }
        }
        use rustix::mount::{unmount, UnmountFlags};
        match unmount(&self.mountpoint, UnmountFlags::empty()) {
            Ok(()) => Ok(Unmounted::Done),
            Err(e) if e == rustix::io::Errno::INVAL && self.dev.is_some() => {
                // Unmounted by someone else since the table was read.
                Ok(Unmounted::AlreadyGone)
            }
            // A user who may not unmount (the mount was made through fusermount3) asks
            // fusermount3, which checks that the mount is theirs (lazily, as `umount -l`).
            Err(rustix::io::Errno::PERM) => fusermount_unmount(&self.mountpoint)
                .map(|()| Unmounted::Detached)
                .map_err(failed),
            Err(e) => {
                tracing::info!(
                    "unmount of {} failed ({e}); detaching",
                    self.mountpoint.display()
                );
                unmount(&self.mountpoint, UnmountFlags::DETACH).map_err(|e| failed(e.into()))?;
                Ok(Unmounted::Detached)
            }
        }
    }
}

/// `fusermount3 -u -z MOUNTPOINT` (or fusermount's).
fn fusermount_unmount(mountpoint: &Path) -> io::Result<()> {
    let mut last = io::Error::from(io::ErrorKind::NotFound);
    for program in ["fusermount3", "fusermount"] {
        match std::process::Command::new(program)
            .args(["-u", "-z", "--"])
            .arg(mountpoint)
            .stdin(std::process::Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => {
                let why = String::from_utf8_lossy(&out.stderr);
                return Err(io::Error::other(format!("{program}: {}", why.trim_end())));
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A live mount. Dropping it unmounts (as [`MountHandle::unmount`], errors ignored).
pub struct MountHandle {
    mountpoint: PathBuf,
    state: Arc<MountState>,
    thread: Option<JoinHandle<io::Result<()>>>,
    notifier: Notifier,
    /// Requests served per FUSE transport.
    transports: Arc<TransportCounters>,
    dev: Option<(u32, u32)>,
    readahead_kb: Option<u32>,
    feed: Option<Feed>,
}

/// How long an unmount waits for the server to answer the changes sent behind.
const UNMOUNT_DRAIN: std::time::Duration = std::time::Duration::from_secs(60);

impl MountHandle {
    /// Where the file system is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Follows the server's change events on `client`, a second connection to the same
    /// server whose `fid` was attached with the aname `crossfs:events`: the kernel's caches
    /// are invalidated as the host changes, each change is replayed on the mount so that
    /// watchers in the guest see it, and reading the root's `user.crossfs.sync` attribute
    /// becomes a sync (see the `changes` module). The feed stops with the mount.
    ///
    /// # Errors
    /// [`MountError::Session`] if the feed thread cannot start.
    pub fn follow_changes(&mut self, client: Arc<Client>, fid: Fid) -> Result<(), MountError> {
        if let Some(old) = self.feed.take() {
            old.stop();
        }
        let feed = Feed::start(
            self.state.feed_target(),
            self.notifier.clone(),
            self.mountpoint.clone(),
            client,
            fid,
        )
        .map_err(MountError::Session)?;
        self.feed = Some(feed);
        Ok(())
    }

    /// No change events will be followed (the server has none, or they could not be
    /// connected): a sync waiting for them (see
    /// [`MountConfig::change_events_coming`](crate::MountConfig)) fails now.
    pub fn no_change_events(&self) {
        self.state.changes.link_decided();
    }

    /// Where the change feed stands, as `EPOCH:SEQ` of the last event applied (`None`
    /// before the first): a new event connection attaches with `?since=` this to resume
    /// (a hook given to the event client's `on_reconnect` does).
    pub fn event_position(&self) -> impl Fn() -> Option<String> + Send + Sync + 'static {
        let state = Arc::downgrade(&self.state);
        move || {
            let state = state.upgrade()?;
            let position = *crate::sync::lock(&state.changes.position);
            position.map(|(epoch, seq)| format!("{epoch}:{seq}"))
        }
    }

    fn stop_feed(&mut self) {
        if let Some(feed) = self.feed.take() {
            feed.stop();
        }
    }

    /// Blocks until the file system is unmounted from outside (`umount`).
    ///
    /// # Errors
    /// [`MountError::Session`] if the FUSE session failed.
    pub fn wait(mut self) -> Result<(), MountError> {
        let r = self.join();
        self.stop_feed();
        r
    }

    /// Unmounts and waits for the session to end.
    ///
    /// A busy mount is detached instead (as `umount -l`): it disappears from the tree at
    /// once, and programs still using it carry on until they close it. If it is still in
    /// use after two seconds, its FUSE connection is aborted through fusectl when that is
    /// mounted (users then get ENOTCONN); otherwise the session is left to end with its
    /// last user, or with this process. Either way this returns without hanging. Only this
    /// mount is unmounted: when another was made over it at the same point, this one is
    /// left mounted, with a warning (see [`Unmounter`]).
    ///
    /// # Errors
    /// [`MountError::Unmount`] if the kernel refuses even a lazy unmount.
    pub fn unmount(mut self) -> Result<(), MountError> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> Result<(), MountError> {
        // First, so that no replayed change holds the mount busy.
        self.stop_feed();
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        // The path's last mount may be another's: only this one is unmounted.
        let unmounted = self.unmounter().unmount()?;
        if unmounted == Unmounted::Covered {
            tracing::warn!(
                "{} has another mount over it: leaving this one mounted (unmounting the path \
                 would remove the other)",
                self.mountpoint.display()
            );
            return Ok(());
        }
        if unmounted == Unmounted::Detached {
            if !finishes_within(&thread, DETACH_GRACE) {
                self.abort_connection();
            }
            if !finishes_within(&thread, DETACH_GRACE) {
                tracing::warn!(
                    "{} is detached but still in use; it ends when its last user closes it",
                    self.mountpoint.display()
                );
                return Ok(());
            }
        }
        self.thread = Some(thread);
        self.join()
    }

    /// What unmounts this mount, and no other made at the same point; usable from another
    /// thread (a signal handler's) while this one is in [`MountHandle::wait`].
    pub fn unmounter(&self) -> Unmounter {
        Unmounter {
            mountpoint: self.mountpoint.clone(),
            dev: self.dev,
        }
    }

    /// Ends the FUSE connection through fusectl (/sys/fs/fuse/connections, named by the
    /// mount's device number): every pending and future request fails, the session exits.
    fn abort_connection(&self) {
        let Some((major, minor)) = self.dev else {
            return;
        };
        let id = (major << 20) | minor;
        let path = format!("/sys/fs/fuse/connections/{id}/abort");
        if let Err(e) = fs::write(&path, "1") {
            tracing::info!("cannot abort FUSE connection {path}: {e}");
        }
    }

    fn join(&mut self) -> Result<(), MountError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let ended = thread.join();
        // Unmounted: what was sent behind reaches the server before this returns.
        if self.state.behind.wait_answered(UNMOUNT_DRAIN).is_err() {
            tracing::error!(
                "unmounted with changes sent behind still unanswered after {UNMOUNT_DRAIN:?}"
            );
        }
        match ended {
            Ok(r) => r.map_err(MountError::Session),
            Err(_) => Err(MountError::Session(io::Error::other(
                "FUSE session panicked",
            ))),
        }
    }

    /// Counters of this mount and its 9P connection, as `crossfs stats` shows them.
    pub fn stats_json(&self) -> serde_json::Value {
        stats_json(
            &self.state,
            &self.transports,
            &self.mountpoint,
            self.readahead_kb,
        )
    }

    /// A function producing [`MountHandle::stats_json`] that stays usable while another
    /// thread is in [`MountHandle::wait`] (for a control endpoint).
    pub fn stats_reporter(&self) -> impl Fn() -> serde_json::Value + Send + Sync + 'static {
        let (state, transports, mountpoint, readahead_kb) = (
            self.state.clone(),
            self.transports.clone(),
            self.mountpoint.clone(),
            self.readahead_kb,
        );
        move || stats_json(&state, &transports, &mountpoint, readahead_kb)
    }
}

fn stats_json(
    s: &MountState,
    transports: &TransportCounters,
    mountpoint: &Path,
    readahead_kb: Option<u32>,
) -> serde_json::Value {
    let mountpoint = mountpoint.display().to_string();
    let ctx = StatsContext {
        mountpoint: &mountpoint,
        cache: s.config.cache.as_str(),
        negative_ttl_ms: s.config.negative_ttl.as_millis(),
        max_pages: s.sizes.max_pages,
        max_write: s.sizes.max_write,
        readahead_kb,
        inodes: s.known.inodes.len(),
        handles: s.known.handles.len(),
    };
    let mut doc = s.stats.to_json(
        &ctx,
        s.client.negotiation(),
        &s.client.counters(),
        &s.client.latency(),
        s.client.write_data(),
    );
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("fuse_transport".into(), transports.to_json());
        obj.insert("changes".into(), s.changes.stats_json());
        if s.config.changes == crate::ChangeMode::Behind {
            obj.insert("behind".into(), s.behind.stats_json());
        }
        obj.insert("replicas".into(), s.known.replicas.stats_json());
        let (files, bytes) = s.ahead.small_files.size();
        obj.insert(
            "small_files".into(),
            serde_json::json!({ "files": files, "bytes": bytes }),
        );
        obj.insert("extensions".into(), s.client.has_extensions().into());
        obj.insert("reconnects".into(), s.client.reconnects().into());
    }
    doc
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            tracing::warn!("{e}");
        }
    }
}
