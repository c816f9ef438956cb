//! What the door's options change, as the guest sees it: without extended attributes every
//! xattr request is "not supported" (ENOSYS, as virtiofsd answers without `--xattr`), and
//! without READDIRPLUS the FUSE_INIT reply does not offer it; announcing submounts offers
//! FUSE_SUBMOUNTS (what the guest then does with it: tests/virtiofs.rs); writeback caching
//! is offered only when asked for, with `--cache always` (what it costs the guest's stats:
//! tests/virtiofs.rs).

use std::sync::Arc;

use crossfs_export::policy::Policy;
use crossfs_export::Export;
use crossfs_virtiofs::{CacheMode, FsConfig, FuseFs, Stats};

const ROOT: u64 = 1;
const SETXATTR: u32 = 21;
const GETXATTR: u32 = 22;
const LISTXATTR: u32 = 23;
const REMOVEXATTR: u32 = 24;
const INIT: u32 = 26;
const DO_READDIRPLUS: u32 = 1 << 13;
const READDIRPLUS_AUTO: u32 = 1 << 14;
const SUBMOUNTS: u32 = 1 << 27;
const WRITEBACK_CACHE: u32 = 1 << 16;

fn fs(config: FsConfig) -> (tempfile::TempDir, FuseFs) {
    let dir = tempfile::tempdir().unwrap();
    let export = Export::open(dir.path(), Policy::default(), Some(256)).unwrap();
    let fs = FuseFs::new(Arc::new(export), config, Arc::new(Stats::default()));
    (dir, fs)
}

/// Sends one request; returns (errno, body).
fn call(fs: &FuseFs, opcode: u32, body: &[u8]) -> (i32, Vec<u8>) {
    let mut req = Vec::new();
    req.extend_from_slice(&((40 + body.len()) as u32).to_le_bytes());
    req.extend_from_slice(&opcode.to_le_bytes());
    req.extend_from_slice(&7u64.to_le_bytes());
    req.extend_from_slice(&ROOT.to_le_bytes());
    req.extend_from_slice(&[0; 16]);
    req.extend_from_slice(body);
    let reply = fs.handle(&req).expect("a reply");
    let error = -i32::from_le_bytes(reply[4..8].try_into().unwrap());
    (error, reply[16..].to_vec())
}

/// FUSE_INIT 7.31 with every flag offered; returns the flags agreed.
fn init(fs: &FuseFs) -> u32 {
    let mut body = Vec::new();
    for v in [7u32, 31, 128 << 10, !0] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    let (errno, reply) = call(fs, INIT, &body);
    assert_eq!(errno, 0);
    u32::from_le_bytes(reply[12..16].try_into().unwrap())
}

fn xattr_errnos(fs: &FuseFs) -> [i32; 4] {
    let size_then = |rest: &[u8]| {
        let mut b = 256u32.to_le_bytes().to_vec();
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(rest);
        b
    };
    let mut set = Vec::new();
    set.extend_from_slice(&1u32.to_le_bytes()); // size of the value
    set.extend_from_slice(&0u32.to_le_bytes()); // flags
    set.extend_from_slice(b"user.k\0v");
    [
        call(fs, SETXATTR, &set).0,
        call(fs, GETXATTR, &size_then(b"user.k\0")).0,
        call(fs, LISTXATTR, &size_then(b"")).0,
        call(fs, REMOVEXATTR, b"user.k\0").0,
    ]
}

#[test]
fn without_xattr_every_xattr_request_is_not_supported() {
    let (_dir, on) = fs(FsConfig::default());
    init(&on);
    assert_eq!(xattr_errnos(&on), [0, 0, 0, 0], "served by default");
    let (_dir, off) = fs(FsConfig {
        xattr: false,
        ..FsConfig::default()
    });
    init(&off);
    assert_eq!(xattr_errnos(&off), [libc::ENOSYS; 4]);
}

#[test]
fn without_readdirplus_init_does_not_offer_it() {
    let (_dir, on) = fs(FsConfig::default());
    let both = DO_READDIRPLUS | READDIRPLUS_AUTO;
    assert_eq!(init(&on) & both, both);
    let (_dir, off) = fs(FsConfig {
        readdirplus: false,
        ..FsConfig::default()
    });
    assert_eq!(init(&off) & both, 0);
}

#[test]
fn submounts_are_offered_only_when_announced() {
    let (_dir, quiet) = fs(FsConfig::default());
    assert_eq!(init(&quiet) & SUBMOUNTS, 0);
    let (_dir, announcing) = fs(FsConfig {
        announce_submounts: true,
        ..FsConfig::default()
    });
    assert_eq!(init(&announcing) & SUBMOUNTS, SUBMOUNTS);
}

#[test]
fn writeback_is_offered_only_when_asked_for_with_cache_always() {
    let offered = |cache, writeback| {
        let (_dir, fs) = fs(FsConfig {
            cache,
            writeback,
            ..FsConfig::default()
        });
        init(&fs) & WRITEBACK_CACHE
    };
    assert_eq!(
        offered(CacheMode::Always, false),
        0,
        "always alone, as virtiofsd"
    );
    assert_eq!(offered(CacheMode::Always, true), WRITEBACK_CACHE);
    assert_eq!(offered(CacheMode::Auto, true), 0, "only with always");
}
