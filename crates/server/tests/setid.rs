//! Set-user-ID and set-group-ID bits from clients: stripped by default, kept with
//! `allow_setuid`, and cleared by a chown whatever the setting.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::{Client, Harness, ROOT};
use crossfs_wire::*;

fn perm(h: &Harness, rel: &str) -> u32 {
    std::fs::symlink_metadata(h.path(rel)).unwrap().mode() & 0o7777
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A client attached as numeric user `n_uname` (a root server gives new files to it).
fn connect_as(h: &Harness, n_uname: u32) -> Client {
    let mut c = h.connect_raw();
    c.version(1 << 20, b"9P2000.L");
    c.ok(Tattach {
        fid: ROOT,
        afid: NOFID,
        uname: b"tester".to_vec(),
        aname: vec![],
        n_uname,
    });
    c
}

/// Creates `f` (Tlcreate), `d` (Tmkdir) and `n` (Tmknod of a regular file) with set-id bits
/// in their modes, and sets them on the existing file `e` (Tsetattr).
fn ask_for_setid_bits(c: &mut Client) {
    c.walk(ROOT, Fid(1), &[]).unwrap();
    c.ok(Tlcreate {
        fid: Fid(1),
        name: b"f".to_vec(),
        flags: open_flags::RDWR,
        mode: 0o6755,
        gid: !0,
    });
    c.ok(Tmkdir {
        dfid: ROOT,
        name: b"d".to_vec(),
        mode: 0o6755,
        gid: !0,
    });
    c.ok(Tmknod {
        dfid: ROOT,
        name: b"n".to_vec(),
        mode: libc::S_IFREG | 0o4755,
        major: 0,
        minor: 0,
        gid: !0,
    });
    c.walk_path(Fid(2), "e").unwrap();
    c.ok(Tsetattr {
        mode: 0o6755,
        valid: setattr::MODE,
        ..Tsetattr::unchanged(Fid(2))
    });
}

#[test]
fn set_id_bits_from_clients_are_stripped_by_default() {
    let h = Harness::new();
    std::fs::write(h.path("e"), b"").unwrap();
    // As root, the server gives new files to the attaching user: that must not make them
    // setuid programs of that user either.
    let mut c = connect_as(&h, if is_root() { 1000 } else { !0 });
    ask_for_setid_bits(&mut c);
    for name in ["f", "d", "n", "e"] {
        assert_eq!(perm(&h, name), 0o755, "{name}");
    }
    if is_root() {
        assert_eq!(std::fs::metadata(h.path("f")).unwrap().uid(), 1000);
    }
    c.close();
}

#[test]
fn allow_setuid_keeps_them() {
    let h = Harness::with(|c| c.allow_setuid = true);
    std::fs::write(h.path("e"), b"").unwrap();
    // With a root server the new files are chowned to uid 1000 first, which would clear the
    // bits if it came after the chmod.
    let mut c = connect_as(&h, if is_root() { 1000 } else { !0 });
    ask_for_setid_bits(&mut c);
    // Setgid needs membership of the file's group (or privilege); setuid only ownership.
    let expect = if is_root() { 0o6755 } else { 0o4755 };
    assert_eq!(perm(&h, "f") & 0o4000, 0o4000);
    assert_eq!(perm(&h, "n"), 0o4755);
    if is_root() {
        assert_eq!(perm(&h, "f"), expect);
        assert_eq!(perm(&h, "e"), expect);
        assert_eq!(std::fs::metadata(h.path("f")).unwrap().uid(), 1000);
    }
    // mkdir(2) ignores set-id bits in its mode; so does Tmkdir.
    assert_eq!(perm(&h, "d"), 0o755);
    c.close();
}

#[test]
fn a_chown_clears_set_id_bits_whatever_the_setting() {
    for allow in [false, true] {
        let h = Harness::with(|c| c.allow_setuid = allow);
        let me = rustix::process::geteuid().as_raw();
        let mut c = h.connect();
        for (i, name) in ["u", "g", "lock"].into_iter().enumerate() {
            std::fs::write(h.path(name), b"#!/bin/sh\n").unwrap();
            let mode = [0o4755, 0o2755, 0o2745][i];
            std::fs::set_permissions(h.path(name), std::fs::Permissions::from_mode(mode)).unwrap();
            let fid = Fid(10 + i as u32);
            c.walk_path(fid, name).unwrap();
            // A chown to the owner it already has still counts as one.
            c.ok(Tsetattr {
                valid: setattr::UID,
                uid: me,
                ..Tsetattr::unchanged(fid)
            });
        }
        assert_eq!(perm(&h, "u"), 0o755, "allow_setuid {allow}");
        assert_eq!(perm(&h, "g"), 0o755, "allow_setuid {allow}");
        // Setgid without group execute marks mandatory locking; the kernel keeps it.
        assert_eq!(perm(&h, "lock"), 0o2745, "allow_setuid {allow}");
        // A directory keeps its setgid bit through a chown, as locally.
        std::fs::create_dir(h.path("sg")).unwrap();
        std::fs::set_permissions(h.path("sg"), std::fs::Permissions::from_mode(0o2775)).unwrap();
        c.walk_path(Fid(20), "sg").unwrap();
        c.ok(Tsetattr {
            valid: setattr::UID,
            uid: me,
            ..Tsetattr::unchanged(Fid(20))
        });
        assert_eq!(perm(&h, "sg"), 0o2775);
        c.close();
    }
}

#[test]
fn writing_or_truncating_a_setuid_file_clears_the_bits_by_default() {
    let h = Harness::new();
    for name in ["w", "t", "r", "ct"] {
        std::fs::write(h.path(name), b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(h.path(name), std::fs::Permissions::from_mode(0o6755)).unwrap();
    }
    let mut c = h.connect();
    // Opened for reading: nothing changes.
    c.open(Fid(1), "r", open_flags::RDONLY);
    assert_eq!(perm(&h, "r"), 0o6755);
    // Opened for writing: cleared before the client can write a byte.
    c.open(Fid(2), "w", open_flags::WRONLY);
    assert_eq!(perm(&h, "w"), 0o755);
    // Truncated through Tsetattr.
    c.walk_path(Fid(3), "t").unwrap();
    c.ok(Tsetattr {
        valid: setattr::SIZE,
        size: 0,
        ..Tsetattr::unchanged(Fid(3))
    });
    assert_eq!(perm(&h, "t"), 0o755);
    // Opened through Tlcreate of an existing name.
    c.walk(ROOT, Fid(4), &[]).unwrap();
    c.ok(Tlcreate {
        fid: Fid(4),
        name: b"ct".to_vec(),
        flags: open_flags::WRONLY | open_flags::TRUNC,
        mode: 0o644,
        gid: !0,
    });
    assert_eq!(perm(&h, "ct"), 0o755);
    c.close();

    // With allow_setuid a root server's writes keep them, as a root process's do locally.
    if is_root() {
        let h = Harness::with(|c| c.allow_setuid = true);
        std::fs::write(h.path("w"), b"").unwrap();
        std::fs::set_permissions(h.path("w"), std::fs::Permissions::from_mode(0o4755)).unwrap();
        let mut c = h.connect();
        c.open(Fid(1), "w", open_flags::WRONLY);
        c.write(Fid(1), 0, b"x").unwrap();
        assert_eq!(perm(&h, "w"), 0o4755);
        c.close();
    }
}

#[test]
fn setattr_keeps_set_id_bits_a_file_has_but_adds_none() {
    let h = Harness::new();
    std::fs::create_dir(h.path("shared")).unwrap();
    std::fs::set_permissions(h.path("shared"), std::fs::Permissions::from_mode(0o2775)).unwrap();
    std::fs::create_dir(h.path("plain")).unwrap();
    let mut c = h.connect();
    // A directory made inside a setgid directory inherits the bit, as locally.
    c.walk_path(Fid(1), "shared").unwrap();
    c.ok(Tmkdir {
        dfid: Fid(1),
        name: b"sub".to_vec(),
        mode: 0o755,
        gid: !0,
    });
    assert_eq!(perm(&h, "shared/sub"), 0o2755);
    // chmod 2755 of a setgid directory keeps the bit; of a plain one, does not add it.
    for (fid, name) in [(Fid(2), "shared"), (Fid(3), "plain")] {
        c.walk_path(fid, name).unwrap();
        c.ok(Tsetattr {
            valid: setattr::MODE,
            mode: 0o2755,
            ..Tsetattr::unchanged(fid)
        });
    }
    assert_eq!(perm(&h, "shared"), 0o2755);
    assert_eq!(perm(&h, "plain"), 0o755);
    // And a client can always clear them.
    c.ok(Tsetattr {
        valid: setattr::MODE,
        mode: 0o755,
        ..Tsetattr::unchanged(Fid(2))
    });
    assert_eq!(perm(&h, "shared"), 0o755);
    c.close();
}
