//! The vhost-user-fs device: rust-vmm's `vhost-user-backend` runs the vhost-user protocol
//! with the VMM and one epoll thread per queue; this module only moves buffers between
//! descriptor chains and [`FuseFs`].
//!
//! Queues: 0 is the high-priority queue (FORGET, INTERRUPT), 1.. carry requests. A chain is
//! read through `virtio-queue`'s `Reader` and `Writer`, which check every descriptor against
//! the guest's memory map. A chain that cannot be read (an address outside guest memory, a
//! length overflow, a request larger than any we accept) is logged and returned with nothing
//! written; a reply that does not fit the chain's writable part is replaced by `ERANGE`
//! when that fits, else the chain is returned empty. The guest only ever waits; the device
//! never panics on its input.
//!
//! Out of order: a request the file system parks ([`Handled::Later`]: a control-file READ
//! waiting for events, a sync waiting for the agent) keeps its chain here, keyed by the
//! request's unique id, and the queue goes on with the next chain; the reply comes through
//! [`LaterReplies`] from another thread, which writes the chain, puts it in the used ring
//! and signals the guest (virtio allows used buffers in any order). A reply that comes
//! before its chain is parked (a race between the two threads) waits for it here.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex, Weak};

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::{VhostUserBackend, VringRwLock, VringT};
use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};
use virtio_queue::{DescriptorChain, QueueT, Reader, Writer};
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryLoadGuard, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;

use crate::fs::{FuseFs, Handled, LaterReplies};
use crate::fuse;
use crate::stats::Stats;

/// A descriptor chain as popped from a queue.
type Chain = DescriptorChain<GuestMemoryLoadGuard<GuestMemoryMmap>>;

/// Guest memory as the backend sees it.
pub(crate) type Memory = GuestMemoryAtomic<GuestMemoryMmap>;

/// The largest queue the device accepts (QEMU's `queue-size` must not exceed it).
pub const MAX_QUEUE_SIZE: usize = 32768;

/// Largest request read from a chain: a 16 MiB WRITE and its headers. Larger chains are
/// refused before anything is copied.
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
        let mut reader = match Reader::new(chain.memory(), chain.clone()) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("virtiofs: unreadable descriptor chain: {e:?}");
                stats.record_malformed();
                return Served::Written(0);
            }
        };
        let len = reader.available_bytes();
        if len > MAX_REQUEST {
            tracing::warn!("virtiofs: request of {len} bytes refused");
            stats.record_malformed();
            return Served::Written(0);
        }
        let mut request = vec![0u8; len];
        if let Err(e) = reader.read_exact(&mut request) {
            tracing::warn!("virtiofs: reading a request: {e}");
            stats.record_malformed();
            return Served::Written(0);
        }
        match self.inner.fs.handle_request(&request) {
            Handled::Reply(reply) => {
                let opcode = crate::fs::opcode_of(&request);
                Served::Written(write_reply(chain, reply, stats, opcode))
            }
            Handled::Nothing => Served::Written(0),
            Handled::Later => Served::Parked(unique_of(&request)),
        }
    }
}

/// What became of a chain.
enum Served {
    /// Answered with this many bytes.
    Written(u32),
    /// Parked, for the request with this unique id.
    Parked(u64),
}

fn unique_of(request: &[u8]) -> u64 {
    request
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
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
        let written = write_reply(chain, reply, self.fs.stats(), None);
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

/// Writes `reply` into `chain`'s writable part; returns the bytes written.
fn write_reply(chain: &Chain, reply: Vec<u8>, stats: &Stats, opcode: Option<fuse::Opcode>) -> u32 {
    {
        let mut writer = match Writer::new(chain.memory(), chain.clone()) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!("virtiofs: unwritable descriptor chain: {e:?}");
                stats.record_malformed();
                return 0;
            }
        };
        let room = writer.available_bytes();
        let reply = if reply.len() <= room {
            reply
        } else {
            tracing::warn!(
                ?opcode,
                "virtiofs: reply of {} bytes does not fit the guest's {room}",
                reply.len()
            );
            let unique = u64::from_le_bytes(reply[8..16].try_into().unwrap_or([0; 8]));
            let e = fuse::encode::error(unique, libc::ERANGE);
            if e.len() > room {
                return 0;
            }
            e
        };
        match writer.write_all(&reply) {
            Ok(()) => reply.len() as u32,
            Err(e) => {
                tracing::warn!("virtiofs: writing a reply: {e}");
                writer.bytes_written() as u32
            }
        }
    }
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
