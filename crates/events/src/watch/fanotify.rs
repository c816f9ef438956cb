//! fanotify: one mark on the whole filesystem, reporting a directory file handle and a name
//! (`FAN_REPORT_DFID_NAME`) for every change; `FAN_RENAME` reports both ends of a rename in one
//! record. Needs `CAP_SYS_ADMIN` and a filesystem that reports file ids (ext4, xfs, btrfs,
//! tmpfs since 5.13 …).
//!
//! The mark covers the whole filesystem, so most records are about files outside the export.
//! Each directory handle is resolved once (`open_by_handle_at` + `/proc/self/fd` readlink) and
//! cached as "inside at this path" or "outside"; a rename with either end inside the export
//! clears the cache, since directory paths may have changed.
//!
//! The group also asks for the file's own handle (`FAN_REPORT_FID`, where the kernel takes
//! it with `DFID_NAME`: 5.9 and later). Then a change the kernel tells about an inode alone,
//! with no directory and name, reaches us too: a hard link made or removed moves the link
//! count and change time of the file, whose other names no directory event mentions. Such
//! a record's file, if it still has a name, is reported under the name the kernel finds for
//! it; subscribers key attributes by inode, so one name carries the change to all of them.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::{Raw, Watcher, MAX_RECORDS_PER_CALL, READ_BUFFER};
use crate::beneath::Root;
use crate::coalesce::Hints;
use crate::path::RelPath;
use crate::sys;
use crate::BackendKind;

const MASK: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MODIFY
    | libc::FAN_ATTRIB
    | libc::FAN_RENAME
    | libc::FAN_ONDIR;

const INIT_FLAGS: u32 =
    libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK | libc::FAN_REPORT_DFID_NAME;
/// `INIT_FLAGS` with the file's own handle too, where the kernel allows both.
const INIT_FLAGS_WITH_FILE: u32 = INIT_FLAGS | libc::FAN_REPORT_FID;

/// `FANOTIFY_METADATA_VERSION`.
const METADATA_VERSION: u8 = 3;
/// Bytes of `struct fanotify_event_metadata`.
const METADATA_LEN: usize = 24;
/// Cached directory handles before the cache is simply cleared.
const CACHE_LIMIT: usize = 16 * 1024;

/// The fanotify watcher.
#[derive(Debug)]
pub(crate) struct Fanotify {
    fd: Option<OwnedFd>,
    buf: Box<[u8]>,
    root_path: PathBuf,
    cache: HashMap<Box<[u8]>, Option<RelPath>>,
    /// A directory could not be placed (an error walking up from one deeper than
    /// PATH_MAX): its event is lost, so the read ends with a rescan of the export.
    unplaced: bool,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// One `DFID_NAME`-style info record: the directory's handle (type + bytes, the cache key is
/// both) and the entry name.
struct DirName<'a> {
    key: &'a [u8],
    handle_type: i32,
    handle: &'a [u8],
    name: &'a [u8],
}

/// Parses an info record body (after its 4-byte header): fsid, file_handle, name.
fn parse_dfid_name(body: &[u8]) -> Option<DirName<'_>> {
    let fh = body.get(8..)?;
    let len = u32_at(fh, 0)? as usize;
    let handle_type = i32::from_ne_bytes(fh.get(4..8)?.try_into().ok()?);
    let handle = fh.get(8..8 + len)?;
    let rest = fh.get(8 + len..)?;
    let name = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())];
    Some(DirName {
        key: fh.get(4..8 + len)?,
        handle_type,
        handle,
        name,
    })
}

impl Fanotify {
    /// A disarmed watcher for the export at `root`.
    pub(crate) fn new(root: &Root) -> Self {
        Self {
            fd: None,
            buf: vec![0; READ_BUFFER].into_boxed_slice(),
            root_path: root.path().to_path_buf(),
            cache: HashMap::new(),
            unplaced: false,
        }
    }

    /// The export-relative path of a directory handle, or `None` when it is outside the
    /// export or gone.
    fn resolve(&mut self, root: &Root, d: &DirName<'_>) -> Option<RelPath> {
        if let Some(hit) = self.cache.get(d.key) {
            return hit.clone();
        }
        let flags = libc::O_PATH | libc::O_CLOEXEC;
        let fd = sys::open_by_handle_at(root.fd().as_fd(), d.handle_type, d.handle, flags).ok()?;
        let rel = match std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
            Ok(link) => link
                .strip_prefix(&self.root_path)
                .ok()
                .and_then(|r| RelPath::new(r.as_os_str().as_bytes()).ok()),
            // Deeper than PATH_MAX: /proc cannot show the path, so find it by walking up.
            Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
                match root.path_of_dir(fd.as_fd()) {
                    Ok(rel) => rel,
                    Err(e) => {
                        // Not cached: the next event for this directory tries again.
                        tracing::warn!("placing a directory deeper than PATH_MAX: {e}; rescanning");
                        self.unplaced = true;
                        return None;
                    }
                }
            }
            Err(_) => return None,
        };
        if self.cache.len() >= CACHE_LIMIT {
            self.cache.clear();
        }
        self.cache.insert(d.key.into(), rel.clone());
        rel
    }

    /// A name inside the export of the file with handle `f`, if it has one (never cached:
    /// files move without their handles' records saying so).
    fn named_file(&self, root: &Root, f: &DirName<'_>) -> Option<RelPath> {
        let flags = libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW;
        let fd = sys::open_by_handle_at(root.fd().as_fd(), f.handle_type, f.handle, flags).ok()?;
        // A file whose last name went (its link count fell to 0) has nothing to report, and
        // /proc would show its old name with " (deleted)" after it.
        if rustix::fs::fstat(&fd).ok()?.st_nlink == 0 {
            return None;
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        let rel = RelPath::new(
            link.strip_prefix(&self.root_path)
                .ok()?
                .as_os_str()
                .as_bytes(),
        );
        rel.ok().filter(|p| !p.is_root())
    }

    fn entry_path(&mut self, root: &Root, d: &DirName<'_>) -> Option<RelPath> {
        let dir = self.resolve(root, d)?;
        if d.name.is_empty() || d.name == b"." {
            return Some(dir);
        }
        dir.join(d.name)
    }

    /// Translates one event record (`ev` is exactly `event_len` bytes).
    fn translate(&mut self, root: &Root, ev: &[u8], out: &mut Vec<Raw>) {
        let Some(mask) = u64_at(ev, 8) else { return };
        if mask & libc::FAN_Q_OVERFLOW != 0 {
            out.push(Raw::Overflow);
            return;
        }
        let meta_len = u16_at(ev, 6).map_or(METADATA_LEN, usize::from);
        let (mut main, mut old, mut new, mut file) = (None, None, None, None);
        let mut at = meta_len;
        while let (Some(&info_type), Some(len)) = (ev.get(at), u16_at(ev, at + 2)) {
            let len = usize::from(len);
            let Some(body) = ev.get(at + 4..at + len) else {
                break;
            };
            if len < 4 {
                break;
            }
            let rec = parse_dfid_name(body);
            match info_type {
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME | libc::FAN_EVENT_INFO_TYPE_DFID => main = rec,
                libc::FAN_EVENT_INFO_TYPE_OLD_DFID_NAME => old = rec,
                libc::FAN_EVENT_INFO_TYPE_NEW_DFID_NAME => new = rec,
                libc::FAN_EVENT_INFO_TYPE_FID => file = rec,
                _ => {}
            }
            at += len;
        }
        if mask & libc::FAN_RENAME != 0 {
            let from = old.and_then(|d| self.entry_path(root, &d));
            let to = new.and_then(|d| self.entry_path(root, &d));
            if from.is_some() || to.is_some() {
                self.cache.clear();
            }
            match (from, to) {
                (Some(from), Some(to)) => out.push(Raw::Rename { from, to }),
                (Some(path), None) => out.push(Raw::Change {
                    path,
                    hints: Hints::REMOVED,
                }),
                (None, Some(path)) => out.push(Raw::Change {
                    path,
                    hints: Hints::CREATED,
                }),
                (None, None) => {}
            }
        }
        let Some(main) = main else {
            // An inode's own change (a link count moved): under one of its names.
            if mask & libc::FAN_ATTRIB != 0 {
                if let Some(path) = file.and_then(|f| self.named_file(root, &f)) {
                    out.push(Raw::Change {
                        path,
                        hints: Hints::ATTRIB,
                    });
                }
            }
            return;
        };
        let Some(path) = self.entry_path(root, &main) else {
            return;
        };
        for (bit, hints) in [
            (libc::FAN_CREATE, Hints::CREATED),
            (libc::FAN_DELETE, Hints::REMOVED),
            (libc::FAN_MODIFY, Hints::MODIFIED),
            (libc::FAN_ATTRIB, Hints::ATTRIB),
        ] {
            if mask & bit != 0 && !path.is_root() {
                out.push(Raw::Change {
                    path: path.clone(),
                    hints,
                });
            }
        }
    }
}

impl Watcher for Fanotify {
    fn kind(&self) -> BackendKind {
        BackendKind::Fanotify
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|f| f.as_fd())
    }

    fn arm(&mut self, root: &Root) -> io::Result<()> {
        self.disarm();
        let event_flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u32;
        let fd = sys::fanotify_init(INIT_FLAGS_WITH_FILE, event_flags).or_else(|e| {
            tracing::debug!("fanotify without the files' own handles ({e}): a hard link made and removed within one read may leave its file's other names with an old change time");
            sys::fanotify_init(INIT_FLAGS, event_flags)
        })?;
        sys::fanotify_mark(
            fd.as_fd(),
            libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
            MASK,
            root.fd().as_fd(),
        )?;
        self.fd = Some(fd);
        Ok(())
    }

    fn disarm(&mut self) {
        self.fd = None;
        self.cache.clear();
    }

    fn read_into(&mut self, root: &Root, out: &mut Vec<Raw>) -> io::Result<()> {
        let mut records = 0;
        while records < MAX_RECORDS_PER_CALL {
            let Some(fd) = self.fd.as_ref() else {
                return Ok(());
            };
            let n = match rustix::io::read(fd, &mut self.buf[..]) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(rustix::io::Errno::WOULDBLOCK) | Err(rustix::io::Errno::INTR) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            // Take the buffer out while translating so `self` stays usable; it goes back
            // before the next read, so nothing is allocated per read.
            let buf = std::mem::take(&mut self.buf);
            let mut at = 0;
            while let Some(len) = u32_at(&buf[..n], at) {
                let len = len as usize;
                if len < METADATA_LEN || at + len > n || buf[at + 4] != METADATA_VERSION {
                    break;
                }
                self.translate(root, &buf[at..at + len], out);
                records += 1;
                at += len;
            }
            self.buf = buf;
            if std::mem::take(&mut self.unplaced) {
                out.push(Raw::Rescan {
                    path: RelPath::root(),
                });
            }
        }
        Ok(())
    }

    fn unwatched(&self) -> Vec<RelPath> {
        Vec::new()
    }
}
