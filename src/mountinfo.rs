//! Which crossfs mounts this process sees, from /proc/self/mountinfo.
//!
//! A `crossfs mount` is a FUSE file system (`fuse.crossfs`) whose source is `crossfs:ADDR`;
//! `crossfs watch` reads the address, `crossfs sync` the mount point of a path inside, and
//! mount(8)'s helper waits for the mount to appear.

use std::path::{Path, PathBuf};

/// One line of /proc/self/mountinfo, the fields crossfs uses.
#[derive(Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub mountpoint: PathBuf,
    pub fstype: String,
    pub source: String,
}

impl MountEntry {
    /// The server address of a crossfs mount (`None` for any other file system).
    pub fn crossfs_addr(&self) -> Option<&str> {
        let fuse = self.fstype == "fuse" || self.fstype.starts_with("fuse.");
        self.source.strip_prefix("crossfs:").filter(|_| fuse)
    }
}

/// Every mount this process sees, in mount order (a later mount at a point hides earlier ones).
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

fn parse(info: &str) -> Vec<MountEntry> {
    info.lines()
        .filter_map(|line| {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
            let fields: Vec<&str> = line.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            Some(MountEntry {
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
30 22 0:40 / /mnt/a\\040b rw,nosuid - fuse.crossfs crossfs:unix:/run/x\\040y.sock rw,user_id=0
31 30 0:41 / /mnt/a\\040b/inner rw - tmpfs tmpfs rw
32 22 0:42 / /mnt/c rw - fuse.crossfs crossfs:tcp:127.0.0.1:564 rw
33 22 0:43 / /mnt/c rw - fuse.sshfs host:/src rw
";

    #[test]
    fn mountinfo_fields_are_read_and_unescaped() {
        let m = parse(INFO);
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].mountpoint, Path::new("/mnt/a b"));
        assert_eq!(m[1].crossfs_addr(), Some("unix:/run/x y.sock"));
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
        assert_eq!(on("/mnt/a b/src/x.c"), Some("crossfs:unix:/run/x y.sock"));
        assert_eq!(on("/mnt/a b"), Some("crossfs:unix:/run/x y.sock"));
        assert_eq!(on("/mnt/a b/inner/f"), Some("tmpfs"));
        // Not a path prefix by bytes: /mnt/a bc is on the root file system.
        assert_eq!(on("/mnt/a bc"), Some("/dev/vda1"));
        // A later mount at the same point hides the crossfs mount under it.
        assert_eq!(on("/mnt/c/d"), Some("host:/src"));
        assert_eq!(at(&m, Path::new("/mnt/c")).unwrap().source, "host:/src");
        assert!(at(&m, Path::new("/mnt")).is_none());
    }
}
