//! fuse_uring_floor: a minimal FUSE file system (one file `f` in the root) used to
//! measure FUSE-over-io_uring against plain /dev/fuse reads with the same handler.
//!
//! usage: fuse_uring_floor MOUNTPOINT uring|dev [THREADS]
//!   uring: one thread per CPU queue (pinned), requests via FUSE_IO_URING_CMD_*;
//!          plus one unpinned fallback thread reading /dev/fuse (forgets, interrupts).
//!   dev:   THREADS (default nproc) threads, each reading its own FUSE_DEV_IOC_CLONE fd,
//!          thread i pinned to CPU i % nproc (PIN=0 in the environment: no pinning).
//! env: ENTRIES=n ring entries per queue (default 2); DEFER=1 -> SINGLE_ISSUER|DEFER_TASKRUN;
//!      COOP=1 -> COOP_TASKRUN; VERBOSE=1 logs every request.
//! The process exits when the file system is unmounted (umount MOUNTPOINT).

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use io_uring::{IoUring, cqueue, opcode, squeue, types};

// ---- ABI (Linux 6.18 include/uapi/linux/fuse.h) -------------------------------------
const FUSE_KERNEL_VERSION: u32 = 7;
const FUSE_MAX_MINOR: u32 = 45;

const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_STATFS: u32 = 17;
const FUSE_GETXATTR: u32 = 22;
const FUSE_INIT: u32 = 26;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_DESTROY: u32 = 38;
const FUSE_BATCH_FORGET: u32 = 42;

const FUSE_ASYNC_READ: u32 = 1 << 0;
const FUSE_BIG_WRITES: u32 = 1 << 5;
const FUSE_PARALLEL_DIROPS: u32 = 1 << 18;
const FUSE_MAX_PAGES: u32 = 1 << 22;
const FUSE_INIT_EXT: u32 = 1 << 30;
/// FUSE_OVER_IO_URING = 1ULL << 41 -> bit 9 of flags2
const FUSE_OVER_IO_URING_FLAGS2: u32 = 1 << (41 - 32);

const IN_HEADER_SZ: usize = 40; // struct fuse_in_header
const OUT_HEADER_SZ: usize = 16; // struct fuse_out_header
const INIT_IN_SZ: usize = 64;
const INIT_OUT_SZ: usize = 64;

// io-uring
const FUSE_URING_IN_OUT_HEADER_SZ: usize = 128;
const FUSE_URING_OP_IN_OUT_SZ: usize = 128;
const RING_ENT_IN_OUT_OFF: usize = FUSE_URING_IN_OUT_HEADER_SZ + FUSE_URING_OP_IN_OUT_SZ; // 256
const URING_REQ_HEADER_SZ: usize = RING_ENT_IN_OUT_OFF + 32; // 288
const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

// _IOR(229, 0, uint32_t)
const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

const MAX_WRITE: u32 = 128 * 1024;
const MAX_PAGES: u16 = 32;
const PAYLOAD_SZ: usize = 128 * 1024; // >= max(8192, max_write, max_pages * 4096)
const DEV_BUF_SZ: usize = PAYLOAD_SZ + 4096;

const TIMEOUT_S: u64 = 100;
const ROOT_INO: u64 = 1;
const FILE_INO: u64 = 2;

static VERBOSE: AtomicBool = AtomicBool::new(false);
static RING_REQS: AtomicU64 = AtomicU64::new(0);
static DEV_REQS: AtomicU64 = AtomicU64::new(0);
/// requests served per CPU (sched_getcpu() of the serving thread), up to 64 CPUs
static PER_CPU: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

fn count_cpu() {
    let c = unsafe { libc::sched_getcpu() };
    if (0..64).contains(&c) {
        PER_CPU[c as usize].fetch_add(1, Ordering::Relaxed);
    }
}

fn rd_u32(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().unwrap())
}
fn rd_u64(b: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(b[o..o + 8].try_into().unwrap())
}
fn wr_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
}
fn wr_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_ne_bytes());
}
fn wr_u16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_ne_bytes());
}

#[derive(Clone, Copy, Debug)]
struct InHeader {
    len: u32,
    opcode: u32,
    unique: u64,
    nodeid: u64,
}

fn parse_in_header(b: &[u8]) -> InHeader {
    InHeader { len: rd_u32(b, 0), opcode: rd_u32(b, 4), unique: rd_u64(b, 8), nodeid: rd_u64(b, 16) }
}

/// Size of in_args[0] (the per-opcode header, which io-uring puts into op_in) for the
/// opcodes we look at; the rest of the request body is "payload".
fn arg0_size(opcode: u32) -> usize {
    match opcode {
        FUSE_GETATTR => 16,  // fuse_getattr_in
        FUSE_GETXATTR => 8,  // fuse_getxattr_in
        _ => 0,              // LOOKUP: arg0 is empty since 6.14 (fuse_set_zero_arg0)
    }
}

enum Reply {
    None,
    Err(i32),
    Data(usize),
}

/// fuse_attr, 88 bytes
fn put_attr(out: &mut [u8], ino: u64) {
    out[..88].fill(0);
    wr_u64(out, 0, ino);
    let (mode, nlink, size) = if ino == ROOT_INO { (0o040755u32, 2u32, 0u64) } else { (0o100644, 1, 0) };
    wr_u64(out, 8, size);
    // blocks, atime, mtime, ctime = 0
    // atimensec 48, mtimensec 52, ctimensec 56
    wr_u32(out, 60, mode);
    wr_u32(out, 64, nlink);
    // uid 68, gid 72, rdev 76 = 0
    wr_u32(out, 80, 4096); // blksize
}

/// The file system. `arg0` is the per-op header, `rest` what follows; reply data is
/// written into `out`.
fn handle(h: &InHeader, arg0: &[u8], rest: &[u8], out: &mut [u8]) -> Reply {
    let _ = arg0;
    if VERBOSE.load(Ordering::Relaxed) {
        eprintln!("op {} unique {} node {} len {} tid {} cpu {}", h.opcode, h.unique, h.nodeid, h.len,
            unsafe { libc::gettid() }, unsafe { libc::sched_getcpu() });
    }
    match h.opcode {
        FUSE_LOOKUP => {
            let name = rest.split(|&c| c == 0).next().unwrap_or(&[]);
            if h.nodeid == ROOT_INO && name == b"f" {
                out[..40].fill(0);
                wr_u64(out, 0, FILE_INO); // nodeid
                wr_u64(out, 8, 0); // generation
                wr_u64(out, 16, TIMEOUT_S); // entry_valid
                wr_u64(out, 24, TIMEOUT_S); // attr_valid
                put_attr(&mut out[40..], FILE_INO);
                Reply::Data(128)
            } else {
                Reply::Err(libc::ENOENT)
            }
        }
        FUSE_GETATTR => {
            if h.nodeid != ROOT_INO && h.nodeid != FILE_INO {
                return Reply::Err(libc::ENOENT);
            }
            out[..16].fill(0);
            wr_u64(out, 0, TIMEOUT_S);
            put_attr(&mut out[16..], h.nodeid);
            Reply::Data(104)
        }
        FUSE_GETXATTR => Reply::Err(libc::ENODATA),
        FUSE_STATFS => {
            out[..80].fill(0);
            wr_u32(out, 40, 4096); // bsize
            wr_u32(out, 44, 255); // namelen
            wr_u32(out, 48, 4096); // frsize
            Reply::Data(80)
        }
        FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT => Reply::None,
        FUSE_DESTROY => Reply::Data(0),
        _ => Reply::Err(libc::ENOSYS),
    }
}

fn pin_to(cpu: usize) {
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("sched_setaffinity({cpu}): {}", io::Error::last_os_error());
        }
    }
}

fn read_dev(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::ENOENT) => continue,
            _ => return Err(e),
        }
    }
}

fn write_reply(fd: RawFd, unique: u64, error: i32, data: &[u8]) {
    let mut hdr = [0u8; OUT_HEADER_SZ];
    wr_u32(&mut hdr, 0, (OUT_HEADER_SZ + data.len()) as u32);
    wr_u32(&mut hdr, 4, (-error) as u32);
    wr_u64(&mut hdr, 8, unique);
    let iov = [
        libc::iovec { iov_base: hdr.as_ptr() as *mut _, iov_len: OUT_HEADER_SZ },
        libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() },
    ];
    let n = unsafe { libc::writev(fd, iov.as_ptr(), 2) };
    if n < 0 {
        let e = io::Error::last_os_error();
        // ENOENT: request was interrupted/aborted meanwhile
        if e.raw_os_error() != Some(libc::ENOENT) {
            eprintln!("writev reply unique {unique}: {e}");
        }
    }
}

/// Serve /dev/fuse reads on `fd` until the connection goes away.
fn dev_loop(fd: RawFd, name: &str) {
    let mut buf = vec![0u8; DEV_BUF_SZ];
    let mut out = vec![0u8; PAYLOAD_SZ];
    loop {
        let n = match read_dev(fd, &mut buf) {
            Ok(n) => n,
            Err(e) => {
                if e.raw_os_error() != Some(libc::ENODEV) {
                    eprintln!("{name}: read /dev/fuse: {e}");
                }
                return;
            }
        };
        if n < IN_HEADER_SZ {
            eprintln!("{name}: short read {n}");
            continue;
        }
        DEV_REQS.fetch_add(1, Ordering::Relaxed);
        count_cpu();
        let h = parse_in_header(&buf);
        let body = &buf[IN_HEADER_SZ..n];
        let a0 = arg0_size(h.opcode).min(body.len());
        match handle(&h, &body[..a0], &body[a0..], &mut out) {
            Reply::None => {}
            Reply::Err(e) => write_reply(fd, h.unique, e, &[]),
            Reply::Data(len) => write_reply(fd, h.unique, 0, &out[..len]),
        }
    }
}

/// Read FUSE_INIT and answer it. Returns whether io-uring was negotiated.
fn do_init(fd: RawFd, want_uring: bool) -> io::Result<bool> {
    let mut buf = vec![0u8; DEV_BUF_SZ];
    let n = read_dev(fd, &mut buf)?;
    let h = parse_in_header(&buf);
    if h.opcode != FUSE_INIT || n < IN_HEADER_SZ + 16 {
        return Err(io::Error::other(format!("expected INIT, got opcode {} len {n}", h.opcode)));
    }
    let b = &buf[IN_HEADER_SZ..n];
    let (major, minor, max_readahead, flags) = (rd_u32(b, 0), rd_u32(b, 4), rd_u32(b, 8), rd_u32(b, 12));
    let flags2 = if b.len() >= INIT_IN_SZ && flags & FUSE_INIT_EXT != 0 { rd_u32(b, 16) } else { 0 };
    eprintln!("INIT from kernel: {major}.{minor} flags {flags:#x} flags2 {flags2:#x} (io-uring offered: {})",
        flags2 & FUSE_OVER_IO_URING_FLAGS2 != 0);
    if major != FUSE_KERNEL_VERSION || minor < 36 {
        return Err(io::Error::other("kernel protocol too old"));
    }
    let our_minor = minor.min(FUSE_MAX_MINOR);
    let mut out = [0u8; INIT_OUT_SZ];
    wr_u32(&mut out, 0, FUSE_KERNEL_VERSION);
    wr_u32(&mut out, 4, our_minor);
    wr_u32(&mut out, 8, max_readahead);
    let want = FUSE_ASYNC_READ | FUSE_BIG_WRITES | FUSE_PARALLEL_DIROPS | FUSE_MAX_PAGES | FUSE_INIT_EXT;
    wr_u32(&mut out, 12, flags & want);
    wr_u16(&mut out, 16, 16); // max_background
    wr_u16(&mut out, 18, 12); // congestion_threshold
    wr_u32(&mut out, 20, MAX_WRITE);
    wr_u32(&mut out, 24, 1); // time_gran
    wr_u16(&mut out, 28, MAX_PAGES);
    let uring = want_uring && flags2 & FUSE_OVER_IO_URING_FLAGS2 != 0;
    wr_u32(&mut out, 32, if uring { FUSE_OVER_IO_URING_FLAGS2 } else { 0 });
    write_reply(fd, h.unique, 0, &out);
    eprintln!("INIT reply: {}.{} flags {:#x} flags2 {:#x}", FUSE_KERNEL_VERSION, our_minor, flags & want,
        rd_u32(&out, 32));
    Ok(uring)
}

// ---- io_uring transport ----------------------------------------------------------------

#[repr(C, align(64))]
struct HeaderBuf([u8; URING_REQ_HEADER_SZ]);

struct RingEnt {
    header: Box<HeaderBuf>,
    payload: Vec<u8>,
    iov: Box<[libc::iovec; 2]>,
}

fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 padding[6]; }
    let mut c = [0u8; 80];
    wr_u64(&mut c, 8, commit_id);
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

fn uring_sqe(fd: RawFd, cmd_op: u32, ent: &RingEnt, idx: usize, commit_id: u64, qid: u16) -> squeue::Entry128 {
    let e = opcode::UringCmd80::new(types::Fd(fd), cmd_op)
        .cmd(cmd_req(commit_id, qid))
        .addr(Some(ent.iov.as_ptr() as u64))
        .build()
        .user_data(idx as u64);
    // The io-uring crate has no setter for sqe->len, which REGISTER needs (= 2 iovecs).
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    wr_u32(&mut raw, 24, 2);
    unsafe { std::mem::transmute(raw) }
}

fn uring_queue_loop(fd: RawFd, qid: usize, entries: usize) -> io::Result<()> {
    pin_to(qid);
    let mut b = IoUring::<squeue::Entry128, cqueue::Entry>::builder();
    if std::env::var("DEFER").as_deref() == Ok("1") {
        b.setup_single_issuer().setup_defer_taskrun();
    }
    if std::env::var("COOP").as_deref() == Ok("1") {
        b.setup_coop_taskrun();
    }
    let mut ring = b.build((entries * 2) as u32)?;
    let mut ents: Vec<RingEnt> = (0..entries)
        .map(|_| {
            let mut header = Box::new(HeaderBuf([0u8; URING_REQ_HEADER_SZ]));
            let mut payload = vec![0u8; PAYLOAD_SZ];
            let iov = Box::new([
                libc::iovec { iov_base: header.0.as_mut_ptr().cast(), iov_len: URING_REQ_HEADER_SZ },
                libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: PAYLOAD_SZ },
            ]);
            RingEnt { header, payload, iov }
        })
        .collect();
    for (i, ent) in ents.iter().enumerate() {
        let sqe = uring_sqe(fd, FUSE_IO_URING_CMD_REGISTER, ent, i, 0, qid as u16);
        unsafe { ring.submission().push(&sqe).map_err(|_| io::Error::other("sq full"))? };
    }
    ring.submit()?;
    let mut out = vec![0u8; PAYLOAD_SZ];
    let mut pending: Vec<(usize, i32)> = Vec::new();
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        pending.clear();
        for cqe in ring.completion() {
            pending.push((cqe.user_data() as usize, cqe.result()));
        }
        for &(idx, res) in &pending {
            if res < 0 {
                let e = io::Error::from_raw_os_error(-res);
                if res != -libc::ENOTCONN {
                    eprintln!("queue {qid}: ring entry {idx} completed with {e}");
                }
                return Ok(());
            }
            RING_REQS.fetch_add(1, Ordering::Relaxed);
            count_cpu();
            let ent = &mut ents[idx];
            let hb = &mut ent.header.0;
            let h = parse_in_header(&hb[..IN_HEADER_SZ]);
            let commit_id = rd_u64(hb, RING_ENT_IN_OUT_OFF + 8);
            let payload_sz = rd_u32(hb, RING_ENT_IN_OUT_OFF + 16) as usize;
            let a0 = arg0_size(h.opcode).min(FUSE_URING_OP_IN_OUT_SZ);
            let op_in = &hb[FUSE_URING_IN_OUT_HEADER_SZ..FUSE_URING_IN_OUT_HEADER_SZ + a0];
            let reply = handle(&h, op_in, &ent.payload[..payload_sz.min(PAYLOAD_SZ)], &mut out);
            let (err, len) = match reply {
                Reply::None => (libc::EIO, 0), // should not come via the ring; must still commit
                Reply::Err(e) => (e, 0),
                Reply::Data(len) => (0, len),
            };
            ent.payload[..len].copy_from_slice(&out[..len]);
            hb[..FUSE_URING_IN_OUT_HEADER_SZ].fill(0);
            wr_u32(hb, 0, (OUT_HEADER_SZ + len) as u32);
            wr_u32(hb, 4, (-err) as u32);
            wr_u64(hb, 8, h.unique);
            wr_u32(hb, RING_ENT_IN_OUT_OFF + 16, len as u32);
            let sqe = uring_sqe(fd, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, ent, idx, commit_id, qid as u16);
            unsafe { ring.submission().push(&sqe).map_err(|_| io::Error::other("sq full"))? };
        }
    }
}

// ---- main --------------------------------------------------------------------------------

fn nproc() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 || (args[2] != "uring" && args[2] != "dev") {
        eprintln!("usage: {} MOUNTPOINT uring|dev [THREADS]", args[0]);
        std::process::exit(2);
    }
    VERBOSE.store(std::env::var("VERBOSE").as_deref() == Ok("1"), Ordering::Relaxed);
    let mnt = &args[1];
    let want_uring = args[2] == "uring";
    let ncpu = nproc();
    // the kernel makes num_possible_cpus() queues; a queue per possible CPU is required
    let nqueues = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| s.trim().rsplit(['-', ',']).next().and_then(|x| x.parse::<usize>().ok()))
        .map(|m| m + 1)
        .unwrap_or(ncpu);
    let threads: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(ncpu);
    let entries: usize = std::env::var("ENTRIES").ok().and_then(|s| s.parse().ok()).unwrap_or(2);

    let dev = CString::new("/dev/fuse").unwrap();
    let fd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        eprintln!("open /dev/fuse: {}", io::Error::last_os_error());
        std::process::exit(1);
    }
    let opts = CString::new(format!("fd={fd},rootmode=40000,user_id=0,group_id=0")).unwrap();
    let src = CString::new("fuse_uring_floor").unwrap();
    let tgt = CString::new(mnt.as_str()).unwrap();
    let fstype = CString::new("fuse").unwrap();
    let r = unsafe {
        libc::mount(src.as_ptr(), tgt.as_ptr(), fstype.as_ptr(), libc::MS_NOSUID | libc::MS_NODEV,
            opts.as_ptr().cast())
    };
    if r != 0 {
        eprintln!("mount: {}", io::Error::last_os_error());
        std::process::exit(1);
    }
    let uring = match do_init(fd, want_uring) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("init: {e}");
            unsafe { libc::umount2(tgt.as_ptr(), libc::MNT_DETACH) };
            std::process::exit(1);
        }
    };
    if want_uring && !uring {
        eprintln!("WARNING: kernel did not offer FUSE_OVER_IO_URING (enable_uring=N?); serving /dev/fuse only");
    }

    let mut handles = Vec::new();
    if uring {
        for qid in 0..nqueues {
            handles.push(std::thread::spawn(move || {
                if let Err(e) = uring_queue_loop(fd, qid, entries) {
                    eprintln!("queue {qid}: {e}");
                }
            }));
        }
        eprintln!("serving: io_uring, {nqueues} queues x {entries} entries (+1 /dev/fuse fallback thread)");
        dev_loop(fd, "fallback");
    } else {
        let pin = std::env::var("PIN").as_deref() != Ok("0");
        for i in 0..threads {
            let cfd = if i == 0 {
                fd
            } else {
                let c = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
                let mut src_fd: u32 = fd as u32;
                if c < 0 || unsafe { libc::ioctl(c, FUSE_DEV_IOC_CLONE, &mut src_fd) } != 0 {
                    eprintln!("clone fd: {}", io::Error::last_os_error());
                    std::process::exit(1);
                }
                c
            };
            handles.push(std::thread::spawn(move || {
                if pin {
                    pin_to(i % ncpu);
                }
                dev_loop(cfd, "dev");
            }));
        }
        eprintln!("serving: /dev/fuse, {threads} threads (pinned: {pin})");
        for h in handles.drain(..) {
            let _ = h.join();
        }
    }
    eprintln!("unmounted; requests via ring: {}, via /dev/fuse: {}", RING_REQS.load(Ordering::Relaxed),
        DEV_REQS.load(Ordering::Relaxed));
    let per: Vec<String> = (0..ncpu.min(64)).map(|c| format!("cpu{c}={}", PER_CPU[c].load(Ordering::Relaxed))).collect();
    eprintln!("served on: {}", per.join(" "));
    std::process::exit(0);
}
