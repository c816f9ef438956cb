//! What the virtio door offers the guest: how long it may cache what it is told (the
//! cache modes, named as `crossfs mount --cache` and virtiofsd's `--cache` name them), the
//! largest request, extended attribute sizes.

use std::time::Duration;

use crate::fuse::encode::Ttl;

/// How long the guest may keep what it was told (virtiofsd's `--cache`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Nothing: every access asks (entries and attributes time out at once, file data is
    /// read with direct I/O).
    Never,
    /// Names and attributes for a day, file data never cached (direct I/O): for trees
    /// only this guest changes the names of, whose files others may rewrite.
    Metadata,
    /// Names and attributes for a second, page cache dropped at each open.
    #[default]
    Auto,
    /// Names and attributes for a day, page cache kept across opens (writeback caching
    /// only with [`FsConfig::writeback`]).
    Always,
}

/// What the file system offers the guest.
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// Cache policy.
    pub cache: CacheMode,
    /// Largest request, in 4 KiB pages (FUSE_MAX_PAGES); the guest gets at most the request
    /// queue's size less 4.
    pub max_pages: u32,
    /// How long the guest may remember that a name does not exist (a negative entry);
    /// `None`: the cache mode's entry timeout. Never with `--cache never`.
    pub negative_ttl: Option<Duration>,
    /// Largest extended attribute value or list.
    pub max_xattr_size: usize,
    /// Whether extended attributes are served; without, their requests are answered
    /// ENOSYS, which the guest takes as "not supported" and stops asking (virtiofsd's
    /// default without `--xattr`).
    pub xattr: bool,
    /// Whether READDIRPLUS is offered (virtiofsd's `--no-readdirplus` turns it off).
    pub readdirplus: bool,
    /// Whether the guest is told which directories are the roots of other file systems
    /// (another device than their parent's), to mount each as a submount with a device
    /// number of its own (virtiofsd's `--announce-submounts`). Without, the guest sees one
    /// file system, whose inode numbers may then repeat across the host's.
    pub announce_submounts: bool,
    /// Whether writeback caching is offered (virtiofsd's `--writeback`); only with
    /// [`CacheMode::Always`]. The guest kernel then keeps its own times and sizes of
    /// regular files, and, on every close of a file, forgets its block count (Linux's
    /// `fuse_flush`): the next `stat` of each file it closed costs a GETATTR, which it
    /// does not without.
    pub writeback: bool,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            cache: CacheMode::Auto,
            max_pages: 256,
            negative_ttl: None,
            max_xattr_size: 64 * 1024,
            xattr: true,
            readdirplus: true,
            announce_submounts: false,
            writeback: false,
        }
    }
}

impl FsConfig {
    pub(super) fn ttl(&self) -> Ttl {
        match self.cache {
            CacheMode::Never => Ttl::ZERO,
            CacheMode::Auto => Ttl::from(Duration::from_secs(1)),
            CacheMode::Metadata | CacheMode::Always => Ttl::from(Duration::from_secs(86400)),
        }
    }

    pub(super) fn negative_ttl(&self) -> Ttl {
        match (self.cache, self.negative_ttl) {
            (CacheMode::Never, _) => Ttl::ZERO,
            (_, Some(d)) => Ttl::from(d),
            _ => self.ttl(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_keeps_names_as_long_as_it_says() {
        let day = Ttl::from(Duration::from_secs(86400));
        let config = |cache| FsConfig {
            cache,
            ..FsConfig::default()
        };
        assert_eq!(config(CacheMode::Never).ttl(), Ttl::ZERO);
        assert_eq!(config(CacheMode::Never).negative_ttl(), Ttl::ZERO);
        assert_eq!(config(CacheMode::Metadata).ttl(), day);
        assert_eq!(config(CacheMode::Always).negative_ttl(), day);
        assert_eq!(
            config(CacheMode::Auto).ttl(),
            Ttl::from(Duration::from_secs(1))
        );
    }
}
