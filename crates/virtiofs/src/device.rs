//! The vhost-user-fs device: rust-vmm's `vhost-user-backend` runs the vhost-user protocol
//! with the VMM and one epoll thread per queue; this module only moves buffers between
//! descriptor chains and [`FuseFs`].
//!
//! Queues: 0 is the high-priority queue (FORGET, INTERRUPT), 1.. carry requests. A chain's
//! readable and writable parts become [`GuestBuffers`], every descriptor checked against
//! the guest's memory map. A chain that cannot be read (a descriptor outside guest memory, a
//! length overflow, a request larger than any we accept) is logged, counted as malformed and
//! returned with nothing written and nothing done; a reply that does not fit the chain's
//! writable part is replaced by `ERANGE` when that fits, else the chain is returned empty.
//! The guest only ever waits; the device never panics on its input. The file system copies
//! a request out of the buffers, and the device copies the reply in, but for a READ's and
//! a WRITE's data, which go straight between the file and the guest's memory
//! (`fs/in_guest.rs`).
//!
//! Out of order: a request the file system parks ([`Answer::Later`]: a control-file READ
//! waiting for events, a sync waiting for the agent) keeps its chain here, keyed by the
//! request's unique id, and the queue goes on with the next chain; the reply comes through
//! [`LaterReplies`] from another thread, which writes the chain, puts it in the used ring
//! and signals the guest (virtio allows used buffers in any order). A reply that comes
//! before its chain is parked (a race between the two threads) waits for it here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::{VhostUserBackend, VringRwLock, VringT};
use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};
use virtio_queue::{DescriptorChain, QueueT};
use vm_memory::{
    GuestAddressSpace, GuestMemoryAtomic, GuestMemoryLoadGuard, GuestMemoryMmap, Permissions,
};
use vmm_sys_util::epoll::EventSet;

use crate::fs::{Answer, FuseFs, LaterReplies};
use crate::fuse;
use crate::guest::GuestBuffers;
use crate::stats::Stats;

/// A descriptor chain as popped from a queue.
type Chain = DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>;

/// Guest memory as the backend sees it.
pub(crate) type Memory = GuestMemoryAtomic<GuestMemoryMmap>;

/// The largest queue the device accepts (QEMU's `queue-size` must not exceed it).
pub const MAX_QUEUE_SIZE: usize = 32768;

/// Largest request a chain may carry: a 16 MiB WRITE and its headers. Larger chains are
/// refused before anything is copied or written.
const MAX_REQUEST: usize = (16 << 20) + 4096;

/// The vhost-user backend of one guest connection.
#[derive(Clone)]
pub(crate) struct FsBackend {
    inner: Arc<Inner>,
}

struct Inner {
    fs: FuseFs,
    request_queues: usize,
    mem: Mutex<Option<Memory>>,
    event_idx: std::sync::atomic::AtomicBool,
    parked: Mutex<Parked>,
}

/// Requests answered later: their chains, and replies that came before their chain.
#[derive(Default)]
struct Parked {
    chains: HashMap<u64, (VringRwLock, Chain)>,
    early: HashMap<u64, Vec<u8>>,
}

impl FsBackend {
    pub(crate) fn new(fs: FuseFs, request_queues: usize) -> FsBackend {
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            fs.set_later_replies(me.clone() as Weak<dyn LaterReplies>);
            Inner {
                fs,
                request_queues,
                mem: Mutex::new(None),
                event_idx: false.into(),
                parked: Mutex::new(Parked::default()),
            }
        });
        FsBackend { inner }
    }

    fn process(&self, vring: &VringRwLock) -> std::io::Result<()> {
        let Some(atomic) = self
            .inner
            .mem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return Ok(());
        };
        let mem = atomic.memory();
        let size = u32::from(vring.get_ref().get_queue().size());
        self.inner.fs.set_queue_size(size);
        loop {
            let chain = vring
                .get_mut()
                .get_queue_mut()
                .pop_descriptor_chain(mem.clone());
            let Some(chain) = chain else { break };
            let head = chain.head_index();
            let written = match self.serve_chain(&chain) {
                Served::Written(n) => n,
                Served::Parked(unique) => {
                    self.inner.park(unique, vring, chain);
                    continue;
                }
            };
            if let Err(e) = vring.add_used(head, written) {
                tracing::warn!("virtiofs: cannot return descriptor {head}: {e:?}; queue stopped");
                return Ok(());
            }
        }
        if vring.needs_notification().unwrap_or(true) {
            vring.signal_used_queue()?;
        }
        Ok(())
    }

    /// Answers one chain, or parks it.
    fn serve_chain(&self, chain: &Chain) -> Served {
        let stats = self.inner.fs.stats();
        let mem = chain.memory();
        let request = match GuestBuffers::of(mem, chain.clone().readable(), Permissions::Read) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("virtiofs: unreadable descriptor chain: {e}");
                stats.record_malformed();
                return Served::Written(0);
            }
        };
        let len = request.len();
        if len > MAX_REQUEST {
            tracing::warn!("virtiofs: request of {len} bytes refused");
            stats.record_malformed();
            return Served::Written(0);
        }
        let Some(room) = writable(chain, stats) else {
            return Served::Written(0);
        };
        match self.inner.fs.handle_chain(&request, &room) {
            Answer::Reply { bytes, in_guest } => {
                Served::Written(write_reply(&room, &bytes, in_guest, || opcode_in(&request)))
            }
            Answer::Nothing => Served::Written(0),
            Answer::Later(unique) => Served::Parked(unique),
        }
    }
}

/// A chain's writable part, or `None` (logged, counted) when it is not all guest memory.
fn writable<'m>(chain: &'m Chain, stats: &Stats) -> Option<GuestBuffers<'m>> {
    match GuestBuffers::of(chain.memory(), chain.clone().writable(), Permissions::Write) {
        Ok(room) => Some(room),
        Err(e) => {
            tracing::warn!("virtiofs: unwritable descriptor chain: {e}");
            stats.record_malformed();
            None
        }
    }
}

/// The opcode of the request in `request`, for logs.
fn opcode_in(request: &GuestBuffers<'_>) -> Option<fuse::Opcode> {
    let mut head = [0u8; 8];
    request.copy_out(0, &mut head);
    crate::fs::opcode_of(&head)
}

/// What became of a chain.
enum Served {
    /// Answered with this many bytes.
    Written(u32),
    /// Parked, for the request with this unique id.
    Parked(u64),
}

impl Inner {
    /// Keeps `chain` until its reply comes, or answers it now if the reply came first.
    fn park(&self, unique: u64, vring: &VringRwLock, chain: Chain) {
        let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        match parked.early.remove(&unique) {
            Some(reply) => {
                drop(parked);
                self.complete(vring, &chain, reply);
            }
            None => {
                parked.chains.insert(unique, (vring.clone(), chain));
            }
        }
    }

    /// Writes `reply` into a parked chain, returns it to the guest and signals it.
    fn complete(&self, vring: &VringRwLock, chain: &Chain, reply: Vec<u8>) {
        let stats = self.fs.stats();
        let written =
            writable(chain, stats).map_or(0, |room| write_reply(&room, &reply, 0, || None));
        if let Err(e) = vring.add_used(chain.head_index(), written) {
            tracing::warn!("virtiofs: cannot return a parked descriptor: {e:?}");
            return;
        }
        if vring.needs_notification().unwrap_or(true) {
            if let Err(e) = vring.signal_used_queue() {
                tracing::warn!("virtiofs: cannot signal the guest: {e}");
            }
        }
    }
}

impl LaterReplies for Inner {
    fn reply_later(&self, unique: u64, reply: Vec<u8>) {
        let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        match parked.chains.remove(&unique) {
            Some((vring, chain)) => {
                drop(parked);
                self.complete(&vring, &chain, reply);
            }
            None => {
                parked.early.insert(unique, reply);
            }
        }
    }
}

/// Writes `reply` at the start of `room` (a chain's writable part), where `in_guest` bytes
/// of data already follow it; returns the bytes the chain now holds. `opcode` names the
/// request in the log, should the reply not fit.
fn write_reply(
    room: &GuestBuffers<'_>,
    reply: &[u8],
    in_guest: usize,
    opcode: impl FnOnce() -> Option<fuse::Opcode>,
) -> u32 {
    let total = reply.len() + in_guest;
    if total <= room.len() {
        let written = room.copy_in(0, reply) + in_guest;
        return u32::try_from(written).unwrap_or(u32::MAX);
    }
    tracing::warn!(
        opcode = ?opcode(),
        "virtiofs: reply of {total} bytes does not fit the guest's {}",
        room.len()
    );
    let unique = reply
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    let refused = fuse::encode::error(unique, libc::ERANGE);
    if refused.len() > room.len() {
        return 0;
    }
    room.copy_in(0, &refused) as u32
}

impl VhostUserBackend for FsBackend {
    type Bitmap = ();
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        1 + self.inner.request_queues
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_INDIRECT_DESC)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
    }

    fn set_event_idx(&self, enabled: bool) {
        self.inner
            .event_idx
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
    }

    fn update_memory(&self, mem: Memory) -> std::io::Result<()> {
        *self.inner.mem.lock().unwrap_or_else(|e| e.into_inner()) = Some(mem);
        Ok(())
    }

    fn exit_event(
        &self,
        _thread_index: usize,
    ) -> Option<(
        vmm_sys_util::event::EventConsumer,
        vmm_sys_util::event::EventNotifier,
    )> {
        // Without one, a queue thread never learns that its VMM left, and dropping the
        // daemon (to serve the next VMM) would wait for it forever.
        match vmm_sys_util::event::new_event_consumer_and_notifier(
            vmm_sys_util::event::EventFlag::NONBLOCK,
        ) {
            Ok(pair) => Some(pair),
            Err(e) => {
                tracing::warn!("virtiofs: no exit event for a queue thread: {e}");
                None
            }
        }
    }

    fn queues_per_thread(&self) -> Vec<u64> {
        // One thread per queue: a slow request holds up only its own queue.
        (0..self.num_queues()).map(|q| 1u64 << q).collect()
    }

    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[VringRwLock],
        _thread_id: usize,
    ) -> std::io::Result<()> {
        if evset != EventSet::IN {
            return Err(std::io::Error::other("unexpected event set"));
        }
        let Some(vring) = vrings.get(usize::from(device_event)) else {
            return Err(std::io::Error::other("event for an unknown queue"));
        };
        if self
            .inner
            .event_idx
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            // Drain, then re-arm; whatever arrived in between is drained again.
            loop {
                let _ = vring.disable_notification();
                self.process(vring)?;
                if !vring.enable_notification().unwrap_or(false) {
                    break;
                }
            }
        } else {
            self.process(vring)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
