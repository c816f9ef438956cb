//! The client against a hand-written fake server over a socket pair: the error paths a real
//! server will not produce on demand (dying mid-call, unknown tags, oversized replies, wrong
//! reply types), back-pressure, and requests made from completions.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use crossfs_client::{Client, ClientConfig, ClientError};
use crossfs_wire::{
    decode_tframe, Data, Fid, Rclunk, Rgetattr, Rlerror, Rmessage, Rread, Rversion, Rwalk, Tag,
    Tframe, Tmessage, NOTAG,
};

/// Long enough for anything that should happen "at once"; only a failing test waits it out.
const PATIENCE: Duration = Duration::from_secs(10);

/// The server end of a socket pair, speaking frames by hand.
struct Fake {
    stream: UnixStream,
}

impl Fake {
    fn read_request(&mut self) -> Option<Tframe> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).ok()?;
        let mut frame = size.to_vec();
        frame.resize(u32::from_le_bytes(size) as usize, 0);
        self.stream.read_exact(&mut frame[4..]).ok()?;
        Some(decode_tframe(&frame).expect("client sent a bad frame"))
    }

    fn reply(&mut self, tag: Tag, msg: Rmessage) {
        let mut out = Vec::new();
        msg.encode(tag, &mut out);
        self.stream.write_all(&out).unwrap();
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Answers Tversion with `msize`.
    fn handshake(&mut self, msize: u32) {
        let f = self.read_request().unwrap();
        assert_eq!(f.tag, NOTAG);
        let Ok(Tmessage::Version(v)) = f.msg else {
            panic!("expected Tversion, got {f:?}")
        };
        let extension = v.version == crossfs_wire::VERSION_CROSSFS;
        self.reply(
            NOTAG,
            Rmessage::Version(Rversion {
                msize: msize.min(v.msize),
                version: v.version,
            }),
        );
        if extension {
            // As a crossfs that predates Tfeatures answers it.
            let f = self.read_request().unwrap();
            let Ok(Tmessage::Features(_)) = f.msg else {
                panic!("expected Tfeatures, got {f:?}")
            };
            self.reply(
                f.tag,
                Rmessage::Lerror(Rlerror {
                    ecode: libc::EOPNOTSUPP as u32,
                }),
            );
        }
    }
}

/// A client connected to a fake that has answered Tversion with `msize`.
fn pair(config: &ClientConfig, msize: u32) -> (Arc<Client>, Fake) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let server = thread::spawn(move || {
        let mut fake = Fake { stream: theirs };
        fake.handshake(msize);
        fake
    });
    let closer = ours.try_clone().unwrap();
    let client = Client::connect_with_closer(ours.try_clone().unwrap(), ours, config, move || {
        let _ = closer.shutdown(std::net::Shutdown::Both);
    })
    .unwrap();
    (client, server.join().unwrap())
}

fn getattr_reply() -> Rmessage {
    Rmessage::Getattr(Rgetattr {
        size: 42,
        ..Rgetattr::default()
    })
}

/// Starts `n` blocking getattr calls on their own threads; their results arrive on the
/// returned channel.
fn pending_getattrs(client: &Arc<Client>, n: usize) -> mpsc::Receiver<Result<u64, ClientError>> {
    let (tx, rx) = mpsc::channel();
    for i in 0..n {
        let client = client.clone();
        let tx = tx.clone();
        thread::spawn(move || {
            let _ = tx.send(client.getattr(Fid(i as u32), 0x7ff).map(|a| a.size));
        });
    }
    rx
}

/// Error events seen by a process-wide subscriber: (level, reason field).
fn logged_errors() -> &'static Mutex<Vec<String>> {
    static LOG: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    LOG.get_or_init(|| {
        tracing::subscriber::set_global_default(ErrorRecorder).unwrap();
        Mutex::new(Vec::new())
    })
}

/// Records the `reason` of every ERROR event. Tests run in parallel, so each test looks for
/// its own unique reason.
struct ErrorRecorder;

impl tracing::Subscriber for ErrorRecorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() != tracing::Level::ERROR {
            return;
        }
        struct Reason(String);
        impl tracing::field::Visit for Reason {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "reason" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut reason = Reason(String::new());
        event.record(&mut reason);
        logged_errors().lock().unwrap().push(reason.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn errors_mentioning(needle: &str) -> usize {
    logged_errors()
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.contains(needle))
        .count()
}

#[test]
fn pending_calls_fail_when_the_server_dies_and_later_calls_too() {
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    let results = pending_getattrs(&client, 8);
    for _ in 0..8 {
        fake.read_request().unwrap();
    }
    assert_eq!(client.in_flight(), 8);
    drop(fake);
    for _ in 0..8 {
        let r = results.recv_timeout(PATIENCE).expect("a call hung");
        assert!(matches!(r, Err(ClientError::Disconnected(_))), "{r:?}");
    }
    assert!(!client.is_connected());
    assert!(matches!(
        client.getattr(Fid(0), 1),
        Err(ClientError::Disconnected(_))
    ));
    let (tx, rx) = mpsc::channel();
    client.read_async(Fid(0), 0, 10, Box::new(move |r| tx.send(r).unwrap()));
    assert!(matches!(
        rx.recv_timeout(PATIENCE).unwrap(),
        Err(ClientError::Disconnected(_))
    ));
    assert_eq!(ClientError::Disconnected(String::new()).errno(), libc::EIO);
}

#[test]
fn a_reply_with_an_unknown_tag_kills_the_connection_and_is_logged_once() {
    logged_errors();
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    let results = pending_getattrs(&client, 3);
    for _ in 0..3 {
        fake.read_request().unwrap();
    }
    fake.reply(Tag(177), getattr_reply());
    for _ in 0..3 {
        let r = results.recv_timeout(PATIENCE).expect("a call hung");
        let Err(ClientError::Disconnected(why)) = r else {
            panic!("{r:?}")
        };
        assert!(why.contains("unknown tag 177"), "{why}");
    }
    assert!(matches!(
        client.clunk(Fid(1)),
        Err(ClientError::Disconnected(_))
    ));
    drop(fake);
    client.shutdown();
    assert_eq!(errors_mentioning("unknown tag 177"), 1);
}

#[test]
fn a_reply_as_large_as_msize_kills_the_connection() {
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    let results = pending_getattrs(&client, 1);
    let req = fake.read_request().unwrap();
    // Only the size field is needed: the client must refuse before reading on.
    let mut frame = 8192u32.to_le_bytes().to_vec();
    frame.extend_from_slice(&[25, req.tag.0 as u8, (req.tag.0 >> 8) as u8]);
    fake.send_raw(&frame);
    let r = results.recv_timeout(PATIENCE).expect("the call hung");
    let Err(ClientError::Disconnected(why)) = r else {
        panic!("{r:?}")
    };
    assert!(why.contains("8192"), "{why}");
}

#[test]
fn a_reply_of_the_wrong_type_fails_only_its_call() {
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    let results = pending_getattrs(&client, 1);
    let req = fake.read_request().unwrap();
    fake.reply(req.tag, Rmessage::Clunk(Rclunk {}));
    let r = results.recv_timeout(PATIENCE).unwrap();
    assert!(matches!(r, Err(ClientError::Protocol(_))), "{r:?}");
    assert!(client.is_connected());

    let results = pending_getattrs(&client, 1);
    let req = fake.read_request().unwrap();
    fake.reply(req.tag, getattr_reply());
    assert_eq!(results.recv_timeout(PATIENCE).unwrap(), Ok(42));
}

#[test]
fn rlerror_maps_to_errno_and_zero_to_eio() {
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    for (ecode, expect) in [(libc::ENOENT as u32, libc::ENOENT), (0, libc::EIO)] {
        let results = pending_getattrs(&client, 1);
        let req = fake.read_request().unwrap();
        fake.reply(req.tag, Rmessage::Lerror(Rlerror { ecode }));
        let r = results.recv_timeout(PATIENCE).unwrap();
        assert_eq!(r, Err(ClientError::Errno(expect)));
    }
    assert_eq!(client.counters().messages["Tgetattr"].errors, 2);
}

#[test]
fn shutdown_fails_pending_calls_and_runs_the_closer() {
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    let results = pending_getattrs(&client, 2);
    fake.read_request().unwrap();
    fake.read_request().unwrap();
    client.shutdown();
    for _ in 0..2 {
        assert!(matches!(
            results.recv_timeout(PATIENCE).unwrap(),
            Err(ClientError::Disconnected(_))
        ));
    }
    // The closer shut the socket down: the fake sees end of stream.
    assert!(fake.read_request().is_none());
    assert!(!client.is_connected());
}

/// Waits run by the hook of `a_call_runs_its_threads_hook_before_it_waits`.
static WAITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn count_wait() {
    WAITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// A thread's hook runs once its blocking call is written and before the reply comes, and
/// a thread that set none runs nothing.
#[test]
fn a_call_runs_its_threads_hook_before_it_waits() {
    use std::sync::atomic::Ordering::SeqCst;
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    let clunk = |fid| Tmessage::Clunk(crossfs_wire::Tclunk { fid: Fid(fid) });
    let hooked = {
        let client = client.clone();
        thread::spawn(move || {
            crossfs_client::set_before_wait(Some(count_wait));
            client.call(clunk(1)).map(|_| ())
        })
    };
    let f = fake.read_request().unwrap();
    let deadline = std::time::Instant::now() + PATIENCE;
    while WAITS.load(SeqCst) == 0 && std::time::Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(WAITS.load(SeqCst), 1, "the hook ran before the reply");
    fake.reply(f.tag, Rmessage::Clunk(Rclunk {}));
    assert_eq!(hooked.join().unwrap(), Ok(()));
    let plain = {
        let client = client.clone();
        thread::spawn(move || client.call(clunk(2)).map(|_| ()))
    };
    let f = fake.read_request().unwrap();
    fake.reply(f.tag, Rmessage::Clunk(Rclunk {}));
    assert_eq!(plain.join().unwrap(), Ok(()));
    assert_eq!(WAITS.load(SeqCst), 1);
}

#[test]
fn callers_wait_for_a_free_tag() {
    let config = ClientConfig {
        max_in_flight: 2,
        ..ClientConfig::default()
    };
    let (client, mut fake) = pair(&config, 8192);
    let results = pending_getattrs(&client, 3);
    let first = fake.read_request().unwrap();
    let second = fake.read_request().unwrap();
    assert_ne!(first.tag, second.tag);
    // The third caller is blocked on the tag table, not on the socket.
    thread::sleep(Duration::from_millis(100));
    assert_eq!(client.in_flight(), 2);
    fake.reply(first.tag, getattr_reply());
    let third = fake.read_request().unwrap();
    assert_eq!(third.tag, first.tag, "the freed tag is the only one");
    fake.reply(second.tag, getattr_reply());
    fake.reply(third.tag, getattr_reply());
    for _ in 0..3 {
        assert_eq!(results.recv_timeout(PATIENCE).unwrap(), Ok(42));
    }
}

#[test]
fn completions_may_issue_requests_but_not_block() {
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    let (blocked_tx, blocked_rx) = mpsc::channel();
    let (read_tx, read_rx) = mpsc::channel();
    let c = client.clone();
    client.call_async(
        Tmessage::Clunk(crossfs_wire::Tclunk { fid: Fid(5) }),
        Box::new(move |r| {
            assert!(r.is_ok());
            // A blocking call here would wait for this very thread to read its reply.
            blocked_tx.send(c.getattr(Fid(1), 1).map(|_| ())).unwrap();
            c.read_async(Fid(2), 0, 5, Box::new(move |r| read_tx.send(r).unwrap()));
        }),
    );
    let req = fake.read_request().unwrap();
    fake.reply(req.tag, Rmessage::Clunk(Rclunk {}));
    assert_eq!(
        blocked_rx.recv_timeout(PATIENCE).unwrap(),
        Err(ClientError::BlockingOnReaderThread)
    );
    let req = fake.read_request().unwrap();
    assert!(matches!(req.msg, Ok(Tmessage::Read(_))));
    fake.reply(
        req.tag,
        Rmessage::Read(Rread {
            data: Data(b"hello".to_vec()),
        }),
    );
    assert_eq!(
        read_rx.recv_timeout(PATIENCE).unwrap(),
        Ok(b"hello".to_vec())
    );
}

#[test]
fn a_request_from_a_completion_queues_when_every_tag_is_taken() {
    let config = ClientConfig {
        max_in_flight: 2,
        ..ClientConfig::default()
    };
    let (client, mut fake) = pair(&config, 8192);
    let results = pending_getattrs(&client, 1);
    let blocker = fake.read_request().unwrap();
    let (tx, rx) = mpsc::channel();
    let c = client.clone();
    client.call_async(
        Tmessage::Clunk(crossfs_wire::Tclunk { fid: Fid(5) }),
        Box::new(move |_| {
            // The clunk's tag is free again: the first walk takes it; the getattr holds the
            // other, so the second walk must queue (this thread cannot wait for a tag: only
            // it frees them).
            for newfid in [9, 10] {
                let tx = tx.clone();
                let walk = crossfs_wire::Twalk {
                    fid: Fid(0),
                    newfid: Fid(newfid),
                    wnames: vec![],
                };
                c.call_async(
                    walk.into(),
                    Box::new(move |r| tx.send((newfid, r)).unwrap()),
                );
            }
        }),
    );
    let clunk = fake.read_request().unwrap();
    fake.reply(clunk.tag, Rmessage::Clunk(Rclunk {}));
    for newfid in [9, 10] {
        let walk = fake.read_request().unwrap();
        let Ok(Tmessage::Walk(w)) = &walk.msg else {
            panic!("{walk:?}")
        };
        assert_eq!(w.newfid, Fid(newfid), "requests go out in order");
        assert_eq!(walk.tag, clunk.tag, "the queued walk reuses the freed tag");
        assert_eq!(client.in_flight(), 2);
        fake.reply(walk.tag, Rmessage::Walk(Rwalk { wqids: vec![] }));
        assert_eq!(
            rx.recv_timeout(PATIENCE).unwrap(),
            (newfid, Ok(Rmessage::Walk(Rwalk { wqids: vec![] })))
        );
    }
    fake.reply(blocker.tag, getattr_reply());
    assert_eq!(results.recv_timeout(PATIENCE).unwrap(), Ok(42));
}

#[test]
fn a_completion_never_blocks_reading_in_a_write() {
    // A server that writes all its replies before it reads another request, as a server
    // does once its queue of requests is full: the thread that reads replies must keep
    // reading while a request made from a completion waits to be written.
    let (client, mut fake) = pair(&ClientConfig::default(), 1 << 20);
    const REPLIES: usize = 16;
    const REPLY: usize = 64 * 1024;
    let (tx, rx) = mpsc::channel();
    let c = client.clone();
    let written = tx.clone();
    client.read_async(
        Fid(1),
        0,
        1,
        Box::new(move |r| {
            assert!(r.is_ok());
            // Larger than the socket's buffers: the write blocks until the server reads.
            let big = vec![7u8; 900 * 1024];
            let w = written.clone();
            c.write_async(
                Fid(1),
                0,
                &big,
                Box::new(move |r| w.send(r.map(u64::from)).unwrap()),
            );
        }),
    );
    for _ in 0..REPLIES {
        let tx = tx.clone();
        client.read_async(
            Fid(1),
            0,
            REPLY as u32,
            Box::new(move |r| tx.send(r.map(|d| d.len() as u64)).unwrap()),
        );
    }
    // The server on a thread of its own, so that a deadlock fails the test, not hangs it.
    thread::spawn(move || {
        let first = fake.read_request().unwrap();
        let reads: Vec<Tframe> = (0..REPLIES).map(|_| fake.read_request().unwrap()).collect();
        fake.reply(
            first.tag,
            Rmessage::Read(Rread {
                data: Data(vec![1]),
            }),
        );
        // 1 MiB of replies: more than the socket holds, so this waits for the client to read.
        for r in &reads {
            fake.reply(
                r.tag,
                Rmessage::Read(Rread {
                    data: Data(vec![2; REPLY]),
                }),
            );
        }
        let write = fake.read_request().unwrap();
        assert!(matches!(write.msg, Ok(Tmessage::Write(_))), "{write:?}");
        fake.reply(
            write.tag,
            Rmessage::Write(crossfs_wire::Rwrite { count: 900 * 1024 }),
        );
    });
    for _ in 0..REPLIES {
        let r = rx
            .recv_timeout(PATIENCE)
            .expect("replies stopped: deadlock");
        assert_eq!(r, Ok(REPLY as u64));
    }
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), Ok(900 * 1024));
}

#[test]
fn oversized_requests_are_refused_before_sending() {
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    assert_eq!(client.max_io(), 8192 - 24);
    let data = vec![0u8; 8192];
    let r = client.write(Fid(1), 0, &data);
    assert!(matches!(r, Err(ClientError::TooLarge { .. })), "{r:?}");
    let r = client.read(Fid(1), 0, 8192);
    assert!(matches!(r, Err(ClientError::TooLarge { .. })), "{r:?}");
    let r = client.walk(Fid(0), Fid(1), &[&[b'x'; 9000]]);
    assert!(matches!(r, Err(ClientError::TooLarge { .. })), "{r:?}");
    // Nothing reached the server, and the connection is fine.
    assert!(client.is_connected());
    assert_eq!(client.counters().messages.get("Twrite"), None);
    let results = pending_getattrs(&client, 1);
    let req = fake.read_request().unwrap();
    assert!(matches!(req.msg, Ok(Tmessage::Getattr(_))));
    fake.reply(req.tag, getattr_reply());
    assert_eq!(results.recv_timeout(PATIENCE).unwrap(), Ok(42));
}

#[test]
fn version_negotiation_takes_the_smallest_limit() {
    let config = ClientConfig {
        msize: 1 << 20,
        transport_max: 256 * 1024,
        max_in_flight: 4,
        extensions: true,
    };
    let (client, _fake) = pair(&config, u32::MAX);
    let n = client.negotiation();
    assert_eq!((n.requested, n.transport_max), (1 << 20, 256 * 1024));
    // The fake echoes min(its max, what was asked): the client asked no more than the
    // transport carries.
    assert_eq!((n.server, n.effective), (256 * 1024, 256 * 1024));
}

#[test]
fn a_server_that_is_not_9p2000l_is_refused() {
    let (ours, mut theirs) = UnixStream::pair().unwrap();
    let server = thread::spawn(move || {
        let mut fake = Fake {
            stream: theirs.try_clone().unwrap(),
        };
        // Asked for the crossfs extension, then (after "unknown") for plain 9P2000.L.
        let mut asked = Vec::new();
        for _ in 0..2 {
            let f = fake.read_request().unwrap();
            let Ok(Tmessage::Version(v)) = f.msg else {
                panic!("expected Tversion, got {f:?}")
            };
            asked.push(v.version);
            fake.reply(
                NOTAG,
                Rmessage::Version(Rversion {
                    msize: 8192,
                    version: b"unknown".to_vec(),
                }),
            );
        }
        assert_eq!(asked, [&b"9P2000.L.crossfs"[..], b"9P2000.L"]);
        let mut rest = Vec::new();
        let _ = theirs.read_to_end(&mut rest);
    });
    let r = Client::connect(ours.try_clone().unwrap(), ours, &ClientConfig::default());
    assert!(matches!(r, Err(ClientError::Protocol(_))), "{r:?}");
    drop(r);
    server.join().unwrap();
}

#[test]
fn a_tiny_msize_is_refused() {
    let (ours, _theirs) = UnixStream::pair().unwrap();
    let config = ClientConfig {
        msize: 1000,
        ..ClientConfig::default()
    };
    let r = Client::connect(ours.try_clone().unwrap(), ours, &config);
    assert!(matches!(r, Err(ClientError::InvalidConfig(_))), "{r:?}");
}

/// A getattr reply whose size names the request it answers.
fn sized_getattr(size: u64) -> Rmessage {
    let Rmessage::Getattr(mut a) = getattr_reply() else {
        unreachable!()
    };
    a.size = size;
    Rmessage::Getattr(a)
}

#[test]
fn replies_in_any_order_reach_blocking_and_async_callers() {
    // Several blocking callers (one reads the socket, the others sleep until it hands the
    // reading on) and an async request, answered last-first: each reply must reach its own
    // caller, whoever reads it.
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    let n = 5;
    let results = pending_getattrs(&client, n);
    let (async_tx, async_rx) = mpsc::channel();
    client.call_async(
        Tmessage::Getattr(crossfs_wire::Tgetattr {
            fid: Fid(100),
            request_mask: 1,
        }),
        Box::new(move |r| async_tx.send(r).unwrap()),
    );
    let mut requests: Vec<Tframe> = (0..=n).map(|_| fake.read_request().unwrap()).collect();
    requests.reverse();
    for r in &requests {
        let Ok(Tmessage::Getattr(g)) = &r.msg else {
            panic!("expected Tgetattr, got {r:?}")
        };
        fake.reply(r.tag, sized_getattr(u64::from(g.fid.0)));
    }
    let mut sizes: Vec<u64> = (0..n)
        .map(|_| results.recv_timeout(PATIENCE).unwrap().unwrap())
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, (0..n as u64).collect::<Vec<_>>());
    let Ok(Rmessage::Getattr(a)) = async_rx.recv_timeout(PATIENCE).unwrap() else {
        panic!("async getattr failed")
    };
    assert_eq!(a.size, 100);
    assert_eq!(client.in_flight(), 0);
}

#[test]
fn a_blocking_caller_reading_its_own_reply_sees_the_server_die() {
    let (client, fake) = pair(&ClientConfig::default(), 8192);
    let results = pending_getattrs(&client, 1);
    let mut fake = fake;
    fake.read_request().unwrap();
    drop(fake);
    assert!(matches!(
        results.recv_timeout(PATIENCE).unwrap(),
        Err(ClientError::Disconnected(_))
    ));
    // The async path still reports the loss too.
    let (tx, rx) = mpsc::channel();
    client.call_async(
        Tmessage::Clunk(crossfs_wire::Tclunk { fid: Fid(1) }),
        Box::new(move |r| tx.send(r).unwrap()),
    );
    assert!(matches!(
        rx.recv_timeout(PATIENCE).unwrap(),
        Err(ClientError::Disconnected(_))
    ));
}

fn getattr_of(fid: u32) -> Tmessage {
    Tmessage::Getattr(crossfs_wire::Tgetattr {
        fid: Fid(fid),
        request_mask: 1,
    })
}

fn fid_of(frame: &Tframe) -> u32 {
    let Ok(Tmessage::Getattr(g)) = &frame.msg else {
        panic!("expected Tgetattr, got {frame:?}")
    };
    g.fid.0
}

/// Whether the fake has a request to read within a tenth of a second (a request that
/// should not be written yet would be there at once).
fn request_waiting(fake: &Fake) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(&fake.stream, PollFlags::IN)];
    let tenth = Timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    };
    poll(&mut fds, Some(&tenth)).unwrap() > 0
}

#[test]
fn sends_held_go_out_in_order_once_the_holder_is_done_or_waits() {
    let (client, mut fake) = pair(&ClientConfig::default(), 8192);
    let (done_tx, done_rx) = mpsc::channel();
    let answered = move |tx: mpsc::Sender<u32>, fid: u32| -> Box<dyn FnOnce(_) + Send> {
        Box::new(move |r: Result<Rmessage, ClientError>| {
            assert!(r.is_ok(), "{r:?}");
            tx.send(fid).unwrap();
        })
    };
    // Held until the closure returns: nothing on the wire before, all three after, in order.
    crossfs_client::holding_sends(|| {
        for fid in 1..=3 {
            client.call_async(getattr_of(fid), answered(done_tx.clone(), fid));
        }
        assert!(!request_waiting(&fake), "a held request was written early");
    });
    let first: Vec<Tframe> = (0..3).map(|_| fake.read_request().unwrap()).collect();
    assert_eq!(first.iter().map(fid_of).collect::<Vec<_>>(), [1, 2, 3]);

    // A request another thread writes meanwhile goes after the held one, and a thread
    // about to wait writes what it holds.
    let (asked_tx, asked_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = {
        let (client, done_tx) = (client.clone(), done_tx.clone());
        thread::spawn(move || {
            crossfs_client::holding_sends(|| {
                client.call_async(getattr_of(4), answered(done_tx.clone(), 4));
                asked_tx.send(()).unwrap();
                // Until the other thread's call went out (after 4) and was answered.
                go_rx.recv_timeout(PATIENCE).unwrap();
                client.call_async(getattr_of(6), answered(done_tx.clone(), 6));
                crossfs_client::before_wait();
                asked_tx.send(()).unwrap();
                // Held again after the wait: written when the closure ends.
                client.call_async(getattr_of(7), answered(done_tx, 7));
            })
        })
    };
    asked_rx.recv_timeout(PATIENCE).unwrap();
    let other = {
        let client = client.clone();
        thread::spawn(move || client.getattr(Fid(5), 1).map(|a| a.size))
    };
    let four = fake.read_request().unwrap();
    let five = fake.read_request().unwrap();
    assert_eq!((fid_of(&four), fid_of(&five)), (4, 5));
    fake.reply(five.tag, sized_getattr(5));
    assert_eq!(other.join().unwrap().unwrap(), 5);
    go_tx.send(()).unwrap();
    asked_rx.recv_timeout(PATIENCE).unwrap();
    let six = fake.read_request().unwrap();
    assert_eq!(fid_of(&six), 6);
    holder.join().unwrap();
    let seven = fake.read_request().unwrap();
    assert_eq!(fid_of(&seven), 7);
    for r in first.iter().chain([&four, &six, &seven]) {
        fake.reply(r.tag, getattr_reply());
    }
    let mut answered_fids: Vec<u32> = (0..6)
        .map(|_| done_rx.recv_timeout(PATIENCE).unwrap())
        .collect();
    answered_fids.sort_unstable();
    assert_eq!(answered_fids, [1, 2, 3, 4, 6, 7]);
}
