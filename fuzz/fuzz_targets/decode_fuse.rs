//! The FUSE request decoder (`crossfs-fuse-abi`, shared by the virtio door and the mount's
//! session) on arbitrary bytes: it must never panic; what it accepts must hold together (the
//! header's length within the bytes, names without NUL, a WRITE's data inside the request),
//! and the in-structs beyond the op decode only from the request's own body.
#![no_main]

use crossfs_fuse_abi::{decode, Op};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = decode(data) else { return };
    assert!(req.header.len as usize <= data.len());
    assert!(req.header.len as usize >= 40);
    assert_eq!(req.body.len() + 40, req.header.len as usize);
    match req.op {
        Ok(Op::Lookup { name }) | Ok(Op::Unlink { name }) | Ok(Op::Rmdir { name }) => {
            assert!(!name.contains(&0));
        }
        Ok(Op::Write { data: payload, .. }) => {
            assert!(payload.len() + 80 <= req.header.len as usize);
            assert!(req.write_in().is_ok());
        }
        Ok(Op::BatchForget(ref list)) => {
            assert!(list.len() * 16 + 48 <= req.header.len as usize);
        }
        _ => {}
    }
    // Each may fail (another opcode, a short body), none may panic.
    let _ = req.write_in();
    let _ = req.read_in_full();
    let _ = req.flush_in();
    let _ = req.release_in();
    let _ = req.lk_in();
});
