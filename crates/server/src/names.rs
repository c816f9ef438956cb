//! File names from the wire: bytes, checked before they reach any system call.
//!
//! A name must be one path component: not empty, not "." or "..", no "/" and no NUL. Anything
//! else is refused with `EINVAL` in every message that carries a name (walk, lcreate, mkdir,
//! symlink, mknod, link, rename, renameat, unlinkat, xattr names have their own rule). Linux's
//! v9fs never sends such names, so a client that does is confused or hostile; `EINVAL` ("not a
//! valid argument") says so, where `ENOENT` would suggest the name could exist. Names longer
//! than 255 bytes get `ENAMETOOLONG`, as the kernel would give.

use std::ffi::CString;

use crate::error::{OpError, OpResult};

/// Longest name a Linux file system accepts (NAME_MAX).
pub(crate) const NAME_MAX: usize = 255;

/// Checks a name and turns it into the C string the kernel takes.
pub(crate) fn component(name: &[u8]) -> OpResult<CString> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(OpError::InvalidName);
    }
    if name.len() > NAME_MAX {
        return Err(OpError::Os(rustix::io::Errno::NAMETOOLONG));
    }
    // A NUL would silently cut the name short.
    CString::new(name).map_err(|_| OpError::InvalidName)
}

/// Checks data that must become a C string but is not a path component (a symlink target, an
/// xattr name): only NUL is refused.
pub(crate) fn c_string(bytes: &[u8]) -> OpResult<CString> {
    CString::new(bytes).map_err(|_| OpError::Invalid("NUL inside a string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_everything_but_one_component() {
        for bad in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b", b"../x"] {
            assert!(component(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(component(&[b'x'; 256]), Err(OpError::Os(_))));
        for good in [&b"a"[..], b"...", b".hidden", b"\xff\xfe", &[b'x'; 255]] {
            assert_eq!(component(good).unwrap().as_bytes(), good);
        }
    }
}
