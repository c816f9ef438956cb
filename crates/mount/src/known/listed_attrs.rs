//! When attributes the mount fetched earlier may answer a READDIRPLUS, or while change
//! events are followed a GETATTR, again, with no Tgetattr.
//!
//! The kernel lists a directory from its start with READDIRPLUS every time a program reads
//! it (`ls -l`, `git status`, a build scanning its tree), and every entry carries the file's
//! attributes, which the kernel then takes as its own. Fetching them again for every entry
//! of every listing is most of what a repeated `git status` costs. A file's attributes may
//! be reused when nothing can have changed them since they were fetched:
//! - **no change through this mount** touched the file since: a write, setattr, xattr
//!   change or link marks the file, and an entry change (create, remove, rename, link)
//!   marks the directories and the files it names, when it starts and again once the
//!   server has answered (a fetch overlapping the change may have missed it); so does a
//!   read by the server for the mount (data, entries, a link's target), which may move
//!   the access time;
//! - **no change event** named the file since: its qid, its path, or its directory (a
//!   rescan, or an event the mount cannot place, counts for every file);
//! - and, unless change events were followed all the while, they are **younger than the
//!   attribute timeout** of the cache mode: the kernel would have trusted them that long
//!   anyway, and gets them for what is left of it only. While events are followed they
//!   stay good until a change or an event says otherwise; losing the event stream, and
//!   binding files again after a reconnect, count for every file.
//!
//! Files are named by `qid.path`, so a hard link changed under another name counts too. A
//! file created behind has a `qid.path` of the mount's own until the server has made it; a
//! change that started on that one marks the file's own once it is known.
//! Only the clock and these rules live here; the attributes are kept with their node in the
//! inode table. What this module must not do: decide anything for LOOKUP (directory
//! replicas do), or for a GETATTR while events are not followed (it then asks the
//! server, as the cache mode promises). The kernel asks for a file's attributes again after
//! it reads the file (for the access time): with events followed, a file read through
//! the page cache, or whose read brought its attributes back (Twalkread), costs no request.
//! Access times moved by reads on the host are not change events, so they show only once
//! the file changes or is read through the mount.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossfs_wire::Rgetattr;

use crate::known::inode::{is_unmade, Status};

/// Files remembered as changed, beyond which all count as changed and are forgotten.
const CHANGED_LIMIT: usize = 1 << 16;

/// Files created behind remembered by their placeholder `qid.path` once made (see
/// [`ListedAttrs::unmade`]), beyond which those no change in flight started on are forgotten.
const MADE_LIMIT: usize = 1 << 12;

/// When attributes were fetched (taken before the request is sent).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fetched {
    tick: u64,
    at: Instant,
    following: bool,
}

/// The change clock of the mount's files and the rules for reusing attributes (see the
/// module doc).
#[derive(Debug, Default)]
pub(crate) struct ListedAttrs {
    /// Moves on with every change noted.
    clock: AtomicU64,
    /// The tick of the last change that counts for every file.
    all_changed: AtomicU64,
    /// `qid.path` -> the tick of its last change.
    changed: Mutex<HashMap<u64, u64>>,
    /// `qid.path` -> the change events that marked it last, while they all showed it in
    /// one state (locked after `changed`; see [`ListedAttrs::changed_as_shown`]).
    shown: Mutex<HashMap<u64, ShownRun>>,
    /// `qid.path` -> the tick of its last read by the server for the mount (a change
    /// too); and the tick past which every file counts as read (the map overflowed).
    read: Mutex<HashMap<u64, u64>>,
    all_read: AtomicU64,
    following: AtomicBool,
    /// `qid.path` -> the start tick of the newest change of it sent behind and not yet
    /// answered (locked after `changed`; see [`ChangeInFlight::sent_behind`]).
    behind: Mutex<HashMap<u64, u64>>,
    /// Files created behind by their placeholder `qid.path` (locked after `changed`; see
    /// [`ListedAttrs::made`]).
    unmade: Mutex<UnmadeFiles>,
}

/// Placeholder `qid.path` -> the changes in flight that started on it, and the file's own
/// once made: a change may start on the placeholder it looked up just before the file was
/// made, or end after. Made files no change is in flight on are forgotten past
/// [`MADE_LIMIT`]; a change that starts on one of them later counts for every file.
#[derive(Debug, Default)]
struct UnmadeFiles {
    files: HashMap<u64, Unmade>,
    /// The highest placeholder forgotten (placeholders are handed out in order).
    forgotten_up_to: u64,
}

#[derive(Debug, Default)]
struct Unmade {
    changes: usize,
    made_as: Option<u64>,
}

/// Change events that marked a file one after the other, all showing it in the same state,
/// with nothing else marking it between them.
#[derive(Clone, Copy, Debug)]
struct ShownRun {
    /// The tick of the run's last mark: the run counts while that is the file's last mark.
    last: u64,
    /// The file's mark before the run's first (0: none).
    before: u64,
    /// The state the events showed.
    shown: Status,
}

/// A change through the mount in progress: the files it touches are marked changed now
/// and again when this is dropped, which must be once the server has answered.
#[must_use = "the change must be marked again once the server has answered"]
pub(crate) struct ChangeInFlight {
    listed: Arc<ListedAttrs>,
    files: Vec<u64>,
    /// The tick of the mark made when the change started.
    started: u64,
    /// For each of `files`, the tick of its mark before this change's (0: none).
    marked_before: Vec<u64>,
    /// Also run once the server has answered (the directory replicas' update).
    at_end: Option<Box<dyn FnOnce() + Send>>,
    /// Sent behind (see [`ChangeInFlight::sent_behind`]).
    behind: bool,
}

impl Drop for ChangeInFlight {
    fn drop(&mut self) {
        let files = self.listed.ended(&self.files);
        self.listed.changed(files);
        if self.behind {
            self.listed.end_behind(&self.files, self.started);
        }
        if let Some(f) = self.at_end.take() {
            f();
        }
    }
}

impl ChangeInFlight {
    /// Ends the change, as dropping it does, once the server has answered with the
    /// attributes `answer` of the file after it. Returns when they count as fetched (see
    /// [`ListedAttrs::reusable_for`]) if nothing but this change marked the file while it
    /// was in flight (no other change, no read, no event but ones showing the file as the
    /// answer does: its echo): then they are what the server would answer now, and stay
    /// so until the next mark. `None` otherwise.
    pub(crate) fn end_with_answer(mut self, answer: &Rgetattr) -> Option<Fetched> {
        let l = self.listed.clone();
        let files = std::mem::take(&mut self.files);
        let own = l.ended(&files);
        let mut changed = crate::sync::lock(&l.changed);
        let qid_path = answer.qid.path;
        // The change's own echo may come before its answer: an event showing the file as
        // the answer does leaves it alone.
        let alone = (changed.get(&qid_path) == Some(&self.started)
            || l.shown_since(&changed, qid_path, self.started, Status::of(answer)))
            && l.all_changed.load(SeqCst) <= self.started;
        // The end mark, under the same lock as the check: a mark after it is later. Not
        // where the file's last mark is the start of a later change sent behind: the
        // server answers that one after this one, and its end marks the file then.
        let tick = l.clock.fetch_add(1, SeqCst) + 1;
        let behind = crate::sync::lock(&l.behind);
        for (&file, &own) in files.iter().zip(&own) {
            let later_behind = behind
                .get(&file)
                .is_some_and(|&s| s > self.started && changed.get(&own) == Some(&s));
            if !(self.behind && later_behind) {
                changed.insert(own, tick);
            }
        }
        drop(behind);
        if changed.len() > CHANGED_LIMIT {
            changed.clear();
            l.all_changed.store(tick, SeqCst);
        }
        drop(changed);
        if self.behind {
            l.end_behind(&files, self.started);
        }
        let fetched = Fetched {
            tick,
            at: Instant::now(),
            following: l.is_following(),
        };
        // `self` drops here: its files were taken, so only `at_end` runs.
        drop(self);
        alone.then_some(fetched)
    }

    /// Whether attributes of file `qid_path` fetched at `f` are what the server has as
    /// this change starts: events were followed all the while, and nothing but this
    /// change marked the file since `f` (a change sent behind starts from them).
    pub(crate) fn found_unchanged(&self, qid_path: u64, f: &Fetched) -> bool {
        let Some(i) = self.files.iter().position(|&q| q == qid_path) else {
            return false;
        };
        let l = &self.listed;
        let changed = crate::sync::lock(&l.changed);
        f.following
            && l.is_following()
            && l.all_changed.load(SeqCst) <= f.tick
            && self.marked_before[i] <= f.tick
            && changed.get(&qid_path) == Some(&self.started)
    }

    /// Notes that this change is sent behind: the server runs such changes in the order
    /// they were sent and answers them in that order, so the end of one whose file a later
    /// one (started, nothing else marking the file since) changes too leaves the file's
    /// mark to the later one. The last change of a run of them (a create's write, chown,
    /// chmod and utimens) then ends alone, and the attributes it is answered with are
    /// what the next change starts from, with no Tgetattr and no waiting.
    pub(crate) fn sent_behind(&mut self) {
        self.behind = true;
        let mut behind = crate::sync::lock(&self.listed.behind);
        for &file in &self.files {
            behind.insert(file, self.started);
        }
        if behind.len() > CHANGED_LIMIT {
            // Forgetting only costs end marks.
            behind.clear();
        }
    }

    /// Runs `f` too once the server has answered.
    pub(crate) fn also_at_end(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.at_end = Some(Box::new(f));
        self
    }
}

impl Fetched {
    /// Whether these attributes were asked for before `other` were: a reply that arrives
    /// after a later request's is older news (the later one may show a change this one
    /// missed), and must not replace it.
    pub(crate) fn asked_before(&self, other: &Fetched) -> bool {
        self.at < other.at
    }
}

impl ListedAttrs {
    /// The files' own `qid.path`s, as a change of `files` starts: a file created behind
    /// and made since the caller looked its path up is marked by its own (and any still
    /// unmade is counted, so that its own can be marked as the change ends).
    fn started_on(&self, files: &[u64]) -> Vec<u64> {
        let mut unmade = crate::sync::lock(&self.unmade);
        let mut forgotten = false;
        let own = files
            .iter()
            .map(|&file| {
                if !is_unmade(file) {
                    return file;
                }
                if !unmade.files.contains_key(&file) && file <= unmade.forgotten_up_to {
                    forgotten = true;
                    return file;
                }
                let e = unmade.files.entry(file).or_default();
                e.changes += 1;
                e.made_as.unwrap_or(file)
            })
            .collect();
        drop(unmade);
        if forgotten {
            self.all_changed();
        }
        own
    }

    /// As a change of `files` (as it started) ends: their own `qid.path`s now (see
    /// [`Self::made`]).
    fn ended(&self, files: &[u64]) -> Vec<u64> {
        let mut unmade = crate::sync::lock(&self.unmade);
        files
            .iter()
            .map(|&file| {
                let Some(e) = unmade.files.get_mut(&file) else {
                    return file;
                };
                let own = e.made_as.unwrap_or(file);
                e.changes -= 1;
                // Kept once made: a change may still start on the placeholder.
                if e.changes == 0 && e.made_as.is_none() {
                    unmade.files.remove(&file);
                }
                own
            })
            .collect()
    }

    /// The change sent behind that started at tick `started` to `files` ended.
    fn end_behind(&self, files: &[u64], started: u64) {
        let mut behind = crate::sync::lock(&self.behind);
        for file in files {
            if behind.get(file) == Some(&started) {
                behind.remove(file);
            }
        }
    }

    /// Call before sending the request that fetches attributes.
    pub(crate) fn before_fetch(&self) -> Fetched {
        Fetched {
            tick: self.clock.load(SeqCst),
            at: Instant::now(),
            following: self.following.load(SeqCst),
        }
    }

    /// Notes that the files with these `qid.path`s may have changed; returns the mark's tick.
    pub(crate) fn changed(&self, files: impl IntoIterator<Item = u64>) -> u64 {
        let tick = self.clock.fetch_add(1, SeqCst) + 1;
        let mut changed = crate::sync::lock(&self.changed);
        for file in files {
            changed.insert(file, tick);
        }
        if changed.len() > CHANGED_LIMIT {
            changed.clear();
            self.all_changed.store(tick, SeqCst);
        }
        tick
    }

    /// As [`Self::changed`], for a change event that showed file `file` in state `shown`
    /// (one of `files`). The event may be the echo of a change through the mount whose
    /// answer has not been handled yet (events and answers come on two connections): if
    /// the answer shows the file in the same state, it still counts as alone (see
    /// [`ChangeInFlight::end_with_answer`], [`Self::created`]). The state includes the
    /// change time, which a later change moves.
    pub(crate) fn changed_as_shown(
        &self,
        files: impl IntoIterator<Item = u64>,
        (file, shown): (u64, Status),
    ) -> u64 {
        let tick = self.clock.fetch_add(1, SeqCst) + 1;
        let mut changed = crate::sync::lock(&self.changed);
        let mut runs = crate::sync::lock(&self.shown);
        let before = changed.get(&file).copied().unwrap_or(0);
        let run = match runs.get(&file) {
            Some(r) if r.last == before && r.shown == shown => ShownRun { last: tick, ..*r },
            _ => ShownRun {
                last: tick,
                before,
                shown,
            },
        };
        if runs.len() >= CHANGED_LIMIT {
            // Forgetting runs only forgets echoes: their files count as changed.
            runs.clear();
        }
        runs.insert(file, run);
        drop(runs);
        for f in files.into_iter().chain([file]) {
            changed.insert(f, tick);
        }
        if changed.len() > CHANGED_LIMIT {
            changed.clear();
            self.all_changed.store(tick, SeqCst);
        }
        tick
    }

    /// Whether file `qid_path` was marked after tick `since` by change events only, each
    /// showing it in state `shown`. `changed` is `self.changed`, locked.
    fn shown_since(
        &self,
        changed: &HashMap<u64, u64>,
        qid_path: u64,
        since: u64,
        shown: Status,
    ) -> bool {
        let Some(&last) = changed.get(&qid_path) else {
            return false;
        };
        crate::sync::lock(&self.shown)
            .get(&qid_path)
            .is_some_and(|r| r.last == last && r.before <= since && r.shown == shown)
    }

    /// Marks a file the mount just created (its `qid.path` may be that of a removed file,
    /// whose fetched attributes must not answer for it) and returns when the attributes
    /// `answer` the creation answered count as fetched, if nothing marked the file since
    /// `asked` (taken before the creation was sent) but its echo: an event of a host change
    /// to it would have.
    pub(crate) fn created(&self, answer: &Rgetattr, asked: &Fetched) -> Option<Fetched> {
        self.made(None, answer, asked)
    }

    /// [`ListedAttrs::created`] for a file created behind, known by `qid.path` `unmade`
    /// until this answer: changes to it that started meanwhile marked `unmade`, and their
    /// marks move to the file's own `qid.path` (their answers then count as fetched, as
    /// they would have for a file made before they started), while the creation's answer,
    /// which they went past, does not count.
    pub(crate) fn made(
        &self,
        unmade: Option<u64>,
        answer: &Rgetattr,
        asked: &Fetched,
    ) -> Option<Fetched> {
        let qid_path = answer.qid.path;
        let mut changed = crate::sync::lock(&self.changed);
        let later = unmade.and_then(|u| changed.remove(&u));
        if let Some(u) = unmade {
            // Changes that started on `unmade`, or start on it from now on, mark the
            // file's own.
            let mut unmade = crate::sync::lock(&self.unmade);
            unmade.files.entry(u).or_default().made_as = Some(qid_path);
            if unmade.files.len() > MADE_LIMIT {
                let UnmadeFiles {
                    files,
                    forgotten_up_to,
                } = &mut *unmade;
                files.retain(|&placeholder, e| {
                    let keep = e.changes > 0 || e.made_as.is_none();
                    if !keep {
                        *forgotten_up_to = (*forgotten_up_to).max(placeholder);
                    }
                    keep
                });
            }
        }
        let untouched = self.all_changed.load(SeqCst) <= asked.tick
            && (changed
                .get(&qid_path)
                .is_none_or(|&tick| tick <= asked.tick)
                || self.shown_since(&changed, qid_path, asked.tick, Status::of(answer)));
        let tick = self.clock.fetch_add(1, SeqCst) + 1;
        changed.insert(qid_path, later.unwrap_or(tick));
        if changed.len() > CHANGED_LIMIT {
            changed.clear();
            self.all_changed.store(tick, SeqCst);
        }
        drop(changed);
        (untouched && asked.following && later.is_none()).then(|| Fetched {
            tick,
            at: Instant::now(),
            following: self.is_following(),
        })
    }

    /// Notes that the server is about to read the file with this `qid.path` for the
    /// mount, which may move its access time: a change, and a read (see
    /// [`ListedAttrs::read_since`]).
    pub(crate) fn reading(&self, qid_path: u64) {
        self.changed([qid_path]);
        let tick = self.clock.load(SeqCst);
        let mut read = crate::sync::lock(&self.read);
        read.insert(qid_path, tick);
        if read.len() > CHANGED_LIMIT {
            read.clear();
            self.all_read.store(tick, SeqCst);
        }
    }

    /// Whether the server may have read the file with this `qid.path` for the mount since
    /// `f`: attributes a directory was listed with then may show an access time from
    /// before (a directory replica follows change events, which carry attributes, but
    /// not reads).
    pub(crate) fn read_since(&self, qid_path: u64, f: &Fetched) -> bool {
        if self.all_read.load(SeqCst) > f.tick {
            return true;
        }
        let read = crate::sync::lock(&self.read);
        read.get(&qid_path).is_some_and(|&tick| tick > f.tick)
    }

    /// Whether anything may have changed the file with this `qid.path` since `f` (a
    /// change or read through the mount, an event, anything that counts for every file).
    pub(crate) fn changed_since(&self, qid_path: u64, f: &Fetched) -> bool {
        if self.all_changed.load(SeqCst) > f.tick {
            return true;
        }
        let changed = crate::sync::lock(&self.changed);
        changed.get(&qid_path).is_some_and(|&tick| tick > f.tick)
    }

    /// Starts a change through the mount to the files with these `qid.path`s.
    pub(crate) fn change(self: &Arc<Self>, files: Vec<u64>) -> ChangeInFlight {
        let started = self.clock.fetch_add(1, SeqCst) + 1;
        let mut changed = crate::sync::lock(&self.changed);
        let own = self.started_on(&files);
        let marked_before = own
            .iter()
            .map(|&file| changed.insert(file, started).unwrap_or(0))
            .collect();
        if changed.len() > CHANGED_LIMIT {
            changed.clear();
            self.all_changed.store(started, SeqCst);
        }
        drop(changed);
        ChangeInFlight {
            listed: self.clone(),
            files,
            started,
            marked_before,
            at_end: None,
            behind: false,
        }
    }

    /// Anything may have changed (a rescan, files bound again after a reconnect).
    pub(crate) fn all_changed(&self) {
        let tick = self.clock.fetch_add(1, SeqCst) + 1;
        self.all_changed.store(tick, SeqCst);
    }

    /// Whether the server's change events are followed from now on. Either way, nothing
    /// fetched before is reused: stopping may have lost events, and what was fetched
    /// before starting was not followed.
    pub(crate) fn set_following(&self, following: bool) {
        if self.following.swap(following, SeqCst) != following {
            self.all_changed();
        }
    }

    /// Whether change events are followed now.
    pub(crate) fn is_following(&self) -> bool {
        self.following.load(SeqCst)
    }

    /// Whether events were followed at `f` and all the while since, with nothing that
    /// counts for every file.
    pub(crate) fn followed_since(&self, f: &Fetched) -> bool {
        f.following && self.is_following() && self.all_changed.load(SeqCst) <= f.tick
    }

    /// As [`Self::followed_since`], and nothing changed file `qid_path` since `f`.
    pub(crate) fn unchanged_since(&self, qid_path: u64, f: &Fetched) -> bool {
        self.followed_since(f)
            && crate::sync::lock(&self.changed)
                .get(&qid_path)
                .is_none_or(|&tick| tick <= f.tick)
    }

    /// For how long the kernel may trust the attributes of file `qid_path` fetched at `f`
    /// if they are sent to it now, with `ttl` the cache mode's attribute timeout; `None` if
    /// they must be fetched again.
    pub(crate) fn reusable_for(
        &self,
        qid_path: u64,
        f: &Fetched,
        ttl: Duration,
    ) -> Option<Duration> {
        if self.all_changed.load(SeqCst) > f.tick {
            return None;
        }
        let changed = crate::sync::lock(&self.changed);
        if changed.get(&qid_path).is_some_and(|&tick| tick > f.tick) {
            return None;
        }
        drop(changed);
        if f.following {
            // Still following: had it stopped since, every file would count as changed.
            return Some(ttl);
        }
        ttl.checked_sub(f.at.elapsed())
            .filter(|left| !left.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(1);

    /// A file's attributes as the server answers them: `qid.path` 1 and change time `c`.
    fn answer(c: u64) -> Rgetattr {
        answer_of(1, c)
    }

    /// The attributes of the file with `qid.path` `path` and change time `c`.
    fn answer_of(path: u64, c: u64) -> Rgetattr {
        Rgetattr {
            qid: crossfs_wire::Qid {
                ty: 0,
                version: 0,
                path,
            },
            mode: libc::S_IFREG | 0o644,
            ctime_sec: c,
            ..Rgetattr::default()
        }
    }

    #[test]
    fn made_files_past_the_limit_are_forgotten_and_a_change_on_one_counts_for_all() {
        let l = Arc::new(ListedAttrs::default());
        l.set_following(true);
        let first = 0xffff_0000_0000_0000;
        for n in 0..=MADE_LIMIT as u64 {
            let asked = l.before_fetch();
            l.made(Some(first + n), &answer_of(10 + n, 1), &asked);
        }
        assert!(l.unmade.lock().unwrap().files.len() <= MADE_LIMIT);
        let f = l.before_fetch();
        drop(l.change(vec![first]));
        assert_eq!(l.reusable_for(99, &f, TTL), None, "every file");
    }

    #[test]
    fn fresh_attributes_are_reused_for_what_is_left_of_the_timeout() {
        let l = ListedAttrs::default();
        let f = l.before_fetch();
        let left = l.reusable_for(1, &f, TTL).unwrap();
        assert!(left <= TTL && left > TTL / 2, "{left:?}");
        assert_eq!(l.reusable_for(1, &f, Duration::ZERO), None);
    }

    #[test]
    fn a_change_through_the_mount_ends_reuse_of_its_files_only() {
        let l = Arc::new(ListedAttrs::default());
        let before = l.before_fetch();
        let change = l.change(vec![1, 2]);
        assert_eq!(l.reusable_for(1, &before, TTL), None);
        assert_eq!(l.reusable_for(2, &before, TTL), None);
        assert!(l.reusable_for(3, &before, TTL).is_some());
        // Fetched while the change is in flight: maybe without it.
        let during = l.before_fetch();
        drop(change);
        assert_eq!(l.reusable_for(1, &during, TTL), None);
        let after = l.before_fetch();
        assert!(l.reusable_for(1, &after, TTL).is_some());
    }

    #[test]
    fn a_change_answered_alone_gives_attributes_as_fetched_and_not_when_marked_meanwhile() {
        let l = Arc::new(ListedAttrs::default());
        l.set_following(true);
        let alone = l.change(vec![1, 2]).end_with_answer(&answer(1)).unwrap();
        assert!(l.reusable_for(1, &alone, TTL).is_some());
        l.changed([1]);
        assert_eq!(
            l.reusable_for(1, &alone, TTL),
            None,
            "a later change ends it"
        );
        // An event, a read or another change while in flight: the answer may be older.
        let change = l.change(vec![1]);
        l.changed([1]);
        assert!(change.end_with_answer(&answer(1)).is_none());
        let change = l.change(vec![1]);
        l.reading(1);
        assert!(change.end_with_answer(&answer(1)).is_none());
        let change = l.change(vec![1]);
        l.all_changed();
        assert!(change.end_with_answer(&answer(1)).is_none());
        // Another file's mark is no matter.
        let change = l.change(vec![1]);
        l.changed([3]);
        let f = change.end_with_answer(&answer(1)).unwrap();
        assert!(l.reusable_for(1, &f, TTL).is_some());
    }

    #[test]
    fn the_last_of_a_run_of_changes_sent_behind_is_answered_alone() {
        let l = Arc::new(ListedAttrs::default());
        l.set_following(true);
        let behind = |l: &Arc<ListedAttrs>| {
            let mut c = l.change(vec![1]);
            c.sent_behind();
            c
        };
        // A write, a chown, a chmod: answered in the order sent.
        let (write, chown, chmod) = (behind(&l), behind(&l), behind(&l));
        assert!(write.end_with_answer(&answer(1)).is_none());
        assert!(chown.end_with_answer(&answer(2)).is_none());
        let f = chmod.end_with_answer(&answer(3)).unwrap();
        assert!(l.reusable_for(1, &f, TTL).is_some());
        // Anything else marking the file meanwhile still counts.
        let (first, last) = (behind(&l), behind(&l));
        l.changed([1]);
        assert!(first.end_with_answer(&answer(4)).is_none());
        assert!(last.end_with_answer(&answer(5)).is_none());
        // So does a later change that waits for the server: its answer may come first.
        let first = behind(&l);
        let waiting = l.change(vec![1]);
        assert!(first.end_with_answer(&answer(6)).is_none());
        assert!(waiting.end_with_answer(&answer(7)).is_none());
        // A refused change marks its file as any other.
        let (refused, last) = (behind(&l), behind(&l));
        drop(refused);
        assert!(last.end_with_answer(&answer(8)).is_none());
        assert!(l.behind.lock().unwrap().is_empty());
    }

    #[test]
    fn a_change_overtaken_by_its_own_echo_is_still_answered_alone() {
        let l = Arc::new(ListedAttrs::default());
        l.set_following(true);
        let shown = |c| (1, Status::of(&answer(c)));
        // Events and answers come on two connections: the echo may come first, even twice.
        let change = l.change(vec![1]);
        l.changed_as_shown([7], shown(2));
        l.changed_as_shown([], shown(2));
        let f = change.end_with_answer(&answer(2)).unwrap();
        assert!(l.reusable_for(1, &f, TTL).is_some());
        // An event showing another state is a change on the host, whatever follows it.
        let change = l.change(vec![1]);
        l.changed_as_shown([], shown(3));
        assert!(change.end_with_answer(&answer(4)).is_none());
        let change = l.change(vec![1]);
        l.changed_as_shown([], shown(5));
        l.changed_as_shown([], shown(6));
        assert!(change.end_with_answer(&answer(6)).is_none());
        // Another mark between the echoes breaks the run.
        let change = l.change(vec![1]);
        l.changed_as_shown([], shown(7));
        l.reading(1);
        l.changed_as_shown([], shown(7));
        assert!(change.end_with_answer(&answer(7)).is_none());
        // So does one before the change's own: it was not the change's echo.
        let change = l.change(vec![1]);
        let other = l.change(vec![1]);
        l.changed_as_shown([], shown(8));
        drop(other);
        assert!(change.end_with_answer(&answer(8)).is_none());
    }

    #[test]
    fn a_created_file_overtaken_by_its_echo_keeps_its_answer() {
        let l = Arc::new(ListedAttrs::default());
        l.set_following(true);
        let asked = l.before_fetch();
        l.changed_as_shown([], (1, Status::of(&answer(2))));
        assert!(l.created(&answer(2), &asked).is_some());
        let asked = l.before_fetch();
        l.changed_as_shown([], (1, Status::of(&answer(3))));
        assert!(l.created(&answer(4), &asked).is_none(), "a host change");
    }

    #[test]
    fn a_change_that_started_before_its_file_was_made_marks_the_file_made() {
        let l = Arc::new(ListedAttrs::default());
        l.set_following(true);
        let unmade = 0xffff_0000_0000_0007;
        let asked = l.before_fetch();
        // A removal that waits for the server, started while the create was unanswered.
        let removal = l.change(vec![unmade]);
        assert!(l.made(Some(unmade), &answer(1), &asked).is_none());
        // Fetched before the removal's answer: maybe without it.
        let during = l.before_fetch();
        assert!(l.reusable_for(1, &during, TTL).is_some());
        // A change that looked the file up before it was made, and starts after.
        let late = l.change(vec![unmade]);
        assert_eq!(l.reusable_for(1, &during, TTL), None, "marked as it starts");
        let after_late_start = l.before_fetch();
        drop(removal);
        assert_eq!(l.reusable_for(1, &after_late_start, TTL), None, "and ends");
        let after_removal = l.before_fetch();
        drop(late);
        assert_eq!(l.reusable_for(1, &after_removal, TTL), None);
        // A change that looked the placeholder up before the file was made, and starts
        // after, with no change in flight on it when it was made.
        let asked = l.before_fetch();
        let other = unmade + 1;
        let created = l.made(Some(other), &answer_of(2, 1), &asked).unwrap();
        assert!(l.reusable_for(2, &created, TTL).is_some());
        drop(l.change(vec![other]));
        assert_eq!(l.reusable_for(2, &created, TTL), None);
        assert!(l
            .unmade
            .lock()
            .unwrap()
            .files
            .values()
            .all(|e| e.changes == 0));
    }

    #[test]
    fn reads_are_told_from_other_changes() {
        let l = ListedAttrs::default();
        let listed = l.before_fetch();
        l.changed([1]);
        assert!(!l.read_since(1, &listed), "a change is no read");
        assert!(l.changed_since(1, &listed) && !l.changed_since(3, &listed));
        l.reading(2);
        assert!(l.read_since(2, &listed));
        assert!(
            l.reusable_for(2, &listed, TTL).is_none(),
            "a read is a change too"
        );
        assert!(!l.read_since(2, &l.before_fetch()), "listed after the read");
        for f in 10..10 + CHANGED_LIMIT as u64 + 1 {
            l.reading(f);
        }
        assert!(
            l.read_since(3, &listed),
            "past the limit every file counts as read"
        );
        assert!(!l.read_since(3, &l.before_fetch()));
    }

    #[test]
    fn a_change_that_counts_for_every_file_ends_all_reuse() {
        let l = ListedAttrs::default();
        let f = l.before_fetch();
        l.all_changed();
        assert_eq!(l.reusable_for(7, &f, TTL), None);
        assert!(l.reusable_for(7, &l.before_fetch(), TTL).is_some());
    }

    #[test]
    fn too_many_changed_files_count_as_every_file_changed() {
        let l = ListedAttrs::default();
        let f = l.before_fetch();
        l.changed(0..CHANGED_LIMIT as u64 + 1);
        assert_eq!(l.reusable_for(u64::MAX, &f, TTL), None);
        assert!(l.changed.lock().unwrap().is_empty());
    }

    #[test]
    fn while_following_events_reuse_has_no_age_limit_and_ends_when_they_stop() {
        let l = ListedAttrs::default();
        let unfollowed = l.before_fetch();
        l.set_following(true);
        assert_eq!(l.reusable_for(1, &unfollowed, TTL), None);
        let f = l.before_fetch();
        std::thread::sleep(Duration::from_millis(20));
        let ttl = Duration::from_millis(10);
        assert_eq!(l.reusable_for(1, &f, ttl), Some(ttl));
        // Following again (no change) keeps it; stopping ends reuse.
        l.set_following(true);
        assert_eq!(l.reusable_for(1, &f, ttl), Some(ttl));
        l.set_following(false);
        assert_eq!(l.reusable_for(1, &f, ttl), None);
    }
}
