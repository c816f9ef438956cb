//! A descriptor chain's buffers in guest memory, as vm-memory's volatile slices: its
//! readable part (the request) or its writable part (room for the reply). Every descriptor
//! is checked against the guest's memory map when the buffers are made
//! (`GuestMemory::get_slices`: an address outside guest memory, or a length that runs past
//! the memory the map gives, is an error, never a slice), and their lengths are summed
//! without overflow; nothing later trusts a descriptor's length beyond that.
//!
//! Requests are copied out of the buffers and replies into them, except a READ's file
//! data, which the export core reads from the file straight into the reply's buffers, and a
//! WRITE's data, which it writes to the file straight from the request's
//! ([`crossfs_export::sys::preadv_volatile`], [`crossfs_export::sys::pwritev_volatile`]).

use vm_memory::{GuestMemory, GuestMemoryMmap, Permissions, VolatileSlice};

/// Why a chain's buffers could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChainError {
    /// A descriptor outside the guest's memory, or running past it.
    #[error("descriptor at {addr:#x} of {len} bytes: {source}")]
    Memory {
        /// The descriptor's guest address.
        addr: u64,
        /// Its length.
        len: u32,
        /// What vm-memory said.
        source: vm_memory::GuestMemoryError,
    },
    /// The lengths add up past what one chain may hold.
    #[error("descriptor lengths overflow")]
    Overflow,
}

/// One part of a chain (readable or writable), in order.
pub(crate) struct GuestBuffers<'m> {
    slices: Vec<VolatileSlice<'m, ()>>,
    len: usize,
}

impl<'m> GuestBuffers<'m> {
    /// The buffers of the descriptors `descs` (a chain's readable or writable ones) in `mem`.
    ///
    /// # Errors
    /// [`ChainError`] for a descriptor that is not all inside guest memory.
    pub(crate) fn of(
        mem: &'m GuestMemoryMmap,
        descs: impl Iterator<Item = virtio_queue::desc::split::Descriptor>,
        access: Permissions,
    ) -> Result<GuestBuffers<'m>, ChainError> {
        let mut slices = Vec::new();
        let mut len = 0usize;
        for desc in descs {
            let memory = |source| ChainError::Memory {
                addr: desc.addr().0,
                len: desc.len(),
                source,
            };
            len = len
                .checked_add(desc.len() as usize)
                .ok_or(ChainError::Overflow)?;
            for slice in mem
                .get_slices(desc.addr(), desc.len() as usize, access)
                .map_err(memory)?
            {
                slices.push(slice.map_err(memory)?);
            }
        }
        Ok(GuestBuffers { slices, len })
    }

    /// Bytes in all buffers.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The slices covering `len` bytes from `start` (fewer past the end).
    pub(crate) fn range(&self, start: usize, len: usize) -> Vec<VolatileSlice<'m, ()>> {
        let mut out = Vec::new();
        let (mut skip, mut want) = (start, len);
        for s in &self.slices {
            if want == 0 {
                break;
            }
            if skip >= s.len() {
                skip -= s.len();
                continue;
            }
            let n = (s.len() - skip).min(want);
            // In bounds: skip < s.len() and n <= s.len() - skip.
            if let Ok(part) = s.subslice(skip, n) {
                out.push(part);
            }
            skip = 0;
            want -= n;
        }
        out
    }

    /// The buffers of `len` bytes from `start` (fewer past the end).
    pub(crate) fn sub(&self, start: usize, len: usize) -> GuestBuffers<'m> {
        let slices = self.range(start, len);
        let len = slices.iter().map(|s| s.len()).sum();
        GuestBuffers { slices, len }
    }

    /// Copies bytes from `start` into `buf`; returns how many (fewer past the end).
    pub(crate) fn copy_out(&self, start: usize, buf: &mut [u8]) -> usize {
        let mut done = 0;
        for s in self.range(start, buf.len()) {
            done += s.copy_to(&mut buf[done..]);
        }
        done
    }

    /// Copies `data` in from `start`; returns how many bytes fitted.
    pub(crate) fn copy_in(&self, start: usize, data: &[u8]) -> usize {
        let mut done = 0;
        for s in self.range(start, data.len()) {
            let n = s.len();
            s.copy_from(&data[done..done + n]);
            done += n;
        }
        done
    }
}
