//! Twrite's payload on its way into the file: spliced from the socket (large writes to a
//! file that takes a splice), copied (small ones, `splice_writes` off, a connection that is
//! no socket, an `O_APPEND` file), and frames that lie about their payload, which get an
//! error or a closed connection, never a panic or a hang, while other connections carry
//! on.

mod common;

use std::io::Write;

use common::{Client, Harness, ROOT};
use crossfs_wire::*;

const MIB: usize = 1 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add((i / 4096) as u8) ^ seed)
        .collect()
}

/// The server's bytes of written data by path: (copied, spliced).
fn written(h: &Harness) -> (u64, u64) {
    let data = h.server.stats_json()["data"].clone();
    (
        data["write_copied"].as_u64().unwrap(),
        data["write_spliced"].as_u64().unwrap(),
    )
}

/// A Twrite or Twriteattr frame of `data`, with the size field and count given.
fn write_frame(
    ty: u8,
    tag: u16,
    (fid, offset): (u32, u64),
    size: u32,
    count: u32,
    data: &[u8],
) -> Vec<u8> {
    let mut f = size.to_le_bytes().to_vec();
    f.push(ty);
    f.extend_from_slice(&tag.to_le_bytes());
    f.extend_from_slice(&fid.to_le_bytes());
    f.extend_from_slice(&offset.to_le_bytes());
    f.extend_from_slice(&count.to_le_bytes());
    f.extend_from_slice(data);
    f
}

fn reply_to(c: &mut Client, tag: u16) -> Rmessage {
    let r = c.recv();
    assert_eq!(r.tag, Tag(tag));
    r.msg
}

/// Every size around the boundaries, written at an offset, arrives whole; the large ones
/// (over 64 KiB) by splicing, the others by copying, and every byte of both with
/// `splice_writes` off. Twriteattr's too.
#[test]
fn writes_of_every_size_arrive_whole_by_the_path_their_size_chooses() {
    for splice in [true, false] {
        let h = Harness::with(|c| c.splice_writes = splice);
        std::fs::write(h.path("f"), b"").unwrap();
        let mut c = h.connect_msize(DEFAULT_MSIZE);
        c.open(Fid(1), "f", open_flags::RDWR);
        // As much as a request may carry (Linux's rule: msize - 24).
        let room = c.msize as usize - IOHDRSZ;
        let sizes = [
            0,
            1,
            4095,
            4096,
            4097,
            65535,
            65536,
            65537,
            MIB - 1,
            MIB,
            MIB + 1,
            room - 1,
            room,
        ];
        let mut expected_spliced = 0u64;
        let mut total = 0u64;
        for (i, &size) in sizes.iter().enumerate() {
            let data = pattern(size, i as u8);
            let offset = 7 + i as u64 * 3;
            let before = written(&h);
            let count = if i % 2 == 0 {
                c.write(Fid(1), offset, &data).unwrap()
            } else {
                match c.ok(Twriteattr {
                    fid: Fid(1),
                    offset,
                    data: Data(data.clone()),
                }) {
                    Rmessage::Writeattr(w) => {
                        assert_eq!(w.attr.size, offset + size as u64, "the attributes after it");
                        w.count
                    }
                    other => panic!("{other:?}"),
                }
            };
            assert_eq!(count as usize, size);
            let file = std::fs::read(h.path("f")).unwrap();
            // Nothing written leaves the empty file empty.
            let end = if size == 0 { 0 } else { offset as usize + size };
            assert!(
                file.len() == end && file[end - size..] == data[..],
                "{size} bytes at {offset}: the file has {} bytes",
                file.len()
            );
            std::fs::write(h.path("f"), b"").unwrap();
            let after = written(&h);
            let moved = (after.0 - before.0) + (after.1 - before.1);
            assert_eq!(moved, size as u64, "{size}: {before:?} then {after:?}");
            total += size as u64;
            if splice && size > INLINE_WRITE_MAX {
                expected_spliced += size as u64;
            }
        }
        let (copied, spliced) = written(&h);
        assert_eq!(
            (copied + spliced, spliced),
            (total, expected_spliced),
            "splice {splice}"
        );
        c.close();
    }
}

/// A file opened `O_APPEND` (which splice refuses) or read-only, a large write is copied:
/// appended at the end, or refused with `EBADF`, as before.
#[test]
fn an_append_file_is_written_by_copying_and_a_read_only_one_refuses() {
    let h = Harness::new();
    std::fs::write(h.path("log"), b"start").unwrap();
    let mut c = h.connect_msize(DEFAULT_MSIZE);
    c.open(Fid(1), "log", open_flags::WRONLY | open_flags::APPEND);
    let data = pattern(MIB, 3);
    assert_eq!(c.write(Fid(1), 0, &data).unwrap() as usize, MIB);
    let file = std::fs::read(h.path("log")).unwrap();
    assert!(file.len() == 5 + MIB && file[5..] == data[..]);
    assert_eq!(written(&h), (MIB as u64, 0));
    c.open(Fid(2), "log", open_flags::RDONLY);
    assert_eq!(c.write(Fid(2), 0, &data), Err(libc::EBADF));
    assert_eq!(std::fs::read(h.path("log")).unwrap().len(), 5 + MIB);
}

/// Frames whose count is not their payload's length, large and small: each is answered
/// with an error and the connection goes on; nothing of them is written.
#[test]
fn a_write_whose_count_lies_is_refused_and_the_connection_goes_on() {
    let h = Harness::new();
    std::fs::write(h.path("f"), b"untouched").unwrap();
    let mut c = h.connect_msize(DEFAULT_MSIZE);
    c.open(Fid(1), "f", open_flags::RDWR);
    let data = pattern(MIB, 9);
    let head = TWRITE_HEADER_LEN as u32;
    let mut tag = 100;
    for ty in [Twrite::TYPE, Twriteattr::TYPE] {
        for (payload, count) in [
            (MIB, MIB as u32 + 1),
            (MIB, MIB as u32 - 1),
            (MIB, 0),
            (MIB, u32::MAX),
            (100, 101),
            (100, 99),
        ] {
            tag += 1;
            let frame = write_frame(
                ty,
                tag,
                (1, 0),
                head + payload as u32,
                count,
                &data[..payload],
            );
            c.send_raw(&frame);
            match reply_to(&mut c, tag) {
                Rmessage::Lerror(e) => assert_eq!(e.ecode as i32, libc::EINVAL),
                other => panic!("{payload} bytes saying {count}: {other:?}"),
            }
        }
    }
    assert_eq!(std::fs::read(h.path("f")).unwrap(), b"untouched");
    // Still in step: a sound write and a read.
    assert_eq!(c.write(Fid(1), 0, &data).unwrap() as usize, MIB);
    assert_eq!(c.read(Fid(1), 0, 10).unwrap(), &data[..10]);
    c.close();
}

/// A frame larger than msize is a closed connection, before any of it is taken.
#[test]
fn a_write_larger_than_msize_closes_the_connection() {
    let h = Harness::new();
    std::fs::write(h.path("f"), b"untouched").unwrap();
    let mut c = h.connect_msize(64 * 1024);
    c.open(Fid(1), "f", open_flags::RDWR);
    let size = 64 * 1024 + 1;
    let frame = write_frame(
        Twrite::TYPE,
        5,
        (1, 0),
        size,
        size - TWRITE_HEADER_LEN as u32,
        &[],
    );
    c.send_raw(&frame);
    c.expect_closed();
    assert_eq!(std::fs::read(h.path("f")).unwrap(), b"untouched");
}

/// A client that dies mid-payload, splicing or copying: the server closes that connection
/// (no panic, no hang), writes nothing of the unfinished write, and serves another
/// connection as before.
#[test]
fn a_connection_closed_mid_payload_ends_alone_and_writes_nothing() {
    for (size, splice) in [(MIB, true), (MIB, false), (8192, true)] {
        let h = Harness::with(|c| c.splice_writes = splice);
        std::fs::write(h.path("f"), b"untouched").unwrap();
        let mut other = h.connect_msize(DEFAULT_MSIZE);
        other.walk(ROOT, Fid(9), &[]).unwrap();
        let mut c = h.connect_msize(DEFAULT_MSIZE);
        c.open(Fid(1), "f", open_flags::RDWR);
        let data = pattern(size, 1);
        let count = size as u32;
        let frame = write_frame(
            Twrite::TYPE,
            7,
            (1, 0),
            TWRITE_HEADER_LEN as u32 + count,
            count,
            &data,
        );
        // The head and half the payload, then the stream ends.
        c.stream
            .write_all(&frame[..TWRITE_HEADER_LEN + size / 2])
            .unwrap();
        let _ = c.stream.shutdown(std::net::Shutdown::Write);
        c.expect_closed();
        assert_eq!(std::fs::read(h.path("f")).unwrap(), b"untouched", "{size}");
        other.open(Fid(2), "f", open_flags::RDWR);
        assert_eq!(other.write(Fid(2), 0, &data).unwrap() as usize, size);
        assert_eq!(std::fs::read(h.path("f")).unwrap(), data);
        other.close();
    }
}

/// Many large writes sent without waiting, to several offsets of one file, then read
/// back: the reader splices each payload into its own pipe while workers write earlier
/// ones, and every byte lands where its request said.
#[test]
fn pipelined_large_writes_land_where_they_say() {
    let h = Harness::new();
    std::fs::write(h.path("f"), b"").unwrap();
    let mut c = h.connect_msize(DEFAULT_MSIZE);
    c.open(Fid(1), "f", open_flags::RDWR);
    let n = 24;
    let piece = MIB / 2 + 4096 + 3;
    let mut sender = c.stream.try_clone().unwrap();
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut f = Vec::new();
            encode_twrite(
                Tag(i as u16 + 1),
                Fid(1),
                (i * piece) as u64,
                &pattern(piece, i as u8),
                &mut f,
            );
            f
        })
        .collect();
    let sending = std::thread::spawn(move || {
        for f in frames {
            sender.write_all(&f).unwrap();
        }
    });
    let mut answered = std::collections::HashSet::new();
    for _ in 0..n {
        let r = c.recv();
        match r.msg {
            Rmessage::Write(w) => assert_eq!(w.count as usize, piece),
            other => panic!("{other:?}"),
        }
        assert!(answered.insert(r.tag.0));
    }
    sending.join().unwrap();
    let file = std::fs::read(h.path("f")).unwrap();
    assert_eq!(file.len(), n * piece);
    for i in 0..n {
        assert!(
            file[i * piece..(i + 1) * piece] == pattern(piece, i as u8)[..],
            "piece {i}"
        );
    }
    assert_eq!(written(&h), (0, (n * piece) as u64));
    c.close();
}
