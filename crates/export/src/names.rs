//! File names from clients: bytes, checked before they reach any system call.
//!
//! A name must be one path component: not empty, not "." or "..", no "/" and no NUL. Anything
//! else is refused (`EINVAL`) by both doors in every request that carries a name. Linux never
//! sends such names over 9P or FUSE, so a client that does is confused or hostile; `EINVAL`
//! says so, where `ENOENT` would suggest the name could exist. Names longer than 255 bytes
//! get `ENAMETOOLONG`, as the kernel would give.

use std::ffi::CString;

use crate::{ExportError, ExportResult};

/// Longest name a Linux file system accepts (NAME_MAX).
pub const NAME_MAX: usize = 255;

/// Checks a name and turns it into the C string the kernel takes.
///
/// # Errors
/// [`ExportError::InvalidName`], or `ENAMETOOLONG` past [`NAME_MAX`].
pub fn component(name: &[u8]) -> ExportResult<CString> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(ExportError::InvalidName);
    }
    if name.len() > NAME_MAX {
        return Err(ExportError::Os(rustix::io::Errno::NAMETOOLONG));
    }
    // A NUL would silently cut the name short.
    CString::new(name).map_err(|_| ExportError::InvalidName)
}

/// Checks data that must become a C string but is not a path component (a symlink target, an
/// xattr name): only NUL is refused.
///
/// # Errors
/// [`ExportError::Nul`].
pub fn c_string(bytes: &[u8]) -> ExportResult<CString> {
    CString::new(bytes).map_err(|_| ExportError::Nul)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_everything_but_one_component() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b", b"../x"] {
            assert!(component(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(component(&[b'x'; 256]), Err(ExportError::Os(_))));
        for good in [&b"a"[..], b"...", b".hidden", b"\xff\xfe", &[b'x'; 255]] {
            assert_eq!(component(good).unwrap().as_bytes(), good);
        }
    }
}
