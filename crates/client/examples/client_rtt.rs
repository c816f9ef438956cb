//! Tgetattr round trips per second through [`Client::call`], against crossfs's server in
//! process over a real unix socket (a listener bound in a temporary directory).
//!
//! Cases, each run for the same time against the same server:
//! - `raw`: a hand-written synchronous loop on its own connection (write a frame, read the
//!   reply on the same thread): the server and the socket without any client machinery.
//!   The gap between this and `call x1` is what the client adds to a round trip.
//! - `call x1`: one thread calling [`Client::call`] in a loop.
//! - `call x8`: eight threads sharing one [`Client`] (pipelined: up to eight in flight).
//!
//! Usage: `cargo run --release -p crossfs-client --example client_rtt [seconds per case]` (default
//! 2). Figures are per second, the median of three rounds; runs are noisy on a shared machine,
//! so compare builds one after the other on the same server.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossfs_client::{Client, ClientConfig, Fid, Rmessage, Tmessage};
use crossfs_server::{Server, ServerConfig};
use crossfs_wire::{decode_rframe, getattr, Tag, Tattach, Tgetattr, Tversion, Twalk, NOFID, NOTAG};

fn serve(server: &Arc<Server>, listener: &UnixListener) -> UnixStream {
    let path = listener.local_addr().unwrap();
    let path = path.as_pathname().unwrap().to_path_buf();
    let ours = UnixStream::connect(path).unwrap();
    let (theirs, _) = listener.accept().unwrap();
    let writer = theirs.try_clone().unwrap();
    let server = server.clone();
    std::thread::spawn(move || server.serve_connection(theirs, writer, "rtt".into()));
    ours
}

/// A client's fid for the file "file" of the export.
fn file_fid(client: &Client) -> Fid {
    let (root, _) = client.attach(b"rtt", b"", !0).unwrap();
    let fid = client.alloc_fid();
    client.walk(root, fid, &[b"file"]).unwrap();
    fid
}

fn getattr_msg(fid: Fid) -> Tmessage {
    Tmessage::Getattr(Tgetattr {
        fid,
        request_mask: getattr::BASIC,
    })
}

/// Synchronous request/reply on the calling thread, no client library.
struct Raw {
    s: UnixStream,
    frame: Vec<u8>,
    reply: Vec<u8>,
}

impl Raw {
    fn rpc(&mut self, tag: Tag, msg: &Tmessage) -> Rmessage {
        self.frame.clear();
        msg.encode(tag, &mut self.frame);
        self.s.write_all(&self.frame).unwrap();
        let mut size = [0u8; 4];
        self.s.read_exact(&mut size).unwrap();
        let size = u32::from_le_bytes(size) as usize;
        self.reply.clear();
        self.reply.extend_from_slice(&(size as u32).to_le_bytes());
        self.reply.resize(size, 0);
        self.s.read_exact(&mut self.reply[4..]).unwrap();
        decode_rframe(&self.reply).unwrap().msg
    }

    fn connect(server: &Arc<Server>, listener: &UnixListener) -> Raw {
        let mut raw = Raw {
            s: serve(server, listener),
            frame: Vec::new(),
            reply: Vec::new(),
        };
        raw.rpc(
            NOTAG,
            &Tmessage::Version(Tversion {
                msize: 1 << 20,
                version: b"9P2000.L".to_vec(),
            }),
        );
        let attach = Tmessage::Attach(Tattach {
            fid: Fid(0),
            afid: NOFID,
            uname: b"rtt".to_vec(),
            aname: Vec::new(),
            n_uname: !0,
        });
        assert!(matches!(raw.rpc(Tag(0), &attach), Rmessage::Attach(_)));
        let walk = Tmessage::Walk(Twalk {
            fid: Fid(0),
            newfid: Fid(1),
            wnames: vec![b"file".to_vec()],
        });
        assert!(matches!(raw.rpc(Tag(0), &walk), Rmessage::Walk(_)));
        raw
    }
}

/// Voluntary context switches of every thread of this process so far (client and server
/// alike, as both run here): a figure the machine's load does not skew, unlike the rates.
fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .sum()
}

/// Runs `threads` threads doing `op` until `secs` pass; returns operations per second and
/// voluntary context switches per operation (threads that exited are not counted: the
/// figure covers the threads alive at the end, which include the client's and server's).
fn rate(threads: usize, secs: f64, op: impl Fn() + Sync) -> (f64, f64) {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let switches = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        let before = context_switches();
        for _ in 0..threads {
            s.spawn(|| {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    op();
                    n += 1;
                }
                done.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        // Counted while the workers still live (their switches vanish when they exit).
        switches.store(context_switches() - before, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
    });
    let ops = done.load(Ordering::Relaxed) as f64;
    (
        ops / start.elapsed().as_secs_f64(),
        switches.load(Ordering::Relaxed) as f64 / ops.max(1.0),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("seconds per case"))
        .unwrap_or(2.0);
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    std::fs::write(export.join("file"), b"rtt\n").unwrap();
    let server = Server::new(ServerConfig {
        export,
        ..Default::default()
    })
    .unwrap();
    let listener = UnixListener::bind(dir.path().join("rtt.sock")).unwrap();

    let raw = std::sync::Mutex::new(Raw::connect(&server, &listener));
    let stream = serve(&server, &listener);
    let client = Client::connect(
        stream.try_clone().unwrap(),
        stream,
        &ClientConfig::default(),
    )
    .unwrap();
    let fid = file_fid(&client);

    let rounds = 3;
    let per = secs / rounds as f64;
    let mut figures: Vec<(&str, Vec<(f64, f64)>)> =
        vec![("raw", vec![]), ("call x1", vec![]), ("call x8", vec![])];
    for _ in 0..rounds {
        figures[0].1.push(rate(1, per, || {
            let mut r = raw.lock().unwrap();
            let msg = getattr_msg(Fid(1));
            assert!(matches!(r.rpc(Tag(1), &msg), Rmessage::Getattr(_)));
        }));
        figures[1].1.push(rate(1, per, || {
            let r = client.call(getattr_msg(fid)).unwrap();
            assert!(matches!(r, Rmessage::Getattr(_)));
        }));
        figures[2].1.push(rate(8, per, || {
            let r = client.call(getattr_msg(fid)).unwrap();
            assert!(matches!(r, Rmessage::Getattr(_)));
        }));
    }
    for (name, v) in figures {
        let m = median(v.iter().map(|f| f.0).collect());
        let cs = median(v.iter().map(|f| f.1).collect());
        println!(
            "{name:>8}: {m:>9.0} round trips/s ({:.1} us each), {cs:.2} context switches each",
            1e6 / m
        );
    }
    let sent = client
        .counters()
        .messages
        .get("Tgetattr")
        .map_or(0, |c| c.count);
    println!("Tgetattr sent through the client: {sent}");
}
