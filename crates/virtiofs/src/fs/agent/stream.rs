//! The change stream as the agent reads it: one subscriber to the export's event hub per
//! agent (the process holding the control file open), reads that wait for events without
//! holding up their queue (parked, and answered later by this module's thread), and the
//! syncs waiting for the agent to apply a marker.
//!
//! What this module must not do: touch the export beyond resolving the paths of events to
//! inodes (never a change), or keep anything for a guest with no agent (no subscriber
//! exists then, so the hub drops nothing and queues nothing for it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossfs_events::{Event, EventHub, EventKind, RelPath, Subscriber};
use crossfs_export::{lock, Dir, Export};

use super::echoes::{Own, OwnChanges};
use super::expected::{Expected, ExpectedReplays, Key};
use crate::fuse::encode;
use crate::stats::Stats;

/// Where replies to parked requests go: the device, which holds their descriptor chains.
pub trait LaterReplies: Send + Sync {
    /// Answers the parked request `unique` with `reply` (a whole FUSE reply).
    fn reply_later(&self, unique: u64, reply: Vec<u8>);
}

/// Most syncs waiting for the agent at once; past it a sync fails with `EAGAIN`.
const SYNCS_WAITING_LIMIT: usize = 64;

/// How long a sync waits for the agent to apply its marker, after the hub published it.
const SYNC_APPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the stream thread waits on the subscriber before looking at its state again.
const POLL: Duration = Duration::from_millis(500);

/// The longest a READ stays parked without events before it is answered `EAGAIN`.
const PARK_LIMIT: Duration = Duration::from_secs(1);

/// Sync markers are numbered out of the way of the hub's own cookies (see
/// `EventHub::sync_subscriber`).
const FIRST_MARKER: u64 = 1 << 52;

/// One agent's stream.
struct Stream {
    /// Which stream this is (a stream thread serves one generation only).
    generation: u64,
    /// The agent: the guest thread that opened the control file.
    pid: u32,
    /// The control file's handle.
    fh: u64,
    sub: Arc<Subscriber>,
    expected: ExpectedReplays,
    /// A READ waiting for events: (unique, size).
    parked: Option<(u64, u32)>,
    /// Since when the parked READ waits.
    parked_since: Instant,
    /// Lines read from the subscriber for a READ that was interrupted meanwhile: the next
    /// READ gets them first, so nothing is lost.
    stash: Vec<u8>,
    /// Syncs whose marker is not yet handed to the agent: marker -> (unique, size).
    syncs_waiting: HashMap<u64, (u64, u32)>,
    /// Syncs whose marker went out in the last batch: answered at the agent's next READ,
    /// which says that batch was applied.
    syncs_delivered: Vec<(u64, u32, u64)>,
}

/// The stream state shared by the door and the stream thread.
pub(crate) struct StreamDoor {
    export: Arc<Export>,
    hub: Option<Arc<EventHub>>,
    stats: Arc<Stats>,
    state: Mutex<Option<Stream>>,
    wake: Condvar,
    later: OnceLock<Weak<dyn LaterReplies>>,
    generations: AtomicU64,
    markers: AtomicU64,
    /// Changes guest programs made through the door (noted only while an agent follows).
    own: Mutex<OwnChanges>,
}

/// What a READ of the control file gets.
pub(crate) enum ReadAnswer {
    /// Events (whole JSON lines), or nothing at the end of the stream.
    Now(Vec<u8>),
    /// Parked: answered later through [`LaterReplies`].
    Parked,
}

impl StreamDoor {
    pub(crate) fn new(
        export: Arc<Export>,
        hub: Option<Arc<EventHub>>,
        stats: Arc<Stats>,
    ) -> Arc<Self> {
        Arc::new(StreamDoor {
            export,
            hub,
            stats,
            state: Mutex::new(None),
            wake: Condvar::new(),
            later: OnceLock::new(),
            generations: AtomicU64::new(1),
            markers: AtomicU64::new(FIRST_MARKER),
            own: Mutex::new(OwnChanges::default()),
        })
    }

    pub(crate) fn set_later(&self, later: Weak<dyn LaterReplies>) {
        let _ = self.later.set(later);
    }

    fn reply_later(&self, unique: u64, reply: Vec<u8>) {
        match self.later.get().and_then(Weak::upgrade) {
            Some(later) => later.reply_later(unique, reply),
            None => tracing::debug!(unique, "virtiofs agent: no one to answer a parked request"),
        }
    }

    /// Whether the export's changes are streamed at all.
    pub(crate) fn has_events(&self) -> bool {
        self.hub.is_some()
    }

    /// The agent's pid, while one holds the stream.
    pub(crate) fn agent_pid(&self) -> Option<u32> {
        lock(&self.state).as_ref().map(|s| s.pid)
    }

    /// Notes changes a guest program (not the agent) made through the door, while an agent
    /// follows: their events are not handed to it.
    pub(crate) fn note_own(&self, changed: Vec<Own>) {
        if changed.is_empty() {
            return;
        }
        let mut own = lock(&self.own);
        for c in changed {
            own.note(c);
        }
    }

    /// Whether `pid` may open the control file: no agent holds it, or it is the agent.
    /// Never pid 0: the guest kernel gives it to every process outside the mount's pid
    /// namespace, so it names no one.
    pub(crate) fn may_open(&self, pid: u32) -> bool {
        pid != 0 && lock(&self.state).as_ref().is_none_or(|s| s.pid == pid)
    }

    /// Runs `f` on the expected replays when `pid` is the agent's.
    pub(crate) fn with_expected<T>(
        &self,
        pid: u32,
        f: impl FnOnce(&mut ExpectedReplays) -> T,
    ) -> Option<T> {
        let mut state = lock(&self.state);
        let s = state.as_mut().filter(|s| s.pid == pid)?;
        Some(f(&mut s.expected))
    }

    /// The agent `pid` opened the control file as `fh`: a new stream, starting with a
    /// rescan of the root (whatever changed while no agent followed is not known).
    pub(crate) fn open(self: &Arc<Self>, pid: u32, fh: u64) -> bool {
        let Some(hub) = &self.hub else { return false };
        let mut state = lock(&self.state);
        if pid == 0 || state.as_ref().is_some_and(|s| s.pid != pid) {
            return false;
        }
        let generation = self.generations.fetch_add(1, Relaxed);
        let sub = Arc::new(hub.subscribe());
        let mut stash = Vec::new();
        Event {
            epoch: hub.epoch(),
            seq: hub.last_seq(),
            kind: EventKind::Rescan {
                reason: "agent started".into(),
            },
            path: RelPath::root(),
            qid: None,
            attrs: None,
            dir: None,
            from_dir: None,
        }
        .write_json_line(&mut stash);
        if let Some(old) = state.replace(Stream {
            generation,
            pid,
            fh,
            sub,
            expected: ExpectedReplays::default(),
            parked: None,
            parked_since: Instant::now(),
            stash,
            syncs_waiting: HashMap::new(),
            syncs_delivered: Vec::new(),
        }) {
            self.end(old);
        }
        drop(state);
        self.stats.agent().streams.fetch_add(1, Relaxed);
        let door = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("virtiofs-agent".into())
            .spawn(move || door.run(generation));
        if let Err(e) = spawned {
            tracing::warn!("virtiofs agent: no stream thread: {e}");
            self.close(fh);
            return false;
        }
        true
    }

    /// The control file `fh` was released (or the guest unmounted: `None`): the stream ends.
    pub(crate) fn close(&self, fh: u64) {
        let mut state = lock(&self.state);
        if state.as_ref().is_some_and(|s| s.fh == fh) {
            if let Some(old) = state.take() {
                self.end(old);
            }
        }
        drop(state);
        self.wake.notify_all();
    }

    /// Ends whatever stream there is.
    pub(crate) fn close_all(&self) {
        if let Some(old) = lock(&self.state).take() {
            self.end(old);
        }
        self.wake.notify_all();
    }

    fn end(&self, old: Stream) {
        old.sub.close();
        if let Some((unique, _)) = old.parked {
            self.reply_later(unique, encode::error(unique, libc::EINTR));
        }
        let syncs = old.syncs_waiting.into_values().map(|(u, _)| u);
        for unique in syncs.chain(old.syncs_delivered.into_iter().map(|(u, _, _)| u)) {
            self.reply_later(unique, encode::error(unique, libc::ENOTCONN));
        }
    }

    /// A READ of the control file by the agent: the last batch is done (its syncs are
    /// answered, its expected replays dropped); events now, or the READ is parked.
    pub(crate) fn read(
        &self,
        pid: u32,
        fh: u64,
        unique: u64,
        size: u32,
    ) -> Result<ReadAnswer, i32> {
        let mut state = lock(&self.state);
        let Some(s) = state.as_mut().filter(|s| s.pid == pid && s.fh == fh) else {
            return Err(libc::EBADF);
        };
        if s.parked.is_some() {
            return Err(libc::EBUSY);
        }
        s.expected.replace(Vec::new());
        for (u, size, marker) in std::mem::take(&mut s.syncs_delivered) {
            self.reply_later(u, sync_reply(u, size, marker));
        }
        // Never the whole READ: a READ answered in full is followed by another for the rest
        // of the agent's buffer, which would wait for events with the batch not applied.
        let size = (size as usize).saturating_sub(1);
        let mut out = take_lines(&mut s.stash, size);
        if out.is_empty() || out.len() < size {
            let room = size - out.len();
            if room >= crossfs_events::MIN_READ_BYTES || out.is_empty() {
                out.extend(s.sub.read_blocking(room, Duration::ZERO));
            }
        }
        let out = if out.is_empty() {
            out
        } else {
            self.deliver(s, &out)
        };
        if out.is_empty() {
            if s.sub.is_closed() {
                return Ok(ReadAnswer::Now(Vec::new()));
            }
            s.parked = Some((unique, size as u32));
            s.parked_since = Instant::now();
            self.stats.agent().parked.fetch_add(1, Relaxed);
            drop(state);
            self.wake.notify_all();
            return Ok(ReadAnswer::Parked);
        }
        Ok(ReadAnswer::Now(out))
    }

    /// A FUSE_INTERRUPT of `unique`: a parked READ or a waiting sync is answered `EINTR`.
    pub(crate) fn interrupt(&self, unique: u64) {
        let mut state = lock(&self.state);
        let Some(s) = state.as_mut() else { return };
        let mut found = false;
        if s.parked.is_some_and(|(u, _)| u == unique) {
            s.parked = None;
            found = true;
        }
        s.syncs_waiting.retain(|_, (u, _)| {
            found |= *u == unique;
            *u != unique
        });
        s.syncs_delivered.retain(|(u, _, _)| {
            found |= *u == unique;
            *u != unique
        });
        drop(state);
        if found {
            self.stats.agent().interrupted.fetch_add(1, Relaxed);
            self.reply_later(unique, encode::error(unique, libc::EINTR));
        }
    }

    /// A sync (`crossfs sync`, the root's `user.crossfs.sync`): parked until the agent has
    /// applied every change made on the host before it. `Err`: answered at once.
    pub(crate) fn sync(self: &Arc<Self>, unique: u64, size: u32) -> Result<(), i32> {
        let (Some(hub), marker) = (self.hub.clone(), self.markers.fetch_add(1, Relaxed)) else {
            return Err(libc::ENODATA);
        };
        let sub = {
            let mut state = lock(&self.state);
            let Some(s) = state.as_mut() else {
                return Err(libc::ENODATA);
            };
            if s.syncs_waiting.len() + s.syncs_delivered.len() >= SYNCS_WAITING_LIMIT {
                return Err(libc::EAGAIN);
            }
            s.syncs_waiting.insert(marker, (unique, size));
            s.sub.clone()
        };
        let door = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("virtiofs-sync".into())
            .spawn(move || {
                let failed = match hub.sync_subscriber(&sub, marker) {
                    Ok(()) => {
                        door.wake.notify_all();
                        std::thread::sleep(SYNC_APPLY_TIMEOUT);
                        libc::ETIMEDOUT
                    }
                    Err(e) => {
                        tracing::warn!("virtiofs agent: sync: {e}");
                        libc::ETIMEDOUT
                    }
                };
                // Still waiting (the agent never applied the marker): fail the sync.
                let mut state = lock(&door.state);
                let still = state.as_mut().and_then(|s| {
                    let w = s.syncs_waiting.remove(&marker).map(|(u, _)| u);
                    let d = s
                        .syncs_delivered
                        .iter()
                        .position(|&(_, _, m)| m == marker)
                        .map(|i| s.syncs_delivered.remove(i).0);
                    w.or(d)
                });
                drop(state);
                if let Some(u) = still {
                    door.reply_later(u, encode::error(u, failed));
                }
            });
        if spawned.is_err() {
            if let Some(s) = lock(&self.state).as_mut() {
                s.syncs_waiting.remove(&marker);
            }
            return Err(libc::EAGAIN);
        }
        Ok(())
    }

    /// The stream thread of `generation`: answers its parked READ once events come.
    fn run(self: Arc<Self>, generation: u64) {
        loop {
            let (sub, size) = {
                let mut state = lock(&self.state);
                loop {
                    match state.as_ref() {
                        Some(s) if s.generation == generation => {
                            if let Some((_, size)) = s.parked {
                                break (s.sub.clone(), size);
                            }
                        }
                        _ => return,
                    }
                    state = self
                        .wake
                        .wait_timeout(state, POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            };
            let started = Instant::now();
            let data = sub.read_blocking(size as usize, POLL);
            if data.is_empty() && !sub.is_closed() {
                self.answer_long_wait(generation);
                continue;
            }
            let mut state = lock(&self.state);
            let Some(s) = state.as_mut().filter(|s| s.generation == generation) else {
                return;
            };
            match s.parked.take() {
                Some((unique, size)) => {
                    let lines = self.deliver(s, &data);
                    if lines.is_empty() && !data.is_empty() {
                        // All the guest's own changes: wait on.
                        s.parked = Some((unique, size));
                        continue;
                    }
                    drop(state);
                    let mut r = encode::Reply::with_capacity(lines.len());
                    r.bytes(&lines);
                    self.reply_later(unique, r.finish(unique));
                }
                None => s.stash.extend_from_slice(&data),
            }
            if data.is_empty() {
                // The hub is gone: the agent read the end of the stream.
                return;
            }
            tracing::trace!(waited = ?started.elapsed(), "virtiofs agent: parked read answered");
        }
    }

    /// Answers a READ parked for [`PARK_LIMIT`] with `EAGAIN` (the agent reads again):
    /// Linux's virtiofs driver sends no FUSE_INTERRUPT, and a signalled agent waits for
    /// its READ's answer before it can stop or die.
    fn answer_long_wait(&self, generation: u64) {
        let mut state = lock(&self.state);
        let Some(s) = state.as_mut().filter(|s| s.generation == generation) else {
            return;
        };
        if s.parked_since.elapsed() < PARK_LIMIT {
            return;
        }
        if let Some((unique, _)) = s.parked.take() {
            drop(state);
            self.reply_later(unique, encode::error(unique, libc::EAGAIN));
        }
    }

    /// What of `batch` (JSON lines) goes to the agent: all but the guest programs' own
    /// changes. Records what the agent is to replay of it, and which syncs it carries.
    fn deliver(&self, s: &mut Stream, batch: &[u8]) -> Vec<u8> {
        let mut list = Vec::new();
        let mut out = Vec::with_capacity(batch.len());
        let (mut lines, mut rescans) = (0, 0);
        let own = lock(&self.own);
        for line in batch.split_inclusive(|&b| b == b'\n') {
            let Ok(ev) = Event::from_json_line(line) else {
                continue;
            };
            if let EventKind::Rescan { .. } = ev.kind {
                rescans += 1;
            } else if let EventKind::Sync { cookie } = ev.kind {
                if let Some((u, size)) = s.syncs_waiting.remove(&cookie) {
                    s.syncs_delivered.push((u, size, cookie));
                }
            } else if let Some(x) = expected_of(&self.export, &ev) {
                if own.recent(&echoes_of(&x)) {
                    continue;
                }
                list.push(x);
            }
            lines += 1;
            out.extend_from_slice(line);
        }
        drop(own);
        self.stats.agent().events.fetch_add(lines, Relaxed);
        self.stats.agent().rescans.fetch_add(rescans, Relaxed);
        s.expected.replace(list);
        out
    }
}

/// What a guest program's own change that `x` would replay was noted as.
fn echoes_of(x: &Expected) -> Own {
    match x {
        Expected::Create { dir, name } => Own::Created(*dir, name.clone()),
        Expected::Remove { dir, name, .. } => Own::Removed(*dir, name.clone()),
        Expected::Rename {
            from_dir,
            from,
            to_dir,
            to,
            ..
        } => Own::Renamed((*from_dir, from.clone()), (*to_dir, to.clone())),
        Expected::Modify { node } => Own::Modified(*node),
        Expected::Attrib { node } => Own::Attrib(*node),
    }
}

/// The reply to a sync: the marker, as text (what `crossfs mount` answers too).
fn sync_reply(unique: u64, size: u32, marker: u64) -> Vec<u8> {
    let value = marker.to_string();
    let mut r = encode::Reply::new();
    if size == 0 {
        r.u32(value.len() as u32).u32(0);
    } else if value.len() > size as usize {
        return encode::error(unique, libc::ERANGE);
    } else {
        r.bytes(value.as_bytes());
    }
    r.finish(unique)
}

/// The whole lines of `stash` that fit in `size` bytes, taken out of it.
fn take_lines(stash: &mut Vec<u8>, size: usize) -> Vec<u8> {
    let fit = stash.len().min(size);
    let end = stash[..fit]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    stash.drain(..end).collect()
}

/// The host inode at `path`, found beneath the export's root.
pub(crate) fn resolve(
    export: &Export,
    path: &RelPath,
) -> Option<(
    Arc<crossfs_export::handles::PathHandle>,
    Option<crossfs_export::Statx>,
)> {
    let mut handle = export.root.clone();
    let mut st = None;
    for (i, name) in path.components().enumerate() {
        let dir = Dir {
            handle: &handle,
            is_root: i == 0,
        };
        let (next, s) = export.lookup(dir, name).ok()?;
        handle = next;
        st = Some(s);
    }
    Some((handle, st))
}

fn key_at(export: &Export, path: &RelPath) -> Option<Key> {
    resolve(export, path).map(|(h, _)| h.key())
}

/// What the agent will do for `ev`, in host inodes; `None` for what it does not replay,
/// or when the directory involved is already gone (the agent's replay is then refused).
fn expected_of(export: &Export, ev: &Event) -> Option<Expected> {
    let mode = ev.attrs.map_or(libc::S_IFREG, |a| a.mode);
    let in_parent = |path: &RelPath| -> Option<(Key, Vec<u8>)> {
        Some((key_at(export, &path.parent()?)?, path.file_name().to_vec()))
    };
    match &ev.kind {
        EventKind::Created => {
            let (dir, name) = in_parent(&ev.path)?;
            Some(Expected::Create { dir, name })
        }
        EventKind::Removed => {
            let (dir, name) = in_parent(&ev.path)?;
            let ino = ev.attrs.map_or(0, |a| a.ino);
            Some(Expected::Remove {
                dir,
                name,
                mode,
                ino,
            })
        }
        EventKind::Renamed { from } => {
            let (from_dir, from_name) = in_parent(from)?;
            let (to_dir, to) = in_parent(&ev.path)?;
            Some(Expected::Rename {
                from_dir,
                from: from_name,
                to_dir,
                to,
                to_path: ev.path.clone(),
                mode,
            })
        }
        EventKind::Modified => Some(Expected::Modify {
            node: key_at(export, &ev.path)?,
        }),
        EventKind::Attrib => Some(Expected::Attrib {
            node: key_at(export, &ev.path)?,
        }),
        EventKind::Rescan { .. } | EventKind::Sync { .. } | EventKind::Warning { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_lines_leave_the_stash() {
        let mut stash = b"one\ntwo\nthree\n".to_vec();
        assert_eq!(take_lines(&mut stash, 9), b"one\ntwo\n");
        assert_eq!(take_lines(&mut stash, 3), b"");
        assert_eq!(take_lines(&mut stash, 64), b"three\n");
        assert!(stash.is_empty());
    }
}
