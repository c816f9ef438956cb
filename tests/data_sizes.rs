//! Files of every size around a boundary, through every path, byte for byte; and which path
//! a read's bytes took.
//!
//! The sizes: 0, 1, a page and either side of it, 64 KiB and either side of it (the
//! largest write the server copies and runs on its connection's reader; a larger one is
//! spliced from the socket into the file), 1 MiB less a page (the largest READ a mount
//! that splices without `CAP_SYS_RESOURCE` asks for: its reply must fit a 1 MiB pipe) and
//! either side of it, 1 MiB (a FUSE request, and the payload of a 1 MiB 9P message) and
//! either side of it, the negotiated msize and either side of it, and 64 MiB and a byte.
//! The paths: `crossfs mount` in each cache mode (the page cache in `auto` and `always`,
//! none in `metadata` and `never`, where reads and writes come as the program makes them,
//! at any offset), against a server that splices reads into the socket and large writes
//! into the file (the default) and one that copies both (`--no-splice`), with a mount that
//! splices READ replies from the socket into /dev/fuse (the default) and one that copies
//! them (`--no-splice`), over a unix socket and over TCP. The mount writes a WRITE's data
//! from the request's buffer behind its 9P head either way.
//!
//! Each file is written through the mount and read back through it, through a second,
//! fresh mount (so the reads go to the server), and in the export; files written in the
//! export are read through a fresh mount, whole and from unaligned offsets. Every read is
//! compared with what was written by checksum and length. The Linux kernel's 9p client is
//! not here: the host kernel of the test machine has no 9p (tests/kernel_client.rs runs
//! it in a guest).

mod common;
mod tools;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use common::*;
use tools::*;

const MIB: u64 = 1 << 20;

/// The sizes around every boundary, given the negotiated msize.
fn sizes(msize: u64) -> Vec<u64> {
    let mut v = vec![
        0,
        1,
        4095,
        4096,
        4097,
        64 * 1024 - 1,
        64 * 1024,
        64 * 1024 + 1,
        MIB - 4096 - 1,
        MIB - 4096,
        MIB - 4096 + 1,
        MIB - 1,
        MIB,
        MIB + 1,
        msize - 1,
        msize,
        msize + 1,
        64 * MIB + 1,
    ];
    v.sort_unstable();
    v.dedup();
    v
}

/// The content of the file of `size` bytes: no two pages alike, none all zeros.
fn content(size: u64, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut out = Vec::with_capacity(size as usize);
    while (out.len() as u64) < size {
        let word = rng.below(usize::MAX) as u64;
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.truncate(size as usize);
    out
}

/// FNV-1a over `data`, with its length: what the reads are compared by.
fn checksum(data: &[u8]) -> (usize, u64) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (data.len(), h)
}

/// Reads `path` whole in blocks of `block` bytes (a program's `read` loop).
fn read_in_blocks(path: &Path, block: usize) -> Vec<u8> {
    let mut f = std::fs::File::open(path).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0; block];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn assert_same(what: &str, expected: &[u8], got: &[u8]) {
    assert_eq!(
        checksum(got),
        checksum(expected),
        "{what}: (length, checksum) differ"
    );
}

/// One server configuration: a tmpfs export (so the disk does not set the pace) served
/// with `serve_args`, listening on a unix socket or on TCP.
struct Served {
    _dir: tempfile::TempDir,
    export: std::path::PathBuf,
    serve: Serve,
}

fn served(serve_args: &[&str], tcp: bool) -> Served {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let listen = if tcp {
        format!("tcp:127.0.0.1:{}", free_port())
    } else {
        format!("unix:{}", dir.path().join("s.sock").display())
    };
    let serve = Serve::start(&export, &listen, serve_args);
    Served {
        _dir: dir,
        export,
        serve,
    }
}

/// Every size written through a mount with `--cache cache` (and `mount_args`) and read back
/// every way.
fn round_trip(s: &Served, (cache, mount_args): (&str, &[&str]), label: &str) {
    let args = [&["--cache", cache][..], mount_args].concat();
    let writer = Mount::start(&s.serve.listen, &args);
    let msize = writer.stats()["msize"]["effective"].as_u64().unwrap();
    let sizes = sizes(msize);
    let dir = format!("{cache}-written");
    std::fs::create_dir(writer.mountpoint.join(&dir)).unwrap();
    for (i, &size) in sizes.iter().enumerate() {
        let data = content(size, i as u64 + 1);
        let path = writer.mountpoint.join(&dir).join(format!("f{size}"));
        let mut f = std::fs::File::create(&path).unwrap();
        // Written in pieces that straddle every boundary, then synced.
        for piece in data.chunks(3 * MIB as usize / 2 + 7) {
            f.write_all(piece).unwrap();
        }
        f.sync_all().unwrap();
        drop(f);
        let what = format!("{label} --cache {cache}: {size} bytes");
        assert_same(
            &format!("{what}, read back through the writing mount"),
            &data,
            &read_in_blocks(&path, MIB as usize),
        );
        assert_same(
            &format!("{what}, in the export"),
            &data,
            &std::fs::read(s.export.join(&dir).join(format!("f{size}"))).unwrap(),
        );
    }
    // A fresh mount has none of it cached: every read goes to the server.
    let reader = Mount::start(&s.serve.listen, &args);
    for (i, &size) in sizes.iter().enumerate() {
        let data = content(size, i as u64 + 1);
        let path = reader.mountpoint.join(&dir).join(format!("f{size}"));
        assert_same(
            &format!("{label} --cache {cache}: {size} bytes, through a second mount"),
            &data,
            &read_in_blocks(&path, 128 * 1024 + 1),
        );
    }
    // Written on the host, read through a fresh mount whole and from unaligned offsets.
    let host_dir = format!("{cache}-host");
    std::fs::create_dir(s.export.join(&host_dir)).unwrap();
    for (i, &size) in sizes.iter().enumerate() {
        let data = content(size, 1000 + i as u64);
        std::fs::write(s.export.join(&host_dir).join(format!("f{size}")), &data).unwrap();
    }
    let fresh = Mount::start(&s.serve.listen, &args);
    for (i, &size) in sizes.iter().enumerate() {
        let data = content(size, 1000 + i as u64);
        let path = fresh.mountpoint.join(&host_dir).join(format!("f{size}"));
        let what = format!("{label} --cache {cache}: {size} bytes written on the host");
        // Unaligned first (before the page cache holds anything), then whole.
        let f = std::fs::File::open(&path).unwrap();
        for offset in [1, 4095, MIB - 1, msize + 1] {
            let want = &data[(offset.min(size) as usize)..];
            let want = &want[..want.len().min(msize as usize + 3)];
            let mut got = vec![0; want.len()];
            let mut n = 0;
            while n < got.len() {
                let k = f.read_at(&mut got[n..], offset + n as u64).unwrap();
                if k == 0 {
                    break;
                }
                n += k;
            }
            got.truncate(n);
            assert_same(&format!("{what}, read at {offset}"), want, &got);
        }
        let mut f = f;
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut whole = Vec::new();
        f.read_to_end(&mut whole).unwrap();
        assert_same(&format!("{what}, whole"), &data, &whole);
    }
}

#[test]
fn every_size_through_every_cache_mode_spliced_and_copied() {
    assert_root();
    let copy: &[&str] = &["--no-splice"];
    for (serve_args, mount_args, tcp, label) in [
        (&[][..], &[][..], false, "unix, spliced by both"),
        // The mount splices what the server wrote from its memory: pieces that are not
        // whole pages, so a 1 MiB reply may not fit the pipe and is copied part-way.
        (
            copy,
            &[][..],
            false,
            "unix, copied by the server, spliced by the mount",
        ),
        (
            &[][..],
            copy,
            false,
            "unix, spliced by the server, copied by the mount",
        ),
        (&[][..], &[][..], true, "tcp, spliced by both"),
    ] {
        let s = served(serve_args, tcp);
        for cache in ["auto", "always", "metadata", "never"] {
            round_trip(&s, (cache, mount_args), label);
        }
    }
}

/// A cold read through the mount moves its bytes by splicing on the server, except a
/// first read that comes with its open (`Twalkread`), which is copied; with
/// `--no-splice`, every byte is copied. The mount, likewise, splices each READ's payload
/// from the socket into /dev/fuse but for that first read and small ones; with
/// `--no-splice`, it copies every byte. Counts, not timings.
#[test]
fn a_cold_read_is_spliced_on_the_server_and_in_the_mount_and_counted() {
    assert_root();
    for splice in [true, false] {
        let copy: &[&str] = if splice { &[] } else { &["--no-splice"] };
        let s = served(copy, false);
        let size = 8 * MIB;
        let data = content(size, 7);
        std::fs::write(s.export.join("big"), &data).unwrap();
        let mount = Mount::start(&s.serve.listen, copy);
        // The change events (read by the mount as Tread replies, so counted too) of the
        // file's making delivered before counting: only the file's bytes are counted.
        mount.wait_following();
        run_ok(
            Command::new(crossfs_bin())
                .arg("sync")
                .arg(&mount.mountpoint),
        );
        let before = s.serve.stats()["data"].clone();
        assert_same(
            "the file through the mount",
            &data,
            &read_in_blocks(&mount.mountpoint.join("big"), MIB as usize),
        );
        let after = s.serve.stats()["data"].clone();
        let moved = |key: &str| after[key].as_u64().unwrap() - before[key].as_u64().unwrap();
        let (spliced, copied) = (moved("read_spliced"), moved("read_copied"));
        assert_eq!(spliced + copied, size, "splice {splice}: {after}");
        if splice {
            // At most the first read (1 MiB, with the open) copied.
            assert!(copied <= MIB, "copied {copied} of {size}: {after}");
            assert!(
                spliced >= size - MIB,
                "spliced {spliced} of {size}: {after}"
            );
        } else {
            assert_eq!(spliced, 0, "{after}");
        }
        let m = mount.stats();
        let (m_spliced, m_copied) = (
            m["data"]["read_spliced"].as_u64().unwrap(),
            m["data"]["read_copied"].as_u64().unwrap(),
        );
        assert_eq!(m_spliced + m_copied, size, "{m}");
        if splice {
            // The first read (with the open), and READs under 64 KiB (the kernel's first
            // readahead may be one), are copied.
            assert!(
                m_copied <= MIB + 64 * 1024,
                "mount copied {m_copied} of {size}: {m}"
            );
        } else {
            assert_eq!(m_spliced, 0, "{m}");
        }
    }
}

/// Written through the mount in 1 MiB writes, then synced: the mount writes every byte
/// from the FUSE request's buffer behind its 9P head (`write_vectored`), and the server
/// splices it from the socket into the file (`write_spliced`), or, with `serve
/// --no-splice`, copies it (`write_copied`); a write of 64 KiB is copied either way.
/// Counts, not timings.
#[test]
fn a_large_write_goes_from_the_mounts_buffer_and_is_spliced_by_the_server_and_counted() {
    assert_root();
    for splice in [true, false] {
        let serve_args: &[&str] = if splice { &[] } else { &["--no-splice"] };
        let s = served(serve_args, false);
        let mount = Mount::start(&s.serve.listen, &[]);
        let moved = |before: &serde_json::Value, after: &serde_json::Value, key: &str| {
            after[key].as_u64().unwrap() - before[key].as_u64().unwrap()
        };
        for (size, block) in [(8 * MIB, MIB as usize), (64 * 1024, 64 * 1024)] {
            let data = content(size, 11);
            let (server0, mount0) = (
                s.serve.stats()["data"].clone(),
                mount.stats()["data"].clone(),
            );
            let path = mount.mountpoint.join(format!("w{size}"));
            let mut f = std::fs::File::create(&path).unwrap();
            for piece in data.chunks(block) {
                f.write_all(piece).unwrap();
            }
            f.sync_all().unwrap();
            drop(f);
            let (server1, mount1) = (
                s.serve.stats()["data"].clone(),
                mount.stats()["data"].clone(),
            );
            assert_same(
                "in the export",
                &data,
                &std::fs::read(s.export.join(format!("w{size}"))).unwrap(),
            );
            let (spliced, copied) = (
                moved(&server0, &server1, "write_spliced"),
                moved(&server0, &server1, "write_copied"),
            );
            let large = size > 64 * 1024;
            let want = if splice && large {
                (size, 0)
            } else {
                (0, size)
            };
            assert_eq!(
                (spliced, copied),
                want,
                "splice {splice}, {size} bytes: {server1}"
            );
            assert_eq!(
                (
                    moved(&mount0, &mount1, "write_vectored"),
                    moved(&mount0, &mount1, "write_copied")
                ),
                (size, 0),
                "the mount, {size} bytes: {mount1}"
            );
        }
    }
}
