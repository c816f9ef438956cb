//! The FUSE request decoder (`crossfs-fuse-abi`, shared by the virtio door and the mount's
//! session) on arbitrary bytes: it must never panic; what it accepts must hold together (the
//! header's length within the bytes, names without NUL, a WRITE's data inside the request),
//! and the in-structs beyond the op decode only from the request's own body. The bytes
//! also go through the io_uring entry layout (`uring::reassemble`), which must not panic,
//! and through the virtio door's WRITE head decoder (`decode_write_head`, the data left
//! elsewhere), which must agree with the whole decoder.
#![no_main]

use crossfs_fuse_abi::{decode, decode_write_head, uring, Op, WRITE_HEAD_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A WRITE's head alone, its data elsewhere: decoded so exactly when the whole is.
    if let Some((head, rest)) = data.split_at_checked(WRITE_HEAD_LEN) {
        let whole = decode(data)
            .ok()
            .filter(|r| matches!(r.op, Ok(Op::Write { .. })))
            .map(|r| (r.header, r.write_in().expect("a decoded WRITE's write_in")));
        assert_eq!(decode_write_head(head, rest.len()).ok(), whole);
    }
    // The same bytes as a FUSE-over-io_uring entry: a header buffer, then the payload.
    if let Some((header, payload)) = data.split_at_checked(uring::HEADER_BUFFER_LEN) {
        let mut request = Vec::new();
        if uring::reassemble(header, payload, &mut request).is_ok() {
            let _ = decode(&request);
        }
    }
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
