//! The mount's own FUSE session: the kernel's requests read from `/dev/fuse`, decoded with
//! the workspace's one FUSE codec (`crossfs-fuse-abi`, the virtio door's too), handed to
//! the handlers (`crate::fs::face`) with a reply each, and the replies written back.
//!
//! What it owns: the INIT handshake ([`KernelConfig`]), one worker thread per channel, each
//! reading its own cloned `/dev/fuse` descriptor and answering through it, FUSE over
//! io_uring where the kernel offers it (`uring.rs`: a ring and a thread per CPU queue,
//! `/dev/fuse` serving until the ring is ready, or for good if the kernel refuses it), the
//! [`Notifier`], and how the session ends (the device answering ENODEV once the mount is
//! gone). The request and reply types keep the names the handlers were written against
//! (fuser's, which this replaced), so that handlers change only in what they import.
//!
//! What it must not touch: what a request means (the handlers decide), the mount itself
//! (`crate::direct`, or fusermount3 through [`mount_with_fusermount`]).

mod dev;
mod dispatch;
mod idle_poll;
mod notify;
mod reply;
mod splice;
mod types;
mod uring;

use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use crossfs_fuse_abi::{self as abi, encode, Op};

pub(crate) use dispatch::{Acl, Filesystem};
pub use notify::Notifier;
pub use reply::{
    Moved, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
};
pub use types::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, Request, TimeOrNow,
    WriteFlags,
};

use dev::DevFuse;
pub use idle_poll::auto_window as auto_idle_poll;
use reply::ReplySender;
pub(crate) use splice::largest_read;
pub(crate) use uring::TransportCounters;

/// Bytes a request may carry beyond a WRITE's data (its header and `fuse_write_in`), and
/// the least the kernel accepts a read into (`FUSE_MIN_READ_BUFFER`, 8 KiB) rounded up to
/// hold a 64 KiB extended attribute value with its name.
const REQUEST_OVERHEAD: usize = 4096;
const MIN_BUFFER: usize = (64 << 10) + 2 * REQUEST_OVERHEAD;

/// A FUSE session over a mounted `/dev/fuse` descriptor, not yet initialised.
pub(crate) struct Session<FS: Filesystem> {
    fs: FS,
    main: Arc<DevFuse>,
    acl: Acl,
    threads: usize,
    /// Whether to ask for FUSE over io_uring where the kernel offers it.
    io_uring: bool,
    /// How long the CPUs are kept awake after each request (`idle_poll.rs`).
    idle_poll: Option<std::time::Duration>,
    counters: Arc<TransportCounters>,
}

/// What INIT agreed that the transports need.
struct Agreed {
    flags: InitFlags,
    max_write: u32,
    max_pages: u16,
}

/// Mounts through fusermount3 (a user without the privilege to mount), with mount(8)-style
/// `options`, and returns the mount's `/dev/fuse` descriptor.
///
/// # Errors
/// fusermount3 (or fusermount) missing or refusing, with its message.
pub(crate) fn mount_with_fusermount(mountpoint: &Path, options: &str) -> io::Result<OwnedFd> {
    dev::fusermount(mountpoint, options)
}

impl<FS: Filesystem> Session<FS> {
    /// A session serving `fs` on `dev`, the descriptor of a mount just made, with `threads`
    /// workers on `/dev/fuse`, and with FUSE over io_uring if `io_uring` and the kernel
    /// offers it.
    pub(crate) fn new(
        fs: FS,
        dev: OwnedFd,
        acl: Acl,
        threads: usize,
        io_uring: bool,
    ) -> Session<FS> {
        Session {
            fs,
            main: Arc::new(DevFuse::new(dev)),
            acl,
            threads: threads.max(1),
            io_uring,
            idle_poll: None,
            counters: Arc::default(),
        }
    }

    /// Keeps the CPUs from halting for `window` after each request (`None`: never).
    pub(crate) fn with_idle_poll(mut self, window: Option<std::time::Duration>) -> Self {
        self.idle_poll = window;
        self
    }

    /// Requests served per transport, for `crossfs stats`.
    pub(crate) fn counters(&self) -> Arc<TransportCounters> {
        self.counters.clone()
    }

    /// What sends notifications to the kernel (usable once INIT is answered).
    pub(crate) fn notifier(&self) -> Notifier {
        Notifier(self.main.clone())
    }

    /// Answers INIT, then serves requests on the worker threads until the mount is gone.
    ///
    /// # Errors
    /// The handshake failing (a kernel too old, the file system refusing, the device
    /// closing), or a worker's device failing otherwise than with ENODEV.
    pub(crate) fn run(mut self) -> io::Result<()> {
        let agreed = self.handshake()?;
        let buffer = (agreed.max_write as usize + REQUEST_OVERHEAD).max(MIN_BUFFER);
        let fs = Arc::new(self.fs);
        let poll = self
            .idle_poll
            .and_then(idle_poll::IdlePoll::start)
            .map(Arc::new);
        let mut channels = vec![self.main.clone()];
        for _ in 1..self.threads {
            match self.main.clone_channel() {
                Ok(c) => channels.push(Arc::new(c)),
                Err(e) => {
                    // The workers then share the one descriptor: still correct, since
                    // each answers through the descriptor it read from.
                    tracing::info!("cannot clone /dev/fuse ({e}); the workers share one");
                    channels.push(self.main.clone());
                }
            }
        }
        let mut workers = Vec::new();
        for (i, channel) in channels.into_iter().enumerate().skip(1) {
            let (fs, acl, counters) = (fs.clone(), self.acl, self.counters.clone());
            let poll = poll.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(format!("crossfs-fuse-{i}"))
                    .spawn(move || {
                        serve(&*fs, channel, acl, buffer, (&counters, poll.as_deref()))
                    })?,
            );
        }
        if agreed.flags.contains(InitFlags::FUSE_OVER_IO_URING) {
            // The largest payload either way: a write's data, or a read's reply.
            let payload = (agreed.max_write as usize)
                .max(usize::from(agreed.max_pages) * crate::config::PAGE as usize)
                .max(8192);
            for qid in 0..uring::possible_cpus() {
                let qid = u16::try_from(qid).unwrap_or(u16::MAX);
                workers.push(uring::start_queue(
                    fs.clone(),
                    self.main.clone(),
                    qid,
                    payload,
                    self.acl,
                    (self.counters.clone(), poll.clone()),
                )?);
            }
        }
        let mut result = serve(
            &*fs,
            self.main.clone(),
            self.acl,
            buffer,
            (&self.counters, poll.as_deref()),
        );
        for w in workers {
            let r = w
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a FUSE worker panicked")));
            result = result.and(r);
        }
        result
    }

    /// Reads INIT and answers it with what `fs.init` asks for, and FUSE over io_uring if
    /// wanted and offered.
    fn handshake(&mut self) -> io::Result<Agreed> {
        let mut buf = vec![0u8; MIN_BUFFER];
        loop {
            let n = match self.main.receive(&mut buf) {
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotConnected,
                        "the FUSE device closed before INIT",
                    ))
                }
                r => r?,
            };
            let req = abi::decode(&buf[..n]).map_err(io::Error::other)?;
            let unique = req.header.unique;
            let sender: ReplySender = self.main.clone();
            let init = match req.op {
                Ok(Op::Init(init)) => init,
                _ => {
                    reply::send(&*sender, unique, -libc::EIO, &[]);
                    return Err(io::Error::other(format!(
                        "FUSE opcode {} before INIT",
                        req.header.opcode
                    )));
                }
            };
            if init.major > abi::KERNEL_VERSION {
                // A newer kernel: it asks again in our major version.
                let mut r = encode::Reply::new();
                r.u32(abi::KERNEL_VERSION).u32(abi::SESSION_MINOR_VERSION);
                let bytes = r.finish(unique);
                reply::send(&*sender, unique, 0, &[&bytes[abi::OUT_HEADER_LEN..]]);
                continue;
            }
            if init.major < abi::KERNEL_VERSION || init.minor < 6 {
                reply::send(&*sender, unique, -libc::EPROTO, &[]);
                return Err(io::Error::other(format!(
                    "FUSE ABI {}.{} is too old",
                    init.major, init.minor
                )));
            }
            let offered = InitFlags::from_words(init.flags, init.flags2);
            let mut config = KernelConfig::new(offered, init.max_readahead);
            if let Err(e) = self
                .fs
                .init(&Request::from_header(&req.header), &mut config)
            {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                reply::send(&*sender, unique, -errno, &[]);
                return Err(e);
            }
            if self.io_uring {
                // The transport is the session's choice, not the file system's.
                config.requested |= InitFlags::FUSE_OVER_IO_URING;
            }
            let agreed = (config.requested | InitFlags::FUSE_INIT_EXT) & offered;
            let (flags, flags2) = agreed.words();
            let out = encode::InitOut {
                major: abi::KERNEL_VERSION,
                minor: abi::SESSION_MINOR_VERSION,
                max_readahead: config.max_readahead,
                flags,
                max_background: config.max_background,
                congestion_threshold: config.congestion_threshold(),
                max_write: config.max_write,
                time_gran: 1,
                max_pages: config.max_pages(),
                flags2,
            };
            let mut r = encode::Reply::new();
            r.init_out(&out, init.minor);
            let bytes = r.finish(unique);
            reply::send(&*sender, unique, 0, &[&bytes[abi::OUT_HEADER_LEN..]]);
            tracing::debug!(?agreed, "FUSE_INIT answered");
            if self.io_uring && !agreed.contains(InitFlags::FUSE_OVER_IO_URING) {
                tracing::info!(
                    "the kernel does not offer FUSE over io_uring \
                     (/sys/module/fuse/parameters/enable_uring): /dev/fuse serves"
                );
            }
            return Ok(Agreed {
                flags: agreed,
                max_write: config.max_write,
                max_pages: out.max_pages,
            });
        }
    }
}

/// One worker: reads requests from `channel` and hands each to `fs`, until the device says
/// the mount is gone; each request counted, and told to the idle polling if on.
fn serve<FS: Filesystem>(
    fs: &FS,
    channel: Arc<DevFuse>,
    acl: Acl,
    buffer: usize,
    (counters, poll): (&TransportCounters, Option<&idle_poll::IdlePoll>),
) -> io::Result<()> {
    let mut buf = vec![0u8; buffer];
    let sender: ReplySender = channel.clone();
    loop {
        let n = match channel.receive(&mut buf) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            Err(e) => return Err(e),
        };
        counters
            .dev_fuse
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(poll) = poll {
            poll.request();
        }
        match abi::decode(&buf[..n]) {
            // A change the handler sends behind its answer goes to the server once the
            // kernel has the answer (`crossfs_client::holding_sends`).
            Ok(req) => crossfs_client::holding_sends(|| dispatch::dispatch(fs, &req, &sender, acl)),
            // Not even a header to answer: the kernel never sends one.
            Err(e) => tracing::warn!("undecodable FUSE request of {n} bytes: {e}"),
        }
    }
}
