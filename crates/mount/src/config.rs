//! What a mount is asked to be: cache policy, request size, identity and access.

use crate::known::cache::{CacheMode, NegativeTtl};

/// Bytes in a page, as FUSE counts request sizes.
pub(crate) const PAGE: u32 = 4096;

/// The settings of one mount. `Default` is the recommended configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountConfig {
    /// How much the kernel may cache (see [`CacheMode`]).
    pub cache: CacheMode,
    /// How long a missing name is remembered (see [`NegativeTtl`]).
    pub negative_ttl: NegativeTtl,
    /// Pages per FUSE request. `None`: as many as the kernel allows (`FUSE_MAX_PAGES`, up to
    /// the sysctl `fs.fuse.max_pages_limit`, 256 by default: 1 MiB), within `max_write`.
    /// `Some(32)` gives the 128 KiB requests of a FUSE mount that does not negotiate
    /// `FUSE_MAX_PAGES`. It bounds writes, reads and readahead alike.
    pub max_pages: Option<u32>,
    /// The largest write the kernel may send in one request (default 1 MiB). Also bounded
    /// by `max_pages` and by the 9P connection's largest I/O (msize - 24), rounded down to
    /// whole pages, so one FUSE write is always one Twrite.
    pub max_write: u32,
    /// Mount read-only (`MS_RDONLY`) and refuse every change.
    pub read_only: bool,
    /// Mount `noexec`: the kernel refuses to execute programs from it.
    pub no_exec: bool,
    /// Mount `noatime`: the kernel does not update access times.
    pub no_atime: bool,
    /// When changes reach the server (see [`ChangeMode`]).
    pub changes: ChangeMode,
    /// Send every open and close of a file to the mount, and POSIX locks to the server.
    /// Otherwise (the default), in `auto` mode, the kernel opens and closes
    /// files without asking while change events are followed (see
    /// `crate::known::handle::Unannounced`), and keeps POSIX locks itself.
    pub send_opens: bool,
    /// Let users other than the one mounting use the mount (FUSE `allow_other`). The
    /// kernel then checks every caller's permissions against the modes and owners shown
    /// (`default_permissions`) before the server checks its own.
    pub allow_other: bool,
    /// Have the kernel check each caller against the modes and owners shown (FUSE
    /// `default_permissions`) on a private mount too; always so with `allow_other` and
    /// with [`ChangeMode::Behind`].
    pub default_permissions: bool,
    /// Report every file as owned by this uid (as sshfs's `idmap=user`). Ownership on the
    /// server is unchanged; `chown` through the mount still sets the server's owner.
    pub uid: Option<u32>,
    /// Report every file as belonging to this gid.
    pub gid: Option<u32>,
    /// FUSE worker threads, each reading its own cloned `/dev/fuse` fd (default 4). Reads,
    /// writes and attribute requests do not hold a worker while the server answers.
    pub threads: usize,
    /// The "device" shown in /proc/mounts (for example `host:/src`).
    pub fs_name: String,
    /// Directory entries kept in all directory replicas at most (see `known/replica/`; 0: no
    /// replicas). Replicas are used only while change events are followed, with a server
    /// that speaks the crossfs extension, and not in `never` mode.
    pub replica_entries: usize,
    /// FUSE over io_uring where the kernel offers it (`enable_uring`, Linux 6.14+): a ring
    /// and a thread per CPU queue beside the `/dev/fuse` workers, which serve alone when
    /// it is off (the default: docs/bench.md has why), not offered, or refused.
    pub io_uring: bool,
    /// How long after each FUSE request the mount's CPUs are kept from halting, by a
    /// spinning thread each at `SCHED_IDLE` (`session/idle_poll.rs`); `None`: never.
    pub idle_poll: Option<std::time::Duration>,
    /// A READ's data is spliced from the 9P socket into `/dev/fuse` where the transport
    /// and the kernel allow it (default), rather than read into the mount's memory and
    /// written from there (`crossfs stats`: `data`).
    pub splice_reads: bool,
    /// The caller will connect change events once the file system is mounted
    /// ([`crate::MountHandle::follow_changes`], or
    /// [`crate::MountHandle::no_change_events`] if it cannot): until then a sync waits for
    /// them rather than failing for want of a feed.
    pub change_events_coming: bool,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            cache: CacheMode::default(),
            negative_ttl: NegativeTtl::default(),
            max_pages: None,
            max_write: 1 << 20,
            read_only: false,
            no_exec: false,
            no_atime: false,
            send_opens: false,
            changes: ChangeMode::Exact,
            allow_other: false,
            default_permissions: false,
            uid: None,
            gid: None,
            threads: 4,
            fs_name: "crossfs".to_string(),
            replica_entries: crate::known::replica::DEFAULT_REPLICA_ENTRIES,
            io_uring: false,
            idle_poll: None,
            change_events_coming: false,
            splice_reads: true,
        }
    }
}

/// When the mount's changes reach the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChangeMode {
    /// Every change waits for the server's answer (POSIX on a shared directory).
    #[default]
    Exact,
    /// A setattr, a small write or a create the mount can answer exactly from what it
    /// holds is answered at once and sent behind, in order; errors come at the next close or fsync
    /// of the file (see `crate::behind` for the whole contract). Needs the crossfs
    /// extension and change events; otherwise it is the exact mode.
    Behind,
}

/// A change mode name that is not `exact` or `behind`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown change mode {0:?} (expected exact or behind)")]
pub struct UnknownChangeMode(pub String);

impl std::str::FromStr for ChangeMode {
    type Err = UnknownChangeMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "exact" => Ok(ChangeMode::Exact),
            "behind" => Ok(ChangeMode::Behind),
            other => Err(UnknownChangeMode(other.to_string())),
        }
    }
}

/// The request sizes a mount settles on, from its config, the kernel's limit and the 9P
/// connection's largest I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RequestSize {
    /// Pages per FUSE request, as told to the kernel.
    pub max_pages: u32,
    /// Bytes per FUSE write (a whole number of pages).
    pub max_write: u32,
    /// Bytes of readahead to configure (the bdi's `read_ahead_kb` * 1024).
    pub readahead: u32,
    /// Bytes per Tread/Twrite: reads larger than this are split.
    pub max_io: u32,
}

impl RequestSize {
    /// `kernel_limit` is `fs.fuse.max_pages_limit`; `max_io` is the client's msize - 24.
    pub(crate) fn new(config: &MountConfig, kernel_limit: u32, max_io: u32) -> Self {
        let pages_wanted = config
            .max_pages
            .unwrap_or(kernel_limit)
            .clamp(1, kernel_limit);
        // Whole pages only: a write of msize-24 bytes would leave every following request
        // misaligned with the page cache.
        let io_pages = (max_io / PAGE).max(1);
        let write_pages = (config.max_write / PAGE).max(1);
        let pages = pages_wanted.min(write_pages).min(io_pages);
        // Reads may be as large as the kernel's request size when max_pages is not set by
        // the user, splitting only if max_io is smaller; with max_pages set, reads too stay
        // within it.
        let read_cap = match config.max_pages {
            Some(p) => (p.max(1) * PAGE).min(max_io),
            None => max_io,
        };
        RequestSize {
            max_pages: pages,
            max_write: pages * PAGE,
            readahead: pages * PAGE,
            max_io: read_cap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_mib_when_everything_allows_it() {
        let s = RequestSize::new(&MountConfig::default(), 256, (1 << 20) + 4096 - 24);
        assert_eq!(s.max_pages, 256);
        assert_eq!(s.max_write, 1 << 20);
        assert_eq!(s.readahead, 1 << 20);
    }

    #[test]
    fn msize_rounds_down_to_pages() {
        // msize 1 MiB: max_io is 24 bytes short of 1 MiB, so 255 pages.
        let s = RequestSize::new(&MountConfig::default(), 256, (1 << 20) - 24);
        assert_eq!(s.max_pages, 255);
        assert_eq!(s.max_write, 255 * 4096);
        assert_eq!(s.max_io, (1 << 20) - 24);
        // diod: 64 KiB msize.
        let s = RequestSize::new(&MountConfig::default(), 256, 65536 - 24);
        assert_eq!(s.max_write, 15 * 4096);
    }

    #[test]
    fn max_pages_bounds_everything() {
        let config = MountConfig {
            max_pages: Some(32),
            ..MountConfig::default()
        };
        let s = RequestSize::new(&config, 256, 4 << 20);
        assert_eq!(
            (s.max_pages, s.max_write, s.readahead, s.max_io),
            (32, 128 << 10, 128 << 10, 128 << 10)
        );
        // A kernel limit below the request wins.
        let config = MountConfig {
            max_pages: Some(1024),
            max_write: 16 << 20,
            ..MountConfig::default()
        };
        assert_eq!(RequestSize::new(&config, 256, 16 << 20).max_pages, 256);
    }
}
