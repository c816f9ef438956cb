//! Run the bench on directories that already exist (no serving or mounting):
//!
//!     cargo run --release --example bench_dirs -- [--quick] [--runs N] [--scale X]
//!         [--json FILE] [--svg FILE] native=/tmp/a [mount:NAME=/mnt/x ...]
//!
//! The first plain NAME=DIR is native; `mount:NAME=DIR` marks a mounted one.

use crossfs_bench::{run, BenchConfig, Target, TerminalProgress};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = BenchConfig::default();
    let (mut targets, mut json, mut svg) = (Vec::new(), None, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => config.quick = true,
            "--runs" => config.runs = args.next().ok_or("--runs N")?.parse()?,
            "--scale" => config.scale = args.next().ok_or("--scale X")?.parse()?,
            "--workload" => config
                .workloads
                .push(args.next().ok_or("--workload W")?.parse()?),
            "--json" => json = args.next(),
            "--svg" => svg = args.next(),
            spec => {
                let (name, dir) = spec.split_once('=').ok_or("expected NAME=DIR")?;
                targets.push(match name.strip_prefix("mount:") {
                    Some(name) => Target::mount(name, dir),
                    None => Target::native(name, dir),
                });
            }
        }
    }
    let report = run(&config, &targets, &mut TerminalProgress::new())?;
    print!("{}", report.table());
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&report.to_json())?)?;
    }
    if let Some(path) = svg {
        report.write_svg(path.as_ref())?;
    }
    Ok(())
}
