//! Request size end to end: with FUSE_MAX_PAGES and the raised readahead, a large read or
//! write is one 1 MiB 9P message per FUSE request; with max_pages 32 (FUSE's default
//! without FUSE_MAX_PAGES) every message stays within 128 KiB. Needs crossfs's own server:
//! diod caps msize at 64 KiB.

mod common;

use std::fs;
use std::io::{Read, Write};

use common::{Backend, Fixture, Setup};
use crossfs_mount::MountConfig;
use crossfs_wire::CounterSnapshot;

const MIB: u64 = 1 << 20;
/// size[4] type[1] tag[2] fid[4] offset[8] count[4] (Twriteattr is laid out the same)
const TWRITE_HEADER: u64 = 23;
/// size[4] type[1] tag[2] count[4]
const RREAD_HEADER: u64 = 11;

/// Mean payload per message of the types `names` between two snapshots.
fn mean_payload(
    before: &CounterSnapshot,
    after: &CounterSnapshot,
    names: &[&str],
    header: u64,
) -> (u64, u64) {
    let get = |s: &CounterSnapshot| {
        names.iter().fold((0, 0), |(n, b), name| {
            s.messages
                .get(*name)
                .map_or((n, b), |c| (n + c.count, b + c.bytes))
        })
    };
    let (c0, b0) = get(before);
    let (c1, b1) = get(after);
    let count = c1 - c0;
    assert!(count > 0, "no {names:?}");
    (count, (b1 - b0 - count * header) / count)
}

fn fixture(max_pages: Option<u32>) -> Fixture {
    Fixture::with(Setup {
        // One page of headroom so a whole 1 MiB payload fits in one message.
        msize: (MIB + 4096) as u32,
        config: MountConfig {
            max_pages,
            ..MountConfig::default()
        },
        ..Setup::new(Backend::Crossfs)
    })
}

fn data(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Writes `len` bytes through the mount, reads a host-written file of `len` bytes through
/// it; returns the mean Twrite and Rread payloads.
fn run(fx: &Fixture, len: u64) -> (u64, u64) {
    let content = data(len);
    let before = fx.counters();
    let mut f = fs::File::create(fx.m("written")).unwrap();
    f.write_all(&content).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let after = fx.counters();
    let (writes, write_size) =
        mean_payload(&before, &after, &["Twrite", "Twriteattr"], TWRITE_HEADER);
    assert!(
        fs::read(fx.e("written")).unwrap() == content,
        "written data differs"
    );

    fs::write(fx.e("host"), &content).unwrap();
    let before = fx.counters();
    let mut f = fs::File::open(fx.m("host")).unwrap();
    let mut back = Vec::with_capacity(len as usize);
    let mut buf = vec![0u8; 4 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    let after = fx.counters();
    let (reads, read_size) = mean_payload(&before, &after, &["Rread"], RREAD_HEADER);
    assert!(back == content, "read data differs");
    eprintln!(
        "{} MiB: {writes} Twrite of {write_size} B mean, {reads} Rread of {read_size} B mean; stats: max_pages {}, read_ahead_kb {}",
        len / MIB,
        fx.handle().stats_json()["max_pages"],
        fx.handle().stats_json()["read_ahead_kb"],
    );
    (write_size, read_size)
}

#[test]
fn large_reads_and_writes_are_one_mib_messages() {
    let fx = fixture(None);
    let (write_size, read_size) = run(&fx, 64 * MIB);
    assert_eq!(write_size, MIB, "each FUSE write is one 1 MiB Twrite");
    // Readahead ramps up over the first requests, then every request is 1 MiB.
    assert!(read_size > 7 * MIB / 8, "mean Rread {read_size}");
}

#[test]
fn max_pages_32_keeps_messages_within_128_kib() {
    let fx = fixture(Some(32));
    let (write_size, read_size) = run(&fx, 16 * MIB);
    assert_eq!(write_size, 128 << 10);
    assert!(read_size <= 128 << 10, "mean Rread {read_size}");
    assert!(read_size > 64 << 10, "mean Rread {read_size}");
}
