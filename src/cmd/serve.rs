//! `crossfs serve`: bind every --listen address and serve each connection on its own thread.

use std::sync::Arc;

use anyhow::{Context, Result};
use crossfs_server::{AuthToken, Server, ServerConfig};
use crossfs_transport::{
    Addr, InheritedUnixListener, ListenOptions, Listener, SocketOptions, TransportError,
};
use tracing::{info, warn};

use crossfs_events::{EventHub, HubConfig};

use crate::args::{EventsChoice, ServeArgs};
use crate::control::ControlEndpoint;

pub fn run(args: ServeArgs) -> Result<()> {
    let export = args
        .dir
        .canonicalize()
        .with_context(|| format!("export directory {}", args.dir.display()))?;
    anyhow::ensure!(export.is_dir(), "{} is not a directory", export.display());
    anyhow::ensure!(
        !args.writeback || args.cache == crossfs_virtiofs::CacheMode::Always,
        "--writeback needs --cache always"
    );
    let config = ServerConfig {
        export: export.clone(),
        max_msize: args.msize,
        read_only: args.read_only,
        allow_devices: args.allow_devices,
        allow_setuid: args.allow_setuid,
        extensions: !args.no_extensions,
        splice_reads: !args.no_splice,
        splice_writes: !args.no_splice,
        workers_per_connection: usize::from(args.workers),
        max_in_flight: usize::from(args.max_in_flight),
        max_fids: args.max_fids,
        max_connections: args.max_connections as usize,
        max_buffered_bytes: args.max_buffered_bytes,
        max_xattr_size: args.max_xattr_size,
        max_pending_xattr_bytes: args.max_pending_xattr_bytes,
        fd_budget: args
            .fd_budget
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        auth_token: match &args.token_file {
            Some(path) => Some(AuthToken::new(crate::token::read(path)?)?),
            None => None,
        },
    };
    // vhost-user-fs listeners are served by the virtio door; the others carry 9P.
    let (vhost, listen): (Vec<Addr>, Vec<Addr>) = args
        .listen
        .iter()
        .cloned()
        .partition(|a| matches!(a, Addr::VhostUserFs(_)));
    let listen_opts = ListenOptions {
        allow_remote_tcp: args.allow_remote,
        stream: SocketOptions {
            send_buffer: args.socket_buffer,
            recv_buffer: args.socket_buffer,
            nodelay: true,
        },
        ..ListenOptions::default()
    };
    // Bind everything before serving anything, and before the watcher sets up its watches
    // (thousands of inotify watches on a large export), so a bad or busy address fails the
    // command at once.
    let mut listeners = Vec::new();
    for addr in &listen {
        let listener = Listener::bind(addr, &listen_opts)
            .map_err(|e| crate::explain::listen_failed(addr, e))?;
        listeners.push((addr.clone(), listener));
    }
    let events = match args.events {
        EventsChoice::Off => None,
        EventsChoice::On(backend) => {
            let config = HubConfig {
                backend,
                ring_capacity: args.event_queue as usize,
                ..HubConfig::default()
            };
            let hub = EventHub::start(&export, config).with_context(|| {
                format!(
                    "watching {} for change events (--events off to serve without)",
                    export.display()
                )
            })?;
            info!(backend = ?hub.backend(), epoch = hub.epoch(), "change events on");
            Some(Arc::new(hub))
        }
    };
    // One export for both doors: one policy, one descriptor budget (each client's share
    // is kept fair by the pool, whichever door it came through), one set of reserved names
    // (the event hub's sync cookies).
    let policy = crossfs_export::policy::Policy {
        read_only: args.read_only,
        allow_devices: args.allow_devices,
        allow_setuid: args.allow_setuid,
    };
    let mut core = crossfs_export::Export::open(&export, policy, config.fd_budget)
        .with_context(|| format!("exporting {}", export.display()))?;
    core.reserved_prefix = events.as_ref().map(|hub| hub.cookie_prefix().to_vec());
    info!(
        export = %export.display(),
        openat2 = core.openat2,
        fd_limit = core.fd_limit,
        fd_budget = core.fds.budget(),
        read_only = args.read_only,
        "export opened"
    );
    let core = Arc::new(core);
    let server = Server::with_export(config, core.clone(), events.clone())
        .with_context(|| format!("exporting {}", export.display()))?;
    let fs_config = crossfs_virtiofs::FsConfig {
        cache: args.cache,
        max_pages: args.max_pages,
        negative_ttl: None,
        max_xattr_size: args.max_xattr_size,
        xattr: !args.no_xattr,
        readdirplus: !args.no_readdirplus,
        announce_submounts: args.announce_submounts,
        writeback: args.writeback,
    };
    let mut sockets: Vec<(String, crossfs_virtiofs::Socket)> = vhost
        .iter()
        .filter_map(|addr| match addr {
            Addr::VhostUserFs(path) => Some((addr.to_string(), path.clone().into())),
            _ => None,
        })
        .collect();
    // Held while we serve: the descriptor number stays claimed.
    let inherited = match args.vhost_user_fs_fd {
        Some(fd) => {
            // Worded for virtiofsd's --fd too, which comes here.
            let context = "serving virtio-fs on an inherited socket";
            let inherited = InheritedUnixListener::adopt(fd).context(context)?;
            let listener = inherited.listener().try_clone().context(context)?;
            let name = format!("fd:{fd}");
            sockets.push((
                format!("vhost-user-fs:{name}"),
                crossfs_virtiofs::Socket::Listening(listener, name),
            ));
            Some(inherited)
        }
        None => None,
    };
    let (vhost, virtio): (Vec<String>, Vec<_>) = sockets
        .into_iter()
        .map(|(name, socket)| {
            let dev = crossfs_virtiofs::VirtioFs::new(
                core.clone(),
                socket,
                fs_config.clone(),
                usize::from(args.request_queues),
            )
            .exit_with_vmm(args.exit_with_vmm)
            .with_events(events.clone());
            (name, Arc::new(dev))
        })
        .unzip();
    let _control = match &args.control {
        Some(path) => {
            let server = server.clone();
            let devices: Vec<_> = virtio
                .iter()
                .zip(&vhost)
                .map(|(dev, addr)| (addr.clone(), dev.stats()))
                .collect();
            Some(ControlEndpoint::start(path, move || {
                let mut stats = server.stats_json();
                if !devices.is_empty() {
                    stats["virtiofs"] = devices
                        .iter()
                        .map(|(addr, st)| {
                            let mut v = st.to_json();
                            v["listen"] = addr.clone().into();
                            v
                        })
                        .collect();
                }
                stats
            })?)
        }
        None => None,
    };
    let serving: Vec<String> = listen
        .iter()
        .map(Addr::to_string)
        .chain(vhost.iter().cloned())
        .collect();
    info!(
        export = %export.display(),
        msize = args.msize,
        read_only = args.read_only,
        token = args.token_file.is_some(),
        "serving on {}",
        serving.join(", ")
    );

    // Ok(Some(signal)), Ok(None) for a listener that is finished, Err for a device that
    // could not be served (its socket not bound: a bad address fails the command).
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<Option<i32>, String>>();
    for (addr, listener) in listeners {
        let server = server.clone();
        let done = done_tx.clone();
        std::thread::Builder::new()
            .name(format!("accept {addr}"))
            .spawn(move || {
                accept_loop(&server, &addr, &listener);
                // An fd: transport serves one client; when every listener is finished, so
                // are we.
                let _ = done.send(Ok(None));
            })
            .context("starting an accept thread")?;
    }
    for (dev, addr) in virtio.into_iter().zip(vhost) {
        let done = done_tx.clone();
        std::thread::Builder::new()
            .name(format!("serve {addr}"))
            .spawn(move || {
                let _ = done.send(dev.serve().map(|()| None).map_err(|e| e.to_string()));
            })
            .context("starting a vhost-user-fs thread")?;
    }
    let signal_tx = done_tx.clone();
    crate::signals::on_termination(move |sig| {
        let _ = signal_tx.send(Ok(Some(sig)));
    })?;
    drop(done_tx);
    let mut running = serving.len();
    while running > 0 {
        match done_rx.recv() {
            Ok(Ok(Some(sig))) => {
                info!("signal {sig}: shutting down");
                break;
            }
            Ok(Ok(None)) => running -= 1,
            Ok(Err(failed)) => anyhow::bail!(failed),
            Err(_) => break,
        }
    }
    // Dropping the listeners (in their threads) and the control endpoint removes their socket
    // files; process exit closes client connections.
    drop(inherited);
    Ok(())
}

fn accept_loop(server: &Arc<Server>, addr: &Addr, listener: &Listener) {
    loop {
        let stream = match listener.accept() {
            Ok(stream) => stream,
            Err(TransportError::NoMoreConnections { .. }) => return,
            Err(err) => {
                // Typically EMFILE or a peer that reset before accept: keep serving others.
                warn!("accept on {addr}: {err}");
                std::thread::sleep(std::time::Duration::from_millis(50));
                continue;
            }
        };
        let peer = stream.peer();
        let reader = match stream.try_clone() {
            Ok(r) => r,
            Err(err) => {
                warn!("{peer}: {err}");
                continue;
            }
        };
        let server = server.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("conn {peer}"))
            .spawn(move || server.serve_socket(reader, stream, peer));
        if let Err(err) = spawned {
            warn!("cannot start a connection thread: {err}");
        }
    }
}
