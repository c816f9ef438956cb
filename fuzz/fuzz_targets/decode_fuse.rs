//! The virtio door's FUSE request decoder on arbitrary bytes: it must never panic; what it
//! accepts must hold together (the header's length within the bytes, names without NUL, a
//! WRITE's data inside the request).
#![no_main]

use crossfs_virtiofs::fuse::{decode, Op};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = decode(data) else { return };
    assert!(req.header.len as usize <= data.len());
    assert!(req.header.len as usize >= 40);
    match req.op {
        Ok(Op::Lookup { name }) | Ok(Op::Unlink { name }) | Ok(Op::Rmdir { name }) => {
            assert!(!name.contains(&0));
        }
        Ok(Op::Write { data: payload, .. }) => {
            assert!(payload.len() + 80 <= req.header.len as usize);
        }
        Ok(Op::BatchForget(list)) => {
            assert!(list.len() * 16 + 48 <= req.header.len as usize);
        }
        _ => {}
    }
});
