//! Malformed and abusive input against the real `crossfs serve` binary, over a unix socket,
//! with frames built by `crossfs-wire` and then broken by hand.
//!
//! Every case checks what the offending connection gets (an Rlerror carrying the request's
//! tag, or the server closing it) and that the server is still fine afterwards: a connection
//! opened before the case and kept open still works, and so does one opened after it
//! (Tversion, Tattach, Twalk, Tclunk). Every read has a timeout, so no case can hang; the
//! timeouts only guard against hangs, nothing asserts how fast anything is.

mod common;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use crossfs_wire::*;

/// Longest a read may wait before the test calls the server stuck.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const EBADF: u32 = 9;
const EINVAL: u32 = 22;
const EPROTO: u32 = 71;
const EOPNOTSUPP: u32 = 95;

/// One raw 9P connection.
struct Peer {
    s: UnixStream,
    next_tag: u16,
}

impl Peer {
    fn connect(sock: &Path) -> Peer {
        let s = UnixStream::connect(sock).unwrap();
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        Peer { s, next_tag: 1 }
    }

    fn tag(&mut self) -> Tag {
        let t = Tag(self.next_tag);
        self.next_tag = self.next_tag % 60000 + 1;
        t
    }

    fn send_bytes(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("sending to the server");
    }

    fn send(&mut self, tag: Tag, msg: impl Into<Tmessage>) {
        let mut buf = Vec::new();
        msg.into().encode(tag, &mut buf);
        self.send_bytes(&buf);
    }

    /// The next reply; panics if the server closes or says nothing within [`IO_TIMEOUT`].
    fn recv(&mut self) -> Rframe {
        let mut head = [0u8; 4];
        self.s
            .read_exact(&mut head)
            .expect("reading a reply's size field");
        let size = u32::from_le_bytes(head) as usize;
        assert!((HEADER_LEN..=16 << 20).contains(&size), "reply size {size}");
        let mut frame = head.to_vec();
        frame.resize(size, 0);
        self.s.read_exact(&mut frame[4..]).expect("reading a reply");
        decode_rframe(&frame).expect("decoding a reply")
    }

    /// Sends `msg` with a fresh tag and returns its reply (checking the tag).
    fn rpc(&mut self, msg: impl Into<Tmessage>) -> Rmessage {
        let tag = self.tag();
        self.send(tag, msg);
        let r = self.recv();
        assert_eq!(r.tag, tag, "reply tag");
        r.msg
    }

    fn version(&mut self, msize: u32) -> u32 {
        self.send(
            NOTAG,
            Tversion {
                msize,
                version: VERSION_9P2000_L.to_vec(),
            },
        );
        match self.recv() {
            Rframe {
                tag: NOTAG,
                msg: Rmessage::Version(v),
            } if v.version == VERSION_9P2000_L => v.msize,
            other => panic!("Tversion answered {other:?}"),
        }
    }

    fn attach(&mut self, fid: u32) {
        let r = self.rpc(Tattach {
            fid: Fid(fid),
            afid: NOFID,
            uname: b"bad-input".to_vec(),
            aname: Vec::new(),
            n_uname: 0,
        });
        assert!(matches!(r, Rmessage::Attach(_)), "Tattach answered {r:?}");
    }

    fn walk(&mut self, fid: u32, newfid: u32, names: &[&str]) -> Rmessage {
        self.rpc(Twalk {
            fid: Fid(fid),
            newfid: Fid(newfid),
            wnames: names.iter().map(|n| n.as_bytes().to_vec()).collect(),
        })
    }

    fn clunk(&mut self, fid: u32) -> Rmessage {
        self.rpc(Tclunk { fid: Fid(fid) })
    }

    /// Expects the next reply to be Rlerror `errno` for `tag`.
    fn expect_error(&mut self, tag: Tag, errno: u32, what: &str) {
        let r = self.recv();
        assert_eq!(
            r,
            Rframe {
                tag,
                msg: Rmessage::Lerror(Rlerror { ecode: errno })
            },
            "{what}: want Rlerror {errno} with tag {}",
            tag.0
        );
    }

    /// Expects the server to close this connection without replying.
    fn expect_closed(&mut self, what: &str) {
        let mut buf = [0u8; 64];
        match self.s.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Ok(n) => panic!("{what}: server replied {:?} instead of closing", &buf[..n]),
            Err(e) => panic!("{what}: server did not close the connection: {e}"),
        }
    }
}

/// Tversion + Tattach + Twalk + Tclunk on `peer`, all of which must succeed.
fn assert_healthy(peer: &mut Peer, what: &str) {
    assert_eq!(peer.version(8192), 8192, "{what}: msize");
    peer.attach(0);
    match peer.walk(0, 1, &["file"]) {
        Rmessage::Walk(w) if w.wqids.len() == 1 => {}
        other => panic!("{what}: Twalk answered {other:?}"),
    }
    assert_eq!(peer.clunk(1), Rmessage::Clunk(Rclunk {}), "{what}");
    assert_eq!(peer.clunk(0), Rmessage::Clunk(Rclunk {}), "{what}");
}

/// A Tversion frame for 9P2000.L.
fn tversion_frame(msize: u32) -> Vec<u8> {
    let mut buf = Vec::new();
    Tmessage::from(Tversion {
        msize,
        version: VERSION_9P2000_L.to_vec(),
    })
    .encode(NOTAG, &mut buf);
    buf
}

/// A frame header (size, type, tag) followed by `body`, with `size` as given.
fn raw_frame(size: u32, ty: u8, tag: u16, body: &[u8]) -> Vec<u8> {
    let mut buf = size.to_le_bytes().to_vec();
    buf.push(ty);
    buf.extend_from_slice(&tag.to_le_bytes());
    buf.extend_from_slice(body);
    buf
}

/// A frame whose size field is honest about `body`.
fn frame(ty: u8, tag: u16, body: &[u8]) -> Vec<u8> {
    raw_frame((HEADER_LEN + body.len()) as u32, ty, tag, body)
}

/// A server with a connection that is kept open across the case.
struct Fixture {
    serve: Serve,
    sock: PathBuf,
    export: PathBuf,
    kept: Peer,
    _work: tempfile::TempDir,
}

impl Fixture {
    fn start() -> Fixture {
        let work = tempfile::tempdir().unwrap();
        let export = work.path().join("export");
        std::fs::create_dir(&export).unwrap();
        std::fs::write(export.join("file"), b"hello\n").unwrap();
        let sock = work.path().join("9p.sock");
        let serve = Serve::start(&export, &format!("unix:{}", sock.display()), &[]);
        let mut kept = Peer::connect(&sock);
        assert_healthy(&mut kept, "kept connection, before the case");
        Fixture {
            serve,
            sock,
            export,
            kept,
            _work: work,
        }
    }

    fn connect(&self) -> Peer {
        Peer::connect(&self.sock)
    }

    /// After a case: the server runs, the kept connection and a new one both work.
    fn assert_still_fine(&mut self, case: &str) {
        assert!(
            self.serve.child.try_wait().unwrap().is_none(),
            "{case}: crossfs serve exited"
        );
        assert_healthy(
            &mut self.kept,
            &format!("{case}: connection kept from before"),
        );
        assert_healthy(&mut self.connect(), &format!("{case}: new connection"));
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.serve.child.id()))
            .expect("reading the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in {status}"))
    }
}

#[test]
fn truncated_frames_close_the_connection() {
    let mut fx = Fixture::start();
    let mut walk = Vec::new();
    Tmessage::from(Twalk {
        fid: Fid(0),
        newfid: Fid(1),
        wnames: vec![b"file".to_vec(), b"more".to_vec()],
    })
    .encode(Tag(3), &mut walk);

    // Cut inside the body, after negotiation; the client then half-closes, so the server's
    // closing is visible to it.
    let mut p = fx.connect();
    p.version(8192);
    p.send_bytes(&walk[..walk.len() - 3]);
    p.s.shutdown(Shutdown::Write).unwrap();
    p.expect_closed("Twalk cut 3 bytes short");
    fx.assert_still_fine("Twalk cut short");

    // Cut inside the size field.
    let mut p = fx.connect();
    p.version(8192);
    p.send_bytes(&walk[..2]);
    p.s.shutdown(Shutdown::Write).unwrap();
    p.expect_closed("frame cut inside its size field");
    fx.assert_still_fine("frame cut inside its size field");

    // Cut before any negotiation: a Tversion missing its last byte.
    let mut p = fx.connect();
    let v = tversion_frame(8192);
    p.send_bytes(&v[..v.len() - 1]);
    p.s.shutdown(Shutdown::Write).unwrap();
    p.expect_closed("Tversion cut 1 byte short");
    fx.assert_still_fine("Tversion cut short");

    // Cut, then the client goes away entirely.
    let mut p = fx.connect();
    p.version(8192);
    p.send_bytes(&walk[..9]);
    drop(p);
    fx.assert_still_fine("Twalk cut short, then the client closed");
}

#[test]
fn size_field_below_header_closes_the_connection() {
    let mut fx = Fixture::start();
    for size in [0u32, 1, 6] {
        let case = format!("size field {size} before Tversion");
        let mut p = fx.connect();
        p.send_bytes(&size.to_le_bytes());
        p.expect_closed(&case);
        fx.assert_still_fine(&case);

        let case = format!("size field {size} after Tversion");
        let mut p = fx.connect();
        p.version(8192);
        // The rest of a would-be Tclunk: the server must not read it as a frame.
        p.send_bytes(&raw_frame(size, Tclunk::TYPE, 1, &0u32.to_le_bytes()));
        p.expect_closed(&case);
        fx.assert_still_fine(&case);
    }
}

#[test]
fn size_field_above_msize_closes_the_connection() {
    let mut fx = Fixture::start();
    // Before Tversion the limit is the server's maximum (its default msize). Only the header
    // is sent: the server must refuse on the size field, not wait for the body.
    for size in [16u32 << 20, DEFAULT_MSIZE + 1] {
        let case = format!("size field {size} before Tversion");
        let mut p = fx.connect();
        p.send_bytes(&raw_frame(size, Tversion::TYPE, NOTAG.0, &[]));
        p.expect_closed(&case);
        fx.assert_still_fine(&case);
    }
    // After negotiating 8192, the limit is 8192.
    for size in [9000u32, 8193, 16 << 20] {
        let case = format!("size field {size} at msize 8192");
        let mut p = fx.connect();
        assert_eq!(p.version(8192), 8192);
        p.send_bytes(&raw_frame(size, Twrite::TYPE, 5, &[]));
        p.expect_closed(&case);
        fx.assert_still_fine(&case);
    }
    // A frame of exactly msize is legal: a Twrite to a fid never opened gets EBADF, and the
    // connection goes on.
    let mut p = fx.connect();
    assert_eq!(p.version(8192), 8192);
    let mut w = Vec::new();
    encode_twrite(Tag(6), Fid(0), 0, &[b'x'; 8192 - TWRITE_HEADER_LEN], &mut w);
    assert_eq!(w.len(), 8192);
    p.send_bytes(&w);
    p.expect_error(Tag(6), EBADF, "Twrite of exactly msize on an unknown fid");
    assert_healthy(&mut p, "after a frame of exactly msize");
    fx.assert_still_fine("frames above msize");
}

#[test]
fn unknown_message_types_get_eopnotsupp_with_their_tag() {
    let mut fx = Fixture::start();
    let mut p = fx.connect();
    // Before Tversion every request is EPROTO, unknown ones included.
    p.send_bytes(&frame(99, 0x0102, &[]));
    p.expect_error(Tag(0x0102), EPROTO, "type 99 before Tversion");

    p.version(8192);
    p.attach(0);
    let cases: [(u8, u16, &[u8]); 7] = [
        (99, 0x1234, &[]),
        (0, 0x0001, &[1, 2, 3]),
        (6, 0xfffe, &[0; 4]),    // Tlerror: defined by the protocol as unused
        (101, 0x4242, &[0; 16]), // Rversion sent as a request
        (Rclunk::TYPE, 0x0007, &[]),
        (106, 0x0008, &[0; 8]), // Terror
        (255, 0x8000, &[0xff; 100]),
    ];
    for (ty, tag, body) in cases {
        p.send_bytes(&frame(ty, tag, body));
        p.expect_error(Tag(tag), EOPNOTSUPP, &format!("message type {ty}"));
    }
    // The connection goes on: its attached fid still works.
    match p.walk(0, 1, &["file"]) {
        Rmessage::Walk(w) if w.wqids.len() == 1 => {}
        other => panic!("Twalk after unknown types answered {other:?}"),
    }
    assert_healthy(&mut p, "connection that sent unknown types");
    let stats = fx.serve.stats();
    assert!(
        stats["total"]["unknown"]["count"].as_u64().unwrap_or(0) >= 3,
        "unknown types are counted: {}",
        stats["total"]
    );
    fx.assert_still_fine("unknown message types");
}

#[test]
fn malformed_twalk_bodies_get_einval_with_their_tag() {
    let mut fx = Fixture::start();
    let mut p = fx.connect();
    p.version(8192);
    p.attach(0);
    let head = |nwname: u16| {
        let mut b = 0u32.to_le_bytes().to_vec(); // fid 0
        b.extend_from_slice(&1u32.to_le_bytes()); // newfid 1
        b.extend_from_slice(&nwname.to_le_bytes());
        b
    };
    // A name whose length runs past the end of the frame.
    let mut past_end = head(1);
    past_end.extend_from_slice(&500u16.to_le_bytes());
    past_end.extend_from_slice(b"fil");
    // The largest length, with nothing after it.
    let mut max_len = head(1);
    max_len.extend_from_slice(&u16::MAX.to_le_bytes());
    // Second name's length runs past the end.
    let mut second = head(2);
    second.extend_from_slice(&4u16.to_le_bytes());
    second.extend_from_slice(b"file");
    second.extend_from_slice(&10u16.to_le_bytes());
    second.extend_from_slice(b"abc");
    // The frame ends inside a length field.
    let mut in_length = head(1);
    in_length.push(4);
    // More names announced than carried, and more than 16.
    let mut missing_names = head(3);
    missing_names.extend_from_slice(&[4, 0, b'f', b'i', b'l', b'e']);
    let mut too_many = head(17);
    for _ in 0..17 {
        too_many.extend_from_slice(&[4, 0, b'f', b'i', b'l', b'e']);
    }
    let mut huge_count = head(60000);
    huge_count.extend_from_slice(&[1, 0, b'x']);
    // Trailing garbage after a valid walk.
    let mut trailing = head(1);
    trailing.extend_from_slice(&[4, 0, b'f', b'i', b'l', b'e', 0xAA]);

    let cases: [(&str, &[u8]); 8] = [
        ("name length 500 with 3 bytes left", &past_end),
        ("name length 65535 with nothing left", &max_len),
        ("second name runs past the frame", &second),
        ("frame ends inside a name length", &in_length),
        ("3 names announced, 1 carried", &missing_names),
        ("17 names", &too_many),
        ("60000 names announced", &huge_count),
        ("trailing byte after the names", &trailing),
    ];
    for (i, (what, body)) in cases.into_iter().enumerate() {
        let tag = 0x0100 + i as u16;
        p.send_bytes(&frame(Twalk::TYPE, tag, body));
        p.expect_error(Tag(tag), EINVAL, what);
        // No fid was made.
        assert_eq!(
            p.clunk(1),
            Rmessage::error(EBADF as i32),
            "{what}: newfid 1"
        );
    }
    assert_healthy(&mut p, "connection that sent malformed walks");
    fx.assert_still_fine("malformed Twalk bodies");
}

#[test]
fn requests_on_fids_never_attached_get_ebadf() {
    let mut fx = Fixture::start();
    let mut p = fx.connect();
    p.version(8192);
    let requests: Vec<(&str, Tmessage)> = vec![
        (
            "Tgetattr",
            Tgetattr {
                fid: Fid(77),
                request_mask: getattr::ALL,
            }
            .into(),
        ),
        ("Tclunk", Tclunk { fid: Fid(77) }.into()),
        (
            "Twalk",
            Twalk {
                fid: Fid(77),
                newfid: Fid(78),
                wnames: vec![b"file".to_vec()],
            }
            .into(),
        ),
        (
            "Tlopen",
            Tlopen {
                fid: Fid(77),
                flags: 0,
            }
            .into(),
        ),
        (
            "Tread",
            Tread {
                fid: Fid(77),
                offset: 0,
                count: 100,
            }
            .into(),
        ),
        (
            "Treaddir",
            Treaddir {
                fid: Fid(77),
                offset: 0,
                count: 100,
            }
            .into(),
        ),
        ("Tstatfs", Tstatfs { fid: NOFID }.into()),
        (
            "Tmkdir",
            Tmkdir {
                dfid: Fid(77),
                name: b"d".to_vec(),
                mode: 0o755,
                gid: 0,
            }
            .into(),
        ),
        ("Tremove", Tremove { fid: Fid(77) }.into()),
    ];
    for (i, (what, msg)) in requests.into_iter().enumerate() {
        let tag = Tag(0x0200 + i as u16);
        p.send(tag, msg);
        p.expect_error(tag, EBADF, &format!("{what} on a fid never attached"));
    }
    assert!(
        !fx.export.join("d").exists(),
        "Tmkdir on an unknown fid made something"
    );
    assert_healthy(&mut p, "connection that used unknown fids");
    fx.assert_still_fine("requests on fids never attached");
}

#[test]
fn ten_thousand_fids_on_one_connection() {
    const FIDS: u32 = 10_000;
    const WINDOW: u32 = 32;
    let mut fx = Fixture::start();
    let mut p = fx.connect();
    p.version(65536);
    p.attach(0);

    // Pipelined in windows of 32 requests (tags are distinct within a window).
    let run = |p: &mut Peer, make: &dyn Fn(u32) -> Tmessage, check: &dyn Fn(u32, Rmessage)| {
        let mut next = 1;
        while next <= FIDS {
            let end = (next + WINDOW).min(FIDS + 1);
            let mut pending = HashMap::new();
            for fid in next..end {
                let tag = Tag(fid as u16);
                p.send(tag, make(fid));
                pending.insert(tag, fid);
            }
            for _ in next..end {
                let r = p.recv();
                let fid = pending
                    .remove(&r.tag)
                    .unwrap_or_else(|| panic!("reply with unexpected tag {:?}", r.tag));
                check(fid, r.msg);
            }
            next = end;
        }
    };
    run(
        &mut p,
        &|fid| {
            Twalk {
                fid: Fid(0),
                newfid: Fid(fid),
                wnames: vec![b"file".to_vec()],
            }
            .into()
        },
        &|fid, r| match r {
            Rmessage::Walk(w) if w.wqids.len() == 1 => {}
            other => panic!("Twalk to fid {fid}: {other:?}"),
        },
    );
    let stats = fx.serve.stats();
    let live = &stats["connections"];
    println!("server VmRSS with {FIDS} fids held: {} kB", fx.rss_kib());
    assert!(
        live.as_array()
            .unwrap()
            .iter()
            .any(|c| c["Twalk"]["count"].as_u64() == Some(u64::from(FIDS))),
        "a connection counted {FIDS} walks: {live}"
    );
    // The last fid works like any other.
    match p.rpc(Tgetattr {
        fid: Fid(FIDS),
        request_mask: getattr::BASIC,
    }) {
        Rmessage::Getattr(a) => assert_eq!(a.size, 6),
        other => panic!("Tgetattr of fid {FIDS}: {other:?}"),
    }
    fx.assert_still_fine("10000 fids held");
    run(&mut p, &|fid| Tclunk { fid: Fid(fid) }.into(), &|fid, r| {
        assert_eq!(r, Rmessage::Clunk(Rclunk {}), "Tclunk of fid {fid}")
    });
    assert_eq!(
        p.clunk(FIDS),
        Rmessage::error(EBADF as i32),
        "fid clunked twice"
    );
    assert_healthy(&mut p, "connection that held 10000 fids");
    fx.assert_still_fine("10000 fids clunked");
}

#[test]
fn a_client_that_never_reads_replies_stays_bounded() {
    const REQUESTS: u16 = 2000;
    const MIB: u32 = 1 << 20;
    let mut fx = Fixture::start();
    let big: Vec<u8> = (0..4 * MIB).map(|i| (i % 251) as u8).collect();
    std::fs::write(fx.export.join("big"), &big).unwrap();
    let rss_before = fx.rss_kib();
    println!("server VmRSS before: {rss_before} kB");

    let mut hog = fx.connect();
    assert_eq!(hog.version(MIB), MIB);
    hog.attach(0);
    assert!(matches!(hog.walk(0, 1, &["big"]), Rmessage::Walk(w) if w.wqids.len() == 1));
    assert!(matches!(
        hog.rpc(Tlopen {
            fid: Fid(1),
            flags: open_flags::RDONLY
        }),
        Rmessage::Lopen(_)
    ));
    // 2000 reads of 1 MiB, sent from another thread: once the server stops reading this
    // connection (back-pressure), the writes block, and that is what should happen.
    let mut requests = Vec::new();
    for i in 0..REQUESTS {
        Tmessage::from(Tread {
            fid: Fid(1),
            offset: u64::from(i % 4) * u64::from(MIB),
            count: MIB,
        })
        .encode(Tag(i + 100), &mut requests);
    }
    let mut writer = hog.s.try_clone().unwrap();
    writer.set_write_timeout(None).unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&requests).is_ok());

    std::thread::sleep(Duration::from_secs(3));
    let rss_during = fx.rss_kib();
    println!("server VmRSS with {REQUESTS} unread 1 MiB reads outstanding: {rss_during} kB");
    let stats = fx.serve.stats();
    let reads_taken = stats["total"]["Tread"]["count"].as_u64().unwrap_or(0);
    println!("Tread requests the server has read so far: {reads_taken}");
    assert!(
        reads_taken < u64::from(REQUESTS),
        "the server kept reading a connection that does not read its replies"
    );
    assert!(
        rss_during < 512 * 1024,
        "server RSS {rss_during} kB with a client that does not read"
    );
    fx.assert_still_fine("while a client does not read its replies");
    let rss_during = fx.rss_kib();
    println!("server VmRSS after other connections worked meanwhile: {rss_during} kB");
    assert!(rss_during < 512 * 1024, "server RSS {rss_during} kB");

    // The hog goes away; the server drops its replies and carries on.
    hog.s.shutdown(Shutdown::Both).unwrap();
    drop(hog);
    sender.join().unwrap();
    fx.assert_still_fine("after the client that did not read closed");
    // Its connection is gone from the live list once the server has dropped the rest.
    wait_until(
        "the hog's connection to be dropped",
        Duration::from_secs(60),
        || fx.serve.stats()["connections"].as_array().unwrap().len() == 1,
    );
    let rss_after = fx.rss_kib();
    println!("server VmRSS after the client closed: {rss_after} kB");
    assert!(rss_after < 512 * 1024, "server RSS {rss_after} kB");
    fx.assert_still_fine("after the hog's connection was dropped");
}

#[test]
fn connections_past_max_connections_are_closed_and_the_others_carry_on() {
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::write(export.join("file"), b"hello\n").unwrap();
    let sock = work.path().join("9p.sock");
    let serve = Serve::start(
        &export,
        &format!("unix:{}", sock.display()),
        &["--max-connections", "2"],
    );
    let mut a = Peer::connect(&sock);
    assert_healthy(&mut a, "first connection");
    let mut b = Peer::connect(&sock);
    assert_healthy(&mut b, "second connection");
    Peer::connect(&sock).expect_closed("third connection, past --max-connections 2");
    assert_healthy(&mut a, "first connection, after the third was refused");
    assert_healthy(&mut b, "second connection, after the third was refused");
    // Once one has gone, a new connection is served again.
    drop(a);
    wait_until(
        "the first connection's slot to be free",
        Duration::from_secs(30),
        || serve.stats()["connections"].as_array().unwrap().len() == 1,
    );
    assert_healthy(
        &mut Peer::connect(&sock),
        "a connection after the first closed",
    );
    assert_healthy(&mut b, "second connection, at the end");
}

#[test]
fn token_file_gates_attach_and_remote_tcp_needs_one() {
    const EACCES: u32 = 13;
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::write(export.join("file"), b"hello\n").unwrap();
    let token = work.path().join("token");
    std::fs::write(&token, b"s3cret\n").unwrap();
    let sock = work.path().join("9p.sock");
    let token_arg = token.to_str().unwrap();
    let _serve = Serve::start(
        &export,
        &format!("unix:{}", sock.display()),
        &["--token-file", token_arg],
    );
    let mut p = Peer::connect(&sock);
    p.version(8192);
    let attach = |afid: u32| Tattach {
        fid: Fid(0),
        afid: Fid(afid),
        uname: b"u".to_vec(),
        aname: vec![],
        n_uname: !0,
    };
    assert_eq!(p.rpc(attach(!0)), Rmessage::error(EACCES as i32));
    let tauth = Tauth {
        afid: Fid(7),
        uname: b"u".to_vec(),
        aname: vec![],
        n_uname: !0,
    };
    assert!(matches!(p.rpc(tauth), Rmessage::Auth(_)));
    // The file's trailing newline is not part of the token.
    let write = |data: &[u8]| Twrite {
        fid: Fid(7),
        offset: 0,
        data: Data(data.to_vec()),
    };
    assert!(matches!(p.rpc(write(b"s3cret\n")), Rmessage::Write(_)));
    assert_eq!(p.rpc(attach(7)), Rmessage::error(EACCES as i32));
    p.clunk(7);
    let tauth = Tauth {
        afid: Fid(7),
        uname: b"u".to_vec(),
        aname: vec![],
        n_uname: !0,
    };
    assert!(matches!(p.rpc(tauth), Rmessage::Auth(_)));
    assert!(matches!(p.rpc(write(b"s3cret")), Rmessage::Write(_)));
    assert!(matches!(p.rpc(attach(7)), Rmessage::Attach(_)));
    assert!(matches!(p.walk(0, 1, &["file"]), Rmessage::Walk(w) if w.wqids.len() == 1));

    // Remote TCP without a token is refused before anything is bound.
    let out = std::process::Command::new(crossfs_bin())
        .arg("serve")
        .arg(&export)
        .args(["--listen", "tcp:0.0.0.0:0", "--allow-remote"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--token-file"), "{stderr}");
}
