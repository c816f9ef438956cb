//! Disk full on the server's side: a real `crossfs serve` exports a 2 MiB tmpfs, clients write
//! until it is full. ENOSPC must reach whoever wrote, through raw 9P and through a real
//! `crossfs mount` (in each cache mode, where the page cache may hold the error until fsync
//! or close), and nothing else may break: the same connection and the same mount carry on
//! once space is freed, and what was written before is intact.
//!
//! Runs as root (it mounts tmpfs and FUSE). Every blocking step has a generous deadline that
//! only guards against hangs; nothing asserts how fast anything is.

mod common;

use std::io::{Read, Write};
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use crossfs_wire::*;

const ENOSPC: i32 = 28;
/// Size of the tmpfs the server exports.
const FS_SIZE: u64 = 2 << 20;
/// The unit of writing: several fill the file system.
const CHUNK: usize = 64 << 10;
/// Longest any read from the server, or any application step on the mount, may take before
/// the test calls it stuck.
const DEADLINE: Duration = Duration::from_secs(60);

/// What byte `offset` of a file written by these tests holds.
fn byte_at(offset: u64) -> u8 {
    (offset % 251) as u8
}

fn pattern(offset: u64, len: usize) -> Vec<u8> {
    (offset..offset + len as u64).map(byte_at).collect()
}

/// A tmpfs of [`FS_SIZE`] on a temporary directory, unmounted when dropped (lazily if
/// something still holds it), so a failing test leaves no mount behind.
struct SmallFs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount() -> SmallFs {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fs");
        std::fs::create_dir(&path).unwrap();
        run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={FS_SIZE},mode=0755")])
                .arg("tmpfs")
                .arg(&path),
        );
        SmallFs { path, _dir: dir }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let quiet = |args: &[&str]| {
            Command::new("umount")
                .args(args)
                .arg(&self.path)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !quiet(&[]) {
            quiet(&["-l"]);
        }
    }
}

/// One raw 9P connection with a synchronous call.
struct Peer {
    s: UnixStream,
    next_tag: u16,
}

impl Peer {
    fn connect(sock: &Path) -> Peer {
        let s = UnixStream::connect(sock).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s.set_write_timeout(Some(DEADLINE)).unwrap();
        let mut p = Peer { s, next_tag: 1 };
        match p.call_tag(
            NOTAG,
            Tversion {
                msize: 256 << 10,
                version: VERSION_9P2000_L.to_vec(),
            },
        ) {
            Rmessage::Version(v) => assert_eq!(v.version, VERSION_9P2000_L),
            other => panic!("Tversion answered {other:?}"),
        }
        let attach = p.call(Tattach {
            fid: Fid(0),
            afid: NOFID,
            uname: b"disk-full".to_vec(),
            aname: Vec::new(),
            n_uname: 0,
        });
        assert!(matches!(attach, Rmessage::Attach(_)), "{attach:?}");
        p
    }

    fn call_tag(&mut self, tag: Tag, msg: impl Into<Tmessage>) -> Rmessage {
        let mut buf = Vec::new();
        msg.into().encode(tag, &mut buf);
        self.s.write_all(&buf).expect("sending to the server");
        let mut head = [0u8; 4];
        self.s.read_exact(&mut head).expect("reading a reply");
        let mut frame = head.to_vec();
        frame.resize(u32::from_le_bytes(head) as usize, 0);
        self.s.read_exact(&mut frame[4..]).expect("reading a reply");
        let r = decode_rframe(&frame).expect("decoding a reply");
        assert_eq!(r.tag, tag);
        r.msg
    }

    fn call(&mut self, msg: impl Into<Tmessage>) -> Rmessage {
        let tag = Tag(self.next_tag);
        self.next_tag = self.next_tag % 60000 + 1;
        self.call_tag(tag, msg)
    }

    /// Expects success.
    fn ok(&mut self, what: &str, msg: impl Into<Tmessage>) -> Rmessage {
        match self.call(msg) {
            Rmessage::Lerror(e) => panic!("{what}: Rlerror {}", e.ecode),
            r => r,
        }
    }

    /// Clones the root to `fid` and creates and opens `name` there for reading and writing.
    fn create(&mut self, fid: u32, name: &str) {
        self.ok(
            "Twalk",
            Twalk {
                fid: Fid(0),
                newfid: Fid(fid),
                wnames: vec![],
            },
        );
        self.ok(
            "Tlcreate",
            Tlcreate {
                fid: Fid(fid),
                name: name.as_bytes().to_vec(),
                flags: open_flags::RDWR | open_flags::CREATE,
                mode: 0o644,
                gid: 0,
            },
        );
    }

    /// Twrite: the count written, or the errno.
    fn write(&mut self, fid: u32, offset: u64, data: &[u8]) -> Result<u32, i32> {
        match self.call(Twrite {
            fid: Fid(fid),
            offset,
            data: Data(data.to_vec()),
        }) {
            Rmessage::Write(w) => Ok(w.count),
            Rmessage::Lerror(e) => Err(e.ecode as i32),
            other => panic!("Twrite answered {other:?}"),
        }
    }

    fn fsync(&mut self, fid: u32) {
        let r = self.ok(
            "Tfsync",
            Tfsync {
                fid: Fid(fid),
                datasync: 0,
            },
        );
        assert_eq!(r, Rmessage::Fsync(Rfsync {}));
    }

    /// The whole file behind open `fid`, read back through the server.
    fn read_all(&mut self, fid: u32) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            match self.ok(
                "Tread",
                Tread {
                    fid: Fid(fid),
                    offset: out.len() as u64,
                    count: CHUNK as u32,
                },
            ) {
                Rmessage::Read(r) if r.data.0.is_empty() => return out,
                Rmessage::Read(r) => out.extend_from_slice(&r.data.0),
                other => panic!("Tread answered {other:?}"),
            }
        }
    }
}

#[test]
fn raw_9p_writes_get_enospc_and_the_connection_carries_on() {
    let fs = SmallFs::mount();
    let work = tempfile::tempdir().unwrap();
    let sock = work.path().join("s.sock");
    let serve = Serve::start(&fs.path, &format!("unix:{}", sock.display()), &[]);
    let mut other = Peer::connect(&sock);
    let mut p = Peer::connect(&sock);

    // Fill it: writes succeed (the last one maybe short) until one gets ENOSPC.
    p.create(1, "big");
    let mut offset = 0u64;
    let errno = loop {
        assert!(
            offset <= FS_SIZE,
            "{offset} bytes written to a {FS_SIZE}-byte tmpfs"
        );
        match p.write(1, offset, &pattern(offset, CHUNK)) {
            Ok(0) => panic!("a write of nothing at {offset}, not an error"),
            Ok(n) => offset += u64::from(n),
            Err(e) => break e,
        }
    };
    assert_eq!(errno, ENOSPC, "the write past the end of space");
    assert!(offset >= FS_SIZE / 2, "only {offset} bytes fitted");
    assert_eq!(
        serve.stats()["total"]["Twrite"]["errors"],
        1,
        "one Rlerror, counted"
    );
    // What was acknowledged is there, whole.
    assert!(
        p.read_all(1) == pattern(0, offset as usize),
        "the file's content"
    );
    assert_eq!(
        std::fs::metadata(fs.path.join("big")).unwrap().len(),
        offset
    );

    // The same connection carries on: free the space, write and sync again.
    p.ok("Tclunk", Tclunk { fid: Fid(1) });
    p.ok(
        "Tunlinkat",
        Tunlinkat {
            dirfd: Fid(0),
            name: b"big".to_vec(),
            flags: 0,
        },
    );
    p.create(2, "again");
    assert_eq!(p.write(2, 0, &pattern(0, CHUNK)), Ok(CHUNK as u32));
    p.fsync(2);
    assert!(p.read_all(2) == pattern(0, CHUNK));
    p.ok("Tclunk", Tclunk { fid: Fid(2) });
    // So does a connection that was idle through it, and a new one.
    other.create(1, "other");
    assert_eq!(other.write(1, 0, b"fine"), Ok(4));
    other.fsync(1);
    let mut fresh = Peer::connect(&sock);
    fresh.create(1, "fresh");
    assert_eq!(fresh.write(1, 0, b"fine"), Ok(4));
    assert_eq!(std::fs::read(fs.path.join("fresh")).unwrap(), b"fine");
    drop(serve);
}

/// Where an application on the mount heard of the full disk.
#[derive(Debug, PartialEq)]
enum Heard {
    Write,
    Fsync,
    Close,
}

/// What the application saw filling the disk through the mount: bytes its writes reported
/// written, and each call that failed with its errno.
#[derive(Debug)]
struct Filled {
    written: u64,
    errors: Vec<(Heard, i32)>,
}

/// The application: writes `path` in chunks until a write fails (or four times the file
/// system's size was accepted, by a cache), then fsyncs (if `sync`) and closes it, checking
/// each.
fn fill(path: &Path, sync: bool) -> Filled {
    let mut file = std::fs::File::create(path).unwrap();
    let mut written = 0u64;
    let mut errors = Vec::new();
    while written < 4 * FS_SIZE {
        match file.write(&pattern(written, CHUNK)) {
            Ok(0) => panic!("write returned 0 at {written}"),
            Ok(n) => written += n as u64,
            Err(e) => {
                errors.push((Heard::Write, e.raw_os_error().unwrap()));
                break;
            }
        }
    }
    if sync {
        if let Err(e) = file.sync_all() {
            errors.push((Heard::Fsync, e.raw_os_error().unwrap()));
        }
    }
    // close(2) itself, whose result dropping a File throws away.
    // SAFETY: the descriptor is open and owned by nothing else once taken from `file`.
    if unsafe { libc::close(file.into_raw_fd()) } != 0 {
        errors.push((
            Heard::Close,
            std::io::Error::last_os_error().raw_os_error().unwrap(),
        ));
    }
    Filled { written, errors }
}

/// Runs `f` on another thread and returns its result, failing the test if it takes longer
/// than [`DEADLINE`] (a hang on the mount must fail, not block the suite).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(DEADLINE)
        .unwrap_or_else(|_| panic!("{what}: no answer within {DEADLINE:?}"))
}

fn enospc_through_the_mount(cache: &[&str], sync: bool) {
    let fs = SmallFs::mount();
    std::fs::write(fs.path.join("keep"), pattern(0, 4096)).unwrap();
    let work = tempfile::tempdir().unwrap();
    let sock = work.path().join("s.sock");
    let serve = Serve::start(&fs.path, &format!("unix:{}", sock.display()), &[]);
    let mut mount = Mount::start(&format!("unix:{}", sock.display()), cache);
    let mnt = mount.mountpoint.clone();

    let big = mnt.join("big");
    let filled = within("filling the disk", move || fill(&big, sync));
    println!("{cache:?}, fsync {sync}: {filled:?}");
    let first = filled
        .errors
        .first()
        .unwrap_or_else(|| panic!("{cache:?}: ENOSPC was swallowed: {filled:?}"));
    assert_eq!(first.1, ENOSPC, "{cache:?}: the first error: {filled:?}");
    for (at, errno) in &filled.errors {
        assert_eq!(
            *errno, ENOSPC,
            "{cache:?}: {at:?} failed otherwise: {filled:?}"
        );
    }
    // In the export: each page holds what the application wrote there, or is a hole (a
    // page the cache could not write back); nothing else.
    let on_host = std::fs::read(fs.path.join("big")).unwrap();
    let mut kept = 0;
    for (i, page) in on_host.chunks(4096).enumerate() {
        if page == &pattern(i as u64 * 4096, page.len())[..] {
            kept += 1;
        } else {
            assert!(
                page.iter().all(|&b| b == 0),
                "{cache:?}: page {i} holds other data"
            );
        }
    }
    assert!(
        kept > 0,
        "{cache:?}: nothing of the file reached the export"
    );
    if first.0 == Heard::Write {
        // Written means written: the writes that succeeded are in the export.
        assert_eq!(on_host.len() as u64, filled.written, "{cache:?}");
        assert!(on_host == pattern(0, on_host.len()), "{cache:?}: content");
    }

    // dd, an application that checks every write and close, says so too.
    let m = mnt.clone();
    let dd = within("dd", move || {
        std::fs::remove_file(m.join("big")).unwrap();
        Command::new("dd")
            .args(["if=/dev/zero", "bs=64k", "count=128"])
            .arg(format!("of={}", m.join("big").display()))
            .output()
            .unwrap()
    });
    let stderr = String::from_utf8_lossy(&dd.stderr);
    assert!(!dd.status.success(), "{cache:?}: dd filled 8 MiB: {stderr}");
    assert!(
        stderr.contains("No space left on device"),
        "{cache:?}: dd said {stderr}"
    );

    // Nothing else broke: free the space; the other file reads back, new files work.
    let m = mnt.clone();
    within("using the mount after ENOSPC", move || {
        std::fs::remove_file(m.join("big")).unwrap();
        assert!(std::fs::read(m.join("keep")).unwrap() == pattern(0, 4096));
        let mut f = std::fs::File::create(m.join("after")).unwrap();
        f.write_all(&pattern(0, 256 << 10)).unwrap();
        f.sync_all().unwrap();
        drop(f);
        assert!(std::fs::read(m.join("after")).unwrap() == pattern(0, 256 << 10));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(m.join("keep"))
            .unwrap();
        f.write_all(b"more").unwrap();
        f.sync_all().unwrap();
    });
    assert!(std::fs::read(fs.path.join("after")).unwrap() == pattern(0, 256 << 10));
    let mut keep = pattern(0, 4096);
    keep.extend_from_slice(b"more");
    assert_eq!(std::fs::read(fs.path.join("keep")).unwrap(), keep);
    assert!(
        mount.child.try_wait().unwrap().is_none(),
        "{cache:?}: crossfs mount exited"
    );
    let status = mount.stop();
    assert!(
        status.success(),
        "{cache:?}: crossfs mount exited with {status}"
    );
    drop(serve);
}

#[test]
fn enospc_reaches_the_application_through_the_mount_default_cache() {
    enospc_through_the_mount(&[], true);
}

#[test]
fn enospc_reaches_the_application_through_the_mount_cache_always() {
    enospc_through_the_mount(&["--cache", "always"], true);
}

#[test]
fn enospc_reaches_the_application_through_the_mount_cache_never() {
    enospc_through_the_mount(&["--cache", "never"], true);
}

#[test]
fn enospc_reaches_the_application_without_fsync_default_cache() {
    enospc_through_the_mount(&[], false);
}

#[test]
fn enospc_reaches_the_application_without_fsync_cache_always() {
    enospc_through_the_mount(&["--cache", "always"], false);
}
