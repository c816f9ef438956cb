//! `crossfs`: share a host directory with a VM or container.
//!
//! The binary is glue: it parses arguments into validated configurations (`args`), then hands
//! them to the library crates (run as `mount.crossfs`, it is mount(8)'s helper: `helper`;
//! run as `virtiofsd`, it takes virtiofsd's command line: `virtiofsd`): `crossfs-server` (serve), `crossfs-client` + `crossfs-mount`
//! (mount), `crossfs-bench` (bench). Errors are reported here, with context, via `anyhow`.

mod args;
mod cmd;
mod control;
mod explain;
mod helper;
mod mountinfo;
mod options;
mod signals;
mod syslog;
mod token;
mod virtiofsd;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.first().is_some_and(helper::invoked_as_helper) {
        return helper::run(argv);
    }
    if argv.first().is_some_and(virtiofsd::invoked_as_virtiofsd) {
        return virtiofsd::run(argv.into_iter().skip(1).collect());
    }
    let mut cli = args::Cli::parse_from(&argv);
    if let args::Command::Mount(m) = &cli.command {
        if !m.options.is_empty() {
            // `-o` options stand for flags: parsed again with those, so that a flag given
            // either way is checked the same way.
            let expanded = match options::expand_mount_argv(&argv, &m.options) {
                Ok(a) => a,
                Err(msg) => {
                    eprintln!("crossfs mount: {msg}");
                    return std::process::ExitCode::from(2);
                }
            };
            cli = args::Cli::parse_from(expanded);
        }
    }
    if let args::Command::Virtiofsd(args) = cli.command {
        return virtiofsd::run(args.args);
    }
    if let Err(err) = init_logging(cli.verbose, cli.quiet, cli.log_file.as_deref()) {
        eprintln!("crossfs: {err:#}");
        return std::process::ExitCode::FAILURE;
    }
    match cmd::run(cli.command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("crossfs: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr, or to `log_file` (appended); `RUST_LOG` overrides the level chosen by
/// -v / -q. Colours only on a terminal: a file or a pipe gets plain text.
fn init_logging(
    verbose: u8,
    quiet: bool,
    log_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let default = match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let (writer, ansi) = match log_file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| anyhow::anyhow!("--log-file {}: {e}", path.display()))?;
            (BoxMakeWriter::new(std::sync::Arc::new(file)), false)
        }
        None => (
            BoxMakeWriter::new(std::io::stderr),
            std::io::stderr().is_terminal(),
        ),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .with_target(false)
        .init();
    Ok(())
}
