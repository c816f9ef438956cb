//! The fuzz target `serve_stream` in a bounded, deterministic form for `cargo test`: byte
//! streams made of well-formed requests, frames with random bodies and plain garbage, each
//! served as one connection by a fresh server on a fresh export. The server must return,
//! never panic (not even in a handler, where the panic would be caught and answered EIO),
//! write only replies that decode and fit the msize, and create nothing outside the export.

use std::io::{Cursor, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crossfs_server::{Server, ServerConfig};
use crossfs_wire::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// Panics anywhere in the process (server threads included) since the hook was installed.
static PANICS: AtomicUsize = AtomicUsize::new(0);

const MSIZE: u32 = 8192;
const NAMES: [&[u8]; 9] = [b"d", b"f", b"l", b"up", b"n", b"..", b".", b"a/b", b""];

#[derive(Clone, Debug)]
enum Piece {
    /// A well-formed request.
    Msg(u16, Tmessage),
    /// A correctly sized frame with any type and body.
    Frame(u8, u16, Vec<u8>),
    /// Bytes with no framing at all.
    Garbage(Vec<u8>),
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop::sample::select(&NAMES[..]).prop_map(<[u8]>::to_vec)
}

fn fid() -> impl Strategy<Value = Fid> {
    (0u32..6).prop_map(Fid)
}

fn request() -> impl Strategy<Value = Tmessage> {
    prop_oneof![
        (fid(), fid(), prop::collection::vec(name(), 0..4)).prop_map(|(fid, newfid, wnames)| {
            Twalk {
                fid,
                newfid,
                wnames,
            }
            .into()
        }),
        (fid(), 0u32..0o4000000).prop_map(|(fid, flags)| Tlopen { fid, flags }.into()),
        (fid(), name(), 0u32..0o4000000, 0u32..0o10000).prop_map(|(fid, name, flags, mode)| {
            Tlcreate {
                fid,
                name,
                flags,
                mode,
                gid: !0,
            }
            .into()
        }),
        (fid(), any::<u64>(), 0u32..2 * MSIZE).prop_map(|(fid, offset, count)| Tread {
            fid,
            offset: offset % 100_000,
            count
        }
        .into()),
        (
            fid(),
            0u64..100_000,
            prop::collection::vec(any::<u8>(), 0..200)
        )
            .prop_map(|(fid, offset, data)| Twrite {
                fid,
                offset,
                data: Data(data)
            }
            .into()),
        fid().prop_map(|fid| Tclunk { fid }.into()),
        fid().prop_map(|fid| Tremove { fid }.into()),
        fid().prop_map(|fid| Tgetattr {
            fid,
            request_mask: getattr::ALL
        }
        .into()),
        (
            fid(),
            0u32..0x200,
            0u32..0o10000,
            0u64..100_000,
            prop::sample::select(vec![0, 1000, !0])
        )
            .prop_map(|(fid, valid, mode, size, id)| {
                Tsetattr {
                    valid,
                    mode,
                    size,
                    uid: id,
                    gid: id,
                    ..Tsetattr::unchanged(fid)
                }
                .into()
            }),
        (fid(), 0u64..1000, 0u32..2 * MSIZE).prop_map(|(fid, offset, count)| Treaddir {
            fid,
            offset,
            count
        }
        .into()),
        (fid(), name(), 0u32..0o10000).prop_map(|(dfid, name, mode)| Tmkdir {
            dfid,
            name,
            mode,
            gid: !0
        }
        .into()),
        (fid(), name(), name()).prop_map(|(fid, name, symtgt)| Tsymlink {
            fid,
            name,
            symtgt,
            gid: !0
        }
        .into()),
        // Regular files and sockets only: a fifo would block a worker until its other end
        // opens, a documented limit no single connection can get past.
        (
            fid(),
            name(),
            prop::sample::select(vec![0, libc::S_IFREG, libc::S_IFSOCK, libc::S_IFCHR])
        )
            .prop_map(|(dfid, name, ty)| {
                Tmknod {
                    dfid,
                    name,
                    mode: ty | 0o644,
                    major: 1,
                    minor: 3,
                    gid: !0,
                }
                .into()
            }),
        (fid(), fid(), name()).prop_map(|(dfid, fid, name)| Tlink { dfid, fid, name }.into()),
        (fid(), fid(), name()).prop_map(|(fid, dfid, name)| Trename { fid, dfid, name }.into()),
        (fid(), name(), fid(), name()).prop_map(|(olddirfid, oldname, newdirfid, newname)| {
            Trenameat {
                olddirfid,
                oldname,
                newdirfid,
                newname,
            }
            .into()
        }),
        (fid(), name(), 0u32..0x400).prop_map(|(dirfd, name, flags)| Tunlinkat {
            dirfd,
            name,
            flags
        }
        .into()),
        (
            fid(),
            fid(),
            prop::sample::select(vec![&b""[..], b"user.a", b"../x"])
        )
            .prop_map(|(fid, newfid, name)| Txattrwalk {
                fid,
                newfid,
                name: name.to_vec()
            }
            .into()),
        (fid(), 0u64..100_000, 0u32..4).prop_map(|(fid, attr_size, flags)| {
            Txattrcreate {
                fid,
                name: b"user.a".to_vec(),
                attr_size,
                flags,
            }
            .into()
        }),
        fid().prop_map(|fid| Treadlink { fid }.into()),
        fid().prop_map(|fid| Tstatfs { fid }.into()),
        (fid(), 0u32..2).prop_map(|(fid, datasync)| Tfsync { fid, datasync }.into()),
        (fid(), 0u8..3, 0u32..3, 0u64..100, 0u64..100).prop_map(
            |(fid, ty, flags, start, length)| {
                Tlock {
                    fid,
                    ty,
                    flags,
                    start,
                    length,
                    proc_id: 1,
                    client_id: b"c".to_vec(),
                }
                .into()
            }
        ),
        (0u16..40).prop_map(|oldtag| Tflush {
            oldtag: Tag(oldtag)
        }
        .into()),
        (fid(), fid()).prop_map(|(fid, afid)| {
            Tattach {
                fid,
                afid,
                uname: b"u".to_vec(),
                aname: vec![],
                n_uname: !0,
            }
            .into()
        }),
        (4096u32..20000).prop_map(|msize| Tversion {
            msize,
            version: b"9P2000.L".to_vec()
        }
        .into()),
    ]
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        12 => (0u16..40, request()).prop_map(|(tag, m)| Piece::Msg(tag, m)),
        2 => (any::<u8>(), 0u16..40, prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(ty, tag, body)| Piece::Frame(ty, tag, body)),
        1 => prop::collection::vec(any::<u8>(), 1..12).prop_map(Piece::Garbage),
    ]
}

/// The byte stream of a session: negotiate, attach fid 0, then the pieces.
fn stream(pieces: &[Piece]) -> Vec<u8> {
    let mut out = Vec::new();
    Tmessage::from(Tversion {
        msize: MSIZE,
        version: b"9P2000.L".to_vec(),
    })
    .encode(NOTAG, &mut out);
    Tmessage::from(Tattach {
        fid: Fid(0),
        afid: NOFID,
        uname: b"u".to_vec(),
        aname: vec![],
        n_uname: !0,
    })
    .encode(Tag(1), &mut out);
    for p in pieces {
        match p {
            Piece::Msg(tag, m) => {
                // Any tag, NOTAG or not, on Tversion too: the server must cope.
                m.encode(Tag(*tag), &mut out);
            }
            Piece::Frame(ty, tag, body) => {
                out.extend_from_slice(&((7 + body.len()) as u32).to_le_bytes());
                out.push(*ty);
                out.extend_from_slice(&tag.to_le_bytes());
                out.extend_from_slice(body);
            }
            Piece::Garbage(bytes) => out.extend_from_slice(bytes),
        }
    }
    out
}

/// Collects what the server writes.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn serve(pieces: &[Piece]) -> Result<(), TestCaseError> {
    let base = tempfile::tempdir().unwrap();
    let export = base.path().join("export");
    std::fs::create_dir_all(export.join("d")).unwrap();
    std::fs::write(export.join("d/f"), b"content").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", export.join("l")).unwrap();
    std::os::unix::fs::symlink("..", export.join("up")).unwrap();
    let server = Server::new(ServerConfig {
        export: export.clone(),
        workers_per_connection: 2,
        fd_budget: Some(512),
        ..Default::default()
    })
    .unwrap();
    let sink = Sink::default();
    let (done, finished) = mpsc::channel();
    let input = stream(pieces);
    {
        let sink = sink.clone();
        std::thread::spawn(move || {
            server.serve_connection(Cursor::new(input), sink, "proptest".into());
            let _ = done.send(());
        });
    }
    // Only a guard against a hang: nothing here depends on how fast the server is.
    prop_assert!(
        finished.recv_timeout(Duration::from_secs(60)).is_ok(),
        "the server did not return"
    );
    // Reset, so that cases tried while shrinking a failure are judged on their own.
    prop_assert_eq!(
        PANICS.swap(0, Ordering::SeqCst),
        0,
        "a server thread panicked"
    );
    let out = sink.0.lock().unwrap().clone();
    let mut at = 0;
    while at < out.len() {
        let size = u32::from_le_bytes(out[at..at + 4].try_into().unwrap()) as usize;
        prop_assert!((7..20000).contains(&size), "reply of {} bytes", size);
        let frame = &out[at..at + size];
        prop_assert!(
            decode_rframe(frame).is_ok(),
            "undecodable reply {:?}",
            frame
        );
        at += size;
    }
    let mut beside: Vec<_> = std::fs::read_dir(base.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    beside.sort();
    prop_assert_eq!(beside, vec![std::ffi::OsString::from("export")]);
    Ok(())
}

#[test]
fn random_request_streams_are_served_to_the_end() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let config = Config {
        cases: 300,
        rng_seed: RngSeed::Fixed(0x63_726f_7373_6673),
        failure_persistence: None,
        ..Config::default()
    };
    proptest!(config, |(pieces in prop::collection::vec(piece(), 0..40))| {
        serve(&pieces)?;
    });
}
