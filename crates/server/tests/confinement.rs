//! No request reaches outside the export: names, symlinks, swaps, devices.

mod common;

use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};

use common::{errno::*, Harness, ROOT};
use crossfs_wire::*;

const BAD_NAMES: [&[u8]; 6] = [b"..", b".", b"", b"a/b", b"a\0b", b"/"];

#[test]
fn walk_refuses_dot_dotdot_empty_and_slashes() {
    let h = Harness::new();
    std::fs::create_dir_all(h.path("a/b")).unwrap();
    let mut c = h.connect();
    c.walk(ROOT, Fid(1), &["a"]).unwrap();
    for bad in BAD_NAMES {
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

#[test]
fn every_name_taking_message_refuses_bad_names() {
    let h = Harness::new();
    std::fs::write(h.path("f"), b"").unwrap();
    let mut c = h.connect();
    c.walk_path(Fid(1), "f").unwrap();
    for bad in BAD_NAMES {
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
        fid: Fid(2),
        valid: setattr::SIZE,
        mode: 0,
        uid: 0,
        gid: 0,
        size: 0,
        atime_sec: 0,
        atime_nsec: 0,
        mtime_sec: 0,
        mtime_nsec: 0,
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
