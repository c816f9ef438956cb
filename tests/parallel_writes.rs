//! O_DIRECT writes from 8 threads to one file through `crossfs mount`, which the kernel runs
//! in parallel (the mount answers an O_DIRECT open with `FOPEN_PARALLEL_DIRECT_WRITES`),
//! end with what a local file of the host shows after the same writes, in every cache mode:
//!
//! - **disjoint ranges**, each thread rewriting its own blocks three times (the first pass
//!   extends the file, which the kernel still does one write at a time; the others
//!   overwrite): the same bytes and size as the local file;
//! - **overlapping ranges that agree**: rounds apart (every write of a round returned
//!   before the next begins) in which threads write overlapping runs of blocks, each block
//!   with its round's content: the same bytes as the local file, so no write was lost,
//!   misplaced or given another's data while several were in flight;
//! - **overlapping ranges that conflict**: every thread writing the same blocks with its
//!   own content: each block ends as one whole write to it, on the mount and on the host
//!   alike (as on the local file, whose winner may differ);
//! - **appends** (`O_APPEND`), each thread with its own descriptor: the size is exactly
//!   the sum of the writes, and every write is there once, whole.
//!
//! Behaviour only: how fast the writes go is `crossfs bench --workloads random`'s business.

mod common;
mod tools;

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Barrier;

use common::*;
use tools::assert_root;

const BLOCK: usize = 4096;
const THREADS: usize = 8;
/// Blocks of the file the disjoint and agreeing phases write (1 MiB).
const BLOCKS: usize = 256;
/// Blocks each thread owns in the disjoint phase come in runs of this many (so that some
/// writes cover several blocks).
const RUN: usize = 4;
/// Blocks every thread writes in the conflicting phase.
const CONTESTED: usize = 8;
/// Appends per thread.
const APPENDS: usize = 32;

/// What a block written with `id` at block `index` holds: the index and the id, then bytes
/// that follow from both, so a block that is not one whole such write is recognised.
fn pattern(id: u64, index: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(BLOCK);
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    let mut x = (id ^ index.rotate_left(32)) | 1;
    while out.len() < BLOCK {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// The id a block was written with, if it is one whole write for block `index` (any block
/// index if `index` is `None`, as for appends).
fn whole_write(block: &[u8], index: Option<u64>) -> Option<u64> {
    let at = u64::from_le_bytes(block[..8].try_into().unwrap());
    let id = u64::from_le_bytes(block[8..16].try_into().unwrap());
    (index.is_none_or(|i| i == at) && pattern(id, at) == block).then_some(id)
}

/// A write id: the thread, the phase and a sequence number of that thread.
fn id(thread: usize, phase: u64, seq: usize) -> u64 {
    (phase << 48) | ((thread as u64) << 32) | seq as u64
}

/// A buffer aligned for O_DIRECT (as the bench's: an offset into an ordinary Vec, whose
/// heap block never moves), holding `data`.
struct Aligned {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(data: &[u8]) -> Aligned {
        let mut storage = vec![0u8; data.len() + BLOCK];
        let start = (BLOCK - storage.as_ptr() as usize % BLOCK) % BLOCK;
        storage[start..start + data.len()].copy_from_slice(data);
        Aligned {
            storage,
            start,
            len: data.len(),
        }
    }

    fn get(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

/// Opens `path` for O_DIRECT writes (plus `extra` flags), creating it; without O_DIRECT
/// where the file system refuses it (a local tmpfs before Linux 6.6), which changes
/// nothing the checks look at.
fn open_direct(path: &Path, extra: i32) -> File {
    let open = |direct: i32| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .custom_flags(direct | extra)
            .open(path)
    };
    match open(libc::O_DIRECT) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => open(0).unwrap(),
        r => r.unwrap_or_else(|e| panic!("opening {} with O_DIRECT: {e}", path.display())),
    }
}

fn pwrite(file: &File, data: &[u8], offset: u64) {
    let buf = Aligned::new(data);
    let n = file.write_at(buf.get(), offset).unwrap();
    assert_eq!(n, data.len(), "short write at {offset}");
}

/// Runs `f(thread)` on `THREADS` threads that start together.
fn on_threads(f: impl Fn(usize) + Sync) {
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (f, start) = (&f, &start);
            s.spawn(move || {
                start.wait();
                f(t);
            });
        }
    });
}

/// Disjoint ranges: thread `t` owns the runs of `RUN` blocks whose number is `t` modulo
/// `THREADS`, and writes each of them three times, in an order of its own, as one write
/// or block by block. Each block's last write is its thread's last pass: one outcome.
fn disjoint(path: &Path, seed: u64) {
    let file = open_direct(path, 0);
    on_threads(|t| {
        let mut rng = Rng(seed ^ ((t as u64 + 1) * 0x9e37_79b9));
        let mut runs: Vec<usize> = (0..BLOCKS / RUN).filter(|r| r % THREADS == t).collect();
        let mut seq = 0;
        for _pass in 0..3 {
            for i in (1..runs.len()).rev() {
                runs.swap(i, rng.below(i + 1));
            }
            for &run in &runs {
                let first = run * RUN;
                let blocks: Vec<Vec<u8>> = (first..first + RUN)
                    .map(|b| {
                        seq += 1;
                        pattern(id(t, 1, seq), b as u64)
                    })
                    .collect();
                if rng.below(2) == 0 {
                    pwrite(&file, &blocks.concat(), (first * BLOCK) as u64);
                } else {
                    for (i, block) in blocks.iter().enumerate() {
                        pwrite(&file, block, ((first + i) * BLOCK) as u64);
                    }
                }
            }
        }
    });
}

/// The runs of blocks each thread writes in each round of [`agreeing`]: (first, count).
fn agreeing_plan(seed: u64) -> Vec<Vec<Vec<(usize, usize)>>> {
    let mut rng = Rng(seed | 1);
    (0..4)
        .map(|_| {
            (0..THREADS)
                .map(|_| {
                    (0..24)
                        .map(|_| {
                            let count = 1 + rng.below(8);
                            (rng.below(BLOCKS - count + 1), count)
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// Overlapping ranges that agree: in round `r` every block written holds `pattern(r, b)`
/// whoever writes it; rounds are apart, so each block ends with the last round that
/// wrote it.
fn agreeing(path: &Path, seed: u64) {
    let file = open_direct(path, 0);
    let plan = agreeing_plan(seed);
    let between = Barrier::new(THREADS);
    on_threads(|t| {
        for (r, round) in plan.iter().enumerate() {
            for &(first, count) in &round[t] {
                let data: Vec<u8> = (first..first + count)
                    .flat_map(|b| pattern(id(0, 2, r), b as u64))
                    .collect();
                pwrite(&file, &data, (first * BLOCK) as u64);
            }
            between.wait();
        }
    });
}

/// Overlapping ranges that conflict: every thread writes each of the first `CONTESTED`
/// blocks several times with content of its own.
fn conflicting(path: &Path) {
    let file = open_direct(path, 0);
    on_threads(|t| {
        for seq in 0..6 * CONTESTED {
            let b = (seq + t) % CONTESTED;
            pwrite(&file, &pattern(id(t, 3, seq), b as u64), (b * BLOCK) as u64);
        }
    });
}

/// Appends of whole blocks, each thread through its own descriptor.
fn appends(path: &Path) {
    on_threads(|t| {
        let mut file = open_direct(path, libc::O_APPEND);
        for seq in 0..APPENDS {
            let buf = Aligned::new(&pattern(id(t, 4, seq), u64::MAX));
            assert_eq!(file.write(buf.get()).unwrap(), BLOCK, "short append");
        }
    });
}

/// The ids of the blocks of `data` that were each one whole write for their block;
/// panics, naming `what`, at the first that is not.
fn whole_blocks(data: &[u8], indexed: bool, what: &str) -> Vec<u64> {
    data.chunks(BLOCK)
        .enumerate()
        .map(|(b, block)| {
            whole_write(block, indexed.then_some(b as u64))
                .unwrap_or_else(|| panic!("{what}: block {b} is no one whole write to it"))
        })
        .collect()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Runs every phase in `dir` (through the mount) and in `local` (the host), and checks
/// them; `host` is `dir` as the export shows it on the host.
fn check_mode(mode: &str, dir: &Path, host: &Path, local: &Path) {
    let seed = 0x5eed_0000 + mode.len() as u64;
    let label = |what: &str| format!("--cache {mode}, {what}");

    for d in [dir, local] {
        disjoint(&d.join("disjoint"), seed);
    }
    let expected = read(&local.join("disjoint"));
    assert_eq!(expected.len(), BLOCKS * BLOCK);
    whole_blocks(&expected, true, "local disjoint");
    for (d, side) in [(dir, "through the mount"), (host, "on the host")] {
        let got = read(&d.join("disjoint"));
        assert!(
            got == expected,
            "{}",
            label(&format!("disjoint writes differ {side}"))
        );
    }

    for d in [dir, local] {
        agreeing(&d.join("agreeing"), seed);
    }
    let expected = read(&local.join("agreeing"));
    for (d, side) in [(dir, "through the mount"), (host, "on the host")] {
        let got = read(&d.join("agreeing"));
        assert!(
            got == expected,
            "{}",
            label(&format!("overlapping writes that agree differ {side}"))
        );
    }

    for d in [dir, local] {
        conflicting(&d.join("conflicting"));
    }
    let local_ids = whole_blocks(&read(&local.join("conflicting")), true, "local conflicting");
    assert_eq!(local_ids.len(), CONTESTED);
    let mounted = read(&dir.join("conflicting"));
    assert_eq!(
        mounted.len(),
        CONTESTED * BLOCK,
        "{}",
        label("conflicting size")
    );
    whole_blocks(
        &mounted,
        true,
        &label("conflicting writes through the mount"),
    );
    assert!(
        mounted == read(&host.join("conflicting")),
        "{}",
        label("conflicting writes: the mount and the host differ")
    );

    let all: BTreeSet<u64> = (0..THREADS)
        .flat_map(|t| (0..APPENDS).map(move |seq| id(t, 4, seq)))
        .collect();
    for d in [local, dir] {
        appends(&d.join("appended"));
        let data = read(&d.join("appended"));
        assert_eq!(
            data.len(),
            THREADS * APPENDS * BLOCK,
            "{}",
            label(&format!("appended size in {}", d.display()))
        );
        let ids = whole_blocks(&data, false, &label("appends"));
        let found: BTreeSet<u64> = ids.iter().copied().collect();
        assert!(
            found == all && ids.len() == all.len(),
            "{}",
            label("every append once")
        );
    }
    assert!(
        read(&dir.join("appended")) == read(&host.join("appended")),
        "{}",
        label("appends: the mount and the host differ")
    );
}

#[test]
fn parallel_direct_writes_end_as_on_a_local_file_in_every_cache_mode() {
    assert_root();
    let tmp = tempfile::tempdir().unwrap();
    let export = tmp.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let addr = format!("unix:{}", tmp.path().join("s.sock").display());
    let _serve = Serve::start(&export, &addr, &[]);
    for mode in ["never", "metadata", "auto", "always"] {
        let host = export.join(mode);
        let local = tmp.path().join(format!("local-{mode}"));
        std::fs::create_dir(&host).unwrap();
        std::fs::create_dir(&local).unwrap();
        let mut mount = Mount::start(&addr, &["--cache", mode]);
        let dir = mount.mountpoint.join(mode);
        check_mode(mode, &dir, &host, &local);
        assert!(mount.stop().success(), "--cache {mode}: the mount's exit");
        println!("--cache {mode}: parallel O_DIRECT writes end as on a local file");
    }
}

#[test]
fn the_checks_tell_a_torn_or_misplaced_block() {
    let block = pattern(id(3, 1, 7), 5);
    assert_eq!(whole_write(&block, Some(5)), Some(id(3, 1, 7)));
    assert_eq!(whole_write(&block, Some(6)), None, "misplaced");
    let mut torn = block.clone();
    torn[2048..].copy_from_slice(&pattern(id(4, 1, 7), 5)[2048..]);
    assert_eq!(whole_write(&torn, Some(5)), None, "torn");
}
