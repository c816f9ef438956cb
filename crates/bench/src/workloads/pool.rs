//! Prepared input, made once per workload and reused by every run.
//!
//! Creating an inode is expensive on some filesystems (about 1.5 ms on the
//! ext4 of the machines this was written on, against 25 µs for a hard link),
//! and a full run needs fresh copies of a 10,000-file tree for every target
//! and run. So each workload prepares its input once, in a "pool" directory
//! next to the run directories, and every run gets a replica: directories
//! made anew, files and symlinks hard-linked. Every run still sees names no
//! client has looked up before (what makes a first pass cold) at the cost of
//! one link per file.
//!
//! Files are hard links to the same inodes in every run, so a workload may
//! change a prepared file's content in place (random writes do) but never
//! its identity; anything a workload must own outright is copied (see
//! `copy_if`). Where links fail (another filesystem, a share without link
//! support) the replica is a plain copy.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::config::{Sizes, WorkloadId};
use crate::error::{IoContext, WorkloadError};

/// The pools of one workload, one per directory input is prepared in.
pub(crate) struct Pools {
    id: WorkloadId,
    nonce: String,
    /// Prepare root -> the pool in it, or why it could not be made (not retried).
    made: HashMap<PathBuf, Result<PathBuf, String>>,
}

impl Pools {
    pub fn new(id: WorkloadId, nonce: &str) -> Self {
        Self {
            id,
            nonce: nonce.to_owned(),
            made: HashMap::new(),
        }
    }

    /// The pool under `prep_root`, prepared on first use.
    pub fn get(&mut self, prep_root: &Path, sizes: &Sizes) -> Result<PathBuf, WorkloadError> {
        let id = self.id;
        // Numbered: two targets may be the same tree under different paths
        // (two mounts of one export), so their pools must not share a name.
        let name = format!("crossfs-bench-{}-pool{}-{id}", self.nonce, self.made.len());
        self.made
            .entry(prep_root.to_owned())
            .or_insert_with(|| {
                let pool = prep_root.join(name);
                let made = fs::create_dir(&pool)
                    .ctx(|| format!("mkdir {}", pool.display()))
                    .and_then(|()| super::prepare(id, &pool, sizes));
                if made.is_err() {
                    // Half-made input is useless; leave nothing behind.
                    let _ = fs::remove_dir_all(&pool);
                }
                made.map(|()| pool).map_err(|e| e.to_string())
            })
            .clone()
            .map_err(WorkloadError::Prepare)
    }

    /// Remove every pool; returns what could not be removed.
    pub fn remove_all(self) -> Vec<String> {
        self.made
            .into_values()
            .filter_map(|made| {
                let pool = made.ok()?;
                fs::remove_dir_all(&pool)
                    .err()
                    .map(|e| format!("removing {}: {e}", pool.display()))
            })
            .collect()
    }
}

/// Fill `dest` (an existing, empty directory) with a replica of `src`.
/// `copy_if(relative path)` names files that must be copies, not links.
pub(crate) fn replicate(
    src: &Path,
    dest: &Path,
    copy_if: &dyn Fn(&Path) -> bool,
) -> Result<(), WorkloadError> {
    let mut linking = true;
    replicate_dir(src, dest, Path::new(""), copy_if, &mut linking)
}

fn replicate_dir(
    src: &Path,
    dest: &Path,
    rel: &Path,
    copy_if: &dyn Fn(&Path) -> bool,
    linking: &mut bool,
) -> Result<(), WorkloadError> {
    let from_dir = src.join(rel);
    let mut entries: Vec<_> = fs::read_dir(&from_dir)
        .ctx(|| format!("reading {}", from_dir.display()))?
        .collect::<Result<_, _>>()
        .ctx(|| format!("reading {}", from_dir.display()))?;
    // Same order on every run, so every replica is built the same way.
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let rel = rel.join(entry.file_name());
        let (from, to) = (src.join(&rel), dest.join(&rel));
        let kind = entry
            .file_type()
            .ctx(|| format!("stat {}", from.display()))?;
        if kind.is_dir() {
            fs::create_dir(&to).ctx(|| format!("mkdir {}", to.display()))?;
            replicate_dir(src, dest, &rel, copy_if, linking)?;
            continue;
        }
        if *linking && !copy_if(&rel) {
            // std's hard_link is linkat(.., 0): a symlink is linked itself, not followed.
            match fs::hard_link(&from, &to) {
                Ok(()) => continue,
                // Stop trying after the first refusal: the rest would fail alike.
                Err(_) => *linking = false,
            }
        }
        if kind.is_symlink() {
            let target = fs::read_link(&from).ctx(|| format!("readlink {}", from.display()))?;
            symlink(&target, &to).ctx(|| format!("symlink {}", to.display()))?;
        } else {
            fs::copy(&from, &to).ctx(|| format!("copying to {}", to.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn replica_links_files_and_symlinks_and_copies_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
        fs::create_dir_all(src.join("a/b")).unwrap();
        fs::write(src.join("a/b/file"), b"x").unwrap();
        fs::write(src.join("own"), b"y").unwrap();
        symlink("a/b", src.join("link")).unwrap();
        fs::create_dir(&dest).unwrap();
        replicate(&src, &dest, &|rel| rel == Path::new("own")).unwrap();

        let ino = |p: &Path| fs::symlink_metadata(p).unwrap().ino();
        assert_eq!(ino(&src.join("a/b/file")), ino(&dest.join("a/b/file")));
        assert_eq!(ino(&src.join("link")), ino(&dest.join("link")));
        assert_ne!(ino(&src.join("own")), ino(&dest.join("own")));
        assert_ne!(ino(&src.join("a")), ino(&dest.join("a")));
        assert_eq!(fs::read(dest.join("link/file")).unwrap(), b"x");
        assert_eq!(fs::read(dest.join("own")).unwrap(), b"y");
    }
}
