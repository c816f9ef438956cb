//! The FUSE side of fetching small files ahead: a directory's small files asked for
//! together (Treadfiles, kept in `crate::ahead::small_files`), answering first reads, and
//! pushed into the kernel's page cache as they come (`crate::ahead::pushed_pages`).
//!
//! What this must not do: answer a read with a file that anything may have changed since it
//! was asked for (see [`MountState::small_file_usable`]), or block the client's reader
//! thread, where the fetch completes.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::session::INodeNo;
use crossfs_client::ClientError;
use crossfs_wire::{Rmessage, Tmessage, Treadfiles};

use super::MountState;
use crate::ahead::small_files::{Asking, SmallFile, Waiter};
use crate::known::cache::CacheMode;

impl MountState {
    /// Calls `then` with node `ino`'s content fetched with its directory's small files
    /// (`crate::ahead::small_files`) if that is here and nothing changed the file since, or once
    /// it comes if it is on the way; else with `None`, which the caller then asks the
    /// server for (on a thread that may wait: `then` may be called on the client's reader
    /// thread only with the file). Starts fetching the directory's next small files when
    /// this read makes it time to.
    pub(super) fn with_small_file(self: &Arc<Self>, ino: u64, then: Waiter) {
        let Some(qid_path) = self
            .known
            .inodes
            .qid_path(ino)
            .filter(|_| self.follows_events())
        else {
            return then(None);
        };
        let Some((then, found)) = self.ahead.small_files.find(qid_path, then) else {
            return; // on the way
        };
        let found = found.filter(|f| self.small_file_usable(f));
        if found.is_none() {
            self.fetch_small_files(ino);
        } else {
            self.stats
                .caches
                .small_file_reads
                .fetch_add(1, Ordering::Relaxed);
        }
        then(found);
    }

    /// Whether a small file fetched earlier still holds what the file holds: nothing can
    /// have changed it since it was asked for, events followed all the while.
    ///
    /// And it is the file the kernel knows by that number: with the attributes its node was
    /// last seen with. The host may give a removed file's number to a new one before the
    /// events of either come (a link removed and another made: the kernel would keep the
    /// old link's target for the new one).
    pub(super) fn small_file_usable(&self, f: &SmallFile) -> bool {
        let status = |s: crate::known::inode::Status| (s.mode, s.size, s.mtime_ns);
        let known = self
            .known
            .inodes
            .ino_of(f.attr.qid.path)
            .and_then(|ino| self.known.inodes.status(ino));
        self.follows_events()
            && known.is_none_or(|k| status(k) == status(crate::known::inode::Status::of(&f.attr)))
            && self
                .known
                .listed
                .reusable_for(f.attr.qid.path, &f.fetched, self.attr_ttl())
                .is_some()
    }

    /// Whether a small file that came may go into the kernel's page cache
    /// (`crate::ahead::pushed_pages`): a regular file with content, in `auto` mode.
    pub(super) fn may_push(&self, f: &SmallFile) -> bool {
        self.config.cache == CacheMode::Auto
            && f.attr.mode & libc::S_IFMT == libc::S_IFREG
            && !f.data.is_empty()
    }

    /// Starts the thread that pushes small files into the kernel's page cache through
    /// `notifier` (see `crate::ahead::pushed_pages`); it ends with the mount.
    pub(crate) fn start_page_push(self: &Arc<Self>, notifier: crate::session::Notifier) {
        self.start_helper(
            "crossfs-pages",
            &self.ahead.pages_to_push,
            move |shared, files| {
                files.iter().for_each(|f| shared.push_pages(&notifier, f));
            },
        );
    }

    /// Pushes a small file's content into the kernel's page cache if nothing changed it
    /// since it was fetched, and the kernel's attributes for it are the ones it came with
    /// (so the kernel's size is its length); its next open then keeps the pages.
    pub(super) fn push_pages(&self, notifier: &crate::session::Notifier, f: &SmallFile) {
        let Some(ino) = self.known.inodes.ino_of(f.attr.qid.path) else {
            return;
        };
        let stamp = crate::attr::stamp(&f.attr);
        let Some(push) = self.ahead.page_push.begin(ino, || {
            self.small_file_usable(f) && self.known.inodes.pages_pushed(ino, stamp)
        }) else {
            return;
        };
        let stored = notifier.store(INodeNo(ino), 0, &f.data);
        if self.ahead.page_push.end(push) {
            let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
        } else if stored.is_ok() {
            self.stats
                .caches
                .pages_pushed
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks for the small regular files after node `ino` in its directory's listing (see
    /// `crate::ahead::small_files`), if this read makes it time to, while events are followed;
    /// in a program's walk of a tree, those of the directories it will read next too, on
    /// the helper thread ([`MountState::start_dirs_read_ahead`]).
    pub(super) fn fetch_small_files(self: &Arc<Self>, ino: u64) {
        if self.server.no_readfiles.load(Ordering::Relaxed) || !self.follows_events() {
            return;
        }
        let Some((dir_ino, name)) = self.known.inodes.found_in(ino) else {
            return;
        };
        let asking = self.ahead.small_files.read_in(dir_ino);
        if asking == Asking::No {
            return;
        }
        if self.ask_small_files(dir_ino, Some(&name)) == Some(0) {
            self.ahead.small_files.barren(dir_ino);
        }
        if let (Asking::TreeWalk, Some(tx)) = (asking, self.ahead.dirs_to_read_ahead.get()) {
            let _ = tx.try_send(dir_ino);
        }
    }

    /// Starts the thread that asks for the small files of the directories a program
    /// reading a tree will read next (see [`MountState::fetch_small_files`]); it ends with
    /// the mount.
    pub(crate) fn start_dirs_read_ahead(self: &Arc<Self>) {
        self.start_helper(
            "crossfs-read-ahead",
            &self.ahead.dirs_to_read_ahead,
            |shared, dir| {
                let mut asked = 0;
                for next in shared.dirs_after(dir) {
                    if asked >= BYTES_AHEAD {
                        break;
                    }
                    asked += shared.ask_small_files(next, None).unwrap_or(0);
                }
            },
        );
    }

    /// The next [`DIRS_AHEAD`] directories a depth-first walk in listing order (`grep -r`,
    /// `find`) reads after directory `dir`, as far as replicas tell: its subtree, then the
    /// directories after it in its parent's listing with theirs, then those after its
    /// parent, and so on up.
    fn dirs_after(&self, dir: u64) -> Vec<u64> {
        // Subdirectories of `d` with replicas, in listing order, after the entry `after`.
        let subdirs = |d: u64, after: Option<&[u8]>| -> Vec<u64> {
            let Some(names) = self.known.replicas.names(d) else {
                return Vec::new();
            };
            let from = after
                .and_then(|a| names.iter().position(|(n, _)| n[..] == *a))
                .map_or(0, |i| i + 1);
            names[from..]
                .iter()
                .filter_map(|(_, a)| a.as_ref().filter(|a| crate::attr::is_dir(a)))
                .filter_map(|a| self.known.inodes.ino_of(a.qid.path))
                .filter(|&ino| self.known.replicas.has(ino))
                .collect()
        };
        let mut dirs = Vec::new();
        // Depth-first, in listing order: the stack holds what is left, the next on top.
        let walk = |mut stack: Vec<u64>, dirs: &mut Vec<u64>| {
            stack.reverse();
            while let Some(d) = stack.pop() {
                if dirs.len() == DIRS_AHEAD {
                    return;
                }
                dirs.push(d);
                stack.extend(subdirs(d, None).into_iter().rev());
            }
        };
        walk(subdirs(dir, None), &mut dirs);
        let mut at = dir;
        while let (true, Some((parent, name))) =
            (dirs.len() < DIRS_AHEAD, self.known.inodes.found_in(at))
        {
            walk(subdirs(parent, Some(&name)), &mut dirs);
            at = parent;
        }
        dirs
    }

    /// Asks for the small regular files of directory `dir_ino` that are neither here nor on
    /// the way, in its listing order after `after` (then those before it: a small
    /// directory whole), or from its start. Returns about how many bytes it asked for
    /// (their sizes as listed), `None` if the directory has no replica to tell.
    fn ask_small_files(self: &Arc<Self>, dir_ino: u64, after: Option<&[u8]>) -> Option<u64> {
        use crate::ahead::small_files::{MAX_FILE, WINDOW};
        let (Some(names), Ok(dir)) = (
            self.known.replicas.names(dir_ino),
            self.node(INodeNo(dir_ino)),
        ) else {
            return None;
        };
        // Files a deferred open may read, and symbolic links.
        let small = |a: &crossfs_wire::Rgetattr| {
            let link = a.mode & libc::S_IFMT == libc::S_IFLNK;
            (link || crate::attr::stamp(a).readable_by_anyone) && a.size <= u64::from(MAX_FILE)
        };
        let at = after
            .and_then(|a| names.iter().position(|(n, _)| n[..] == *a))
            .map_or(0, |i| i + 1);
        let (before, after) = names.split_at(at);
        let candidates: Vec<(&[u8], u64, u64)> = after
            .iter()
            .chain(before)
            .filter_map(|(n, a)| {
                let (qid_path, size) = match a {
                    Some(a) if small(a) => (a.qid.path, a.size),
                    Some(_) => return None,
                    // Changed since listed: the file the kernel knows by that name, if a
                    // regular one or a link (the server leaves out what is too large now).
                    None => match self.known.inodes.named(dir_ino, n)? {
                        (q, libc::S_IFREG | libc::S_IFLNK) => (q, u64::from(MAX_FILE)),
                        _ => return None,
                    },
                };
                Some((&n[..], qid_path, size))
            })
            .take(WINDOW)
            .collect();
        let fresh: std::collections::HashSet<u64> = self
            .ahead
            .small_files
            .coming(candidates.iter().map(|c| c.1), |f| {
                !self.small_file_usable(f)
            })
            .into_iter()
            .collect();
        let wanted: Vec<&(&[u8], u64, u64)> =
            candidates.iter().filter(|c| fresh.contains(&c.1)).collect();
        if wanted.is_empty() {
            return Some(0);
        }
        for batch in wanted.chunks(crossfs_wire::MAX_WALK_ELEMENTS) {
            let asked: Vec<u64> = batch.iter().map(|c| c.1).collect();
            let msg = Tmessage::Readfiles(Treadfiles {
                fid: dir.fid(),
                names: batch.iter().map(|c| c.0.to_vec()).collect(),
                max_each: MAX_FILE,
            });
            let fetched = self.known.listed.before_fetch();
            let (shared, dir) = (self.clone(), dir.clone());
            self.client.call_async(
                msg,
                Box::new(move |r| {
                    drop(dir);
                    let files = match r {
                        Ok(Rmessage::Readfiles(r)) => r.data.0,
                        Err(ClientError::Errno(libc::EOPNOTSUPP)) => {
                            shared.server.no_readfiles.store(true, Ordering::Relaxed);
                            Vec::new()
                        }
                        _ => Vec::new(),
                    };
                    let arrived: Vec<(u64, SmallFile)> = crossfs_wire::FileData::iter(&files)
                        .map_while(Result::ok)
                        .map(|f| {
                            let file = SmallFile {
                                data: f.data.into(),
                                attr: Arc::new(f.attr),
                                fetched,
                            };
                            (file.attr.qid.path, file)
                        })
                        .collect();
                    shared
                        .stats
                        .caches
                        .small_files_fetched
                        .fetch_add(arrived.len() as u64, Ordering::Relaxed);
                    let to_push: Vec<SmallFile> = arrived
                        .iter()
                        .map(|(_, f)| f)
                        .filter(|f| shared.may_push(f))
                        .cloned()
                        .collect();
                    let woken = shared.ahead.small_files.arrived(&asked, arrived);
                    // A read whose file did not come (or changed since) goes to the server,
                    // which may mean a walk that waits for a reply: not on the client's
                    // reader thread, where this runs.
                    let (here, to_server): (Vec<_>, Vec<_>) = woken
                        .into_iter()
                        .map(|(w, f)| (w, f.filter(|f| shared.small_file_usable(f))))
                        .partition(|(_, f)| f.is_some());
                    for (w, f) in here {
                        shared
                            .stats
                            .caches
                            .small_file_reads
                            .fetch_add(1, Ordering::Relaxed);
                        w(f);
                    }
                    // Not here: a push waits for pages that a read in flight holds, and
                    // that read may wait for a reply this thread must deliver.
                    if let (false, Some(push)) =
                        (to_push.is_empty(), shared.ahead.pages_to_push.get())
                    {
                        let _ = push.try_send(to_push);
                    }
                    if to_server.is_empty() {
                        return;
                    }
                    let spawned = std::thread::Builder::new()
                        .name("crossfs-read".into())
                        .spawn(move || to_server.into_iter().for_each(|(w, _)| w(None)));
                    if let Err(e) = spawned {
                        tracing::warn!("cannot start a thread to read files: {e}");
                    }
                }),
            );
        }
        Some(wanted.iter().map(|c| c.2).sum())
    }
}

/// Directories whose small files are asked for ahead of a program reading a tree, per
/// first read in a directory not asked for yet: their pages are pushed before it reads
/// them, so its first reads there reach neither the mount nor the server.
const DIRS_AHEAD: usize = 16;
/// Bytes of files asked for ahead per first read, at most (give or take a directory's):
/// what the server reads and sends for a program that may stop reading any moment.
const BYTES_AHEAD: u64 = 16 << 20;
