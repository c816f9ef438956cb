//! No corruption, ever: data written through `crossfs mount` reads back byte for byte through
//! the same mount, through a second mount of the same export, and in the export directory.
//!
//! - fsx (the Rust port, pinned in `scripts/install-test-deps.sh`): four instances at once
//!   on one mount, two with mmap reads and writes and two without, fixed seeds, in every
//!   cache mode; each verifies every read against its own model.
//! - fio with `--verify=crc32c`: written through one mount, verified by fio through it, then
//!   again (`--verify_only`) through a second mount (`--cache never`) and in the export.
//! - stress-ng's file stressors (hdd, mmap, copy-file, aio) with `--verify`.
//! - A model of files written through one mount (writes across 1 MiB messages, holes,
//!   appends, truncation, renames), checked through a second mount and the export; files
//!   written on the host, checked through the second mount; two mounts writing disjoint
//!   ranges of one file at once.
//!
//! The second mount uses `--cache never`: without change events, that is the mode that
//! promises to see changes made elsewhere at once.

mod common;
mod tools;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use tools::*;

const FSX_VERSION: &str = "0.3.2";
/// Operations per fsx instance (four instances per cache mode).
const FSX_OPS: u32 = 5000;

/// fsx settings shared by every instance: files up to 1 MiB, operations up to 256 KiB (so
/// some span several pages and both sides of a readahead window), and every operation
/// a crossfs mount carries, hole punching among them (`fallocate(2)` through crossfs's
/// Tfallocate; fsx 0.3.2 has no zero-range, collapse or insert operations).
const FSX_COMMON: &str = "flen = 1048576
[opsize]
max = 262144
[weights]
close_open = 1
read = 10
write = 10
truncate = 2
fsync = 1
fdatasync = 1
posix_fallocate = 1
punch_hole = 1
sendfile = 1
posix_fadvise = 1
copy_file_range = 1
";

/// A served export and its address.
struct Export {
    _dir: tempfile::TempDir,
    path: PathBuf,
    addr: String,
    _serve: Serve,
}

fn export() -> Export {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("export");
    std::fs::create_dir(&path).unwrap();
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let serve = Serve::start(&path, &addr, &[]);
    Export {
        _dir: dir,
        path,
        addr,
        _serve: serve,
    }
}

#[test]
fn fsx_instances_at_once_in_every_cache_mode() {
    assert_root();
    let fsx = tool("fsx", FSX_VERSION);
    let work = tempfile::tempdir().unwrap();
    let with_mmap = work.path().join("mmap.toml");
    let without_mmap = work.path().join("plain.toml");
    let mmap_weights = "mapread = 5\nmapwrite = 5\ninvalidate = 1\n";
    std::fs::write(&with_mmap, format!("{FSX_COMMON}{mmap_weights}")).unwrap();
    let plain_weights = "mapread = 0\nmapwrite = 0\n";
    std::fs::write(&without_mmap, format!("{FSX_COMMON}{plain_weights}")).unwrap();
    let mut total = 0;
    for mode in ["never", "metadata", "auto", "always"] {
        let export = export();
        let mut mount = Mount::start(&export.addr, &["--cache", mode]);
        let runs: Vec<_> = (1..=4u32)
            .map(|seed| {
                let config = if seed % 2 == 1 {
                    &with_mmap
                } else {
                    &without_mmap
                };
                let artifacts = work.path().join(format!("{mode}-{seed}"));
                std::fs::create_dir(&artifacts).unwrap();
                Run::start(
                    &format!("fsx seed {seed} on crossfs mount --cache {mode}"),
                    Command::new(&fsx)
                        .arg("-f")
                        .arg(config)
                        .arg("-N")
                        .arg(FSX_OPS.to_string())
                        .arg("-S")
                        .arg(seed.to_string())
                        .arg("-P")
                        .arg(&artifacts)
                        .arg(mount.mountpoint.join(format!("fsx{seed}"))),
                    &artifacts.join("output"),
                    Duration::from_secs(300),
                )
            })
            .collect();
        for run in runs {
            let what = run.what.clone();
            let (status, out) = run.wait();
            assert!(
                status.success() && out.contains("All operations completed A-OK!"),
                "{what} failed ({status}):\n{out}"
            );
            total += FSX_OPS;
        }
        // What the mount shows is what the host has, and stays there after unmounting.
        let seen: Vec<_> = (1..=4)
            .map(|s| std::fs::read(mount.mountpoint.join(format!("fsx{s}"))).unwrap())
            .collect();
        assert!(mount.stop().success());
        for (i, data) in seen.iter().enumerate() {
            let host = std::fs::read(export.path.join(format!("fsx{}", i + 1))).unwrap();
            assert!(
                host == *data,
                "--cache {mode}: fsx{} differs between the mount and the export",
                i + 1
            );
        }
        println!("fsx: 4 x {FSX_OPS} operations verified with --cache {mode}");
    }
    println!("fsx: {total} operations in all, no corruption");
}

/// Runs fio with `args` plus `--directory DIR`, asserting success and no error. It runs
/// in the log's directory, where it leaves its verify state files.
fn fio(args: &[&str], dir: &Path, log: &Path, what: &str) {
    let (status, out) = run_logged(
        what,
        Command::new("fio")
            .args(args)
            .arg("--directory")
            .arg(dir)
            .current_dir(log.parent().unwrap()),
        log,
        Duration::from_secs(300),
    );
    assert!(
        status.success() && out.contains("err= 0"),
        "{what} failed ({status}):\n{out}"
    );
}

#[test]
fn fio_crc32c_verifies_through_a_second_mount_and_the_host() {
    assert_root();
    let out = Command::new("fio").arg("--version").output();
    assert!(
        out.is_ok_and(|o| o.status.success()),
        "fio is missing: run scripts/install-test-deps.sh"
    );
    let work = tempfile::tempdir().unwrap();
    // Buffered random writes of 4 KiB to 1 MiB from three jobs, and direct sequential
    // writes with several requests in flight; crc32c and the offset in every block.
    let buffered = [
        "--name=buffered",
        "--rw=randwrite",
        "--bsrange=4k-1m",
        "--size=32M",
        "--numjobs=3",
        "--ioengine=psync",
    ];
    let direct = [
        "--name=direct",
        "--rw=write",
        "--bs=1m",
        "--size=32M",
        "--numjobs=2",
        "--ioengine=libaio",
        "--iodepth=4",
        "--direct=1",
    ];
    let common = [
        "--verify=crc32c",
        "--verify_fatal=1",
        "--randseed=5640",
        "--fsync_on_close=1",
        "--group_reporting",
    ];
    for mode in ["auto", "always"] {
        let export = export();
        let writer = Mount::start(&export.addr, &["--cache", mode]);
        let mut other = Mount::start(&export.addr, &["--cache", "never"]);
        for (name, job) in [("buffered", &buffered[..]), ("direct", &direct[..])] {
            if mode == "always" && name == "direct" {
                continue; // the same requests as in auto mode
            }
            let args: Vec<&str> = job.iter().chain(&common).copied().collect();
            let log = |what: &str| work.path().join(format!("{mode}-{name}-{what}.log"));
            let label = format!("fio {name} on crossfs mount --cache {mode}");
            fio(&args, &writer.mountpoint, &log("write"), &label);
            let mut verify = args.clone();
            verify.push("--verify_only");
            fio(
                &verify,
                &other.mountpoint,
                &log("second-mount"),
                &format!("{label}, verified through a second mount (--cache never)"),
            );
            fio(
                &verify,
                &export.path,
                &log("export"),
                &format!("{label}, verified in the export directory"),
            );
            println!("{label}: verified through it, a second mount and the export");
        }
        assert!(other.stop().success());
        drop(writer);
    }
}

#[test]
fn stress_ng_file_stressors_verify_on_the_mount() {
    assert_root();
    let out = Command::new("stress-ng").arg("--version").output();
    assert!(
        out.is_ok_and(|o| o.status.success()),
        "stress-ng is missing: run scripts/install-test-deps.sh"
    );
    let export = export();
    let mount = Mount::start(&export.addr, &[]);
    let work = tempfile::tempdir().unwrap();
    // Bounded by operation counts, not time: sequential writes read back (hdd), shared
    // file mappings with msync (mmap), copies (copy-file) and async I/O (aio), each
    // checking what it reads with --verify.
    let (status, out) = run_logged(
        "stress-ng on crossfs mount",
        Command::new("stress-ng")
            .arg("--temp-path")
            .arg(&mount.mountpoint)
            .args(["--verify", "--metrics-brief"])
            .args([
                "--hdd",
                "2",
                "--hdd-bytes",
                "32M",
                "--hdd-write-size",
                "64K",
            ])
            .args(["--hdd-ops", "2000"])
            .args([
                "--mmap",
                "2",
                "--mmap-file",
                "--mmap-bytes",
                "8M",
                "--mmap-ops",
                "4",
            ])
            .args(["--copy-file", "1", "--copy-file-bytes", "128M"])
            .args(["--copy-file-ops", "5"])
            .args(["--aio", "1", "--aio-ops", "2000"]),
        &work.path().join("stress-ng.log"),
        Duration::from_secs(300),
    );
    assert!(
        status.success() && out.contains("successful run completed"),
        "stress-ng failed ({status}):\n{out}"
    );
    println!("{out}");
    drop(mount);
}

/// xorshift64*: a fixed seed gives the same operations every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 32) as u8).collect()
    }
}

/// Expected contents of every file, by name.
type Model = BTreeMap<String, Vec<u8>>;

fn write_at(model: &mut Model, name: &str, offset: usize, data: &[u8]) {
    let file = model.entry(name.to_owned()).or_default();
    if file.len() < offset + data.len() {
        file.resize(offset + data.len(), 0);
    }
    file[offset..offset + data.len()].copy_from_slice(data);
}

/// One random change made through `dir`, mirrored in `model`.
fn change(rng: &mut Rng, dir: &Path, model: &mut Model) {
    let name = format!("f{}", rng.below(6));
    let path = dir.join(&name);
    let len = model.get(&name).map_or(0, Vec::len);
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap()
    };
    match rng.below(10) {
        // Writes of up to 2.5 MiB, across message boundaries, sometimes past the end
        // (leaving a hole).
        0..=4 => {
            let offset = rng.below(len as u64 + 300_000) as usize;
            let n = 1 + rng.below(2_500_000) as usize;
            let data = rng.bytes(n);
            let f = open();
            f.write_all_at(&data, offset as u64).unwrap();
            if rng.below(3) == 0 {
                f.sync_all().unwrap();
            }
            write_at(model, &name, offset, &data);
        }
        5 => {
            let n = rng.below(100_000) as usize;
            let data = rng.bytes(n);
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .unwrap();
            std::io::Write::write_all(&mut f, &data).unwrap();
            model.entry(name).or_default().extend_from_slice(&data);
        }
        6 | 7 => {
            let new_len = rng.below(len as u64 * 2 + 4096) as usize;
            open().set_len(new_len as u64).unwrap();
            model.entry(name).or_default().resize(new_len, 0);
        }
        8 => {
            // Rename over another name.
            let to = format!("f{}", rng.below(6));
            if to != name && model.contains_key(&name) {
                std::fs::rename(&path, dir.join(&to)).unwrap();
                let data = model.remove(&name).unwrap();
                model.insert(to, data);
            }
        }
        _ => {
            if model.remove(&name).is_some() {
                std::fs::remove_file(&path).unwrap();
            }
        }
    }
}

/// Asserts that `dir` holds exactly the files of `model` with their contents.
fn check(dir: &Path, model: &Model, label: &str) {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let expected: Vec<_> = model.keys().cloned().collect();
    assert_eq!(names, expected, "{label}: the names");
    for (name, data) in model {
        let seen = std::fs::read(dir.join(name)).unwrap();
        if seen != *data {
            let first = seen
                .iter()
                .zip(data)
                .position(|(a, b)| a != b)
                .unwrap_or(seen.len().min(data.len()));
            panic!(
                "{label}: {name} differs: {} bytes, {} expected, first difference at {first}",
                seen.len(),
                data.len()
            );
        }
    }
}

#[test]
fn writes_through_one_path_read_back_through_the_others() {
    assert_root();
    // Writer: auto, the default; always, the writeback cache, which holds writes until
    // close. Reader: never, which asks the server every time; auto, which keeps its caches
    // and relies on the server's change events, waited for with `crossfs sync`.
    for (mode, reader_mode) in [("auto", "never"), ("always", "never"), ("auto", "auto")] {
        through_other_paths(mode, reader_mode);
        println!(
            "writes through crossfs mount --cache {mode}: identical through --cache \
             {reader_mode} and in the export"
        );
    }
}

/// For a reader that follows change events: waits until it shows every change so far.
fn settle(reader: &Mount, reader_mode: &str) {
    if reader_mode != "never" {
        run_ok(
            Command::new(crossfs_bin())
                .arg("sync")
                .arg(&reader.mountpoint),
        );
    }
}

fn through_other_paths(mode: &str, reader_mode: &str) {
    let export = export();
    let writer = Mount::start(&export.addr, &["--cache", mode]);
    let reader = Mount::start(&export.addr, &["--cache", reader_mode]);
    let (a, b) = (
        writer.mountpoint.join("model"),
        reader.mountpoint.join("model"),
    );
    std::fs::create_dir(&a).unwrap();
    let host = export.path.join("model");

    // Written through the first mount, read through the second and the host.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut model = Model::new();
    for round in 0..10 {
        for _ in 0..40 {
            change(&mut rng, &a, &mut model);
        }
        settle(&reader, reader_mode);
        check(&b, &model, &format!("{mode}: round {round}, second mount"));
        check(
            &host,
            &model,
            &format!("{mode}: round {round}, export directory"),
        );
    }

    // Written on the host, read through the second mount at once (--cache never).
    for _ in 0..60 {
        change(&mut rng, &host, &mut model);
    }
    settle(&reader, reader_mode);
    check(&b, &model, "host writes, second mount");

    // Two mounts writing alternate 256 KiB blocks of one 8 MiB file at the same time.
    const BLOCK: usize = 256 * 1024;
    let blocks: Vec<Vec<u8>> = (0..32).map(|_| rng.bytes(BLOCK)).collect();
    let shared_a = a.join("shared");
    std::fs::File::create(&shared_a).unwrap();
    // A reader that follows events knows the new name once its event is in (its replica
    // of the directory answers "missing" until then), as for any change made elsewhere.
    settle(&reader, reader_mode);
    std::thread::scope(|s| {
        for (dir, parity) in [(&a, 0), (&b, 1)] {
            let blocks = &blocks;
            s.spawn(move || {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("shared"))
                    .unwrap();
                for (i, block) in blocks.iter().enumerate().filter(|(i, _)| i % 2 == parity) {
                    f.write_all_at(block, (i * BLOCK) as u64).unwrap();
                }
                f.sync_all().unwrap();
            });
        }
    });
    model.insert("shared".into(), blocks.concat());
    settle(&reader, reader_mode);
    check(&b, &model, "two writers, second mount");
    check(&host, &model, "two writers, export directory");
    drop(reader);
    drop(writer);
    check(&host, &model, "after unmounting");
}
