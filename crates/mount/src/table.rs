//! The mount table as this process sees it (/proc/self/mountinfo): which mounts stand at a
//! point, in what order, and which of them is a given FUSE connection's.
//!
//! A crossfs FUSE mount shows type `fuse.crossfs` and, as its source, the server address as
//! the user gave it (the fstab line's first field, or `crossfs mount`'s ADDR). Several
//! mounts may stand at one point; a path there reaches the last one made. Unmounting by path
//! removes that last one, whoever made it, so a mount finds its own entry by its device
//! number before it unmounts (see [`MountHandle::unmount`](crate::MountHandle::unmount)).

use std::path::{Path, PathBuf};

/// The file system type a crossfs FUSE mount shows (`fuse` with the subtype `crossfs`).
pub const FSTYPE: &str = "fuse.crossfs";

/// One line of /proc/self/mountinfo, the fields crossfs uses.
#[derive(Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The mount's id (unique while it is mounted).
    pub id: u64,
    /// The device number of the mounted file system (`MAJOR:MINOR`).
    pub dev: (u32, u32),
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// `fuse.crossfs`, `tmpfs`, `autofs`, ...
    pub fstype: String,
    /// What was mounted, as the mounter named it.
    pub source: String,
}

impl MountEntry {
    /// Whether this is a crossfs FUSE mount.
    pub fn is_crossfs(&self) -> bool {
        self.fstype == FSTYPE
            // Mounts made before crossfs gave its subtype: type `fuse`, source `crossfs:ADDR`.
            || (self.fstype == "fuse" && self.source.starts_with("crossfs:"))
    }

    /// The server address of a crossfs FUSE mount (`None` for any other file system).
    pub fn crossfs_addr(&self) -> Option<&str> {
        if !self.is_crossfs() {
            return None;
        }
        Some(self.source.strip_prefix("crossfs:").unwrap_or(&self.source))
    }
}

/// Every mount this process sees, in mount order (a later mount at a point hides earlier ones).
///
/// # Errors
/// Reading /proc/self/mountinfo failed.
pub fn mounts() -> std::io::Result<Vec<MountEntry>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// The mount an absolute, canonical `path` is on: the last mounted at the longest mount point
/// that is `path` or one of its ancestors.
pub fn containing<'a>(mounts: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| path.starts_with(&m.mountpoint))
        .max_by_key(|(i, m)| (m.mountpoint.components().count(), *i))
        .map(|(_, m)| m)
}

/// The mount at `mountpoint` (the last made there: the one a path there reaches).
pub fn at<'a>(mounts: &'a [MountEntry], mountpoint: &Path) -> Option<&'a MountEntry> {
    mounts.iter().rev().find(|m| m.mountpoint == mountpoint)
}

/// Where the mount of device `dev` at `mountpoint` stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Standing {
    /// It is the last mount there: unmounting the path removes it.
    OnTop,
    /// Another mount was made over it: unmounting the path would remove that one.
    Covered,
    /// It is not in the table (unmounted already).
    Gone,
}

/// Where the mount of device `dev` at `mountpoint` stands in `mounts`.
pub fn standing(mounts: &[MountEntry], mountpoint: &Path, dev: (u32, u32)) -> Standing {
    let here: Vec<&MountEntry> = mounts
        .iter()
        .filter(|m| m.mountpoint == mountpoint)
        .collect();
    match here.iter().rposition(|m| m.dev == dev) {
        None => Standing::Gone,
        Some(i) if i + 1 == here.len() => Standing::OnTop,
        Some(_) => Standing::Covered,
    }
}

fn parse(info: &str) -> Vec<MountEntry> {
    info.lines()
        .filter_map(|line| {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
            let fields: Vec<&str> = line.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            let (major, minor) = fields.get(2)?.split_once(':')?;
            Some(MountEntry {
                id: fields.first()?.parse().ok()?,
                dev: (major.parse().ok()?, minor.parse().ok()?),
                mountpoint: PathBuf::from(unescape(fields.get(4)?)),
                fstype: unescape(fields.get(dash + 1)?),
                source: unescape(fields.get(dash + 2)?),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
30 22 0:40 / /mnt/a\\040b rw,nosuid - fuse.crossfs unix:/run/x\\040y.sock rw,user_id=0
31 30 0:41 / /mnt/a\\040b/inner rw - tmpfs tmpfs rw
32 22 0:42 / /mnt/c rw - fuse crossfs:tcp:127.0.0.1:564 rw
33 22 0:43 / /mnt/c rw - fuse.sshfs host:/src rw
34 22 0:44 / /mnt/d rw - fuse.crossfs vsock:2:5640 rw
35 22 0:45 / /mnt/d rw - fuse.crossfs vsock:2:5640 rw
";

    #[test]
    fn mountinfo_fields_are_read_and_unescaped() {
        let m = parse(INFO);
        assert_eq!(m.len(), 7);
        assert_eq!((m[1].id, m[1].dev), (30, (0, 40)));
        assert_eq!(m[1].mountpoint, Path::new("/mnt/a b"));
        assert_eq!(m[1].crossfs_addr(), Some("unix:/run/x y.sock"));
        assert_eq!(
            m[3].crossfs_addr(),
            Some("tcp:127.0.0.1:564"),
            "an older mount"
        );
        assert_eq!(m[5].crossfs_addr(), Some("vsock:2:5640"));
        assert_eq!(m[0].crossfs_addr(), None);
        assert_eq!(m[4].crossfs_addr(), None);
        assert_eq!(unescape(r"/mnt/x\134y"), r"/mnt/x\y");
        assert_eq!(unescape(r"/a\04"), r"/a\04");
        assert_eq!(unescape(r"/a\09x"), r"/a\09x");
    }

    #[test]
    fn the_deepest_and_latest_mount_holds_a_path() {
        let m = parse(INFO);
        let on = |p: &str| containing(&m, Path::new(p)).map(|e| e.source.as_str());
        assert_eq!(on("/mnt/a b/src/x.c"), Some("unix:/run/x y.sock"));
        assert_eq!(on("/mnt/a b"), Some("unix:/run/x y.sock"));
        assert_eq!(on("/mnt/a b/inner/f"), Some("tmpfs"));
        // Not a path prefix by bytes: /mnt/a bc is on the root file system.
        assert_eq!(on("/mnt/a bc"), Some("/dev/vda1"));
        // A later mount at the same point hides the crossfs mount under it.
        assert_eq!(on("/mnt/c/d"), Some("host:/src"));
        assert_eq!(at(&m, Path::new("/mnt/c")).unwrap().source, "host:/src");
        assert!(at(&m, Path::new("/mnt")).is_none());
    }

    #[test]
    fn a_mount_knows_whether_another_covers_it() {
        let m = parse(INFO);
        let d = Path::new("/mnt/d");
        assert_eq!(standing(&m, d, (0, 45)), Standing::OnTop);
        assert_eq!(standing(&m, d, (0, 44)), Standing::Covered);
        assert_eq!(standing(&m, d, (0, 46)), Standing::Gone);
        assert_eq!(standing(&m, Path::new("/mnt/c"), (0, 44)), Standing::Gone);
    }
}
