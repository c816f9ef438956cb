//! Looking at files strictly beneath the export root: no symlink, `..` or magic link is ever
//! followed, so an event can never describe (or a scan read) anything outside the export,
//! whatever is renamed or replaced under our feet.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};

use crate::event::Attrs;
use crate::path::RelPath;

/// The export root: an open directory plus its canonical path.
#[derive(Debug)]
pub(crate) struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

impl Root {
    /// Opens `path` (which may itself be reached through symlinks: the operator chose it).
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let path = path.canonicalize()?;
        let fd = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self { fd, path })
    }

    /// The canonical path of the root.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The root directory's fd.
    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn rel_arg(rel: &RelPath) -> &[u8] {
        if rel.is_root() {
            b"."
        } else {
            rel.as_bytes()
        }
    }

    /// `lstat` of `rel`; `Ok(None)` when it does not exist (or a component is no longer a
    /// directory, or is now a symlink: then the path as we knew it does not exist either).
    pub(crate) fn lstat(&self, rel: &RelPath) -> io::Result<Option<Attrs>> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match openat2(&self.fd, Self::rel_arg(rel), flags, Mode::empty(), RESOLVE) {
            Ok(fd) => Ok(Some(Attrs::from_stat(&rustix::fs::fstat(&fd)?))),
            Err(e) if gone(e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens directory `rel` for reading; `Ok(None)` when it is not (or no longer) a directory.
    pub(crate) fn open_dir(&self, rel: &RelPath) -> io::Result<Option<OwnedFd>> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match openat2(&self.fd, Self::rel_arg(rel), flags, Mode::empty(), RESOLVE) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if gone(e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens `rel` as an `O_PATH` directory handle (for inotify's `/proc/self/fd` trick).
    pub(crate) fn open_dir_path(&self, rel: &RelPath) -> io::Result<Option<OwnedFd>> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match openat2(&self.fd, Self::rel_arg(rel), flags, Mode::empty(), RESOLVE) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if gone(e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// Errors meaning "that path does not exist (any more)".
pub(crate) fn gone(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    matches!(
        e,
        Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV | Errno::STALE
    )
}
