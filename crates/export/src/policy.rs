//! What clients may change: read-only exports, device nodes, and set-user-ID and
//! set-group-ID bits. Both doors ask these functions; neither decides alone.
//!
//! Set-id bits: a client that could set them could leave a program on the host that runs
//! with the rights of its owner (of any uid it names, when the server runs as root and gives
//! new files to the caller). Unless [`Policy::allow_setuid`] is set, a door therefore
//! - strips both bits from every mode a client sets (create, mknod, setattr; mkdir never
//!   sets them, as mkdir(2) does not). A setattr may keep bits a file already has (so
//!   `chmod 2775` of a setgid directory the host made keeps it) but never adds one;
//! - clears them from a regular file a client opens for writing or truncates. Linux clears
//!   them on write only for callers without `CAP_FSETID`: a root server writing for a client
//!   would leave a setuid-root program rewritten with its bit intact.
//!
//! Whatever the setting, a chown by the server clears them as the kernel does (`S_ISUID`,
//! and `S_ISGID` with group execute, on anything but a directory), checked after the call
//! rather than trusted to the exported file system.

use std::os::fd::BorrowedFd;

use crate::{sys, ExportError, ExportResult};

/// Both set-id bits.
pub const SETID: u32 = libc::S_ISUID | libc::S_ISGID;

/// What an export lets its clients do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Refuse every mutation with `EROFS`.
    pub read_only: bool,
    /// Allow making and opening character and block devices (otherwise `EPERM`).
    pub allow_devices: bool,
    /// Keep set-id bits clients set.
    pub allow_setuid: bool,
}

impl Policy {
    /// Refuses a mutation on a read-only export.
    ///
    /// # Errors
    /// [`ExportError::ReadOnly`].
    pub fn check_writable(&self) -> ExportResult<()> {
        if self.read_only {
            Err(ExportError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Refuses to make or open a device node (`kind` is the `S_IFMT` bits) unless allowed:
    /// a device node in the export would give the client the device.
    ///
    /// # Errors
    /// [`ExportError::NotPermitted`].
    pub fn check_device(&self, kind: u32) -> ExportResult<()> {
        match kind & libc::S_IFMT {
            libc::S_IFCHR | libc::S_IFBLK if !self.allow_devices => {
                Err(ExportError::NotPermitted("device nodes are not allowed"))
            }
            _ => Ok(()),
        }
    }

    /// The permission bits (`07777`) of a mode a client asks for, without set-id bits unless
    /// allowed.
    pub fn client_perm(&self, mode: u32) -> u32 {
        let perm = mode & 0o7777;
        if self.allow_setuid {
            perm
        } else {
            perm & !SETID
        }
    }

    /// The mode bits a setattr applies, given the file's current mode: without
    /// `allow_setuid`, set-id bits are kept only where the file already has them.
    pub fn setattr_perm(&self, requested: u32, current: u32) -> u32 {
        let perm = requested & 0o7777;
        if self.allow_setuid {
            perm
        } else {
            (perm & !SETID) | (perm & SETID & current)
        }
    }

    /// Before a client may write to or truncate the file behind `fd`, whose mode is `mode`:
    /// clears its set-id bits unless allowed.
    ///
    /// # Errors
    /// What `statx` or `chmod` report.
    pub fn before_write(
        &self,
        proc_fd: BorrowedFd<'_>,
        fd: BorrowedFd<'_>,
        mode: u32,
    ) -> ExportResult<()> {
        if self.allow_setuid || dropped_on_change(mode) == 0 {
            return Ok(());
        }
        drop_bits(proc_fd, fd)
    }
}

/// The bits of `mode` that a chown (or a write by an unprivileged caller) drops: `S_ISUID`,
/// and `S_ISGID` when group execute is set (without it, `S_ISGID` marks mandatory locking,
/// which the kernel leaves alone). None for directories and symlinks.
pub fn dropped_on_change(mode: u32) -> u32 {
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
///
/// # Errors
/// What `statx` or `chmod` report.
pub fn drop_bits(proc_fd: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> ExportResult<()> {
    let mode = u32::from(sys::stat(fd)?.stx_mode);
    let bits = dropped_on_change(mode);
    if bits != 0 {
        sys::chmod(proc_fd, fd, mode & 0o7777 & !bits)?;
    }
    Ok(())
}

/// After creating a file system object through `fd` (an `O_PATH` handle on it): gives it to
/// `owner` (uid, gid; `None` keeps each) when there is one (a root server gives files to the
/// caller, as a local create by that user would), then sets exactly the permission bits
/// `perm` (the client applied its own umask; the server's must not apply twice). In that
/// order, because a chown clears set-id bits. `perm` has been through
/// [`Policy::client_perm`]; a directory keeps the `S_ISGID` it inherited from a setgid
/// parent, and a symlink only gets its owner.
///
/// # Errors
/// What `statx`, `chown` or `chmod` report.
pub fn finish_create(
    proc_fd: BorrowedFd<'_>,
    fd: BorrowedFd<'_>,
    perm: u32,
    owner: Option<(Option<u32>, Option<u32>)>,
) -> ExportResult<()> {
    let st = sys::stat(fd)?;
    let mut mode = u32::from(st.stx_mode);
    // Only what differs: a file made by a root server for root needs no chown.
    let chown = match owner {
        Some((uid, gid)) => {
            let uid = uid.filter(|&u| u != st.stx_uid);
            let gid = gid.filter(|&g| g != st.stx_gid);
            if uid.is_some() || gid.is_some() {
                sys::chown(fd, uid, gid)?;
                true
            } else {
                false
            }
        }
        None => false,
    };
    if mode & libc::S_IFMT == libc::S_IFLNK {
        return Ok(());
    }
    if chown {
        mode = u32::from(sys::stat(fd)?.stx_mode);
    }
    let inherited = if mode & libc::S_IFMT == libc::S_IFDIR {
        mode & libc::S_ISGID
    } else {
        0
    };
    let wanted = (perm & 0o7777) | inherited;
    if mode & 0o7777 != wanted {
        sys::chmod(proc_fd, fd, wanted)?;
    }
    Ok(())
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

    #[test]
    fn setid_bits_are_kept_never_added() {
        let p = Policy::default();
        assert_eq!(p.client_perm(0o6755), 0o755);
        assert_eq!(p.setattr_perm(0o2775, libc::S_IFDIR | 0o2755), 0o2775);
        assert_eq!(p.setattr_perm(0o4755, libc::S_IFREG | 0o755), 0o755);
        let allow = Policy {
            allow_setuid: true,
            ..p
        };
        assert_eq!(allow.client_perm(0o6755), 0o6755);
        assert!(p.check_device(libc::S_IFCHR).is_err());
        assert!(p.check_device(libc::S_IFIFO).is_ok());
    }
}
