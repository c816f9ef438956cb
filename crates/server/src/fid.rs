//! The fid table of one connection, and what a fid holds.
//!
//! A file fid owns an `O_PATH|O_NOFOLLOW` handle on its inode (shared with clones), the
//! location it was reached by (parent directory handle and name, for Trename and Tremove), and
//! once opened, an open descriptor. Handlers take an `Arc` of the fid, so a Tclunk racing a
//! Tread only drops the table's reference; the read finishes on its own.

use std::hash::RandomState;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use crossfs_wire::{Fid, Qid};

use crossfs_export::budget::{ByteCharge, OpenFd};
use crossfs_export::handles::{PathHandle, PinnedFd};
use crossfs_export::memory::arc_bytes;

use crate::error::{OpError, OpResult};

/// Where a fid's file was found: its directory and its name there.
#[derive(Clone)]
pub(crate) struct Location {
    /// `O_PATH` handle on the parent directory.
    pub parent: Arc<PathHandle>,
    /// The name in that directory.
    pub name: Vec<u8>,
}

/// An open file behind a fid (after Tlopen or Tlcreate).
pub(crate) struct OpenFile {
    /// The open descriptor.
    pub fd: OpenFd,
    /// Serialises readdir, which moves the descriptor's position.
    pub dir_cursor: Mutex<()>,
    /// A regular file opened without `O_DIRECT`: reads may try the page cache alone (with
    /// `O_DIRECT` even a "no wait" read waits for the disk).
    pub cached_reads: bool,
    /// A regular file opened without `O_DIRECT`, `O_SYNC` or `O_DSYNC`: a small write only
    /// copies into the page cache (see `crate::ops::runs_inline`).
    pub quick_writes: bool,
    /// A regular file open for writing without `O_DIRECT` or `O_APPEND` (which splice
    /// refuses): a large write's payload may be spliced into it (`crate::piped`).
    pub spliced_writes: bool,
}

impl OpenFile {
    /// An open descriptor on an inode of type `kind` (`S_IFMT` bits), opened with `flags`.
    pub(crate) fn new(fd: OpenFd, kind: u32, flags: rustix::fs::OFlags) -> Self {
        use rustix::fs::OFlags;
        let cached_reads = kind == libc::S_IFREG && !flags.contains(OFlags::DIRECT);
        OpenFile {
            fd,
            dir_cursor: Mutex::new(()),
            cached_reads,
            quick_writes: cached_reads && !flags.intersects(OFlags::SYNC | OFlags::DSYNC),
            spliced_writes: cached_reads
                && flags.intersects(OFlags::WRONLY | OFlags::RDWR)
                && !flags.contains(OFlags::APPEND),
        }
    }
}

/// A fid that names a file.
pub(crate) struct FileFid {
    /// `O_PATH|O_NOFOLLOW` handle on the inode.
    pub handle: Arc<PathHandle>,
    /// The qid when the fid was made (type and path of an inode never change).
    pub qid: Qid,
    /// The device the inode lies on, for readdir qids.
    pub dev: u64,
    /// The inode's file type (the `S_IFMT` bits of its mode), which never changes.
    pub kind: u32,
    /// Where it was found; `None` for the export root.
    pub location: Mutex<Option<Location>>,
    /// Set once by Tlopen.
    pub open: OnceLock<OpenFile>,
    /// The attach's numeric user, inherited through walks (see the crate's Identity section).
    pub n_uname: u32,
}

impl FileFid {
    /// A fid for a handle that is not open, on device `dev`, of type `kind` (see
    /// [`crate::server::dev_and_kind`]).
    pub(crate) fn new(
        handle: Arc<PathHandle>,
        qid: Qid,
        (dev, kind): (u64, u32),
        location: Option<Location>,
        n_uname: u32,
    ) -> Self {
        FileFid {
            handle,
            qid,
            dev,
            kind,
            location: Mutex::new(location),
            open: OnceLock::new(),
            n_uname,
        }
    }

    /// The `O_PATH` descriptor, pinned for one operation (the export's handle cache may
    /// have closed it since the last, and opens it again).
    pub(crate) fn fd(&self) -> OpResult<PinnedFd> {
        Ok(self.handle.fd()?)
    }

    /// The open file, or `EBADF` when the fid was never opened.
    pub(crate) fn opened(&self) -> OpResult<&OpenFile> {
        self.open.get().ok_or(OpError::Os(rustix::io::Errno::BADF))
    }

    /// Where the fid was found.
    pub(crate) fn location(&self) -> Option<Location> {
        lock(&self.location).clone()
    }

    /// Records a new location after a rename.
    pub(crate) fn set_location(&self, loc: Location) {
        *lock(&self.location) = Some(loc);
    }
}

/// An extended attribute value (or name list) held by an xattr fid, charged to its
/// connection's budget for such values (see [`crossfs_export::budget`]).
pub(crate) struct XattrValue {
    /// The bytes; their capacity is what is charged.
    pub bytes: Vec<u8>,
    /// The charge, given back when the fid goes.
    pub charge: ByteCharge,
}

/// A fid made by Txattrcreate: collects the value through Twrite until Tclunk sets it.
pub(crate) struct XattrWrite {
    /// The file whose attribute is set.
    pub handle: Arc<PathHandle>,
    /// The attribute's name.
    pub name: std::ffi::CString,
    /// The size announced by Txattrcreate.
    pub size: usize,
    /// `XATTR_CREATE`/`XATTR_REPLACE`.
    pub flags: u32,
    /// The value written so far.
    pub value: Mutex<XattrValue>,
}

/// What a fid stands for.
pub(crate) enum FidState {
    /// A file, directory, symlink or special file.
    File(FileFid),
    /// The value (or name list) fetched by Txattrwalk, read with Tread.
    XattrRead(XattrValue),
    /// An attribute being written (Txattrcreate).
    XattrWrite(XattrWrite),
    /// The change-event stream (a Tattach with [`crate::EVENTS_ANAME`]).
    Events(crossfs_events::Subscriber),
    /// An auth fid (Tauth), to which the client writes the token.
    Auth(crate::ops::AuthFid),
}

impl FidState {
    /// The file this fid names, or `EBADF` for an xattr fid.
    pub(crate) fn file(&self) -> OpResult<&FileFid> {
        match self {
            FidState::File(f) => Ok(f),
            _ => Err(OpError::Os(rustix::io::Errno::BADF)),
        }
    }
}

impl FidState {
    /// Bytes this fid holds of its own beyond its `Arc` (see [`FidTable::memory`]): the
    /// name it was found by, an attribute's name, what an auth fid was sent; an event
    /// stream's queue is counted apart. Extended attribute values are counted by the
    /// connection's budget for them.
    fn heap_bytes(&self) -> usize {
        match self {
            FidState::File(f) => lock(&f.location)
                .as_ref()
                .map_or(0, |loc| loc.name.capacity()),
            FidState::XattrRead(_) => 0,
            FidState::XattrWrite(x) => x.name.as_bytes_with_nul().len(),
            FidState::Events(_) => 0,
            FidState::Auth(a) => lock(&a.written).capacity(),
        }
    }
}

/// What a fid table holds, in bytes (see [`FidTable::memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FidMemory {
    /// The table and its fids.
    pub fids: usize,
    /// The queues of the event streams bound.
    pub event_queues: usize,
}

/// The fids of one connection, bounded.
pub(crate) struct FidTable {
    /// hashbrown's map rather than std's (the same table, with std's hasher) for
    /// `allocation_size`: the statistics count the table's real size.
    fids: Mutex<hashbrown::HashMap<u32, Arc<FidState>, RandomState>>,
    max: usize,
    /// How many are bound, for the statistics (written under the lock).
    count: AtomicUsize,
}

impl FidTable {
    /// An empty table holding at most `max` fids.
    pub(crate) fn new(max: usize) -> Self {
        FidTable {
            fids: Mutex::default(),
            max,
            count: AtomicUsize::new(0),
        }
    }

    /// Fids bound now (without taking the table's lock).
    pub(crate) fn bound(&self) -> usize {
        self.count.load(Relaxed)
    }

    /// Bytes the table holds: its buckets, each fid's `Arc` allocation and what the fid
    /// holds of its own ([`FidState::heap_bytes`]), and apart, the queues of its event
    /// streams. Not counted: the handles fids hold on their files (shared between fids,
    /// counted once by the export's handle cache) and extended attribute values (counted by
    /// the connection's budget for them). Takes the table's lock for one pass over it.
    pub(crate) fn memory(&self) -> FidMemory {
        let fids = lock(&self.fids);
        let mut memory = FidMemory {
            fids: fids.allocation_size() + fids.len() * arc_bytes::<FidState>(),
            event_queues: 0,
        };
        for state in fids.values() {
            memory.fids += state.heap_bytes();
            if let FidState::Events(sub) = &**state {
                memory.event_queues += sub.memory_bytes();
            }
        }
        memory
    }

    /// The fid's state, or `EBADF`.
    pub(crate) fn get(&self, fid: Fid) -> OpResult<Arc<FidState>> {
        lock(&self.fids)
            .get(&fid.0)
            .cloned()
            .ok_or(OpError::UnknownFid(fid))
    }

    /// Whether `fid` is bound.
    pub(crate) fn contains(&self, fid: Fid) -> bool {
        lock(&self.fids).contains_key(&fid.0)
    }

    /// Binds a fid that must be free; `EMFILE` past the limit.
    pub(crate) fn insert_new(&self, fid: Fid, state: FidState) -> OpResult<()> {
        let mut fids = lock(&self.fids);
        if fids.contains_key(&fid.0) {
            return Err(OpError::FidInUse(fid));
        }
        if fids.len() >= self.max {
            return Err(OpError::TooManyFids);
        }
        fids.insert(fid.0, Arc::new(state));
        self.count.store(fids.len(), Relaxed);
        Ok(())
    }

    /// Rebinds a fid that is bound (a walk onto itself, Tlcreate, Txattrcreate).
    pub(crate) fn replace(&self, fid: Fid, state: FidState) -> OpResult<()> {
        match lock(&self.fids).get_mut(&fid.0) {
            Some(slot) => {
                *slot = Arc::new(state);
                Ok(())
            }
            None => Err(OpError::UnknownFid(fid)),
        }
    }

    /// Unbinds a fid, returning what it held.
    pub(crate) fn remove(&self, fid: Fid) -> OpResult<Arc<FidState>> {
        let mut fids = lock(&self.fids);
        let state = fids.remove(&fid.0).ok_or(OpError::UnknownFid(fid))?;
        self.count.store(fids.len(), Relaxed);
        Ok(state)
    }

    /// Unbinds every fid (Tversion, end of connection).
    pub(crate) fn clear(&self) {
        let old = {
            let mut fids = lock(&self.fids);
            self.count.store(0, Relaxed);
            std::mem::take(&mut *fids)
        };
        // Dropped outside the lock: closing thousands of descriptors takes a while.
        drop(old);
    }

    /// Event streams bound.
    pub(crate) fn event_streams(&self) -> usize {
        lock(&self.fids)
            .values()
            .filter(|s| matches!(***s, FidState::Events(_)))
            .count()
    }

    /// Ends every event stream's subscription, so long-poll reads parked on workers return
    /// at once (the connection is closing).
    pub(crate) fn close_event_streams(&self) {
        for state in lock(&self.fids).values() {
            if let FidState::Events(sub) = &**state {
                sub.close();
            }
        }
    }

    /// Fids bound.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.fids).len()
    }
}

pub(crate) use crossfs_export::lock;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use crossfs_export::memory::counting::held_by_this_thread;
    use crossfs_export::memory::counting::CountingAllocator;

    /// Counts what this crate's tests allocate, for the memory figures to be checked against.
    #[global_allocator]
    static COUNTING: CountingAllocator = CountingAllocator;

    #[test]
    fn table_memory_is_what_was_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let export =
            crossfs_export::Export::open(dir.path(), Default::default(), Some(64)).unwrap();
        let budget = crossfs_export::budget::ByteBudget::new(1 << 20);
        let t = FidTable::new(100_000);
        let root = export.root.clone();
        let (base, empty) = (held_by_this_thread(), t.memory());
        assert_eq!(empty, FidMemory::default());
        let check = |what: &str| {
            let counted = t.memory().fids as isize;
            assert_eq!(counted, held_by_this_thread() - base, "{what}");
            counted
        };
        for i in 0..3000u32 {
            let mut name = format!("file{i}").into_bytes();
            name.reserve(i as usize % 7);
            let location = Location {
                parent: root.clone(),
                name,
            };
            let qid = crossfs_wire::Qid::default();
            let fid = FileFid::new(root.clone(), qid, (0, 0), Some(location), 0);
            t.insert_new(Fid(i), FidState::File(fid)).unwrap();
        }
        for i in 3000..3100u32 {
            let write = XattrWrite {
                handle: root.clone(),
                name: std::ffi::CString::new(format!("user.attr{i}")).unwrap(),
                size: 10,
                flags: 0,
                value: Mutex::new(XattrValue {
                    bytes: Vec::new(),
                    charge: budget.empty(),
                }),
            };
            t.insert_new(Fid(i), FidState::XattrWrite(write)).unwrap();
            let auth = crate::ops::AuthFid {
                written: Mutex::new(vec![7; i as usize % 100]),
            };
            t.insert_new(Fid(i + 10_000), FidState::Auth(auth)).unwrap();
        }
        let full = check("3,200 fids");
        assert!(full > 3200 * 100, "{full}");
        for i in (0..3000u32).step_by(2) {
            t.remove(Fid(i)).unwrap();
        }
        check("half the files clunked");
        let fid = FileFid::new(root.clone(), Default::default(), (0, 0), None, 0);
        t.replace(Fid(1), FidState::File(fid)).unwrap();
        check("a fid walked onto itself");
        t.clear();
        assert_eq!(check("cleared"), 0);
    }

    #[test]
    fn table_enforces_uniqueness_and_limit() {
        let budget = crossfs_export::budget::ByteBudget::new(0);
        let empty = || {
            FidState::XattrRead(XattrValue {
                bytes: vec![],
                charge: budget.empty(),
            })
        };
        let t = FidTable::new(2);
        assert!(t.insert_new(Fid(1), empty()).is_ok());
        assert!(matches!(
            t.insert_new(Fid(1), empty()),
            Err(OpError::FidInUse(_))
        ));
        assert!(t.insert_new(Fid(2), empty()).is_ok());
        assert!(matches!(
            t.insert_new(Fid(3), empty()),
            Err(OpError::TooManyFids)
        ));
        assert!(t.remove(Fid(1)).is_ok());
        assert!(matches!(t.remove(Fid(1)), Err(OpError::UnknownFid(_))));
        assert_eq!(t.len(), 1);
        assert_eq!(t.bound(), 1);
        t.clear();
        assert_eq!(t.len(), 0);
        assert_eq!(t.bound(), 0);
    }
}
