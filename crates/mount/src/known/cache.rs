//! Kernel cache policy: what the kernel may remember, and for how long.
//!
//! The FUSE kernel module caches names (dentries), attributes, file data (page cache), symlink
//! targets and negative lookups on its own; this module decides the timeouts and flags that
//! govern those caches. The modes follow virtiofsd's `--cache` option so the trade-offs read
//! the same.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::session::FileAttr;

/// "Long": a day, virtiofsd's timeout for its `metadata` and `always` modes.
const LONG: Duration = Duration::from_secs(24 * 60 * 60);
/// The `auto` timeout, as in virtiofsd.
const AUTO: Duration = Duration::from_secs(1);
/// How long `auto` trusts a missing name (see [`NegativeTtl::ByCacheMode`]).
const AUTO_NEGATIVE: Duration = Duration::from_secs(10);
/// How long `never` lets the kernel trust a name that leads to a directory (see
/// [`CacheMode::Never`]).
const NEVER_DIR_ENTRY: Duration = Duration::from_millis(10);
/// In `never` mode, how old the attributes a LOOKUP fetched may be and still answer the
/// GETATTR the same thread sends next (see [`CacheMode::Never`]).
pub(crate) const NEVER_LOOKUP_ATTR_REUSE: Duration = Duration::from_millis(5);
/// What the kernel is told to keep names, attributes and missing names for while change
/// events are followed (in every mode but `never`): the events invalidate what changes.
pub(crate) const FOLLOWED: Duration = LONG;
/// "Forever" as far as the kernel is concerned: a century.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// How much the kernel may cache, and so how fresh what a program sees must be.
///
/// | mode       | names & attributes | missing names | file data                             |
/// |------------|--------------------|---------------|---------------------------------------|
/// | `never`    | not cached (*)     | not cached    | not cached (every open is `direct_io`)|
/// | `metadata` | cached for 24 h    | 24 h          | not cached (`direct_io`)              |
/// | `auto`     | cached for 1 s     | 10 s          | cached while mtime and size unchanged |
/// | `always`   | cached for 24 h    | 24 h          | cached, kept across opens, writeback  |
///
/// (*) `never` promises that every system call that looks at a file asks the server about
/// that file during the call: a stat's attributes, an open's name, a read's data. Two
/// exceptions keep a path walk at one round trip instead of one per component: names that
/// lead to *directories* are trusted for 10 ms (a directory renamed or replaced on the host
/// may be followed under its old name for that long), and the GETATTR the kernel sends right
/// after a LOOKUP (the two halves of one `stat`) is answered with the attributes that LOOKUP
/// fetched, if it is the next request of the same thread and comes within 5 ms.
///
/// Missing names follow `--negative-ttl` when set (see [`NegativeTtl`]).
///
/// **While change events are followed** (the mount's default with a crossfs server), every
/// mode but `never` lets the kernel keep names, missing names (unless `--negative-ttl` is
/// set), attributes and directory listings for 24 hours: each host change invalidates what
/// it touches as its event arrives, so after `crossfs sync` nothing older than the export
/// is shown. The timeouts in the table are those without events (a server without them,
/// `--no-events`, or while the event stream is lost).
///
/// Changes made through this mount are always seen at once by this mount: the kernel
/// updates its own caches for operations it performs.
///
/// A directory listing may carry attributes the mount fetched earlier instead of asking
/// again: never past the attribute timeout, unless the mount follows the server's change
/// events, in which case until a change event or a change through the mount names the file. The modes differ in how long a change
/// made elsewhere (on the host, or through another mount) may go unseen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Nothing is cached beyond the call that fetched it (see the exceptions above): every
    /// stat, lookup and read asks the server. Opens are `direct_io`; shared mmap still
    /// works (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6+: the mapped pages are cached while
    /// mapped; older kernels refuse it with ENODEV).
    Never,
    /// Names and attributes are trusted for 24 hours; data is always read from the server.
    /// For trees that only this mount changes, with files others may rewrite.
    Metadata,
    /// Names and attributes are trusted for 1 second; an open keeps the page cache only if
    /// the file's mtime and size are what they were at the previous open, and the kernel
    /// drops cached pages when it sees mtime change (`FUSE_AUTO_INVAL_DATA`).
    #[default]
    Auto,
    /// Everything is trusted for 24 hours, cached pages are kept across opens, and writes
    /// go to the page cache first (`FUSE_WRITEBACK_CACHE`). Only for trees nobody else
    /// changes while mounted.
    Always,
}

impl CacheMode {
    /// How long the kernel may trust a name -> inode mapping.
    pub fn entry_ttl(self) -> Duration {
        match self {
            CacheMode::Never => Duration::ZERO,
            CacheMode::Auto => AUTO,
            CacheMode::Metadata | CacheMode::Always => LONG,
        }
    }

    /// How long the kernel may trust a name -> directory mapping: as [`CacheMode::entry_ttl`],
    /// except in `never` mode (see the table above).
    pub fn dir_entry_ttl(self) -> Duration {
        match self {
            CacheMode::Never => NEVER_DIR_ENTRY,
            other => other.entry_ttl(),
        }
    }

    /// How long the kernel may trust that a name is missing, unless `--negative-ttl` says.
    pub fn negative_ttl(self) -> NegativeTtl {
        match self {
            CacheMode::Never => NegativeTtl::Off,
            CacheMode::Auto => NegativeTtl::For(AUTO_NEGATIVE),
            CacheMode::Metadata | CacheMode::Always => NegativeTtl::For(LONG),
        }
    }

    /// How long the kernel may trust an inode's attributes.
    pub fn attr_ttl(self) -> Duration {
        self.entry_ttl()
    }

    /// Whether file opens bypass the page cache.
    pub fn direct_io(self) -> bool {
        matches!(self, CacheMode::Never | CacheMode::Metadata)
    }

    /// Whether readdir should also return attributes (one round trip fills many lookups).
    /// Pointless when attributes expire at once.
    pub fn readdirplus(self) -> bool {
        self != CacheMode::Never
    }

    /// Whether the kernel may hold dirty pages and write them back later.
    pub fn writeback(self) -> bool {
        self == CacheMode::Always
    }

    /// The name used on the command line and in stats.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Never => "never",
            CacheMode::Metadata => "metadata",
            CacheMode::Auto => "auto",
            CacheMode::Always => "always",
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `never` mode: the attributes each thread's latest LOOKUP fetched, kept for the GETATTR
/// the kernel sends right after it within the same `stat` (see [`CacheMode::Never`]).
#[derive(Default)]
pub(crate) struct RecentLookups {
    by_thread: Mutex<HashMap<u32, Recent>>,
}

struct Recent {
    ino: u64,
    attr: FileAttr,
    at: Instant,
}

/// Threads remembered at most; beyond, stale entries (of threads that exited right after a
/// lookup) are dropped.
const RECENT_THREADS: usize = 1024;

impl RecentLookups {
    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Recent>> {
        crate::sync::lock(&self.by_thread)
    }

    /// Thread `pid` has just looked up `ino` and been told `attr`.
    pub(crate) fn record(&self, pid: u32, ino: u64, attr: FileAttr) {
        let mut map = self.lock();
        if map.len() >= RECENT_THREADS {
            map.retain(|_, r| r.at.elapsed() < NEVER_LOOKUP_ATTR_REUSE);
        }
        let at = Instant::now();
        map.insert(pid, Recent { ino, attr, at });
    }

    /// The attributes thread `pid`'s latest request (a LOOKUP of `ino`, at most
    /// [`NEVER_LOOKUP_ATTR_REUSE`] ago) fetched; forgotten either way.
    pub(crate) fn take(&self, pid: u32, ino: u64) -> Option<FileAttr> {
        let recent = self.lock().remove(&pid)?;
        (recent.ino == ino && recent.at.elapsed() < NEVER_LOOKUP_ATTR_REUSE).then_some(recent.attr)
    }

    /// Thread `pid` sent another request: its latest LOOKUP is no longer the last.
    pub(crate) fn clear(&self, pid: u32) {
        let mut map = self.lock();
        if !map.is_empty() {
            map.remove(&pid);
        }
    }
}

/// A cache mode name that is not one of never, metadata, auto, always.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cache mode {0:?} (expected never, metadata, auto or always)")]
pub struct UnknownCacheMode(pub String);

impl FromStr for CacheMode {
    type Err = UnknownCacheMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "never" | "none" => Ok(CacheMode::Never),
            "metadata" => Ok(CacheMode::Metadata),
            "auto" => Ok(CacheMode::Auto),
            "always" => Ok(CacheMode::Always),
            other => Err(UnknownCacheMode(other.to_string())),
        }
    }
}

/// How long the kernel may remember that a name does not exist.
///
/// A missing name is answered with an entry of inode 0 and this timeout; the kernel then
/// answers further lookups of that name itself (no FUSE request, no 9P message) until the
/// timeout passes or the name is created through this mount. A name created on the host is
/// therefore invisible through this mount for up to the timeout, if this mount looked for it
/// (and found it missing) shortly before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NegativeTtl {
    /// As the cache mode decides ([`CacheMode::negative_ttl`]): off in `never`, 10 s in
    /// `auto`, 24 h in `metadata` and `always`.
    ///
    /// `auto` trusts a missing name longer than an existing one (1 s) because the two
    /// differ in cost and in how they change: compilers probe the same missing headers in
    /// every -I directory for every translation unit, seconds apart, so a 1 s timeout
    /// expires between two probes of a name and saves nothing; while a name appearing on
    /// the host that this mount probed in the last seconds is rare.
    #[default]
    ByCacheMode,
    /// Answer ENOENT: every lookup of a missing name costs a round trip (a Twalk).
    Off,
    /// Remember a missing name this long.
    For(Duration),
    /// Remember a missing name until it is created through this mount or the kernel
    /// reclaims the dentry.
    Forever,
}

/// A negative-timeout in milliseconds below -1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("negative timeout {0} ms: expected -1 (forever), 0 (off) or a positive number of ms")]
pub struct InvalidNegativeTtl(pub i64);

impl NegativeTtl {
    /// From milliseconds as given on the command line: 0 = off, -1 = forever.
    ///
    /// # Errors
    /// [`InvalidNegativeTtl`] for values below -1.
    pub fn from_millis(ms: i64) -> Result<Self, InvalidNegativeTtl> {
        match ms {
            0 => Ok(NegativeTtl::Off),
            -1 => Ok(NegativeTtl::Forever),
            ms if ms > 0 => Ok(NegativeTtl::For(Duration::from_millis(ms as u64))),
            ms => Err(InvalidNegativeTtl(ms)),
        }
    }

    /// The setting in force under cache mode `mode` ([`NegativeTtl::ByCacheMode`] resolved).
    pub fn in_mode(self, mode: CacheMode) -> NegativeTtl {
        match self {
            NegativeTtl::ByCacheMode => mode.negative_ttl(),
            other => other,
        }
    }

    /// The timeout to give the kernel, or None to answer ENOENT. [`NegativeTtl::ByCacheMode`]
    /// must be resolved first ([`NegativeTtl::in_mode`]); unresolved, it is `auto`'s.
    pub fn timeout(self) -> Option<Duration> {
        match self {
            NegativeTtl::ByCacheMode => CacheMode::Auto.negative_ttl().timeout(),
            NegativeTtl::Off => None,
            NegativeTtl::For(d) if d.is_zero() => None,
            NegativeTtl::For(d) => Some(d),
            NegativeTtl::Forever => Some(FOREVER),
        }
    }

    /// Milliseconds as in [`NegativeTtl::from_millis`], for stats (`auto`'s for an
    /// unresolved [`NegativeTtl::ByCacheMode`]).
    pub fn as_millis(self) -> i64 {
        match self {
            NegativeTtl::ByCacheMode => CacheMode::Auto.negative_ttl().as_millis(),
            NegativeTtl::Off => 0,
            NegativeTtl::For(d) => d.as_millis().min(i64::MAX as u128) as i64,
            NegativeTtl::Forever => -1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_mode_names_round_trip() {
        for m in [
            CacheMode::Never,
            CacheMode::Metadata,
            CacheMode::Auto,
            CacheMode::Always,
        ] {
            assert_eq!(m.as_str().parse::<CacheMode>(), Ok(m));
        }
        assert!("sometimes".parse::<CacheMode>().is_err());
        assert_eq!(CacheMode::default(), CacheMode::Auto);
    }

    #[test]
    fn timeouts_grow_with_the_mode() {
        assert_eq!(CacheMode::Never.entry_ttl(), Duration::ZERO);
        assert_eq!(CacheMode::Auto.attr_ttl(), Duration::from_secs(1));
        assert!(CacheMode::Always.entry_ttl() > CacheMode::Auto.entry_ttl());
        assert!(CacheMode::Never.direct_io() && CacheMode::Metadata.direct_io());
        assert!(!CacheMode::Auto.direct_io() && CacheMode::Always.writeback());
    }

    #[test]
    fn negative_ttl_from_millis() {
        assert_eq!(NegativeTtl::from_millis(0), Ok(NegativeTtl::Off));
        assert_eq!(NegativeTtl::from_millis(-1), Ok(NegativeTtl::Forever));
        assert_eq!(
            NegativeTtl::from_millis(250).unwrap().timeout(),
            Some(Duration::from_millis(250))
        );
        assert!(NegativeTtl::from_millis(-2).is_err());
        assert_eq!(NegativeTtl::Off.timeout(), None);
        assert!(NegativeTtl::Forever.timeout().unwrap() > Duration::from_secs(1 << 30));
        assert_eq!(NegativeTtl::default(), NegativeTtl::ByCacheMode);
    }

    #[test]
    fn negative_ttl_follows_the_cache_mode_unless_set() {
        let by_mode = NegativeTtl::default();
        assert_eq!(by_mode.in_mode(CacheMode::Never).timeout(), None);
        assert_eq!(
            by_mode.in_mode(CacheMode::Auto).timeout(),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            by_mode.in_mode(CacheMode::Always).timeout(),
            Some(CacheMode::Always.entry_ttl())
        );
        let set = NegativeTtl::For(Duration::from_millis(250));
        assert_eq!(set.in_mode(CacheMode::Never), set);
        assert_eq!(
            NegativeTtl::Off.in_mode(CacheMode::Always),
            NegativeTtl::Off
        );
    }

    #[test]
    fn never_trusts_directory_names_briefly_and_files_not_at_all() {
        assert_eq!(CacheMode::Never.entry_ttl(), Duration::ZERO);
        assert!(CacheMode::Never.dir_entry_ttl() <= Duration::from_millis(10));
        assert_eq!(CacheMode::Auto.dir_entry_ttl(), CacheMode::Auto.entry_ttl());
    }
}
