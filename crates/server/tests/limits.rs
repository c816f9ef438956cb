//! Limits that keep one client from hurting the others: connections, and bytes of requests
//! buffered per connection.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{errno::*, Harness, ROOT};
use crossfs_wire::*;

/// Twrite requests the server has read so far.
fn twrites(h: &Harness) -> u64 {
    h.server
        .message_totals()
        .messages
        .get("Twrite")
        .map_or(0, |m| m.count)
}

#[test]
fn a_connection_past_max_connections_is_closed_and_the_others_carry_on() {
    let h = Harness::with(|c| c.max_connections = 2);
    std::fs::write(h.path("f"), b"data").unwrap();
    let mut a = h.connect();
    let mut b = h.connect();
    // The third is closed before it can say anything.
    h.connect_raw().expect_closed();
    for c in [&mut a, &mut b] {
        c.walk_path(Fid(1), "f").unwrap();
        c.lopen(Fid(1), open_flags::RDONLY).unwrap();
        assert_eq!(c.read(Fid(1), 0, 100).unwrap(), b"data");
        c.clunk(Fid(1)).unwrap();
    }
    // A slot is free again once a connection has ended.
    a.close();
    let mut d = h.connect();
    assert_eq!(d.walk(ROOT, Fid(1), &["missing"]).unwrap_err(), ENOENT);
    h.connect_raw().expect_closed();
    b.close();
    d.close();
}

/// The one worker is blocked opening a fifo nobody reads, and Twrites of a regular file
/// (too large for the reader to run them itself) queue behind it. The server must stop reading once `max_buffered_bytes` are queued, long
/// before `max_in_flight` (64) requests are.
#[test]
fn the_reader_stops_at_max_buffered_bytes() {
    const CHUNK: usize = 128 * 1024;
    const SENT: u16 = 64;
    const LIMIT: usize = 2 * CHUNK;
    let h = Harness::with(|c| {
        c.workers_per_connection = 1;
        c.max_buffered_bytes = LIMIT;
    });
    let fifo = h.path("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    std::fs::write(h.path("f"), b"").unwrap();
    let mut c = h.connect();
    c.open(Fid(2), "f", open_flags::WRONLY);
    c.walk_path(Fid(1), "fifo").unwrap();
    let before = twrites(&h);
    // Opening the fifo for writing waits for a reader: the worker is stuck there.
    let mut frames = Vec::new();
    Tmessage::from(Tlopen {
        fid: Fid(1),
        flags: open_flags::WRONLY,
    })
    .encode(Tag(999), &mut frames);
    for i in 0..SENT {
        Tmessage::from(Twrite {
            fid: Fid(2),
            offset: i as u64 * CHUNK as u64,
            data: Data(vec![i as u8; CHUNK]),
        })
        .encode(Tag(1000 + i), &mut frames);
    }
    let mut writer = c.stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&frames).unwrap());
    // Queued up to the limit, plus the one the reader holds.
    let bound = (LIMIT / CHUNK + 1) as u64;
    // However long one waits, the server never takes more (the window only bounds how long
    // a regression takes to show).
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let taken = twrites(&h) - before;
        assert!(
            taken <= bound,
            "{taken} Twrites of {CHUNK} bytes taken, bound {bound}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A reader for the fifo: the open completes, then every write, each answered.
    let reader = std::fs::File::open(&fifo).unwrap();
    sender.join().unwrap();
    match c.recv().msg {
        Rmessage::Lopen(_) => {}
        other => panic!("{other:?}"),
    }
    for _ in 0..SENT {
        match c.recv().msg {
            Rmessage::Write(w) => assert_eq!(w.count as usize, CHUNK),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        std::fs::metadata(h.path("f")).unwrap().len(),
        (CHUNK * SENT as usize) as u64
    );
    drop(reader);
    c.close();
}
