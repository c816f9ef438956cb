//! The one adapter from a handler's `Result` to the kernel's reply.
//!
//! A request handler returns what the request is answered with, or the errno; [`answer`]
//! sends either. Where the answer comes later (from a completion on the client's reader
//! thread, or a thread that waits), the handler returns [`Later`]: it is handed the reply
//! once nothing before the sending can fail, and answers it from there, through [`answer`]
//! again.

use fuser::{
    Errno, FileHandle, FopenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr,
};

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

/// An answer sent later: given the reply once nothing before the sending can fail.
pub(crate) struct Later<R>(Box<dyn FnOnce(R) + Send>);

impl<R> Later<R> {
    pub(crate) fn new(then: impl FnOnce(R) + Send + 'static) -> Self {
        Later(Box::new(then))
    }
}

impl<R> Answer<R> for Later<R> {
    fn send(self, reply: R) {
        (self.0)(reply);
    }
}
