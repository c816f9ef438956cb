//! The decoder against hand-built requests: each opcode's layout, and short or lying lengths.

use super::*;

fn header(len: u32, opcode: u32, unique: u64, nodeid: u64) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(&opcode.to_le_bytes());
    v.extend_from_slice(&unique.to_le_bytes());
    v.extend_from_slice(&nodeid.to_le_bytes());
    v.extend_from_slice(&[0; 16]);
    v
}

fn request(opcode: u32, body: &[u8]) -> Vec<u8> {
    let mut v = header((IN_HEADER_LEN + body.len()) as u32, opcode, 7, 1);
    v.extend_from_slice(body);
    v
}

#[test]
fn lookup_name_and_unique() {
    let r = request(1, b"a.txt\0");
    let req = decode(&r).unwrap();
    assert_eq!(req.header.unique, 7);
    assert_eq!(req.op, Ok(Op::Lookup { name: b"a.txt" }));
}

#[test]
fn bad_bodies_keep_the_unique() {
    // No NUL: the name runs off the end.
    let bytes1 = request(1, b"abc");
    let req = decode(&bytes1).unwrap();
    assert_eq!(req.header.unique, 7);
    assert_eq!(req.op, Err(DecodeError::Unterminated(Opcode::LOOKUP)));
    // A write claiming more data than sent.
    let mut body = vec![0u8; 40];
    body[16..20].copy_from_slice(&100u32.to_le_bytes());
    let bytes2 = request(16, &body);
    let req = decode(&bytes2).unwrap();
    assert_eq!(req.op, Err(DecodeError::Truncated(Opcode::WRITE)));
    // A batch forget with a count the body cannot hold.
    let mut body = vec![0u8; 8 + 16];
    body[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let bytes3 = request(42, &body);
    let req = decode(&bytes3).unwrap();
    assert!(matches!(req.op, Err(DecodeError::BadCount(..))));
    let bytes4 = request(4242, b"");
    let req = decode(&bytes4).unwrap();
    assert_eq!(req.op, Err(DecodeError::UnknownOpcode(4242)));
}

#[test]
fn header_lengths_are_checked() {
    assert_eq!(decode(&[0; 39]).unwrap_err(), DecodeError::ShortHeader(39));
    let mut r = request(1, b"x\0");
    r[0..4].copy_from_slice(&1000u32.to_le_bytes());
    assert!(matches!(decode(&r), Err(DecodeError::BadLength { .. })));
    r[0..4].copy_from_slice(&3u32.to_le_bytes());
    assert!(matches!(decode(&r), Err(DecodeError::BadLength { .. })));
}

#[test]
fn tmpfile_is_create_without_a_name() {
    let mut body = Vec::new();
    for v in [0o20200002u32, 0o100644, 0o022, 0] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(b"/\0");
    let bytes = request(51, &body);
    let want = Op::Tmpfile {
        flags: 0o20200002,
        mode: 0o100644,
        umask: 0o022,
    };
    assert_eq!(decode(&bytes).unwrap().op, Ok(want));
    // Without the name (which means nothing) too; a short fuse_create_in is not.
    let bytes = request(51, &body[..16]);
    assert!(decode(&bytes).unwrap().op.is_ok());
    let bytes = request(51, &body[..15]);
    assert_eq!(
        decode(&bytes).unwrap().op,
        Err(DecodeError::Truncated(Opcode::TMPFILE))
    );
}

#[test]
fn in_structs_beyond_the_op() {
    let mut body = Vec::new();
    for v in [3u64, 4096] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(&2u32.to_le_bytes()); // size
    body.extend_from_slice(&0u32.to_le_bytes()); // write_flags
    body.extend_from_slice(&0u64.to_le_bytes()); // lock_owner
    body.extend_from_slice(&0o2u32.to_le_bytes()); // flags
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(b"hi");
    let bytes = request(16, &body);
    let req = decode(&bytes).unwrap();
    assert_eq!(req.write_in().unwrap().flags, 0o2);
    assert_eq!(
        req.lk_in().unwrap_err(),
        DecodeError::NotThis(Opcode::GETLK)
    );
    let mut lk = Vec::new();
    for v in [1u64, 2, 10, 20] {
        lk.extend_from_slice(&v.to_le_bytes());
    }
    for v in [1u32, 77, 0, 0] {
        lk.extend_from_slice(&v.to_le_bytes());
    }
    let bytes = request(33, &lk);
    let got = decode(&bytes).unwrap().lk_in().unwrap();
    assert_eq!((got.owner, got.start, got.end, got.pid), (2, 10, 20, 77));
    let bytes = request(33, &lk[..30]);
    assert!(decode(&bytes).unwrap().lk_in().is_err());
}

#[test]
fn init_flags2_only_with_init_ext() {
    let mut body = Vec::new();
    for v in [7u32, 41, 131072, crate::init::INIT_EXT, 1 << 9] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    let bytes = request(26, &body);
    let Ok(Op::Init(i)) = decode(&bytes).unwrap().op else {
        panic!("not INIT")
    };
    assert_eq!(i.flags2, 1 << 9);
    body[12..16].copy_from_slice(&0u32.to_le_bytes());
    let bytes = request(26, &body);
    let Ok(Op::Init(i)) = decode(&bytes).unwrap().op else {
        panic!("not INIT")
    };
    assert_eq!(i.flags2, 0);
}

#[test]
fn symlink_and_rename_carry_two_names() {
    let bytes5 = request(6, b"l\0../t\0");
    let req = decode(&bytes5).unwrap();
    assert_eq!(
        req.op,
        Ok(Op::Symlink {
            name: b"l",
            target: b"../t"
        })
    );
    let mut body = 5u64.to_le_bytes().to_vec();
    body.extend_from_slice(b"a\0b\0");
    let bytes6 = request(12, &body);
    let req = decode(&bytes6).unwrap();
    assert_eq!(
        req.op,
        Ok(Op::Rename {
            newdir: 5,
            flags: 0,
            old: b"a",
            new: b"b"
        })
    );
}

/// A WRITE of `size` bytes whose header says `len`, with `data` after its head.
fn write_request(len: u32, size: u32, data: &[u8]) -> Vec<u8> {
    let mut v = header(len, Opcode::WRITE as u32, 9, 3);
    v.extend_from_slice(&5u64.to_le_bytes()); // fh
    v.extend_from_slice(&4096u64.to_le_bytes()); // offset
    v.extend_from_slice(&size.to_le_bytes());
    v.extend_from_slice(&[0; 20]);
    v.extend_from_slice(data);
    v
}

#[test]
fn a_write_head_decodes_as_the_whole_write_does() {
    let cases = [
        // (header's len, size, data bytes given)
        (80, 0, 0),
        (81, 1, 1),
        (80 + 4096, 4096, 4096),
        (80 + 4096, 4096, 5000), // more bytes in the chain than the request says
        (80 + 4096, 4097, 4096), // the data passes the length
        (80 + 4097, 4096, 4096), // the length passes the bytes
        (79, 0, 0),              // shorter than a WRITE's head
        (39, 0, 0),
    ];
    for (i, (len, size, given)) in cases.into_iter().enumerate() {
        let bytes = write_request(len, size, &vec![1; given]);
        let whole = decode(&bytes)
            .ok()
            .filter(|r| r.op.is_ok())
            .map(|r| (r.header, r.write_in().unwrap()));
        let head = decode_write_head(&bytes[..WRITE_HEAD_LEN.min(bytes.len())], given).ok();
        assert_eq!(whole, head, "{len} {size} {given}");
        assert_eq!(head.is_some(), i < 4, "{len} {size} {given}");
        if let Some((_, w)) = head {
            assert_eq!((w.fh, w.offset, w.size), (5, 4096, size));
        }
    }
    // Another opcode, or too few bytes for a header.
    let read = request(Opcode::READ as u32, &[0; 40]);
    assert_eq!(
        decode_write_head(&read, 0),
        Err(DecodeError::NotThis(Opcode::WRITE))
    );
    assert_eq!(
        decode_write_head(&read[..20], 100),
        Err(DecodeError::ShortHeader(20))
    );
    let bytes = write_request(80 + 10, 10, &[1; 10]);
    assert_eq!(
        decode_write_head(&bytes[..60], 30),
        Err(DecodeError::Truncated(Opcode::WRITE))
    );
}
