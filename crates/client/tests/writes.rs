//! A write's data goes to the socket from the caller's buffer, behind its head: every size
//! arrives whole in the file through crossfs's server (which splices the large ones into
//! the file), and the client counts each byte by the path it took (`Client::write_data`):
//! written from the caller's buffer, or copied first (a write made from a completion waits
//! for the sender thread in a copy).

use std::os::unix::net::UnixStream;
use std::sync::mpsc;

use crossfs_client::{Client, ClientConfig, WriteData};
use crossfs_server::{Server, ServerConfig};
use crossfs_wire::open_flags;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add((i >> 12) as u8) ^ seed)
        .collect()
}

#[test]
fn writes_of_every_size_arrive_whole_and_are_counted_by_their_path() {
    let export = tempfile::tempdir().unwrap();
    std::fs::write(export.path().join("f"), b"").unwrap();
    let server = Server::new(ServerConfig {
        export: export.path().to_path_buf(),
        ..Default::default()
    })
    .unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    let w = theirs.try_clone().unwrap();
    let serving = server.clone();
    std::thread::spawn(move || serving.serve_socket(theirs, w, "test".into()));
    let closer = ours.try_clone().unwrap();
    let client = Client::connect_with_closer(
        ours.try_clone().unwrap(),
        ours,
        &ClientConfig::default(),
        move || {
            let _ = closer.shutdown(std::net::Shutdown::Both);
        },
    )
    .unwrap();
    let (root, _) = client.attach(b"t", b"", !0).unwrap();
    let fid = client.alloc_fid();
    client.walk(root, fid, &[b"f"]).unwrap();
    client.lopen(fid, open_flags::RDWR).unwrap();
    let max = client.max_io() as usize;
    let path = export.path().join("f");

    let mut from_caller = 0u64;
    for (i, size) in [0, 1, 4095, 4096, 4097, 65537, 1 << 20, max]
        .into_iter()
        .enumerate()
    {
        let data = pattern(size, i as u8);
        let offset = 3 * i as u64;
        let n = if i % 2 == 0 {
            client.write(fid, offset, &data).unwrap()
        } else {
            let (tx, rx) = mpsc::channel();
            client.write_attr_async(
                fid,
                offset,
                &data,
                Box::new(move |r| tx.send(r.map(|(n, _)| n)).unwrap()),
            );
            rx.recv().unwrap().unwrap()
        };
        assert_eq!(n as usize, size);
        let file = std::fs::read(&path).unwrap();
        if size > 0 {
            assert!(
                file[offset as usize..] == data[..],
                "{size} bytes at {offset}"
            );
        }
        std::fs::write(&path, b"").unwrap();
        from_caller += size as u64;
    }
    assert_eq!(
        client.write_data(),
        WriteData {
            from_caller,
            copied: 0
        }
    );

    // Made from a completion (the thread reading replies, which must not write): queued,
    // in a copy, for the sender thread.
    let data = pattern(1 << 20, 7);
    let (tx, rx) = mpsc::channel();
    let (again, chained) = (client.clone(), data.clone());
    client.call_async(
        crossfs_wire::Tmessage::Getattr(crossfs_wire::Tgetattr {
            fid,
            request_mask: crossfs_wire::getattr::BASIC,
        }),
        Box::new(move |_| {
            again.write_async(fid, 0, &chained, Box::new(move |r| tx.send(r).unwrap()))
        }),
    );
    assert_eq!(rx.recv().unwrap().unwrap() as usize, data.len());
    assert!(std::fs::read(&path).unwrap() == data);
    assert_eq!(
        client.write_data(),
        WriteData {
            from_caller,
            copied: data.len() as u64
        }
    );
    let spliced = server.stats_json()["data"]["write_spliced"]
        .as_u64()
        .unwrap();
    assert_eq!(
        spliced,
        from_caller - (4095 + 4096 + 4097 + 1) + data.len() as u64
    );
}
