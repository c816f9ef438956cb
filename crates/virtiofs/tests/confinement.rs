//! The attacks of crates/server/tests/confinement.rs, translated to FUSE requests and sent to
//! the virtio door's file system as a guest kernel would send them (bytes in, bytes out):
//! no request reaches outside the export, the name rules and the policy (read-only, devices,
//! set-id bits) hold, and bad input gets an error reply, never a panic.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::sync::Arc;

use crossfs_export::policy::Policy;
use crossfs_export::Export;
use crossfs_virtiofs::{FsConfig, FuseFs, Stats};

const ROOT: u64 = 1;
const LOOKUP: u32 = 1;
const GETATTR: u32 = 3;
const SETATTR: u32 = 4;
const READLINK: u32 = 5;
const SYMLINK: u32 = 6;
const MKNOD: u32 = 8;
const MKDIR: u32 = 9;
const UNLINK: u32 = 10;
const RENAME: u32 = 12;
const LINK: u32 = 13;
const OPEN: u32 = 14;
const READ: u32 = 15;
const WRITE: u32 = 16;
const RELEASE: u32 = 18;
const CREATE: u32 = 35;
const FALLOCATE: u32 = 43;
const TMPFILE: u32 = 51;
const INIT: u32 = 26;

const BAD_NAMES: [&[u8]; 5] = [b"..", b".", b"", b"a/b", b"/"];

struct Guest {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    fs: FuseFs,
    unique: std::cell::Cell<u64>,
}

impl Guest {
    fn new(policy: Policy) -> Guest {
        Guest::with_reserved(policy, None)
    }

    fn with_reserved(policy: Policy, reserved: Option<&[u8]>) -> Guest {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("export");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(dir.path().join("secret"), "outside").unwrap();
        // CROSSFS_TEST_FD_BUDGET=16 (scripts/test) keeps 8 handle descriptors, so that
        // lookups go through the handle cache's close-and-reopen path.
        let budget = std::env::var("CROSSFS_TEST_FD_BUDGET").map_or(1024, |v| v.parse().unwrap());
        let mut export = Export::open(&root, policy, Some(budget)).unwrap();
        export.reserved_prefix = reserved.map(<[u8]>::to_vec);
        let export = Arc::new(export);
        let fs = FuseFs::new(export, FsConfig::default(), Arc::new(Stats::default()));
        let g = Guest {
            _dir: dir,
            root,
            fs,
            unique: 1.into(),
        };
        // FUSE_INIT 7.31, every flag offered.
        let mut body = Vec::new();
        for v in [7u32, 31, 128 << 10, !0] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(g.call(INIT, ROOT, &body).0, 0);
        g
    }

    fn path(&self, p: &str) -> std::path::PathBuf {
        self.root.join(p)
    }

    /// Sends one request; returns (errno, body).
    fn call(&self, opcode: u32, nodeid: u64, body: &[u8]) -> (i32, Vec<u8>) {
        let unique = self.unique.get();
        self.unique.set(unique + 1);
        let mut req = Vec::new();
        req.extend_from_slice(&((40 + body.len()) as u32).to_le_bytes());
        req.extend_from_slice(&opcode.to_le_bytes());
        req.extend_from_slice(&unique.to_le_bytes());
        req.extend_from_slice(&nodeid.to_le_bytes());
        req.extend_from_slice(&[0; 16]); // uid, gid, pid 0; padding
        req.extend_from_slice(body);
        let reply = self.fs.handle(&req).expect("a reply");
        assert!(reply.len() >= 16);
        assert_eq!(
            u32::from_le_bytes(reply[0..4].try_into().unwrap()) as usize,
            reply.len()
        );
        assert_eq!(u64::from_le_bytes(reply[8..16].try_into().unwrap()), unique);
        let error = -i32::from_le_bytes(reply[4..8].try_into().unwrap());
        (error, reply[16..].to_vec())
    }

    fn lookup(&self, parent: u64, name: &[u8]) -> Result<u64, i32> {
        let mut body = name.to_vec();
        body.push(0);
        match self.call(LOOKUP, parent, &body) {
            (0, b) => Ok(u64::from_le_bytes(b[0..8].try_into().unwrap())),
            (e, _) => Err(e),
        }
    }

    fn lookup_path(&self, path: &str) -> Result<u64, i32> {
        path.split('/')
            .try_fold(ROOT, |node, name| self.lookup(node, name.as_bytes()))
    }

    fn open(&self, node: u64, flags: i32) -> Result<u64, i32> {
        let mut body = (flags as u32).to_le_bytes().to_vec();
        body.extend_from_slice(&[0; 4]);
        match self.call(OPEN, node, &body) {
            (0, b) => Ok(u64::from_le_bytes(b[0..8].try_into().unwrap())),
            (e, _) => Err(e),
        }
    }

    fn read(&self, fh: u64, size: u32) -> Result<Vec<u8>, i32> {
        let mut body = fh.to_le_bytes().to_vec();
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(&size.to_le_bytes());
        body.extend_from_slice(&[0; 20]);
        match self.call(READ, ROOT, &body) {
            (0, b) => Ok(b),
            (e, _) => Err(e),
        }
    }

    fn create(&self, parent: u64, name: &[u8], mode: u32) -> i32 {
        let mut body = Vec::new();
        for v in [(libc::O_RDWR | libc::O_CREAT) as u32, mode, 0, 0] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(name);
        body.push(0);
        self.call(CREATE, parent, &body).0
    }

    /// FUSE_FALLOCATE of open file `fh`; the errno (0: done).
    fn fallocate(&self, fh: u64, mode: i32, offset: u64, length: u64) -> i32 {
        let mut body = fh.to_le_bytes().to_vec();
        body.extend_from_slice(&offset.to_le_bytes());
        body.extend_from_slice(&length.to_le_bytes());
        body.extend_from_slice(&(mode as u32).to_le_bytes());
        body.extend_from_slice(&[0; 4]);
        self.call(FALLOCATE, ROOT, &body).0
    }

    /// FUSE_TMPFILE in `parent` as a guest kernel sends it for open(2) with `O_TMPFILE`
    /// (its flags, the name `/`): the node id, the file handle, and the mode and link
    /// count the entry carries.
    fn tmpfile(&self, parent: u64, flags: i32, mode: u32) -> Result<(u64, u64, u32, u32), i32> {
        let mut body = Vec::new();
        for v in [(flags | libc::O_TMPFILE) as u32, mode, 0, 0] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(b"/\0");
        let (e, b) = self.call(TMPFILE, parent, &body);
        if e != 0 {
            return Err(e);
        }
        // fuse_entry_out (128 bytes; fuse_attr's mode and nlink at 100 and 104), then
        // fuse_open_out.
        let word = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let node = u64::from_le_bytes(b[0..8].try_into().unwrap());
        let fh = u64::from_le_bytes(b[128..136].try_into().unwrap());
        Ok((node, fh, word(100), word(104)))
    }

    fn write(&self, fh: u64, offset: u64, data: &[u8]) -> i32 {
        let mut body = fh.to_le_bytes().to_vec();
        body.extend_from_slice(&offset.to_le_bytes());
        body.extend_from_slice(&(data.len() as u32).to_le_bytes());
        body.extend_from_slice(&[0; 20]);
        body.extend_from_slice(data);
        self.call(WRITE, ROOT, &body).0
    }

    fn release(&self, fh: u64) {
        let mut body = fh.to_le_bytes().to_vec();
        body.extend_from_slice(&[0; 16]);
        assert_eq!(self.call(RELEASE, ROOT, &body).0, 0);
    }

    fn names(&self, dir: &str) -> Vec<std::ffi::OsString> {
        let mut names: Vec<_> = std::fs::read_dir(self.path(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    }

    fn named(&self, opcode: u32, parent: u64, prefix: &[u8], names: &[&[u8]]) -> i32 {
        let mut body = prefix.to_vec();
        for n in names {
            body.extend_from_slice(n);
            body.push(0);
        }
        self.call(opcode, parent, &body).0
    }
}

#[test]
fn names_must_be_one_component_in_every_request() {
    let g = Guest::new(Policy::default());
    std::fs::create_dir(g.path("a")).unwrap();
    std::fs::write(g.path("f"), "x").unwrap();
    let a = g.lookup(ROOT, b"a").unwrap();
    let f = g.lookup(ROOT, b"f").unwrap();
    for bad in BAD_NAMES {
        assert_eq!(g.lookup(ROOT, bad), Err(libc::EINVAL), "LOOKUP {bad:?}");
        assert_eq!(g.lookup(a, bad), Err(libc::EINVAL), "LOOKUP {bad:?} in a/");
        assert_eq!(g.create(ROOT, bad, 0o644), libc::EINVAL, "CREATE {bad:?}");
        assert_eq!(g.named(MKDIR, ROOT, &[0; 8], &[bad]), libc::EINVAL);
        assert_eq!(g.named(SYMLINK, ROOT, &[], &[bad, b"t"]), libc::EINVAL);
        assert_eq!(g.named(UNLINK, a, &[], &[bad]), libc::EINVAL);
        assert_eq!(g.named(LINK, ROOT, &f.to_le_bytes(), &[bad]), libc::EINVAL);
        assert_eq!(
            g.named(RENAME, ROOT, &ROOT.to_le_bytes(), &[b"f", bad]),
            libc::EINVAL,
            "RENAME f to {bad:?}"
        );
        assert_eq!(
            g.named(RENAME, ROOT, &ROOT.to_le_bytes(), &[bad, b"g"]),
            libc::EINVAL
        );
    }
    assert_eq!(g.lookup(ROOT, &[b'x'; 256]), Err(libc::ENAMETOOLONG));
    // Nothing was made, moved or removed.
    let mut names: Vec<_> = std::fs::read_dir(&g.root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "f"]);
}

#[test]
fn symlinks_are_returned_never_followed() {
    let g = Guest::new(Policy::default());
    symlink("/", g.path("root")).unwrap();
    symlink("../secret", g.path("up")).unwrap();
    std::fs::create_dir(g.path("d")).unwrap();
    symlink("/etc", g.path("d/etc")).unwrap();
    for link in ["root", "up", "d/etc"] {
        let node = g.lookup_path(link).unwrap();
        let (e, target) = g.call(READLINK, node, &[]);
        assert_eq!(e, 0);
        assert_eq!(
            target,
            std::fs::read_link(g.path(link))
                .unwrap()
                .as_os_str()
                .as_encoded_bytes()
        );
        // Never opened: the guest resolves symlinks itself.
        assert_eq!(g.open(node, libc::O_RDONLY), Err(libc::ELOOP), "{link}");
        // And never walked through.
        assert_eq!(
            g.lookup(node, b"passwd"),
            Err(libc::ENOTDIR),
            "{link}/passwd"
        );
        assert_eq!(
            g.lookup(node, b"secret"),
            Err(libc::ENOTDIR),
            "{link}/secret"
        );
    }
}

#[test]
fn a_directory_swapped_for_a_symlink_redirects_nothing() {
    let g = Guest::new(Policy::default());
    std::fs::create_dir(g.path("d")).unwrap();
    std::fs::write(g.path("d/inside"), "in").unwrap();
    let d = g.lookup(ROOT, b"d").unwrap();
    // On the host, d moves away and a symlink to the outside takes its name.
    std::fs::rename(g.path("d"), g.path("moved")).unwrap();
    symlink(g.root.parent().unwrap(), g.path("d")).unwrap();
    // The node still names the directory it was looked up as: no `secret` there (a
    // negative entry, node id 0), where the symlink would have led to one.
    assert_eq!(g.lookup(d, b"secret"), Ok(0));
    let inside = g.lookup(d, b"inside").unwrap();
    let fh = g.open(inside, libc::O_RDONLY).unwrap();
    assert_eq!(g.read(fh, 100).unwrap(), b"in");
    // A fresh lookup of d finds the symlink, and nothing through it.
    let d2 = g.lookup(ROOT, b"d").unwrap();
    assert_ne!(d2, d);
    assert_eq!(g.lookup(d2, b"secret"), Err(libc::ENOTDIR));
    assert_eq!(g.open(d2, libc::O_RDONLY), Err(libc::ELOOP));
}

#[test]
fn read_only_refuses_every_change() {
    let g = Guest::new(Policy {
        read_only: true,
        ..Policy::default()
    });
    std::fs::write(g.path("f"), "data").unwrap();
    let f = g.lookup(ROOT, b"f").unwrap();
    assert_eq!(g.open(f, libc::O_WRONLY), Err(libc::EROFS));
    assert_eq!(g.open(f, libc::O_RDONLY | libc::O_TRUNC), Err(libc::EROFS));
    assert_eq!(g.create(ROOT, b"new", 0o644), libc::EROFS);
    assert_eq!(
        g.named(MKDIR, ROOT, &[0xed, 1, 0, 0, 0, 0, 0, 0], &[b"d"]),
        libc::EROFS
    );
    assert_eq!(g.named(UNLINK, ROOT, &[], &[b"f"]), libc::EROFS);
    assert_eq!(g.named(SYMLINK, ROOT, &[], &[b"l", b"f"]), libc::EROFS);
    let mut setattr = vec![0u8; 88];
    setattr[0..4].copy_from_slice(&8u32.to_le_bytes()); // FATTR_SIZE
    assert_eq!(g.call(SETATTR, f, &setattr).0, libc::EROFS);
    // Reading still works.
    let fh = g.open(f, libc::O_RDONLY).unwrap();
    assert_eq!(g.read(fh, 100).unwrap(), b"data");
    assert_eq!(g.fallocate(fh, 0, 0, 1 << 20), libc::EROFS);
    assert_eq!(std::fs::read(g.path("f")).unwrap(), b"data");
}

#[test]
fn devices_and_setid_bits_follow_the_policy() {
    let g = Guest::new(Policy::default());
    // mknod of /dev/null's numbers: refused.
    let mut body = Vec::new();
    for v in [libc::S_IFCHR | 0o666, (1 << 8) | 3, 0, 0] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(b"null\0");
    assert_eq!(g.call(MKNOD, ROOT, &body).0, libc::EPERM);
    assert!(!g.path("null").exists());
    // A fifo is fine.
    let mut body = Vec::new();
    for v in [libc::S_IFIFO | 0o644, 0, 0, 0] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(b"fifo\0");
    assert_eq!(g.call(MKNOD, ROOT, &body).0, 0);
    // Set-id bits are stripped from a create and from a chmod.
    assert_eq!(g.create(ROOT, b"prog", libc::S_IFREG | 0o6755), 0);
    assert_eq!(
        std::fs::metadata(g.path("prog")).unwrap().mode() & 0o7777,
        0o755
    );
    let prog = g.lookup(ROOT, b"prog").unwrap();
    let mut setattr = vec![0u8; 88];
    setattr[0..4].copy_from_slice(&1u32.to_le_bytes()); // FATTR_MODE
    setattr[68..72].copy_from_slice(&(libc::S_IFREG | 0o4755).to_le_bytes());
    assert_eq!(g.call(SETATTR, prog, &setattr).0, 0);
    assert_eq!(
        std::fs::metadata(g.path("prog")).unwrap().mode() & 0o7777,
        0o755
    );
    // A setuid file the host made loses its bit when the guest opens it for writing.
    std::fs::write(g.path("suid"), "x").unwrap();
    std::fs::set_permissions(g.path("suid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let suid = g.lookup(ROOT, b"suid").unwrap();
    g.open(suid, libc::O_WRONLY).unwrap();
    assert_eq!(
        std::fs::metadata(g.path("suid")).unwrap().mode() & 0o7777,
        0o755
    );
}

#[test]
fn missing_names_get_negative_entries_and_bad_input_gets_errors() {
    let g = Guest::new(Policy::default());
    // A negative entry: success, node id 0, an entry timeout.
    let (e, body) = g.call(LOOKUP, ROOT, b"missing.h\0");
    assert_eq!(e, 0);
    assert_eq!(u64::from_le_bytes(body[0..8].try_into().unwrap()), 0);
    assert!(u64::from_le_bytes(body[16..24].try_into().unwrap()) > 0);
    // Unknown nodes, unknown opcodes, truncated bodies, oversized reads.
    assert_eq!(g.call(GETATTR, 999, &[0; 16]).0, libc::ESTALE);
    assert_eq!(g.call(4242, ROOT, &[]).0, libc::ENOSYS);
    assert_eq!(g.call(LOOKUP, ROOT, b"no-nul").0, libc::EINVAL);
    assert_eq!(g.call(READ, ROOT, &[1, 2, 3]).0, libc::EINVAL);
    assert_eq!(g.read(77, 1 << 30), Err(libc::EINVAL));
    assert_eq!(g.read(77, 4096), Err(libc::EBADF));
    // A header that cannot be trusted gets no reply at all.
    assert_eq!(g.fs.handle(&[0; 39]), None);
    let mut lying = vec![0u8; 40];
    lying[0..4].copy_from_slice(&4096u32.to_le_bytes());
    assert_eq!(g.fs.handle(&lying), None);
}

#[test]
fn event_cookies_are_hidden_at_the_top() {
    let g = Guest::with_reserved(Policy::default(), Some(b".crossfs-sync-"));
    std::fs::write(g.path(".crossfs-sync-7"), "").unwrap();
    std::fs::create_dir(g.path("d")).unwrap();
    assert_eq!(
        g.lookup(ROOT, b".crossfs-sync-7"),
        Ok(0),
        "a negative entry"
    );
    assert_eq!(g.create(ROOT, b".crossfs-sync-8", 0o644), libc::EPERM);
    assert_eq!(
        g.named(UNLINK, ROOT, &[], &[b".crossfs-sync-7"]),
        libc::EPERM
    );
    assert!(g.path(".crossfs-sync-7").exists());
    // Only at the top.
    let d = g.lookup(ROOT, b"d").unwrap();
    assert_eq!(g.create(d, b".crossfs-sync-8", 0o644), 0);
}

#[test]
fn fallocate_reaches_the_open_file_with_the_modes_the_host_has() {
    let g = Guest::new(Policy::default());
    std::fs::write(g.path("f"), vec![7u8; 64 << 10]).unwrap();
    let f = g.lookup(ROOT, b"f").unwrap();
    let fh = g.open(f, libc::O_RDWR).unwrap();
    assert_eq!(g.fallocate(fh, 0, 0, 128 << 10), 0);
    assert_eq!(std::fs::metadata(g.path("f")).unwrap().size(), 128 << 10);
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    assert_eq!(g.fallocate(fh, punch, 4096, 8192), 0);
    let data = std::fs::read(g.path("f")).unwrap();
    assert_eq!(data.len(), 128 << 10);
    assert!(data[4096..12288].iter().all(|&b| b == 0));
    assert_eq!((data[4095], data[12288]), (7, 7));
    assert_eq!(g.fallocate(fh, 1 << 30, 0, 4096), libc::EOPNOTSUPP);
    assert_eq!(g.fallocate(fh + 1000, 0, 0, 4096), libc::EBADF);
    let ro = g.open(f, libc::O_RDONLY).unwrap();
    assert_eq!(g.fallocate(ro, 0, 0, 1 << 20), libc::EBADF);
}

#[test]
fn a_tmpfile_is_written_then_named_by_a_link_of_its_node() {
    let g = Guest::new(Policy::default());
    std::fs::create_dir(g.path("d")).unwrap();
    let d = g.lookup(ROOT, b"d").unwrap();
    let (node, fh, mode, nlink) = g.tmpfile(d, libc::O_RDWR, 0o6640).unwrap();
    // As CREATE: a regular file, set-id bits dropped; and no name yet.
    assert_eq!((mode, nlink), (libc::S_IFREG | 0o640, 0));
    assert!(g.names("d").is_empty());
    assert_eq!(g.write(fh, 0, b"data"), 0);
    for bad in BAD_NAMES {
        assert_eq!(g.named(LINK, d, &node.to_le_bytes(), &[bad]), libc::EINVAL);
    }
    let mut body = node.to_le_bytes().to_vec();
    body.extend_from_slice(b"named\0");
    let (e, entry) = g.call(LINK, d, &body);
    assert_eq!(e, 0);
    assert_eq!(u64::from_le_bytes(entry[0..8].try_into().unwrap()), node);
    assert_eq!(std::fs::read(g.path("d/named")).unwrap(), b"data");
    assert_eq!(g.write(fh, 4, b"!"), 0);
    g.release(fh);
    assert_eq!(std::fs::read(g.path("d/named")).unwrap(), b"data!");
    // The node answers as the named file.
    let st = std::fs::metadata(g.path("d/named")).unwrap();
    assert_eq!(st.nlink(), 1);
    assert_eq!(g.call(GETATTR, node, &[0; 16]).0, 0);

    // One never linked leaves nothing behind once released; O_EXCL is never linked.
    let (_, fh, _, _) = g.tmpfile(ROOT, libc::O_WRONLY, 0o600).unwrap();
    assert_eq!(g.write(fh, 0, b"gone"), 0);
    g.release(fh);
    let (excl, _, _, _) = g.tmpfile(ROOT, libc::O_RDWR | libc::O_EXCL, 0o600).unwrap();
    assert_eq!(
        g.named(LINK, ROOT, &excl.to_le_bytes(), &[b"excl"]),
        libc::ENOENT
    );
    assert_eq!(g.names(""), ["d"]);
    assert_eq!(g.names("d"), ["named"]);
    // A file is no directory to make one in.
    let f = g.lookup(d, b"named").unwrap();
    assert_eq!(g.tmpfile(f, libc::O_RDWR, 0o600), Err(libc::ENOTDIR));

    let ro = Guest::new(Policy {
        read_only: true,
        ..Policy::default()
    });
    assert_eq!(ro.tmpfile(ROOT, libc::O_RDWR, 0o600), Err(libc::EROFS));
    assert!(ro.names("").is_empty());
}
