//! Vectored reads and writes between files and memory that Rust reaches only through
//! vm-memory's [`VolatileSlice`]: a virtio guest's memory, mapped into this process and
//! changed by the guest whenever it likes, so that no `&[u8]` or `&mut [u8]` of it may be
//! made (std's `IoSlice`s, and rustix's `preadv`, need one). The virtio door reads a READ's
//! file data straight into the guest's buffers and writes a WRITE's data straight out of
//! them with these; which guest addresses the slices cover, and that they lie inside the
//! guest's memory map, the door checks when it makes them.

use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::io::{Errno, Result};
use vm_memory::bitmap::BitmapSlice;
use vm_memory::VolatileSlice;

/// The most buffers one call takes (Linux's `UIO_MAXIOV`); the rest wait for the next call.
pub const MAX_IOVECS: usize = 1024;

/// `iovec`s over `bufs` (the first [`MAX_IOVECS`]), valid while `bufs` lives.
fn iovecs<B: BitmapSlice>(bufs: &[VolatileSlice<'_, B>]) -> Vec<libc::iovec> {
    bufs.iter()
        .take(MAX_IOVECS)
        .map(|b| libc::iovec {
            // Unmapped memory (vm-memory's xen feature) would need the guard kept: crossfs
            // maps the guest's memory whole and never builds with that feature.
            iov_base: b.ptr_guard_mut().as_ptr().cast(),
            iov_len: b.len(),
        })
        .collect()
}

fn offset_of(offset: u64) -> Result<libc::off_t> {
    libc::off_t::try_from(offset).map_err(|_| Errno::INVAL)
}

/// `preadv(2)` of `fd` at `offset` into `bufs`, in order: the bytes read, at most the sum of
/// the first [`MAX_IOVECS`] buffers' lengths (0 at the end of the file). The bytes read are
/// marked dirty in the slices' bitmaps (live migration's record of what the device wrote).
///
/// # Errors
/// `EBADF` (not open for reading), `EISDIR`, `EINVAL` (an offset past `off_t`), `EFAULT`,
/// `EIO`, ...
pub fn preadv_volatile<B: BitmapSlice>(
    fd: BorrowedFd<'_>,
    bufs: &[VolatileSlice<'_, B>],
    offset: u64,
) -> Result<usize> {
    let iov = iovecs(bufs);
    let offset = offset_of(offset)?;
    // SAFETY: each `iovec` is the start and length of a `VolatileSlice`, whose contract is
    // that this range of the process's memory is mapped and valid for writes for the
    // slice's lifetime, which outlives the call (`bufs` is borrowed for it). No Rust
    // reference into the ranges exists (volatile memory is only ever copied in and out),
    // so the kernel writing into them aliases nothing. `iov` is a live array of
    // `iov.len()` (at most `MAX_IOVECS`, so it fits a `c_int`) initialised `iovec`s.
    let n = unsafe {
        libc::preadv(
            fd.as_raw_fd(),
            iov.as_ptr(),
            iov.len() as libc::c_int,
            offset,
        )
    };
    let n = usize::try_from(n).map_err(|_| super::last_errno())?;
    let mut left = n;
    for b in bufs {
        if left == 0 {
            break;
        }
        let done = left.min(b.len());
        b.bitmap().mark_dirty(0, done);
        left -= done;
    }
    Ok(n)
}

/// `pwritev(2)` of `bufs`, in order, to `fd` at `offset` (appending on an `O_APPEND`
/// descriptor, whatever the offset): the bytes written, at most the sum of the first
/// [`MAX_IOVECS`] buffers' lengths.
///
/// # Errors
/// `EBADF` (not open for writing), `ENOSPC`, `EFBIG`, `EINVAL`, `EFAULT`, ...
pub fn pwritev_volatile<B: BitmapSlice>(
    fd: BorrowedFd<'_>,
    bufs: &[VolatileSlice<'_, B>],
    offset: u64,
) -> Result<usize> {
    let iov = iovecs(bufs);
    let offset = offset_of(offset)?;
    // SAFETY: as in `preadv_volatile`; here the kernel only reads the ranges, which the
    // slices' contract says are mapped and readable for the call.
    let n = unsafe {
        libc::pwritev(
            fd.as_raw_fd(),
            iov.as_ptr(),
            iov.len() as libc::c_int,
            offset,
        )
    };
    usize::try_from(n).map_err(|_| super::last_errno())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Memory the test owns, seen as volatile slices of `sizes` bytes each.
    fn slices<'a>(mem: &'a mut [u8], sizes: &[usize]) -> Vec<VolatileSlice<'a, ()>> {
        let mut at = 0;
        sizes
            .iter()
            .map(|&n| {
                let s = mem[at..at + n].as_mut_ptr();
                at += n;
                // SAFETY: the slices borrow `mem` mutably for their lifetime `'a`, so the
                // range stays valid and nothing else reads or writes it while they live.
                unsafe { VolatileSlice::new(s, n) }
            })
            .collect()
    }

    #[test]
    fn reads_and_writes_across_buffers_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();

        let mut mem = vec![0u8; 6000];
        let bufs = slices(&mut mem, &[1, 4095, 1, 1903]);
        assert_eq!(preadv_volatile(file.as_fd(), &bufs, 3).unwrap(), 6000);
        drop(bufs);
        assert_eq!(mem, data[3..6003]);

        // At the end of the file: short, then 0.
        let bufs = slices(&mut mem, &[6000]);
        assert_eq!(preadv_volatile(file.as_fd(), &bufs, 9000).unwrap(), 1000);
        assert_eq!(preadv_volatile(file.as_fd(), &bufs, 10_000).unwrap(), 0);
        drop(bufs);
        assert_eq!(mem[..1000], data[9000..]);

        let mut out: Vec<u8> = (0..5000u32).map(|i| (i % 7) as u8).collect();
        let expected = out.clone();
        let bufs = slices(&mut out, &[2, 4998]);
        assert_eq!(pwritev_volatile(file.as_fd(), &bufs, 20_000).unwrap(), 5000);
        drop(bufs);
        let back = std::fs::read(&path).unwrap();
        assert_eq!(back.len(), 25_000);
        assert_eq!(back[20_000..], expected);
        assert!(back[10_000..20_000].iter().all(|&b| b == 0), "a hole");
    }

    #[test]
    fn takes_at_most_max_iovecs_buffers_and_refuses_huge_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 2 * MAX_IOVECS]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let mut mem = vec![0u8; MAX_IOVECS + 10];
        let bufs = slices(&mut mem, &[1; MAX_IOVECS + 10]);
        assert_eq!(preadv_volatile(file.as_fd(), &bufs, 0).unwrap(), MAX_IOVECS);
        assert_eq!(
            preadv_volatile(file.as_fd(), &bufs, u64::MAX),
            Err(Errno::INVAL)
        );
        // Not open for writing.
        assert_eq!(pwritev_volatile(file.as_fd(), &bufs, 0), Err(Errno::BADF));
        drop(bufs);
        assert_eq!(mem[..MAX_IOVECS], [7u8; MAX_IOVECS]);
        assert_eq!(mem[MAX_IOVECS..], [0u8; 10]);
    }
}
