//! Workload 3: random 4 KiB reads and writes with O_DIRECT, 1 and 8 threads.
//!
//! O_DIRECT keeps every target's page cache out of the figure, so each
//! operation is one trip through the stack (for a mount: one FUSE request,
//! one 9P message). A target that refuses O_DIRECT gets an explicit
//! "not supported" entry instead of a figure.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use super::rng::Rng;
use super::{mib, thousands, Ctx, Deadline, MetricDef, Work};
use crate::config::Sizes;
use crate::error::{IoContext, WorkloadError};
use crate::stats::Unit;

const IO_SIZE: usize = 4096;
/// O_DIRECT wants buffers, offsets and lengths aligned to the logical block
/// size; 4 KiB covers every device and filesystem we meet.
const ALIGN: usize = 4096;
const THREADS: usize = 8;

pub(crate) const METRICS: &[MetricDef] = &[
    MetricDef {
        id: "read-1t",
        label: "4 KiB random read, 1 thread",
        unit: Unit::Iops,
        key_messages: &["Tread"],
    },
    MetricDef {
        id: "write-1t",
        label: "4 KiB random write, 1 thread",
        unit: Unit::Iops,
        key_messages: &["Twrite"],
    },
    MetricDef {
        id: "read-8t",
        label: "4 KiB random read, 8 threads",
        unit: Unit::Iops,
        key_messages: &["Tread"],
    },
    MetricDef {
        id: "write-8t",
        label: "4 KiB random write, 8 threads",
        unit: Unit::Iops,
        key_messages: &["Twrite"],
    },
];

pub(crate) fn title(s: &Sizes) -> String {
    format!(
        "random 4 KiB O_DIRECT I/O in a {} file: {} ops on 1 thread, {} over 8 threads, each figure capped at {:.1} s",
        mib(s.random_file_bytes),
        thousands(s.random_ops_one_thread),
        thousands(s.random_ops_eight_threads),
        s.time_cap_ms as f64 / 1000.0
    )
}

/// A 4 KiB buffer at a 4 KiB-aligned address inside an ordinary Vec: the
/// crate forbids `unsafe`, so no aligned allocator; the Vec's heap block never
/// moves, so the offset computed once stays valid.
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
}

impl AlignedBuf {
    fn new(fill: u8) -> Self {
        let storage = vec![fill; IO_SIZE + ALIGN];
        let addr = storage.as_ptr() as usize;
        let start = (ALIGN - addr % ALIGN) % ALIGN;
        Self { storage, start }
    }

    fn get(&self) -> &[u8] {
        &self.storage[self.start..self.start + IO_SIZE]
    }

    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + IO_SIZE]
    }
}

/// Open through the target with O_DIRECT; EINVAL means the filesystem refuses it.
fn open_direct(path: &Path) -> Result<File, WorkloadError> {
    rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::DIRECT | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
    .map_err(|e| {
        direct_error(e.into(), || {
            format!("opening {} with O_DIRECT", path.display())
        })
    })
}

fn direct_error(e: io::Error, context: impl FnOnce() -> String) -> WorkloadError {
    if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) {
        WorkloadError::Unsupported {
            what: "O_DIRECT".into(),
            source: e,
        }
    } else {
        WorkloadError::io(context(), e)
    }
}

/// Do up to `ops` random 4 KiB operations over `threads` threads, stopping at
/// `deadline`; returns how many were done.
fn random_io(
    file: &File,
    blocks: u64,
    threads: usize,
    ops: u64,
    write: bool,
    seed: u64,
    deadline: &Deadline,
) -> io::Result<u64> {
    let one = |t: usize, my_ops: u64| -> io::Result<u64> {
        let mut rng = Rng::new(seed ^ ((t as u64) << 32));
        let mut buf = AlignedBuf::new(0xa5);
        let mut done = 0;
        while done < my_ops && !deadline.passed() {
            let offset = rng.below(blocks) * IO_SIZE as u64;
            let n = if write {
                file.write_at(buf.get(), offset)?
            } else {
                file.read_at(buf.get_mut(), offset)?
            };
            if n != IO_SIZE {
                return Err(io::Error::other(format!(
                    "short {} of {n} bytes at {offset}",
                    if write { "write" } else { "read" }
                )));
            }
            done += 1;
        }
        Ok(done)
    };
    if threads == 1 {
        return one(0, ops);
    }
    let per_thread = ops / threads as u64;
    let extra = ops % threads as u64;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let my_ops = per_thread + u64::from((t as u64) < extra);
                scope.spawn(move || one(t, my_ops))
            })
            .collect();
        handles.into_iter().try_fold(0, |sum, h| {
            let done = h
                .join()
                .map_err(|_| io::Error::other("random I/O thread panicked"))??;
            Ok(sum + done)
        })
    })
}

pub(crate) fn prepare(pool: &Path, sizes: &Sizes) -> Result<(), WorkloadError> {
    let path = pool.join("random.dat");
    let mut f = File::create(&path).ctx(|| format!("creating {}", path.display()))?;
    let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + 3) as u8).collect();
    for _ in 0..sizes.random_file_bytes >> 20 {
        f.write_all(&chunk)
            .ctx(|| format!("writing {}", path.display()))?;
    }
    // O_DIRECT reads of dirty pages would first force their writeback:
    // settle the input before any timing.
    f.sync_all().ctx(|| format!("fsync {}", path.display()))
}

/// Before each run, natively in the prepared replica (the same inode on every target):
/// write back what the previous target left dirty, then read the whole file so the host's
/// page cache holds it, for every target alike.
///
/// Without this the first mount after the native target measured the disk, not the
/// crossing: the native target's O_DIRECT writes drop the file from the host's page cache
/// (ext4 invalidates the cached folios a direct write overlaps, and with large folios that
/// was the whole 128 MiB file here: `fincore` showed 128M resident before and 0B after), so
/// the first mount's server read from the disk and warmed the cache for the mounts after
/// it: 9.0k reads/s against 13.8k-18.4k on one thread (docs/bench.md).
pub(crate) fn warm(replica: &Path) -> Result<(), WorkloadError> {
    use std::io::Read;
    let path = replica.join("random.dat");
    let mut f = File::open(&path).ctx(|| format!("opening {}", path.display()))?;
    f.sync_data()
        .ctx(|| format!("fdatasync {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    while f
        .read(&mut buf)
        .ctx(|| format!("reading {}", path.display()))?
        > 0
    {}
    Ok(())
}

pub(crate) fn run(ctx: &mut Ctx<'_>) -> Result<(), WorkloadError> {
    let bytes = ctx.sizes.random_file_bytes;
    let path = ctx.work.join("random.dat");
    let file = open_direct(&path)?;
    let blocks = bytes / IO_SIZE as u64;
    let figures = [
        (1, ctx.sizes.random_ops_one_thread, false),
        (1, ctx.sizes.random_ops_one_thread, true),
        (THREADS, ctx.sizes.random_ops_eight_threads, false),
        (THREADS, ctx.sizes.random_ops_eight_threads, true),
    ];
    for (i, (metric, (threads, ops, write))) in METRICS.iter().zip(figures).enumerate() {
        let seed = i as u64 + 1;
        ctx.measure(metric, |deadline| {
            let done = random_io(&file, blocks, threads, ops, write, seed, deadline)
                .map_err(|e| direct_error(e, || format!("O_DIRECT I/O on {}", path.display())))?;
            Ok(Work::Ops(done))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn einval_means_unsupported() {
        let einval = io::Error::from_raw_os_error(rustix::io::Errno::INVAL.raw_os_error());
        let e = direct_error(einval, || "ctx".into());
        assert!(matches!(e, WorkloadError::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("O_DIRECT"), "{e}");
        let other = direct_error(io::Error::from(io::ErrorKind::NotFound), || "ctx".into());
        assert!(matches!(other, WorkloadError::Io { .. }));
    }

    #[test]
    fn aligned_buffer_is_aligned() {
        for fill in 0..8 {
            let mut b = AlignedBuf::new(fill);
            assert_eq!(b.get().as_ptr() as usize % ALIGN, 0);
            assert_eq!(b.get_mut().len(), IO_SIZE);
        }
    }
}
