//! The event model: what subscribers receive, as a Rust value, a JSON line and a human line.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::path::RelPath;

/// The attributes of a file as the watcher last saw them (from `lstat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attrs {
    /// Inode number (the qid path on the export's own device).
    pub ino: u64,
    /// `st_mode`: file type and permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Status-change time, nanoseconds since the epoch.
    pub ctime_ns: i64,
}

impl Attrs {
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    /// The file-type bits of `mode`.
    pub fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT
    }

    pub(crate) fn from_stat(st: &rustix::fs::Stat) -> Self {
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        Self {
            ino: st.st_ino,
            mode: st.st_mode,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec as i64),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec as i64),
        }
    }
}

/// A directory's attributes as a stat of it gives them, all a client may cache of them:
/// carried by events that add, remove or rename a name in the directory, taken when the
/// event is published (after the change), so that a client can tell whether the directory
/// is as its own change left it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirAttrs {
    /// Inode number.
    pub ino: u64,
    /// `st_mode`.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Link count.
    pub nlink: u64,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks.
    pub blocks: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Status-change time, nanoseconds since the epoch.
    pub ctime_ns: i64,
}

impl DirAttrs {
    pub(crate) fn from_stat(st: &rustix::fs::Stat) -> Self {
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        Self {
            ino: st.st_ino,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            nlink: st.st_nlink,
            size: u64::try_from(st.st_size).unwrap_or(0),
            blocks: u64::try_from(st.st_blocks).unwrap_or(0),
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec as i64),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec as i64),
        }
    }
}

/// What happened to [`Event::path`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// The path appeared.
    Created,
    /// The path (and, for a directory, everything beneath it) went away. A name that came
    /// and went between two looks is reported removed too, without attributes: a
    /// subscriber may have seen it meanwhile.
    Removed,
    /// File contents changed.
    Modified,
    /// Metadata only (mode, owner, times) changed.
    Attrib,
    /// `from` (and everything beneath it) moved to the path; whatever was at the path is gone.
    Renamed {
        /// The old path.
        from: RelPath,
    },
    /// The subscriber must re-read the subtree at the path: events were dropped or collapsed.
    Rescan {
        /// Why: "subscriber fell behind", "burst", "history lost", "fresh start", ...
        reason: String,
    },
    /// Every change made before the sync call with this cookie has been delivered before this.
    Sync {
        /// The cookie the sync call returned.
        cookie: u64,
    },
    /// Something the operator should know (the watcher fell back to polling, ...).
    Warning {
        /// What happened.
        message: String,
    },
}

/// A change before it is numbered: what the engine produces and the hub publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// What happened.
    pub kind: EventKind,
    /// Where, relative to the export.
    pub path: RelPath,
    /// The new attributes where known (the old ones for `Removed`, none for a name that
    /// was never published).
    pub attrs: Option<Attrs>,
    /// For a name added, removed or renamed: its directory's attributes when published.
    pub dir: Option<DirAttrs>,
    /// For a rename: the old name's directory's attributes when published.
    pub from_dir: Option<DirAttrs>,
}

impl Change {
    pub(crate) fn new(kind: EventKind, path: RelPath, attrs: Option<Attrs>) -> Self {
        Self {
            kind,
            path,
            attrs,
            dir: None,
            from_dir: None,
        }
    }
}

/// One numbered event, as delivered to subscribers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The hub's epoch: a new one every time the server starts.
    pub epoch: u64,
    /// Strictly increasing within an epoch (not necessarily contiguous for one subscriber).
    pub seq: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
    /// Where, relative to the export ("" is the root).
    pub path: RelPath,
    /// The qid path (inode-derived id) where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qid: Option<u64>,
    /// The new attributes where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attrs: Option<Attrs>,
    /// For `created`, `removed` and `renamed`: the attributes of the directory holding
    /// `path`, taken when the event was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<DirAttrs>,
    /// For `renamed`: the attributes of the directory that held `from`, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_dir: Option<DirAttrs>,
}

impl Event {
    pub(crate) fn from_change(epoch: u64, seq: u64, c: Change) -> Self {
        Self {
            epoch,
            seq,
            kind: c.kind,
            path: c.path,
            qid: c.attrs.map(|a| a.ino),
            attrs: c.attrs,
            dir: c.dir,
            from_dir: c.from_dir,
        }
    }

    /// Appends this event as one JSON line (ending in `\n`) to `out`.
    pub fn write_json_line(&self, out: &mut Vec<u8>) {
        // Serializing plain data into a Vec cannot fail; if it ever did, emit nothing rather
        // than half a line.
        let start = out.len();
        if serde_json::to_writer(&mut *out, self).is_err() {
            out.truncate(start);
            return;
        }
        out.push(b'\n');
    }

    /// Parses one JSON line (with or without its `\n`).
    ///
    /// # Errors
    /// The `serde_json` error for anything that is not an event.
    pub fn from_json_line(line: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(line.strip_suffix(b"\n").unwrap_or(line))
    }
}

impl fmt::Display for Event {
    /// One human line: `#SEQ KIND PATH [details]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} ", self.seq)?;
        match &self.kind {
            EventKind::Created => write!(f, "created  {}", self.path)?,
            EventKind::Removed => write!(f, "removed  {}", self.path)?,
            EventKind::Modified => write!(f, "modified {}", self.path)?,
            EventKind::Attrib => write!(f, "attrib   {}", self.path)?,
            EventKind::Renamed { from } => write!(f, "renamed  {} -> {}", from, self.path)?,
            EventKind::Rescan { reason } => return write!(f, "rescan   {} ({reason})", self.path),
            EventKind::Sync { cookie } => return write!(f, "sync     cookie {cookie}"),
            EventKind::Warning { message } => return write!(f, "warning  {message}"),
        }
        if let Some(a) = &self.attrs {
            let kind = match a.file_type() {
                libc::S_IFDIR => "dir",
                libc::S_IFLNK => "symlink",
                libc::S_IFREG => "file",
                _ => "special",
            };
            write!(f, " ({kind}, {} bytes, mode {:o})", a.size, a.mode & 0o7777)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_and_shape() {
        let ev = Event {
            epoch: 7,
            seq: 3,
            kind: EventKind::Renamed {
                from: RelPath::new("a/old").unwrap(),
            },
            path: RelPath::new("a/new").unwrap(),
            qid: Some(12),
            attrs: Some(Attrs {
                ino: 12,
                mode: libc::S_IFREG | 0o644,
                size: 5,
                mtime_ns: 1,
                ctime_ns: 2,
            }),
            dir: None,
            from_dir: None,
        };
        let mut line = Vec::new();
        ev.write_json_line(&mut line);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        let text = std::str::from_utf8(&line).unwrap();
        assert!(text.contains("\"kind\":\"renamed\""), "{text}");
        assert!(text.contains("\"from\":\"a/old\""), "{text}");
        assert_eq!(Event::from_json_line(&line).unwrap(), ev);
        assert_eq!(
            ev.to_string(),
            "#3 renamed  a/old -> a/new (file, 5 bytes, mode 644)"
        );
    }

    #[test]
    fn unit_kinds_and_non_utf8_names_round_trip() {
        let ev = Event {
            epoch: 1,
            seq: 1,
            kind: EventKind::Created,
            path: RelPath::new(b"d/\xff\n").unwrap(),
            qid: None,
            attrs: None,
            dir: None,
            from_dir: None,
        };
        let mut line = Vec::new();
        ev.write_json_line(&mut line);
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        assert_eq!(Event::from_json_line(&line).unwrap(), ev);
        assert_eq!(ev.to_string(), "#1 created  d/\\xff\\n");
    }
}
