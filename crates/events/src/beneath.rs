//! Looking at files strictly beneath the export root: no symlink, `..` or magic link is ever
//! followed, so an event can never describe (or a scan read) anything outside the export,
//! whatever is renamed or replaced under our feet.
//!
//! Paths may be deeper than `PATH_MAX` (4,096 bytes with its NUL): a program can build such a
//! tree with `mkdirat` one level at a time (pjdfstest's mkdir/03 does, beneath a test
//! directory). The kernel refuses a pathname that long in one call with `ENAMETOOLONG`, so
//! a long path is resolved in steps of at most [`STEP`] bytes, each one `openat2` beneath the
//! directory the previous step opened. Every step keeps `RESOLVE_BENEATH`, so the result is
//! beneath the root exactly as a single call's would be.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{openat2, AtFlags, Dir, Mode, OFlags, ResolveFlags};

use crate::event::{Attrs, DirAttrs};
use crate::path::{valid_name, RelPath};

/// The export root: an open directory plus its canonical path.
#[derive(Debug)]
pub(crate) struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

/// The longest pathname handed to one `openat2`: well under `PATH_MAX` and longer than any
/// single name (`NAME_MAX` is 255), so every step makes progress.
const STEP: usize = 2048;

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

    /// Opens `rel` beneath the root with `flags`, in steps of at most [`STEP`] bytes.
    fn open_beneath(&self, rel: &RelPath, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        let bytes = rel.as_bytes();
        if bytes.is_empty() {
            return openat2(&self.fd, ".", flags, Mode::empty(), RESOLVE);
        }
        if bytes.len() <= STEP {
            return openat2(&self.fd, bytes, flags, Mode::empty(), RESOLVE);
        }
        let steps = steps(bytes);
        let last = steps.len() - 1;
        let mut dir: Option<OwnedFd> = None;
        for (i, step) in steps.into_iter().enumerate() {
            let at = dir.as_ref().unwrap_or(&self.fd);
            // Intermediate steps only need a handle to resolve the next step from.
            let f = if i == last {
                flags
            } else {
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
            };
            let fd = openat2(at, step, f, Mode::empty(), RESOLVE)?;
            dir = Some(fd);
        }
        dir.ok_or(rustix::io::Errno::INVAL)
    }

    /// `lstat` of `rel`; `Ok(None)` when it does not exist (or a component is no longer a
    /// directory, or is now a symlink: then the path as we knew it does not exist either).
    pub(crate) fn lstat(&self, rel: &RelPath) -> io::Result<Option<Attrs>> {
        Ok(self.lstat_whole(rel)?.map(|st| Attrs::from_stat(&st)))
    }

    /// As [`Root::lstat`], everything `fstat` tells.
    pub(crate) fn lstat_whole(&self, rel: &RelPath) -> io::Result<Option<rustix::fs::Stat>> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match self.open_beneath(rel, flags) {
            Ok(fd) => Ok(Some(rustix::fs::fstat(&fd)?)),
            Err(e) if gone(e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens directory `rel` for reading; `Ok(None)` when it is not (or no longer) a directory.
    ///
    /// Without touching its access time where the kernel allows (`O_NOATIME`: the owner, or
    /// a server with CAP_FOWNER): a watcher's scans must not change what they watch, and
    /// under `relatime` a listing moves the access time of a directory whose access time
    /// is not after its modification time (one just set by `utimensat`, say).
    pub(crate) fn open_dir(&self, rel: &RelPath) -> io::Result<Option<OwnedFd>> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let opened = match self.open_beneath(rel, flags | OFlags::NOATIME) {
            Err(rustix::io::Errno::PERM) => self.open_beneath(rel, flags),
            r => r,
        };
        match opened {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if gone(e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The attributes of directory `rel` (see [`DirAttrs`]); `None` when it is not (or no
    /// longer) a directory or cannot be looked at.
    pub(crate) fn dir_attrs(&self, rel: &RelPath) -> Option<DirAttrs> {
        let fd = self.open_dir_path(rel).ok()??;
        rustix::fs::fstat(&fd)
            .ok()
            .map(|st| DirAttrs::from_stat(&st))
    }

    /// Opens `rel` as an `O_PATH` directory handle (for inotify's `/proc/self/fd` trick).
    pub(crate) fn open_dir_path(&self, rel: &RelPath) -> io::Result<Option<OwnedFd>> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match self.open_beneath(rel, flags) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if gone(e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

impl Root {
    /// The export-relative path of the directory `dir` refers to, found by walking `..` up
    /// to the root and looking up each directory's name in its parent; `Ok(None)` when it
    /// is not beneath the root. For directories whose absolute path is too long for
    /// `/proc/self/fd` to show (`readlink` fails with `ENAMETOOLONG` past `PATH_MAX`).
    ///
    /// # Errors
    /// A directory on the way could not be opened or listed.
    pub(crate) fn path_of_dir(&self, dir: BorrowedFd<'_>) -> io::Result<Option<RelPath>> {
        let id = |st: &rustix::fs::Stat| (st.st_dev, st.st_ino);
        let top = id(&rustix::fs::fstat(&self.fd)?);
        let walk = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut cur = rustix::fs::openat(dir, ".", walk, Mode::empty())?;
        let mut names: Vec<Vec<u8>> = Vec::new();
        loop {
            let here = id(&rustix::fs::fstat(&cur)?);
            if here == top {
                break;
            }
            let parent = rustix::fs::openat(&cur, "..", walk, Mode::empty())?;
            if id(&rustix::fs::fstat(&parent)?) == here {
                return Ok(None); // the filesystem's root, and the export was not on the way
            }
            let mut found = None;
            for entry in Dir::read_from(&parent)? {
                let entry = entry?;
                let name = entry.file_name().to_bytes();
                // d_ino can differ from st_ino (a mount point): confirm with a stat.
                if valid_name(name)
                    && rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| id(&st) == here)
                {
                    found = Some(name.to_vec());
                    break;
                }
            }
            let Some(name) = found else {
                return Ok(None); // removed meanwhile
            };
            names.push(name);
            cur = parent;
        }
        names.reverse();
        Ok(RelPath::new(names.join(&b'/')).ok())
    }
}

/// Splits a relative path into runs of whole components, each at most [`STEP`] bytes (or
/// one component, should a name ever be longer: the kernel then refuses it, as it would).
fn steps(path: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = path;
    while rest.len() > STEP {
        // The last `/` that keeps this step within STEP bytes; else the first one at all.
        let cut = rest[..=STEP]
            .iter()
            .rposition(|&b| b == b'/')
            .or_else(|| rest.iter().position(|&b| b == b'/'));
        let Some(cut) = cut else { break };
        out.push(&rest[..cut]);
        rest = &rest[cut + 1..];
    }
    out.push(rest);
    out
}

/// Errors meaning "that path does not exist (any more)".
pub(crate) fn gone(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    matches!(
        e,
        Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV | Errno::STALE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_cut_at_component_boundaries_within_the_limit() {
        let name = "n".repeat(200);
        let path = vec![name.as_str(); 30].join("/");
        let parts = steps(path.as_bytes());
        assert!(parts.len() > 1);
        for part in &parts {
            assert!(part.len() <= STEP, "{}", part.len());
            assert!(!part.starts_with(b"/") && !part.ends_with(b"/"));
        }
        assert_eq!(parts.join(&b'/'), path.as_bytes());
        assert_eq!(steps(b"a/b"), vec![b"a/b".as_slice()]);
    }
}
