//! `crossfs mount`: connect to an export and mount it through FUSE (or the kernel's 9p client).

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use crossfs_client::{Client, ClientConfig};
use crossfs_mount::{MountConfig, NegativeTtl};
use crossfs_transport::SocketOptions;
use tracing::{info, warn};

use crate::args::MountArgs;
use crate::control::ControlEndpoint;

/// Linux's socket transports (tcp, unix, fd) cap msize at 1 MiB (MAX_SOCK_BUF in
/// net/9p/trans_fd.c); asking the kernel for more only gets a smaller value back.
const KERNEL_FD_TRANSPORT_MAX: u32 = 1 << 20;

pub fn run(args: MountArgs) -> Result<()> {
    let mountpoint = args
        .mountpoint
        .canonicalize()
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    anyhow::ensure!(
        mountpoint.is_dir(),
        "{} is not a directory",
        mountpoint.display()
    );
    if !args.allow_stacked {
        refuse_stacking(&mountpoint)?;
    }
    let socket_opts = SocketOptions {
        send_buffer: args.socket_buffer,
        recv_buffer: args.socket_buffer,
        nodelay: true,
    };
    if args.kernel {
        let stream = crossfs_transport::connect(&args.addr, &socket_opts)
            .map_err(|e| crate::explain::connect_failed(&args.addr, e))?;
        return mount_kernel(&args, &mountpoint, stream);
    }

    // Before anything is mounted, so that no signal finds a mount it cannot undo.
    let stage = Arc::new(Mutex::new(Stage::Starting));
    let on_signal = stage.clone();
    crate::signals::on_termination(move |sig| {
        let unmounter = match &mut *lock(&on_signal) {
            // Nothing mounted: as the signal's default action would.
            Stage::Starting => std::process::exit(128 + sig),
            Stage::Mounting { requested } => {
                *requested = true;
                return;
            }
            Stage::Mounted(unmounter) => unmounter.clone(),
        };
        info!(
            "signal {sig}: unmounting {}",
            unmounter.mountpoint().display()
        );
        unmount_own(&unmounter);
    })?;
    let t = super::dial_first(&args.addr, &socket_opts)?;
    let client = Client::connect_transport(
        t,
        &ClientConfig {
            msize: args.msize,
            ..ClientConfig::default()
        },
    )
    .with_context(|| format!("negotiating 9P2000.L with {}", args.addr))?;
    let token = match &args.token_file {
        Some(path) => Some(crate::token::read(path)?),
        None => None,
    };
    let aname = args.aname.clone().into_bytes();
    let root = match &token {
        Some(token) => client.attach_with_token(b"", &aname, current_uid(), token),
        None => client.attach(b"", &aname, current_uid()),
    }
    .map_err(|e| crate::explain::attach_failed(&args.addr, e, token.is_some()))?;
    let reconnect = reconnect_wait(&args);
    if let Some(wait) = reconnect {
        // The root first: the mount's own hook (added by `mount`) walks from it.
        let (root_fid, token) = (root.0, token.clone());
        client.on_reconnect(move |c| {
            c.attach_fid(root_fid, b"", &aname, current_uid(), token.as_deref())
                .map(drop)
        });
        let (addr, opts) = (args.addr.clone(), socket_opts);
        client
            .enable_reconnect(move || super::dial(&addr, &opts), wait)
            .context("starting the reconnect thread")?;
    }
    let config = MountConfig {
        cache: args.cache,
        negative_ttl: negative_ttl(args.negative_ttl)?,
        max_pages: args.max_pages,
        read_only: args.read_only,
        no_exec: args.noexec,
        no_atime: args.noatime,
        default_permissions: args.default_permissions,
        // Without events nothing keeps what the kernel holds across opens exact.
        send_opens: args.send_opens || args.no_events,
        changes: args.changes,
        allow_other: shared_with_others(&args),
        uid: args.uid,
        gid: args.gid,
        threads: args.threads.max(1),
        // As given, so that mount(8) finds an fstab line's source in the table.
        fs_name: args.addr.given.clone(),
        replica_entries: args.replica_entries,
        io_uring: args.io_uring,
        idle_poll: idle_poll(args.idle_poll),
        splice_reads: !args.no_splice,
        change_events_coming: !args.no_events,
        ..MountConfig::default()
    };
    *lock(&stage) = Stage::Mounting { requested: false };
    let mut handle = crossfs_mount::mount(client, root, &mountpoint, &config)
        .with_context(|| format!("mounting on {}", mountpoint.display()))?;
    let requested = {
        let mut stage = lock(&stage);
        let requested = matches!(*stage, Stage::Mounting { requested: true });
        *stage = Stage::Mounted(handle.unmounter());
        requested
    };
    if requested {
        info!("a signal came while mounting: unmounting");
        unmount_own(&handle.unmounter());
        handle.wait().context("FUSE session")?;
        return Ok(());
    }
    // What `crossfs sync` tells the user when the mount follows no events (see
    // `sync::why`): they were turned off here, or the server has none.
    let mut change_events = if args.no_events {
        "off"
    } else {
        "none from the server"
    };
    if !args.no_events {
        // Another server (diod, ...) or one serving without events: the mount works, its
        // caches just follow their timeouts.
        match super::connect_events(&args.addr, None, token.as_deref()) {
            Ok((events, fid)) => {
                change_events = "followed";
                handle
                    .follow_changes(events.clone(), fid)
                    .context("following change events")?;
                if let Some(wait) = reconnect {
                    let position = handle.event_position();
                    super::resume_events(&events, fid, &args.addr, token, position, wait)?;
                }
                info!("following change events of {}", args.addr);
            }
            Err(e) => {
                handle.no_change_events();
                warn!("no change events: {e:#}; host changes show as --cache timeouts allow")
            }
        }
    }
    let report = {
        let stats = handle.stats_reporter();
        std::sync::Arc::new(move || {
            let mut doc = stats();
            doc["change_events"] = change_events.into();
            doc
        })
    };
    let _control = match &args.control {
        Some(path) => {
            let report = report.clone();
            Some(ControlEndpoint::start(path, move || report())?)
        }
        None => None,
    };
    let _found_by_mount_point = mount_point_control(&mountpoint, move || report());
    info!("mounted {} on {}", args.addr, mountpoint.display());
    // Blocks until the file system is unmounted, by us on a signal or by `umount`.
    handle.wait().context("FUSE session")?;
    info!("unmounted {}", mountpoint.display());
    Ok(())
}

/// Serves the mount's counters where `crossfs stats MOUNTPOINT` looks
/// ([`crate::control::mount_socket`]). Without it the mount works as before, so a failure
/// is only logged.
fn mount_point_control(
    mountpoint: &std::path::Path,
    report: impl Fn() -> serde_json::Value + Send + 'static,
) -> Option<ControlEndpoint> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let device = std::fs::metadata(mountpoint).ok()?.dev();
    let path = crate::control::mount_socket(device)?;
    let started = path
        .parent()
        .map(|dir| {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
        })
        .transpose()
        .map_err(anyhow::Error::from)
        .and_then(|_| ControlEndpoint::start(&path, report));
    match started {
        Ok(endpoint) => Some(endpoint),
        Err(e) => {
            warn!(
                "no control socket for `crossfs stats {}`: {e:#}",
                mountpoint.display()
            );
            None
        }
    }
}

/// How often a mount asked to unmount, with another mount over it, looks whether that one
/// is gone.
const COVERED_POLL: Duration = Duration::from_millis(100);

/// Where the client is, for SIGINT and SIGTERM.
enum Stage {
    /// Nothing mounted yet: a signal ends the process.
    Starting,
    /// The mount is being made: a signal asks for it to be unmounted once it stands.
    Mounting { requested: bool },
    /// Mounted: a signal unmounts it.
    Mounted(crossfs_mount::Unmounter),
}

fn lock(stage: &Mutex<Stage>) -> std::sync::MutexGuard<'_, Stage> {
    stage
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Unmounts this client's mount, and only it: a busy one is detached (the session then
/// ends when its last user lets go); one with another mount over it waits for that one
/// to go, since unmounting the path would take the other.
fn unmount_own(unmounter: &crossfs_mount::Unmounter) {
    let mut said = false;
    loop {
        match unmounter.unmount() {
            Ok(crossfs_mount::Unmounted::Covered) => {
                if !std::mem::replace(&mut said, true) {
                    warn!(
                        "another mount was made over {}: unmounting this one once that one \
                         is gone",
                        unmounter.mountpoint().display()
                    );
                }
                std::thread::sleep(COVERED_POLL);
            }
            Ok(_) => return,
            Err(e) => {
                warn!("{e}");
                return;
            }
        }
    }
}

/// Refuses a mount point that already has a mount, but autofs (whose mount points exist to
/// be mounted over: systemd's `x-systemd.automount`).
fn refuse_stacking(mountpoint: &std::path::Path) -> Result<()> {
    let mounts = crate::mountinfo::mounts().context("reading /proc/self/mountinfo")?;
    match crate::mountinfo::at(&mounts, mountpoint) {
        Some(m) if m.fstype != "autofs" => bail!(
            "{} is already a mount point ({} from {}); pass --allow-stacked (fstab: \
             allow_stacked) to mount over it",
            mountpoint.display(),
            m.fstype,
            m.source
        ),
        _ => Ok(()),
    }
}

/// How long calls wait for a lost connection to come back, if reconnecting at all: not with
/// `--no-reconnect`, and not for an inherited descriptor, which cannot be dialed again.
fn reconnect_wait(args: &MountArgs) -> Option<Duration> {
    if args.no_reconnect {
        return None;
    }
    if matches!(*args.addr, crossfs_transport::Addr::Fd(_)) {
        info!("{} cannot be dialed again: no reconnecting", args.addr);
        return None;
    }
    Some(Duration::from_secs(args.reconnect_wait))
}

fn negative_ttl(ms: Option<i64>) -> Result<NegativeTtl> {
    Ok(match ms {
        None => NegativeTtl::default(),
        Some(0) => NegativeTtl::Off,
        Some(-1) => NegativeTtl::Forever,
        Some(n) if n > 0 => NegativeTtl::For(Duration::from_millis(n as u64)),
        Some(n) => bail!("--negative-ttl {n}: use milliseconds, 0 (off) or -1 (forever)"),
    })
}

/// Whether other users may use the mount: asked for, or by default when root mounts (a
/// mount made at boot serves every user of the guest, as virtiofs and 9p mounts do).
fn shared_with_others(args: &MountArgs) -> bool {
    args.allow_other || (current_uid() == 0 && !args.private)
}

fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Hands the connected socket to the kernel's 9p client, as WSL does: the kernel takes its
/// own reference to the fd during mount(2), so this process can exit afterwards.
fn mount_kernel(
    args: &MountArgs,
    mountpoint: &std::path::Path,
    stream: crossfs_transport::Stream,
) -> Result<()> {
    let fd = stream.as_raw_fd();
    let msize = args.msize.min(KERNEL_FD_TRANSPORT_MAX);
    let mut data = format!(
        "trans=fd,rfdno={fd},wfdno={fd},version=9p2000.L,msize={msize},aname={},access=client",
        args.aname
    );
    if args.read_only {
        data.push_str(",ro");
    }
    use rustix::mount::MountFlags;
    let mut flags = MountFlags::empty();
    for (on, flag) in [
        (args.read_only, MountFlags::RDONLY),
        (args.noexec, MountFlags::NOEXEC),
        (args.noatime, MountFlags::NOATIME),
    ] {
        if on {
            flags |= flag;
        }
    }
    rustix::mount::mount(
        // As given, as for a FUSE mount.
        args.addr.given.as_str(),
        mountpoint,
        "9p",
        flags,
        Some(std::ffi::CString::new(data.clone())?.as_c_str()),
    )
    .with_context(|| {
        format!(
            "mount -t 9p -o {data} on {} (does this kernel have the 9p and 9pnet_fd modules?)",
            mountpoint.display()
        )
    })?;
    info!(
        "mounted {} on {} with the kernel's 9p client (msize asked: {msize})",
        args.addr,
        mountpoint.display()
    );
    Ok(())
}

/// The window `--idle-poll` gives, `auto` decided here and logged.
fn idle_poll(asked: crate::args::IdlePoll) -> Option<std::time::Duration> {
    match asked {
        crate::args::IdlePoll::Micros(0) => None,
        crate::args::IdlePoll::Micros(us) => Some(std::time::Duration::from_micros(us)),
        crate::args::IdlePoll::Auto => {
            let (window, why) = crossfs_mount::auto_idle_poll();
            match window {
                Some(w) => tracing::info!("idle polling for {w:?} after each request: {why}"),
                None => tracing::info!("no idle polling: {why}"),
            }
            window
        }
    }
}
