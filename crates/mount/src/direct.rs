//! Mounting with mount(2) here, as root (or anyone with CAP_SYS_ADMIN) may, and handing the
//! session (`crate::session`) only the `/dev/fuse` descriptor.
//!
//! Why mount(2) here: the type is `fuse.crossfs` in the table, and the session never
//! unmounts a mount *point* (which takes whichever mount is last there: with two mounts at
//! one point, the one over this one); `MountHandle` unmounts its own mount, found by device
//! number.
//!
//! Without the privilege (EPERM), the caller falls back to a mount through fusermount3,
//! which a user may run (`crate::session::mount_with_fusermount`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::mount::MountFlags;

use crate::config::MountConfig;

/// What the mount asks of the kernel beyond the source and the type.
pub(crate) struct Request<'a> {
    pub config: &'a MountConfig,
    /// FUSE `default_permissions`: the kernel checks each caller against the modes shown.
    pub default_permissions: bool,
    /// FUSE `max_read`: the largest READ the kernel sends, if smaller than its request size.
    pub max_read: Option<u32>,
    /// FUSE `allow_other`: users other than the one mounting may use it.
    pub allow_other: bool,
}

/// Mounts a FUSE file system of type `fuse.crossfs` at `mountpoint`, whose source is
/// `config.fs_name`, and returns its `/dev/fuse` descriptor; `None` if this process may
/// not open `/dev/fuse` or not mount (EACCES, EPERM).
///
/// # Errors
/// Opening `/dev/fuse`, or mount(2) failing otherwise than with EPERM.
pub(crate) fn mount(mountpoint: &Path, req: &Request<'_>) -> io::Result<Option<OwnedFd>> {
    let root_mode = rustix::fs::stat(mountpoint)?.st_mode;
    let dev = match rustix::fs::open("/dev/fuse", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()) {
        Ok(dev) => dev,
        // fusermount3, set-user-ID root, opens it for users who may not.
        Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut data = format!(
        "fd={},rootmode={root_mode:o},user_id={},group_id={}",
        dev.as_raw_fd(),
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    );
    if req.default_permissions {
        data.push_str(",default_permissions");
    }
    if req.allow_other {
        data.push_str(",allow_other");
    }
    if let Some(n) = req.max_read {
        data.push_str(&format!(",max_read={n}"));
    }
    let mut flags = MountFlags::NOSUID | MountFlags::NODEV;
    let config = req.config;
    for (on, flag) in [
        (config.read_only, MountFlags::RDONLY),
        (config.no_exec, MountFlags::NOEXEC),
        (config.no_atime, MountFlags::NOATIME),
    ] {
        if on {
            flags |= flag;
        }
    }
    let data = std::ffi::CString::new(data).map_err(io::Error::other)?;
    match rustix::mount::mount(
        config.fs_name.as_str(),
        mountpoint,
        crate::table::FSTYPE,
        flags,
        Some(data.as_c_str()),
    ) {
        Ok(()) => Ok(Some(dev)),
        Err(rustix::io::Errno::PERM) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
