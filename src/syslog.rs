//! Logging for crossfs run as virtiofsd: at a level given on the command line, to stderr or
//! to the system log (`/dev/log`, one datagram per event, RFC 3164 framing, facility user),
//! which is where Kata reads virtiofsd's messages.

use std::io::{self, Write};
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;

use tracing::level_filters::LevelFilter;
use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// The system log's socket.
const DEV_LOG: &str = "/dev/log";

/// Installs the global subscriber: `RUST_LOG` overrides `level`. With `syslog`, events go
/// to the system log; if it cannot be reached they go to stderr, after a warning saying
/// so (as virtiofsd does).
pub fn init_logging(level: LevelFilter, syslog: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level.to_string()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let socket = syslog.then(|| {
        let socket = UnixDatagram::unbound()?;
        socket.connect(DEV_LOG)?;
        Ok::<_, io::Error>(socket)
    });
    match socket {
        Some(Ok(socket)) => builder
            .with_ansi(false)
            .without_time()
            .with_level(false)
            .with_writer(Syslog {
                socket: Arc::new(socket),
                pid: std::process::id(),
            })
            .init(),
        other => {
            builder
                .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
                .with_writer(io::stderr)
                .init();
            if let Some(Err(e)) = other {
                tracing::warn!("--syslog: cannot reach {DEV_LOG} ({e}); logging to stderr");
            }
        }
    }
}

/// Makes one [`Record`] per event.
struct Syslog {
    socket: Arc<UnixDatagram>,
    pid: u32,
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = Record;

    fn make_writer(&'a self) -> Record {
        self.record(Level::INFO)
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Record {
        self.record(*meta.level())
    }
}

impl Syslog {
    fn record(&self, level: Level) -> Record {
        // Facility user (1) times 8, plus the severity.
        let severity = match level {
            Level::ERROR => 3,
            Level::WARN => 4,
            Level::INFO => 6,
            Level::DEBUG | Level::TRACE => 7,
        };
        Record {
            socket: self.socket.clone(),
            line: format!("<{}>crossfs[{}]: ", 8 + severity, self.pid).into_bytes(),
        }
    }
}

/// One event's line, sent when the formatter is done with it.
struct Record {
    socket: Arc<UnixDatagram>,
    line: Vec<u8>,
}

impl Write for Record {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        while self.line.last() == Some(&b'\n') {
            self.line.pop();
        }
        // Nothing to tell anyone if the system log is gone.
        let _ = self.socket.send(&self.line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_is_one_datagram_with_its_severity() {
        let (ours, theirs) = UnixDatagram::pair().unwrap();
        let log = Syslog {
            socket: Arc::new(ours),
            pid: 42,
        };
        let mut r = log.record(Level::WARN);
        r.write_all(b"disk full\n").unwrap();
        drop(r);
        let mut buf = [0u8; 128];
        let n = theirs.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"<12>crossfs[42]: disk full");
    }
}
