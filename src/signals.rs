//! Waiting for SIGINT/SIGTERM so commands can shut down cleanly (unmount, remove sockets).

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};

/// Runs `on_signal` on a background thread when SIGINT or SIGTERM arrives.
pub fn on_termination(on_signal: impl FnOnce(i32) + Send + 'static) -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("installing signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                on_signal(sig);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}
