//! Server memory under load: starts `crossfs serve` on a temporary directory, drives it with
//! many raw 9P connections doing random operations for a while, and prints the server's
//! resident memory (VmRSS sampled every 200 ms, and VmHWM, from `/proc/PID/status`).
//!
//! ```sh
//! cargo build --release
//! cargo run --release -p crossfs-server --example rss_load -- --clients 64 --secs 60
//! ```
//! Options: `--crossfs PATH` (default: the workspace's `target/release/crossfs`),
//! `--clients N` (64), `--secs S` (60), `--max-write BYTES` (1048576).
//!
//! Each client works in a directory of its own: create, write (up to `--max-write` bytes),
//! read back whole, list, stat, chmod, rename, unlink, mkdir/rmdir, set and get a 4 KiB
//! xattr, walk to missing names, and bursts of 16 pipelined reads. Errors (a name another
//! operation removed, say) are counted, not fatal; a reply that does not decode is.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossfs_wire::*;

const MSIZE: u32 = (1 << 20) + 4096;
const ROOT: Fid = Fid(0);

struct Options {
    crossfs: PathBuf,
    clients: usize,
    secs: u64,
    max_write: usize,
}

fn options() -> Options {
    let mut o = Options {
        crossfs: Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/crossfs"),
        clients: 64,
        secs: 60,
        max_write: 1 << 20,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--crossfs" => o.crossfs = value().into(),
            "--clients" => o.clients = value().parse().expect("--clients N"),
            "--secs" => o.secs = value().parse().expect("--secs S"),
            "--max-write" => o.max_write = value().parse().expect("--max-write BYTES"),
            other => panic!("unknown option {other}"),
        }
    }
    o
}

/// xorshift64: deterministic per client.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

struct Conn {
    s: UnixStream,
    tag: u16,
    buf: Vec<u8>,
}

impl Conn {
    fn send(&mut self, msg: Tmessage) -> Tag {
        self.tag = self.tag % 60000 + 1;
        self.buf.clear();
        msg.encode(Tag(self.tag), &mut self.buf);
        self.s.write_all(&self.buf).expect("sending");
        Tag(self.tag)
    }

    fn recv(&mut self) -> Rframe {
        let mut head = [0u8; 4];
        self.s.read_exact(&mut head).expect("reading a reply");
        let size = u32::from_le_bytes(head) as usize;
        assert!((7..MSIZE as usize).contains(&size), "reply size {size}");
        let mut frame = head.to_vec();
        frame.resize(size, 0);
        self.s.read_exact(&mut frame[4..]).expect("reading a reply");
        decode_rframe(&frame).expect("decoding a reply")
    }

    fn rpc(&mut self, msg: impl Into<Tmessage>) -> Rmessage {
        let tag = self.send(msg.into());
        let r = self.recv();
        assert_eq!(r.tag, tag);
        r.msg
    }
}

fn client(
    sock: &Path,
    id: usize,
    stop: &AtomicBool,
    max_write: usize,
    ops: &AtomicU64,
    errors: &AtomicU64,
) {
    let s = UnixStream::connect(sock).expect("connecting");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut c = Conn {
        s,
        tag: 0,
        buf: Vec::new(),
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    match c.rpc(Tversion {
        msize: MSIZE,
        version: b"9P2000.L".to_vec(),
    }) {
        Rmessage::Version(v) => assert_eq!(v.version, b"9P2000.L"),
        other => panic!("{other:?}"),
    }
    let ok = |r: &Rmessage| !matches!(r, Rmessage::Lerror(_));
    assert!(ok(&c.rpc(Tattach {
        fid: ROOT,
        afid: NOFID,
        uname: b"load".to_vec(),
        aname: vec![],
        n_uname: !0
    })));
    let dir = format!("c{id}").into_bytes();
    c.rpc(Tmkdir {
        dfid: ROOT,
        name: dir.clone(),
        mode: 0o755,
        gid: !0,
    });
    let dfid = Fid(1);
    assert!(ok(&c.rpc(Twalk {
        fid: ROOT,
        newfid: dfid,
        wnames: vec![dir]
    })));
    let data: Vec<u8> = (0..max_write).map(|i| (i * 31 + id) as u8).collect();
    let (f, g) = (Fid(2), Fid(3));
    while !stop.load(Relaxed) {
        let name = format!("f{}", rng.below(16)).into_bytes();
        let replies: Vec<Rmessage> = match rng.below(10) {
            0 | 1 => {
                // Create (or open) and write.
                let mut r = vec![c.rpc(Twalk {
                    fid: dfid,
                    newfid: f,
                    wnames: vec![],
                })];
                r.push(c.rpc(Tlcreate {
                    fid: f,
                    name,
                    flags: open_flags::RDWR | open_flags::TRUNC,
                    mode: 0o644,
                    gid: !0,
                }));
                let len = rng.below(max_write as u64 + 1) as usize;
                let mut off = 0;
                while off < len {
                    let n = (len - off).min(MSIZE as usize - 24 - 4096);
                    r.push(c.rpc(Twrite {
                        fid: f,
                        offset: off as u64,
                        data: Data(data[off..off + n].to_vec()),
                    }));
                    off += n;
                }
                r.push(c.rpc(Tclunk { fid: f }));
                r
            }
            2 | 3 => {
                // Open and read whole; then a burst of pipelined reads.
                let mut r = vec![c.rpc(Twalk {
                    fid: dfid,
                    newfid: f,
                    wnames: vec![name],
                })];
                let opened = c.rpc(Tlopen {
                    fid: f,
                    flags: open_flags::RDONLY,
                });
                if ok(&opened) {
                    let mut off = 0u64;
                    loop {
                        match c.rpc(Tread {
                            fid: f,
                            offset: off,
                            count: MSIZE - 24,
                        }) {
                            Rmessage::Read(d) if !d.data.0.is_empty() => {
                                off += d.data.0.len() as u64
                            }
                            other => {
                                r.push(other);
                                break;
                            }
                        }
                    }
                    let tags: Vec<Tag> = (0..16)
                        .map(|i| {
                            c.send(
                                Tread {
                                    fid: f,
                                    offset: i * 4096,
                                    count: 65536,
                                }
                                .into(),
                            )
                        })
                        .collect();
                    for _ in &tags {
                        r.push(c.recv().msg);
                    }
                }
                r.push(opened);
                r.push(c.rpc(Tclunk { fid: f }));
                r
            }
            4 => {
                let mut r = vec![c.rpc(Twalk {
                    fid: dfid,
                    newfid: g,
                    wnames: vec![],
                })];
                r.push(c.rpc(Tlopen {
                    fid: g,
                    flags: open_flags::RDONLY | open_flags::DIRECTORY,
                }));
                r.push(c.rpc(Treaddir {
                    fid: g,
                    offset: 0,
                    count: 65536,
                }));
                r.push(c.rpc(Tclunk { fid: g }));
                r
            }
            5 => {
                let mut r = vec![c.rpc(Twalk {
                    fid: dfid,
                    newfid: f,
                    wnames: vec![name],
                })];
                r.push(c.rpc(Tgetattr {
                    fid: f,
                    request_mask: getattr::ALL,
                }));
                r.push(c.rpc(Tsetattr {
                    valid: setattr::MODE,
                    mode: 0o600 + rng.below(0o100) as u32,
                    ..Tsetattr::unchanged(f)
                }));
                r.push(c.rpc(Tclunk { fid: f }));
                r
            }
            6 => {
                let to = format!("f{}", rng.below(16)).into_bytes();
                vec![
                    c.rpc(Trenameat {
                        olddirfid: dfid,
                        oldname: name.clone(),
                        newdirfid: dfid,
                        newname: to,
                    }),
                    c.rpc(Tunlinkat {
                        dirfd: dfid,
                        name: format!("f{}", rng.below(16)).into_bytes(),
                        flags: 0,
                    }),
                    c.rpc(Tmkdir {
                        dfid,
                        name: b"sub".to_vec(),
                        mode: 0o755,
                        gid: !0,
                    }),
                    c.rpc(Tunlinkat {
                        dirfd: dfid,
                        name: b"sub".to_vec(),
                        flags: AT_REMOVEDIR,
                    }),
                ]
            }
            7 => {
                // Set a 4 KiB xattr, then read it back.
                let mut r = vec![c.rpc(Twalk {
                    fid: dfid,
                    newfid: f,
                    wnames: vec![name.clone()],
                })];
                r.push(c.rpc(Txattrcreate {
                    fid: f,
                    name: b"user.load".to_vec(),
                    attr_size: 4096,
                    flags: 0,
                }));
                r.push(c.rpc(Twrite {
                    fid: f,
                    offset: 0,
                    data: Data(data[..4096.min(data.len())].to_vec()),
                }));
                r.push(c.rpc(Tclunk { fid: f }));
                r.push(c.rpc(Twalk {
                    fid: dfid,
                    newfid: f,
                    wnames: vec![name],
                }));
                r.push(c.rpc(Txattrwalk {
                    fid: f,
                    newfid: g,
                    name: b"user.load".to_vec(),
                }));
                r.push(c.rpc(Tread {
                    fid: g,
                    offset: 0,
                    count: 8192,
                }));
                r.push(c.rpc(Tclunk { fid: g }));
                r.push(c.rpc(Tclunk { fid: f }));
                r
            }
            _ => {
                // Negative lookups, as compilers probing include paths do.
                let mut r = Vec::new();
                for i in 0..8 {
                    r.push(c.rpc(Twalk {
                        fid: dfid,
                        newfid: f,
                        wnames: vec![format!("missing{i}.h").into_bytes()],
                    }));
                }
                r
            }
        };
        ops.fetch_add(replies.len() as u64, Relaxed);
        errors.fetch_add(replies.iter().filter(|r| !ok(r)).count() as u64, Relaxed);
    }
}

/// `VmRSS` and `VmHWM` of `pid`, in KiB.
fn rss(pid: u32) -> (u64, u64) {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() {
    let o = options();
    let work = tempfile::tempdir().unwrap();
    let export = work.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let sock = work.path().join("9p.sock");
    let mut server = Command::new(&o.crossfs)
        .arg("serve")
        .arg(&export)
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .arg("--quiet")
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", o.crossfs.display()));
    let start = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "crossfs serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = server.id();
    let (idle, _) = rss(pid);
    println!("crossfs serve pid {pid}, VmRSS idle {idle} KiB; {} clients for {} s, writes up to {} bytes", o.clients, o.secs, o.max_write);
    let stop = AtomicBool::new(false);
    let (ops, errors) = (AtomicU64::new(0), AtomicU64::new(0));
    let mut peak = 0;
    std::thread::scope(|s| {
        for id in 0..o.clients {
            let (sock, stop, ops, errors) = (&sock, &stop, &ops, &errors);
            s.spawn(move || client(sock, id, stop, o.max_write, ops, errors));
        }
        let start = Instant::now();
        let mut next_report = 10;
        while start.elapsed() < Duration::from_secs(o.secs) {
            std::thread::sleep(Duration::from_millis(200));
            let (now, _) = rss(pid);
            peak = peak.max(now);
            if start.elapsed() >= Duration::from_secs(next_report) {
                println!(
                    "{:>4} s: VmRSS {now} KiB, {} replies so far",
                    next_report,
                    ops.load(Relaxed)
                );
                next_report += 10;
            }
        }
        stop.store(true, Relaxed);
    });
    let (end, hwm) = rss(pid);
    let (ops, errors) = (ops.into_inner(), errors.into_inner());
    println!(
        "{} clients, {} s: {ops} replies ({errors} Rlerror); server VmRSS idle {idle} KiB, \
         largest sampled {peak} KiB, at the end {end} KiB, VmHWM {hwm} KiB",
        o.clients, o.secs
    );
    let _ = server.kill();
    let _ = server.wait();
}
