//! Round trips per second against an in-process server over a unix socketpair.
//!
//! A plain synchronous client writes one request frame, reads one reply frame, and repeats:
//! the figure is the whole round trip (client + transport + server). It runs:
//! - `floor`: the same ping-pong against a thread that echoes a fixed reply without any 9P
//!   handling, i.e. what the socket and two thread wake-ups cost by themselves;
//! - `getattr`: Tgetattr on one fid, one connection;
//! - `walk+clunk`: Twalk of one name to a new fid, then Tclunk (two round trips per "stat");
//! - `read 4k`: Tread of 4 KiB at offset 0 of an open 64 KiB file (in the page cache);
//! - `getattr x8`: eight client threads, each on its own connection.
//!
//! Usage: `cargo run --release -p crossfs-server --example server_rtt [seconds]` (default 2 per case).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossfs_server::{Server, ServerConfig};
use crossfs_wire::{
    decode_rframe, getattr, Fid, Rmessage, Tag, Tattach, Tclunk, Tgetattr, Tlopen, Tmessage, Tread,
    Tversion, Twalk, NOFID, NOTAG,
};

struct Client {
    s: UnixStream,
    frame: Vec<u8>,
    reply: Vec<u8>,
}

impl Client {
    fn connect(server: &Arc<Server>) -> Client {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let writer = theirs.try_clone().unwrap();
        let server = server.clone();
        std::thread::spawn(move || server.serve_connection(theirs, writer, "rtt".into()));
        let mut c = Client {
            s: ours,
            frame: Vec::new(),
            reply: Vec::new(),
        };
        c.rpc(
            NOTAG,
            &Tmessage::Version(Tversion {
                msize: 1 << 20,
                version: b"9P2000.L".to_vec(),
            }),
        );
        c.ok(&Tmessage::Attach(Tattach {
            fid: Fid(0),
            afid: NOFID,
            uname: b"rtt".to_vec(),
            aname: vec![],
            n_uname: !0,
        }));
        c.ok(&Tmessage::Walk(Twalk {
            fid: Fid(0),
            newfid: Fid(1),
            wnames: vec![b"file".to_vec()],
        }));
        c
    }

    /// Sends one request and reads its reply into `self.reply`.
    fn rpc(&mut self, tag: Tag, msg: &Tmessage) {
        self.frame.clear();
        msg.encode(tag, &mut self.frame);
        self.s.write_all(&self.frame).unwrap();
        read_frame(&mut self.s, &mut self.reply);
    }

    fn ok(&mut self, msg: &Tmessage) {
        self.rpc(Tag(1), msg);
        if let Rmessage::Lerror(e) = decode_rframe(&self.reply).unwrap().msg {
            panic!("Rlerror {}", e.ecode);
        }
    }
}

fn read_frame(s: &mut UnixStream, buf: &mut Vec<u8>) {
    let mut head = [0u8; 4];
    s.read_exact(&mut head).unwrap();
    let size = u32::from_le_bytes(head) as usize;
    buf.clear();
    buf.extend_from_slice(&head);
    buf.resize(size, 0);
    s.read_exact(&mut buf[4..]).unwrap();
}

/// CPU time (user + system, all threads) in microseconds, and voluntary context switches,
/// of the whole process: client and server together.
fn usage() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct it is given.
    #[allow(unsafe_code)]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (us(ru.ru_utime) + us(ru.ru_stime), ru.ru_nvcsw as f64)
}

/// Round trips made, and the time they took.
struct Run {
    trips: u64,
    secs: f64,
}

/// Runs `step` (which makes `trips` round trips) repeatedly for `secs`.
fn measure(secs: f64, trips: u64, mut step: impl FnMut()) -> Run {
    let start = Instant::now();
    let limit = Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while start.elapsed() < limit {
        for _ in 0..64 {
            step();
        }
        n += 64 * trips;
    }
    Run {
        trips: n,
        secs: start.elapsed().as_secs_f64(),
    }
}

/// Measures `f` (which returns the runs it made) and prints round trips/s, microseconds per
/// round trip, and CPU microseconds and voluntary context switches per round trip (whole
/// process; these two are steadier than wall time on a busy machine).
fn case(name: &str, f: impl FnOnce() -> Vec<Run>) {
    let (cpu0, csw0) = usage();
    let runs = f();
    let (cpu1, csw1) = usage();
    let trips: u64 = runs.iter().map(|r| r.trips).sum();
    let per_sec: f64 = runs.iter().map(|r| r.trips as f64 / r.secs).sum();
    println!(
        "{name:<12} {per_sec:>9.0} round trips/s {:>7.1} us each {:>6.1} us CPU {:>5.2} csw",
        1e6 / per_sec,
        (cpu1 - cpu0) / trips as f64,
        (csw1 - csw0) / trips as f64,
    );
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("seconds"))
        .unwrap_or(2.0);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), vec![1u8; 64 * 1024]).unwrap();
    let server = Server::new(ServerConfig {
        export: dir.path().to_path_buf(),
        ..Default::default()
    })
    .unwrap();

    // The floor: a thread that answers every frame with a fixed 7-byte reply.
    {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let reply = [7u8, 0, 0, 0, 121, 1, 0];
            loop {
                let mut head = [0u8; 4];
                if theirs.read_exact(&mut head).is_err() {
                    return;
                }
                buf.resize(u32::from_le_bytes(head) as usize - 4, 0);
                theirs.read_exact(&mut buf).unwrap();
                theirs.write_all(&reply).unwrap();
            }
        });
        let mut frame = Vec::new();
        Tmessage::Clunk(Tclunk { fid: Fid(1) }).encode(Tag(1), &mut frame);
        let mut reply = Vec::new();
        case("floor", || {
            vec![measure(secs, 1, || {
                ours.write_all(&frame).unwrap();
                read_frame(&mut ours, &mut reply);
            })]
        });
    }

    let getattr_msg = Tmessage::Getattr(Tgetattr {
        fid: Fid(1),
        request_mask: getattr::ALL,
    });
    {
        let mut c = Client::connect(&server);
        case("getattr", || {
            vec![measure(secs, 1, || c.rpc(Tag(1), &getattr_msg))]
        });
        let walk = Tmessage::Walk(Twalk {
            fid: Fid(0),
            newfid: Fid(2),
            wnames: vec![b"file".to_vec()],
        });
        let clunk = Tmessage::Clunk(Tclunk { fid: Fid(2) });
        c.ok(&Tmessage::Walk(Twalk {
            fid: Fid(0),
            newfid: Fid(3),
            wnames: vec![b"file".to_vec()],
        }));
        c.ok(&Tmessage::Lopen(Tlopen {
            fid: Fid(3),
            flags: 0,
        }));
        let read = Tmessage::Read(Tread {
            fid: Fid(3),
            offset: 0,
            count: 4096,
        });
        case("read 4k", || {
            vec![measure(secs, 1, || c.rpc(Tag(1), &read))]
        });
        case("walk+clunk", || {
            vec![measure(secs, 2, || {
                c.rpc(Tag(1), &walk);
                c.rpc(Tag(1), &clunk);
            })]
        });
    }

    // Connect first, so that only the round trips are measured.
    let clients: Vec<Client> = (0..8).map(|_| Client::connect(&server)).collect();
    case("getattr x8", || {
        let threads: Vec<_> = clients
            .into_iter()
            .map(|mut c| {
                let msg = getattr_msg.clone();
                std::thread::spawn(move || measure(secs, 1, || c.rpc(Tag(1), &msg)))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
}
