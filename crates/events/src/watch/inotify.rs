//! inotify: one watch per directory, added as directories appear, within a budget.
//!
//! The race every inotify watcher has: files created in a new directory before its watch
//! exists produce no events. So a new directory is watched first and listed second, and
//! everything the listing finds is reported as created (duplicates coalesce away).
//! Directories past the budget (or refused with `ENOSPC`) are left to the engine's poller.

use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{Dir, FileType};

use super::{Raw, Watcher, MAX_RECORDS_PER_CALL, READ_BUFFER};
use crate::beneath::Root;
use crate::coalesce::Hints;
use crate::path::{valid_name, RelPath};
use crate::BackendKind;

const MASK: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::EXCL_UNLINK);

/// Watch descriptors ↔ directories.
#[derive(Debug, Default)]
struct Watches {
    wds: HashMap<i32, RelPath>,
    paths: HashMap<RelPath, i32>,
    budget: usize,
    unwatched: Vec<RelPath>,
}

impl Watches {
    /// Watches `dir`. `Ok(false)` when it is past the budget (it is then polled) or gone.
    fn add(&mut self, ifd: BorrowedFd<'_>, root: &Root, dir: &RelPath) -> io::Result<bool> {
        if self.paths.contains_key(dir) {
            return Ok(true);
        }
        if self.wds.len() >= self.budget {
            self.unwatch_later(dir);
            return Ok(false);
        }
        // Watch the directory we opened beneath the root, never a path a rename could
        // redirect outside it.
        let Some(dfd) = root.open_dir_path(dir)? else {
            return Ok(false);
        };
        let proc = format!("/proc/self/fd/{}", dfd.as_raw_fd());
        match inotify::add_watch(ifd, proc.as_str(), MASK) {
            Ok(wd) => {
                if let Some(old) = self.wds.insert(wd, dir.clone()) {
                    self.paths.remove(&old);
                }
                self.paths.insert(dir.clone(), wd);
                Ok(true)
            }
            Err(rustix::io::Errno::NOSPC) => {
                self.unwatch_later(dir);
                Ok(false)
            }
            Err(e) if crate::beneath::gone(e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn unwatch_later(&mut self, dir: &RelPath) {
        if !self.unwatched.iter().any(|u| dir.is_within(u)) {
            self.unwatched.retain(|u| !u.is_within(dir));
            self.unwatched.push(dir.clone());
        }
    }

    /// The kernel dropped watch `wd` (its directory is gone). Its path may have a newer
    /// watch already, on a directory made there since: that one stays.
    fn forget_wd(&mut self, wd: i32) {
        if let Some(p) = self.wds.remove(&wd) {
            if self.paths.get(&p) == Some(&wd) {
                self.paths.remove(&p);
            }
        }
    }

    /// Directory `dir` was removed: a directory made under its name next must be watched
    /// anew, though the kernel's notice that the old watch is gone (`IN_IGNORED`) may come
    /// after the new directory's creation.
    fn removed(&mut self, dir: &RelPath) {
        self.paths.remove(dir);
    }

    /// A directory moved within the export: its watches follow the inodes, so only our
    /// names for them change.
    fn rebase(&mut self, from: &RelPath, to: &RelPath) {
        let moved: Vec<(i32, RelPath)> = self
            .wds
            .iter()
            .filter_map(|(&wd, p)| p.rebase(from, to).map(|np| (wd, np)))
            .collect();
        for (wd, np) in moved {
            if let Some(old) = self.wds.insert(wd, np.clone()) {
                self.paths.remove(&old);
            }
            self.paths.insert(np, wd);
        }
        for u in &mut self.unwatched {
            if let Some(nu) = u.rebase(from, to) {
                *u = nu;
            }
        }
    }

    /// A directory left the export: stop watching everything beneath it.
    fn remove_subtree(&mut self, ifd: BorrowedFd<'_>, dir: &RelPath) {
        let gone: Vec<i32> = self
            .wds
            .iter()
            .filter(|(_, p)| p.is_within(dir))
            .map(|(&wd, _)| wd)
            .collect();
        for wd in gone {
            let _ = inotify::remove_watch(ifd, wd);
            self.forget_wd(wd);
        }
        self.unwatched.retain(|u| !u.is_within(dir));
    }

    /// Watches `top` and every directory beneath it, watch first and listing second; with
    /// `report`, everything found is reported as created.
    ///
    /// A directory that cannot be watched or listed (out of descriptors, say) is not skipped
    /// in silence: it joins the polled subtrees, and with `report` its subtree is also asked
    /// to be rescanned now, so whatever it holds is still published. Only the export root
    /// itself failing is an error (the watcher cannot start).
    fn add_tree(
        &mut self,
        ifd: BorrowedFd<'_>,
        root: &Root,
        top: &RelPath,
        mut report: Option<&mut Vec<Raw>>,
    ) -> io::Result<()> {
        let mut work = vec![top.clone()];
        while let Some(dir) = work.pop() {
            let listed = self
                .add(ifd, root, &dir)
                .and_then(|watched| match watched {
                    true => root.open_dir(&dir),
                    false => Ok(None),
                })
                .and_then(|fd| match fd {
                    Some(fd) => Ok(Some((Dir::read_from(&fd)?, fd))),
                    None => Ok(None),
                });
            let (entries, fd) = match listed {
                Ok(Some(listed)) => listed,
                Ok(None) => continue,
                Err(e) if dir.is_root() => return Err(e),
                Err(e) => {
                    tracing::warn!(%dir, "cannot watch or list: {e}; polling it instead");
                    self.unwatch_later(&dir);
                    if let Some(out) = report.as_deref_mut() {
                        out.push(Raw::Rescan { path: dir });
                    }
                    continue;
                }
            };
            for entry in entries {
                let Ok(entry) = entry else { break };
                let name = entry.file_name().to_bytes();
                if !valid_name(name) {
                    continue;
                }
                let Some(path) = dir.join(name) else { continue };
                let is_dir = match entry.file_type() {
                    FileType::Directory => true,
                    FileType::Unknown => {
                        rustix::fs::statat(&fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                            .is_ok_and(|st| {
                                FileType::from_raw_mode(st.st_mode) == FileType::Directory
                            })
                    }
                    _ => false,
                };
                if let Some(out) = report.as_deref_mut() {
                    out.push(Raw::Change {
                        path: path.clone(),
                        hints: Hints::CREATED,
                    });
                }
                if is_dir {
                    work.push(path);
                }
            }
        }
        Ok(())
    }
}

/// A `MOVED_FROM` waiting for its `MOVED_TO`.
#[derive(Debug)]
struct MovedFrom {
    cookie: u32,
    path: RelPath,
    is_dir: bool,
}

/// The inotify watcher.
#[derive(Debug)]
pub(crate) struct Inotify {
    fd: Option<OwnedFd>,
    buf: Box<[MaybeUninit<u8>]>,
    watches: Watches,
}

impl Inotify {
    /// A disarmed watcher with room for `budget` watches.
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            fd: None,
            buf: vec![MaybeUninit::uninit(); READ_BUFFER].into_boxed_slice(),
            watches: Watches {
                budget: budget.max(1),
                ..Watches::default()
            },
        }
    }

    /// Number of watches in use.
    #[cfg(test)]
    pub(crate) fn watch_count(&self) -> usize {
        self.watches.wds.len()
    }
}

fn moved_out(w: &mut Watches, ifd: BorrowedFd<'_>, m: MovedFrom, out: &mut Vec<Raw>) {
    if m.is_dir {
        w.remove_subtree(ifd, &m.path);
    }
    out.push(Raw::Change {
        path: m.path,
        hints: Hints::REMOVED,
    });
}

impl Watcher for Inotify {
    fn kind(&self) -> BackendKind {
        BackendKind::Inotify
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    fn arm(&mut self, root: &Root) -> io::Result<()> {
        self.disarm();
        let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
        self.watches
            .add_tree(fd.as_fd(), root, &RelPath::root(), None)?;
        self.fd = Some(fd);
        Ok(())
    }

    fn disarm(&mut self) {
        self.fd = None;
        self.watches.wds.clear();
        self.watches.paths.clear();
        self.watches.unwatched.clear();
    }

    fn read_into(&mut self, root: &Root, out: &mut Vec<Raw>) -> io::Result<()> {
        let Some(fd) = self.fd.as_ref() else {
            return Ok(());
        };
        let ifd = fd.as_fd();
        let w = &mut self.watches;
        let mut reader = inotify::Reader::new(ifd, &mut self.buf);
        let mut pending: Option<MovedFrom> = None;
        let mut records = 0;
        loop {
            // Stop only between reads: records left in the buffer would be lost with it.
            if records >= MAX_RECORDS_PER_CALL && reader.is_buffer_empty() {
                break;
            }
            records += 1;
            let ev = match reader.next() {
                Ok(ev) => ev,
                Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => break,
                Err(e) => return Err(e.into()),
            };
            let mask = ev.events();
            let (wd, cookie) = (ev.wd(), ev.cookie());
            let name: Option<Vec<u8>> = ev
                .file_name()
                .map(|n| n.to_bytes().to_vec())
                .filter(|n| !n.is_empty());
            if mask.contains(ReadFlags::QUEUE_OVERFLOW) {
                if let Some(m) = pending.take() {
                    moved_out(w, ifd, m, out);
                }
                out.push(Raw::Overflow);
                continue;
            }
            if mask.contains(ReadFlags::IGNORED) {
                w.forget_wd(wd);
                continue;
            }
            let Some(dir) = w.wds.get(&wd) else { continue };
            let path = match &name {
                Some(n) => match dir.join(n) {
                    Some(p) => p,
                    None => continue,
                },
                None => dir.clone(),
            };
            let is_dir = mask.contains(ReadFlags::ISDIR);
            if let Some(m) = pending.take() {
                if mask.contains(ReadFlags::MOVED_TO) && cookie == m.cookie {
                    let is_dir = m.is_dir;
                    if is_dir {
                        w.rebase(&m.path, &path);
                    }
                    out.push(Raw::Rename {
                        from: m.path,
                        to: path.clone(),
                    });
                    if is_dir {
                        // Directories created inside before the move whose CREATE we only
                        // read now could not be watched at their old names: watch what is
                        // missing at the new ones. No reports: the engine compares the moved
                        // subtree with the disk when it applies the rename, after this.
                        w.add_tree(ifd, root, &path, None)?;
                    }
                    continue;
                }
                moved_out(w, ifd, m, out);
            }
            if mask.contains(ReadFlags::MOVED_FROM) {
                pending = Some(MovedFrom {
                    cookie,
                    path,
                    is_dir,
                });
                continue;
            }
            if mask.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
                out.push(Raw::Change {
                    path: path.clone(),
                    hints: Hints::CREATED,
                });
                if is_dir {
                    w.add_tree(ifd, root, &path, Some(out))?;
                }
            }
            if mask.contains(ReadFlags::DELETE) {
                if is_dir {
                    w.removed(&path);
                }
                out.push(Raw::Change {
                    path: path.clone(),
                    hints: Hints::REMOVED,
                });
            }
            if mask.contains(ReadFlags::MODIFY) {
                out.push(Raw::Change {
                    path: path.clone(),
                    hints: Hints::MODIFIED,
                });
            }
            if mask.contains(ReadFlags::ATTRIB) && !path.is_root() {
                out.push(Raw::Change {
                    path,
                    hints: Hints::ATTRIB,
                });
            }
        }
        // A MOVED_FROM whose MOVED_TO did not follow: the name left the export.
        if let Some(m) = pending.take() {
            moved_out(w, ifd, m, out);
        }
        Ok(())
    }

    fn unwatched(&self) -> Vec<RelPath> {
        self.watches.unwatched.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_leaves_deep_subtrees_to_the_poller() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b/c")).unwrap();
        std::fs::create_dir_all(t.path().join("x")).unwrap();
        let root = Root::open(t.path()).unwrap();
        let mut w = Inotify::new(2);
        w.arm(&root).unwrap();
        assert_eq!(w.watch_count(), 2);
        let unwatched = w.unwatched();
        assert!(!unwatched.is_empty());
        for u in &unwatched {
            assert!(!w.watches.paths.contains_key(u));
        }
    }

    #[test]
    fn new_directory_contents_are_reported() {
        let t = tempfile::tempdir().unwrap();
        let root = Root::open(t.path()).unwrap();
        let mut w = Inotify::new(100);
        w.arm(&root).unwrap();
        std::fs::create_dir_all(t.path().join("a/b/c")).unwrap();
        std::fs::write(t.path().join("a/b/c/f"), b"x").unwrap();
        let mut out = Vec::new();
        w.read_into(&root, &mut out).unwrap();
        let created: Vec<String> = out
            .iter()
            .filter_map(|r| match r {
                Raw::Change { path, hints } if hints.contains(Hints::CREATED) => {
                    Some(path.to_string())
                }
                _ => None,
            })
            .collect();
        for want in ["a", "a/b", "a/b/c", "a/b/c/f"] {
            assert!(created.iter().any(|c| c == want), "{want} in {created:?}");
        }
    }
}
