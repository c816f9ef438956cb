//! The door's side of the guest agent, with a real export, a real event hub and FUSE
//! requests as a guest kernel would send them: the control file is hidden from everyone but
//! a root thread that may hold the stream; a waiting READ is parked and answered later with
//! the host's changes (or EINTR after FUSE_INTERRUPT); the agent's replays of those changes
//! are answered without touching the export, once each; nothing another process sends
//! passes as a replay, with replays waiting for the agent or with no agent at all; a sync
//! returns once the agent read on past its marker.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossfs_events::{EventHub, HubConfig};
use crossfs_export::policy::Policy;
use crossfs_export::Export;
use crossfs_virtiofs::{FsConfig, FuseFs, Handled, LaterReplies, Stats};

const ROOT: u64 = 1;
const LOOKUP: u32 = 1;
const GETATTR: u32 = 3;
const SETATTR: u32 = 4;
const MKNOD: u32 = 8;
const UNLINK: u32 = 10;
const RENAME: u32 = 12;
const OPEN: u32 = 14;
const READ: u32 = 15;
const RELEASE: u32 = 18;
const GETXATTR: u32 = 22;
const INIT: u32 = 26;
const INTERRUPT: u32 = 36;

const AGENT: u32 = 4242;
const OTHER: u32 = 4343;
const WAIT: Duration = Duration::from_secs(10);

/// Replies to parked requests: (unique, errno, body).
struct Collector(Mutex<Sender<(u64, i32, Vec<u8>)>>);

impl LaterReplies for Collector {
    fn reply_later(&self, _unique: u64, reply: Vec<u8>) {
        let _ = self.0.lock().unwrap().send(split(&reply));
    }
}

fn split(reply: &[u8]) -> (u64, i32, Vec<u8>) {
    assert_eq!(
        u32::from_le_bytes(reply[0..4].try_into().unwrap()) as usize,
        reply.len()
    );
    let error = -i32::from_le_bytes(reply[4..8].try_into().unwrap());
    let unique = u64::from_le_bytes(reply[8..16].try_into().unwrap());
    (unique, error, reply[16..].to_vec())
}

struct Guest {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    fs: FuseFs,
    stats: Arc<Stats>,
    _later: Arc<Collector>,
    later: Receiver<(u64, i32, Vec<u8>)>,
    unique: std::cell::Cell<u64>,
    _hub: Option<Arc<EventHub>>,
}

enum Answer {
    Now(i32, Vec<u8>),
    Later(u64),
}

impl Guest {
    fn new(events: bool) -> Guest {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("export");
        std::fs::create_dir(&root).unwrap();
        let mut export = Export::open(&root, Policy::default(), Some(1024)).unwrap();
        let hub = events.then(|| Arc::new(EventHub::start(&root, HubConfig::default()).unwrap()));
        export.reserved_prefix = hub.as_ref().map(|h| h.cookie_prefix().to_vec());
        let stats = Arc::new(Stats::default());
        let fs = FuseFs::new(Arc::new(export), FsConfig::default(), stats.clone())
            .with_events(hub.clone());
        let (tx, rx) = channel();
        let later = Arc::new(Collector(Mutex::new(tx)));
        fs.set_later_replies(Arc::downgrade(&later) as std::sync::Weak<dyn LaterReplies>);
        let g = Guest {
            _dir: dir,
            root,
            fs,
            stats,
            _later: later,
            later: rx,
            unique: 1.into(),
            _hub: hub,
        };
        let mut body = Vec::new();
        for v in [7u32, 31, 128 << 10, !0] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(g.call(INIT, ROOT, 0, 0, &body).0, 0);
        g
    }

    fn send(&self, opcode: u32, nodeid: u64, uid: u32, pid: u32, body: &[u8]) -> (u64, Answer) {
        let unique = self.unique.get();
        self.unique.set(unique + 1);
        let mut req = Vec::new();
        req.extend_from_slice(&((40 + body.len()) as u32).to_le_bytes());
        req.extend_from_slice(&opcode.to_le_bytes());
        req.extend_from_slice(&unique.to_le_bytes());
        req.extend_from_slice(&nodeid.to_le_bytes());
        req.extend_from_slice(&uid.to_le_bytes());
        req.extend_from_slice(&uid.to_le_bytes());
        req.extend_from_slice(&pid.to_le_bytes());
        req.extend_from_slice(&[0; 4]);
        req.extend_from_slice(body);
        let answer = match self.fs.handle_request(&req) {
            Handled::Reply(r) => {
                let (u, e, b) = split(&r);
                assert_eq!(u, unique);
                Answer::Now(e, b)
            }
            Handled::Later => Answer::Later(unique),
            Handled::Nothing => Answer::Now(-1, Vec::new()),
        };
        (unique, answer)
    }

    /// A request answered at once: (errno, body).
    fn call(&self, opcode: u32, nodeid: u64, uid: u32, pid: u32, body: &[u8]) -> (i32, Vec<u8>) {
        match self.send(opcode, nodeid, uid, pid, body).1 {
            Answer::Now(e, b) => (e, b),
            Answer::Later(u) => panic!("request {u} (opcode {opcode}) parked"),
        }
    }

    /// The reply to parked request `unique`.
    fn later(&self, unique: u64) -> (i32, Vec<u8>) {
        let (u, e, b) = self.later.recv_timeout(WAIT).expect("a later reply");
        assert_eq!(u, unique);
        (e, b)
    }

    fn lookup(&self, parent: u64, name: &str, pid: u32) -> Result<(u64, u64), i32> {
        match self.call(LOOKUP, parent, 0, pid, &cstr(name)) {
            (0, b) if node(&b) != 0 => Ok((node(&b), ino(&b))),
            (0, _) => Err(libc::ENOENT),
            (e, _) => Err(e),
        }
    }

    /// The agent: finds and opens the control file; returns its handle.
    fn start_agent(&self) -> u64 {
        let (control, _) = self.lookup(ROOT, ".crossfs-agent", AGENT).unwrap();
        let (e, b) = self.call(OPEN, control, 0, AGENT, &[0; 8]);
        assert_eq!(e, 0);
        u64::from_le_bytes(b[0..8].try_into().unwrap())
    }

    fn read_control(&self, fh: u64, pid: u32) -> (u64, Answer) {
        let mut body = fh.to_le_bytes().to_vec();
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(&(64u32 << 10).to_le_bytes());
        body.extend_from_slice(&[0; 20]);
        self.send(READ, 1 << 63, 0, pid, &body)
    }

    /// Reads the control file until the lines read mention `what`; returns them all.
    fn read_until(&self, fh: u64, what: &str) -> String {
        self.read_until_line(fh, &[what])
    }

    /// Reads the control file until one line mentions all of `what`; returns all lines.
    fn read_until_line(&self, fh: u64, what: &[&str]) -> String {
        let mut seen = String::new();
        let mut waits = 0;
        while !seen.lines().any(|l| what.iter().all(|w| l.contains(w))) {
            assert!(waits < 20, "no line with {what:?} after {waits} s:\n{seen}");
            let lines = match self.read_control(fh, AGENT).1 {
                Answer::Now(0, b) => b,
                Answer::Later(u) => match self.later(u) {
                    // Waited long without events: read again.
                    (libc::EAGAIN, _) => {
                        waits += 1;
                        continue;
                    }
                    (e, b) => {
                        assert_eq!(e, 0);
                        b
                    }
                },
                Answer::Now(e, _) => panic!("control read: errno {e}"),
            };
            seen.push_str(std::str::from_utf8(&lines).unwrap());
        }
        seen
    }

    fn agent_counter(&self, name: &str) -> u64 {
        self.stats.to_json()["agent"][name].as_u64().unwrap()
    }
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

fn node(entry: &[u8]) -> u64 {
    u64::from_le_bytes(entry[0..8].try_into().unwrap())
}

fn ino(entry: &[u8]) -> u64 {
    u64::from_le_bytes(entry[40..48].try_into().unwrap())
}

fn mknod_body(name: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [libc::S_IFREG | 0o644, 0, 0, 0] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&cstr(name));
    b
}

fn chmod_body(mode: u32) -> Vec<u8> {
    let mut b = vec![0u8; 88];
    b[0..4].copy_from_slice(&1u32.to_le_bytes()); // FATTR_MODE
    b[68..72].copy_from_slice(&mode.to_le_bytes());
    b
}

#[test]
fn the_control_file_is_hidden_from_everyone_but_a_root_thread_that_may_hold_it() {
    let g = Guest::new(true);
    // Not as a user, and never in a listing (a reserved name of the export core).
    assert_eq!(
        g.call(LOOKUP, ROOT, 1000, OTHER, &cstr(".crossfs-agent")).0,
        libc::ENOENT
    );
    // pid 0 (a process outside the mount's pid namespace) names no one.
    assert_eq!(g.lookup(ROOT, ".crossfs-agent", 0), Err(libc::ENOENT));
    let fh = g.start_agent();
    // Held: another root thread does not find it, and cannot open it.
    assert_eq!(g.lookup(ROOT, ".crossfs-agent", OTHER), Err(libc::ENOENT));
    assert_eq!(g.call(OPEN, 1 << 63, 0, OTHER, &[0; 8]).0, libc::EBUSY);
    // Nor read the agent's stream.
    assert!(matches!(
        g.read_control(fh, OTHER).1,
        Answer::Now(libc::EBADF, _)
    ));
    // Nothing is made on the host.
    assert!(!g.root.join(".crossfs-agent").exists());
    // Without change events there is no control file at all.
    let plain = Guest::new(false);
    assert_eq!(
        plain.lookup(ROOT, ".crossfs-agent", AGENT),
        Err(libc::ENOENT)
    );
}

#[test]
fn a_waiting_read_is_parked_and_answered_with_the_host_change() {
    let g = Guest::new(true);
    let fh = g.start_agent();
    assert!(g.read_until(fh, "\"rescan\"").contains("agent started"));
    let (unique, answer) = g.read_control(fh, AGENT);
    assert!(matches!(answer, Answer::Later(u) if u == unique), "parked");
    // Other requests go on meanwhile.
    assert_eq!(g.call(GETATTR, ROOT, 0, OTHER, &[0; 16]).0, 0);
    std::fs::write(g.root.join("new.txt"), "host").unwrap();
    let (e, lines) = g.later(unique);
    assert_eq!(e, 0);
    let lines = String::from_utf8(lines).unwrap();
    assert!(lines.contains("new.txt"), "{lines}");
    assert!(g.agent_counter("parked_reads") >= 1);
}

#[test]
fn an_interrupted_waiting_read_is_answered_eintr_and_loses_nothing() {
    let g = Guest::new(true);
    let fh = g.start_agent();
    g.read_until(fh, "agent started");
    let (unique, answer) = g.read_control(fh, AGENT);
    assert!(matches!(answer, Answer::Later(_)));
    let (_, a) = g.send(INTERRUPT, 0, 0, 0, &unique.to_le_bytes());
    assert!(matches!(a, Answer::Now(-1, _)), "no reply to an interrupt");
    assert_eq!(g.later(unique), (libc::EINTR, Vec::new()));
    std::fs::write(g.root.join("after.txt"), "x").unwrap();
    assert!(g.read_until(fh, "after.txt").contains("created"));
    // Linux's virtiofs sends no FUSE_INTERRUPT: a read that waits long without events is
    // answered EAGAIN, so that a signalled agent is not held.
    let (unique, answer) = g.read_control(fh, AGENT);
    assert!(matches!(answer, Answer::Later(_)));
    assert_eq!(g.later(unique), (libc::EAGAIN, Vec::new()));
}

#[test]
fn replays_are_answered_locally_once_and_only_for_the_agent() {
    let g = Guest::new(true);
    std::fs::write(g.root.join("doomed"), "x").unwrap();
    std::fs::write(g.root.join("kept"), "x").unwrap();
    let fh = g.start_agent();
    g.read_until(fh, "agent started");
    // Each step makes one change and reads until its batch: the door expects the replays
    // of the last batch only.
    std::fs::write(g.root.join("made"), "host").unwrap();
    g.read_until(fh, "made");
    let host_ino = std::fs::metadata(g.root.join("made")).unwrap().ino();

    // The agent's replay of the creation: the name is "missing" to the agent alone, and the
    // mknod is answered with the host's file, without a second create on the host.
    assert_eq!(g.lookup(ROOT, "made", AGENT), Err(libc::ENOENT));
    assert_eq!(g.lookup(ROOT, "made", OTHER).unwrap().1, host_ino);
    let (e, entry) = g.call(MKNOD, ROOT, 0, AGENT, &mknod_body("made"));
    assert_eq!(e, 0);
    assert_eq!(ino(&entry), host_ino);
    assert_eq!(std::fs::read(g.root.join("made")).unwrap(), b"host");
    // Once only; and a create the door never handed out is refused, not passed on.
    assert_eq!(
        g.call(MKNOD, ROOT, 0, AGENT, &mknod_body("made")).0,
        libc::EPERM
    );
    assert_eq!(
        g.call(MKNOD, ROOT, 0, AGENT, &mknod_body("forged")).0,
        libc::EPERM
    );
    assert!(!g.root.join("forged").exists());

    // Another process cannot use an expected replay: its requests reach the export.
    assert_eq!(g.call(UNLINK, ROOT, 0, OTHER, &cstr("doomed")).0, 0);
    assert!(!g.root.join("doomed").exists(), "a real unlink");
    assert_eq!(
        g.call(MKNOD, ROOT, 0, OTHER, &mknod_body("made")).0,
        libc::EEXIST
    );

    // A removal: the agent's lookup of a name gone from the host finds a placeholder, and
    // its unlink succeeds without touching anything.
    std::fs::remove_file(g.root.join("made")).unwrap();
    g.read_until_line(fh, &["removed", "\"made\""]);
    let (ghost, _) = g.lookup(ROOT, "made", AGENT).unwrap();
    assert!(ghost >= 1 << 62);
    assert_eq!(g.call(GETATTR, ghost, 0, AGENT, &[0; 16]).0, libc::ESTALE);
    assert_eq!(g.call(UNLINK, ROOT, 0, AGENT, &cstr("made")).0, 0);
    assert_eq!(g.call(UNLINK, ROOT, 0, AGENT, &cstr("kept")).0, libc::EPERM);
    assert!(g.root.join("kept").exists());

    // A rename: the old name finds the file at its new place.
    std::fs::rename(g.root.join("kept"), g.root.join("moved")).unwrap();
    g.read_until(fh, "renamed");
    let kept_ino = std::fs::metadata(g.root.join("moved")).unwrap().ino();
    assert_eq!(g.lookup(ROOT, "kept", AGENT).unwrap().1, kept_ino);
    assert_eq!(g.lookup(ROOT, "moved", AGENT), Err(libc::ENOENT));
    let mut rename = ROOT.to_le_bytes().to_vec();
    rename.extend_from_slice(&cstr("kept"));
    rename.extend_from_slice(&cstr("moved"));
    assert_eq!(g.call(RENAME, ROOT, 0, AGENT, &rename).0, 0);
    assert!(g.root.join("moved").exists());

    // An attribute change: the agent's chmod is answered with the host's mode, and
    // changes nothing; another process's chmod is real.
    let moved = g.lookup(ROOT, "moved", OTHER).unwrap().0;
    std::fs::set_permissions(g.root.join("moved"), PermissionsExt::from_mode(0o600)).unwrap();
    g.read_until(fh, "attrib");
    let (e, attr) = g.call(SETATTR, moved, 0, AGENT, &chmod_body(0o777));
    assert_eq!(e, 0);
    let mode = u32::from_le_bytes(attr[16 + 60..16 + 64].try_into().unwrap());
    assert_eq!(mode & 0o7777, 0o600, "the host's mode");
    assert_eq!(meta_mode(&g, "moved"), 0o600);
    assert_eq!(
        g.call(SETATTR, moved, 0, AGENT, &chmod_body(0o777)).0,
        libc::EPERM
    );
    assert_eq!(g.call(SETATTR, moved, 0, OTHER, &chmod_body(0o640)).0, 0);
    assert_eq!(meta_mode(&g, "moved"), 0o640);

    assert!(g.agent_counter("replays") >= 7, "{}", g.stats.to_json());
    assert!(g.agent_counter("refused") >= 4);
}

fn meta_mode(g: &Guest, name: &str) -> u32 {
    std::fs::metadata(g.root.join(name)).unwrap().mode() & 0o7777
}

#[test]
fn a_sync_returns_once_the_agent_read_past_its_marker() {
    let g = Guest::new(true);
    let sync = |pid| {
        let mut b = 64u32.to_le_bytes().to_vec();
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&cstr("user.crossfs.sync"));
        g.send(GETXATTR, ROOT, 0, pid, &b)
    };
    // No agent: nothing follows the host, and the sync says so.
    assert!(matches!(sync(OTHER).1, Answer::Now(libc::ENODATA, _)));
    let fh = g.start_agent();
    g.read_until(fh, "agent started");
    std::fs::write(g.root.join("before-sync"), "x").unwrap();
    let (unique, answer) = sync(OTHER);
    assert!(matches!(answer, Answer::Later(_)));
    // The marker (numbered from 2^52), not the hub's own cookie.
    let lines = g.read_until(fh, "\"cookie\":45035996");
    assert!(lines.contains("before-sync"), "{lines}");
    // The agent applies the batch, then reads again: the sync is answered.
    let (_, next) = g.read_control(fh, AGENT);
    let (e, value) = g.later(unique);
    assert_eq!(e, 0);
    assert!(std::str::from_utf8(&value).unwrap().parse::<u64>().is_ok());
    if let Answer::Later(u) = next {
        let _ = g.send(INTERRUPT, 0, 0, 0, &u.to_le_bytes());
    }
}

#[test]
fn a_guest_programs_own_changes_are_not_replayed_and_a_failed_one_hides_nothing() {
    let g = Guest::new(true);
    std::fs::write(g.root.join("exists"), "x").unwrap();
    let fh = g.start_agent();
    g.read_until(fh, "agent started");
    // Made by a guest program: its kernel raised IN_CREATE already.
    assert_eq!(g.call(MKNOD, ROOT, 0, OTHER, &mknod_body("mine")).0, 0);
    // A create that fails notes nothing: the host's removal of the name still goes out.
    assert_eq!(
        g.call(MKNOD, ROOT, 0, OTHER, &mknod_body("exists")).0,
        libc::EEXIST
    );
    std::fs::remove_file(g.root.join("exists")).unwrap();
    std::fs::write(g.root.join("host-made"), "x").unwrap();
    let mut lines = String::new();
    while !(lines.contains("host-made")
        && lines
            .lines()
            .any(|l| l.contains("removed") && l.contains("\"exists\"")))
    {
        // One batch: any line will do.
        lines += &g.read_until(fh, "");
    }
    assert!(!lines.contains("\"mine\""), "{lines}");
}

fn rename_body(newdir: u64, old: &str, new: &str) -> Vec<u8> {
    let mut b = newdir.to_le_bytes().to_vec();
    b.extend_from_slice(&cstr(old));
    b.extend_from_slice(&cstr(new));
    b
}

fn truncate_body(size: u64) -> Vec<u8> {
    let mut b = vec![0u8; 88];
    b[0..4].copy_from_slice(&(1u32 << 3).to_le_bytes()); // FATTR_SIZE
    b[16..24].copy_from_slice(&size.to_le_bytes());
    b
}

#[test]
fn forged_replays_reach_the_export_while_replays_wait_and_with_no_agent() {
    let g = Guest::new(true);
    for f in ["r", "m", "p", "d"] {
        std::fs::write(g.root.join(f), "as it was").unwrap();
    }
    let fh = g.start_agent();
    g.read_until(fh, "agent started");
    // Another process's nodes for the files, looked up before the host's changes (as a
    // guest kernel holds them in its dentries).
    let p = g.lookup(ROOT, "p", OTHER).unwrap().0;
    let d = g.lookup(ROOT, "d", OTHER).unwrap().0;
    std::fs::write(g.root.join("c"), "made on the host").unwrap();
    std::fs::remove_file(g.root.join("r")).unwrap();
    std::fs::rename(g.root.join("m"), g.root.join("m2")).unwrap();
    std::fs::set_permissions(g.root.join("p"), PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::write(g.root.join("d"), "written on the host").unwrap();
    // One batch with all five: the replays the door now waits for.
    std::thread::sleep(Duration::from_millis(500));
    let batch = match g.read_control(fh, AGENT).1 {
        Answer::Now(0, b) => String::from_utf8(b).unwrap(),
        _ => panic!("the host's changes were not queued for the agent"),
    };
    for what in ["\"c\"", "\"r\"", "\"m2\"", "\"p\"", "\"d\""] {
        assert!(batch.contains(what), "{what} not in one batch:\n{batch}");
    }
    let replays = g.agent_counter("replays");

    // The agent's calls, made by another process: each is served as anyone's.
    assert_eq!(
        g.lookup(ROOT, "c", OTHER).unwrap().1,
        std::fs::metadata(g.root.join("c")).unwrap().ino(),
        "the host's new file, not \"missing\""
    );
    assert_eq!(
        g.lookup(ROOT, "r", OTHER),
        Err(libc::ENOENT),
        "no placeholder"
    );
    assert_eq!(
        g.lookup(ROOT, "m", OTHER),
        Err(libc::ENOENT),
        "not the moved file"
    );
    assert_eq!(
        g.call(MKNOD, ROOT, 0, OTHER, &mknod_body("c")).0,
        libc::EEXIST
    );
    assert_eq!(g.call(UNLINK, ROOT, 0, OTHER, &cstr("r")).0, libc::ENOENT);
    assert_eq!(
        g.call(RENAME, ROOT, 0, OTHER, &rename_body(ROOT, "m", "m2"))
            .0,
        libc::ENOENT
    );
    assert_eq!(g.call(SETATTR, p, 0, OTHER, &chmod_body(0o751)).0, 0);
    assert_eq!(meta_mode(&g, "p"), 0o751, "a real chmod");
    assert_eq!(g.call(SETATTR, d, 0, OTHER, &truncate_body(0)).0, 0);
    assert_eq!(
        std::fs::read(g.root.join("d")).unwrap(),
        b"",
        "a real truncate"
    );
    assert_eq!(
        g.agent_counter("replays"),
        replays,
        "none of it answered as a replay"
    );
    // The replays still wait for the agent alone.
    assert_eq!(g.lookup(ROOT, "c", AGENT), Err(libc::ENOENT));
    assert_eq!(g.call(UNLINK, ROOT, 0, AGENT, &cstr("r")).0, 0);

    // With no agent: its pid is anyone's again, and nobody else takes the stream.
    assert_eq!(
        g.call(
            RELEASE,
            1 << 63,
            0,
            AGENT,
            &[fh.to_le_bytes(), [0; 8], [0; 8]].concat()
        )
        .0,
        0
    );
    assert_eq!(g.call(SETATTR, p, 0, AGENT, &chmod_body(0o640)).0, 0);
    assert_eq!(
        meta_mode(&g, "p"),
        0o640,
        "the former agent's chmod is real"
    );
    assert_eq!(g.call(MKNOD, ROOT, 0, AGENT, &mknod_body("after")).0, 0);
    assert!(
        g.root.join("after").exists(),
        "the former agent's create is real"
    );
    assert_eq!(g.lookup(ROOT, "m", AGENT), Err(libc::ENOENT));
    // Not a user's, even by the control file's node id without a lookup.
    assert_eq!(g.call(OPEN, 1 << 63, 1000, OTHER, &[0; 8]).0, libc::EBUSY);
    assert!(matches!(
        g.read_control(fh, AGENT).1,
        Answer::Now(libc::EBADF, _)
    ));
    assert_eq!(g.agent_counter("refused"), 0, "{}", g.stats.to_json());
}
