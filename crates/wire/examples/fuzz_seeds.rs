//! Writes seed inputs for the cargo-fuzz targets in `fuzz/`, so that a short run (CI gives
//! each target a minute) starts from sessions a server accepts instead of spending its time
//! rediscovering Tversion and Tattach.
//!
//! ```sh
//! cargo run --release -p crossfs-wire --example fuzz_seeds -- OUT
//! ```
//! makes `OUT/serve_stream/` (each file one connection's whole input: version, attach, then
//! a short session against the target's export, which holds `d/`, `d/f` and a symlink `l`)
//! and `OUT/decode_frame/` (each request of those sessions alone, and a few replies).

use std::path::PathBuf;

use crossfs_wire::*;

/// Fids the sessions use.
const ROOT: Fid = Fid(0);
const A: Fid = Fid(1);
const B: Fid = Fid(2);
const X: Fid = Fid(3);

fn names(path: &[&str]) -> Vec<Vec<u8>> {
    path.iter().map(|n| n.as_bytes().to_vec()).collect()
}

fn walk(fid: Fid, newfid: Fid, path: &[&str]) -> Tmessage {
    Twalk {
        fid,
        newfid,
        wnames: names(path),
    }
    .into()
}

/// Tversion and Tattach, which every session starts with.
fn hello() -> Vec<Tmessage> {
    vec![
        Tversion {
            msize: 65536,
            version: VERSION_9P2000_L.to_vec(),
        }
        .into(),
        Tattach {
            fid: ROOT,
            afid: NOFID,
            uname: b"fuzz".to_vec(),
            aname: vec![],
            n_uname: 0,
        }
        .into(),
    ]
}

fn sessions() -> Vec<(&'static str, Vec<Tmessage>)> {
    let read = vec![
        walk(ROOT, A, &["d", "f"]),
        Tlopen {
            fid: A,
            flags: open_flags::RDONLY,
        }
        .into(),
        Tread {
            fid: A,
            offset: 0,
            count: 4096,
        }
        .into(),
        Tgetattr {
            fid: A,
            request_mask: getattr::ALL,
        }
        .into(),
        Tstatfs { fid: ROOT }.into(),
    ];
    // The file is made and opened by requests the reader runs in order; the workers' requests
    // (two workers in the target) may run in any order, and succeed in any.
    let write = vec![
        Tmknod {
            dfid: ROOT,
            name: b"new".to_vec(),
            mode: 0o100644,
            major: 0,
            minor: 0,
            gid: 0,
        }
        .into(),
        walk(ROOT, A, &["new"]),
        Tlopen {
            fid: A,
            flags: open_flags::RDWR,
        }
        .into(),
        Twrite {
            fid: A,
            offset: 0,
            data: Data(b"hello, fuzzer".to_vec()),
        }
        .into(),
        Tfsync {
            fid: A,
            datasync: 0,
        }
        .into(),
        Tsetattr {
            fid: A,
            valid: 0x1 | 0x8, // mode, size
            mode: 0o600,
            uid: 0,
            gid: 0,
            size: 5,
            atime_sec: 0,
            atime_nsec: 0,
            mtime_sec: 0,
            mtime_nsec: 0,
        }
        .into(),
        Tread {
            fid: A,
            offset: 0,
            count: 100,
        }
        .into(),
        walk(ROOT, B, &["d"]),
        Tlcreate {
            fid: B,
            name: b"created".to_vec(),
            flags: open_flags::RDWR | open_flags::CREATE,
            mode: 0o644,
            gid: 0,
        }
        .into(),
    ];
    let dirs = vec![
        walk(ROOT, A, &[]),
        Tmkdir {
            dfid: ROOT,
            name: b"sub".to_vec(),
            mode: 0o755,
            gid: 0,
        }
        .into(),
        Tlopen {
            fid: A,
            flags: open_flags::RDONLY | open_flags::DIRECTORY,
        }
        .into(),
        Treaddir {
            fid: A,
            offset: 0,
            count: 4096,
        }
        .into(),
        Trenameat {
            olddirfid: ROOT,
            oldname: b"sub".to_vec(),
            newdirfid: ROOT,
            newname: b"sub2".to_vec(),
        }
        .into(),
        Tunlinkat {
            dirfd: ROOT,
            name: b"sub2".to_vec(),
            flags: 0x200, // AT_REMOVEDIR
        }
        .into(),
    ];
    let links = vec![
        walk(ROOT, A, &["d"]),
        walk(A, B, &["f"]),
        Tsymlink {
            fid: A,
            name: b"sl".to_vec(),
            symtgt: b"f".to_vec(),
            gid: 0,
        }
        .into(),
        Tlink {
            dfid: A,
            fid: B,
            name: b"hard".to_vec(),
        }
        .into(),
        walk(ROOT, X, &["l"]),
        Treadlink { fid: X }.into(),
        Tmknod {
            dfid: A,
            name: b"node".to_vec(),
            mode: 0o100644,
            major: 0,
            minor: 0,
            gid: 0,
        }
        .into(),
        Trename {
            fid: B,
            dfid: ROOT,
            name: b"moved".to_vec(),
        }
        .into(),
        Tremove { fid: B }.into(),
    ];
    // An unnamed file, written and then named (Ttmpfile and Twrite run on workers, so the
    // write may find the fid unbound in some runs: a seed, not a test).
    let tmpfile = vec![
        walk(ROOT, A, &["d"]),
        Ttmpfile {
            dfid: A,
            newfid: B,
            flags: open_flags::RDWR,
            mode: 0o644,
            gid: 0,
            request_mask: getattr::BASIC,
        }
        .into(),
        Twrite {
            fid: B,
            offset: 0,
            data: Data(b"unnamed".to_vec()),
        }
        .into(),
        Tlink {
            dfid: A,
            fid: B,
            name: b"named".to_vec(),
        }
        .into(),
        Tclunk { fid: B }.into(),
    ];
    // Requests run by workers (Twrite) and by the reader (the rest) may pass each other:
    // the value written through a worker comes last.
    let xattrs = vec![
        walk(ROOT, A, &["d", "f"]),
        Txattrcreate {
            fid: A,
            name: b"user.empty".to_vec(),
            attr_size: 0,
            flags: 0,
        }
        .into(),
        Tclunk { fid: A }.into(),
        walk(ROOT, A, &["d", "f"]),
        Txattrwalk {
            fid: A,
            newfid: B,
            name: b"user.empty".to_vec(),
        }
        .into(),
        Txattrwalk {
            fid: A,
            newfid: X,
            name: vec![],
        }
        .into(),
        Tread {
            fid: X,
            offset: 0,
            count: 64,
        }
        .into(),
        Txattrcreate {
            fid: A,
            name: b"user.k".to_vec(),
            attr_size: 3,
            flags: 0,
        }
        .into(),
        Twrite {
            fid: A,
            offset: 0,
            data: Data(b"val".to_vec()),
        }
        .into(),
    ];
    let locks = vec![
        walk(ROOT, A, &["d", "f"]),
        Tlopen {
            fid: A,
            flags: open_flags::RDWR,
        }
        .into(),
        Tlock {
            fid: A,
            ty: lock::TYPE_WRLCK,
            flags: 0,
            start: 0,
            length: 10,
            proc_id: 1,
            client_id: b"c".to_vec(),
        }
        .into(),
        walk(ROOT, B, &["d", "f"]),
        Tlopen {
            fid: B,
            flags: open_flags::RDONLY,
        }
        .into(),
        Tgetlock {
            fid: B,
            ty: lock::TYPE_RDLCK,
            start: 0,
            length: 0,
            proc_id: 2,
            client_id: b"d".to_vec(),
        }
        .into(),
        Tflush { oldtag: Tag(3) }.into(),
    ];
    vec![
        ("read", read),
        ("write", write),
        ("dirs", dirs),
        ("links", links),
        ("tmpfile", tmpfile),
        ("xattrs", xattrs),
        ("locks", locks),
    ]
}

/// A few replies for the decoder.
fn replies() -> Vec<Rmessage> {
    let qid = Qid {
        ty: QID_TYPE_FILE,
        version: 0,
        path: 42,
    };
    vec![
        Rmessage::error(2),
        Rmessage::Version(Rversion {
            msize: 65536,
            version: VERSION_9P2000_L.to_vec(),
        }),
        Rmessage::Walk(Rwalk {
            wqids: vec![qid, qid],
        }),
        Rmessage::Read(Rread {
            data: Data(b"content".to_vec()),
        }),
        Rmessage::Lopen(Rlopen { qid, iounit: 0 }),
    ]
}

fn main() -> std::io::Result<()> {
    let out = PathBuf::from(std::env::args_os().nth(1).expect("usage: fuzz_seeds OUT"));
    let (streams, frames) = (out.join("serve_stream"), out.join("decode_frame"));
    std::fs::create_dir_all(&streams)?;
    std::fs::create_dir_all(&frames)?;
    for (name, body) in sessions() {
        let mut stream = Vec::new();
        for (i, msg) in hello().iter().chain(&body).enumerate() {
            let tag = if i == 0 { NOTAG } else { Tag(i as u16) };
            let mut frame = Vec::new();
            msg.encode(tag, &mut frame);
            std::fs::write(frames.join(format!("{name}-{i}")), &frame)?;
            stream.extend_from_slice(&frame);
        }
        std::fs::write(streams.join(name), stream)?;
    }
    for (i, msg) in replies().iter().enumerate() {
        let mut frame = Vec::new();
        msg.encode(Tag(1), &mut frame);
        std::fs::write(frames.join(format!("reply-{i}")), frame)?;
    }
    Ok(())
}
