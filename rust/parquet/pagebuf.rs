//! Buffers for decompressed pages, reused: a page's buffer goes back to a small pool when
//! the last Arrow array over it is dropped (the token decoder hands a page's decompressed
//! buffer to Python as the values themselves), and the next page is decompressed into it.
//!
//! glibc returns the top of its heap to the OS once more than its trim threshold is free
//! there, so a stream that frees a window of ~1 MiB page buffers and allocates the next
//! faults every page of them in again, zero-filled: 17–20 page faults per 1 MiB page read
//! (random page reads, one thread), against 0.6 with the heap never trimmed. Reusing the
//! buffers here keeps that off the read path without changing the allocator for the rest
//! of the process; the pool's bytes are capped, so memory stays a fixed buffer.

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use arrow_buffer::Buffer;

/// Buffers larger than this are not kept (a page this large is rare and would pin its size).
const MAX_POOLED_BUFFER: usize = 8 << 20;
/// The most bytes the pool keeps.
const POOL_BYTES: usize = 32 << 20;

/// Free buffers, capped in bytes (a pure value, so its policy is tested alone).
struct Pool {
    bufs: Vec<Vec<u8>>,
    /// The sum of the buffers' capacities.
    bytes: usize,
    cap: usize,
}

impl Pool {
    /// The smallest buffer that holds `size` bytes, emptied.
    fn take(&mut self, size: usize) -> Option<Vec<u8>> {
        let fit = self.bufs.iter().enumerate().filter(|(_, b)| b.capacity() >= size).min_by_key(|(_, b)| b.capacity());
        let mut buf = self.bufs.swap_remove(fit?.0);
        self.bytes -= buf.capacity();
        buf.clear();
        Some(buf)
    }

    /// Keep `buf` if it fits under the cap (`false`: dropped).
    fn give(&mut self, buf: Vec<u8>) -> bool {
        let size = buf.capacity();
        if size == 0 || size > MAX_POOLED_BUFFER || self.bytes + size > self.cap {
            return false;
        }
        self.bytes += size;
        self.bufs.push(buf);
        true
    }
}

static POOL: Mutex<Pool> = Mutex::new(Pool { bufs: Vec::new(), bytes: 0, cap: POOL_BYTES });

/// A decompressed page's bytes; its buffer returns to the pool when dropped.
pub(crate) struct PageBuf(Vec<u8>);

impl PageBuf {
    /// An empty buffer with room for at least `size` bytes: the smallest pooled one that
    /// fits, else a new one.
    pub fn with_capacity(size: usize) -> PageBuf {
        // try_lock: a pool locked by a thread that a fork left behind is never waited on
        let pooled = POOL.try_lock().ok().and_then(|mut p| p.take(size));
        PageBuf(pooled.unwrap_or_else(|| Vec::with_capacity(size)))
    }

    pub fn vec_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }

    /// Bytes `[offset, offset + len)` as an Arrow buffer that owns this one (no copy).
    pub fn into_arrow(self, offset: usize, len: usize) -> Buffer {
        let size = self.0.len();
        let Some(ptr) = NonNull::new(self.0.as_ptr().cast_mut()) else {
            return Buffer::from_vec(Vec::<u8>::new());
        };
        // SAFETY: `ptr` points at `size` initialised bytes of the Vec that `owner` holds; a
        // Vec's heap block does not move when the Vec itself is moved into the Arc, and it
        // is neither written nor freed until `owner` is dropped.
        let whole = unsafe { Buffer::from_custom_allocation(ptr, size, Arc::new(self)) };
        whole.slice_with_length(offset, len)
    }
}

impl Deref for PageBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        if let Ok(mut pool) = POOL.try_lock() {
            pool.give(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(cap: usize) -> Pool {
        Pool { bufs: Vec::new(), bytes: 0, cap }
    }

    #[test]
    fn a_page_gets_the_smallest_free_buffer_that_holds_it() {
        let mut p = pool(64 << 20);
        for size in [4 << 20, 1 << 20, 2 << 20] {
            assert!(p.give(vec![1u8; size]));
        }
        let b = p.take(1500 << 10).expect("a buffer fits");
        assert!(b.is_empty() && b.capacity() >= 1500 << 10 && b.capacity() < 4 << 20);
        assert_eq!(p.bytes, (4 << 20) + (1 << 20));
        assert!(p.take(5 << 20).is_none());
    }

    #[test]
    fn the_pool_keeps_at_most_its_cap_and_no_oversized_or_empty_buffer() {
        let mut p = pool(3 << 20);
        assert!(!p.give(Vec::new()));
        assert!(!p.give(Vec::with_capacity(MAX_POOLED_BUFFER + 1)));
        assert!(p.give(Vec::with_capacity(2 << 20)));
        assert!(!p.give(Vec::with_capacity(2 << 20)));
        assert_eq!(p.bytes, p.bufs.iter().map(Vec::capacity).sum::<usize>());
        assert!(p.bytes <= 3 << 20);
    }

    #[test]
    fn an_arrow_buffer_over_a_page_reads_its_bytes_and_outlives_the_page_value() {
        let mut a = PageBuf::with_capacity(1 << 16);
        a.vec_mut().extend((0..1u32 << 16).map(|i| i as u8));
        let arrow = a.into_arrow(3, 100);
        assert_eq!(arrow.len(), 100);
        assert_eq!(&arrow.as_slice()[..3], &[3, 4, 5]);
        let clone = arrow.clone();
        drop(arrow);
        assert_eq!(clone.as_slice()[99], 102);
    }
}
