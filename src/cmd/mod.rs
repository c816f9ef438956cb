//! One module per subcommand.

mod agent;
pub mod bench;
mod mount;
mod serve;
mod stats;
mod sync;
mod watch;

use crate::args::Command;

/// Runs the chosen subcommand to completion.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(args),
        Command::Mount(args) => mount::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Bench(args) => bench::run(*args),
        Command::Watch(args) => watch::run(args),
        Command::Sync(args) => sync::run(args),
        Command::Agent(args) => agent::run(args),
        // main hands it to crate::virtiofsd before logging is set up.
        Command::Virtiofsd(_) => anyhow::bail!("`crossfs virtiofsd` is run from main"),
        Command::Completions(args) => {
            let mut cli = <crate::args::Cli as clap::CommandFactory>::command();
            clap_complete::generate(args.shell, &mut cli, "crossfs", &mut std::io::stdout());
            Ok(())
        }
        Command::Man(args) => {
            let cli = <crate::args::Cli as clap::CommandFactory>::command();
            let page = match &args.subcommand {
                None => cli,
                Some(name) => cli
                    .find_subcommand(name)
                    .ok_or_else(|| anyhow::anyhow!("no subcommand `{name}`"))?
                    .clone()
                    .name(format!("crossfs-{name}"))
                    .version(env!("CARGO_PKG_VERSION")),
            };
            clap_mangen::Man::new(page).render(&mut std::io::stdout())?;
            Ok(())
        }
    }
}

/// Opens a connection to `addr` as the 9P client takes it: read half, write half, and a
/// closer that shuts the socket down.
pub(crate) fn dial(
    addr: &crossfs_transport::Addr,
    opts: &crossfs_transport::SocketOptions,
) -> std::io::Result<crossfs_client::Transport> {
    let stream = crossfs_transport::connect(addr, opts).map_err(std::io::Error::other)?;
    transport(stream)
}

/// As [`dial`], for a command's first connection: a failure is the command's error, in
/// words that name the address once and hint at what to check.
pub(crate) fn dial_first(
    addr: &crossfs_transport::Addr,
    opts: &crossfs_transport::SocketOptions,
) -> anyhow::Result<crossfs_client::Transport> {
    let stream = crossfs_transport::connect(addr, opts)
        .map_err(|e| crate::explain::connect_failed(addr, e))?;
    Ok(transport(stream)?)
}

fn transport(stream: crossfs_transport::Stream) -> std::io::Result<crossfs_client::Transport> {
    let reader = stream.try_clone()?;
    let closer = stream.try_clone()?;
    let hangup = std::os::fd::OwnedFd::from(stream.try_clone()?);
    // The reader reads the socket as it is, so its bytes may be spliced out of it too.
    let socket = std::os::fd::OwnedFd::from(stream.try_clone()?);
    Ok(crossfs_client::Transport {
        reader: Box::new(reader),
        writer: Box::new(stream),
        closer: Box::new(move || {
            let _ = closer.shutdown();
        }),
        hangup: Some(hangup),
        socket: Some(socket),
    })
}

/// The aname that attaches a server's change-event stream, resuming after `since`
/// ("EPOCH:SEQ") if given.
pub(crate) fn events_aname(since: Option<&str>) -> String {
    let mut aname = crossfs_server::EVENTS_ANAME.to_string();
    if let Some(since) = since {
        aname.push_str("?since=");
        aname.push_str(since);
    }
    aname
}

/// Connects a second 9P connection to `addr` and attaches its change-event stream
/// (optionally resuming after `since`, "EPOCH:SEQ"; presenting `token` to a server that
/// wants one).
pub(crate) fn connect_events(
    addr: &crossfs_transport::Addr,
    since: Option<&str>,
    token: Option<&[u8]>,
) -> anyhow::Result<(std::sync::Arc<crossfs_client::Client>, crossfs_client::Fid)> {
    use anyhow::Context;
    let t = dial_first(addr, &crossfs_transport::SocketOptions::default())?;
    let client =
        crossfs_client::Client::connect_transport(t, &crossfs_client::ClientConfig::default())
            .with_context(|| format!("negotiating 9P2000.L with {addr}"))?;
    let aname = events_aname(since);
    let uid = rustix::process::getuid().as_raw();
    let attached = match token {
        Some(token) => client.attach_with_token(b"", aname.as_bytes(), uid, token),
        None => client.attach(b"", aname.as_bytes(), uid),
    };
    let (fid, _) = attached.map_err(|e| match e {
        crossfs_client::ClientError::Errno(code)
            if code == rustix::io::Errno::ACCESS.raw_os_error() =>
        {
            crate::explain::attach_failed(addr, e, token.is_some())
        }
        e => anyhow::Error::new(e).context(format!(
            "{addr} serves no change events (crossfs serve --events)"
        )),
    })?;
    Ok((client, fid))
}

/// Makes the event connection `client` (attached as `fid`) reconnect by itself: on a new
/// connection it attaches again, resuming after `position()` ("EPOCH:SEQ", the last event
/// used), and a restarted server answers with a rescan. Calls wait up to `wait` meanwhile.
pub(crate) fn resume_events(
    client: &std::sync::Arc<crossfs_client::Client>,
    fid: crossfs_client::Fid,
    addr: &crossfs_transport::Addr,
    token: Option<Vec<u8>>,
    position: impl Fn() -> Option<String> + Send + Sync + 'static,
    wait: std::time::Duration,
) -> anyhow::Result<()> {
    use anyhow::Context;
    client.on_reconnect(move |c| {
        let aname = events_aname(position().as_deref());
        let uid = rustix::process::getuid().as_raw();
        c.attach_fid(fid, b"", aname.as_bytes(), uid, token.as_deref())
            .map(drop)
    });
    let addr = addr.clone();
    client
        .enable_reconnect(
            move || dial(&addr, &crossfs_transport::SocketOptions::default()),
            wait,
        )
        .context("starting the reconnect thread")
}
