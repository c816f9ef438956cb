//! Replies: one type per kind of answer, each answering its request exactly once, from
//! whichever thread holds it (a handler's, the 9P client's reader, a waiting thread). The
//! names and methods are those the handlers in `crate::fs` answer through.
//!
//! A reply dropped unanswered answers EIO, so that no caller waits for ever on a request
//! a bug forgot.

use std::ffi::OsStr;
use std::io::IoSlice;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use crossfs_client::Payload;
use crossfs_fuse_abi::encode::{self, Reply as Body, Ttl};
use crossfs_fuse_abi::OUT_HEADER_LEN;

use super::splice::Sent;

use super::types::{Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo};

/// Where replies and notifications go: the channel a request was read from (a reply must
/// go back through it: the kernel looks the request up among that channel's own).
pub(crate) trait Channel: Send + Sync {
    /// Writes one whole message, given in pieces.
    ///
    /// # Errors
    /// The kernel's: ENOENT for a request whose caller was interrupted, ENODEV once the
    /// mount is gone.
    fn send(&self, message: &[IoSlice<'_>]) -> std::io::Result<()>;

    /// The descriptor a reply may be spliced into (`/dev/fuse`), if the channel takes one.
    fn splice_target(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// Answers request `unique` with `payload` read straight into the channel's own buffer
    /// (a ring entry's), returning its length; `None` when the channel has no such buffer,
    /// or none that holds it: the caller then reads the payload and sends it. The request
    /// is answered either way once this returns `Some` (EIO if reading failed).
    fn send_payload(
        &self,
        unique: u64,
        payload: &mut Payload<'_>,
    ) -> Option<std::io::Result<usize>> {
        let _ = (unique, payload);
        None
    }
}

/// The channel a reply goes back through.
pub(crate) type ReplySender = Arc<dyn Channel>;

/// Sends a reply with `error` (0, or a negative errno) and `body`.
pub(crate) fn send(sender: &dyn Channel, unique: u64, error: i32, body: &[&[u8]]) {
    let len = OUT_HEADER_LEN + body.iter().map(|b| b.len()).sum::<usize>();
    let mut header = [0u8; OUT_HEADER_LEN];
    header[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    header[4..8].copy_from_slice(&error.to_le_bytes());
    header[8..16].copy_from_slice(&unique.to_le_bytes());
    let mut iov = Vec::with_capacity(1 + body.len());
    iov.push(IoSlice::new(&header));
    iov.extend(body.iter().map(|b| IoSlice::new(b)));
    match sender.send(&iov) {
        Ok(()) => {}
        // The caller was interrupted and the kernel forgot the request (ENOENT), or the
        // mount is gone (ENODEV): nobody waits for the answer.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) => {}
        Err(e) => tracing::warn!("cannot send FUSE reply to request {unique}: {e}"),
    }
}

/// The request a reply answers, and the way back; answers EIO if dropped unanswered.
struct ReplyTo {
    unique: u64,
    sender: Option<ReplySender>,
}

impl ReplyTo {
    fn new(unique: u64, sender: ReplySender) -> ReplyTo {
        ReplyTo {
            unique,
            sender: Some(sender),
        }
    }

    fn ok(mut self, body: &[&[u8]]) {
        if let Some(sender) = self.sender.take() {
            send(&*sender, self.unique, 0, body);
        }
    }

    fn error(mut self, e: Errno) {
        if let Some(sender) = self.sender.take() {
            send(&*sender, self.unique, -e.code(), &[]);
        }
    }

    /// Sends a body built with the ABI's encoder (its header space skipped).
    fn body(self, b: Body) {
        let bytes = b.finish(self.unique);
        self.ok(&[&bytes[OUT_HEADER_LEN..]]);
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            tracing::warn!("FUSE request {} dropped unanswered: EIO", self.unique);
            send(&*sender, self.unique, -libc::EIO, &[]);
        }
    }
}

fn ttl(d: &Duration) -> Ttl {
    Ttl::from(*d)
}

macro_rules! reply_types {
    ($($(#[$doc:meta])* $name:ident;)*) => {
        $(
            $(#[$doc])*
            pub struct $name(ReplyTo);

            impl $name {
                pub(crate) fn new(unique: u64, sender: ReplySender) -> Self {
                    $name(ReplyTo::new(unique, sender))
                }

                /// Answers with an errno.
                pub fn error(self, e: Errno) {
                    self.0.error(e);
                }
            }
        )*
    };
}

reply_types! {
    /// Success or an errno (unlink, flush, release, setxattr, ...).
    ReplyEmpty;
    /// Bytes (a read, a link's target).
    ReplyData;
    /// A name's node (lookup, mkdir, ...; node 0 is a negative entry).
    ReplyEntry;
    /// Attributes (getattr, setattr).
    ReplyAttr;
    /// An open handle.
    ReplyOpen;
    /// The bytes a write took.
    ReplyWrite;
    /// The file system's sizes.
    ReplyStatfs;
    /// A file made and opened.
    ReplyCreate;
    /// The lock that conflicts.
    ReplyLock;
    /// An extended attribute's value, or its size.
    ReplyXattr;
}

impl ReplyEmpty {
    /// Answers success.
    pub fn ok(self) {
        self.0.ok(&[]);
    }
}

impl ReplyData {
    /// Answers with `data`, sent from where it lies.
    pub fn data(self, data: &[u8]) {
        self.0.ok(&[data]);
    }

    /// Answers with an Rread's payload still in the 9P stream: spliced from the socket into
    /// `/dev/fuse` where `splice` allows it and the channel and transport can
    /// (`super::splice`), else read into memory and sent from there.
    pub fn payload(mut self, payload: &mut Payload<'_>, splice: bool) -> Moved {
        let len = payload.len();
        let target = self
            .0
            .sender
            .as_ref()
            .filter(|_| splice && payload.has_socket());
        let sent = match target.and_then(|s| s.splice_target().map(|fd| (s, fd))) {
            Some((_, fd)) => super::splice::reply(fd, self.0.unique, payload),
            None => {
                let unique = self.0.unique;
                let into_channel = self
                    .0
                    .sender
                    .as_ref()
                    .and_then(|s| s.send_payload(unique, payload));
                match into_channel {
                    Some(read) => {
                        self.0.sender.take();
                        return match read {
                            Ok(n) => Moved::Copied(n),
                            Err(e) => {
                                tracing::warn!("reading a read's reply of {len} bytes: {e}");
                                Moved::Copied(0)
                            }
                        };
                    }
                    None => Sent::Copy(payload.read_to_vec()),
                }
            }
        };
        match sent {
            Sent::Spliced(n) => {
                self.0.sender.take();
                Moved::Spliced(n)
            }
            Sent::Gone => {
                self.0.sender.take();
                Moved::Copied(0)
            }
            Sent::Copy(Ok(data)) => {
                self.0.ok(&[&data]);
                Moved::Copied(data.len())
            }
            Sent::Copy(Err(e)) => {
                tracing::warn!("reading a read's reply of {len} bytes: {e}");
                self.0.error(Errno::EIO);
                Moved::Copied(0)
            }
            Sent::Failed => {
                self.0.error(Errno::EIO);
                Moved::Copied(0)
            }
        }
    }
}

/// The path a READ's payload took to the kernel, and its bytes.
pub enum Moved {
    /// Spliced from the socket into `/dev/fuse`.
    Spliced(usize),
    /// Read into the mount's memory and written from there.
    Copied(usize),
}

impl ReplyEntry {
    /// Answers with `attr`'s node, its attributes kept for `attr_ttl` and the name for
    /// `entry_ttl`.
    pub fn entry_with_ttls(
        self,
        attr_ttl: &Duration,
        entry_ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) {
        let mut b = Body::with_capacity(128);
        b.entry_of(
            attr.ino.0,
            generation.0,
            &attr.wire(),
            ttl(entry_ttl),
            ttl(attr_ttl),
        );
        self.0.body(b);
    }
}

impl ReplyAttr {
    /// Answers with `attr`, kept for `ttl`.
    pub fn attr(self, ttl_: &Duration, attr: &FileAttr) {
        let mut b = Body::with_capacity(104);
        b.attr_out_of(&attr.wire(), ttl(ttl_));
        self.0.body(b);
    }
}

impl ReplyOpen {
    /// Answers with handle `fh`, cached as `flags` say.
    pub fn opened(self, fh: FileHandle, flags: FopenFlags) {
        let mut b = Body::with_capacity(16);
        b.open_out(fh.0, flags.bits());
        self.0.body(b);
    }
}

impl ReplyWrite {
    /// Answers that `size` bytes were written.
    pub fn written(self, size: u32) {
        let mut b = Body::with_capacity(8);
        b.write_out(size);
        self.0.body(b);
    }
}

impl ReplyStatfs {
    /// Answers with the file system's sizes.
    #[allow(clippy::too_many_arguments)]
    pub fn statfs(
        self,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
    ) {
        let mut b = Body::with_capacity(80);
        b.statfs_out(&encode::Statfs {
            blocks,
            bfree,
            bavail,
            files,
            ffree,
            bsize,
            namelen,
            frsize,
        });
        self.0.body(b);
    }
}

impl ReplyCreate {
    /// Answers with the new file's entry (name and attributes kept for `ttl`) and its open
    /// handle.
    /// `ttls`: how long the kernel keeps the entry, and the attributes.
    pub fn created(
        self,
        (entry_ttl, attr_ttl): (&Duration, &Duration),
        attr: &FileAttr,
        generation: Generation,
        fh: FileHandle,
        flags: FopenFlags,
    ) {
        let mut b = Body::with_capacity(128 + 16);
        b.entry_of(
            attr.ino.0,
            generation.0,
            &attr.wire(),
            ttl(entry_ttl),
            ttl(attr_ttl),
        )
        .open_out(fh.0, flags.bits());
        self.0.body(b);
    }
}

impl ReplyLock {
    /// Answers with the conflicting lock (`F_UNLCK`: none).
    pub fn locked(self, start: u64, end: u64, typ: i32, pid: u32) {
        let mut b = Body::with_capacity(24);
        b.lk_out(start, end, typ as u32, pid);
        self.0.body(b);
    }
}

impl ReplyXattr {
    /// Answers with the size the value needs (a query with size 0).
    pub fn size(self, size: u32) {
        let mut b = Body::with_capacity(8);
        b.xattr_size(size);
        self.0.body(b);
    }

    /// Answers with the value (or the name list).
    pub fn data(self, data: &[u8]) {
        self.0.ok(&[data]);
    }
}

/// A listing (READDIR), filled entry by entry up to the size the kernel asked for.
pub struct ReplyDirectory {
    reply: ReplyTo,
    body: Body,
    size: usize,
}

impl ReplyDirectory {
    pub(crate) fn new(unique: u64, sender: ReplySender, size: usize) -> ReplyDirectory {
        ReplyDirectory {
            reply: ReplyTo::new(unique, sender),
            body: Body::with_capacity(size.min(1 << 20)),
            size,
        }
    }

    /// Adds an entry; returns true when it does not fit (it is not added then). The kernel
    /// asks for the next at `offset`.
    #[must_use]
    pub fn add<T: AsRef<OsStr>>(
        &mut self,
        ino: INodeNo,
        offset: u64,
        kind: FileType,
        name: T,
    ) -> bool {
        let name = name.as_ref().as_bytes();
        if self.body.body_len() + encode::dirent_len(name.len()) > self.size {
            return true;
        }
        encode::dirent(&mut self.body, ino.0, offset, kind.mode_bits() >> 12, name);
        false
    }

    /// Answers with the entries added.
    pub fn ok(self) {
        self.reply.body(self.body);
    }

    /// Answers with an errno.
    pub fn error(self, e: Errno) {
        self.reply.error(e);
    }
}

/// A listing with attributes (READDIRPLUS), filled entry by entry up to the size asked.
pub struct ReplyDirectoryPlus {
    reply: ReplyTo,
    body: Body,
    size: usize,
}

impl ReplyDirectoryPlus {
    pub(crate) fn new(unique: u64, sender: ReplySender, size: usize) -> ReplyDirectoryPlus {
        ReplyDirectoryPlus {
            reply: ReplyTo::new(unique, sender),
            body: Body::with_capacity(size.min(1 << 20)),
            size,
        }
    }

    /// Adds an entry whose node, name and attributes the kernel keeps for `ttl`; returns
    /// true when it does not fit (it is not added then).
    pub fn add<T: AsRef<OsStr>>(
        &mut self,
        ino: INodeNo,
        offset: u64,
        name: T,
        ttl_: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool {
        let name = name.as_ref().as_bytes();
        if self.body.body_len() + encode::direntplus_len(name.len()) > self.size {
            return true;
        }
        let wire = attr.wire();
        let t = ttl(ttl_);
        self.body.entry_of(ino.0, generation.0, &wire, t, t);
        encode::dirent(&mut self.body, wire.ino, offset, wire.mode >> 12, name);
        false
    }

    /// Answers with the entries added.
    pub fn ok(self) {
        self.reply.body(self.body);
    }

    /// Answers with an errno.
    pub fn error(self, e: Errno) {
        self.reply.error(e);
    }
}
