//! Paths relative to the export root, as bytes.

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A path relative to the export root: `/`-separated components, no leading or trailing `/`,
/// no empty, `.` or `..` components, no NUL. The empty path is the root itself.
///
/// Linux names are bytes, so this is bytes. In JSON it is a string when it is valid UTF-8
/// (almost always) and an array of byte values otherwise, so no name is ever mangled.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(Vec<u8>);

/// Why bytes are not a [`RelPath`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a relative path beneath the export: {0}")]
pub struct PathError(String);

impl RelPath {
    /// The export root.
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// Validates `bytes` as a relative path.
    ///
    /// # Errors
    /// [`PathError`] for a leading `/`, an empty, `.` or `..` component, or a NUL byte.
    pub fn new(bytes: impl AsRef<[u8]>) -> Result<Self, PathError> {
        let bytes = bytes.as_ref();
        if bytes.is_empty() {
            return Ok(Self::root());
        }
        for comp in bytes.split(|&b| b == b'/') {
            if !valid_name(comp) {
                return Err(PathError(bytes.escape_ascii().to_string()));
            }
        }
        Ok(Self(bytes.to_vec()))
    }

    /// Whether this is the export root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// `self/name`. `None` if `name` is not a valid single component.
    pub fn join(&self, name: &[u8]) -> Option<Self> {
        if !valid_name(name) {
            return None;
        }
        let mut v = Vec::with_capacity(self.0.len() + 1 + name.len());
        v.extend_from_slice(&self.0);
        if !v.is_empty() {
            v.push(b'/');
        }
        v.extend_from_slice(name);
        Some(Self(v))
    }

    /// The containing directory; `None` for the root.
    pub fn parent(&self) -> Option<Self> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.iter().rposition(|&b| b == b'/') {
            Some(i) => Self(self.0[..i].to_vec()),
            None => Self::root(),
        })
    }

    /// The last component (empty for the root).
    pub fn file_name(&self) -> &[u8] {
        match self.0.iter().rposition(|&b| b == b'/') {
            Some(i) => &self.0[i + 1..],
            None => &self.0,
        }
    }

    /// The first component (empty for the root).
    pub fn first_component(&self) -> &[u8] {
        self.components().next().unwrap_or(&[])
    }

    /// The components, outermost first.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/').filter(|c| !c.is_empty())
    }

    /// Whether `self` is `ancestor` or lies beneath it (component-wise).
    pub fn is_within(&self, ancestor: &RelPath) -> bool {
        if ancestor.is_root() {
            return true;
        }
        self.0.starts_with(&ancestor.0)
            && (self.0.len() == ancestor.0.len() || self.0[ancestor.0.len()] == b'/')
    }

    /// `self` with its `from` prefix replaced by `to`; `None` if `self` is not within `from`.
    pub fn rebase(&self, from: &RelPath, to: &RelPath) -> Option<Self> {
        if !self.is_within(from) {
            return None;
        }
        let rest = &self.0[from.0.len()..];
        let rest = rest.strip_prefix(b"/").unwrap_or(rest);
        if rest.is_empty() {
            return Some(to.clone());
        }
        let mut v = to.0.clone();
        if !v.is_empty() {
            v.push(b'/');
        }
        v.extend_from_slice(rest);
        Some(Self(v))
    }

    /// The deepest path that both `self` and `other` lie within.
    pub fn common_ancestor(&self, other: &RelPath) -> RelPath {
        let mut len = 0;
        for (a, b) in self.components().zip(other.components()) {
            if a != b {
                break;
            }
            len += a.len() + usize::from(len != 0);
        }
        Self(self.0[..len].to_vec())
    }

    /// The key range of everything strictly beneath `self` in a byte-ordered map: all keys
    /// `k` with `lo <= k < hi`. `/` (0x2f) is followed by `0` (0x30), so `self/…` is one run.
    pub(crate) fn descendant_range(&self) -> (RelPath, Option<RelPath>) {
        if self.is_root() {
            return (Self(vec![0]), None);
        }
        let mut lo = self.0.clone();
        lo.push(b'/');
        let mut hi = self.0.clone();
        hi.push(b'0');
        (Self(lo), Some(Self(hi)))
    }

    /// `root/self` as a filesystem path (for messages and for the watcher's own use).
    pub fn to_path(&self, root: &Path) -> PathBuf {
        if self.is_root() {
            root.to_path_buf()
        } else {
            root.join(OsStr::from_bytes(&self.0))
        }
    }
}

/// A single component: non-empty, not `.` or `..`, no `/` or NUL.
pub(crate) fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.iter().any(|&b| b == b'/' || b == 0)
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            return f.write_str(".");
        }
        match std::str::from_utf8(&self.0) {
            Ok(s) => f.write_str(s),
            Err(_) => write!(f, "{}", self.0.escape_ascii()),
        }
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.0.escape_ascii())
    }
}

impl TryFrom<&str> for RelPath {
    type Error = PathError;
    fn try_from(s: &str) -> Result<Self, PathError> {
        Self::new(s)
    }
}

impl Serialize for RelPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => self.0.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for RelPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Text(String),
            Bytes(Vec<u8>),
        }
        let bytes = match Repr::deserialize(d)? {
            Repr::Text(t) => t.into_bytes(),
            Repr::Bytes(b) => b,
        };
        RelPath::new(bytes).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    #[test]
    fn validation_rejects_escapes() {
        for bad in ["/a", "a/", "a//b", ".", "..", "a/../b", "a/./b"] {
            assert!(RelPath::new(bad).is_err(), "{bad}");
        }
        assert!(RelPath::new(b"a\0b").is_err());
        assert!(RelPath::new(b"\xff\xfe/x").is_ok());
    }

    #[test]
    fn within_is_component_wise() {
        assert!(p("a/b").is_within(&p("a")));
        assert!(!p("ab").is_within(&p("a")));
        assert!(p("a").is_within(&RelPath::root()));
        assert_eq!(p("a/b/c").rebase(&p("a/b"), &p("x")), Some(p("x/c")));
        assert_eq!(p("a/b").rebase(&p("a/b"), &p("x")), Some(p("x")));
        assert_eq!(p("a/b/c").common_ancestor(&p("a/bc")), p("a"));
        assert_eq!(p("a/b").common_ancestor(&p("a/b/c")), p("a/b"));
        assert_eq!(p("a").parent(), Some(RelPath::root()));
    }

    #[test]
    fn json_is_string_or_bytes() {
        assert_eq!(serde_json::to_string(&p("a/é")).unwrap(), "\"a/é\"");
        let raw = RelPath::new(b"\xff").unwrap();
        let json = serde_json::to_string(&raw).unwrap();
        assert_eq!(json, "[255]");
        assert_eq!(serde_json::from_str::<RelPath>(&json).unwrap(), raw);
        assert!(serde_json::from_str::<RelPath>("\"../x\"").is_err());
    }
}
