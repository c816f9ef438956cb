//! Many threads mixing blocking and asynchronous calls on one client against crossfs's
//! server: whoever reads the socket (a blocking caller or the reader thread), every reply
//! reaches its caller and nothing is left in flight.

use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use crossfs_client::{Client, ClientConfig, Rmessage, Tmessage};
use crossfs_server::{Server, ServerConfig};
use crossfs_wire::{getattr, Tgetattr};

#[test]
fn blocking_and_async_calls_from_many_threads_all_complete() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("file"), b"0123456789").unwrap();
    let server = Server::new(ServerConfig {
        export: export.path().to_path_buf(),
        ..Default::default()
    })
    .unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    let w = theirs.try_clone().unwrap();
    let serving = server.clone();
    std::thread::spawn(move || serving.serve_connection(theirs, w, "test".into()));
    let closer = ours.try_clone().unwrap();
    let config = ClientConfig {
        // Few tags, so callers also wait for tags and completions queue requests.
        max_in_flight: 4,
        ..ClientConfig::default()
    };
    let client = Client::connect_with_closer(ours.try_clone().unwrap(), ours, &config, move || {
        let _ = closer.shutdown(std::net::Shutdown::Both);
    })
    .unwrap();
    let (root, _) = client.attach(b"t", b"", !0).unwrap();
    let fid = client.alloc_fid();
    client.walk(root, fid, &[b"file"]).unwrap();
    let getattr = move || {
        Tmessage::Getattr(Tgetattr {
            fid,
            request_mask: getattr::BASIC,
        })
    };

    let threads = 8;
    let rounds = 300;
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (client, tx) = (client.clone(), tx.clone());
            s.spawn(move || {
                for i in 0..rounds {
                    if (i + t) % 3 == 0 {
                        // An async request whose completion chains another.
                        let (c, tx) = (client.clone(), tx.clone());
                        client.call_async(
                            getattr(),
                            Box::new(move |r| {
                                assert!(matches!(r, Ok(Rmessage::Getattr(_))));
                                c.call_async(
                                    getattr(),
                                    Box::new(move |r| tx.send(r.map(|_| ())).unwrap()),
                                );
                            }),
                        );
                    }
                    let a = client.getattr(fid, getattr::BASIC).unwrap();
                    assert_eq!(a.size, 10);
                }
            });
        }
    });
    drop(tx);
    let chained = (0..threads)
        .map(|t| (0..rounds).filter(|i| (i + t) % 3 == 0).count())
        .sum::<usize>();
    for _ in 0..chained {
        rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
    }
    assert_eq!(client.in_flight(), 0);
    let sent = client.counters().messages["Tgetattr"].count as usize;
    assert_eq!(sent, threads * rounds + 2 * chained);
    // Every request was timed once, deferred ones (sent by the sender thread) included, and
    // the server's time for each is part of the client's.
    let timed = &client.latency().types["Tgetattr"];
    assert_eq!(timed.count as usize, sent);
    // The server times a reply once written, which may be just after the client read it.
    let mut stats = server.stats_json();
    for _ in 0..500 {
        if stats["latency"]["reply"]["Tgetattr"]["count"].as_u64() == Some(sent as u64) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        stats = server.stats_json();
    }
    let on_server = &stats["latency"]["reply"]["Tgetattr"];
    assert_eq!(on_server["count"].as_u64(), Some(sent as u64));
    let server_sum_us = on_server["mean_us"].as_f64().unwrap() * sent as f64;
    assert!(
        timed.sum_ns as f64 / 1000.0 >= server_sum_us * 0.99,
        "client {timed:?}, server {on_server}"
    );
    assert!(timed.percentile_ns(0.5) <= timed.percentile_ns(0.99));
    assert!(timed.percentile_ns(0.99) <= timed.max_ns);
}

#[test]
fn call_all_of_nothing_returns_at_once() {
    let (ours, _theirs) = UnixStream::pair().unwrap();
    // No server answers: an empty batch must not wait for anything.
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut s = _theirs;
        let mut size = [0u8; 4];
        s.read_exact(&mut size).unwrap();
        let mut frame = vec![0u8; u32::from_le_bytes(size) as usize - 4];
        s.read_exact(&mut frame).unwrap();
        let mut reply = Vec::new();
        Rmessage::Version(crossfs_wire::Rversion {
            msize: 8192,
            version: b"9P2000.L".to_vec(),
        })
        .encode(crossfs_wire::NOTAG, &mut reply);
        s.write_all(&reply).unwrap();
        s
    });
    let client =
        Client::connect(ours.try_clone().unwrap(), ours, &ClientConfig::default()).unwrap();
    let _server = server.join().unwrap();
    assert!(client.call_all(Vec::new()).is_empty());
    assert_eq!(client.in_flight(), 0);
}
