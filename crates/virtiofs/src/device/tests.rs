//! Chains in a guest memory of two regions, built as a driver builds them (virtio-queue's
//! `MockSplitQueue` writes the descriptor table and the available ring), served by the
//! device over a real export: READ data lands in the guest's buffers after the header, a
//! WRITE's data reaches the file from them, each counted on its path; a chain whose
//! descriptors leave guest memory is refused (nothing read, nothing written, counted as
//! malformed), one whose room is too short gets an error reply, and random chains never
//! make the device panic.

use std::sync::Arc;

use crossfs_export::policy::Policy;
use crossfs_export::Export;
use proptest::prelude::*;
use virtio_bindings::bindings::virtio_ring::{
    VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
};
use virtio_queue::desc::{split::Descriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use super::{FsBackend, Served};
use crate::fs::FuseFs;
use crate::stats::{DataPath, Stats};
use crate::FsConfig;

/// The first region's size; a second of [`SECOND`] bytes follows it at once, so that a
/// buffer may run from one into the other.
const FIRST: u64 = 16 << 20;
const SECOND: u64 = 4 << 20;
const END: u64 = FIRST + SECOND;
/// Where the request of a chain is put (below it: the queue).
const REQUEST_AT: u64 = 0x8000;
/// The file's size.
const FILE: usize = 3 << 20;
const QUEUE: u16 = 512;

const LOOKUP: u32 = 1;
const OPEN: u32 = 14;
const READ: u32 = 15;
const WRITE: u32 = 16;

/// What the file holds at `i`.
fn byte(i: usize) -> u8 {
    (i % 251) as u8 ^ (i >> 12) as u8
}

struct Rig {
    dir: tempfile::TempDir,
    mem: GuestMemoryMmap,
    atomic: GuestMemoryAtomic<GuestMemoryMmap>,
    backend: FsBackend,
    stats: Arc<Stats>,
    fh: u64,
}

/// A guest buffer: where, how long, and whether the device writes it.
#[derive(Clone, Copy, Debug)]
struct Buf {
    addr: u64,
    len: u32,
    write: bool,
}

fn rd(addr: u64, len: u32) -> Buf {
    Buf {
        addr,
        len,
        write: false,
    }
}

fn wr(addr: u64, len: u32) -> Buf {
    Buf {
        addr,
        len,
        write: true,
    }
}

fn request(opcode: u32, nodeid: u64, body: &[u8], len: Option<u32>) -> Vec<u8> {
    let mut r = Vec::new();
    let len = len.unwrap_or((40 + body.len()) as u32);
    r.extend_from_slice(&len.to_le_bytes());
    r.extend_from_slice(&opcode.to_le_bytes());
    r.extend_from_slice(&7u64.to_le_bytes());
    r.extend_from_slice(&nodeid.to_le_bytes());
    r.extend_from_slice(&[0; 16]);
    r.extend_from_slice(body);
    r
}

fn read_request(fh: u64, offset: u64, size: u32) -> Vec<u8> {
    let mut body = fh.to_le_bytes().to_vec();
    body.extend_from_slice(&offset.to_le_bytes());
    body.extend_from_slice(&size.to_le_bytes());
    body.extend_from_slice(&[0; 20]);
    request(READ, 2, &body, None)
}

/// A WRITE's head (80 bytes) for `size` bytes; its data follows in the chain.
fn write_head(fh: u64, offset: u64, size: u32, len: u32) -> Vec<u8> {
    let mut body = fh.to_le_bytes().to_vec();
    body.extend_from_slice(&offset.to_le_bytes());
    body.extend_from_slice(&size.to_le_bytes());
    body.extend_from_slice(&[0; 20]);
    request(WRITE, 2, &body, Some(len))
}

/// The reply at `addr`: (error, length).
fn reply_at(mem: &GuestMemoryMmap, addr: u64) -> (i32, u32) {
    let mut h = [0u8; 16];
    mem.read_slice(&mut h, GuestAddress(addr)).unwrap();
    (
        i32::from_le_bytes(h[4..8].try_into().unwrap()),
        u32::from_le_bytes(h[0..4].try_into().unwrap()),
    )
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..FILE).map(byte).collect();
        std::fs::write(dir.path().join("f"), &data).unwrap();
        let export = Arc::new(Export::open(dir.path(), Policy::default(), Some(64)).unwrap());
        let stats = Arc::new(Stats::default());
        let fs = FuseFs::new(export, FsConfig::default(), stats.clone());
        let mem = GuestMemoryMmap::<()>::from_ranges(&[
            (GuestAddress(0), FIRST as usize),
            (GuestAddress(FIRST), SECOND as usize),
        ])
        .unwrap();
        // The same regions: what the mock writes, the device reads.
        let atomic = GuestMemoryAtomic::new(mem.clone());
        let backend = FsBackend::new(fs, 1);
        let mut rig = Rig {
            dir,
            mem,
            atomic,
            backend,
            stats,
            fh: 0,
        };
        let node = rig.call(&request(LOOKUP, 1, b"f\0", None));
        let node = u64::from_le_bytes(node[16..24].try_into().unwrap());
        let mut open = (libc::O_RDWR as u32).to_le_bytes().to_vec();
        open.extend_from_slice(&[0; 4]);
        let opened = rig.call(&request(OPEN, node, &open, None));
        rig.fh = u64::from_le_bytes(opened[16..24].try_into().unwrap());
        rig
    }

    fn fs(&self) -> &FuseFs {
        &self.backend.inner.fs
    }

    /// A request through the file system alone (the copy path).
    fn call(&self, req: &[u8]) -> Vec<u8> {
        let reply = self.fs().handle(req).expect("a reply");
        assert_eq!(i32::from_le_bytes(reply[4..8].try_into().unwrap()), 0);
        reply
    }

    fn file(&self) -> Vec<u8> {
        std::fs::read(self.dir.path().join("f")).unwrap()
    }

    /// Puts `descs` in a fresh queue as one chain (raw: flags and `next` as given) and
    /// serves every chain the queue then holds; returns what became of the first.
    fn serve_raw(&self, descs: &[RawDescriptor]) -> Option<Served> {
        self.mem
            .write_slice(&[0; REQUEST_AT as usize], GuestAddress(0))
            .unwrap();
        let vq = MockSplitQueue::new(&self.mem, QUEUE);
        vq.add_desc_chains(descs, 0).unwrap();
        let mut queue: Queue = vq.create_queue().unwrap();
        let mut first = None;
        while let Some(chain) = queue.pop_descriptor_chain(self.atomic.memory()) {
            let served = self.backend.serve_chain(&chain);
            first.get_or_insert(served);
        }
        first
    }

    /// Serves one chain of `bufs`, linked in order; returns the bytes written into it.
    fn serve(&self, bufs: &[Buf]) -> Option<u32> {
        let descs: Vec<RawDescriptor> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut flags = 0;
                if b.write {
                    flags |= VRING_DESC_F_WRITE;
                }
                if i + 1 < bufs.len() {
                    flags |= VRING_DESC_F_NEXT;
                }
                Descriptor::new(b.addr, b.len, flags as u16, i as u16 + 1).into()
            })
            .collect();
        match self.serve_raw(&descs) {
            Some(Served::Written(n)) => Some(n),
            Some(Served::Parked(_)) => panic!("parked"),
            None => None,
        }
    }

    fn put(&self, addr: u64, bytes: &[u8]) {
        self.mem.write_slice(bytes, GuestAddress(addr)).unwrap();
    }

    fn get(&self, bufs: &[Buf], len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        for b in bufs {
            let n = (b.len as usize).min(len - out.len());
            let mut part = vec![0; n];
            self.mem
                .read_slice(&mut part, GuestAddress(b.addr))
                .unwrap();
            out.extend_from_slice(&part);
        }
        out
    }

    fn data(&self, path: DataPath) -> u64 {
        self.stats.data(path)
    }

    fn malformed(&self) -> u64 {
        self.stats.to_json()["malformed"].as_u64().unwrap()
    }
}

/// Buffers of `total` bytes from `start`, cut in pieces of `piece` bytes, each followed by
/// a gap (as a guest's pages lie scattered): the last pieces run from the first region
/// into the second when `start` is placed so.
fn pieces(start: u64, total: usize, piece: usize, write: bool) -> Vec<Buf> {
    let mut out = Vec::new();
    let (mut at, mut left) = (start, total);
    while left > 0 {
        let n = left.min(piece);
        out.push(Buf {
            addr: at,
            len: n as u32,
            write,
        });
        at += n as u64 + 512;
        left -= n;
    }
    out
}

#[test]
fn reads_land_in_the_guests_buffers_at_every_boundary() {
    let rig = Rig::new();
    let file = rig.file();
    let sizes = [
        0usize,
        1,
        4095,
        4096,
        4097,
        (1 << 20) - 1,
        1 << 20,
        (1 << 20) + 1,
    ];
    for (i, &size) in sizes.iter().enumerate() {
        // Every other read straddles the two regions, and every third has its header in the
        // same buffer as the first data.
        let offset = (i * 4093) as u64;
        let start = if i % 2 == 0 { 0x10_0000 } else { FIRST - 8192 };
        let req = read_request(rig.fh, offset, size as u32);
        rig.put(REQUEST_AT, &req);
        let mut chain = vec![rd(REQUEST_AT, req.len() as u32)];
        let (header, data) = if i % 3 == 0 {
            let all = pieces(start, 16 + size, 65536 + 16, true);
            (all[0], all)
        } else {
            let h = wr(start - 4096, 16);
            (h, pieces(start, size, 4096, true))
        };
        if i % 3 != 0 {
            chain.push(header);
        }
        chain.extend_from_slice(&data);
        let before = rig.data(DataPath::ReadIntoGuest);
        let written = rig.serve(&chain).unwrap();
        assert_eq!(written as usize, 16 + size, "size {size}");
        assert_eq!(reply_at(&rig.mem, header.addr), (0, 16 + size as u32));
        let got = if i % 3 == 0 {
            rig.get(&data, 16 + size)[16..].to_vec()
        } else {
            rig.get(&data, size)
        };
        let at = offset as usize;
        assert!(got == file[at..at + size], "size {size}: other bytes");
        assert_eq!(rig.data(DataPath::ReadIntoGuest) - before, size as u64);
    }
    // At the end of the file: short, and the reply says so.
    let req = read_request(rig.fh, (FILE - 100) as u64, 4096);
    rig.put(REQUEST_AT, &req);
    let room = [wr(0x20_0000, 16), wr(0x30_0000, 4096)];
    let chain = [rd(REQUEST_AT, req.len() as u32), room[0], room[1]];
    assert_eq!(rig.serve(&chain), Some(116));
    assert_eq!(rig.get(&room[1..], 100), file[FILE - 100..]);
    assert_eq!(rig.data(DataPath::ReadCopied), 0, "nothing copied");
}

#[test]
fn writes_reach_the_file_from_the_guests_buffers() {
    let rig = Rig::new();
    let mut expected = rig.file();
    let sizes = [
        0usize,
        1,
        4095,
        4096,
        4097,
        (1 << 20) - 1,
        1 << 20,
        (1 << 20) + 1,
    ];
    for (i, &size) in sizes.iter().enumerate() {
        let offset = (i * 7919) as u64;
        let data: Vec<u8> = (0..size).map(|j| (j * 7 + i) as u8).collect();
        let head = write_head(rig.fh, offset, size as u32, 80 + size as u32);
        // The head itself in two buffers, the data in scattered pieces, the last of them
        // across the regions' border for every other write.
        rig.put(REQUEST_AT, &head[..50]);
        rig.put(REQUEST_AT + 100, &head[50..]);
        let start = if i % 2 == 0 { 0x10_0000 } else { FIRST - 8192 };
        let bufs = pieces(start, size, 4096 - 1, false);
        let mut at = 0;
        for b in &bufs {
            rig.put(b.addr, &data[at..at + b.len as usize]);
            at += b.len as usize;
        }
        let mut chain = vec![rd(REQUEST_AT, 50), rd(REQUEST_AT + 100, 30)];
        chain.extend_from_slice(&bufs);
        chain.push(wr(0x20_0000, 24));
        let before = rig.data(DataPath::WriteFromGuest);
        assert_eq!(rig.serve(&chain), Some(24), "size {size}");
        let mut out = [0u8; 24];
        rig.mem
            .read_slice(&mut out, GuestAddress(0x20_0000))
            .unwrap();
        assert_eq!(i32::from_le_bytes(out[4..8].try_into().unwrap()), 0);
        assert_eq!(
            u32::from_le_bytes(out[16..20].try_into().unwrap()),
            size as u32
        );
        let end = offset as usize + size;
        if expected.len() < end {
            expected.resize(end, 0);
        }
        expected[offset as usize..end].copy_from_slice(&data);
        assert!(rig.file() == expected, "size {size}: the file differs");
        assert_eq!(rig.data(DataPath::WriteFromGuest) - before, size as u64);
    }
    assert_eq!(rig.data(DataPath::WriteCopied), 0, "nothing copied");
}

#[test]
fn chains_outside_guest_memory_are_refused_without_touching_the_file() {
    let rig = Rig::new();
    let file = rig.file();
    let req = read_request(rig.fh, 0, 8192);
    rig.put(REQUEST_AT, &req);
    let head = rd(REQUEST_AT, req.len() as u32);
    let outside = [
        // Runs past the end of guest memory.
        wr(END - 4096, 8192),
        // Starts past it.
        wr(END + 4096, 4096),
        // Wraps around the address space.
        wr(u64::MAX - 100, 4096),
    ];
    for bad in outside {
        let malformed = rig.malformed();
        assert_eq!(
            rig.serve(&[head, wr(0x20_0000, 16), bad]),
            Some(0),
            "{bad:?}"
        );
        assert_eq!(rig.malformed(), malformed + 1, "{bad:?}");
        // The request's own part outside memory: refused as well.
        let bad_request = rd(bad.addr, bad.len);
        assert_eq!(rig.serve(&[bad_request, wr(0x20_0000, 4096)]), Some(0));
        assert_eq!(rig.malformed(), malformed + 2, "{bad:?}");
    }
    assert_eq!(rig.data(DataPath::ReadIntoGuest), 0, "nothing was read");

    // A WRITE whose data lies partly outside memory: not written at all.
    let head = write_head(rig.fh, 0, 8192, 80 + 8192);
    rig.put(REQUEST_AT, &head);
    rig.put(END - 4096, &[0xee; 4096]);
    let chain = [
        rd(REQUEST_AT, 80),
        rd(END - 4096, 4096),
        rd(END, 4096),
        wr(0x20_0000, 24),
    ];
    assert_eq!(rig.serve(&chain), Some(0));
    assert!(rig.file() == file, "the file was written");
    assert_eq!(rig.data(DataPath::WriteFromGuest), 0);
}

#[test]
fn chains_too_short_get_an_error_reply() {
    let rig = Rig::new();
    let file = rig.file();
    // Room for less than the READ asks for: the reply does not fit, and says ERANGE.
    let req = read_request(rig.fh, 0, 65536);
    rig.put(REQUEST_AT, &req);
    let chain = [rd(REQUEST_AT, req.len() as u32), wr(0x20_0000, 4096)];
    assert_eq!(rig.serve(&chain), Some(16));
    assert_eq!(reply_at(&rig.mem, 0x20_0000), (-libc::ERANGE, 16));
    // Room for no header at all: nothing written.
    let chain = [rd(REQUEST_AT, req.len() as u32), wr(0x20_0000, 15)];
    assert_eq!(rig.serve(&chain), Some(0));
    let copied = rig.data(DataPath::ReadCopied);
    // ... and for a READ near the end of the file that fits when short, the data.
    let req = read_request(rig.fh, (FILE - 10) as u64, 65536);
    rig.put(REQUEST_AT, &req);
    let chain = [rd(REQUEST_AT, req.len() as u32), wr(0x20_0000, 4096)];
    assert_eq!(rig.serve(&chain), Some(26));
    assert_eq!(rig.get(&[wr(0x20_0010, 10)], 10), file[FILE - 10..]);
    assert_eq!(rig.data(DataPath::ReadCopied) - copied, 10);
    assert_eq!(rig.data(DataPath::ReadIntoGuest), 0);

    // A WRITE whose data is shorter than its header says: no reply (the header's length
    // cannot be trusted), the file untouched.
    let head = write_head(rig.fh, 0, 8192, 80 + 8192);
    rig.put(REQUEST_AT, &head);
    let chain = [rd(REQUEST_AT, 80), rd(0x10_0000, 4096), wr(0x20_0000, 24)];
    let malformed = rig.malformed();
    assert_eq!(rig.serve(&chain), Some(0));
    assert_eq!(rig.malformed(), malformed + 1);
    // One whose size passes its header's length: EINVAL.
    let head = write_head(rig.fh, 0, 8192, 80 + 4096);
    rig.put(REQUEST_AT, &head);
    let chain = [rd(REQUEST_AT, 80), rd(0x10_0000, 8192), wr(0x20_0000, 24)];
    assert_eq!(rig.serve(&chain), Some(16));
    assert_eq!(reply_at(&rig.mem, 0x20_0000), (-libc::EINVAL, 16));
    // A chain longer than any request: refused unread.
    let chain = [
        rd(REQUEST_AT, 80),
        rd(0x10_0000, 17 << 20),
        wr(0x20_0000, 24),
    ];
    assert_eq!(rig.serve(&chain), Some(0));
    assert!(rig.file() == file, "the file was written");
    assert_eq!(rig.data(DataPath::WriteFromGuest), 0);
    assert_eq!(rig.data(DataPath::WriteCopied), 0);
}

/// Guest addresses a driver might give: inside, at the borders, past the end, wrapping.
fn any_addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        24 => 0x10_0000u64..FIRST + SECOND - (64 << 10),
        1 => (FIRST - 64)..(FIRST + 64),
        1 => (END - 4096)..(END + 4096),
        1 => any::<u64>(),
        1 => (u64::MAX - 8192)..=u64::MAX,
    ]
}

fn any_len() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => 0u32..8192,
        1 => 0u32..(2 << 20),
        1 => any::<u32>(),
    ]
}

/// A descriptor at `index` of a table: mostly linked to the next one, mostly writable.
fn any_descriptor(index: u16) -> impl Strategy<Value = RawDescriptor> {
    let flags = prop_oneof![
        6 => Just(VRING_DESC_F_NEXT | VRING_DESC_F_WRITE),
        2 => Just(VRING_DESC_F_WRITE),
        2 => Just(VRING_DESC_F_NEXT),
        1 => Just(VRING_DESC_F_INDIRECT),
        1 => Just(VRING_DESC_F_NEXT | VRING_DESC_F_INDIRECT | VRING_DESC_F_WRITE),
    ];
    let next = prop_oneof![8 => Just(index + 1), 1 => 0u16..QUEUE + 4];
    (any_addr(), any_len(), flags, next)
        .prop_map(|(addr, len, flags, next)| Descriptor::new(addr, len, flags as u16, next).into())
}

fn any_table() -> impl Strategy<Value = Vec<RawDescriptor>> {
    (1u16..12).prop_flat_map(|n| (1..=n).map(any_descriptor).collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Random descriptor tables (any flags, any links, indirect tables anywhere) behind a
    /// READ, a WRITE or random bytes: the device answers or refuses, never panics, and
    /// never says it wrote more than the chain's writable descriptors hold.
    #[test]
    fn random_chains_never_panic(
        table in any_table(),
        kind in 0u8..3,
        noise in prop::collection::vec(any::<u8>(), 0..120),
        size in prop_oneof![0u32..10_000, any::<u32>()],
    ) {
        thread_local!(static RIG: Rig = Rig::new());
        RIG.with(|rig| {
            let flagged = |bit: u32| {
                table
                    .iter()
                    .map(|d| Descriptor::from(*d))
                    .filter(move |d| d.flags() & bit as u16 != 0)
                    .map(|d| u64::from(d.len()))
                    .sum::<u64>()
            };
            let room = flagged(VRING_DESC_F_WRITE);
            // Mostly a WRITE of what the readable descriptors hold, so that it decodes.
            let given = (flagged(!0) - room).min(u64::from(u32::MAX - 80)) as u32;
            let req = match kind {
                0 => read_request(rig.fh, 0, size),
                1 if size % 4 != 0 => write_head(rig.fh, 0, given, 80 + given),
                1 => write_head(rig.fh, 0, size, 80u32.saturating_add(size)),
                _ => noise.clone(),
            };
            rig.put(REQUEST_AT, &req);
            // The request first, then the random descriptors.
            let mut descs = vec![
                Descriptor::new(REQUEST_AT, req.len() as u32, VRING_DESC_F_NEXT as u16, 1).into(),
            ];
            descs.extend_from_slice(&table);
            if let Some(Served::Written(n)) = rig.serve_raw(&descs) {
                prop_assert!(u64::from(n) <= room, "{n} written into {room}");
            }
            Ok(())
        })?;
    }
}
