//! Workloads 1 and 2: sequential read and write in 1 MiB blocks.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use super::rng::Rng;
use super::{mib, Ctx, Deadline, MetricDef, Work};
use crate::config::Sizes;
use crate::error::{IoContext, WorkloadError};
use crate::stats::Unit;

const BLOCK: usize = 1 << 20;

pub(crate) const READ_METRICS: &[MetricDef] = &[
    MetricDef {
        id: "read",
        label: "sequential read",
        unit: Unit::MibPerSec,
        key_messages: &["Tread"],
    },
    MetricDef {
        id: "read-8",
        label: "8 files read at once (aggregate)",
        unit: Unit::MibPerSec,
        key_messages: &["Tread"],
    },
];

/// Files read at once by the second figure, each an eighth of the sequential size, each
/// by its own thread.
const AT_ONCE: usize = 8;

fn at_once_path(dir: &Path, i: usize) -> std::path::PathBuf {
    dir.join(format!("seq-read-{i}.dat"))
}

pub(crate) const WRITE_METRICS: &[MetricDef] = &[MetricDef {
    id: "write",
    label: "sequential write + fsync",
    unit: Unit::MibPerSec,
    key_messages: &["Twrite", "Tfsync"],
}];

pub(crate) fn read_title(s: &Sizes) -> String {
    format!(
        "sequential read, {} file, 1 MiB blocks, client cache dropped, server cache warm; \
         then {AT_ONCE} files of {} read at once, one thread each",
        mib(s.seq_bytes),
        mib(s.seq_bytes / AT_ONCE as u64)
    )
}

pub(crate) fn write_title(s: &Sizes) -> String {
    format!(
        "sequential write, {} file, 1 MiB blocks, then fsync (inside the timing)",
        mib(s.seq_bytes)
    )
}

/// Incompressible-looking bytes, so no layer can shortcut zeros or holes.
fn block() -> Vec<u8> {
    let mut rng = Rng::new(0x5e9);
    (0..BLOCK / 8)
        .flat_map(|_| rng.next_u64().to_le_bytes())
        .collect()
}

/// Write `bytes` of `block` repeated to `file`, stopping early if `deadline`
/// passes; returns the bytes written.
fn write_blocks(
    file: &mut File,
    block: &[u8],
    bytes: u64,
    deadline: Option<&Deadline>,
) -> std::io::Result<u64> {
    let mut left = bytes;
    while left > 0 && !deadline.is_some_and(Deadline::passed) {
        let n = left.min(block.len() as u64) as usize;
        file.write_all(&block[..n])?;
        left -= n as u64;
    }
    Ok(bytes - left)
}

pub(crate) fn prepare_read(pool: &Path, sizes: &Sizes) -> Result<(), WorkloadError> {
    let path = pool.join("seq-read.dat");
    let mut f = File::create(&path).ctx(|| format!("creating {}", path.display()))?;
    write_blocks(&mut f, &block(), sizes.seq_bytes, None)
        .ctx(|| format!("writing {}", path.display()))?;
    // Flushed so that background writeback of the input does not land in a
    // measured window; the data stays in the page cache (the server's, for a mount).
    f.sync_all().ctx(|| format!("fsync {}", path.display()))?;
    for i in 0..AT_ONCE {
        let path = at_once_path(pool, i);
        let mut f = File::create(&path).ctx(|| format!("creating {}", path.display()))?;
        write_blocks(&mut f, &block(), sizes.seq_bytes / AT_ONCE as u64, None)
            .ctx(|| format!("writing {}", path.display()))?;
        f.sync_all().ctx(|| format!("fsync {}", path.display()))?;
    }
    Ok(())
}

pub(crate) fn run_read(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let bytes = ctx.sizes.seq_bytes;
    let path = ctx.work.join("seq-read.dat");
    let mut file = File::open(&path).ctx(|| format!("opening {}", path.display()))?;
    // Every run reads the same inode (the pool's, hard-linked), so a mount may
    // still hold it from an earlier run: this is what makes the read cold.
    ctx.drop_client_cache(&file)?;
    let mut buf = vec![0u8; BLOCK];
    let mut total = 0u64;
    let mut capped = false;
    ctx.measure(&READ_METRICS[0], |deadline| {
        loop {
            if total < bytes && deadline.passed() {
                capped = true;
                break;
            }
            let n = file
                .read(&mut buf)
                .ctx(|| format!("reading {}", path.display()))?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        Ok(Work::Bytes(total))
    })?;
    if total != bytes && !capped {
        return Err(WorkloadError::Check(format!(
            "read {total} bytes of a {bytes}-byte file"
        )));
    }
    run_read_at_once(ctx)
}

/// The second figure: [`AT_ONCE`] files, each read whole by its own thread at the same
/// time, client cache dropped; the rate is all their bytes over the time until the last
/// thread is done.
fn run_read_at_once(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let each = ctx.sizes.seq_bytes / AT_ONCE as u64;
    let mut files = Vec::with_capacity(AT_ONCE);
    for i in 0..AT_ONCE {
        let path = at_once_path(&ctx.work, i);
        let file = File::open(&path).ctx(|| format!("opening {}", path.display()))?;
        ctx.drop_client_cache(&file)?;
        files.push((path, file));
    }
    let mut read = [0u64; AT_ONCE];
    ctx.measure(&READ_METRICS[1], |deadline| {
        let results: Vec<Result<u64, WorkloadError>> = std::thread::scope(|s| {
            let threads: Vec<_> = files
                .iter_mut()
                .map(|(path, file)| {
                    s.spawn(move || -> Result<u64, WorkloadError> {
                        let mut buf = vec![0u8; BLOCK];
                        let mut total = 0u64;
                        while !deadline.passed() {
                            let n = file
                                .read(&mut buf)
                                .ctx(|| format!("reading {}", path.display()))?;
                            if n == 0 {
                                break;
                            }
                            total += n as u64;
                        }
                        Ok(total)
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("a reader thread panicked"))
                .collect()
        });
        for (slot, r) in read.iter_mut().zip(results) {
            *slot = r?;
        }
        Ok(Work::Bytes(read.iter().sum()))
    })?;
    let capped = ctx.samples.last().is_some_and(|s| s.capped);
    if !capped {
        if let Some(short) = read.iter().find(|&&n| n != each) {
            return Err(WorkloadError::Check(format!(
                "read {short} bytes of a {each}-byte file"
            )));
        }
    }
    Ok(())
}

pub(crate) fn run_write(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let bytes = ctx.sizes.seq_bytes;
    let path = ctx.work.join("seq-write.dat");
    let data = block();
    // Opening is setup; the writes and the fsync that makes them durable are the figure.
    let mut file = File::create(&path).ctx(|| format!("creating {}", path.display()))?;
    let mut written = 0;
    // At the time cap the writing stops, but the fsync of what was written is
    // still part of the figure.
    ctx.measure(&WRITE_METRICS[0], |deadline| {
        written = write_blocks(&mut file, &data, bytes, Some(deadline))
            .ctx(|| format!("writing {}", path.display()))?;
        file.sync_all()
            .ctx(|| format!("fsync {}", path.display()))?;
        Ok(Work::Bytes(written))
    })?;
    let len = file
        .metadata()
        .ctx(|| format!("fstat {}", path.display()))?
        .len();
    if len != written {
        return Err(WorkloadError::Check(format!(
            "wrote {written} bytes but the file has {len}"
        )));
    }
    Ok(())
}
