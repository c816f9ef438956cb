//! The change-event stream over raw 9P: attach, long-poll reads, sync, hidden cookies, and
//! the per-connection bound on streams.

mod common;

use std::sync::Arc;

use common::*;
use crossfs_events::{Event, EventHub, EventKind, HubConfig};
use crossfs_server::{Server, ServerConfig, EVENTS_ANAME};
use crossfs_wire::*;

fn harness_with_events() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let hub = EventHub::start(dir.path(), HubConfig::default()).unwrap();
    let config = ServerConfig {
        export: dir.path().to_path_buf(),
        ..Default::default()
    };
    let server = Server::with_events(config, Some(Arc::new(hub))).unwrap();
    Harness { dir, server }
}

fn attach_events(c: &mut Client, fid: Fid) -> Result<Qid, i32> {
    match c.rpc(Tattach {
        fid,
        afid: NOFID,
        uname: b"tester".to_vec(),
        aname: EVENTS_ANAME.as_bytes().to_vec(),
        n_uname: !0,
    }) {
        Rmessage::Attach(a) => Ok(a.qid),
        Rmessage::Lerror(e) => Err(e.ecode as i32),
        other => panic!("{other:?}"),
    }
}

/// Reads the stream until an event satisfies `done`; returns everything read.
fn read_until(c: &mut Client, fid: Fid, done: impl Fn(&Event) -> bool) -> Vec<Event> {
    let mut seen = Vec::new();
    for _ in 0..20 {
        let data = c.read(fid, 0, 64 * 1024).unwrap();
        for line in data.split_inclusive(|&b| b == b'\n') {
            let ev = Event::from_json_line(line).unwrap();
            let stop = done(&ev);
            seen.push(ev);
            if stop {
                return seen;
            }
        }
    }
    panic!("the awaited event never came: {seen:?}");
}

#[test]
fn the_stream_carries_host_changes_and_sync_markers() {
    let h = harness_with_events();
    let mut c = h.connect();
    let ev = Fid(7);
    assert_eq!(attach_events(&mut c, ev).unwrap().path, u64::MAX);
    c.lopen(ev, open_flags::RDONLY).unwrap();

    std::fs::write(h.path("f"), b"x").unwrap();
    let seen = read_until(&mut c, ev, |e| e.path.as_bytes() == b"f");
    assert_eq!(seen.last().unwrap().kind, EventKind::Created);

    std::fs::write(h.path("g"), b"y").unwrap();
    assert_eq!(c.write(ev, 0, b"sync 42").unwrap(), 7);
    let seen = read_until(&mut c, ev, |e| e.kind == EventKind::Sync { cookie: 42 });
    assert!(
        seen.iter().any(|e| e.path.as_bytes() == b"g"),
        "a change made before the sync comes before its marker: {seen:?}"
    );
    assert_eq!(c.write(ev, 0, b"flush please").unwrap_err(), libc::EINVAL);
    // An event stream is no file: it cannot be walked from or stat'ed.
    assert_eq!(c.walk(ev, Fid(8), &[]).unwrap_err(), libc::EBADF);
    c.clunk(ev).unwrap();
}

#[test]
fn sync_cookies_are_invisible_to_clients() {
    let h = harness_with_events();
    std::fs::write(h.path(".crossfs-sync-1-1"), b"").unwrap();
    std::fs::write(h.path("visible"), b"").unwrap();
    let mut c = h.connect();
    assert_eq!(
        c.walk_path(Fid(1), ".crossfs-sync-1-1").unwrap_err(),
        libc::ENOENT
    );
    let dir = Fid(2);
    c.walk(ROOT, dir, &[]).unwrap();
    c.lopen(dir, open_flags::RDONLY | open_flags::DIRECTORY)
        .unwrap();
    let names: Vec<Vec<u8>> = c
        .readdir_all(dir, 8192)
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, [&b"."[..], b"..", b"visible"].map(<[u8]>::to_vec));
    let err = c.err(Tmkdir {
        dfid: ROOT,
        name: b".crossfs-sync-x".to_vec(),
        mode: 0o755,
        gid: 0,
    });
    assert_eq!(err, libc::EPERM);
    // The same name below the top is an ordinary name.
    std::fs::create_dir(h.path("sub")).unwrap();
    c.walk_path(Fid(3), "sub").unwrap();
    c.ok(Tmkdir {
        dfid: Fid(3),
        name: b".crossfs-sync-x".to_vec(),
        mode: 0o755,
        gid: 0,
    });
}

#[test]
fn streams_per_connection_are_bounded_and_need_a_hub() {
    let h = harness_with_events();
    let mut c = h.connect();
    for fid in 10..14 {
        attach_events(&mut c, Fid(fid)).unwrap();
    }
    assert_eq!(attach_events(&mut c, Fid(14)).unwrap_err(), libc::EMFILE);
    c.clunk(Fid(10)).unwrap();
    attach_events(&mut c, Fid(14)).unwrap();

    let plain = Harness::new();
    let mut c = plain.connect();
    assert_eq!(attach_events(&mut c, Fid(1)).unwrap_err(), libc::EOPNOTSUPP);
}
