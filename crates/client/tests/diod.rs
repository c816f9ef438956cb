//! The client against diod, a real 9P2000.L server, over loopback TCP with a temporary
//! export. These tests need `/usr/sbin/diod` and root; without them they fail and say so.

use std::collections::BTreeSet;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crossfs_client::{Client, ClientConfig, ClientError, Fid};
use crossfs_wire::{getattr, open_flags, Rmessage, Tlcreate, QID_TYPE_DIR, QID_TYPE_SYMLINK};

const DIOD: &str = "/usr/sbin/diod";
/// Long enough for anything that should happen "at once"; only a failing test waits it out.
const PATIENCE: Duration = Duration::from_secs(20);

/// A diod serving a fresh temporary directory on a loopback port; killed on drop.
struct Diod {
    child: Child,
    port: u16,
    export: tempfile::TempDir,
}

impl Diod {
    fn start() -> Diod {
        assert!(
            Path::new(DIOD).exists(),
            "these tests need diod, a 9P2000.L server, at {DIOD} (apt-get install diod)"
        );
        assert!(
            std::fs::metadata("/proc/self")
                .map(|m| m.uid() == 0)
                .unwrap_or(false),
            "these tests run diod, which needs root to serve files as their owners"
        );
        let export = tempfile::tempdir().unwrap();
        // Ask the kernel for a free port, then hand it to diod. Another process could take
        // it in between; then diod exits and we try again. The tests of this file start
        // their diods one at a time: else two could be handed one port, and the test whose
        // diod lost it would find the other's listening there and talk to it.
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new(DIOD)
                .args(["-f", "-n", "-N", "-c", "/dev/null", "-L", "stderr", "-l"])
                .arg(format!("127.0.0.1:{port}"))
                .arg("-e")
                .arg(export.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {DIOD}: {e}"));
            let deadline = Instant::now() + PATIENCE;
            while Instant::now() < deadline {
                if let Some(status) = child.try_wait().unwrap() {
                    eprintln!("diod exited at once ({status}); retrying on another port");
                    break;
                }
                if listening_on(port) {
                    return Diod {
                        child,
                        port,
                        export,
                    };
                }
                thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("diod did not start listening");
    }

    fn connect(&self, config: &ClientConfig) -> Arc<Client> {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream.set_nodelay(true).unwrap();
        let closer = stream.try_clone().unwrap();
        Client::connect_with_closer(stream.try_clone().unwrap(), stream, config, move || {
            let _ = closer.shutdown(Shutdown::Both);
        })
        .unwrap()
    }

    /// A client attached to the export; returns the root fid too.
    fn client(&self) -> (Arc<Client>, Fid) {
        let client = self.connect(&ClientConfig::default());
        let (root, qid) = client
            .attach(b"root", self.export.path().as_os_str().as_bytes(), 0)
            .unwrap();
        assert_eq!(qid.ty & QID_TYPE_DIR, QID_TYPE_DIR);
        (client, root)
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.export.path().join(rel)
    }
}

impl Drop for Diod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Bytes that differ at every offset, so a chunk read from the wrong place shows.
fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn walk_new(client: &Client, from: Fid, names: &[&[u8]]) -> Result<Fid, ClientError> {
    let fid = client.alloc_fid();
    match client.walk(from, fid, names) {
        Ok(qids) if qids.len() == names.len() => Ok(fid),
        Ok(_) => {
            client.free_fid(fid);
            Err(ClientError::Errno(libc::ENOENT))
        }
        Err(e) => {
            client.free_fid(fid);
            Err(e)
        }
    }
}

#[test]
fn msize_is_the_smallest_of_every_layer() {
    let diod = Diod::start();
    let client = diod.connect(&ClientConfig::default());
    let n = client.negotiation();
    assert_eq!(
        (n.requested, n.transport_max, n.server, n.effective),
        (crossfs_wire::DEFAULT_MSIZE, u32::MAX, 65536, 65536),
        "diod caps msize at 64 KiB"
    );
    assert_eq!(client.msize(), 65536);
    assert_eq!(client.max_io(), 65536 - 24);
    // diod answers "9P2000.L.crossfs" with Rlerror EIO: the client asks again for plain
    // 9P2000.L on the same connection.
    assert!(!n.extensions);
    let counts = client.counters();
    assert_eq!(counts.messages["Tversion"].count, 2);
    assert_eq!(counts.messages["Rlerror"].count, 1);
    assert_eq!(counts.messages["Rversion"].count, 1);
    let plain = diod.connect(&ClientConfig {
        extensions: false,
        ..ClientConfig::default()
    });
    assert_eq!(plain.counters().messages["Tversion"].count, 1);

    let small = diod.connect(&ClientConfig {
        msize: 8192,
        ..ClientConfig::default()
    });
    assert_eq!(small.negotiation().effective, 8192);
    assert_eq!(small.negotiation().server, 8192);
}

#[test]
fn attach_walk_getattr_and_counters() {
    let diod = Diod::start();
    std::fs::create_dir_all(diod.path("a/b")).unwrap();
    std::fs::write(diod.path("a/b/file"), b"hello").unwrap();
    let (client, root) = diod.client();
    let before = client.counters();

    let f = client.alloc_fid();
    let qids = client.walk(root, f, &[b"a", b"b", b"file"]).unwrap();
    assert_eq!(qids.len(), 3);
    assert_eq!(qids[0].ty & QID_TYPE_DIR, QID_TYPE_DIR);
    assert_eq!(qids[2].ty & QID_TYPE_DIR, 0);
    let attr = client.getattr(f, getattr::BASIC).unwrap();
    assert_eq!(attr.size, 5);
    assert_eq!(attr.mode & libc::S_IFMT, libc::S_IFREG);
    assert_eq!(attr.qid, qids[2]);

    // A partial walk: one qid, and the new fid is not bound.
    let g = client.alloc_fid();
    let qids = client.walk(root, g, &[b"a", b"missing", b"x"]).unwrap();
    assert_eq!(qids.len(), 1);
    assert!(matches!(client.getattr(g, 1), Err(ClientError::Errno(_))));

    // A missing first name is an error, with the server's errno.
    assert_eq!(
        client.walk(root, g, &[b"missing"]),
        Err(ClientError::Errno(libc::ENOENT))
    );
    assert_eq!(ClientError::Errno(libc::ENOENT).errno(), libc::ENOENT);

    let after = client.counters();
    let delta = |name: &str| {
        let now = after.messages.get(name).copied().unwrap_or_default();
        let then = before.messages.get(name).copied().unwrap_or_default();
        (now.count - then.count, now.errors - then.errors)
    };
    assert_eq!(delta("Twalk"), (3, 1));
    assert_eq!(delta("Rwalk"), (2, 0));
    assert_eq!(delta("Rlerror"), (2, 0));
    assert_eq!(delta("Tgetattr"), (2, 1));
    assert_eq!(delta("Rgetattr"), (1, 0));
    assert_eq!(after.messages["Tattach"].count, 1);
    assert!(after.bytes_in > before.bytes_in && after.bytes_out > before.bytes_out);
}

#[test]
fn walks_longer_than_16_names_are_split() {
    let diod = Diod::start();
    let names: Vec<String> = (0..20).map(|i| format!("d{i}")).collect();
    std::fs::create_dir_all(diod.path(&names.join("/"))).unwrap();
    let names: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
    let (client, root) = diod.client();

    let before = client
        .counters()
        .messages
        .get("Twalk")
        .map_or(0, |c| c.count);
    let f = client.alloc_fid();
    let qids = client.walk(root, f, &names).unwrap();
    assert_eq!(qids.len(), 20);
    assert_eq!(client.counters().messages["Twalk"].count - before, 2);
    let distinct: BTreeSet<u64> = qids.iter().map(|q| q.path).collect();
    assert_eq!(distinct.len(), 20);
    assert_eq!(client.getattr(f, getattr::BASIC).unwrap().qid, qids[19]);

    // Stops inside the second Twalk: 18 qids, newfid left unbound.
    let g = client.alloc_fid();
    let mut partial = names[..18].to_vec();
    partial.extend_from_slice(&[b"missing", b"x"]);
    assert_eq!(client.walk(root, g, &partial).unwrap().len(), 18);
    assert!(matches!(client.getattr(g, 1), Err(ClientError::Errno(_))));

    // Stops at the first name of the second Twalk (the server answers Rlerror to that one).
    let mut partial = names[..16].to_vec();
    partial.push(b"missing");
    assert_eq!(client.walk(root, g, &partial).unwrap().len(), 16);
    assert!(matches!(client.getattr(g, 1), Err(ClientError::Errno(_))));

    assert_eq!(
        client.walk(f, f, &names),
        Err(ClientError::Errno(libc::EINVAL))
    );
}

#[test]
fn a_mebibyte_round_trips_with_many_requests_in_flight() {
    let diod = Diod::start();
    let (client, root) = diod.client();
    let max_io = client.max_io() as usize;
    let data = Arc::new(pattern(1 << 20));

    // Create and open "big" through a clone of the root.
    let file = walk_new(&client, root, &[]).unwrap();
    let created = client
        .call(
            Tlcreate {
                fid: file,
                name: b"big".to_vec(),
                flags: open_flags::RDWR,
                mode: 0o644,
                gid: 0,
            }
            .into(),
        )
        .unwrap();
    assert!(matches!(created, Rmessage::Lcreate(_)));

    // Every chunk's write is in flight before the first reply is awaited.
    let (tx, rx) = mpsc::channel();
    let chunks: Vec<(usize, usize)> = (0..data.len())
        .step_by(max_io)
        .map(|off| (off, (off + max_io).min(data.len())))
        .collect();
    for &(start, end) in &chunks {
        let tx = tx.clone();
        client.write_async(
            file,
            start as u64,
            &data[start..end],
            Box::new(move |r| tx.send((end - start, r)).unwrap()),
        );
    }
    for _ in &chunks {
        let (len, written) = rx.recv_timeout(PATIENCE).expect("a write hung");
        assert_eq!(written, Ok(len as u32));
    }
    client.clunk(file).unwrap();
    assert_eq!(std::fs::read(diod.path("big")).unwrap(), *data);
    assert_eq!(
        client.counters().messages["Twrite"].count,
        chunks.len() as u64
    );

    // 32 reads at once from 4 threads, each checked against what was written.
    let file = walk_new(&client, root, &[b"big"]).unwrap();
    client.lopen(file, open_flags::RDONLY).unwrap();
    let barrier = Arc::new(Barrier::new(4));
    let (tx, rx) = mpsc::channel();
    for t in 0..4usize {
        let (client, data, barrier, tx) =
            (client.clone(), data.clone(), barrier.clone(), tx.clone());
        thread::spawn(move || {
            barrier.wait();
            for i in 0..8usize {
                // Overlapping, unaligned offsets spread over the file.
                let offset = ((t * 8 + i) * 32_771) % data.len();
                let tx = tx.clone();
                client.read_async(
                    file,
                    offset as u64,
                    max_io as u32,
                    Box::new(move |r| tx.send((offset, r)).unwrap()),
                );
            }
        });
    }
    for _ in 0..32 {
        let (offset, got) = rx.recv_timeout(PATIENCE).expect("a read hung");
        let got = got.unwrap();
        let want = &data[offset..(offset + max_io).min(data.len())];
        assert!(got == want, "read at {offset} returned the wrong bytes");
    }
    assert_eq!(client.read(file, 1 << 20, 100), Ok(Vec::new()), "EOF");
    assert_eq!(client.counters().messages["Rread"].count, 33);
    client.clunk(file).unwrap();
}

#[test]
fn readdir_lists_every_entry_across_calls() {
    let diod = Diod::start();
    std::fs::create_dir(diod.path("dir")).unwrap();
    let mut want = BTreeSet::new();
    for i in 0..100 {
        let name = format!("entry-with-a-longish-name-{i:03}");
        std::fs::write(diod.path(&format!("dir/{name}")), b"").unwrap();
        want.insert(name.into_bytes());
    }
    std::fs::create_dir(diod.path("dir/sub")).unwrap();
    want.insert(b"sub".to_vec());
    let (client, root) = diod.client();
    let dir = walk_new(&client, root, &[b"dir"]).unwrap();
    client.lopen(dir, open_flags::RDONLY).unwrap();

    let mut got = BTreeSet::new();
    let mut offset = 0;
    let mut calls = 0;
    loop {
        // A small count forces several Treaddirs, each continuing from the last cookie.
        let entries = client.readdir(dir, offset, 1024).unwrap();
        let Some(last) = entries.last() else { break };
        offset = last.offset;
        calls += 1;
        for e in entries {
            if e.name == b"sub" {
                assert_eq!(e.ty, libc::DT_DIR);
                assert_eq!(e.qid.ty & QID_TYPE_DIR, QID_TYPE_DIR);
            }
            if e.name != b"." && e.name != b".." {
                assert!(got.insert(e.name), "entry listed twice");
            }
        }
    }
    assert_eq!(got, want);
    assert!(calls > 1);
    client.clunk(dir).unwrap();
}

#[test]
fn readlink_returns_the_target() {
    let diod = Diod::start();
    std::os::unix::fs::symlink("some/where/else", diod.path("link")).unwrap();
    let (client, root) = diod.client();
    let f = client.alloc_fid();
    let qids = client.walk(root, f, &[b"link"]).unwrap();
    assert_eq!(qids[0].ty & QID_TYPE_SYMLINK, QID_TYPE_SYMLINK);
    assert_eq!(client.readlink(f).unwrap(), b"some/where/else");
}

#[test]
fn clunked_fids_are_recycled() {
    let diod = Diod::start();
    let (client, root) = diod.client();
    let f = walk_new(&client, root, &[]).unwrap();
    client.clunk(f).unwrap();
    assert_eq!(client.alloc_fid(), f, "recycled after Rclunk");

    // The fid is back even when the clunk fails (the server forgets it either way).
    assert!(matches!(client.clunk(f), Err(ClientError::Errno(_))));
    let g = client.alloc_fid();
    assert_eq!(g, f);

    // Fire-and-forget: back in the pool once the Rclunk has been read.
    assert_eq!(client.walk(root, g, &[]).unwrap().len(), 0);
    let seen = client.counters().messages["Rclunk"].count;
    client.clunk_async(g);
    let deadline = Instant::now() + PATIENCE;
    while client.counters().messages["Rclunk"].count == seen {
        assert!(Instant::now() < deadline, "no Rclunk");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(client.alloc_fid(), g);
}

#[test]
fn server_errors_map_to_errno() {
    let diod = Diod::start();
    std::fs::create_dir(diod.path("dir")).unwrap();
    let (client, root) = diod.client();
    assert_eq!(
        walk_new(&client, root, &[b"nope"]),
        Err(ClientError::Errno(libc::ENOENT))
    );
    let dir = walk_new(&client, root, &[b"dir"]).unwrap();
    assert_eq!(
        client.lopen(dir, open_flags::WRONLY),
        Err(ClientError::Errno(libc::EISDIR))
    );
    // A Rlerror does not hurt the connection.
    assert!(client.is_connected());
    assert!(client.getattr(dir, getattr::BASIC).is_ok());
    let counts = client.counters();
    assert_eq!(counts.messages["Twalk"].errors, 1);
    assert_eq!(counts.messages["Tlopen"].errors, 1);
}

#[test]
fn killing_the_server_fails_pending_and_later_calls() {
    let mut diod = Diod::start();
    std::fs::write(diod.path("f"), pattern(100_000)).unwrap();
    let (client, root) = diod.client();
    let file = walk_new(&client, root, &[b"f"]).unwrap();
    client.lopen(file, open_flags::RDONLY).unwrap();

    // Four threads keep requests in flight until the connection dies.
    let (tx, rx) = mpsc::channel();
    let progress: Arc<[std::sync::atomic::AtomicU64; 4]> = Arc::new(Default::default());
    for t in 0..4 {
        let (client, tx, progress) = (client.clone(), tx.clone(), progress.clone());
        thread::spawn(move || {
            let mut calls = 0u64;
            let end = loop {
                calls += 1;
                progress[t].store(calls, std::sync::atomic::Ordering::Relaxed);
                let r = if t % 2 == 0 {
                    client.getattr(file, getattr::BASIC).map(drop)
                } else {
                    client.read(file, 0, 4096).map(drop)
                };
                if let Err(e) = r {
                    break e;
                }
            };
            tx.send((calls, end)).unwrap();
        });
    }
    // Let every one of them get going, then pull the plug.
    let deadline = Instant::now() + PATIENCE;
    while progress
        .iter()
        .any(|c| c.load(std::sync::atomic::Ordering::Relaxed) < 3)
    {
        assert!(Instant::now() < deadline, "no progress before the kill");
        thread::sleep(Duration::from_millis(1));
    }
    diod.child.kill().unwrap();
    diod.child.wait().unwrap();
    for _ in 0..4 {
        let (calls, end) = rx.recv_timeout(PATIENCE).expect("a call hung");
        assert!(calls > 1);
        assert!(matches!(end, ClientError::Disconnected(_)), "{end:?}");
    }
    assert!(!client.is_connected());
    assert!(matches!(
        client.getattr(root, 1),
        Err(ClientError::Disconnected(_))
    ));
    let (tx, rx) = mpsc::channel();
    client.write_async(file, 0, b"x", Box::new(move |r| tx.send(r).unwrap()));
    assert!(matches!(
        rx.recv_timeout(PATIENCE).unwrap(),
        Err(ClientError::Disconnected(_))
    ));
}

/// Whether something listens on 127.0.0.1:`port`, from `/proc/net/tcp`: probing diod with a
/// connection would be a client disconnecting, after which diod 1.0.24 sometimes segfaults.
fn listening_on(port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|table| {
        table.lines().skip(1).any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&want.as_str()) && fields.get(3) == Some(&"0A")
        })
    })
}
