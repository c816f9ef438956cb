//! Set-user-ID and set-group-ID bits: the export core's rules
//! ([`crossfs_export::policy`], which says what a client may set and when the bits are
//! dropped), applied to a connection's server.

use std::os::fd::BorrowedFd;

use crate::error::OpResult;
use crate::session::Conn;

/// Both set-id bits.
pub(super) const SETID: u32 = crossfs_export::policy::SETID;

/// The permission bits (`07777`) of a mode a client asks for, without set-id bits unless the
/// server allows them.
pub(super) fn client_perm(conn: &Conn, mode: u32) -> u32 {
    conn.server.policy().client_perm(mode)
}

/// Clears from the inode behind `fd` the bits a chown drops
/// ([`crossfs_export::policy::dropped_on_change`]), if it has any.
pub(super) fn drop_bits(conn: &Conn, fd: BorrowedFd<'_>) -> OpResult<()> {
    Ok(crossfs_export::policy::drop_bits(
        conn.server.proc_fd(),
        fd,
    )?)
}

/// Before a client may write to or truncate the file behind `fd`, whose mode is `mode`:
/// clears its set-id bits unless the server allows them.
pub(super) fn before_write(conn: &Conn, fd: BorrowedFd<'_>, mode: u32) -> OpResult<()> {
    Ok(conn
        .server
        .policy()
        .before_write(conn.server.proc_fd(), fd, mode)?)
}

/// The mode bits a Tsetattr applies, given the file's current mode: without `allow_setuid`,
/// set-id bits are kept only where the file already has them.
pub(super) fn setattr_perm(conn: &Conn, requested: u32, current: u32) -> u32 {
    conn.server.policy().setattr_perm(requested, current)
}
