//! `crossfs watch`: print a server's change events as they come, one line each.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use crossfs_client::ClientError;
use crossfs_events::Event;
use crossfs_transport::Addr;

use crate::args::WatchArgs;

/// How long a read waits for a lost server before saying so (and waiting again).
const RECONNECT_WAIT: Duration = Duration::from_secs(10);

pub fn run(args: WatchArgs) -> Result<()> {
    let addr = target_addr(&args.target)?;
    let token = match &args.token_file {
        Some(path) => Some(crate::token::read(path)?),
        None => None,
    };
    let (client, fid) = super::connect_events(&addr, args.since.as_deref(), token.as_deref())?;
    // A restarted server: carry on after the last event printed (it answers with a rescan).
    let last = Arc::new(Mutex::new(args.since.clone()));
    let position = last.clone();
    super::resume_events(
        &client,
        fid,
        &addr,
        token,
        move || {
            position
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        },
        RECONNECT_WAIT,
    )?;
    if !args.json {
        eprintln!("watching {addr} (Ctrl-C to stop)");
    }
    let mut out = std::io::stdout().lock();
    loop {
        // A long poll: the server answers when events arrive, or with nothing after a while.
        let data = match client.read(fid, 0, client.max_io()) {
            Ok(data) => data,
            Err(ClientError::Disconnected(e)) => {
                eprintln!("{addr}: {e}");
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading change events from {addr}")),
        };
        for line in data.split_inclusive(|&b| b == b'\n') {
            let event = Event::from_json_line(line);
            if let Ok(ev) = &event {
                *last.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(format!("{}:{}", ev.epoch, ev.seq));
            }
            if args.json {
                out.write_all(line)?;
                continue;
            }
            match event {
                Ok(ev) => writeln!(out, "{ev}")?,
                Err(e) => writeln!(
                    out,
                    "unreadable event ({e}): {}",
                    String::from_utf8_lossy(line)
                )?,
            }
        }
        out.flush()?;
    }
}

/// An address as given, or the server of the `crossfs mount` at a mount point (its
/// mount is of type `fuse.crossfs` with the address as its source, see
/// /proc/self/mountinfo).
fn target_addr(target: &str) -> Result<Addr> {
    if !Path::new(target).is_dir() {
        return target
            .parse()
            .map_err(|e| anyhow::anyhow!("`{target}` is neither a directory nor an address: {e}"));
    }
    let dir = Path::new(target)
        .canonicalize()
        .with_context(|| format!("mount point {target}"))?;
    let mounts = crate::mountinfo::mounts().context("reading /proc/self/mountinfo")?;
    if let Some(addr) = crate::mountinfo::at(&mounts, &dir).and_then(|m| m.crossfs_addr()) {
        return addr
            .parse()
            .map_err(|e| anyhow::anyhow!("mount source `{addr}`: {e}"));
    }
    bail!("{} is not a crossfs mount", dir.display())
}
