//! A read-only export refuses every mutation with EROFS and serves everything else.

mod common;

use common::{errno::*, Harness, ROOT};
use crossfs_wire::*;

#[test]
fn read_only_refuses_every_mutation() {
    let h = Harness::with(|c| c.read_only = true);
    std::fs::write(h.path("f"), b"data").unwrap();
    std::fs::create_dir(h.path("d")).unwrap();
    let mut c = h.connect();
    c.walk_path(Fid(1), "f").unwrap();
    c.walk_path(Fid(2), "d").unwrap();
    c.walk(ROOT, Fid(3), &[]).unwrap();
    let n = |s: &str| s.as_bytes().to_vec();
    let setattr = |valid| Tsetattr {
        mode: 0o600,
        valid,
        ..Tsetattr::unchanged(Fid(1))
    };
    let refused: Vec<Tmessage> = vec![
        Tlcreate {
            fid: Fid(3),
            name: n("new"),
            flags: open_flags::RDWR,
            mode: 0o644,
            gid: 0,
        }
        .into(),
        Tmkdir {
            dfid: ROOT,
            name: n("new"),
            mode: 0o755,
            gid: 0,
        }
        .into(),
        Tsymlink {
            fid: ROOT,
            name: n("new"),
            symtgt: n("f"),
            gid: 0,
        }
        .into(),
        Tmknod {
            dfid: ROOT,
            name: n("new"),
            mode: libc::S_IFIFO | 0o644,
            major: 0,
            minor: 0,
            gid: 0,
        }
        .into(),
        Tlink {
            dfid: ROOT,
            fid: Fid(1),
            name: n("new"),
        }
        .into(),
        Trename {
            fid: Fid(1),
            dfid: ROOT,
            name: n("new"),
        }
        .into(),
        Trenameat {
            olddirfid: ROOT,
            oldname: n("f"),
            newdirfid: ROOT,
            newname: n("new"),
        }
        .into(),
        Tunlinkat {
            dirfd: ROOT,
            name: n("f"),
            flags: 0,
        }
        .into(),
        Tunlinkat {
            dirfd: ROOT,
            name: n("d"),
            flags: AT_REMOVEDIR,
        }
        .into(),
        setattr(setattr::MODE).into(),
        setattr(setattr::SIZE).into(),
        setattr(setattr::UID).into(),
        setattr(setattr::MTIME).into(),
        Txattrcreate {
            fid: Fid(1),
            name: n("user.x"),
            attr_size: 1,
            flags: 0,
        }
        .into(),
        Tlopen {
            fid: Fid(1),
            flags: open_flags::WRONLY,
        }
        .into(),
        Tlopen {
            fid: Fid(1),
            flags: open_flags::RDWR,
        }
        .into(),
        Tlopen {
            fid: Fid(1),
            flags: open_flags::RDONLY | open_flags::TRUNC,
        }
        .into(),
    ];
    for m in refused {
        let name = m.name();
        assert_eq!(c.err(m), EROFS, "{name}");
    }
    // Tremove: refused, and the fid is clunked all the same.
    c.walk_path(Fid(4), "f").unwrap();
    assert_eq!(c.err(Tremove { fid: Fid(4) }), EROFS);
    assert_eq!(c.clunk(Fid(4)).unwrap_err(), EBADF);
    // Twrite on a read-only open fid.
    c.lopen(Fid(1), open_flags::RDONLY).unwrap();
    assert_eq!(c.write(Fid(1), 0, b"x").unwrap_err(), EROFS);
    // Reads work.
    assert_eq!(c.read(Fid(1), 0, 100).unwrap(), b"data");
    assert!(c.getattr(Fid(2)).is_ok());
    c.open(Fid(5), "", open_flags::RDONLY | open_flags::DIRECTORY);
    assert_eq!(c.readdir_all(Fid(5), 4096).len(), 4);
    // Nothing changed.
    assert_eq!(std::fs::read(h.path("f")).unwrap(), b"data");
    let mut names: Vec<_> = std::fs::read_dir(h.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["d", "f"]);
    c.close();
}
