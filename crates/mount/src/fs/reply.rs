//! The one adapter from a handler's `Result` to the kernel's reply.
//!
//! A request handler returns what the request is answered with, or the errno; [`answer`]
//! sends either. Where the answer comes later (from a completion on the client's reader
//! thread, or a thread that waits), the handler returns [`Later`]: it is handed the reply
//! once nothing before the sending can fail, and answers it from there, through [`answer`]
//! again. What must wait until the kernel has an answer goes after it in a [`Then`].

use std::time::Duration;

use crate::session::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr,
};
use crossfs_wire::Rstatfs;

/// A kernel reply that can carry an errno.
pub(crate) trait Reply {
    fn error(self, e: Errno);
}

macro_rules! replies {
    ($($t:ty),* $(,)?) => {
        $(impl Reply for $t {
            fn error(self, e: Errno) {
                <$t>::error(self, e)
            }
        })*
    };
}

replies!(
    ReplyAttr,
    ReplyCreate,
    ReplyData,
    ReplyDirectory,
    ReplyDirectoryPlus,
    ReplyEmpty,
    ReplyEntry,
    ReplyLock,
    ReplyOpen,
    ReplyStatfs,
    ReplyWrite,
    ReplyXattr,
);

/// What a request of reply type `R` is answered with.
pub(crate) trait Answer<R> {
    fn send(self, reply: R);
}

/// Answers `reply` with `r`: the answer, or the errno.
pub(crate) fn answer<R: Reply, A: Answer<R>>(reply: R, r: Result<A, Errno>) {
    match r {
        Ok(a) => a.send(reply),
        Err(e) => reply.error(e),
    }
}

/// Success with nothing to say (unlink, setxattr, flush, ...).
impl Answer<ReplyEmpty> for () {
    fn send(self, reply: ReplyEmpty) {
        reply.ok();
    }
}

/// A listing's end: its entries were added to the reply as they were read.
impl Answer<ReplyDirectory> for () {
    fn send(self, reply: ReplyDirectory) {
        reply.ok();
    }
}

/// A listing's end: its entries were added to the reply as they were read.
impl Answer<ReplyDirectoryPlus> for () {
    fn send(self, reply: ReplyDirectoryPlus) {
        reply.ok();
    }
}

/// A file looked up or made, and how long the kernel may keep its attributes and its name.
pub(crate) struct Entry {
    pub attr: FileAttr,
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
}

impl Answer<ReplyEntry> for Entry {
    fn send(self, reply: ReplyEntry) {
        reply.entry_with_ttls(&self.attr_ttl, &self.entry_ttl, &self.attr, Generation(0));
    }
}

/// A file's attributes, and how long the kernel may keep them.
pub(crate) struct Attr {
    pub attr: FileAttr,
    pub ttl: Duration,
}

impl Answer<ReplyAttr> for Attr {
    fn send(self, reply: ReplyAttr) {
        reply.attr(&self.ttl, &self.attr);
    }
}

/// Data read (or a link's target).
impl Answer<ReplyData> for Vec<u8> {
    fn send(self, reply: ReplyData) {
        count_read(self.len());
        reply.data(&self);
    }
}

/// Data read (or a link's target), borrowed from where it is kept.
impl Answer<ReplyData> for &[u8] {
    fn send(self, reply: ReplyData) {
        count_read(self.len());
        reply.data(self);
    }
}

/// Counts a READ's payload by the path it took (`crossfs stats`: `data`).
pub(crate) fn count_moved(moved: crate::session::Moved) {
    use std::sync::atomic::Ordering::Relaxed;
    match moved {
        crate::session::Moved::Spliced(n) => {
            crate::stats::DATA_READ_SPLICED.fetch_add(n as u64, Relaxed);
        }
        crate::session::Moved::Copied(n) => count_read(n),
    }
}

/// Counts data sent to the kernel from the mount's memory (`crossfs stats`: `data`).
fn count_read(n: usize) {
    crate::stats::DATA_READ_COPIED.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
}

/// The bytes a write wrote.
pub(crate) struct Written(pub u32);

impl Answer<ReplyWrite> for Written {
    fn send(self, reply: ReplyWrite) {
        reply.written(self.0);
    }
}

impl Answer<ReplyStatfs> for Rstatfs {
    fn send(self, reply: ReplyStatfs) {
        let s = self;
        reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
        );
    }
}

/// A file made and opened: its entry (the attributes kept for as long as the name), and
/// its open handle.
pub(crate) struct Created {
    pub attr: FileAttr,
    /// How long the kernel keeps the name.
    pub ttl: Duration,
    /// How long it keeps the attributes.
    pub attr_ttl: Duration,
    pub opened: Opened,
}

impl Answer<ReplyCreate> for Created {
    fn send(self, reply: ReplyCreate) {
        let Opened(fh, flags) = self.opened;
        reply.created(
            (&self.ttl, &self.attr_ttl),
            &self.attr,
            Generation(0),
            fh,
            flags,
        );
    }
}

/// An open file's handle, and how the kernel is to cache it.
pub(crate) struct Opened(pub FileHandle, pub FopenFlags);

impl Answer<ReplyOpen> for Opened {
    fn send(self, reply: ReplyOpen) {
        reply.opened(self.0, self.1);
    }
}

/// An extended attribute's value (or the name list), or only its length.
pub(crate) enum Xattr {
    Size(u32),
    Data(Vec<u8>),
}

impl Answer<ReplyXattr> for Xattr {
    fn send(self, reply: ReplyXattr) {
        match self {
            Xattr::Size(n) => reply.size(n),
            Xattr::Data(v) => reply.data(&v),
        }
    }
}

/// A POSIX lock that conflicts (`F_UNLCK`: none does).
pub(crate) struct Lock {
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
}

impl Answer<ReplyLock> for Lock {
    fn send(self, reply: ReplyLock) {
        reply.locked(self.start, self.end, self.typ, self.pid);
    }
}

/// An answer sent later: given the reply once nothing before the sending can fail. It is
/// given the reply before the request's own data goes (a write's bytes), which it may
/// borrow for as long as `'a`.
pub(crate) struct Later<'a, R>(Box<dyn FnOnce(R) + Send + 'a>);

impl<'a, R> Later<'a, R> {
    pub(crate) fn new(then: impl FnOnce(R) + Send + 'a) -> Self {
        Later(Box::new(then))
    }
}

impl<R> Answer<R> for Later<'_, R> {
    fn send(self, reply: R) {
        (self.0)(reply);
    }
}

/// An answer known now, or one sent later.
pub(crate) enum NowOrLater<'a, A, R> {
    Now(A),
    Later(Later<'a, R>),
}

impl<R, A: Answer<R>> Answer<R> for NowOrLater<'_, A, R> {
    fn send(self, reply: R) {
        match self {
            NowOrLater::Now(a) => a.send(reply),
            NowOrLater::Later(l) => l.send(reply),
        }
    }
}

/// An answer, then what must wait until the kernel has it (an error is answered alone:
/// nothing follows it).
pub(crate) struct Then<'a, A>(A, Option<Box<dyn FnOnce() + 'a>>);

impl<'a, A> Then<'a, A> {
    /// `answer`, then `after`.
    pub(crate) fn new(answer: A, after: impl FnOnce() + 'a) -> Self {
        Then(answer, Some(Box::new(after)))
    }

    /// `answer`, with nothing after it.
    pub(crate) fn alone(answer: A) -> Self {
        Then(answer, None)
    }
}

impl<R, A: Answer<R>> Answer<R> for Then<'_, A> {
    fn send(self, reply: R) {
        self.0.send(reply);
        if let Some(after) = self.1 {
            after();
        }
    }
}
