//! Random bytes, and random bodies behind valid headers for every opcode, through the FUSE
//! decoder and the whole request handling of the virtio door's file system (on a real
//! export in a temporary directory): never a panic; a reply, when there is one, is a
//! well-formed `fuse_out_header` with the request's `unique` and its own length. A bounded,
//! deterministic companion of the `decode_fuse` fuzz target.

use std::sync::Arc;

use crossfs_export::policy::Policy;
use crossfs_export::Export;
use crossfs_virtiofs::fuse::{decode, Opcode};
use crossfs_virtiofs::{FsConfig, FuseFs, Stats};
use proptest::prelude::*;

fn fs() -> (tempfile::TempDir, FuseFs) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    std::fs::write(dir.path().join("f"), b"data").unwrap();
    std::os::unix::fs::symlink("/etc", dir.path().join("l")).unwrap();
    let export = Arc::new(Export::open(dir.path(), Policy::default(), Some(256)).unwrap());
    let fs = FuseFs::new(export, FsConfig::default(), Arc::new(Stats::default()));
    (dir, fs)
}

fn request(opcode: u32, nodeid: u64, unique: u64, body: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&((40 + body.len()) as u32).to_le_bytes());
    r.extend_from_slice(&opcode.to_le_bytes());
    r.extend_from_slice(&unique.to_le_bytes());
    r.extend_from_slice(&nodeid.to_le_bytes());
    r.extend_from_slice(&[0; 16]);
    r.extend_from_slice(body);
    r
}

fn check_reply(reply: &[u8], unique: u64) {
    assert!(reply.len() >= 16, "{reply:?}");
    assert_eq!(
        u32::from_le_bytes(reply[0..4].try_into().unwrap()) as usize,
        reply.len()
    );
    assert_eq!(u64::from_le_bytes(reply[8..16].try_into().unwrap()), unique);
    let error = i32::from_le_bytes(reply[4..8].try_into().unwrap());
    assert!(error <= 0 && error > -4096, "error {error}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode(&bytes);
    }
}

proptest! {
    // Each case makes a small export: fewer cases, still every opcode many times over.
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn every_opcode_survives_random_bodies(
        op in prop::sample::select(Opcode::ALL.to_vec()),
        nodeid in prop::sample::select(vec![0u64, 1, 2, 3, 4, u64::MAX]),
        body in proptest::collection::vec(any::<u8>(), 0..200),
        unique in any::<u64>(),
    ) {
        let (_dir, fs) = fs();
        // Give the fs a few nodes to aim at: d, f, l.
        for (i, name) in [&b"d\0"[..], b"f\0", b"l\0"].into_iter().enumerate() {
            let reply = fs.handle(&request(1, 1, i as u64, name)).unwrap();
            check_reply(&reply, i as u64);
        }
        let req = request(op as u32, nodeid, unique, &body);
        if let Some(reply) = fs.handle(&req) {
            check_reply(&reply, unique);
        }
        // A header whose length lies is dropped without a reply.
        let mut lying = req.clone();
        lying[0..4].copy_from_slice(&((req.len() + 1) as u32).to_le_bytes());
        prop_assert!(fs.handle(&lying).is_none());
    }
}
