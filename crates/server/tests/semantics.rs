//! What a client sees equals what the local file system says.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

use common::{errno::*, Client, Harness, ROOT};
use crossfs_wire::*;

fn lcreate(c: &mut Client, dir: Fid, name: &str, flags: u32, mode: u32) -> Result<Rlcreate, i32> {
    match c.rpc(Tlcreate {
        fid: dir,
        name: name.as_bytes().to_vec(),
        flags,
        mode,
        gid: 0,
    }) {
        Rmessage::Lcreate(r) => Ok(r),
        Rmessage::Lerror(e) => Err(e.ecode as i32),
        other => panic!("{other:?}"),
    }
}

fn setattr(valid: u32) -> Tsetattr {
    Tsetattr {
        valid,
        ..Tsetattr::unchanged(ROOT)
    }
}

#[test]
fn getattr_matches_lstat() {
    let h = Harness::new();
    std::fs::write(h.path("f"), vec![5u8; 10_000]).unwrap();
    std::fs::create_dir(h.path("d")).unwrap();
    std::os::unix::fs::symlink("f", h.path("l")).unwrap();
    let mut c = h.connect();
    for (i, name) in ["f", "d", "l", ""].iter().enumerate() {
        let fid = Fid(i as u32 + 1);
        c.walk_path(fid, name).unwrap();
        let g = c.getattr(fid).unwrap();
        let md = std::fs::symlink_metadata(h.path(name)).unwrap();
        assert_eq!(g.valid & getattr::BASIC, getattr::BASIC);
        assert_eq!(g.mode, md.mode(), "{name}");
        assert_eq!(g.nlink, md.nlink());
        assert_eq!((g.uid, g.gid), (md.uid(), md.gid()));
        assert_eq!(g.size, md.size());
        assert_eq!(g.blocks, md.blocks());
        assert_eq!(g.blksize, md.blksize());
        assert_eq!(g.qid.path, md.ino());
        assert_eq!(
            (g.atime_sec as i64, g.atime_nsec as i64),
            (md.atime(), md.atime_nsec())
        );
        assert_eq!(
            (g.mtime_sec as i64, g.mtime_nsec as i64),
            (md.mtime(), md.mtime_nsec())
        );
        assert_eq!(
            (g.ctime_sec as i64, g.ctime_nsec as i64),
            (md.ctime(), md.ctime_nsec())
        );
        if g.valid & getattr::BTIME != 0 {
            let created = md
                .created()
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            assert_eq!(g.btime_sec, created.as_secs());
            assert_eq!(g.btime_nsec, u64::from(created.subsec_nanos()));
        }
        let expect_ty = if md.is_dir() {
            QID_TYPE_DIR
        } else if md.file_type().is_symlink() {
            QID_TYPE_SYMLINK
        } else {
            QID_TYPE_FILE
        };
        assert_eq!(g.qid.ty, expect_ty);
    }
    c.close();
}

#[test]
fn create_write_read_and_open_flags() {
    let h = Harness::new();
    let mut c = h.connect();
    c.walk(ROOT, Fid(1), &[]).unwrap();
    let r = lcreate(&mut c, Fid(1), "new", open_flags::RDWR, 0o640).unwrap();
    assert_eq!(r.iounit, (1 << 20) - 24);
    assert_eq!(r.qid.ty, QID_TYPE_FILE);
    // The fid now names the new, open file.
    assert_eq!(c.write(Fid(1), 0, b"hello world").unwrap(), 11);
    assert_eq!(c.read(Fid(1), 6, 100).unwrap(), b"world");
    assert_eq!(std::fs::read(h.path("new")).unwrap(), b"hello world");
    let md = std::fs::metadata(h.path("new")).unwrap();
    // Exactly the mode asked for: the server's umask does not apply on top of the client's.
    assert_eq!(md.permissions().mode() & 0o7777, 0o640);
    assert_eq!(c.getattr(Fid(1)).unwrap().qid.path, md.ino());
    // Exclusive create of an existing name.
    c.walk(ROOT, Fid(2), &[]).unwrap();
    assert_eq!(
        lcreate(
            &mut c,
            Fid(2),
            "new",
            open_flags::RDWR | open_flags::EXCL,
            0o600
        )
        .unwrap_err(),
        EEXIST
    );
    // Non-exclusive create of an existing name opens it, leaving its mode alone.
    lcreate(&mut c, Fid(2), "new", open_flags::RDONLY, 0o600).unwrap();
    assert_eq!(c.read(Fid(2), 0, 5).unwrap(), b"hello");
    assert_eq!(
        std::fs::metadata(h.path("new")).unwrap().mode() & 0o7777,
        0o640
    );
    // O_APPEND appends whatever the offset.
    c.open(Fid(3), "new", open_flags::WRONLY | open_flags::APPEND);
    c.write(Fid(3), 0, b"!").unwrap();
    assert_eq!(std::fs::read(h.path("new")).unwrap(), b"hello world!");
    // Reading a write-only fid fails as locally.
    assert_eq!(c.read(Fid(3), 0, 10).unwrap_err(), EBADF);
    // O_TRUNC truncates.
    c.open(Fid(4), "new", open_flags::WRONLY | open_flags::TRUNC);
    assert_eq!(std::fs::metadata(h.path("new")).unwrap().len(), 0);
    // An unopened fid cannot be read; an open one cannot be opened again.
    c.walk_path(Fid(5), "new").unwrap();
    assert_eq!(c.read(Fid(5), 0, 1).unwrap_err(), EBADF);
    assert_eq!(c.lopen(Fid(4), open_flags::RDONLY).unwrap_err(), EINVAL);
    // Directories open read-only; for writing they are EISDIR, as locally.
    c.walk(ROOT, Fid(6), &[]).unwrap();
    assert_eq!(c.lopen(Fid(6), open_flags::WRONLY).unwrap_err(), EISDIR);
    // O_DIRECT is honoured (ext4 supports it; tmpfs may refuse with EINVAL).
    c.walk_path(Fid(7), "new").unwrap();
    match c.lopen(Fid(7), open_flags::RDONLY | open_flags::DIRECT) {
        Ok(_) | Err(EINVAL) => {}
        Err(e) => panic!("O_DIRECT: {e}"),
    }
    // fsync and fdatasync on an open fid; EBADF on one that is not open.
    c.ok(Tfsync {
        fid: Fid(4),
        datasync: 0,
    });
    c.ok(Tfsync {
        fid: Fid(4),
        datasync: 1,
    });
    assert_eq!(
        c.err(Tfsync {
            fid: Fid(5),
            datasync: 0
        }),
        EBADF
    );
    c.close();
}

#[test]
fn open_unlink_fstat() {
    let h = Harness::new();
    let mut c = h.connect();
    c.walk(ROOT, Fid(1), &[]).unwrap();
    lcreate(&mut c, Fid(1), "tmp", open_flags::RDWR, 0o600).unwrap();
    c.write(Fid(1), 0, b"still here").unwrap();
    c.ok(Tunlinkat {
        dirfd: ROOT,
        name: b"tmp".to_vec(),
        flags: 0,
    });
    assert!(!h.path("tmp").exists());
    let g = c.getattr(Fid(1)).unwrap();
    assert_eq!(g.nlink, 0);
    assert_eq!(g.size, 10);
    assert_eq!(c.read(Fid(1), 0, 100).unwrap(), b"still here");
    c.write(Fid(1), 10, b"!").unwrap();
    assert_eq!(c.getattr(Fid(1)).unwrap().size, 11);
    c.close();
}

#[test]
fn renames_links_and_removal() {
    let h = Harness::new();
    std::fs::write(h.path("a"), b"A").unwrap();
    std::fs::write(h.path("b"), b"B").unwrap();
    std::fs::create_dir(h.path("d")).unwrap();
    let mut c = h.connect();
    // Renameat over an existing file replaces it.
    let ino_a = std::fs::metadata(h.path("a")).unwrap().ino();
    c.ok(Trenameat {
        olddirfid: ROOT,
        oldname: b"a".to_vec(),
        newdirfid: ROOT,
        newname: b"b".to_vec(),
    });
    assert!(!h.path("a").exists());
    assert_eq!(std::fs::read(h.path("b")).unwrap(), b"A");
    assert_eq!(std::fs::metadata(h.path("b")).unwrap().ino(), ino_a);
    // Trename moves the fid's file, and the fid follows it.
    c.walk_path(Fid(1), "b").unwrap();
    c.walk_path(Fid(2), "d").unwrap();
    c.ok(Trename {
        fid: Fid(1),
        dfid: Fid(2),
        name: b"moved".to_vec(),
    });
    assert_eq!(std::fs::read(h.path("d/moved")).unwrap(), b"A");
    c.ok(Trename {
        fid: Fid(1),
        dfid: ROOT,
        name: b"back".to_vec(),
    });
    assert_eq!(std::fs::read(h.path("back")).unwrap(), b"A");
    // The root cannot be renamed.
    assert_eq!(
        c.err(Trename {
            fid: ROOT,
            dfid: Fid(2),
            name: b"x".to_vec()
        }),
        libc::EBUSY
    );
    // Hard links.
    c.ok(Tlink {
        dfid: Fid(2),
        fid: Fid(1),
        name: b"hard".to_vec(),
    });
    let md = std::fs::metadata(h.path("d/hard")).unwrap();
    assert_eq!(md.ino(), ino_a);
    assert_eq!(md.nlink(), 2);
    assert_eq!(c.getattr(Fid(1)).unwrap().nlink, 2);
    assert_eq!(
        c.err(Tlink {
            dfid: ROOT,
            fid: Fid(2),
            name: b"dirlink".to_vec()
        }),
        EPERM
    );
    // Tremove removes the name the fid was walked through and clunks, even on failure.
    c.ok(Tremove { fid: Fid(1) });
    assert!(!h.path("back").exists());
    assert_eq!(c.clunk(Fid(1)).unwrap_err(), EBADF);
    c.walk_path(Fid(3), "d").unwrap();
    assert_eq!(c.err(Tremove { fid: Fid(3) }), ENOTEMPTY);
    assert_eq!(c.clunk(Fid(3)).unwrap_err(), EBADF);
    // Unlinkat of a directory needs AT_REMOVEDIR; a non-empty one is ENOTEMPTY.
    assert_eq!(
        c.err(Tunlinkat {
            dirfd: ROOT,
            name: b"d".to_vec(),
            flags: 0
        }),
        EISDIR
    );
    assert_eq!(
        c.err(Tunlinkat {
            dirfd: ROOT,
            name: b"d".to_vec(),
            flags: AT_REMOVEDIR
        }),
        ENOTEMPTY
    );
    c.ok(Tunlinkat {
        dirfd: Fid(2),
        name: b"hard".to_vec(),
        flags: 0,
    });
    c.ok(Tunlinkat {
        dirfd: ROOT,
        name: b"d".to_vec(),
        flags: AT_REMOVEDIR,
    });
    assert!(!h.path("d").exists());
    // Tremove of a fid whose name now names another file refuses to remove that file.
    std::fs::write(h.path("x"), b"").unwrap();
    c.walk_path(Fid(4), "x").unwrap();
    std::fs::remove_file(h.path("x")).unwrap();
    std::fs::write(h.path("x"), b"other").unwrap();
    assert_eq!(c.err(Tremove { fid: Fid(4) }), ENOENT);
    assert!(h.path("x").exists());
    c.close();
}

#[test]
fn mkdir_symlink_mknod() {
    let h = Harness::new();
    let mut c = h.connect();
    let q = match c.ok(Tmkdir {
        dfid: ROOT,
        name: b"dir".to_vec(),
        mode: 0o750,
        gid: 0,
    }) {
        Rmessage::Mkdir(m) => m.qid,
        other => panic!("{other:?}"),
    };
    let md = std::fs::metadata(h.path("dir")).unwrap();
    assert!(md.is_dir());
    assert_eq!(md.mode() & 0o7777, 0o750);
    assert_eq!((q.ty, q.path), (QID_TYPE_DIR, md.ino()));
    assert_eq!(
        c.err(Tmkdir {
            dfid: ROOT,
            name: b"dir".to_vec(),
            mode: 0o750,
            gid: 0
        }),
        EEXIST
    );

    let q = match c.ok(Tsymlink {
        fid: ROOT,
        name: b"sl".to_vec(),
        symtgt: b"../../anywhere".to_vec(),
        gid: 0,
    }) {
        Rmessage::Symlink(m) => m.qid,
        other => panic!("{other:?}"),
    };
    assert_eq!(q.ty, QID_TYPE_SYMLINK);
    assert_eq!(
        std::fs::read_link(h.path("sl")).unwrap().to_str(),
        Some("../../anywhere")
    );
    c.walk_path(Fid(1), "sl").unwrap();
    match c.ok(Treadlink { fid: Fid(1) }) {
        Rmessage::Readlink(r) => assert_eq!(r.target, b"../../anywhere"),
        other => panic!("{other:?}"),
    }
    c.walk_path(Fid(2), "dir").unwrap();
    assert_eq!(c.err(Treadlink { fid: Fid(2) }), EINVAL);

    c.ok(Tmknod {
        dfid: ROOT,
        name: b"fifo".to_vec(),
        mode: libc::S_IFIFO | 0o640,
        major: 0,
        minor: 0,
        gid: 0,
    });
    c.ok(Tmknod {
        dfid: ROOT,
        name: b"sock".to_vec(),
        mode: libc::S_IFSOCK | 0o600,
        major: 0,
        minor: 0,
        gid: 0,
    });
    c.ok(Tmknod {
        dfid: ROOT,
        name: b"reg".to_vec(),
        mode: 0o644,
        major: 0,
        minor: 0,
        gid: 0,
    });
    let fifo = std::fs::symlink_metadata(h.path("fifo")).unwrap();
    assert!(fifo.file_type().is_fifo());
    assert_eq!(fifo.mode() & 0o7777, 0o640);
    assert!(std::fs::symlink_metadata(h.path("sock"))
        .unwrap()
        .file_type()
        .is_socket());
    assert!(std::fs::symlink_metadata(h.path("reg")).unwrap().is_file());
    c.walk_path(Fid(3), "fifo").unwrap();
    assert_eq!(c.getattr(Fid(3)).unwrap().mode, fifo.mode());

    // 255-byte names work; 256 do not.
    let long = "n".repeat(255);
    c.ok(Tmkdir {
        dfid: ROOT,
        name: long.as_bytes().to_vec(),
        mode: 0o755,
        gid: 0,
    });
    c.walk(ROOT, Fid(4), &[&long]).unwrap();
    let too_long = "n".repeat(256);
    assert_eq!(
        c.err(Tmkdir {
            dfid: ROOT,
            name: too_long.into_bytes(),
            mode: 0o755,
            gid: 0
        }),
        ENAMETOOLONG
    );
    c.close();
}

#[test]
fn created_files_belong_to_the_attaching_user_when_root() {
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let h = Harness::new();
    let mut c = h.connect_raw();
    c.version(1 << 20, b"9P2000.L");
    c.ok(Tattach {
        fid: ROOT,
        afid: NOFID,
        uname: b"u".to_vec(),
        aname: vec![],
        n_uname: 1234,
    });
    c.ok(Tmkdir {
        dfid: ROOT,
        name: b"d".to_vec(),
        mode: 0o755,
        gid: 4321,
    });
    c.ok(Tsymlink {
        fid: ROOT,
        name: b"l".to_vec(),
        symtgt: b"d".to_vec(),
        gid: 4321,
    });
    c.walk(ROOT, Fid(1), &["d"]).unwrap();
    c.ok(Tlcreate {
        fid: Fid(1),
        name: b"f".to_vec(),
        flags: open_flags::RDWR,
        mode: 0o644,
        gid: 4321,
    });
    for p in ["d", "l", "d/f"] {
        let md = std::fs::symlink_metadata(h.path(p)).unwrap();
        assert_eq!((md.uid(), md.gid()), (1234, 4321), "{p}");
    }
    // Tsetattr uid/gid: applied (the server, root, may).
    c.walk(ROOT, Fid(2), &["d"]).unwrap();
    c.ok(Tsetattr {
        fid: Fid(2),
        uid: 7,
        gid: 8,
        ..setattr(setattr::UID | setattr::GID)
    });
    let md = std::fs::metadata(h.path("d")).unwrap();
    assert_eq!((md.uid(), md.gid()), (7, 8));
    // -1 leaves a field as it is, as chown(2) takes it (a debug build of the server used to
    // panic on it: found by the serve_stream fuzzer).
    for (uid, gid, want) in [(!0, 9, (7, 9)), (10, !0, (10, 9)), (!0, !0, (10, 9))] {
        c.ok(Tsetattr {
            fid: Fid(2),
            uid,
            gid,
            ..setattr(setattr::UID | setattr::GID)
        });
        let md = std::fs::metadata(h.path("d")).unwrap();
        assert_eq!((md.uid(), md.gid()), want, "uid {uid} gid {gid}");
    }
    c.close();
}

#[test]
fn setattr_mode_size_and_times() {
    let h = Harness::new();
    std::fs::write(h.path("f"), vec![1u8; 1000]).unwrap();
    let mut c = h.connect();
    c.walk_path(Fid(1), "f").unwrap();
    // Set-id bits have their own rules (tests/setid.rs).
    c.ok(Tsetattr {
        fid: Fid(1),
        mode: 0o1711,
        ..setattr(setattr::MODE)
    });
    assert_eq!(
        std::fs::metadata(h.path("f")).unwrap().mode() & 0o7777,
        0o1711
    );
    // Truncate a fid that is not open.
    c.ok(Tsetattr {
        fid: Fid(1),
        size: 10,
        ..setattr(setattr::SIZE)
    });
    assert_eq!(std::fs::metadata(h.path("f")).unwrap().len(), 10);
    // Through an open (read-only) fid: still truncates, by reopening for writing.
    c.open(Fid(2), "f", open_flags::RDONLY);
    c.ok(Tsetattr {
        fid: Fid(2),
        size: 3,
        ..setattr(setattr::SIZE)
    });
    assert_eq!(std::fs::metadata(h.path("f")).unwrap().len(), 3);
    c.open(Fid(3), "f", open_flags::RDWR);
    c.ok(Tsetattr {
        fid: Fid(3),
        size: 5000,
        ..setattr(setattr::SIZE)
    });
    assert_eq!(std::fs::metadata(h.path("f")).unwrap().len(), 5000);
    c.walk(ROOT, Fid(4), &[]).unwrap();
    assert_eq!(
        c.err(Tsetattr {
            fid: Fid(4),
            size: 0,
            ..setattr(setattr::SIZE)
        }),
        EISDIR
    );
    // Times to the nanosecond.
    c.ok(Tsetattr {
        fid: Fid(1),
        atime_sec: 1_000_000_000,
        atime_nsec: 123_456_789,
        mtime_sec: 1_500_000_000,
        mtime_nsec: 987_654_321,
        ..setattr(setattr::ATIME | setattr::ATIME_SET | setattr::MTIME | setattr::MTIME_SET)
    });
    let md = std::fs::metadata(h.path("f")).unwrap();
    assert_eq!((md.atime(), md.atime_nsec()), (1_000_000_000, 123_456_789));
    assert_eq!((md.mtime(), md.mtime_nsec()), (1_500_000_000, 987_654_321));
    let g = c.getattr(Fid(1)).unwrap();
    assert_eq!((g.mtime_sec, g.mtime_nsec), (1_500_000_000, 987_654_321));
    // Only mtime, to "now": atime is left alone.
    c.ok(Tsetattr {
        fid: Fid(1),
        ..setattr(setattr::MTIME)
    });
    let md = std::fs::metadata(h.path("f")).unwrap();
    assert_eq!((md.atime(), md.atime_nsec()), (1_000_000_000, 123_456_789));
    assert!(md.mtime() > 1_600_000_000);
    // Size and mtime together: the explicit mtime wins over the truncation's.
    c.ok(Tsetattr {
        fid: Fid(1),
        size: 1,
        mtime_sec: 42,
        mtime_nsec: 7,
        ..setattr(setattr::SIZE | setattr::MTIME | setattr::MTIME_SET)
    });
    let md = std::fs::metadata(h.path("f")).unwrap();
    assert_eq!((md.len(), md.mtime(), md.mtime_nsec()), (1, 42, 7));
    // CTIME alone is accepted and changes nothing.
    c.ok(Tsetattr {
        fid: Fid(1),
        ..setattr(setattr::CTIME)
    });
    // Bad nanoseconds are refused by the kernel, as locally.
    assert_eq!(
        c.err(Tsetattr {
            fid: Fid(1),
            mtime_nsec: 2_000_000_000,
            ..setattr(setattr::MTIME | setattr::MTIME_SET)
        }),
        EINVAL
    );
    c.close();
}

#[test]
fn readdir_offsets_are_stable_and_complete() {
    let h = Harness::new();
    let mut expected = BTreeSet::new();
    for i in 0..300 {
        let name = format!("file-{i:03}-{}", "x".repeat(i % 40));
        std::fs::write(h.path(&name), b"").unwrap();
        expected.insert(name);
    }
    std::fs::create_dir(h.path("sub")).unwrap();
    expected.insert("sub".into());
    expected.insert(".".into());
    expected.insert("..".into());
    let mut c = h.connect_msize(4096);
    c.open(Fid(1), "", open_flags::RDONLY | open_flags::DIRECTORY);
    for count in [100u32, 257, 1000, 4096] {
        let all = c.readdir_all(Fid(1), count);
        let names: Vec<String> = all
            .iter()
            .map(|e| String::from_utf8(e.name.clone()).unwrap())
            .collect();
        let set: BTreeSet<String> = names.iter().cloned().collect();
        assert_eq!(names.len(), set.len(), "no duplicates at count {count}");
        assert_eq!(set, expected, "every entry at count {count}");
        for e in &all {
            let md = std::fs::symlink_metadata(h.path(&String::from_utf8_lossy(&e.name))).unwrap();
            if e.name != b"." && e.name != b".." {
                assert_eq!(e.qid.path, md.ino());
                assert_eq!(e.ty == libc::DT_DIR, md.is_dir());
            }
        }
        // Resuming from any entry's offset continues exactly after it.
        let mid = &all[all.len() / 2];
        let next = c.readdir(Fid(1), mid.offset, 4000).unwrap();
        assert_eq!(next[0].name, all[all.len() / 2 + 1].name);
        // Offset 0 rewinds.
        let first = c.readdir(Fid(1), 0, 4000).unwrap();
        assert_eq!(first[0].name, all[0].name);
    }
    // A count too small for one entry is EINVAL (as getdents says), not a silent end.
    assert_eq!(c.readdir(Fid(1), 0, 10).unwrap_err(), EINVAL);
    // Readdir needs an open directory.
    c.walk(ROOT, Fid(2), &[]).unwrap();
    assert_eq!(c.readdir(Fid(2), 0, 1000).unwrap_err(), EBADF);
    c.close();
}

#[test]
fn statfs_is_the_real_file_system() {
    let h = Harness::new();
    let mut c = h.connect();
    let s = match c.ok(Tstatfs { fid: ROOT }) {
        Rmessage::Statfs(s) => s,
        other => panic!("{other:?}"),
    };
    let local = rustix::fs::statfs(h.root()).unwrap();
    let vfs = rustix::fs::statvfs(h.root()).unwrap();
    assert_eq!(s.ty as i64, local.f_type as i64);
    assert_eq!(s.bsize as i64, local.f_bsize as i64);
    assert_eq!(s.blocks, local.f_blocks);
    assert_eq!(s.files, local.f_files);
    assert_eq!(s.namelen as i64, local.f_namelen as i64);
    assert_eq!(s.fsid, vfs.f_fsid);
    c.close();
}

fn xattr_set(c: &mut Client, fid: Fid, name: &str, value: &[u8], flags: u32) -> Result<(), i32> {
    c.walk(fid, Fid(90), &[]).unwrap();
    let r = c.rpc(Txattrcreate {
        fid: Fid(90),
        name: name.as_bytes().to_vec(),
        attr_size: value.len() as u64,
        flags,
    });
    if let Rmessage::Lerror(e) = r {
        c.clunk(Fid(90)).unwrap();
        return Err(e.ecode as i32);
    }
    for (i, chunk) in value.chunks(1000).enumerate() {
        c.write(Fid(90), (i * 1000) as u64, chunk).unwrap();
    }
    c.clunk(Fid(90))
}

fn xattr_get(c: &mut Client, fid: Fid, name: &str) -> Result<Vec<u8>, i32> {
    match c.rpc(Txattrwalk {
        fid,
        newfid: Fid(91),
        name: name.as_bytes().to_vec(),
    }) {
        Rmessage::Xattrwalk(w) => {
            let data = c.read_all(Fid(91));
            assert_eq!(data.len() as u64, w.size);
            c.clunk(Fid(91)).unwrap();
            Ok(data)
        }
        Rmessage::Lerror(e) => Err(e.ecode as i32),
        other => panic!("{other:?}"),
    }
}

#[test]
fn xattrs_set_get_list_remove() {
    let h = Harness::new();
    std::fs::write(h.path("f"), b"").unwrap();
    let mut c = h.connect_msize(4096);
    c.walk_path(Fid(1), "f").unwrap();
    let value: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    if let Err(e) = xattr_set(&mut c, Fid(1), "user.big", &value, 0) {
        // A file system without user xattrs: nothing more to check here.
        assert_eq!(e, EOPNOTSUPP);
        return;
    }
    xattr_set(&mut c, Fid(1), "user.empty", b"", 0).unwrap();
    assert_eq!(xattr_get(&mut c, Fid(1), "user.big").unwrap(), value);
    assert_eq!(xattr_get(&mut c, Fid(1), "user.empty").unwrap(), b"");
    let list = xattr_get(&mut c, Fid(1), "").unwrap();
    let names: BTreeSet<&[u8]> = list.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    assert!(names.contains(&b"user.big"[..]) && names.contains(&b"user.empty"[..]));
    // Flags: create on an existing name fails at clunk.
    assert_eq!(
        xattr_set(&mut c, Fid(1), "user.big", b"x", xattr_flags::CREATE).unwrap_err(),
        EEXIST
    );
    // Removal, as Linux sends it: size 0 with XATTR_REPLACE.
    xattr_set(&mut c, Fid(1), "user.big", b"", xattr_flags::REPLACE).unwrap();
    assert_eq!(xattr_get(&mut c, Fid(1), "user.big").unwrap_err(), ENODATA);
    // Beyond the configured limit: refused up front.
    assert_eq!(
        xattr_set(&mut c, Fid(1), "user.huge", &vec![0; 65537], 0).unwrap_err(),
        E2BIG
    );
    // Writing more than announced is refused; less is refused at clunk.
    c.walk(Fid(1), Fid(92), &[]).unwrap();
    c.ok(Txattrcreate {
        fid: Fid(92),
        name: b"user.x".to_vec(),
        attr_size: 2,
        flags: 0,
    });
    assert_eq!(c.write(Fid(92), 0, b"abc").unwrap_err(), EINVAL);
    c.write(Fid(92), 0, b"a").unwrap();
    assert_eq!(c.clunk(Fid(92)).unwrap_err(), EINVAL);
    assert_eq!(c.clunk(Fid(92)).unwrap_err(), EBADF);
    c.close();
}

#[test]
fn xattr_limit_is_configurable() {
    let h = Harness::with(|c| c.max_xattr_size = 16);
    std::fs::write(h.path("f"), b"").unwrap();
    let mut c = h.connect();
    c.walk_path(Fid(1), "f").unwrap();
    match xattr_set(&mut c, Fid(1), "user.a", &[1; 17], 0) {
        Err(E2BIG) => {}
        other => panic!("{other:?}"),
    }
    c.close();
}

#[test]
fn posix_locks_never_block_the_server() {
    let h = Harness::new();
    std::fs::write(h.path("f"), vec![0u8; 100]).unwrap();
    let mut c = h.connect();
    c.open(Fid(1), "f", open_flags::RDWR);
    c.open(Fid(2), "f", open_flags::RDWR);
    let lock = |fid, ty| Tlock {
        fid,
        ty,
        flags: 0,
        start: 0,
        length: 10,
        proc_id: 1,
        client_id: b"c".to_vec(),
    };
    let status = |m: Rmessage| match m {
        Rmessage::Lock(l) => l.status,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        status(c.ok(lock(Fid(1), lock::TYPE_WRLCK))),
        lock::STATUS_SUCCESS
    );
    assert_eq!(
        status(c.ok(lock(Fid(2), lock::TYPE_RDLCK))),
        lock::STATUS_BLOCKED
    );
    match c.ok(Tgetlock {
        fid: Fid(2),
        ty: lock::TYPE_WRLCK,
        start: 5,
        length: 0,
        proc_id: 2,
        client_id: b"d".to_vec(),
    }) {
        Rmessage::Getlock(g) => {
            assert_eq!(g.ty, lock::TYPE_WRLCK);
            assert_eq!((g.start, g.length), (0, 10));
        }
        other => panic!("{other:?}"),
    }
    // Past the locked range: no conflict.
    match c.ok(Tgetlock {
        fid: Fid(2),
        ty: lock::TYPE_WRLCK,
        start: 10,
        length: 5,
        proc_id: 2,
        client_id: b"d".to_vec(),
    }) {
        Rmessage::Getlock(g) => assert_eq!(g.ty, lock::TYPE_UNLCK),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        status(c.ok(lock(Fid(1), lock::TYPE_UNLCK))),
        lock::STATUS_SUCCESS
    );
    assert_eq!(
        status(c.ok(lock(Fid(2), lock::TYPE_WRLCK))),
        lock::STATUS_SUCCESS
    );
    // Clunking the holder's fid releases its locks.
    c.clunk(Fid(2)).unwrap();
    assert_eq!(
        status(c.ok(lock(Fid(1), lock::TYPE_WRLCK))),
        lock::STATUS_SUCCESS
    );
    // Locks need an open fid.
    c.walk_path(Fid(3), "f").unwrap();
    assert_eq!(c.err(lock(Fid(3), lock::TYPE_WRLCK)), EBADF);
    assert_eq!(c.err(lock(Fid(1), 9)), EINVAL);
    c.close();
}
