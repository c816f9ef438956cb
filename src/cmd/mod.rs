//! One module per subcommand.

pub mod bench;
mod mount;
mod serve;
mod stats;

use crate::args::Command;

/// Runs the chosen subcommand to completion.
pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve(args) => serve::run(args),
        Command::Mount(args) => mount::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Bench(args) => bench::run(*args),
    }
}
