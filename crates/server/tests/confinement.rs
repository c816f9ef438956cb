//! No request reaches outside the export: names, symlinks, swaps, devices.

mod common;

use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};

use common::{errno::*, Harness, Outside, ROOT, SECRET};
use crossfs_wire::*;

const BAD_NAMES: [&[u8]; 6] = [b"..", b".", b"", b"a/b", b"a\0b", b"/"];

#[test]
fn walk_refuses_dot_dotdot_empty_and_slashes() {
    let h = Harness::new();
    std::fs::create_dir_all(h.path("a/b")).unwrap();
    let mut c = h.connect();
    c.walk(ROOT, Fid(1), &["a"]).unwrap();
    for bad in BAD_NAMES.into_iter().chain(CLIMBING_NAMES) {
        let m = Twalk {
            fid: ROOT,
            newfid: Fid(2),
            wnames: vec![bad.to_vec()],
        };
        assert_eq!(c.err(m), EINVAL, "{bad:?}");
        let m = Twalk {
            fid: Fid(1),
            newfid: Fid(2),
            wnames: vec![bad.to_vec()],
        };
        assert_eq!(c.err(m), EINVAL, "{bad:?} from a subdirectory");
        // A bad name anywhere refuses the whole walk.
        let m = Twalk {
            fid: ROOT,
            newfid: Fid(2),
            wnames: vec![b"a".to_vec(), bad.to_vec()],
        };
        assert_eq!(c.err(m), EINVAL, "{bad:?} second");
    }
    assert_eq!(c.getattr(Fid(2)).unwrap_err(), EBADF);
    let long = "x".repeat(256);
    assert_eq!(c.walk(ROOT, Fid(2), &[&long]).unwrap_err(), ENAMETOOLONG);
    c.close();
}

#[test]
fn symlinks_end_walks_but_are_never_walked_through() {
    let h = Harness::new();
    std::fs::create_dir(h.path("d")).unwrap();
    symlink("/", h.path("root")).unwrap();
    symlink("../../..", h.path("d/up")).unwrap();
    symlink("/etc/passwd", h.path("passwd")).unwrap();
    let mut c = h.connect();
    for (path, target) in [
        ("root", "/"),
        ("d/up", "../../.."),
        ("passwd", "/etc/passwd"),
    ] {
        let qids = c.walk_path(Fid(1), path).unwrap();
        assert_eq!(qids.last().unwrap().ty, QID_TYPE_SYMLINK);
        match c.ok(Treadlink { fid: Fid(1) }) {
            Rmessage::Readlink(r) => assert_eq!(r.target, target.as_bytes()),
            other => panic!("{other:?}"),
        }
        // Opening the link itself: refused, never followed.
        assert_eq!(c.lopen(Fid(1), open_flags::RDONLY).unwrap_err(), ELOOP);
        // Walking on from the link: not a directory.
        assert_eq!(c.walk(Fid(1), Fid(2), &["etc"]).unwrap_err(), ENOTDIR);
        c.clunk(Fid(1)).unwrap();
    }
    // Through the link in one walk: stops at the link (a short walk, newfid unbound).
    let qids = c.walk(ROOT, Fid(3), &["root", "etc", "passwd"]).unwrap();
    assert_eq!(qids.len(), 1);
    assert_eq!(c.getattr(Fid(3)).unwrap_err(), EBADF);
    let qids = c.walk(ROOT, Fid(3), &["d", "up", "etc"]).unwrap();
    assert_eq!(qids.len(), 2);
    // getattr of the link describes the link.
    c.walk_path(Fid(4), "passwd").unwrap();
    let g = c.getattr(Fid(4)).unwrap();
    assert_eq!(g.mode & libc::S_IFMT, libc::S_IFLNK);
    assert_eq!(g.size, "/etc/passwd".len() as u64);
    c.close();
}

#[test]
fn directory_swapped_for_a_symlink_is_not_followed() {
    let h = Harness::new();
    std::fs::create_dir(h.path("d")).unwrap();
    std::fs::write(h.path("d/f"), b"inside").unwrap();
    let mut c = h.connect();
    c.walk_path(Fid(1), "d").unwrap();
    std::fs::rename(h.path("d"), h.path("d.old")).unwrap();
    symlink("/etc", h.path("d")).unwrap();
    // A new walk meets the symlink and stops there.
    let qids = c.walk(ROOT, Fid(2), &["d", "passwd"]).unwrap();
    assert_eq!(qids.len(), 1);
    assert_eq!(qids[0].ty, QID_TYPE_SYMLINK);
    // The old fid still names the directory it was walked to (now d.old), inside the export.
    c.walk(Fid(1), Fid(3), &["f"]).unwrap();
    c.lopen(Fid(3), open_flags::RDONLY).unwrap();
    assert_eq!(c.read(Fid(3), 0, 100).unwrap(), b"inside");
    assert_eq!(c.walk(Fid(1), Fid(4), &["passwd"]).unwrap_err(), ENOENT);
    c.close();
}

/// Names that would climb out if the server treated them as paths.
const CLIMBING_NAMES: [&[u8]; 4] = [
    b"../outside",
    b"../outside/secret",
    b"../../x",
    b"sub/../../outside",
];

#[test]
fn every_name_taking_message_refuses_bad_names() {
    let out = Outside::new();
    let h = &out.h;
    std::fs::write(h.path("f"), b"").unwrap();
    let mut c = h.connect();
    c.walk_path(Fid(1), "f").unwrap();
    for bad in BAD_NAMES.into_iter().chain(CLIMBING_NAMES) {
        let n = bad.to_vec();
        let msgs: Vec<Tmessage> = vec![
            Tlcreate {
                fid: ROOT,
                name: n.clone(),
                flags: open_flags::RDWR,
                mode: 0o644,
                gid: 0,
            }
            .into(),
            Tmkdir {
                dfid: ROOT,
                name: n.clone(),
                mode: 0o755,
                gid: 0,
            }
            .into(),
            Tsymlink {
                fid: ROOT,
                name: n.clone(),
                symtgt: b"x".to_vec(),
                gid: 0,
            }
            .into(),
            Tmknod {
                dfid: ROOT,
                name: n.clone(),
                mode: libc::S_IFIFO | 0o644,
                major: 0,
                minor: 0,
                gid: 0,
            }
            .into(),
            Tlink {
                dfid: ROOT,
                fid: Fid(1),
                name: n.clone(),
            }
            .into(),
            Trename {
                fid: Fid(1),
                dfid: ROOT,
                name: n.clone(),
            }
            .into(),
            Trenameat {
                olddirfid: ROOT,
                oldname: n.clone(),
                newdirfid: ROOT,
                newname: b"g".to_vec(),
            }
            .into(),
            Trenameat {
                olddirfid: ROOT,
                oldname: b"f".to_vec(),
                newdirfid: ROOT,
                newname: n.clone(),
            }
            .into(),
            Tunlinkat {
                dirfd: ROOT,
                name: n.clone(),
                flags: 0,
            }
            .into(),
            Tunlinkat {
                dirfd: ROOT,
                name: n.clone(),
                flags: AT_REMOVEDIR,
            }
            .into(),
        ];
        for m in msgs {
            let name = m.name();
            assert_eq!(c.err(m), EINVAL, "{name} with {bad:?}");
        }
    }
    // The export is untouched.
    let names: Vec<_> = std::fs::read_dir(h.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("f")]);
    c.close();
    out.assert_untouched();
}

#[test]
fn create_through_a_symlink_to_outside_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("victim");
    std::fs::write(&target, b"keep").unwrap();
    let h = Harness::new();
    symlink(&target, h.path("evil")).unwrap();
    let mut c = h.connect();
    c.walk(ROOT, Fid(1), &[]).unwrap();
    let e = c.err(Tlcreate {
        fid: Fid(1),
        name: b"evil".to_vec(),
        flags: open_flags::WRONLY | open_flags::TRUNC,
        mode: 0o644,
        gid: 0,
    });
    assert_eq!(e, ELOOP);
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    // Truncating the link fid refuses too.
    c.walk_path(Fid(2), "evil").unwrap();
    let e = c.err(Tsetattr {
        valid: setattr::SIZE,
        ..Tsetattr::unchanged(Fid(2))
    });
    assert_eq!(e, EINVAL);
    // A hard link of the link is a link to the link, not to the victim.
    c.ok(Tlink {
        dfid: ROOT,
        fid: Fid(2),
        name: b"evil2".to_vec(),
    });
    let md = std::fs::symlink_metadata(h.path("evil2")).unwrap();
    assert!(md.file_type().is_symlink());
    assert_eq!(std::fs::metadata(&target).unwrap().nlink(), 1);
    // Xattrs and times through the link fid act on the link, never on the victim.
    let before = std::fs::metadata(&target).unwrap().mtime();
    c.ok(Tsetattr {
        fid: Fid(2),
        valid: setattr::MTIME | setattr::MTIME_SET,
        mode: 0,
        uid: 0,
        gid: 0,
        size: 0,
        atime_sec: 0,
        atime_nsec: 0,
        mtime_sec: 12345,
        mtime_nsec: 0,
    });
    assert_eq!(std::fs::metadata(&target).unwrap().mtime(), before);
    assert_eq!(
        std::fs::symlink_metadata(h.path("evil")).unwrap().mtime(),
        12345
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    c.close();
}

#[test]
fn device_nodes_need_allow_devices() {
    let h = Harness::new();
    let mut c = h.connect();
    let null = Tmknod {
        dfid: ROOT,
        name: b"null".to_vec(),
        mode: libc::S_IFCHR | 0o666,
        major: 1,
        minor: 3,
        gid: 0,
    };
    assert_eq!(c.err(null.clone()), EPERM);
    assert!(!h.path("null").exists());
    // A block device (the first loop device), and a type that is none (all type bits set).
    for mode in [libc::S_IFBLK | 0o600, libc::S_IFMT | 0o600] {
        let e = c.err(Tmknod {
            dfid: ROOT,
            name: b"blk".to_vec(),
            mode,
            major: 7,
            minor: 0,
            gid: 0,
        });
        assert!(e == EPERM || e == EINVAL, "mode {mode:o}: errno {e}");
        assert!(!h.path("blk").exists());
    }
    // A device already in the export cannot be opened either.
    if rustix::process::geteuid().is_root() {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            h.path("host-null"),
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(1, 3),
        )
        .unwrap();
        c.walk_path(Fid(1), "host-null").unwrap();
        assert_eq!(c.lopen(Fid(1), open_flags::RDONLY).unwrap_err(), EPERM);
    }
    c.close();

    if rustix::process::geteuid().is_root() {
        let h = Harness::with(|c| c.allow_devices = true);
        let mut c = h.connect();
        c.ok(null);
        let md = std::fs::symlink_metadata(h.path("null")).unwrap();
        assert!(md.file_type().is_char_device());
        assert_eq!(md.rdev(), libc::makedev(1, 3));
        c.walk_path(Fid(1), "null").unwrap();
        c.lopen(Fid(1), open_flags::RDONLY).unwrap();
        let g = c.getattr(Fid(1)).unwrap();
        assert_eq!(g.rdev, md.rdev());
        c.close();
    }
}

#[test]
fn xattr_names_are_names_not_paths() {
    let out = Outside::new();
    let h = &out.h;
    std::fs::write(h.path("f"), b"").unwrap();
    symlink(out.dir.join("secret"), h.path("abs")).unwrap();
    symlink("../outside/secret", h.path("rel")).unwrap();
    let mut c = h.connect();
    c.walk_path(Fid(1), "f").unwrap();
    // Reading: a name that looks like a path is only an attribute name of the fid's file.
    for name in CLIMBING_NAMES.into_iter().chain([
        &b"user.../../outside/secret"[..],
        b"user.secret",
        b"a/b",
    ]) {
        let m = Txattrwalk {
            fid: Fid(1),
            newfid: Fid(2),
            name: name.to_vec(),
        };
        let e = c.err(m);
        assert!(e == ENODATA || e == EOPNOTSUPP, "{name:?}: errno {e}");
    }
    // Through a symlink to the secret: the link's own attributes (none), never the target's.
    for link in ["abs", "rel"] {
        c.walk_path(Fid(3), link).unwrap();
        for name in [&b"user.secret"[..], b""] {
            match c.rpc(Txattrwalk {
                fid: Fid(3),
                newfid: Fid(4),
                name: name.to_vec(),
            }) {
                Rmessage::Lerror(_) => {}
                Rmessage::Xattrwalk(x) => {
                    let data = c.read(Fid(4), 0, 4096).unwrap();
                    assert_eq!(x.size as usize, data.len());
                    assert!(!data.windows(SECRET.len()).any(|w| w == SECRET), "{link}");
                    c.clunk(Fid(4)).unwrap();
                }
                other => panic!("{other:?}"),
            }
        }
        // Setting one on the link: refused (user xattrs do not exist on symlinks).
        c.walk_path(Fid(5), link).unwrap();
        c.ok(Txattrcreate {
            fid: Fid(5),
            name: b"user.secret".to_vec(),
            attr_size: 1,
            flags: 0,
        });
        c.write(Fid(5), 0, b"x").unwrap();
        assert!(c.clunk(Fid(5)).is_err(), "{link}");
        c.clunk(Fid(3)).unwrap();
    }
    // Writing one whose name climbs: it lands, literally named, on the fid's own file.
    let name = b"user.../../outside/secret";
    c.ok(Txattrcreate {
        fid: Fid(1),
        name: name.to_vec(),
        attr_size: 2,
        flags: 0,
    });
    c.write(Fid(1), 0, b"in").unwrap();
    c.clunk(Fid(1)).unwrap();
    let mut v = [0u8; 8];
    let n = rustix::fs::getxattr(h.path("f"), &name[..], &mut v[..]).unwrap();
    assert_eq!(&v[..n], b"in");
    c.close();
    out.assert_untouched();
}

#[test]
fn no_operation_follows_a_symlink_out_of_the_export() {
    let out = Outside::new();
    let h = &out.h;
    std::fs::create_dir(h.path("d")).unwrap();
    std::fs::write(h.path("victim"), b"inside").unwrap();
    let dir_links = [
        ("abs-dir", out.dir.clone()),
        ("rel-dir", "../outside".into()),
        ("d/up", "../../outside".into()),
        ("base", out.base().to_path_buf()),
    ];
    let file_links = [
        ("abs-file", out.dir.join("secret")),
        ("rel-file", "../outside/secret".into()),
        ("d/up-file", "../../outside/secret".into()),
    ];
    for (name, target) in dir_links.iter().chain(&file_links) {
        symlink(target, h.path(name)).unwrap();
    }
    let mut c = h.connect();
    c.walk_path(Fid(1), "victim").unwrap();
    let fifo = libc::S_IFIFO | 0o644;
    for (name, _) in &dir_links {
        let link = Fid(10);
        c.walk_path(link, name).unwrap();
        let leaf = name.rsplit('/').next().unwrap().as_bytes().to_vec();
        let parent = Fid(11);
        c.walk_path(parent, name.rsplit_once('/').map_or("", |p| p.0))
            .unwrap();
        // The link as the directory of an operation: never a directory.
        let as_dir: Vec<Tmessage> = vec![
            Twalk {
                fid: link,
                newfid: Fid(12),
                wnames: vec![b"secret".to_vec()],
            }
            .into(),
            Tlcreate {
                fid: link,
                name: b"new".to_vec(),
                flags: open_flags::RDWR,
                mode: 0o644,
                gid: !0,
            }
            .into(),
            Tmkdir {
                dfid: link,
                name: b"new".to_vec(),
                mode: 0o755,
                gid: !0,
            }
            .into(),
            Tsymlink {
                fid: link,
                name: b"new".to_vec(),
                symtgt: b"x".to_vec(),
                gid: !0,
            }
            .into(),
            Tmknod {
                dfid: link,
                name: b"new".to_vec(),
                mode: fifo,
                major: 0,
                minor: 0,
                gid: !0,
            }
            .into(),
            Tlink {
                dfid: link,
                fid: Fid(1),
                name: b"new".to_vec(),
            }
            .into(),
            Trename {
                fid: Fid(1),
                dfid: link,
                name: b"new".to_vec(),
            }
            .into(),
            Trenameat {
                olddirfid: ROOT,
                oldname: b"victim".to_vec(),
                newdirfid: link,
                newname: b"new".to_vec(),
            }
            .into(),
            Trenameat {
                olddirfid: link,
                oldname: b"secret".to_vec(),
                newdirfid: ROOT,
                newname: b"stolen".to_vec(),
            }
            .into(),
            Tunlinkat {
                dirfd: link,
                name: b"secret".to_vec(),
                flags: 0,
            }
            .into(),
            Tunlinkat {
                dirfd: link,
                name: b"sub".to_vec(),
                flags: AT_REMOVEDIR,
            }
            .into(),
            Tlopen {
                fid: link,
                flags: open_flags::RDONLY | open_flags::DIRECTORY,
            }
            .into(),
            // Its name as the target of a create: the link is there, and not followed.
            Tlcreate {
                fid: parent,
                name: leaf.clone(),
                flags: open_flags::RDWR,
                mode: 0o644,
                gid: !0,
            }
            .into(),
            Tmkdir {
                dfid: parent,
                name: leaf.clone(),
                mode: 0o755,
                gid: !0,
            }
            .into(),
        ];
        for m in as_dir {
            let what = format!("{} through {name}", m.name());
            let e = c.err(m);
            assert_ne!(e, 0, "{what}");
        }
        c.clunk(link).unwrap();
        c.clunk(parent).unwrap();
    }
    for (name, _) in &file_links {
        let link = Fid(20);
        c.walk_path(link, name).unwrap();
        for flags in [
            open_flags::RDONLY,
            open_flags::WRONLY | open_flags::TRUNC,
            open_flags::RDWR | open_flags::APPEND,
        ] {
            assert_eq!(c.lopen(link, flags).unwrap_err(), ELOOP, "{name}");
        }
        for valid in [setattr::SIZE, setattr::MODE] {
            let e = c.err(Tsetattr {
                valid,
                mode: 0o777,
                ..Tsetattr::unchanged(link)
            });
            assert_ne!(e, 0, "{name}");
        }
        // Owner and times through the link fid change the link itself.
        let me = rustix::process::geteuid().as_raw();
        c.ok(Tsetattr {
            valid: setattr::UID | setattr::ATIME | setattr::MTIME,
            uid: me,
            ..Tsetattr::unchanged(link)
        });
        // A hard link of the link is another link to the link: the secret gains no name.
        let hl = format!("hl-{}", name.replace('/', "-"));
        c.ok(Tlink {
            dfid: ROOT,
            fid: link,
            name: hl.clone().into_bytes(),
        });
        assert!(std::fs::symlink_metadata(h.path(&hl))
            .unwrap()
            .file_type()
            .is_symlink());
        c.clunk(link).unwrap();
    }
    c.close();
    out.assert_untouched();
}

/// Atomically swaps `d` (a directory) and `alt` (a symlink out of the export) in a loop,
/// while a client walks into `d`, opens, reads, lists and creates there. Bounded: it runs
/// until both shapes of `d` have been met and a few seconds have passed, and fails if 60 s
/// pass without that. The outside holds files of the same names as the inside, so only
/// contents, inode numbers and the inotify watch tell them apart.
#[test]
fn a_directory_swapped_for_a_symlink_in_a_race_leaks_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    let out = Outside::new();
    let h = &out.h;
    std::fs::create_dir_all(h.path("d/sub")).unwrap();
    std::fs::write(h.path("d/secret"), b"inside").unwrap();
    std::fs::write(h.path("d/sub/secret"), b"inside").unwrap();
    symlink(out.dir.clone(), h.path("alt")).unwrap();
    let outside_inodes = out.inodes();
    let stop = AtomicBool::new(false);
    let export = rustix::fs::open(
        h.root(),
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    let mut c = h.connect();
    let (mut as_dir, mut as_link, mut rounds) = (0u64, 0u64, 0u64);
    /// Stops the swapper however the scope ends (a failed assertion must not leave it
    /// spinning, which would keep the scope from ever returning).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(
                    &export,
                    "d",
                    &export,
                    "alt",
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
            }
        });
        let start = Instant::now();
        let mut seen = Vec::new();
        while start.elapsed() < Duration::from_secs(3) || as_dir == 0 || as_link == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the swap was never observed both ways ({as_dir} as a directory, {as_link} as a link)"
            );
            rounds += 1;
            // Walk and read.
            match c.walk(ROOT, Fid(1), &["d", "secret"]) {
                Ok(q) if q.len() == 2 => {
                    as_dir += 1;
                    seen.extend(q.iter().map(|q| q.path));
                    if c.lopen(Fid(1), open_flags::RDONLY).is_ok() {
                        let data = c.read(Fid(1), 0, 4096).unwrap();
                        assert_eq!(data, b"inside");
                    }
                    c.clunk(Fid(1)).unwrap();
                }
                Ok(q) => {
                    as_link += 1;
                    assert_eq!(q.len(), 1);
                    assert_eq!(q[0].ty, QID_TYPE_SYMLINK);
                }
                // `d` was mid-swap.
                Err(e) => assert_eq!(e, ENOENT),
            }
            // Walk to the directory, then open it, list it and create in it: whichever
            // shape `d` had at the walk, the fid holds that inode.
            if let Ok(q) = c.walk(ROOT, Fid(2), &["d"]) {
                seen.extend(q.iter().map(|q| q.path));
                if c.lopen(Fid(2), open_flags::RDONLY | open_flags::DIRECTORY)
                    .is_ok()
                {
                    for e in c.readdir_all(Fid(2), 8192) {
                        seen.push(e.qid.path);
                    }
                }
                c.clunk(Fid(2)).unwrap();
                if c.walk(ROOT, Fid(3), &["d"]).is_ok() {
                    let name = format!("new{}", rounds % 4).into_bytes();
                    let _ = c.rpc(Tmkdir {
                        dfid: Fid(3),
                        name: name.clone(),
                        mode: 0o755,
                        gid: !0,
                    });
                    let _ = c.rpc(Tlcreate {
                        fid: Fid(3),
                        name: [&name[..], b"f"].concat(),
                        flags: open_flags::WRONLY,
                        mode: 0o644,
                        gid: !0,
                    });
                    c.clunk(Fid(3)).unwrap();
                }
            }
            if let Ok(q) = c.walk(ROOT, Fid(4), &["d", "sub", "secret"]) {
                seen.extend(q.iter().map(|q| q.path));
                if q.len() == 3 && c.lopen(Fid(4), open_flags::RDONLY).is_ok() {
                    assert_eq!(c.read(Fid(4), 0, 4096).unwrap(), b"inside");
                }
                let _ = c.clunk(Fid(4));
            }
        }
        stop.store(true, Ordering::Relaxed);
        for ino in seen {
            assert!(
                !outside_inodes.contains(&ino),
                "a qid named inode {ino}, outside"
            );
        }
    });
    eprintln!("{rounds} rounds: d met {as_dir} times as a directory, {as_link} as a link");
    c.close();
    out.assert_untouched();
}
