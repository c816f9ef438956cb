//! Set-user-ID and set-group-ID bits: what a client may set, and when the server drops them.
//!
//! A client that could set these bits could leave a program on the host that runs with the
//! rights of its owner: of any uid it names, when the server runs as root and gives new files
//! to the caller. Unless [`crate::ServerConfig::allow_setuid`] is set, the server therefore
//! - strips both bits from every mode a client sets (Tlcreate, Tmknod, Tsetattr; Tmkdir
//!   never sets them, as mkdir(2) does not). A Tsetattr may keep bits a file already has
//!   (so `chmod 2775` of a setgid directory the host made keeps it) but never adds one;
//! - clears them from a regular file a client opens for writing or truncates. Linux clears
//!   them on write only for callers without `CAP_FSETID`: a root server writing for a client
//!   would leave a setuid-root program rewritten with its bit intact.
//!
//! Whatever the setting, a chown by the server clears them as the kernel does (`S_ISUID`,
//! and `S_ISGID` with group execute, on anything but a directory), checked after the call
//! rather than trusted to the exported file system. A directory created inside a setgid
//! directory inherits its `S_ISGID`, as it does locally: the host chose that bit, and on a
//! directory it only chooses the group of new files.

use std::os::fd::BorrowedFd;

use crate::error::OpResult;
use crate::session::Conn;
use crate::sys;

/// Both set-id bits.
pub(super) const SETID: u32 = libc::S_ISUID | libc::S_ISGID;

/// The permission bits (`07777`) of a mode a client asks for, without set-id bits unless the
/// server allows them.
pub(super) fn client_perm(conn: &Conn, mode: u32) -> u32 {
    let perm = mode & 0o7777;
    if conn.server.config.allow_setuid {
        perm
    } else {
        perm & !SETID
    }
}

/// The bits of `mode` that a chown (or a write by an unprivileged caller) drops: `S_ISUID`,
/// and `S_ISGID` when group execute is set (without it, `S_ISGID` marks mandatory locking,
/// which the kernel leaves alone). None for directories and symlinks.
pub(super) fn dropped_on_change(mode: u32) -> u32 {
    match mode & libc::S_IFMT {
        libc::S_IFDIR | libc::S_IFLNK => 0,
        _ => {
            let mut bits = mode & libc::S_ISUID;
            if mode & libc::S_ISGID != 0 && mode & libc::S_IXGRP != 0 {
                bits |= libc::S_ISGID;
            }
            bits
        }
    }
}

/// Clears from the inode behind `fd` the bits [`dropped_on_change`] names, if it has any.
pub(super) fn drop_bits(conn: &Conn, fd: BorrowedFd<'_>) -> OpResult<()> {
    let mode = u32::from(sys::stat(fd)?.stx_mode);
    let bits = dropped_on_change(mode);
    if bits != 0 {
        sys::chmod(conn.server.proc_fd(), fd, mode & 0o7777 & !bits)?;
    }
    Ok(())
}

/// Before a client may write to or truncate the file behind `fd`, whose mode is `mode`:
/// clears its set-id bits unless the server allows them.
pub(super) fn before_write(conn: &Conn, fd: BorrowedFd<'_>, mode: u32) -> OpResult<()> {
    if conn.server.config.allow_setuid || dropped_on_change(mode) == 0 {
        return Ok(());
    }
    drop_bits(conn, fd)
}

/// The mode bits a Tsetattr applies, given the file's current mode: without `allow_setuid`,
/// set-id bits are kept only where the file already has them.
pub(super) fn setattr_perm(conn: &Conn, requested: u32, current: u32) -> u32 {
    let perm = requested & 0o7777;
    if conn.server.config.allow_setuid {
        perm
    } else {
        (perm & !SETID) | (perm & SETID & current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chown_drops_what_the_kernel_drops() {
        let reg = libc::S_IFREG;
        assert_eq!(dropped_on_change(reg | 0o4755), libc::S_ISUID);
        assert_eq!(dropped_on_change(reg | 0o6755), SETID);
        // Setgid without group execute: a mandatory-locking mark, kept.
        assert_eq!(dropped_on_change(reg | 0o2745), 0);
        assert_eq!(dropped_on_change(libc::S_IFDIR | 0o2775), 0);
        assert_eq!(dropped_on_change(reg | 0o755), 0);
    }
}
