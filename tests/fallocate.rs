//! fallocate(2) through `crossfs mount` (Tfallocate, crossfs's extension, docs/protocol.md):
//! each mode gives the same size, blocks and content as on a local directory of the same
//! file system, in every cache mode; without the extension it is EOPNOTSUPP, as on a local
//! file system without fallocate, and posix_fallocate(3) still works (glibc writes the
//! range itself).

mod common;
mod tools;

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;
use tools::assert_root;

const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
const PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
const ZERO_RANGE: i32 = libc::FALLOC_FL_ZERO_RANGE;

/// One call: (mode, offset, length), in the order they run on one file.
type Call = (i32, i64, i64);

/// The modes a FUSE mount is asked for (Linux's FUSE passes only keep-size, punch-hole and
/// zero-range to a file system), each over data, holes and the end of the file.
const SCENARIOS: &[(&str, &[Call])] = &[
    ("plain", &[(0, 0, 300 << 10), (0, 1 << 20, 4096)]),
    ("keep-size", &[(KEEP_SIZE, 64 << 10, 1 << 20)]),
    (
        "punch-hole",
        &[
            (PUNCH_HOLE, 4096, 8192),
            (PUNCH_HOLE, 100_000, 50_000),
            (PUNCH_HOLE, 200 << 10, 1 << 20),
        ],
    ),
    (
        "zero-range",
        &[
            (ZERO_RANGE, 1000, 5000),
            (ZERO_RANGE | KEEP_SIZE, 250 << 10, 64 << 10),
            (ZERO_RANGE, 250 << 10, 64 << 10),
        ],
    ),
];

fn content() -> Vec<u8> {
    (0..256u32 << 10).map(|i| (i % 253) as u8 + 1).collect()
}

/// fallocate(2) of `path` opened for reading and writing: the errno on failure.
fn fallocate(path: &Path, (mode, offset, len): Call) -> Result<(), i32> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: a valid descriptor, held open for the call.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    }
}

/// What a program sees of a file: size, blocks, content.
fn seen(path: &Path) -> (u64, u64, Vec<u8>) {
    let m = std::fs::metadata(path).unwrap();
    (m.size(), m.blocks(), std::fs::read(path).unwrap())
}

/// A scenario's name, what each of its calls answered, and its file.
type Outcome = (&'static str, Vec<Result<(), i32>>, PathBuf);

/// Runs every scenario on a fresh file in `dir`.
fn run_scenarios(dir: &Path) -> Vec<Outcome> {
    SCENARIOS
        .iter()
        .map(|&(name, calls)| {
            let path = dir.join(name);
            std::fs::write(&path, content()).unwrap();
            let answers = calls.iter().map(|&c| fallocate(&path, c)).collect();
            (name, answers, path)
        })
        .collect()
}

#[test]
fn every_mode_gives_what_a_local_directory_gives_in_every_cache_mode() {
    assert_root();
    let local_dir = tempfile::tempdir().unwrap();
    let local = run_scenarios(local_dir.path());
    for mode in ["never", "metadata", "auto", "always"] {
        let dir = tempfile::tempdir().unwrap();
        let export = dir.path().join("export");
        std::fs::create_dir(&export).unwrap();
        let addr = format!("unix:{}", dir.path().join("s.sock").display());
        let _serve = Serve::start(&export, &addr, &[]);
        let mut mount = Mount::start(&addr, &["--cache", mode]);
        let mounted = run_scenarios(&mount.mountpoint);
        for ((name, want, local), (_, got, path)) in local.iter().zip(&mounted) {
            // A mode the host's file system refuses locally is refused through the mount.
            assert_eq!(got, want, "{mode} {name}: the answers differ");
            let (size, blocks, data) = seen(local);
            let (m_size, m_blocks, m_data) = seen(path);
            assert_eq!(
                (m_size, m_blocks),
                (size, blocks),
                "{mode} {name}: size, blocks"
            );
            assert!(m_data == data, "{mode} {name}: the content differs");
            // And the export holds it.
            let (h_size, h_blocks, h_data) = seen(&export.join(name));
            assert_eq!(
                (h_size, h_blocks),
                (size, blocks),
                "{mode} {name}: in the export"
            );
            assert!(
                h_data == data,
                "{mode} {name}: the export's content differs"
            );
        }
        // Bits a FUSE file system is never asked for are refused by the kernel.
        let f = mount.mountpoint.join("plain");
        let collapse = (libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096);
        assert_eq!(fallocate(&f, collapse), Err(libc::EOPNOTSUPP));
        assert_eq!(mount.stop().code(), Some(0), "{mode}");
    }
}

#[test]
fn without_the_extension_fallocate_is_eopnotsupp_and_posix_fallocate_still_works() {
    assert_root();
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let addr = format!("unix:{}", dir.path().join("s.sock").display());
    let _serve = Serve::start(&export, &addr, &["--no-extensions"]);
    let mount = Mount::start(&addr, &[]);
    let f = mount.mountpoint.join("f");
    std::fs::write(&f, content()).unwrap();
    for call in [
        (0, 0, 1 << 20),
        (PUNCH_HOLE, 0, 4096),
        (ZERO_RANGE, 0, 4096),
    ] {
        assert_eq!(fallocate(&f, call), Err(libc::EOPNOTSUPP), "{call:?}");
    }
    assert_eq!(std::fs::read(&f).unwrap(), content());
    // glibc's fallback reads each block before writing it.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f)
        .unwrap();
    // SAFETY: a valid descriptor, held open for the call.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, 1 << 20) };
    assert_eq!(rc, 0);
    assert_eq!(std::fs::metadata(export.join("f")).unwrap().size(), 1 << 20);
    assert_eq!(std::fs::read(&f).unwrap()[..256 << 10], content()[..]);
}
