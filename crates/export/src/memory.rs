//! Bytes held, counted from what was allocated rather than estimated: the size of an `Arc`'s
//! allocation, and [`Gauge`], which keeps a running total of buffers whose capacity changes.
//! Both doors report these figures in their statistics (`crossfs stats`).
//!
//! A count here is what Rust asked the allocator for (the layout's size); the allocator's
//! own overhead per block (a few bytes, rounding to its size classes) is not included.

use std::alloc::Layout;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Bytes of the allocation behind one `Arc<T>`: its two counts and the value.
pub fn arc_bytes<T>() -> usize {
    let counts = Layout::new::<[usize; 2]>();
    match counts.extend(Layout::new::<T>()) {
        Ok((layout, _)) => layout.pad_to_align().size(),
        // Only a type larger than isize::MAX fails, and no value of it can exist.
        Err(_) => usize::MAX,
    }
}

/// Bytes of the buffer of a `Vec<T>` or `VecDeque<T>` of this capacity.
pub fn buffer_bytes<T>(capacity: usize) -> usize {
    capacity.saturating_mul(std::mem::size_of::<T>())
}

/// One buffer's share of a shared total: [`Gauge::set`] moves the total by the change since
/// the last call, and dropping the gauge takes its share back out. So a total fed by the
/// gauges of several threads' buffers is always the sum of their last reported sizes.
#[derive(Debug)]
pub struct Gauge<'a> {
    total: &'a AtomicUsize,
    held: usize,
}

impl<'a> Gauge<'a> {
    /// A gauge holding nothing yet, adding to `total`.
    pub fn new(total: &'a AtomicUsize) -> Self {
        Gauge { total, held: 0 }
    }

    /// Records that the buffer now holds `bytes`.
    pub fn set(&mut self, bytes: usize) {
        if bytes > self.held {
            self.total.fetch_add(bytes - self.held, Relaxed);
        } else if bytes < self.held {
            self.total.fetch_sub(self.held - bytes, Relaxed);
        }
        self.held = bytes;
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// A global allocator that counts, per thread, the bytes allocated and not yet freed: what
/// the memory figures here and in the server are checked against in tests. Only with the
/// `counting-alloc` feature (and this crate's own tests); a test crate installs it with
/// `#[global_allocator] static A: CountingAllocator = CountingAllocator;`.
#[cfg(any(test, feature = "counting-alloc"))]
#[allow(unsafe_code)]
pub mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// See the module doc.
    pub struct CountingAllocator;

    thread_local! {
        static HELD: Cell<isize> = const { Cell::new(0) };
    }

    fn add(n: isize) {
        // `try_with`: allocations made while the thread's locals are torn down go uncounted.
        let _ = HELD.try_with(|h| h.set(h.get() + n));
    }

    // SAFETY: every call is passed on to the system allocator unchanged; the counting only
    // touches a thread-local `Cell`, which never allocates.
    unsafe impl GlobalAlloc for CountingAllocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size() as isize);
            // SAFETY: the caller's contract is passed on.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(-(layout.size() as isize));
            // SAFETY: the caller's contract is passed on.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(new_size as isize - layout.size() as isize);
            // SAFETY: the caller's contract is passed on.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    /// Bytes this thread has allocated and not freed (0 unless the allocator is installed).
    pub fn held_by_this_thread() -> isize {
        HELD.with(Cell::get)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The figures checked against the allocator ([`super::counting`], installed for this
    //! crate's tests).

    pub(crate) use super::counting::held_by_this_thread;
    use super::counting::CountingAllocator;
    use super::*;
    use std::sync::Arc;

    #[global_allocator]
    static COUNTING: CountingAllocator = CountingAllocator;

    #[test]
    fn arc_bytes_is_what_an_arc_allocates() {
        fn check<T>(value: T) {
            let before = held_by_this_thread();
            let a = Arc::new(value);
            assert_eq!(
                held_by_this_thread() - before,
                arc_bytes::<T>() as isize,
                "{}",
                std::any::type_name::<T>()
            );
            drop(a);
        }
        check(0u8);
        check([0u64; 5]);
        check((0u16, 0u128));
        check(std::sync::Mutex::new(vec![0u8; 0]));
    }

    #[test]
    fn buffer_bytes_is_what_a_vec_allocates() {
        let before = held_by_this_thread();
        let mut v: Vec<(u32, u64)> = Vec::new();
        for i in 0..1000 {
            v.push((i, 0));
        }
        assert_eq!(
            held_by_this_thread() - before,
            buffer_bytes::<(u32, u64)>(v.capacity()) as isize
        );
    }

    #[test]
    fn gauges_sum_their_last_sizes_and_give_them_back() {
        let total = AtomicUsize::new(0);
        let mut a = Gauge::new(&total);
        let mut b = Gauge::new(&total);
        a.set(100);
        b.set(50);
        a.set(30);
        assert_eq!(total.load(Relaxed), 80);
        b.set(50);
        assert_eq!(total.load(Relaxed), 80);
        drop(a);
        assert_eq!(total.load(Relaxed), 50);
        b.set(0);
        drop(b);
        assert_eq!(total.load(Relaxed), 0);
    }
}
