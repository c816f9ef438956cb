//! One module per subcommand.

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
    }
}

/// Connects a second 9P connection to `addr` and attaches its change-event stream
/// (optionally resuming after `since`, "EPOCH:SEQ"; presenting the secret in `token_file`
/// to a server that wants one).
pub(crate) fn connect_events(
    addr: &crossfs_transport::Addr,
    since: Option<&str>,
    token_file: Option<&std::path::Path>,
) -> anyhow::Result<(std::sync::Arc<crossfs_client::Client>, crossfs_client::Fid)> {
    use anyhow::Context;
    let stream = crossfs_transport::connect(addr, &crossfs_transport::SocketOptions::default())
        .with_context(|| format!("connecting to {addr}"))?;
    let reader = stream.try_clone().context("duplicating the connection")?;
    let client =
        crossfs_client::Client::connect(reader, stream, &crossfs_client::ClientConfig::default())
            .with_context(|| format!("negotiating 9P2000.L with {addr}"))?;
    let mut aname = crossfs_server::EVENTS_ANAME.to_string();
    if let Some(since) = since {
        aname.push_str("?since=");
        aname.push_str(since);
    }
    let uid = rustix::process::getuid().as_raw();
    let attached = match token_file {
        Some(path) => {
            let token = crate::token::read(path)?;
            client.attach_with_token(b"", aname.as_bytes(), uid, &token)
        }
        None => client.attach(b"", aname.as_bytes(), uid),
    };
    let (fid, _) = attached
        .with_context(|| format!("{addr} serves no change events (crossfs serve --events)"))?;
    Ok((client, fid))
}
