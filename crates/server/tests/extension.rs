//! The crossfs extension of 9P2000.L (docs/protocol.md): negotiation, each compound's
//! result against its plain steps, failures that bind nothing, and confinement through the
//! compounds.

mod common;

use common::{Harness, Outside, ROOT};
use crossfs_wire::*;

fn extended(h: &Harness) -> common::Client {
    let mut c = h.connect_raw();
    let v = c.version(1 << 20, VERSION_CROSSFS);
    assert_eq!(v.version, VERSION_CROSSFS);
    c.attach(ROOT);
    c
}

fn names(v: &[&str]) -> Vec<Vec<u8>> {
    v.iter().map(|n| n.as_bytes().to_vec()).collect()
}

#[test]
fn the_extension_is_offered_only_when_asked_for_and_not_switched_off() {
    let h = Harness::new();
    assert_eq!(
        h.connect_raw().version(8192, b"9P2000.L").version,
        b"9P2000.L"
    );
    assert_eq!(
        h.connect_raw().version(8192, VERSION_CROSSFS).version,
        VERSION_CROSSFS
    );
    assert_eq!(
        h.connect_raw().version(8192, b"9P2000.L.other").version,
        b"9P2000.L"
    );
    let off = Harness::with(|c| c.extensions = false);
    assert_eq!(
        off.connect_raw().version(8192, VERSION_CROSSFS).version,
        b"9P2000.L"
    );
}

#[test]
fn walkgetattr_equals_walk_then_getattr_and_a_missing_name_binds_nothing() {
    let h = Harness::new();
    std::fs::create_dir_all(h.path("a/b")).unwrap();
    std::fs::write(h.path("a/b/f"), b"12345").unwrap();
    let mut c = extended(&h);
    let r = c.ok(Twalkgetattr {
        fid: ROOT,
        newfid: Fid(1),
        wnames: names(&["a", "b", "f"]),
        request_mask: getattr::BASIC,
    });
    let Rmessage::Walkgetattr(r) = r else {
        panic!("{r:?}")
    };
    assert_eq!(r.wqids.len(), 3);
    assert_eq!(r.attr.size, 5);
    assert_eq!(r.attr.qid, r.wqids[2]);
    assert_eq!(c.getattr(Fid(1)).unwrap(), r.attr);
    // A missing last name: ENOENT, and fid 2 stays unbound.
    let e = c.err(Twalkgetattr {
        fid: ROOT,
        newfid: Fid(2),
        wnames: names(&["a", "nope"]),
        request_mask: getattr::BASIC,
    });
    assert_eq!(e, libc::ENOENT);
    assert_eq!(c.getattr(Fid(2)), Err(libc::EBADF));
}

#[test]
fn readdirattr_lists_every_entry_with_what_getattr_says_across_small_replies() {
    let h = Harness::new();
    for i in 0..300 {
        std::fs::write(h.path(&format!("file-{i:03}")), vec![b'x'; i]).unwrap();
    }
    std::fs::create_dir(h.path("sub")).unwrap();
    std::os::unix::fs::symlink("file-001", h.path("link")).unwrap();
    let mut c = extended(&h);
    // An unopened fid, in replies of at most 4 KiB: many calls, no entry lost or repeated.
    c.walk(ROOT, Fid(1), &[]).unwrap();
    let mut offset = 0;
    let mut seen = Vec::new();
    loop {
        let r = c.ok(Treaddirattr {
            fid: Fid(1),
            offset,
            count: 4096,
            request_mask: getattr::BASIC,
        });
        let Rmessage::Readdirattr(r) = r else {
            panic!("{r:?}")
        };
        assert!(r.data.0.len() <= 4096);
        let entries: Vec<DirEntryAttr> =
            DirEntryAttr::iter(&r.data.0).map(Result::unwrap).collect();
        let Some(last) = entries.last() else { break };
        offset = last.entry.offset;
        seen.extend(entries);
    }
    assert_eq!(seen.len(), 304, "300 files, sub, link, . and ..");
    for e in &seen {
        match &e.entry.name[..] {
            b"." => assert_eq!(e.attr.qid, e.entry.qid, "the directory's own attributes"),
            b".." => assert_eq!(e.attr.valid, 0, "no attributes for .."),
            _ => {}
        }
    }
    for e in seen
        .iter()
        .filter(|e| e.entry.name != b"." && e.entry.name != b"..")
    {
        let name = String::from_utf8(e.entry.name.clone()).unwrap();
        c.walk(ROOT, Fid(9), &[&name]).unwrap();
        let mut plain = c.getattr(Fid(9)).unwrap();
        c.clunk(Fid(9)).unwrap();
        // Access times may move with the walk's own reads of nothing: compare the rest.
        plain.atime_sec = e.attr.atime_sec;
        plain.atime_nsec = e.attr.atime_nsec;
        assert_eq!(plain, e.attr, "{name}");
        assert_eq!(e.entry.qid, e.attr.qid);
    }
    // "." carries the directory's attributes as its reading left them: with an access
    // time older than its change time, the read moves it (unless the export's file
    // system never does), and a getattr after the listing says the same.
    let sub = std::fs::File::open(h.path("sub")).unwrap();
    let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000);
    sub.set_times(std::fs::FileTimes::new().set_accessed(long_ago))
        .unwrap();
    c.walk(ROOT, Fid(2), &["sub"]).unwrap();
    let r = c.ok(Treaddirattr {
        fid: Fid(2),
        offset: 0,
        count: 4096,
        request_mask: getattr::BASIC,
    });
    let Rmessage::Readdirattr(r) = r else {
        panic!("{r:?}")
    };
    let dot = DirEntryAttr::iter(&r.data.0)
        .map(Result::unwrap)
        .find(|e| e.entry.name == b".")
        .expect(". is listed");
    assert_eq!(dot.attr, c.getattr(Fid(2)).unwrap());
    c.clunk(Fid(2)).unwrap();

    // A count too small for one entry is EINVAL, as getdents says.
    assert_eq!(
        c.err(Treaddirattr {
            fid: Fid(1),
            offset: 0,
            count: 20,
            request_mask: 0
        }),
        libc::EINVAL
    );
    // A file is not a directory.
    c.walk(ROOT, Fid(2), &["file-000"]).unwrap();
    assert_eq!(
        c.err(Treaddirattr {
            fid: Fid(2),
            offset: 0,
            count: 4096,
            request_mask: 0
        }),
        libc::ENOTDIR
    );
}

#[test]
fn walkreaddirattr_lists_what_walk_then_readdirattr_list_and_a_failure_binds_nothing() {
    let h = Harness::new();
    std::fs::create_dir_all(h.path("a/b")).unwrap();
    for i in 0..40 {
        std::fs::write(h.path(&format!("a/b/f{i}")), vec![b'x'; i]).unwrap();
    }
    let mut c = extended(&h);
    let list = |c: &mut common::Client, offset| {
        let r = c.ok(Twalkreaddirattr {
            fid: ROOT,
            newfid: Fid(1),
            wnames: names(&["a", "b"]),
            offset,
            count: 1024,
            request_mask: getattr::BASIC,
        });
        let Rmessage::Walkreaddirattr(r) = r else {
            panic!("{r:?}")
        };
        assert_eq!(r.wqids.len(), 2);
        r.data.0
    };
    let first = list(&mut c, 0);
    assert!(first.len() <= 1024);
    // Fid 1 is the directory: the rest of the listing goes on from it.
    let mut seen: Vec<DirEntryAttr> = DirEntryAttr::iter(&first).map(Result::unwrap).collect();
    loop {
        let Rmessage::Readdirattr(r) = c.ok(Treaddirattr {
            fid: Fid(1),
            offset: seen.last().unwrap().entry.offset,
            count: 1024,
            request_mask: getattr::BASIC,
        }) else {
            panic!()
        };
        if r.data.0.is_empty() {
            break;
        }
        seen.extend(DirEntryAttr::iter(&r.data.0).map(Result::unwrap));
    }
    assert_eq!(seen.len(), 42, "40 files, . and ..");
    c.walk(ROOT, Fid(2), &["a", "b"]).unwrap();
    let Rmessage::Readdirattr(plain) = c.ok(Treaddirattr {
        fid: Fid(2),
        offset: 0,
        count: 1024,
        request_mask: getattr::BASIC,
    }) else {
        panic!()
    };
    let names_of = |data: &[u8]| -> Vec<Vec<u8>> {
        DirEntryAttr::iter(data)
            .map(|e| e.unwrap().entry.name)
            .collect()
    };
    assert_eq!(names_of(&first), names_of(&plain.data.0));
    c.clunk(Fid(1)).unwrap();
    // A missing name, and a file that is no directory: nothing bound.
    for (wnames, errno) in [
        (&["a", "nope"][..], libc::ENOENT),
        (&["a", "b", "f1"], libc::ENOTDIR),
    ] {
        let e = c.err(Twalkreaddirattr {
            fid: ROOT,
            newfid: Fid(3),
            wnames: names(wnames),
            offset: 0,
            count: 1024,
            request_mask: getattr::BASIC,
        });
        assert_eq!(e, errno, "{wnames:?}");
        assert_eq!(c.getattr(Fid(3)), Err(libc::EBADF));
    }
}

#[test]
fn walkopen_createattr_and_setattrget_do_what_their_steps_do() {
    let h = Harness::new();
    std::fs::write(h.path("data"), b"hello").unwrap();
    let mut c = extended(&h);
    let r = c.ok(Twalkopen {
        fid: ROOT,
        newfid: Fid(1),
        wnames: names(&["data"]),
        flags: open_flags::RDONLY,
        request_mask: getattr::BASIC,
    });
    let Rmessage::Walkopen(o) = r else {
        panic!("{r:?}")
    };
    assert_eq!(o.attr.size, 5);
    assert_eq!(c.read(Fid(1), 0, 100).unwrap(), b"hello");
    // A directory opened for writing fails whole: fid 3 is not bound.
    let e = c.err(Twalkopen {
        fid: ROOT,
        newfid: Fid(3),
        wnames: vec![],
        flags: open_flags::RDWR,
        request_mask: getattr::BASIC,
    });
    assert_eq!(e, libc::EISDIR);
    assert_eq!(c.getattr(Fid(3)), Err(libc::EBADF));

    let r = c.ok(Tcreateattr {
        dfid: ROOT,
        nodefid: Fid(4),
        openfid: Fid(5),
        name: b"new".to_vec(),
        flags: open_flags::RDWR,
        mode: 0o640,
        gid: !0,
        request_mask: getattr::BASIC,
    });
    let Rmessage::Createattr(cr) = r else {
        panic!("{r:?}")
    };
    assert_eq!(cr.attr.mode, libc::S_IFREG | 0o640);
    assert_eq!(c.write(Fid(5), 0, b"abc").unwrap(), 3);
    assert_eq!(
        c.getattr(Fid(4)).unwrap().size,
        3,
        "the node fid is the same file"
    );
    // The directory fid was left as it was.
    c.walk(ROOT, Fid(6), &["data"]).unwrap();
    // Creating it again exclusively fails and binds neither fid.
    let e = c.err(Tcreateattr {
        dfid: ROOT,
        nodefid: Fid(7),
        openfid: Fid(8),
        name: b"new".to_vec(),
        flags: open_flags::RDWR | open_flags::EXCL,
        mode: 0o640,
        gid: !0,
        request_mask: getattr::BASIC,
    });
    assert_eq!(e, libc::EEXIST);
    assert_eq!(c.getattr(Fid(7)), Err(libc::EBADF));
    assert_eq!(c.getattr(Fid(8)), Err(libc::EBADF));

    let mut set = Tsetattr::unchanged(Fid(4));
    set.valid = setattr::MODE | setattr::SIZE;
    set.mode = 0o600;
    set.size = 1;
    let r = c.ok(Tsetattrget {
        set,
        request_mask: getattr::BASIC,
    });
    let Rmessage::Setattrget(s) = r else {
        panic!("{r:?}")
    };
    assert_eq!((s.attr.mode & 0o7777, s.attr.size), (0o600, 1));
    assert_eq!(std::fs::read(h.path("new")).unwrap(), b"a");

    // Twriteattr: the write, then what Tgetattr says after it.
    let r = c.ok(Twriteattr {
        fid: Fid(5),
        offset: 1,
        data: Data(b"bcdef".to_vec()),
    });
    let Rmessage::Writeattr(w) = r else {
        panic!("{r:?}")
    };
    assert_eq!(w.count, 5);
    assert_eq!(std::fs::read(h.path("new")).unwrap(), b"abcdef");
    let after = c.getattr(Fid(4)).unwrap();
    assert_eq!(w.attr.size, 6);
    assert_eq!(
        (w.attr.qid, w.attr.mode, w.attr.mtime_sec, w.attr.mtime_nsec),
        (after.qid, after.mode, after.mtime_sec, after.mtime_nsec)
    );
    assert_eq!(w.attr.ctime_nsec, after.ctime_nsec);
    // Fails like Twrite: a fid opened for nothing, or not at all.
    let e = c.err(Twriteattr {
        fid: Fid(4),
        offset: 0,
        data: Data(b"x".to_vec()),
    });
    assert_eq!(e, libc::EBADF);
    assert_eq!(std::fs::read(h.path("new")).unwrap(), b"abcdef");
}

#[test]
fn walkread_opens_and_reads_in_one_and_a_failure_binds_nothing() {
    let h = Harness::new();
    let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(h.path("data"), &content).unwrap();
    std::fs::create_dir(h.path("dir")).unwrap();
    let mut c = extended(&h);
    let walkread = |newfid, wnames: &[&str], offset, count| Twalkread {
        fid: ROOT,
        newfid: Fid(newfid),
        wnames: names(wnames),
        flags: open_flags::RDONLY,
        offset,
        count,
        request_mask: getattr::BASIC,
    };
    let r = c.ok(walkread(1, &["data"], 100, 1000));
    let Rmessage::Walkread(w) = r else {
        panic!("{r:?}")
    };
    assert_eq!(w.data.0, &content[100..1100]);
    let attr = c.getattr(Fid(1)).unwrap();
    assert_eq!(w.wqids, [attr.qid]);
    assert_eq!(w.attr, attr, "the attributes after the read");
    // The new fid is open: it reads on.
    assert_eq!(c.read(Fid(1), 1100, 10).unwrap(), &content[1100..1110]);
    // A read as large as it may be is bounded by msize (1 MiB here), whatever the count.
    let Rmessage::Walkread(w) = c.ok(walkread(2, &["data"], 0, u32::MAX)) else {
        panic!()
    };
    assert_eq!(w.data.0, content, "the whole file fits");
    // Reading past the end gives nothing, successfully.
    let Rmessage::Walkread(w) = c.ok(walkread(3, &["data"], 1 << 30, 10)) else {
        panic!()
    };
    assert!(w.data.0.is_empty());
    // Each step's failure fails it whole, binding nothing: a missing name, a directory
    // (opened, but not readable), a write-only open.
    assert_eq!(c.err(walkread(4, &["nope"], 0, 10)), libc::ENOENT);
    assert_eq!(c.err(walkread(5, &["dir"], 0, 10)), libc::EISDIR);
    let mut write_only = walkread(6, &["data"], 0, 10);
    write_only.flags = open_flags::WRONLY;
    assert_eq!(c.err(write_only), libc::EBADF);
    for fid in [4, 5, 6] {
        assert_eq!(c.getattr(Fid(fid)), Err(libc::EBADF), "fid {fid}");
    }
    // Not in place: an open fid left behind by a failed read would be unseen.
    let mut in_place = walkread(7, &[], 0, 10);
    in_place.newfid = ROOT;
    assert_ne!(c.err(in_place), 0);
    assert_eq!(std::fs::read(h.path("data")).unwrap(), content, "untouched");
}

#[test]
fn readfiles_brings_small_regular_files_whole_and_link_targets_and_leaves_out_the_rest() {
    use std::os::unix::fs::MetadataExt;
    let o = Outside::new();
    let h = &o.h;
    std::fs::write(h.path("a.h"), b"alpha").unwrap();
    std::fs::write(h.path("empty"), b"").unwrap();
    std::fs::write(h.path("big"), vec![7u8; 5000]).unwrap();
    std::fs::create_dir(h.path("dir")).unwrap();
    std::os::unix::fs::symlink("a.h", h.path("link")).unwrap();
    std::os::unix::fs::symlink(&o.dir, h.path("escape")).unwrap();
    let atime = |name: &str| {
        let md = std::fs::metadata(h.path(name)).unwrap();
        (md.atime(), md.atime_nsec())
    };
    // An access time older than the change time, which a plain read would move.
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::open(h.path("a.h"))
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_accessed(past))
        .unwrap();
    let before = atime("a.h");
    let mut c = extended(h);
    c.walk(ROOT, Fid(1), &[]).unwrap();
    let ask = ["a.h", "empty", "big", "dir", "link", "escape", "missing"];
    let r = c.ok(Treadfiles {
        fid: Fid(1),
        names: names(&ask),
        max_each: 4096,
    });
    let Rmessage::Readfiles(r) = r else {
        panic!("{r:?}")
    };
    let files: Vec<FileData> = FileData::iter(&r.data.0).map(Result::unwrap).collect();
    let got: Vec<(&[u8], &[u8])> = files.iter().map(|f| (&f.name[..], &f.data[..])).collect();
    let outside = o.dir.as_os_str().as_encoded_bytes();
    assert_eq!(
        got,
        [
            (&b"a.h"[..], &b"alpha"[..]),
            (b"empty", b""),
            // Links are not followed: their targets come, as Treadlink gives them.
            (b"link", b"a.h"),
            (b"escape", outside),
        ]
    );
    assert_eq!(files[2].attr.mode & libc::S_IFMT, libc::S_IFLNK);
    c.walk(ROOT, Fid(2), &["a.h"]).unwrap();
    let attr = c.getattr(Fid(2)).unwrap();
    assert_eq!(files[0].attr.qid, attr.qid);
    assert_eq!(files[0].attr.size, 5);
    assert_eq!(atime("a.h"), before, "read without moving the access time");
    // A name that is not one component fails the request, as a walk does.
    for bad in ["..", "a/b", ""] {
        let e = c.err(Treadfiles {
            fid: Fid(1),
            names: names(&[bad]),
            max_each: 4096,
        });
        assert_eq!(e, libc::EINVAL, "{bad:?}");
    }
    // Only of a directory.
    let e = c.err(Treadfiles {
        fid: Fid(2),
        names: names(&["x"]),
        max_each: 4096,
    });
    assert_eq!(e, libc::ENOTDIR);
    o.assert_untouched();
}

#[test]
fn the_compounds_keep_the_export_confined_and_read_only_holds() {
    let o = Outside::new();
    std::os::unix::fs::symlink(&o.dir, o.h.path("escape")).unwrap();
    let mut c = extended(&o.h);
    for bad in [&[".."][..], &["escape", "secret"], &["a/b"], &[""], &["."]] {
        let e = c.err(Twalkgetattr {
            fid: ROOT,
            newfid: Fid(1),
            wnames: names(bad),
            request_mask: getattr::BASIC,
        });
        assert!(e != 0, "{bad:?}");
        let e = c.err(Twalkopen {
            fid: ROOT,
            newfid: Fid(1),
            wnames: names(bad),
            flags: open_flags::RDONLY,
            request_mask: getattr::BASIC,
        });
        assert!(e != 0, "{bad:?}");
        let e = c.err(Twalkread {
            fid: ROOT,
            newfid: Fid(1),
            wnames: names(bad),
            flags: open_flags::RDONLY,
            offset: 0,
            count: 100,
            request_mask: getattr::BASIC,
        });
        assert!(e != 0, "{bad:?}");
        let e = c.err(Twalkreaddirattr {
            fid: ROOT,
            newfid: Fid(1),
            wnames: names(bad),
            offset: 0,
            count: 4096,
            request_mask: getattr::BASIC,
        });
        assert!(e != 0, "{bad:?}");
    }
    // The symlink is listed as a symlink, never followed.
    c.walk(ROOT, Fid(2), &[]).unwrap();
    let Rmessage::Readdirattr(r) = c.ok(Treaddirattr {
        fid: Fid(2),
        offset: 0,
        count: 65536,
        request_mask: getattr::BASIC,
    }) else {
        panic!()
    };
    let entries: Vec<_> = DirEntryAttr::iter(&r.data.0)
        .map(Result::unwrap)
        .filter(|e| e.entry.name != b"." && e.entry.name != b"..")
        .collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].attr.mode & libc::S_IFMT, libc::S_IFLNK);
    for name in ["..", "a/b", ""] {
        let e = c.err(Tcreateattr {
            dfid: ROOT,
            nodefid: Fid(3),
            openfid: Fid(4),
            name: name.as_bytes().to_vec(),
            flags: open_flags::RDWR,
            mode: 0o644,
            gid: !0,
            request_mask: getattr::BASIC,
        });
        assert_eq!(e, libc::EINVAL, "{name:?}");
    }
    o.assert_untouched();

    let ro = Harness::with(|c| c.read_only = true);
    let mut c = extended(&ro);
    let e = c.err(Tcreateattr {
        dfid: ROOT,
        nodefid: Fid(3),
        openfid: Fid(4),
        name: b"x".to_vec(),
        flags: open_flags::RDWR,
        mode: 0o644,
        gid: !0,
        request_mask: getattr::BASIC,
    });
    assert_eq!(e, libc::EROFS);
    let mut set = Tsetattr::unchanged(ROOT);
    set.valid = setattr::MODE;
    set.mode = 0o700;
    assert_eq!(
        c.err(Tsetattrget {
            set,
            request_mask: 0
        }),
        libc::EROFS
    );
    std::fs::write(ro.path("f"), "x").unwrap();
    let Rmessage::Walkopen(_) = c.ok(Twalkopen {
        fid: ROOT,
        newfid: Fid(5),
        wnames: names(&["f"]),
        flags: open_flags::RDONLY,
        request_mask: 0,
    }) else {
        panic!()
    };
    let e = c.err(Twriteattr {
        fid: Fid(5),
        offset: 0,
        data: Data(b"y".to_vec()),
    });
    assert_eq!(e, libc::EROFS);
}

#[test]
fn removals_and_renames_return_the_directories_as_they_left_them() {
    use std::os::unix::fs::MetadataExt;
    let h = Harness::new();
    std::fs::create_dir(h.path("d")).unwrap();
    std::fs::create_dir(h.path("e")).unwrap();
    std::fs::create_dir(h.path("d/sub")).unwrap();
    std::fs::write(h.path("d/a"), b"a").unwrap();
    std::fs::write(h.path("d/b"), b"b").unwrap();
    let mut c = extended(&h);
    c.walk(ROOT, Fid(1), &["d"]).unwrap();
    c.walk(ROOT, Fid(2), &["e"]).unwrap();
    let host = |p: &str| std::fs::metadata(h.path(p)).unwrap();
    let same = |a: &Rgetattr, m: &std::fs::Metadata| {
        assert_eq!(a.qid.path, m.ino());
        assert_eq!(a.nlink, m.nlink());
        assert_eq!(a.size, m.size());
        assert_eq!(
            (a.mtime_sec, a.mtime_nsec, a.ctime_sec, a.ctime_nsec),
            (
                m.mtime() as u64,
                m.mtime_nsec() as u64,
                m.ctime() as u64,
                m.ctime_nsec() as u64
            )
        );
    };

    let r = c.ok(Tunlinkatattr {
        dirfd: Fid(1),
        name: b"a".to_vec(),
        flags: 0,
        request_mask: getattr::BASIC,
    });
    let Rmessage::Unlinkatattr(u) = r else {
        panic!("{r:?}")
    };
    assert!(!h.path("d/a").exists());
    same(&u.dir, &host("d"));
    // A directory, with AT_REMOVEDIR: the parent loses a link.
    let r = c.ok(Tunlinkatattr {
        dirfd: Fid(1),
        name: b"sub".to_vec(),
        flags: AT_REMOVEDIR,
        request_mask: getattr::BASIC,
    });
    let Rmessage::Unlinkatattr(u) = r else {
        panic!("{r:?}")
    };
    same(&u.dir, &host("d"));
    assert_eq!(u.dir.nlink, 2);

    let r = c.ok(Trenameatattr {
        olddirfid: Fid(1),
        oldname: b"b".to_vec(),
        newdirfid: Fid(2),
        newname: b"c".to_vec(),
        request_mask: getattr::BASIC,
    });
    let Rmessage::Renameatattr(m) = r else {
        panic!("{r:?}")
    };
    assert_eq!(std::fs::read(h.path("e/c")).unwrap(), b"b");
    same(&m.olddir, &host("d"));
    same(&m.newdir, &host("e"));

    let create = |name: &str, nodefid: u32, openfid: u32| Tcreateattrdir {
        create: Tcreateattr {
            dfid: Fid(2),
            nodefid: Fid(nodefid),
            openfid: Fid(openfid),
            name: name.as_bytes().to_vec(),
            flags: open_flags::RDWR | open_flags::EXCL,
            mode: 0o600,
            gid: !0,
            request_mask: getattr::BASIC,
        },
    };
    let r = c.ok(create("made", 10, 11));
    let Rmessage::Createattrdir(cd) = r else {
        panic!("{r:?}")
    };
    assert_eq!(cd.created.attr.mode, libc::S_IFREG | 0o600);
    assert_eq!(c.write(Fid(11), 0, b"xy").unwrap(), 2);
    assert_eq!(std::fs::read(h.path("e/made")).unwrap(), b"xy");
    same(&cd.dir, &host("e"));
    // Exclusively again: fails like Tcreateattr, binding neither fid.
    assert_eq!(c.err(create("made", 12, 13)), libc::EEXIST);
    assert_eq!(c.getattr(Fid(12)), Err(libc::EBADF));

    // Failures are the plain messages' and change nothing.
    let e = c.err(Tunlinkatattr {
        dirfd: Fid(1),
        name: b"missing".to_vec(),
        flags: 0,
        request_mask: getattr::BASIC,
    });
    assert_eq!(e, libc::ENOENT);
    for bad in ["..", "a/b", ""] {
        let e = c.err(Trenameatattr {
            olddirfid: Fid(2),
            oldname: b"c".to_vec(),
            newdirfid: Fid(1),
            newname: bad.as_bytes().to_vec(),
            request_mask: getattr::BASIC,
        });
        assert_eq!(e, libc::EINVAL, "{bad:?}");
        let e = c.err(Tunlinkatattr {
            dirfd: Fid(1),
            name: bad.as_bytes().to_vec(),
            flags: 0,
            request_mask: getattr::BASIC,
        });
        assert_eq!(e, libc::EINVAL, "{bad:?}");
    }
    assert!(h.path("e/c").exists());

    let ro = Harness::with(|c| c.read_only = true);
    std::fs::write(ro.path("f"), b"f").unwrap();
    let mut c = extended(&ro);
    let e = c.err(Tunlinkatattr {
        dirfd: ROOT,
        name: b"f".to_vec(),
        flags: 0,
        request_mask: getattr::BASIC,
    });
    assert_eq!(e, libc::EROFS);
    assert!(ro.path("f").exists());
}

#[test]
fn mkdirattr_makes_binds_and_answers_both_directories_and_a_failure_binds_nothing() {
    use std::os::unix::fs::MetadataExt;
    let o = Outside::new();
    let h = &o.h;
    std::fs::create_dir(h.path("d")).unwrap();
    std::os::unix::fs::symlink(&o.dir, h.path("escape")).unwrap();
    let mut c = extended(h);
    let r = c.ok(Tfeatures {});
    let Rmessage::Features(f) = r else {
        panic!("{r:?}")
    };
    assert_ne!(f.features & features::MKDIR_ATTR, 0, "offered");
    c.walk(ROOT, Fid(1), &["d"]).unwrap();
    let mkdir = |dfid: Fid, newfid: Fid, name: &str| Tmkdirattr {
        dfid,
        newfid,
        name: name.as_bytes().to_vec(),
        mode: 0o750,
        gid: 0,
        request_mask: getattr::ALL,
    };
    let r = c.ok(mkdir(Fid(1), Fid(2), "new"));
    let Rmessage::Mkdirattr(m) = r else {
        panic!("{r:?}")
    };
    let (new, parent) = (
        std::fs::metadata(h.path("d/new")).unwrap(),
        std::fs::metadata(h.path("d")).unwrap(),
    );
    assert!(new.is_dir());
    assert_eq!(new.mode() & 0o7777, 0o750);
    assert_eq!((m.attr.qid.path, m.attr.mode), (new.ino(), new.mode()));
    assert_eq!(
        c.getattr(Fid(2)).unwrap(),
        m.attr,
        "newfid is the new directory"
    );
    assert_eq!(
        (m.dir.qid.path, m.dir.nlink),
        (parent.ino(), parent.nlink())
    );
    assert_eq!(
        (m.dir.mtime_sec, m.dir.mtime_nsec),
        (parent.mtime() as u64, parent.mtime_nsec() as u64),
        "the parent as the mkdir left it"
    );
    // A taken name, a fid in use, names that leave the directory: errors, nothing bound
    // and nothing made outside.
    assert_eq!(c.err(mkdir(Fid(1), Fid(3), "new")), libc::EEXIST);
    assert_eq!(c.getattr(Fid(3)), Err(libc::EBADF));
    assert_eq!(c.err(mkdir(Fid(1), Fid(2), "other")), libc::EBADF);
    assert!(!h.path("d/other").exists());
    for bad in ["..", ".", "a/b", "", "escape/x"] {
        assert_ne!(c.err(mkdir(ROOT, Fid(4), bad)), 0, "{bad:?}");
        assert_eq!(c.getattr(Fid(4)), Err(libc::EBADF), "{bad:?}");
    }
    assert!(!o.dir.join("x").exists(), "made outside the export");
    // Read-only holds.
    let ro = Harness::with(|c| c.read_only = true);
    let mut c = extended(&ro);
    assert_eq!(c.err(mkdir(ROOT, Fid(5), "n")), libc::EROFS);
    assert_eq!(c.getattr(Fid(5)), Err(libc::EBADF));
}

#[test]
fn fallocate_does_what_fallocate_does_locally_and_read_only_holds() {
    use std::os::unix::fs::MetadataExt;
    let h = Harness::new();
    std::fs::write(h.path("f"), vec![7u8; 64 << 10]).unwrap();
    std::fs::create_dir(h.path("d")).unwrap();
    let mut c = extended(&h);
    c.open(Fid(1), "f", open_flags::RDWR);
    let fallocate = |mode: i32, offset, length| Tfallocate {
        fid: Fid(1),
        mode: mode as u32,
        offset,
        length,
    };
    // Plain: allocated and extended.
    let r = c.ok(fallocate(0, 0, 128 << 10));
    assert_eq!(r, Rmessage::Fallocate(Rfallocate {}));
    assert_eq!(std::fs::metadata(h.path("f")).unwrap().size(), 128 << 10);
    // Keep-size: blocks past the end, the size unchanged.
    let before = std::fs::metadata(h.path("f")).unwrap().blocks();
    c.ok(fallocate(libc::FALLOC_FL_KEEP_SIZE, 0, 1 << 20));
    let m = std::fs::metadata(h.path("f")).unwrap();
    assert_eq!(m.size(), 128 << 10);
    assert!(m.blocks() > before, "{} <= {before}", m.blocks());
    // Punch-hole: zeros, the size unchanged.
    c.ok(fallocate(
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        4096,
        8192,
    ));
    let data = std::fs::read(h.path("f")).unwrap();
    assert_eq!(data.len(), 128 << 10);
    assert!(data[4096..12288].iter().all(|&b| b == 0));
    assert_eq!((data[4095], data[12288]), (7, 7));
    // A bit Linux does not know: EOPNOTSUPP, as fallocate(2) says.
    assert_eq!(c.err(fallocate(1 << 30, 0, 4096)), libc::EOPNOTSUPP);
    // A file open only for reading, a fid not open, a directory.
    c.open(Fid(2), "f", open_flags::RDONLY);
    let e = c.err(Tfallocate {
        fid: Fid(2),
        ..fallocate(0, 0, 1 << 21)
    });
    assert_eq!(e, libc::EBADF);
    c.walk(ROOT, Fid(3), &["d"]).unwrap();
    let e = c.err(Tfallocate {
        fid: Fid(3),
        ..fallocate(0, 0, 4096)
    });
    assert_eq!(e, libc::EBADF);
    assert_eq!(std::fs::metadata(h.path("f")).unwrap().size(), 128 << 10);

    let ro = Harness::with(|c| c.read_only = true);
    std::fs::write(ro.path("f"), "x").unwrap();
    let mut c = extended(&ro);
    c.open(Fid(1), "f", open_flags::RDONLY);
    assert_eq!(c.err(fallocate(0, 0, 4096)), libc::EROFS);
    assert_eq!(std::fs::metadata(ro.path("f")).unwrap().size(), 1);
}

#[test]
fn tmpfile_is_named_only_by_tlink_beneath_the_export_and_read_only_holds() {
    let o = Outside::new();
    let h = &o.h;
    std::fs::create_dir(h.path("d")).unwrap();
    std::os::unix::fs::symlink(&o.dir, h.path("escape")).unwrap();
    let listed = |rel: &str| {
        let mut names: Vec<String> = std::fs::read_dir(h.path(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let tmpfile = |dfid, newfid, flags| Ttmpfile {
        dfid,
        newfid,
        flags,
        mode: 0o6640,
        gid: !0,
        request_mask: getattr::BASIC,
    };
    let link = |dfid, fid, name: &str| Tlink {
        dfid,
        fid,
        name: name.as_bytes().to_vec(),
    };
    let mut c = extended(h);
    c.walk(ROOT, Fid(1), &["d"]).unwrap();
    let r = c.ok(tmpfile(Fid(1), Fid(2), open_flags::RDWR));
    let Rmessage::Tmpfile(r) = r else {
        panic!("{r:?}")
    };
    // Tlcreate's rules: set-id bits dropped, exactly the mode asked for; no name yet.
    assert_eq!((r.attr.mode, r.attr.nlink), (libc::S_IFREG | 0o640, 0));
    assert_eq!(c.getattr(Fid(2)).unwrap().qid, r.attr.qid);
    assert!(listed("d").is_empty());
    assert_eq!(c.write(Fid(2), 0, b"data"), Ok(4));
    assert_eq!(c.read(Fid(2), 0, 100).unwrap(), b"data");

    // No name leading out of the directory, and no directory outside the export.
    for bad in ["..", "../x", "/tmp/x", "a/b", ""] {
        assert_eq!(c.err(link(Fid(1), Fid(2), bad)), libc::EINVAL, "{bad:?}");
    }
    c.walk(ROOT, Fid(3), &["escape"]).unwrap();
    assert_eq!(c.err(link(Fid(3), Fid(2), "x")), libc::ENOTDIR);
    assert_eq!(
        c.err(tmpfile(Fid(3), Fid(4), open_flags::RDWR)),
        libc::ENOTDIR
    );
    assert_eq!(c.getattr(Fid(4)), Err(libc::EBADF), "nothing bound");

    // Tlink names it; the fid still writes to the named file.
    assert_eq!(
        c.ok(link(Fid(1), Fid(2), "named")),
        Rmessage::Link(Rlink {})
    );
    assert_eq!(c.write(Fid(2), 4, b"!"), Ok(1));
    assert_eq!(std::fs::read(h.path("d/named")).unwrap(), b"data!");
    assert_eq!(c.getattr(Fid(2)).unwrap().nlink, 1);

    // Failures bind nothing and leave nothing: a newfid in use, an access mode that does
    // not write (EINVAL, as open(2) says).
    assert_eq!(
        c.err(tmpfile(Fid(1), Fid(2), open_flags::RDWR)),
        libc::EBADF
    );
    assert_eq!(
        c.err(tmpfile(Fid(1), Fid(5), open_flags::RDONLY)),
        libc::EINVAL
    );
    assert_eq!(c.getattr(Fid(5)), Err(libc::EBADF));
    // One clunked without a name is gone; one made with O_EXCL is never linked.
    c.ok(tmpfile(ROOT, Fid(5), open_flags::WRONLY));
    assert_eq!(c.write(Fid(5), 0, b"gone"), Ok(4));
    c.clunk(Fid(5)).unwrap();
    c.ok(tmpfile(ROOT, Fid(6), open_flags::RDWR | open_flags::EXCL));
    assert_eq!(c.err(link(ROOT, Fid(6), "excl")), libc::ENOENT);
    assert_eq!(listed(""), ["d", "escape"]);
    assert_eq!(listed("d"), ["named"]);
    o.assert_untouched();

    let ro = Harness::with(|c| c.read_only = true);
    let mut c = extended(&ro);
    assert_eq!(c.err(tmpfile(ROOT, Fid(1), open_flags::RDWR)), libc::EROFS);
    assert_eq!(std::fs::read_dir(ro.root()).unwrap().count(), 0);
}

#[test]
fn createbehind_never_opens_a_taken_name_and_keeps_the_file_beside_it() {
    let h = Harness::new();
    std::fs::write(h.path("taken"), b"host").unwrap();
    std::fs::write(h.path("taken.crossfs-conflict-1"), b"host too").unwrap();
    let mut c = extended(&h);
    let create = |name: &str, nodefid: u32, openfid: u32, flags: u32| Tcreatebehind {
        create: Tcreateattr {
            dfid: ROOT,
            nodefid: Fid(nodefid),
            openfid: Fid(openfid),
            name: name.as_bytes().to_vec(),
            flags,
            mode: 0o640,
            gid: !0,
            request_mask: getattr::BASIC,
        },
    };
    let excl = open_flags::RDWR | open_flags::CREATE | open_flags::EXCL;
    // A free name: made as asked, both fids bound to it.
    let r = c.ok(create("free", 1, 2, excl));
    let Rmessage::Createbehind(made) = r else {
        panic!("{r:?}")
    };
    assert_eq!(made.name, b"free");
    assert_eq!(
        made.dir.mode & libc::S_IFMT,
        libc::S_IFDIR,
        "the directory after it"
    );
    assert_eq!(made.created.attr.mode, libc::S_IFREG | 0o640);
    assert_eq!(c.write(Fid(2), 0, b"guest").unwrap(), 5);
    assert_eq!(std::fs::read(h.path("free")).unwrap(), b"guest");
    // A taken name: the host's files stay as they are, the guest's is made beside them
    // under the first free conflict name, and the fids write there.
    let r = c.ok(create("taken", 3, 4, excl));
    let Rmessage::Createbehind(kept) = r else {
        panic!("{r:?}")
    };
    assert_eq!(kept.name, b"taken.crossfs-conflict-2");
    assert_eq!(c.write(Fid(4), 0, b"guest").unwrap(), 5);
    assert_eq!(std::fs::read(h.path("taken")).unwrap(), b"host");
    assert_eq!(
        std::fs::read(h.path("taken.crossfs-conflict-1")).unwrap(),
        b"host too"
    );
    assert_eq!(
        std::fs::read(h.path("taken.crossfs-conflict-2")).unwrap(),
        b"guest"
    );
    // Without O_EXCL it would open a host file: refused, binding nothing.
    assert_eq!(c.err(create("other", 5, 6, open_flags::RDWR)), libc::EINVAL);
    assert_eq!(c.getattr(Fid(5)), Err(libc::EBADF));
    assert!(!h.path("other").exists());
    // A conflict name too long for the host is refused, not cut.
    let long = "n".repeat(250);
    std::fs::write(h.path(&long), b"host").unwrap();
    assert_eq!(c.err(create(&long, 7, 8, excl)), libc::ENAMETOOLONG);
    assert_eq!(c.getattr(Fid(7)), Err(libc::EBADF));
}

#[test]
fn a_marked_createbehind_sent_again_finds_the_file_its_earlier_try_made() {
    use std::os::unix::fs::MetadataExt;
    let h = Harness::new();
    std::fs::write(h.path("taken"), b"host").unwrap();
    let excl = open_flags::RDWR | open_flags::CREATE | open_flags::EXCL;
    let create = |name: &str, atime_nsec: u64| Tcreatebehindmarked {
        atime_sec: 1_500_000_000,
        atime_nsec,
        create: Tcreateattr {
            dfid: ROOT,
            nodefid: Fid(1),
            openfid: Fid(2),
            name: name.as_bytes().to_vec(),
            flags: excl | open_flags::TRUNC,
            mode: 0o640,
            gid: !0,
            request_mask: getattr::BASIC,
        },
    };
    let made = |r: Rmessage| match r {
        Rmessage::Createbehindmarked(m) => m.made,
        r => panic!("{r:?}"),
    };
    let mut first = extended(&h);
    let Rmessage::Features(f) = first.ok(Tfeatures {}) else {
        panic!("no Rfeatures")
    };
    assert_ne!(f.features & features::MARKED_CREATE, 0);
    let m = made(first.ok(create("new", 123)));
    assert_eq!(m.name, b"new");
    assert_eq!(
        (m.created.attr.atime_sec, m.created.attr.atime_nsec),
        (1_500_000_000, 123)
    );
    let host = std::fs::metadata(h.path("new")).unwrap();
    assert_eq!((host.atime(), host.atime_nsec()), (1_500_000_000, 123));
    assert_eq!(
        (m.created.attr.ctime_sec, m.created.attr.ctime_nsec),
        (host.ctime() as u64, host.ctime_nsec() as u64),
        "answered as the host has it after the mark"
    );
    assert_eq!(first.write(Fid(2), 0, b"guest").unwrap(), 5);
    // The same create again, on another connection (the first one's answer lost): the
    // file the first try made, bound and open, not truncated, and nothing kept beside.
    let mut again = extended(&h);
    let m = made(again.ok(create("new", 123)));
    assert_eq!(m.name, b"new");
    assert_eq!(m.created.attr.size, 5);
    assert_eq!(again.write(Fid(2), 5, b"!").unwrap(), 1);
    assert_eq!(std::fs::read(h.path("new")).unwrap(), b"guest!");
    assert!(!h.path("new.crossfs-conflict-1").exists());
    // A file with another access time is not this create's: kept beside, as unmarked.
    let mut other = extended(&h);
    let m = made(other.ok(create("new", 124)));
    assert_eq!(m.name, b"new.crossfs-conflict-1");
    let m = made(extended(&h).ok(create("taken", 123)));
    assert_eq!(m.name, b"taken.crossfs-conflict-1");
    assert_eq!(std::fs::read(h.path("taken")).unwrap(), b"host");
    // Nor is anything but a regular file, whatever its access time.
    std::fs::create_dir(h.path("dir")).unwrap();
    let t = std::time::UNIX_EPOCH + std::time::Duration::new(1_500_000_000, 123);
    std::fs::File::open(h.path("dir"))
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_accessed(t))
        .unwrap();
    let m = made(extended(&h).ok(create("dir", 123)));
    assert_eq!(m.name, b"dir.crossfs-conflict-1");
    // A mark no time has is refused, making nothing.
    assert_eq!(extended(&h).err(create("bad", 1_000_000_000)), libc::EINVAL);
    assert!(!h.path("bad").exists());
}

#[test]
fn changes_sent_behind_go_onto_the_file_the_client_saw_and_beside_a_host_change() {
    let h = Harness::new();
    std::fs::write(h.path("f"), b"0123456789").unwrap();
    std::fs::create_dir(h.path("d")).unwrap();
    let mut c = extended(&h);
    let Rmessage::Features(f) = c.ok(Tfeatures {}) else {
        panic!("no Rfeatures")
    };
    assert_ne!(f.features & features::CONDITIONAL_BEHIND, 0);
    let r = c.ok(Twalkopen {
        fid: ROOT,
        newfid: Fid(1),
        wnames: names(&["f"]),
        flags: open_flags::RDWR,
        request_mask: getattr::BASIC,
    });
    let Rmessage::Walkopen(o) = r else {
        panic!("{r:?}")
    };
    let write = |base: BehindBase, offset: u64, data: &[u8]| Twritebehind {
        base,
        fid: Fid(1),
        offset,
        data: Data(data.to_vec()),
    };
    let chmod = |fid: u32, base: BehindBase, mode: u32| {
        let mut set = Tsetattr::unchanged(Fid(fid));
        set.valid = setattr::MODE;
        set.mode = mode;
        Tsetattrbehind {
            base,
            set,
            request_mask: getattr::BASIC,
        }
    };
    let after = BehindBase::after_previous();
    // As the client saw it: onto the file, and the next changes based on that one too.
    let Rmessage::Writebehind(w) = c.ok(write(BehindBase::seen(&o.attr), 0, b"AB")) else {
        panic!("no Rwritebehind")
    };
    assert_eq!((w.count, w.kept_as.as_slice()), (2, &b""[..]));
    let Rmessage::Setattrbehind(s) = c.ok(chmod(1, after, 0o600)) else {
        panic!("no Rsetattrbehind")
    };
    assert!(s.kept_as.is_empty());
    assert_eq!(s.attr.mode, libc::S_IFREG | 0o600);
    // A plain change through the connection counts as its own too.
    assert_eq!(c.write(Fid(1), 9, b"Z").unwrap(), 1);
    let Rmessage::Writebehind(w) = c.ok(write(after, 2, b"C")) else {
        panic!("no Rwritebehind")
    };
    assert!(w.kept_as.is_empty());
    assert_eq!(std::fs::read(h.path("f")).unwrap(), b"ABC345678Z");

    // A host program changes the file: the next change based on the connection's last is
    // made on a copy beside it, and so are those after it; the host's bytes stay.
    std::fs::write(h.path("f"), b"host").unwrap();
    let Rmessage::Writebehind(w) = c.ok(write(after, 0, b"guest")) else {
        panic!("no Rwritebehind")
    };
    assert_eq!(w.kept_as, b"f.crossfs-conflict-1");
    assert_eq!(w.count, 5);
    assert_eq!(w.attr.size, 4, "the file as the host has it");
    let Rmessage::Setattrbehind(s) = c.ok(chmod(1, after, 0o640)) else {
        panic!("no Rsetattrbehind")
    };
    assert_eq!(s.kept_as, b"f.crossfs-conflict-1");
    assert_eq!(std::fs::read(h.path("f")).unwrap(), b"host");
    assert_eq!(
        std::fs::read(h.path("f.crossfs-conflict-1")).unwrap(),
        b"guest",
        "the host's file as it was found, with the client's changes"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p| std::fs::metadata(h.path(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode("f"), 0o600);
    assert_eq!(mode("f.crossfs-conflict-1"), 0o640);

    // Based on the file as the host has it again: onto the file.
    let now = c.getattr(Fid(1)).unwrap();
    let Rmessage::Writebehind(w) = c.ok(write(BehindBase::seen(&now), 4, b"!")) else {
        panic!("no Rwritebehind")
    };
    assert!(w.kept_as.is_empty());
    assert_eq!(std::fs::read(h.path("f")).unwrap(), b"host!");
    // A stale base of the client's own (the host chmodded the file since): a second copy,
    // the first left as it was.
    std::fs::set_permissions(h.path("f"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let Rmessage::Setattrbehind(s) = c.ok(chmod(1, BehindBase::seen(&now), 0o444)) else {
        panic!("no Rsetattrbehind")
    };
    assert_eq!(s.kept_as, b"f.crossfs-conflict-2");
    assert_eq!(mode("f"), 0o644);
    assert_eq!(mode("f.crossfs-conflict-2"), 0o444);
    assert_eq!(
        std::fs::read(h.path("f.crossfs-conflict-2")).unwrap(),
        b"host!"
    );
    assert_eq!(
        std::fs::read(h.path("f.crossfs-conflict-1")).unwrap(),
        b"guest"
    );

    // A directory cannot be kept beside itself: left as the host has it, ESTALE.
    c.walk(ROOT, Fid(2), &["d"]).unwrap();
    let d = c.getattr(Fid(2)).unwrap();
    std::fs::set_permissions(h.path("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(c.err(chmod(2, BehindBase::seen(&d), 0o755)), libc::ESTALE);
    assert_eq!(mode("d"), 0o700);
    let entries = std::fs::read_dir(h.path("")).unwrap().count();
    assert_eq!(entries, 4, "f, d and the two copies");
}

#[test]
fn unlinkbehind_removes_only_the_file_the_client_saw_and_binds_it_first() {
    use std::os::unix::fs::MetadataExt;
    let o = Outside::new();
    let h = &o.h;
    std::fs::create_dir(h.path("d")).unwrap();
    for name in ["seen", "open", "changed", "replaced"] {
        std::fs::write(h.path(&format!("d/{name}")), name).unwrap();
    }
    std::os::unix::fs::symlink(&o.dir, h.path("d/escape")).unwrap();
    let mut c = extended(h);
    let Rmessage::Features(f) = c.ok(Tfeatures {}) else {
        panic!("no Rfeatures")
    };
    assert_ne!(f.features & features::UNLINK_BEHIND, 0, "offered");
    c.walk(ROOT, Fid(1), &["d"]).unwrap();
    let seen = |name: &str| seen_as(&h.path(&format!("d/{name}")));
    let unlink = |(base, path): (BehindBase, u64), name: &str, newfid: Fid| Tunlinkbehind {
        base,
        path,
        dirfd: Fid(1),
        name: name.as_bytes().to_vec(),
        newfid,
        request_mask: getattr::ALL,
    };
    // As the client saw it: removed, the directory as the removal left it.
    let r = c.ok(unlink(seen("seen"), "seen", NOFID));
    let Rmessage::Unlinkbehind(u) = r else {
        panic!("{r:?}")
    };
    assert!(!h.path("d/seen").exists());
    assert_eq!(u.attr.valid, 0, "no newfid, no attributes");
    let dir = std::fs::metadata(h.path("d")).unwrap();
    assert_eq!(
        (u.dir.mtime_sec, u.dir.mtime_nsec),
        (dir.mtime() as u64, dir.mtime_nsec() as u64)
    );
    // With a newfid: bound to the file before it goes, and it reads on.
    let r = c.ok(unlink(seen("open"), "open", Fid(2)));
    let Rmessage::Unlinkbehind(u) = r else {
        panic!("{r:?}")
    };
    assert!(!h.path("d/open").exists());
    assert_eq!(u.attr.nlink, 0);
    c.lopen(Fid(2), open_flags::RDONLY).unwrap();
    assert_eq!(c.read(Fid(2), 0, 100).unwrap(), b"open");

    // Changed or replaced by a host program since: nothing removed, nothing bound.
    let before = seen("changed");
    std::fs::write(h.path("d/changed"), b"the host's").unwrap();
    assert_eq!(c.err(unlink(before, "changed", Fid(3))), libc::ESTALE);
    assert_eq!(c.getattr(Fid(3)), Err(libc::EBADF));
    let before = seen("replaced");
    std::fs::rename(h.path("d/changed"), h.path("d/replaced")).unwrap();
    assert_eq!(c.err(unlink(before, "replaced", Fid(3))), libc::ESTALE);
    assert_eq!(std::fs::read(h.path("d/replaced")).unwrap(), b"the host's");
    // Not a directory, nor anything outside the export.
    std::fs::create_dir(h.path("d/sub")).unwrap();
    assert_eq!(c.err(unlink(seen("sub"), "sub", NOFID)), libc::ESTALE);
    assert!(h.path("d/sub").is_dir());
    let (base, _) = seen("escape");
    for bad in ["..", ".", "a/b", "", "escape/x"] {
        assert_ne!(c.err(unlink((base, 0), bad, NOFID)), 0, "{bad:?}");
    }
    assert!(o.dir.exists(), "the outside is left alone");
    // Read-only holds.
    let ro = Harness::with(|c| c.read_only = true);
    std::fs::write(ro.path("f"), b"f").unwrap();
    let mut c = extended(&ro);
    let (base, path) = seen_as(&ro.path("f"));
    let r = c.err(Tunlinkbehind {
        base,
        path,
        dirfd: ROOT,
        name: b"f".to_vec(),
        newfid: NOFID,
        request_mask: getattr::ALL,
    });
    assert_eq!(r, libc::EROFS);
    assert!(ro.path("f").exists());
}

#[test]
fn renamebehind_moves_only_the_file_the_client_saw_and_never_over_another() {
    use std::os::unix::fs::MetadataExt;
    let o = Outside::new();
    let h = &o.h;
    std::fs::create_dir(h.path("d")).unwrap();
    for name in ["seen", "to-taken", "taken", "replaced"] {
        std::fs::write(h.path(&format!("d/{name}")), name).unwrap();
    }
    std::os::unix::fs::symlink(&o.dir, h.path("d/escape")).unwrap();
    let mut c = extended(h);
    let Rmessage::Features(f) = c.ok(Tfeatures {}) else {
        panic!("no Rfeatures")
    };
    assert_ne!(f.features & features::RENAME_BEHIND, 0, "offered");
    c.walk(ROOT, Fid(1), &["d"]).unwrap();
    let path_of = |name: &str| seen_as(&h.path(&format!("d/{name}"))).1;
    let rename = |path: u64, from: &str, to: &str| Trenamebehind {
        path,
        dirfd: Fid(1),
        oldname: from.as_bytes().to_vec(),
        newname: to.as_bytes().to_vec(),
        request_mask: getattr::ALL,
    };
    // The file the client saw: renamed, the directory as the rename left it.
    let seen = path_of("seen");
    let r = c.ok(rename(seen, "seen", "moved"));
    let Rmessage::Renamebehind(r) = r else {
        panic!("{r:?}")
    };
    assert_eq!(std::fs::read(h.path("d/moved")).unwrap(), b"seen");
    assert!(!h.path("d/seen").exists());
    let dir = std::fs::metadata(h.path("d")).unwrap();
    assert_eq!(
        (r.dir.mtime_sec, r.dir.mtime_nsec),
        (dir.mtime() as u64, dir.mtime_nsec() as u64)
    );
    // Sent again after a lost connection: made already, done, nothing moves.
    assert!(matches!(
        c.ok(rename(seen, "seen", "moved")),
        Rmessage::Renamebehind(_)
    ));
    assert_eq!(std::fs::read(h.path("d/moved")).unwrap(), b"seen");
    // Never over another file: the host's stays, and so does the one to move.
    assert_eq!(
        c.err(rename(path_of("to-taken"), "to-taken", "taken")),
        libc::EEXIST
    );
    assert_eq!(std::fs::read(h.path("d/taken")).unwrap(), b"taken");
    assert_eq!(std::fs::read(h.path("d/to-taken")).unwrap(), b"to-taken");
    // Another file under the old name (a host program replaced it): nothing moves.
    let before = path_of("replaced");
    std::fs::write(h.path("d/the-hosts"), b"the host's").unwrap();
    std::fs::rename(h.path("d/the-hosts"), h.path("d/replaced")).unwrap();
    assert_eq!(c.err(rename(before, "replaced", "elsewhere")), libc::ESTALE);
    assert_eq!(std::fs::read(h.path("d/replaced")).unwrap(), b"the host's");
    assert!(!h.path("d/elsewhere").exists());
    // Not a directory, nor anything outside the export.
    std::fs::create_dir(h.path("d/sub")).unwrap();
    assert_eq!(c.err(rename(path_of("sub"), "sub", "sub2")), libc::ESTALE);
    assert!(h.path("d/sub").is_dir());
    let escape = path_of("escape");
    for (from, to) in [
        ("..", "x"),
        ("escape", "../x"),
        ("escape/x", "y"),
        ("escape", ""),
    ] {
        assert_ne!(c.err(rename(escape, from, to)), 0, "{from:?} -> {to:?}");
    }
    assert!(o.dir.exists(), "the outside is left alone");
    assert!(h.path("d/escape").is_symlink());
    // Read-only holds.
    let ro = Harness::with(|c| c.read_only = true);
    std::fs::write(ro.path("f"), b"f").unwrap();
    let mut c = extended(&ro);
    let r = c.err(Trenamebehind {
        path: seen_as(&ro.path("f")).1,
        dirfd: ROOT,
        oldname: b"f".to_vec(),
        newname: b"g".to_vec(),
        request_mask: getattr::ALL,
    });
    assert_eq!(r, libc::EROFS);
    assert!(ro.path("f").exists());
}

/// The file at `path` as a client that saw it would name it in a change sent behind: its
/// base and its `qid.path`.
#[test]
fn rmdirbehind_removes_only_the_empty_directory_the_client_saw() {
    use std::os::unix::fs::MetadataExt;
    let o = Outside::new();
    let h = &o.h;
    for name in ["d", "d/empty", "d/open", "d/filled", "d/replaced"] {
        std::fs::create_dir(h.path(name)).unwrap();
    }
    std::fs::write(h.path("d/file"), b"f").unwrap();
    let mut c = extended(h);
    let Rmessage::Features(f) = c.ok(Tfeatures {}) else {
        panic!("no Rfeatures")
    };
    assert_ne!(f.features & features::RMDIR_BEHIND, 0, "offered");
    c.walk(ROOT, Fid(1), &["d"]).unwrap();
    let path = |name: &str| seen_as(&h.path(&format!("d/{name}"))).1;
    let rmdir = |path: u64, name: &str, newfid: Fid| Trmdirbehind {
        path,
        dirfd: Fid(1),
        name: name.as_bytes().to_vec(),
        newfid,
        request_mask: getattr::ALL,
    };
    let nlink = |p: &str| std::fs::metadata(h.path(p)).unwrap().nlink();
    let before = nlink("d");
    // As the client saw it, empty: removed; the parent lost the link `..` gave it.
    let r = c.ok(rmdir(path("empty"), "empty", NOFID));
    let Rmessage::Rmdirbehind(r) = r else {
        panic!("{r:?}")
    };
    assert!(!h.path("d/empty").exists());
    assert_eq!(r.attr.valid, 0, "no newfid, no attributes");
    assert_eq!(r.dir.nlink, before - 1);
    assert_eq!(nlink("d"), before - 1);
    // With a newfid: bound to it before it goes.
    let r = c.ok(rmdir(path("open"), "open", Fid(2)));
    let Rmessage::Rmdirbehind(r) = r else {
        panic!("{r:?}")
    };
    assert!(!h.path("d/open").exists());
    assert_eq!(r.attr.nlink, 0);
    assert_eq!(c.getattr(Fid(2)).map(|a| a.nlink), Ok(0));

    // Filled by a host program since: it stays, with what the host put in, and the newfid
    // is not left bound.
    let filled = path("filled");
    std::fs::write(h.path("d/filled/host"), b"the host's").unwrap();
    assert_eq!(c.err(rmdir(filled, "filled", Fid(3))), libc::ENOTEMPTY);
    assert_eq!(c.getattr(Fid(3)), Err(libc::EBADF));
    assert_eq!(
        std::fs::read(h.path("d/filled/host")).unwrap(),
        b"the host's"
    );
    // Replaced by another directory: ESTALE, and the new one stays.
    let replaced = path("replaced");
    std::fs::remove_dir(h.path("d/replaced")).unwrap();
    std::fs::create_dir(h.path("d/other")).unwrap();
    std::fs::create_dir(h.path("d/replaced")).unwrap();
    assert_ne!(path("replaced"), replaced, "a new inode");
    assert_eq!(c.err(rmdir(replaced, "replaced", NOFID)), libc::ESTALE);
    assert!(h.path("d/replaced").is_dir());
    // Not a file, nor anything outside the export.
    assert_eq!(c.err(rmdir(path("file"), "file", NOFID)), libc::ESTALE);
    assert!(h.path("d/file").exists());
    for bad in ["..", ".", "a/b", "", "file/x"] {
        assert_ne!(c.err(rmdir(0, bad, NOFID)), 0, "{bad:?}");
    }
    assert!(o.dir.exists(), "the outside is left alone");
    // Read-only holds.
    let ro = Harness::with(|c| c.read_only = true);
    std::fs::create_dir(ro.path("e")).unwrap();
    let mut c = extended(&ro);
    let r = c.err(Trmdirbehind {
        path: seen_as(&ro.path("e")).1,
        dirfd: ROOT,
        name: b"e".to_vec(),
        newfid: NOFID,
        request_mask: getattr::ALL,
    });
    assert_eq!(r, libc::EROFS);
    assert!(ro.path("e").is_dir());
}

fn seen_as(path: &std::path::Path) -> (BehindBase, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).unwrap();
    let a = Rgetattr {
        mtime_sec: m.mtime() as u64,
        mtime_nsec: m.mtime_nsec() as u64,
        size: m.size(),
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        ..Rgetattr::default()
    };
    (BehindBase::seen(&a), m.ino())
}

#[test]
fn mkdirbehind_makes_the_directory_marked_beside_a_taken_name_and_finds_its_own_earlier_try() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let o = Outside::new();
    let h = &o.h;
    std::fs::create_dir(h.path("d")).unwrap();
    std::fs::write(h.path("d/taken"), b"the host's").unwrap();
    std::fs::create_dir(h.path("d/hostdir")).unwrap();
    let mut c = extended(h);
    let Rmessage::Features(f) = c.ok(Tfeatures {}) else {
        panic!("no Rfeatures")
    };
    assert_ne!(f.features & features::MKDIR_BEHIND, 0, "offered");
    c.walk(ROOT, Fid(1), &["d"]).unwrap();
    let mkdir = |name: &str, newfid: Fid, atime_nsec: u64| Tmkdirbehind {
        atime_sec: 1_000_000,
        atime_nsec,
        mkdir: Tmkdirattr {
            dfid: Fid(1),
            newfid,
            name: name.as_bytes().to_vec(),
            mode: 0o750,
            gid: 0,
            request_mask: getattr::ALL,
        },
    };
    let made = |r: Rmessage| match r {
        Rmessage::Mkdirbehind(m) => m,
        other => panic!("{other:?}"),
    };
    let nlink = |p: &str| std::fs::metadata(h.path(p)).unwrap().nlink();
    let before = nlink("d");
    // A free name: made there, marked with the access time asked for, bound to newfid.
    let r = made(c.ok(mkdir("new", Fid(2), 7)));
    assert_eq!(r.name, b"new");
    let m = std::fs::metadata(h.path("d/new")).unwrap();
    assert!(m.is_dir());
    assert_eq!((m.atime(), m.atime_nsec()), (1_000_000, 7));
    assert_eq!(m.mode() & 0o7777, 0o750);
    assert_eq!((r.attr.qid.path, r.attr.atime_nsec), (m.ino(), 7));
    assert_eq!((r.dir.nlink, nlink("d")), (before + 1, before + 1));
    // What the client sends into it next, through newfid, lands in it.
    c.walk(Fid(2), Fid(3), &[]).unwrap();
    c.ok(Tlcreate {
        fid: Fid(3),
        name: b"f".to_vec(),
        flags: 0o1 | 0o100,
        mode: 0o644,
        gid: 0,
    });
    assert!(h.path("d/new/f").is_file());

    // Sent again after a lost connection: the earlier try's directory, bound and
    // answered as made, with what was made in it.
    let mut again = extended(h);
    again.walk(ROOT, Fid(1), &["d"]).unwrap();
    let r = made(again.ok(mkdir("new", Fid(2), 7)));
    assert_eq!((r.name.as_slice(), r.attr.qid.path), (&b"new"[..], m.ino()));
    assert_eq!(again.getattr(Fid(2)).map(|a| a.qid.path), Ok(m.ino()));
    assert!(h.path("d/new/f").is_file());
    assert!(!h.path("d/new.crossfs-conflict-1").exists());
    // An earlier try cut short before its mark (a server killed just after making it)
    // left a directory of mode 0: taken as this mkdir's own, marked and given its mode.
    std::fs::create_dir(h.path("d/cut")).unwrap();
    std::fs::set_permissions(h.path("d/cut"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let r = made(again.ok(mkdir("cut", Fid(3), 8)));
    assert_eq!(r.name, b"cut");
    let m = std::fs::metadata(h.path("d/cut")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.atime_nsec()), (0o750, 8));
    assert_eq!(r.attr.mode & 0o7777, 0o750);

    // A name a host program took first, by a file or by a directory with another access
    // time: never used; the guest's directory is made beside it, and newfid binds that.
    for (taken, fid) in [("taken", Fid(4)), ("hostdir", Fid(5))] {
        let r = made(c.ok(mkdir(taken, fid, 9)));
        let beside = format!("{taken}.crossfs-conflict-1");
        assert_eq!(r.name, beside.as_bytes());
        let m = std::fs::metadata(h.path(&format!("d/{beside}"))).unwrap();
        assert!(m.is_dir());
        assert_eq!(c.getattr(fid).map(|a| a.qid.path), Ok(m.ino()));
    }
    assert_eq!(std::fs::read(h.path("d/taken")).unwrap(), b"the host's");
    assert_eq!(std::fs::read_dir(h.path("d/hostdir")).unwrap().count(), 0);
    // A second conflict takes the next name.
    let r = made(c.ok(mkdir("taken", Fid(6), 11)));
    assert_eq!(r.name, b"taken.crossfs-conflict-2");

    // A newfid in use, a bad time, names that leave the directory: refused, nothing made.
    assert_eq!(c.err(mkdir("x", Fid(2), 1)), libc::EBADF);
    assert_eq!(c.err(mkdir("y", Fid(7), 1_000_000_000)), libc::EINVAL);
    for bad in ["..", ".", "a/b", ""] {
        assert_ne!(c.err(mkdir(bad, Fid(8), 1)), 0, "{bad:?}");
    }
    assert!(!h.path("d/x").exists() && !h.path("d/y").exists());
    assert!(o.dir.exists(), "the outside is left alone");
    // Read-only holds.
    let ro = Harness::with(|c| c.read_only = true);
    let mut c = extended(&ro);
    let r = c.err(Tmkdirbehind {
        mkdir: Tmkdirattr {
            dfid: ROOT,
            ..mkdir("e", Fid(2), 1).mkdir
        },
        ..mkdir("e", Fid(2), 1)
    });
    assert_eq!(r, libc::EROFS);
    assert!(!ro.path("e").exists());
}
