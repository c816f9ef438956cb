//! A server on a temporary directory over a socketpair, and a tiny synchronous 9P client.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossfs_server::{Server, ServerConfig};
use crossfs_wire::*;

pub const ROOT: Fid = Fid(0);

/// The descriptor budget a test's server gets unless the test sets one:
/// `CROSSFS_TEST_FD_BUDGET=16` runs the tests with a handle cache of 8 descriptors, so that
/// walks go through the cache's close-and-reopen path (scripts/test runs the confinement
/// attacks so).
pub fn default_fd_budget() -> Option<usize> {
    std::env::var("CROSSFS_TEST_FD_BUDGET")
        .ok()
        .map(|v| v.parse().expect("CROSSFS_TEST_FD_BUDGET: a number"))
}

/// An export (a temp dir) and a running server.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub server: Arc<Server>,
}

impl Harness {
    pub fn new() -> Self {
        Self::with(|_| {})
    }

    pub fn with(adjust: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServerConfig {
            export: dir.path().to_path_buf(),
            fd_budget: default_fd_budget(),
            ..Default::default()
        };
        adjust(&mut config);
        let server = Server::new(config).unwrap();
        Harness { dir, server }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A connected client that has not negotiated yet.
    pub fn connect_raw(&self) -> Client {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let writer = theirs.try_clone().unwrap();
        let server = self.server.clone();
        let thread =
            std::thread::spawn(move || server.serve_socket(theirs, writer, "test-peer".into()));
        ours.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Client {
            stream: ours,
            next_tag: 1,
            msize: 0,
            thread: Some(thread),
        }
    }

    /// A client that negotiated `msize` and attached fid 0 to the root.
    pub fn connect_msize(&self, msize: u32) -> Client {
        let mut c = self.connect_raw();
        let v = c.version(msize, b"9P2000.L");
        assert_eq!(v.version, b"9P2000.L");
        c.attach(ROOT);
        c
    }

    pub fn connect(&self) -> Client {
        self.connect_msize(1024 * 1024)
    }
}

pub struct Client {
    pub stream: UnixStream,
    pub next_tag: u16,
    pub msize: u32,
    pub thread: Option<JoinHandle<()>>,
}

impl Client {
    pub fn tag(&mut self) -> Tag {
        let t = Tag(self.next_tag);
        self.next_tag = self.next_tag.wrapping_add(1) % 0xfff0;
        t
    }

    pub fn send(&mut self, tag: Tag, msg: &Tmessage) {
        let mut buf = Vec::new();
        msg.encode(tag, &mut buf);
        self.stream.write_all(&buf).unwrap();
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Reads one reply frame (its raw bytes).
    pub fn recv_raw(&mut self) -> Vec<u8> {
        let mut head = [0u8; 4];
        self.stream.read_exact(&mut head).unwrap();
        let size = u32::from_le_bytes(head) as usize;
        assert!(size >= 7);
        let mut buf = head.to_vec();
        buf.resize(size, 0);
        self.stream.read_exact(&mut buf[4..]).unwrap();
        buf
    }

    pub fn recv(&mut self) -> Rframe {
        let raw = self.recv_raw();
        if self.msize != 0 {
            assert!(
                raw.len() < self.msize as usize,
                "reply of {} bytes with msize {}",
                raw.len(),
                self.msize
            );
        }
        decode_rframe(&raw).unwrap()
    }

    /// Sends a request and returns its reply (no other request outstanding).
    pub fn rpc(&mut self, msg: impl Into<Tmessage>) -> Rmessage {
        let tag = self.tag();
        self.send(tag, &msg.into());
        let r = self.recv();
        assert_eq!(r.tag, tag);
        r.msg
    }

    /// Sends a request expected to fail; returns the errno.
    pub fn err(&mut self, msg: impl Into<Tmessage>) -> i32 {
        match self.rpc(msg) {
            Rmessage::Lerror(e) => e.ecode as i32,
            other => panic!("expected Rlerror, got {other:?}"),
        }
    }

    /// Expects success; returns the reply.
    pub fn ok(&mut self, msg: impl Into<Tmessage>) -> Rmessage {
        match self.rpc(msg) {
            Rmessage::Lerror(e) => panic!("unexpected Rlerror {}", e.ecode),
            other => other,
        }
    }

    pub fn version(&mut self, msize: u32, version: &[u8]) -> Rversion {
        self.send(
            NOTAG,
            &Tmessage::Version(Tversion {
                msize,
                version: version.to_vec(),
            }),
        );
        let r = self.recv_raw();
        match decode_rframe(&r).unwrap().msg {
            Rmessage::Version(v) => {
                if v.version == b"9P2000.L" {
                    self.msize = v.msize;
                }
                v
            }
            other => panic!("expected Rversion, got {other:?}"),
        }
    }

    pub fn attach(&mut self, fid: Fid) -> Qid {
        match self.ok(Tattach {
            fid,
            afid: NOFID,
            uname: b"tester".to_vec(),
            aname: vec![],
            n_uname: !0,
        }) {
            Rmessage::Attach(a) => a.qid,
            other => panic!("{other:?}"),
        }
    }

    pub fn walk(&mut self, fid: Fid, newfid: Fid, names: &[&str]) -> Result<Vec<Qid>, i32> {
        let m = Twalk {
            fid,
            newfid,
            wnames: names.iter().map(|n| n.as_bytes().to_vec()).collect(),
        };
        match self.rpc(m) {
            Rmessage::Walk(w) => Ok(w.wqids),
            Rmessage::Lerror(e) => Err(e.ecode as i32),
            other => panic!("{other:?}"),
        }
    }

    /// Walks from the root along a slash-separated path.
    pub fn walk_path(&mut self, newfid: Fid, path: &str) -> Result<Vec<Qid>, i32> {
        let names: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        self.walk(ROOT, newfid, &names)
    }

    pub fn lopen(&mut self, fid: Fid, flags: u32) -> Result<Rlopen, i32> {
        match self.rpc(Tlopen { fid, flags }) {
            Rmessage::Lopen(r) => Ok(r),
            Rmessage::Lerror(e) => Err(e.ecode as i32),
            other => panic!("{other:?}"),
        }
    }

    /// Walks to `path` as `fid` and opens it.
    pub fn open(&mut self, fid: Fid, path: &str, flags: u32) -> Rlopen {
        self.walk_path(fid, path).unwrap();
        self.lopen(fid, flags).unwrap()
    }

    pub fn read(&mut self, fid: Fid, offset: u64, count: u32) -> Result<Vec<u8>, i32> {
        match self.rpc(Tread { fid, offset, count }) {
            Rmessage::Read(r) => Ok(r.data.0),
            Rmessage::Lerror(e) => Err(e.ecode as i32),
            other => panic!("{other:?}"),
        }
    }

    pub fn read_all(&mut self, fid: Fid) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let chunk = self.read(fid, out.len() as u64, self.msize - 24).unwrap();
            if chunk.is_empty() {
                return out;
            }
            out.extend_from_slice(&chunk);
        }
    }

    pub fn write(&mut self, fid: Fid, offset: u64, data: &[u8]) -> Result<u32, i32> {
        match self.rpc(Twrite {
            fid,
            offset,
            data: Data(data.to_vec()),
        }) {
            Rmessage::Write(w) => Ok(w.count),
            Rmessage::Lerror(e) => Err(e.ecode as i32),
            other => panic!("{other:?}"),
        }
    }

    pub fn clunk(&mut self, fid: Fid) -> Result<(), i32> {
        match self.rpc(Tclunk { fid }) {
            Rmessage::Clunk(_) => Ok(()),
            Rmessage::Lerror(e) => Err(e.ecode as i32),
            other => panic!("{other:?}"),
        }
    }

    pub fn getattr(&mut self, fid: Fid) -> Result<Rgetattr, i32> {
        match self.rpc(Tgetattr {
            fid,
            request_mask: getattr::ALL,
        }) {
            Rmessage::Getattr(g) => Ok(g),
            Rmessage::Lerror(e) => Err(e.ecode as i32),
            other => panic!("{other:?}"),
        }
    }

    pub fn readdir(&mut self, fid: Fid, offset: u64, count: u32) -> Result<Vec<DirEntry>, i32> {
        match self.rpc(Treaddir { fid, offset, count }) {
            Rmessage::Readdir(r) => Ok(DirEntry::iter(&r.data.0).map(Result::unwrap).collect()),
            Rmessage::Lerror(e) => Err(e.ecode as i32),
            other => panic!("{other:?}"),
        }
    }

    /// Every entry of an open directory, reading `count` bytes at a time.
    pub fn readdir_all(&mut self, fid: Fid, count: u32) -> Vec<DirEntry> {
        let mut all = Vec::new();
        let mut offset = 0;
        loop {
            let batch = self.readdir(fid, offset, count).unwrap();
            let Some(last) = batch.last() else {
                return all;
            };
            offset = last.offset;
            all.extend(batch);
        }
    }

    /// Closes the client side and waits for the server to finish the connection.
    pub fn close(mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }

    /// Waits until the server closes the connection (reads EOF), then joins it.
    pub fn expect_closed(mut self) {
        let mut buf = [0u8; 64];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                // Closing with unread input resets the stream instead of ending it cleanly.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("expected EOF, got {e}"),
            }
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

/// What the secret file outside the export holds: any reply carrying it is a leak.
pub const SECRET: &[u8] = b"crossfs-secret-5b1e0c7a";

/// An export with a directory beside it (`../outside` from the export root) that no request
/// may read, change or add to: a secret file with a user xattr, and a subdirectory with
/// another secret. Every open, read, change or creation in the two directories is seen by
/// inotify (O_PATH opens and stat are not: those are covered by the tests' own assertions).
pub struct Outside {
    /// The export and its server (dropped first).
    pub h: Harness,
    /// `outside`, beside the export.
    pub dir: PathBuf,
    /// Holds both the export and `outside`.
    base: tempfile::TempDir,
    inotify: std::os::fd::OwnedFd,
    before: Vec<(PathBuf, Vec<u8>)>,
}

impl Outside {
    pub fn new() -> Self {
        Self::with(|_| {})
    }

    pub fn with(adjust: impl FnOnce(&mut ServerConfig)) -> Self {
        use rustix::fs::inotify;
        let base = tempfile::tempdir().unwrap();
        let export = tempfile::tempdir_in(base.path()).unwrap();
        let dir = base.path().join("outside");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("secret"), SECRET).unwrap();
        std::fs::write(dir.join("sub/secret"), SECRET).unwrap();
        rustix::fs::setxattr(
            dir.join("secret"),
            "user.secret",
            SECRET,
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        let before = snapshot(&dir);
        let mut config = ServerConfig {
            export: export.path().to_path_buf(),
            fd_budget: default_fd_budget(),
            ..Default::default()
        };
        adjust(&mut config);
        let server = Server::new(config).unwrap();
        let inotify =
            inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
        for d in [dir.clone(), dir.join("sub")] {
            inotify::add_watch(&inotify, d, inotify::WatchFlags::ALL_EVENTS).unwrap();
        }
        Outside {
            h: Harness {
                dir: export,
                server,
            },
            dir,
            base,
            inotify,
            before,
        }
    }

    /// The base directory holding the export and `outside` (for absolute symlinks).
    pub fn base(&self) -> &Path {
        self.base.path()
    }

    /// Panics if anything outside was opened, read, changed, created or removed since
    /// [`Outside::new`] (the inotify queue is checked before this reads the files itself).
    pub fn assert_untouched(&self) {
        let events = self.events();
        assert!(events.is_empty(), "outside the export: {events:?}");
        assert_eq!(
            snapshot(&self.dir),
            self.before,
            "outside the export changed"
        );
        let xattr = {
            let mut v = vec![0u8; 256];
            let n =
                rustix::fs::getxattr(self.dir.join("secret"), "user.secret", &mut v[..]).unwrap();
            v.truncate(n);
            v
        };
        assert_eq!(xattr, SECRET);
        let mut names: Vec<_> = std::fs::read_dir(self.base.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        let export_name = self.h.root().file_name().unwrap().to_owned();
        let mut expect = vec![export_name, "outside".into()];
        expect.sort();
        assert_eq!(names, expect, "something appeared beside the export");
        // This check's own reads.
        self.events();
    }

    /// The inotify events queued since the last call.
    fn events(&self) -> Vec<String> {
        use rustix::fs::inotify;
        let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
        let mut events = Vec::new();
        let mut reader = inotify::Reader::new(&self.inotify, &mut buf);
        loop {
            match reader.next() {
                Ok(e) => events.push(format!("{:?} {:?}", e.events(), e.file_name())),
                Err(rustix::io::Errno::AGAIN) => return events,
                Err(e) => panic!("reading inotify: {e}"),
            }
        }
    }

    /// Inode numbers of everything outside: a qid carrying one means the server stat'ed it.
    pub fn inodes(&self) -> Vec<u64> {
        use std::os::unix::fs::MetadataExt;
        let mut out = vec![
            std::fs::metadata(self.base.path()).unwrap().ino(),
            std::fs::metadata(&self.dir).unwrap().ino(),
        ];
        out.extend(
            self.before
                .iter()
                .map(|(p, _)| std::fs::symlink_metadata(p).unwrap().ino()),
        );
        out
    }
}

/// Every path under `dir` (sorted) with its content (empty for directories) and mode.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let mut data =
                format!("{:o} {} {}:{}:", md.mode(), md.nlink(), md.uid(), md.gid()).into_bytes();
            if md.is_dir() {
                todo.push(p.clone());
            } else if md.is_file() {
                data.extend(std::fs::read(&p).unwrap());
            }
            out.push((p, data));
        }
    }
    out.sort();
    out
}

/// Linux errno values used in assertions.
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EBADF: i32 = 9;
    pub const EEXIST: i32 = 17;
    pub const ENOTDIR: i32 = 20;
    pub const EISDIR: i32 = 21;
    pub const EINVAL: i32 = 22;
    pub const EMFILE: i32 = 24;
    pub const ENOSPC: i32 = 28;
    pub const EROFS: i32 = 30;
    pub const ENAMETOOLONG: i32 = 36;
    pub const ENOTEMPTY: i32 = 39;
    pub const ELOOP: i32 = 40;
    pub const ENODATA: i32 = 61;
    pub const EPROTO: i32 = 71;
    pub const EOPNOTSUPP: i32 = 95;
    pub const E2BIG: i32 = 7;
}
