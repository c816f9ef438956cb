//! `Client::enable_reconnect`: a lost connection is replaced, restore hooks bind the same fid
//! numbers again, and calls made meanwhile wait (boundedly) instead of failing.
//!
//! Each dial starts a fresh crossfs `Server` on a new socket pair, as a restarted server
//! process would be: it knows none of the old connection's fids. "Crashing" it shuts its
//! end of the socket down.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossfs_client::{Client, ClientConfig, ClientError, Fid, Transport};
use crossfs_server::{Server, ServerConfig};
use crossfs_wire::{getattr, open_flags};

/// Generous: CI machines are loaded.
const PATIENCE: Duration = Duration::from_secs(20);

/// A server that can be crashed and refused.
struct Host {
    export: tempfile::TempDir,
    /// The server side of the connection in use, to crash it.
    live: Mutex<Option<UnixStream>>,
    /// While false, dialing fails (the server is down).
    up: AtomicBool,
    dials: AtomicUsize,
}

impl Host {
    fn new() -> Arc<Host> {
        let export = tempfile::tempdir().unwrap();
        std::fs::write(export.path().join("file"), b"hello").unwrap();
        Arc::new(Host {
            export,
            live: Mutex::new(None),
            up: AtomicBool::new(true),
            dials: AtomicUsize::new(0),
        })
    }

    /// A connected stream to a freshly started server.
    fn dial(&self) -> std::io::Result<UnixStream> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        if !self.up.load(Ordering::SeqCst) {
            return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        }
        let server = Server::new(ServerConfig {
            export: self.export.path().to_path_buf(),
            ..Default::default()
        })
        .unwrap();
        let (ours, theirs) = UnixStream::pair()?;
        *self.live.lock().unwrap() = Some(theirs.try_clone()?);
        let w = theirs.try_clone()?;
        thread::spawn(move || server.serve_connection(theirs, w, "test".into()));
        Ok(ours)
    }

    fn crash(&self) {
        if let Some(s) = self.live.lock().unwrap().take() {
            s.shutdown(std::net::Shutdown::Both).unwrap();
        }
    }

    /// A client that reconnects to this host, re-attaching `root` on every new connection
    /// and running `hook` after that.
    fn client(
        self: &Arc<Self>,
        wait: Duration,
        hook: impl Fn(&Client, Fid) -> Result<(), ClientError> + Send + Sync + 'static,
    ) -> (Arc<Client>, Fid) {
        let s = self.dial().unwrap();
        let client = Client::connect(s.try_clone().unwrap(), s, &ClientConfig::default()).unwrap();
        let (root, _) = client.attach(b"", b"", 0).unwrap();
        let host = self.clone();
        client
            .enable_reconnect(
                move || {
                    let s = host.dial()?;
                    let closer = s.try_clone()?;
                    let hangup = std::os::fd::OwnedFd::from(s.try_clone()?);
                    Ok(Transport {
                        reader: Box::new(s.try_clone()?),
                        writer: Box::new(s),
                        closer: Box::new(move || {
                            let _ = closer.shutdown(std::net::Shutdown::Both);
                        }),
                        hangup: Some(hangup),
                        socket: None,
                    })
                },
                wait,
            )
            .unwrap();
        client.on_reconnect(move |c| {
            c.attach_fid(root, b"", b"", 0, None)?;
            hook(c, root)
        });
        (client, root)
    }
}

fn walk(client: &Client, from: Fid, to: Fid, name: &[u8]) -> Result<(), ClientError> {
    match client.walk(from, to, &[name])?.len() {
        1 => Ok(()),
        _ => Err(ClientError::Errno(libc::ENOENT)),
    }
}

#[test]
fn fids_keep_their_numbers_across_a_reconnect() {
    let host = Host::new();
    let opened = Arc::new(Mutex::new(None::<Fid>));
    let reopen = opened.clone();
    let (client, root) = host.client(PATIENCE, move |c, root| {
        if let Some(fid) = *reopen.lock().unwrap() {
            walk(c, root, fid, b"file")?;
            c.lopen(fid, open_flags::RDONLY)?;
        }
        Ok(())
    });
    let file = client.alloc_fid();
    walk(&client, root, file, b"file").unwrap();
    client.lopen(file, open_flags::RDONLY).unwrap();
    *opened.lock().unwrap() = Some(file);
    assert_eq!(client.read(file, 0, 100).unwrap(), b"hello");

    host.crash();
    // The first call after the crash may be the one that finds the connection dead; either
    // way the client reconnects and the same fid numbers work again.
    let deadline = Instant::now() + PATIENCE;
    let data = loop {
        match client.read(file, 0, 100) {
            Ok(d) => break d,
            Err(ClientError::Disconnected(_)) if Instant::now() < deadline => {}
            Err(e) => panic!("read after reconnect: {e}"),
        }
    };
    assert_eq!(data, b"hello");
    assert_eq!(client.reconnects(), 1);
    assert!(client.is_connected());
    assert!(client.getattr(root, getattr::BASIC).is_ok());
    // A fid bound on the old connection only is unknown to the new server.
    let stray = client.alloc_fid();
    host.crash();
    let _ = client.getattr(root, getattr::BASIC);
    walk(&client, root, stray, b"file").unwrap();
    assert_eq!(client.reconnects(), 2);
}

#[test]
fn calls_wait_for_the_server_then_give_up_until_it_is_back() {
    let host = Host::new();
    let (client, root) = host.client(Duration::from_millis(700), |_, _| Ok(()));
    host.up.store(false, Ordering::SeqCst);
    host.crash();

    // The call that finds the connection dead fails at once (it was in flight); the next
    // waits up to 0.7 s from the loss, then fails; later calls fail at once.
    assert!(client.getattr(root, getattr::BASIC).is_err());
    let started = Instant::now();
    let r = client.getattr(root, getattr::BASIC);
    assert!(matches!(r, Err(ClientError::Disconnected(_))), "{r:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "did not wait"
    );
    let started = Instant::now();
    assert!(client.getattr(root, getattr::BASIC).is_err());
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "waited again"
    );
    assert!(
        host.dials.load(Ordering::SeqCst) >= 3,
        "redials with back-off"
    );

    // The server comes back: the next calls work.
    host.up.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + PATIENCE;
    while client.getattr(root, getattr::BASIC).is_err() {
        assert!(Instant::now() < deadline, "never reconnected");
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(client.reconnects(), 1);
}

/// Whether the caller gave up: set by the test, read by the client's check.
static GAVE_UP: AtomicBool = AtomicBool::new(false);

fn gave_up(_: u32) -> bool {
    GAVE_UP.load(Ordering::SeqCst)
}

#[test]
fn a_waiting_call_ends_when_its_caller_gives_up() {
    let host = Host::new();
    let (client, root) = host.client(PATIENCE, |_, _| Ok(()));
    host.up.store(false, Ordering::SeqCst);
    host.crash();
    // The first connection has no hang-up watcher: the call that finds it dead fails (it
    // was in flight). Once the client has seen the loss, calls wait.
    let _ = client.getattr(root, getattr::BASIC);
    let deadline = Instant::now() + PATIENCE;
    while client.is_connected() {
        assert!(Instant::now() < deadline, "the loss went unseen");
        thread::sleep(Duration::from_millis(10));
    }

    let waiting = {
        let client = client.clone();
        thread::spawn(move || {
            crossfs_client::give_up_when(Some(crossfs_client::GiveUp {
                check: gave_up,
                arg: 0,
            }));
            client.getattr(root, getattr::BASIC)
        })
    };
    thread::sleep(Duration::from_millis(300));
    assert!(!waiting.is_finished(), "the call waits for the server");
    GAVE_UP.store(true, Ordering::SeqCst);
    let r = waiting.join().unwrap();
    assert_eq!(r.map(drop), Err(ClientError::Interrupted));
    assert_eq!(ClientError::Interrupted.errno(), libc::EINTR);

    // A thread that set nothing still waits for the server, and gets it back.
    let waiting = {
        let client = client.clone();
        thread::spawn(move || client.getattr(root, getattr::BASIC))
    };
    thread::sleep(Duration::from_millis(300));
    assert!(!waiting.is_finished(), "the call waits for the server");
    host.up.store(true, Ordering::SeqCst);
    assert!(waiting.join().unwrap().is_ok());
}

#[test]
fn a_failing_restore_is_retried_on_a_new_connection() {
    let host = Host::new();
    let failures = Arc::new(AtomicUsize::new(2));
    let left = failures.clone();
    let (client, root) = host.client(PATIENCE, move |_, _| {
        if left.load(Ordering::SeqCst) > 0 {
            left.fetch_sub(1, Ordering::SeqCst);
            return Err(ClientError::Errno(libc::EIO));
        }
        Ok(())
    });
    host.crash();
    let deadline = Instant::now() + PATIENCE;
    while client.getattr(root, getattr::BASIC).is_err() {
        assert!(Instant::now() < deadline, "never reconnected");
    }
    assert_eq!(failures.load(Ordering::SeqCst), 0);
    assert_eq!(
        host.dials.load(Ordering::SeqCst),
        1 + 3,
        "one dial per attempt"
    );
    assert_eq!(client.reconnects(), 1);
}

#[test]
fn shutdown_ends_reconnecting() {
    let host = Host::new();
    let (client, root) = host.client(PATIENCE, |_, _| Ok(()));
    client.shutdown();
    assert!(client.is_shut_down());
    let started = Instant::now();
    assert!(matches!(
        client.getattr(root, getattr::BASIC),
        Err(ClientError::Disconnected(_))
    ));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a shut client waited"
    );
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        host.dials.load(Ordering::SeqCst),
        1,
        "dialed after shutdown"
    );
}
