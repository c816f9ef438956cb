//! A generated source-like tree for the untar and tree workloads: directories of about
//! 20 entries nested a few levels deep, small text files, a few symlinks. Deterministic
//! (one seed), so every target and run gets the same tree and the same expected answers.

use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use super::rng::Rng;
use crate::error::{IoContext, WorkloadError};

/// Entries per directory, on average (files, symlinks and subdirectories).
const PER_DIR: usize = 20;
/// One symlink (to a file beside it) per this many entries.
const SYMLINK_EVERY: usize = 100;
/// The word `grep -r` looks for: in one file of every NEEDLE_EVERY.
pub(crate) const NEEDLE: &str = "crossfs_needle";
const NEEDLE_EVERY: usize = 7;
/// Directory nesting is bounded so paths stay realistic (src/a/b/c/d...).
const MAX_DEPTH: usize = 6;

/// What was generated, for checking what a workload did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    pub dirs: usize,
    pub files: usize,
    pub symlinks: usize,
    /// Files named `*.c`.
    pub c_files: usize,
    /// Files containing [`NEEDLE`].
    pub needle_files: usize,
    pub bytes: u64,
}

impl Shape {
    /// Everything beneath the top directory (which is not counted).
    pub fn entries(&self) -> usize {
        self.dirs + self.files + self.symlinks
    }
}

/// Writes exactly `entries` entries beneath `top` (created here) and says what it made;
/// with `top` = `None`, writes nothing and says what it would make (for checking a run's
/// answers without writing the tree again).
pub(crate) fn generate(
    top: Option<&Path>,
    entries: usize,
    seed: u64,
) -> Result<Shape, WorkloadError> {
    let mut rng = Rng::new(seed);
    let mut shape = Shape::default();
    if let Some(top) = top {
        fs::create_dir(top).ctx(|| format!("mkdir {}", top.display()))?;
    }
    // Directories first, each under a random earlier one within the depth bound, so the
    // tree is neither a flat list nor a single chain.
    let ndirs = (entries / PER_DIR).max(1);
    let mut dirs: Vec<(String, usize)> = vec![(String::new(), 0)];
    for d in 0..ndirs {
        let (parent, depth) = loop {
            let pick = &dirs[rng.below(dirs.len() as u64) as usize];
            if pick.1 < MAX_DEPTH {
                break pick.clone();
            }
        };
        let rel = if parent.is_empty() {
            format!("d{d:04}")
        } else {
            format!("{parent}/d{d:04}")
        };
        if let Some(top) = top {
            let path = top.join(&rel);
            fs::create_dir(&path).ctx(|| format!("mkdir {}", path.display()))?;
        }
        dirs.push((rel, depth + 1));
        shape.dirs += 1;
    }
    let mut previous_file: Vec<Option<String>> = vec![None; dirs.len()];
    for i in 0..entries.saturating_sub(ndirs) {
        let di = rng.below(dirs.len() as u64) as usize;
        let dir = top.map(|t| t.join(&dirs[di].0));
        if i % SYMLINK_EVERY == SYMLINK_EVERY - 1 {
            if let Some(target) = &previous_file[di] {
                if let Some(dir) = &dir {
                    let link = dir.join(format!("l{i:05}"));
                    symlink(target, &link).ctx(|| format!("symlink {}", link.display()))?;
                }
                shape.symlinks += 1;
                continue;
            }
        }
        let ext = ["c", "h", "rs", "md", "txt"][(rng.below(5)) as usize];
        let name = format!("f{i:05}.{ext}");
        let needle = i % NEEDLE_EVERY == 3;
        let text = file_text(i, needle, &mut rng);
        if let Some(dir) = &dir {
            let path = dir.join(&name);
            fs::write(&path, &text).ctx(|| format!("writing {}", path.display()))?;
        }
        shape.files += 1;
        shape.c_files += usize::from(ext == "c");
        shape.needle_files += usize::from(needle);
        shape.bytes += text.len() as u64;
        previous_file[di] = Some(name);
    }
    Ok(shape)
}

/// Source-like text: mostly a few hundred bytes to a few KiB, one in 50 files 32 KiB or
/// more, as generated or vendored files are.
fn file_text(i: usize, needle: bool, rng: &mut Rng) -> String {
    let lines = if i % 50 == 0 {
        800 + rng.below(400)
    } else {
        4 + rng.below(80)
    };
    let mut text = format!("// file {i}\n");
    for line in 0..lines {
        let _ = writeln!(text, "line {line}: value {:x}", rng.next_u64());
        if needle && line == lines / 2 {
            let _ = writeln!(text, "call {NEEDLE}();");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_tree_and_counts_match_the_disk() {
        let t = tempfile::tempdir().unwrap();
        let a = generate(Some(&t.path().join("a")), 300, 5).unwrap();
        let b = generate(Some(&t.path().join("b")), 300, 5).unwrap();
        assert_eq!(a, b);
        assert_eq!(generate(None, 300, 5).unwrap(), a);
        assert_eq!(a.entries(), 300);
        assert!(a.dirs >= 10 && a.symlinks >= 1 && a.needle_files >= 1 && a.c_files >= 1);
        let mut on_disk = 0;
        let mut work = vec![t.path().join("a")];
        while let Some(d) = work.pop() {
            for e in fs::read_dir(d).unwrap() {
                let e = e.unwrap();
                on_disk += 1;
                if e.file_type().unwrap().is_dir() {
                    work.push(e.path());
                }
            }
        }
        assert_eq!(on_disk, a.entries());
    }
}
