//! File names from the wire: the export core's rule ([`crossfs_export::names`]), with the
//! server's error type. Every message that carries a name (walk, lcreate, mkdir, symlink,
//! mknod, link, rename, renameat, unlinkat; xattr names have their own rule) checks it here.

use std::ffi::CString;

use crate::error::OpResult;

/// Checks a name and turns it into the C string the kernel takes.
pub(crate) fn component(name: &[u8]) -> OpResult<CString> {
    Ok(crossfs_export::names::component(name)?)
}

/// Checks data that must become a C string but is not a path component (a symlink target, an
/// xattr name): only NUL is refused.
pub(crate) fn c_string(bytes: &[u8]) -> OpResult<CString> {
    Ok(crossfs_export::names::c_string(bytes)?)
}
