//! One export core behind two doors. The same table of operations and attacks goes through
//! the 9P door (`crossfs-server`, over a socketpair) and the virtio door
//! (`crossfs-virtiofs`, FUSE requests as a guest kernel sends them), each on its own copy of
//! one tree, under three policies (default, read-only, devices and set-id bits allowed).
//! Both doors must give the errno the table pins and leave the same tree behind, so a rule
//! changed in one door alone fails here.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossfs_export::policy::Policy;
use crossfs_export::Export;
use crossfs_server::{Server, ServerConfig};
use crossfs_virtiofs::{FsConfig, FuseFs, Stats};
use crossfs_wire::*;

const RESERVED: &[u8] = b".crossfs-sync-";

/// One operation, on paths from the export root (components as bytes).
#[derive(Clone, Debug)]
enum Op {
    Lookup(&'static [&'static [u8]]),
    Mkdir(&'static [&'static [u8]], &'static [u8], u32),
    Symlink(&'static [&'static [u8]], &'static [u8], &'static [u8]),
    Mknod(&'static [&'static [u8]], &'static [u8], u32, u32, u32),
    /// Directory, name, Linux open flags (O_CREAT implied), mode.
    Create(&'static [&'static [u8]], &'static [u8], i32, u32),
    Open(&'static [&'static [u8]], i32),
    /// The file, then the directory and name of the new link.
    Link(
        &'static [&'static [u8]],
        &'static [&'static [u8]],
        &'static [u8],
    ),
    Rename(
        &'static [&'static [u8]],
        &'static [u8],
        &'static [&'static [u8]],
        &'static [u8],
    ),
    Unlink(&'static [&'static [u8]], &'static [u8], bool),
    Chmod(&'static [&'static [u8]], u32),
    Truncate(&'static [&'static [u8]], u64),
    SetXattr(&'static [&'static [u8]], &'static [u8], &'static [u8]),
    /// The file (opened for reading and writing), mode, offset, length.
    Fallocate(&'static [&'static [u8]], i32, u64, u64),
    /// Directory, mode: an unnamed file (O_TMPFILE, read and write), then linked there
    /// under the name.
    Tmpfile(&'static [&'static [u8]], u32, &'static [u8]),
    List(&'static [&'static [u8]]),
}

/// What an operation answered: an errno (0: success), and for a listing its names.
type Outcome = (i32, Vec<Vec<u8>>);

trait Door {
    fn run(&mut self, op: &Op) -> Outcome;
}

const ROOT: &[&[u8]] = &[];
const DIR: &[&[u8]] = &[b"dir"];
const FILE: &[&[u8]] = &[b"dir", b"file"];
const SETUID: &[&[u8]] = &[b"setuid"];
const LINK: &[&[u8]] = &[b"link"];

const ROFS: i32 = libc::EROFS;

/// The table: each case's operation and its errno under the default policy, a read-only
/// export, and one that allows devices and set-id bits.
fn cases() -> Vec<(&'static str, Op, [i32; 3])> {
    use libc::*;
    let changes = |e: i32| [e, ROFS, e];
    vec![
        ("walk ..", Op::Lookup(&[b".."]), [EINVAL; 3]),
        ("walk .", Op::Lookup(&[b"."]), [EINVAL; 3]),
        ("walk empty", Op::Lookup(&[b""]), [EINVAL; 3]),
        ("walk a/b", Op::Lookup(&[b"dir/file"]), [EINVAL; 3]),
        (
            "walk through a symlink",
            Op::Lookup(&[b"escape", b"etc"]),
            [ENOTDIR; 3],
        ),
        ("walk to a symlink", Op::Lookup(LINK), [0; 3]),
        (
            "walk to a reserved name",
            Op::Lookup(&[b".crossfs-sync-1"]),
            [ENOENT; 3],
        ),
        ("reserved names unlisted", Op::List(ROOT), [0; 3]),
        (
            "mkdir drops set-id bits",
            Op::Mkdir(ROOT, b"new", 0o6777),
            changes(0),
        ),
        ("mkdir ..", Op::Mkdir(ROOT, b"..", 0o755), changes(EINVAL)),
        ("mkdir a/b", Op::Mkdir(ROOT, b"a/b", 0o755), changes(EINVAL)),
        (
            "mkdir reserved",
            Op::Mkdir(ROOT, b".crossfs-sync-2", 0o755),
            changes(EPERM),
        ),
        (
            "mkdir in a subdirectory",
            Op::Mkdir(DIR, b".crossfs-sync-2", 0o700),
            changes(0),
        ),
        (
            "symlink out is data",
            Op::Symlink(ROOT, b"s", b"/etc/passwd"),
            changes(0),
        ),
        (
            "symlink reserved",
            Op::Symlink(ROOT, b".crossfs-sync-3", b"x"),
            changes(EPERM),
        ),
        (
            "mknod fifo",
            Op::Mknod(ROOT, b"p", S_IFIFO | 0o640, 0, 0),
            changes(0),
        ),
        (
            "mknod type 0",
            Op::Mknod(ROOT, b"r", 0o600, 0, 0),
            changes(0),
        ),
        (
            "mknod device",
            Op::Mknod(ROOT, b"c", S_IFCHR | 0o600, 1, 3),
            [EPERM, ROFS, 0],
        ),
        (
            "mknod directory",
            Op::Mknod(ROOT, b"d", S_IFDIR | 0o700, 0, 0),
            changes(EINVAL),
        ),
        (
            "mknod set-id",
            Op::Mknod(ROOT, b"q", S_IFIFO | 0o4750, 0, 0),
            changes(0),
        ),
        (
            "create set-id",
            Op::Create(ROOT, b"f", O_RDWR, 0o6755),
            changes(0),
        ),
        (
            "create over a directory",
            Op::Create(ROOT, b"dir", O_RDONLY, 0o644),
            changes(EISDIR),
        ),
        (
            "create exclusive",
            Op::Create(DIR, b"file", O_RDWR | O_EXCL, 0o644),
            changes(EEXIST),
        ),
        (
            "create opens a set-id file",
            Op::Create(ROOT, b"setuid", O_WRONLY, 0o777),
            changes(0),
        ),
        (
            "create through a symlink",
            Op::Create(ROOT, b"link", O_WRONLY, 0o644),
            changes(ELOOP),
        ),
        (
            "create a device",
            Op::Create(ROOT, b"dev", O_WRONLY, 0o644),
            [EPERM, ROFS, 0],
        ),
        (
            "create reserved",
            Op::Create(ROOT, b".crossfs-sync-4", O_RDWR, 0o644),
            changes(EPERM),
        ),
        ("open a symlink", Op::Open(LINK, O_RDONLY), [ELOOP; 3]),
        (
            "open a device",
            Op::Open(&[b"dev"], O_RDONLY),
            [EPERM, EPERM, 0],
        ),
        ("open for reading", Op::Open(FILE, O_RDONLY), [0; 3]),
        ("open for writing", Op::Open(FILE, O_WRONLY), changes(0)),
        (
            "open truncates",
            Op::Open(FILE, O_RDONLY | O_TRUNC),
            changes(0),
        ),
        (
            "open a set-id file for writing",
            Op::Open(SETUID, O_RDWR),
            changes(0),
        ),
        ("link", Op::Link(FILE, ROOT, b"hard"), changes(0)),
        ("link a symlink", Op::Link(LINK, DIR, b"l2"), changes(0)),
        (
            "link reserved",
            Op::Link(FILE, ROOT, b".crossfs-sync-5"),
            changes(EPERM),
        ),
        ("link ..", Op::Link(FILE, DIR, b".."), changes(EINVAL)),
        (
            "rename across",
            Op::Rename(DIR, b"file", ROOT, b"moved"),
            changes(0),
        ),
        (
            "rename reserved",
            Op::Rename(ROOT, b".crossfs-sync-1", ROOT, b"x"),
            changes(EPERM),
        ),
        (
            "rename onto reserved",
            Op::Rename(DIR, b"file", ROOT, b".crossfs-sync-6"),
            changes(EPERM),
        ),
        (
            "rename ..",
            Op::Rename(DIR, b"..", ROOT, b"x"),
            changes(EINVAL),
        ),
        ("unlink", Op::Unlink(DIR, b"file", false), changes(0)),
        (
            "rmdir not empty",
            Op::Unlink(ROOT, b"dir", true),
            changes(ENOTEMPTY),
        ),
        (
            "unlink reserved",
            Op::Unlink(ROOT, b".crossfs-sync-1", false),
            changes(EPERM),
        ),
        ("chmod adds set-id", Op::Chmod(FILE, 0o6755), changes(0)),
        ("chmod keeps set-id", Op::Chmod(SETUID, 0o4700), changes(0)),
        ("chmod a directory", Op::Chmod(DIR, 0o2700), changes(0)),
        ("truncate", Op::Truncate(FILE, 2), changes(0)),
        (
            "truncate a set-id file",
            Op::Truncate(SETUID, 1),
            changes(0),
        ),
        (
            "truncate a directory",
            Op::Truncate(DIR, 0),
            changes(EISDIR),
        ),
        (
            "truncate a fifo",
            Op::Truncate(&[b"fifo"], 0),
            changes(EINVAL),
        ),
        (
            "setxattr",
            Op::SetXattr(FILE, b"user.door", b"v"),
            changes(0),
        ),
        ("fallocate", Op::Fallocate(FILE, 0, 0, 8192), changes(0)),
        (
            "fallocate punch-hole",
            Op::Fallocate(FILE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 2),
            changes(0),
        ),
        (
            "fallocate an unknown mode",
            Op::Fallocate(FILE, 1 << 30, 0, 4096),
            changes(EOPNOTSUPP),
        ),
        (
            "tmpfile, linked",
            Op::Tmpfile(DIR, 0o6755, b"t"),
            changes(0),
        ),
        (
            "tmpfile linked as ..",
            Op::Tmpfile(ROOT, 0o644, b".."),
            changes(EINVAL),
        ),
        (
            "tmpfile linked as a/b",
            Op::Tmpfile(ROOT, 0o644, b"a/b"),
            changes(EINVAL),
        ),
        (
            "tmpfile linked as reserved",
            Op::Tmpfile(ROOT, 0o644, b".crossfs-sync-4"),
            changes(EPERM),
        ),
        (
            "tmpfile linked over a name",
            Op::Tmpfile(DIR, 0o644, b"file"),
            changes(EEXIST),
        ),
        (
            "tmpfile in a symlink",
            Op::Tmpfile(&[b"escape"], 0o644, b"x"),
            changes(ENOTDIR),
        ),
    ]
}

/// The tree each case starts from, in `root` (the export) with a secret beside it.
fn make_tree(base: &Path) -> PathBuf {
    let root = base.join("export");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(base.join("secret"), "outside").unwrap();
    std::fs::create_dir(root.join("dir")).unwrap();
    std::fs::write(root.join("dir/file"), "hello").unwrap();
    std::fs::write(root.join("setuid"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(root.join("setuid"), std::fs::Permissions::from_mode(0o6755)).unwrap();
    std::os::unix::fs::symlink("dir/file", root.join("link")).unwrap();
    std::os::unix::fs::symlink("/", root.join("escape")).unwrap();
    std::fs::write(root.join(".crossfs-sync-1"), "").unwrap();
    let cpath = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: plain mknod(2) calls on paths this test owns.
    unsafe {
        assert_eq!(libc::mkfifo(cpath(&root.join("fifo")).as_ptr(), 0o644), 0);
        let null = libc::makedev(1, 3);
        assert_eq!(
            libc::mknod(
                cpath(&root.join("dev")).as_ptr(),
                libc::S_IFCHR | 0o666,
                null
            ),
            0
        );
    }
    root
}

/// What a tree is, as the doors can change it: each path's type, permission bits, size
/// (regular files), link target and `user.door` attribute.
fn snapshot(base: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![base.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let md = std::fs::symlink_metadata(&path).unwrap();
            let ft = md.file_type();
            let what = if ft.is_symlink() {
                format!("link -> {:?}", std::fs::read_link(&path).unwrap())
            } else if ft.is_dir() {
                todo.push(path.clone());
                format!("dir {:o}", md.mode() & 0o7777)
            } else {
                let xattr = xattr(&path);
                format!(
                    "{:o} {:o} size {} xattr {xattr:?}",
                    md.mode() & 0o170000,
                    md.mode() & 0o7777,
                    md.size()
                )
            };
            out.insert(path.strip_prefix(base).unwrap().to_path_buf(), what);
        }
    }
    out
}

fn xattr(path: &Path) -> Option<Vec<u8>> {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: the buffer outlives the call and its length is passed with it.
    let n = unsafe {
        libc::lgetxattr(
            p.as_ptr(),
            c"user.door".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| buf[..n as usize].to_vec())
}

fn policies() -> [Policy; 3] {
    [
        Policy::default(),
        Policy {
            read_only: true,
            ..Policy::default()
        },
        Policy {
            allow_devices: true,
            allow_setuid: true,
            ..Policy::default()
        },
    ]
}

fn export(root: &Path, policy: Policy) -> Arc<Export> {
    let mut export = Export::open(root, policy, Some(256)).unwrap();
    export.reserved_prefix = Some(RESERVED.to_vec());
    Arc::new(export)
}

#[test]
fn both_doors_give_the_same_outcome_and_leave_the_same_tree() {
    for (p, policy) in policies().into_iter().enumerate() {
        for (what, op, expected) in cases() {
            let (nine_base, fuse_base) =
                (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let mut nine = NineP::new(export(&make_tree(nine_base.path()), policy));
            let mut fuse = Fuse::new(export(&make_tree(fuse_base.path()), policy));
            let by_9p = nine.run(&op);
            let by_fuse = fuse.run(&op);
            let context = format!("{what} ({op:?}) under {policy:?}");
            assert_eq!(by_9p.0, expected[p], "9P door: {context}");
            assert_eq!(by_fuse, by_9p, "the doors disagree: {context}");
            let (a, b) = (snapshot(nine_base.path()), snapshot(fuse_base.path()));
            assert_eq!(a, b, "the doors left different trees: {context}");
            assert_eq!(
                std::fs::read(nine_base.path().join("secret")).unwrap(),
                b"outside"
            );
            if let Op::List(_) = op {
                assert!(
                    !by_9p.1.iter().any(|n| n.starts_with(RESERVED))
                        && by_9p.1.contains(&b"dir".to_vec()),
                    "{context}: {:?}",
                    by_9p.1
                );
            }
        }
    }
}

/// Pins what the policies do to modes, beside the doors agreeing (a rule changed in the
/// core changes both doors alike).
#[test]
fn set_id_bits_follow_the_policy_through_both_doors() {
    for (p, policy) in policies().into_iter().enumerate() {
        for door in 0..2 {
            let base = tempfile::tempdir().unwrap();
            let root = make_tree(base.path());
            let export = export(&root, policy);
            let mut d: Box<dyn Door> = if door == 0 {
                Box::new(NineP::new(export))
            } else {
                Box::new(Fuse::new(export))
            };
            let mode =
                |rel: &str| std::fs::symlink_metadata(root.join(rel)).unwrap().mode() & 0o7777;
            d.run(&Op::Create(ROOT, b"f", libc::O_RDWR, 0o6755));
            d.run(&Op::Chmod(FILE, 0o6755));
            d.run(&Op::Mkdir(ROOT, b"new", 0o6777));
            d.run(&Op::Open(SETUID, libc::O_WRONLY));
            d.run(&Op::Tmpfile(ROOT, 0o6755, b"t"));
            match p {
                0 => {
                    assert_eq!(mode("f"), 0o755, "door {door}");
                    assert_eq!(mode("t"), 0o755, "door {door}");
                    assert_eq!(mode("dir/file"), 0o755, "door {door}");
                    assert_eq!(mode("new"), 0o777, "door {door}");
                    assert_eq!(mode("setuid"), 0o755, "door {door}");
                }
                1 => {
                    assert!(std::fs::symlink_metadata(root.join("f")).is_err());
                    assert!(std::fs::symlink_metadata(root.join("t")).is_err());
                }
                _ => {
                    assert_eq!(mode("f"), 0o6755, "door {door}");
                    assert_eq!(mode("t"), 0o6755, "door {door}");
                    assert_eq!(mode("dir/file"), 0o6755, "door {door}");
                    assert_eq!(mode("setuid"), 0o6755, "door {door}");
                }
            }
        }
    }
}

// --- the 9P door ---------------------------------------------------------------------------

struct NineP {
    stream: UnixStream,
    tag: u16,
    _thread: std::thread::JoinHandle<()>,
}

const NINE_ROOT: Fid = Fid(0);

impl NineP {
    fn new(export: Arc<Export>) -> NineP {
        let server = Server::with_export(ServerConfig::default(), export, None).unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let writer = theirs.try_clone().unwrap();
        let thread =
            std::thread::spawn(move || server.serve_connection(theirs, writer, "test".into()));
        ours.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let mut door = NineP {
            stream: ours,
            tag: 1,
            _thread: thread,
        };
        let version = Tversion {
            msize: 65536,
            version: b"9P2000.L".to_vec(),
        };
        assert!(matches!(door.rpc(version.into()), Rmessage::Version(_)));
        let attach = Tattach {
            fid: NINE_ROOT,
            afid: NOFID,
            uname: b"root".to_vec(),
            aname: vec![],
            n_uname: !0,
        };
        assert!(matches!(door.rpc(attach.into()), Rmessage::Attach(_)));
        door
    }

    fn rpc(&mut self, msg: Tmessage) -> Rmessage {
        let tag = if matches!(msg, Tmessage::Version(_)) {
            NOTAG
        } else {
            Tag(self.tag)
        };
        self.tag += 1;
        let mut buf = Vec::new();
        msg.encode(tag, &mut buf);
        self.stream.write_all(&buf).unwrap();
        let mut head = [0u8; 4];
        self.stream.read_exact(&mut head).unwrap();
        let mut frame = head.to_vec();
        frame.resize(u32::from_le_bytes(head) as usize, 0);
        self.stream.read_exact(&mut frame[4..]).unwrap();
        decode_rframe(&frame).unwrap().msg
    }

    /// Sends `msg`; its errno (0 on success).
    fn errno(&mut self, msg: impl Into<Tmessage>) -> i32 {
        match self.rpc(msg.into()) {
            Rmessage::Lerror(e) => e.ecode as i32,
            _ => 0,
        }
    }

    /// Binds `fid` to `path`, one name per Twalk (as the FUSE door looks up one name per
    /// LOOKUP, so that a failed step answers its own errno rather than a short walk).
    fn walk(&mut self, fid: Fid, path: &[&[u8]]) -> i32 {
        let mut from = NINE_ROOT;
        for step in std::iter::once(None).chain(path.iter().map(Some)) {
            let m = Twalk {
                fid: from,
                newfid: fid,
                wnames: step.map(|n| vec![n.to_vec()]).unwrap_or_default(),
            };
            match self.rpc(m.into()) {
                Rmessage::Walk(_) => from = fid,
                Rmessage::Lerror(e) => return e.ecode as i32,
                other => panic!("{other:?}"),
            }
        }
        0
    }

    fn clunk(&mut self, fids: &[Fid]) {
        for &fid in fids {
            self.errno(Tclunk { fid });
        }
    }

    fn list(&mut self, fid: Fid) -> Outcome {
        let e = self.errno(Tlopen { fid, flags: 0 });
        if e != 0 {
            return (e, vec![]);
        }
        let (mut names, mut offset) = (vec![], 0);
        loop {
            let Rmessage::Readdir(r) = self.rpc(
                Treaddir {
                    fid,
                    offset,
                    count: 8192,
                }
                .into(),
            ) else {
                panic!("Treaddir failed");
            };
            let batch: Vec<DirEntry> = DirEntry::iter(&r.data.0).map(Result::unwrap).collect();
            let Some(last) = batch.last() else {
                break;
            };
            offset = last.offset;
            names.extend(
                batch
                    .into_iter()
                    .map(|e| e.name)
                    .filter(|n| n != b"." && n != b".."),
            );
        }
        names.sort();
        (0, names)
    }
}

impl Door for NineP {
    fn run(&mut self, op: &Op) -> Outcome {
        let (a, b) = (Fid(1), Fid(2));
        let gid = !0;
        let e = match *op {
            Op::Lookup(path) => self.walk(a, path),
            Op::List(path) => {
                let e = self.walk(a, path);
                let out = if e == 0 { self.list(a) } else { (e, vec![]) };
                self.clunk(&[a]);
                return out;
            }
            Op::Mkdir(dir, name, mode) => match self.walk(a, dir) {
                0 => self.errno(Tmkdir {
                    dfid: a,
                    name: name.to_vec(),
                    mode,
                    gid,
                }),
                e => e,
            },
            Op::Symlink(dir, name, target) => match self.walk(a, dir) {
                0 => self.errno(Tsymlink {
                    fid: a,
                    name: name.to_vec(),
                    symtgt: target.to_vec(),
                    gid,
                }),
                e => e,
            },
            Op::Mknod(dir, name, mode, major, minor) => match self.walk(a, dir) {
                0 => self.errno(Tmknod {
                    dfid: a,
                    name: name.to_vec(),
                    mode,
                    major,
                    minor,
                    gid,
                }),
                e => e,
            },
            Op::Create(dir, name, flags, mode) => match self.walk(a, dir) {
                // 9P2000.L's open flags are Linux's.
                0 => self.errno(Tlcreate {
                    fid: a,
                    name: name.to_vec(),
                    flags: flags as u32,
                    mode,
                    gid,
                }),
                e => e,
            },
            Op::Open(path, flags) => match self.walk(a, path) {
                0 => self.errno(Tlopen {
                    fid: a,
                    flags: flags as u32,
                }),
                e => e,
            },
            Op::Link(file, dir, name) => match (self.walk(a, file), self.walk(b, dir)) {
                (0, 0) => self.errno(Tlink {
                    dfid: b,
                    fid: a,
                    name: name.to_vec(),
                }),
                (0, e) | (e, _) => e,
            },
            Op::Rename(from, old, to, new) => match (self.walk(a, from), self.walk(b, to)) {
                (0, 0) => self.errno(Trenameat {
                    olddirfid: a,
                    oldname: old.to_vec(),
                    newdirfid: b,
                    newname: new.to_vec(),
                }),
                (0, e) | (e, _) => e,
            },
            Op::Unlink(dir, name, rmdir) => match self.walk(a, dir) {
                0 => self.errno(Tunlinkat {
                    dirfd: a,
                    name: name.to_vec(),
                    flags: if rmdir { AT_REMOVEDIR } else { 0 },
                }),
                e => e,
            },
            Op::Chmod(path, mode) => self.setattr(a, path, setattr::MODE, mode, 0),
            Op::Truncate(path, size) => self.setattr(a, path, setattr::SIZE, 0, size),
            Op::Fallocate(path, mode, offset, length) => match self.walk(a, path) {
                0 => match self.errno(Tlopen {
                    fid: a,
                    flags: open_flags::RDWR,
                }) {
                    0 => self.errno(Tfallocate {
                        fid: a,
                        mode: mode as u32,
                        offset,
                        length,
                    }),
                    e => e,
                },
                e => e,
            },
            Op::Tmpfile(dir, mode, name) => match self.walk(a, dir) {
                0 => match self.errno(Ttmpfile {
                    dfid: a,
                    newfid: b,
                    flags: open_flags::RDWR,
                    mode,
                    gid,
                    request_mask: getattr::BASIC,
                }) {
                    0 => self.errno(Tlink {
                        dfid: a,
                        fid: b,
                        name: name.to_vec(),
                    }),
                    e => e,
                },
                e => e,
            },
            Op::SetXattr(path, name, value) => match self.walk(a, path) {
                0 => match self.errno(Txattrcreate {
                    fid: a,
                    name: name.to_vec(),
                    attr_size: value.len() as u64,
                    flags: 0,
                }) {
                    0 => match self.errno(Twrite {
                        fid: a,
                        offset: 0,
                        data: Data(value.to_vec()),
                    }) {
                        // The value is set when the fid is clunked.
                        0 => self.errno(Tclunk { fid: a }),
                        e => e,
                    },
                    e => e,
                },
                e => e,
            },
        };
        self.clunk(&[a, b]);
        (e, vec![])
    }
}

impl NineP {
    fn setattr(&mut self, fid: Fid, path: &[&[u8]], valid: u32, mode: u32, size: u64) -> i32 {
        match self.walk(fid, path) {
            0 => self.errno(Tsetattr {
                fid,
                valid,
                mode,
                uid: 0,
                gid: 0,
                size,
                atime_sec: 0,
                atime_nsec: 0,
                mtime_sec: 0,
                mtime_nsec: 0,
            }),
            e => e,
        }
    }
}

// --- the virtio door: FUSE requests as bytes --------------------------------------------------

struct Fuse {
    fs: FuseFs,
    unique: u64,
}

const FUSE_ROOT: u64 = 1;
mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const SETATTR: u32 = 4;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const SETXATTR: u32 = 21;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const CREATE: u32 = 35;
    pub const FALLOCATE: u32 = 43;
    pub const TMPFILE: u32 = 51;
}

fn cstr(name: &[u8]) -> Vec<u8> {
    let mut v = name.to_vec();
    v.push(0);
    v
}

fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

impl Fuse {
    fn new(export: Arc<Export>) -> Fuse {
        let fs = FuseFs::new(export, FsConfig::default(), Arc::new(Stats::default()));
        let mut door = Fuse { fs, unique: 1 };
        // FUSE_INIT 7.31, every flag offered.
        assert_eq!(
            door.call(opcode::INIT, FUSE_ROOT, &words(&[7, 31, 128 << 10, !0]))
                .0,
            0
        );
        door
    }

    /// One request as a guest kernel sends it (uid and gid 0); (errno, reply body).
    fn call(&mut self, opcode: u32, nodeid: u64, body: &[u8]) -> (i32, Vec<u8>) {
        self.unique += 1;
        let mut req = words(&[(40 + body.len()) as u32, opcode]);
        req.extend_from_slice(&self.unique.to_le_bytes());
        req.extend_from_slice(&nodeid.to_le_bytes());
        req.extend_from_slice(&[0; 16]);
        req.extend_from_slice(body);
        let reply = self.fs.handle(&req).expect("a reply");
        (
            -i32::from_le_bytes(reply[4..8].try_into().unwrap()),
            reply[16..].to_vec(),
        )
    }

    /// The node id of `path`; a negative entry is `ENOENT`.
    fn walk(&mut self, path: &[&[u8]]) -> Result<u64, i32> {
        path.iter().try_fold(FUSE_ROOT, |node, name| {
            match self.call(opcode::LOOKUP, node, &cstr(name)) {
                (0, b) => match u64::from_le_bytes(b[0..8].try_into().unwrap()) {
                    0 => Err(libc::ENOENT),
                    id => Ok(id),
                },
                (e, _) => Err(e),
            }
        })
    }

    fn list(&mut self, node: u64) -> Outcome {
        let (e, b) = self.call(opcode::OPENDIR, node, &[0; 8]);
        if e != 0 {
            return (e, vec![]);
        }
        let fh = &b[0..8];
        let (mut names, mut offset) = (vec![], 0u64);
        loop {
            let mut body = fh.to_vec();
            body.extend_from_slice(&offset.to_le_bytes());
            body.extend_from_slice(&words(&[8192, 0, 0, 0, 0, 0]));
            let (e, data) = self.call(opcode::READDIR, node, &body);
            assert_eq!(e, 0);
            if data.is_empty() {
                break;
            }
            let mut at = 0;
            while at + 24 <= data.len() {
                offset = u64::from_le_bytes(data[at + 8..at + 16].try_into().unwrap());
                let len = u32::from_le_bytes(data[at + 16..at + 20].try_into().unwrap()) as usize;
                let name = data[at + 24..at + 24 + len].to_vec();
                if name != b"." && name != b".." {
                    names.push(name);
                }
                at += (24 + len).div_ceil(8) * 8;
            }
        }
        names.sort();
        (0, names)
    }

    fn setattr(&mut self, path: &[&[u8]], valid: u32, mode: u32, size: u64) -> i32 {
        let node = match self.walk(path) {
            Ok(node) => node,
            Err(e) => return e,
        };
        let mut body = words(&[valid, 0]);
        for v in [0u64, size, 0, 0, 0, 0] {
            body.extend_from_slice(&v.to_le_bytes()); // fh, size, lock_owner, times
        }
        body.extend_from_slice(&words(&[0, 0, 0, mode, 0, 0, 0, 0]));
        self.call(opcode::SETATTR, node, &body).0
    }
}

impl Door for Fuse {
    fn run(&mut self, op: &Op) -> Outcome {
        let in_dir =
            |door: &mut Fuse, dir: &[&[u8]], opcode: u32, body: Vec<u8>| match door.walk(dir) {
                Ok(node) => door.call(opcode, node, &body).0,
                Err(e) => e,
            };
        let e = match *op {
            Op::Lookup(path) => self.walk(path).err().unwrap_or(0),
            Op::List(path) => {
                return match self.walk(path) {
                    Ok(node) => self.list(node),
                    Err(e) => (e, vec![]),
                }
            }
            Op::Mkdir(dir, name, mode) => {
                let mut body = words(&[mode, 0]);
                body.extend(cstr(name));
                in_dir(self, dir, opcode::MKDIR, body)
            }
            Op::Symlink(dir, name, target) => {
                let mut body = cstr(name);
                body.extend(cstr(target));
                in_dir(self, dir, opcode::SYMLINK, body)
            }
            Op::Mknod(dir, name, mode, major, minor) => {
                // The old 32-bit device encoding FUSE carries.
                let rdev = (major << 8) | minor;
                let mut body = words(&[mode, rdev, 0, 0]);
                body.extend(cstr(name));
                in_dir(self, dir, opcode::MKNOD, body)
            }
            Op::Create(dir, name, flags, mode) => {
                let mut body = words(&[(flags | libc::O_CREAT) as u32, mode, 0, 0]);
                body.extend(cstr(name));
                in_dir(self, dir, opcode::CREATE, body)
            }
            Op::Open(path, flags) => in_dir(self, path, opcode::OPEN, words(&[flags as u32, 0])),
            Op::Link(file, dir, name) => match self.walk(file) {
                Ok(target) => {
                    let mut body = target.to_le_bytes().to_vec();
                    body.extend(cstr(name));
                    in_dir(self, dir, opcode::LINK, body)
                }
                Err(e) => e,
            },
            Op::Rename(from, old, to, new) => match self.walk(to) {
                Ok(newdir) => {
                    let mut body = newdir.to_le_bytes().to_vec();
                    body.extend(cstr(old));
                    body.extend(cstr(new));
                    in_dir(self, from, opcode::RENAME, body)
                }
                Err(e) => e,
            },
            Op::Unlink(dir, name, rmdir) => {
                let opcode = if rmdir { opcode::RMDIR } else { opcode::UNLINK };
                in_dir(self, dir, opcode, cstr(name))
            }
            Op::Chmod(path, mode) => self.setattr(path, 1 << 0, mode, 0),
            Op::Truncate(path, size) => self.setattr(path, 1 << 3, 0, size),
            Op::Fallocate(path, mode, offset, length) => {
                match self
                    .walk(path)
                    .map(|node| self.call(opcode::OPEN, node, &words(&[libc::O_RDWR as u32, 0])))
                {
                    Ok((0, open)) => {
                        let mut body = open[0..8].to_vec(); // fh
                        body.extend_from_slice(&offset.to_le_bytes());
                        body.extend_from_slice(&length.to_le_bytes());
                        body.extend_from_slice(&words(&[mode as u32, 0]));
                        self.call(opcode::FALLOCATE, FUSE_ROOT, &body).0
                    }
                    Ok((e, _)) | Err(e) => e,
                }
            }
            Op::Tmpfile(dir, mode, name) => {
                // As the guest kernel sends it: fuse_create_in, then the name "/".
                let mut body = words(&[(libc::O_RDWR | libc::O_TMPFILE) as u32, mode, 0, 0]);
                body.extend(cstr(b"/"));
                match self.walk(dir) {
                    Ok(node) => match self.call(opcode::TMPFILE, node, &body) {
                        (0, entry) => {
                            let mut body = entry[0..8].to_vec(); // the new node
                            body.extend(cstr(name));
                            self.call(opcode::LINK, node, &body).0
                        }
                        (e, _) => e,
                    },
                    Err(e) => e,
                }
            }
            Op::SetXattr(path, name, value) => {
                let mut body = words(&[value.len() as u32, 0]);
                body.extend(cstr(name));
                body.extend_from_slice(value);
                in_dir(self, path, opcode::SETXATTR, body)
            }
        };
        (e, vec![])
    }
}
