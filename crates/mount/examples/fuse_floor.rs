//! The cost of a FUSE request with nothing behind it: how much of every call through a
//! crossfs mount is the kernel's and the machine's, not the mount's.
//!
//! ```sh
//! mkdir -p /tmp/floor
//! cargo run --release -p crossfs-mount --example fuse_floor -- /tmp/floor 4 &
//! python3 -c 'import os, time
//! t = time.perf_counter()
//! for _ in range(20000):
//!     try: os.getxattr("/tmp/floor/f", "security.capability")
//!     except OSError: pass
//! print((time.perf_counter() - t) / 20000 * 1e6, "us a request")'
//! fusermount3 -u /tmp/floor
//! ```
//!
//! It serves one empty file, `f`, whose attributes the kernel keeps for 100 s, and answers
//! every GETXATTR with ENODATA at once: each `getxattr` is one FUSE request, answered by
//! one of the session's threads (the second argument, default 4, as `crossfs mount
//! --threads`). Compare with `scripts/latency-steps.sh`'s "FUSE only" row, the same call
//! answered by a crossfs mount. Run both under `taskset -c 0` to see the cost without a
//! wake-up crossing CPUs.

use std::ffi::OsStr;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, Generation, INodeNo, MountOption,
    ReplyAttr, ReplyEntry, ReplyXattr, Request, Session,
};

struct Floor;

fn attr(ino: INodeNo) -> FileAttr {
    let dir = ino == INodeNo::ROOT;
    FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: if dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: if dir { 0o755 } else { 0o644 },
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        flags: 0,
        blksize: 4096,
    }
}

/// Long enough that no stat in a measurement asks again.
const KEEP: Duration = Duration::from_secs(100);

impl Filesystem for Floor {
    fn lookup(&self, _req: &Request, _parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if name == "f" {
            reply.entry(&KEEP, &attr(INodeNo(2)), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply.attr(&KEEP, &attr(ino));
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENODATA);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(mountpoint) = args.next() else {
        eprintln!("usage: fuse_floor MOUNTPOINT [THREADS]");
        std::process::exit(2);
    };
    let threads = match args.next().map(|t| t.parse::<usize>()) {
        None => 4,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("fuse_floor: THREADS must be a positive number");
            std::process::exit(2);
        }
    };
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("fuse_floor".into())];
    config.n_threads = Some(threads);
    config.clone_fd = true;
    let result = Session::new(Floor, std::path::Path::new(&mountpoint), &config)
        .and_then(|session| session.run());
    if let Err(e) = result {
        eprintln!("fuse_floor: {mountpoint}: {e}");
        std::process::exit(1);
    }
}
