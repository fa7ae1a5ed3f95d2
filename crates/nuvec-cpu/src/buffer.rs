//! Aligned host memory that an array's elements live in.
//!
//! A [`Buffer`] is either memory nuvec allocated (64-byte aligned, zero-initialised) or a
//! caller's memory adopted with a deleter, read without a copy when it is aligned for its type.

use crate::element::Element;
use std::alloc::{self, Layout};
use std::collections::BTreeMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Mutex;

use crate::os;

/// Alignment of buffers nuvec allocates: a cache line, enough for every SIMD width.
const ALIGN: usize = 64;
/// Buffers at least this large are mapped from the OS (zeroed lazily, in huge pages where
/// available) and recycled through the cache when dropped.
const MAP_THRESHOLD: usize = 1 << 20;
/// Mapped sizes are rounded up to this, so arrays of nearby sizes share cached buffers.
const MAP_GRANULE: usize = 1 << 16;
/// Heap buffers at least this large (and below [`MAP_THRESHOLD`]) have sizes rounded up to
/// [`HEAP_GRANULE`]; smaller ones to an eighth of their next power of two (at least
/// [`ALIGN`]), so from 512 bytes up a block is at most a quarter larger than asked for.
/// Every heap size is recycled: a fresh buffer is zeroed, which costs as much as the op that
/// fills it (a 768 KiB `recv` took twice a 1 MiB one's time per byte, and an aligned allocation of
/// 4 KiB, zeroed, was a tenth of a 2-rank 4 KiB `all_sum`: `docs/performance.md`, "Tuning
/// measurements").
const LARGE_HEAP: usize = 64 << 10;
/// Large heap sizes are rounded up to this.
const HEAP_GRANULE: usize = 4 << 10;

/// Freed buffers kept for reuse, by block: allocating, zeroing and faulting in fresh pages
/// costs more than the element-wise op that fills them (MLX keeps such a cache too).
struct Cache {
    free: BTreeMap<Block, Vec<SendPtr>>,
    bytes: usize,
    limit: usize,
}

/// Where a cached block came from, with its length in bytes: how it is returned.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Block {
    Mapped(usize),
    Heap(usize),
}

impl Block {
    fn len(self) -> usize {
        match self {
            Block::Mapped(len) | Block::Heap(len) => len,
        }
    }

    /// The block a buffer of `bytes` takes.
    fn for_bytes(bytes: usize) -> Block {
        if bytes >= MAP_THRESHOLD {
            Block::Mapped(bytes.div_ceil(MAP_GRANULE) * MAP_GRANULE)
        } else if bytes >= LARGE_HEAP {
            Block::Heap(bytes.div_ceil(HEAP_GRANULE) * HEAP_GRANULE)
        } else {
            let step = (bytes.next_power_of_two() / 8).max(ALIGN);
            Block::Heap(bytes.max(1).div_ceil(step) * step)
        }
    }

    /// Returns the block at `ptr` to the OS or the allocator.
    ///
    /// # Safety
    /// `ptr` must be this block's memory (mapped with this length, or allocated with this
    /// length and [`ALIGN`]), and nothing may use it afterwards.
    unsafe fn release(self, ptr: NonNull<u8>) {
        match self {
            // SAFETY: the caller's promise.
            Block::Mapped(len) => unsafe { os::unmap(ptr, len) },
            Block::Heap(len) => {
                let layout = Layout::from_size_align(len, ALIGN).expect("a cached layout");
                // SAFETY: the caller's promise.
                unsafe { alloc::dealloc(ptr.as_ptr(), layout) }
            }
        }
    }
}

/// A block in the cache; only the cache touches it.
struct SendPtr(NonNull<u8>);
// SAFETY: a cached block is owned by the cache alone (no buffer points into it).
unsafe impl Send for SendPtr {}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    free: BTreeMap::new(),
    bytes: 0,
    limit: 1 << 30,
});

fn cache() -> std::sync::MutexGuard<'static, Cache> {
    CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Returns every cached block to the OS (MLX's `clear_cache`).
pub fn clear_cache() {
    let blocks = {
        let mut cache = cache();
        cache.bytes = 0;
        std::mem::take(&mut cache.free)
    };
    for (block, ptrs) in blocks {
        for ptr in ptrs {
            // SAFETY: cached blocks are live blocks of their kind and length that nothing uses.
            unsafe { block.release(ptr.0) };
        }
    }
}

/// Sets how many bytes of freed buffers the cache may keep (default 1 GiB); returns the old
/// limit. 0 disables caching.
pub fn set_cache_limit(bytes: usize) -> usize {
    let old = std::mem::replace(&mut cache().limit, bytes);
    if bytes < old {
        clear_cache();
    }
    old
}

/// Bytes currently held by the cache.
pub fn cache_bytes() -> usize {
    cache().bytes
}

/// Who frees a buffer's memory.
enum Owner {
    /// nuvec allocated it with this layout.
    Allocated(Layout),
    /// Mapped from the OS, `len` bytes (a multiple of the granule).
    Mapped(usize),
    /// The caller's memory; the closure releases it. `writable` says whether nuvec may
    /// reuse it for results.
    External {
        deleter: Option<Box<dyn FnOnce() + Send>>,
        writable: bool,
    },
}

/// A block of host memory holding elements of one type.
pub struct Buffer {
    ptr: NonNull<u8>,
    bytes: usize,
    owner: Owner,
}

// SAFETY: the buffer owns its memory exclusively (or, for external memory, the caller promised
// through `from_external` that nothing else writes it), so moving it across threads is sound.
unsafe impl Send for Buffer {}
// SAFETY: shared access only reads; writes need `&mut Buffer`.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Allocates `bytes` zeroed bytes, 64-byte aligned.
    ///
    /// # Panics
    /// When the allocator fails, as `Vec` does.
    pub fn zeroed(bytes: usize) -> Buffer {
        let size = match Block::for_bytes(bytes) {
            Block::Mapped(len) => match os::map_zeroed(len) {
                Some(ptr) => {
                    return Buffer {
                        ptr,
                        bytes,
                        owner: Owner::Mapped(len),
                    }
                }
                // The mapping failed: the heap, at exactly the size asked for (such a
                // buffer is not cached, since its block would be a mapping).
                None => bytes,
            },
            Block::Heap(len) => len,
        };
        let Ok(layout) = Layout::from_size_align(size, ALIGN) else {
            alloc::handle_alloc_error(Layout::new::<u8>())
        };
        // SAFETY: the layout has a nonzero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        Buffer {
            ptr,
            bytes,
            owner: Owner::Allocated(layout),
        }
    }

    /// A buffer for a result that will be written in full: a recycled block when the cache
    /// has one of this size (its old contents are overwritten), else fresh zeroed memory.
    pub fn for_output(bytes: usize) -> Buffer {
        let block = Block::for_bytes(bytes);
        let recycled = {
            let mut cache = cache();
            let ptr = cache.free.get_mut(&block).and_then(Vec::pop);
            if ptr.is_some() {
                cache.bytes -= block.len();
            }
            ptr
        };
        let Some(ptr) = recycled else {
            return Buffer::zeroed(bytes);
        };
        let owner = match block {
            Block::Mapped(len) => Owner::Mapped(len),
            Block::Heap(len) => {
                Owner::Allocated(Layout::from_size_align(len, ALIGN).expect("a cached layout"))
            }
        };
        Buffer {
            ptr: ptr.0,
            bytes,
            owner,
        }
    }

    /// A buffer holding a copy of `values`.
    pub fn from_slice<T: Element>(values: &[T]) -> Buffer {
        let mut buffer = Buffer::for_output(size_of_val(values));
        buffer.as_mut_slice::<T>().copy_from_slice(values);
        buffer
    }

    /// Adopts `bytes` bytes at `ptr` owned by the caller; `deleter` runs when the buffer drops.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `bytes` bytes until `deleter` runs, and
    /// nothing else may access that memory meanwhile.
    pub unsafe fn from_external(
        ptr: NonNull<u8>,
        bytes: usize,
        deleter: Box<dyn FnOnce() + Send>,
    ) -> Buffer {
        Buffer {
            ptr,
            bytes,
            owner: Owner::External {
                deleter: Some(deleter),
                writable: true,
            },
        }
    }

    /// Adopts a caller's container without copying it; the container drops with the buffer.
    /// The memory is read-only to nuvec (never reused for results).
    pub fn from_owner<T: Element, O: AsRef<[T]> + Send + 'static>(owner: O) -> Buffer {
        // Boxed so the container itself never moves while the buffer points into it.
        let boxed = Box::new(owner);
        let slice: &[T] = (*boxed).as_ref();
        let bytes = size_of_val(slice);
        let ptr =
            NonNull::new(slice.as_ptr() as *mut u8).unwrap_or(NonNull::<T>::dangling().cast());
        let deleter: Box<dyn FnOnce() + Send> = Box::new(move || drop(boxed));
        Buffer {
            ptr,
            bytes,
            owner: Owner::External {
                deleter: Some(deleter),
                writable: false,
            },
        }
    }

    /// Whether nuvec may write this memory (reuse it for a result).
    pub fn is_writable(&self) -> bool {
        match self.owner {
            Owner::Allocated(_) | Owner::Mapped(_) => true,
            Owner::External { writable, .. } => writable,
        }
    }

    /// Size in bytes.
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the memory is aligned for `T` (always true for memory nuvec allocated).
    pub fn is_aligned_for<T>(&self) -> bool {
        (self.ptr.as_ptr() as usize).is_multiple_of(align_of::<T>())
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: ptr is valid for `bytes` bytes for the buffer's lifetime (allocation or
        // the `from_external` contract), and `&self` excludes writers.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.bytes) }
    }

    /// The raw bytes, writable.
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        assert!(self.is_writable(), "buffer is read-only");
        // SAFETY: as `as_bytes`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.bytes) }
    }

    /// The elements, read as `T`.
    ///
    /// # Panics
    /// When the memory is not aligned for `T` (only possible for external memory, which the
    /// array layer copies instead) — a bug in the caller, not bad user input.
    pub fn as_slice<T: Element>(&self) -> &[T] {
        assert!(
            self.is_aligned_for::<T>(),
            "buffer not aligned for {}",
            T::DTYPE
        );
        let len = self.bytes / size_of::<T>();
        // SAFETY: aligned (checked), valid for `len * size_of::<T>()` bytes, and every bit
        // pattern is a valid `T` except for bool, whose buffers only nuvec writes with 0/1
        // (external bool memory is validated by the array layer before adoption).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<T>(), len) }
    }

    /// The elements, writable as `T`.
    ///
    /// # Panics
    /// As [`Buffer::as_slice`].
    pub fn as_mut_slice<T: Element>(&mut self) -> &mut [T] {
        assert!(self.is_writable(), "buffer is read-only");
        assert!(
            self.is_aligned_for::<T>(),
            "buffer not aligned for {}",
            T::DTYPE
        );
        let len = self.bytes / size_of::<T>();
        // SAFETY: as `as_slice`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<T>(), len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let block = match &mut self.owner {
            Owner::Allocated(layout) => {
                let cached = Block::Heap(layout.size());
                if Block::for_bytes(self.bytes) == cached {
                    cached
                } else {
                    // SAFETY: allocated in `zeroed` with exactly this layout.
                    unsafe { alloc::dealloc(self.ptr.as_ptr(), *layout) };
                    return;
                }
            }
            Owner::Mapped(len) => Block::Mapped(*len),
            Owner::External { deleter, .. } => {
                if let Some(deleter) = deleter.take() {
                    deleter();
                }
                return;
            }
        };
        let mut cache = cache();
        if cache.bytes + block.len() <= cache.limit {
            cache.bytes += block.len();
            cache.free.entry(block).or_default().push(SendPtr(self.ptr));
        } else {
            drop(cache);
            // SAFETY: the buffer's own block (allocated or mapped in `zeroed` with this
            // length), which is being dropped.
            unsafe { block.release(self.ptr) };
        }
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.owner {
            Owner::Allocated(_) => "allocated",
            Owner::Mapped(_) => "mapped",
            Owner::External { .. } => "external",
        };
        f.debug_struct("Buffer")
            .field("bytes", &self.bytes)
            .field("owner", &kind)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn allocated_buffers_are_zeroed_and_aligned() {
        let buffer = Buffer::zeroed(40);
        assert!(buffer.as_slice::<f64>().iter().all(|v| *v == 0.0));
        assert_eq!(buffer.as_bytes().as_ptr() as usize % ALIGN, 0);
    }

    #[test]
    fn mid_size_buffers_are_recycled_for_outputs_but_not_for_zeroed_ones() {
        // An odd size no other test of this crate uses, so the cache hands back this block.
        let bytes = 300_000 + 17;
        let mut first = Buffer::zeroed(bytes);
        assert!(first.as_bytes().iter().all(|b| *b == 0));
        first.as_mut_bytes()[bytes - 1] = 9;
        let address = first.as_bytes().as_ptr() as usize;
        drop(first);
        let reused = Buffer::for_output(bytes - 100);
        assert_eq!(reused.as_bytes().as_ptr() as usize, address);
        assert_eq!(reused.len_bytes(), bytes - 100);
        // A zeroed buffer never comes from the cache.
        drop(reused);
        assert!(Buffer::zeroed(bytes).as_bytes().iter().all(|b| *b == 0));
    }

    #[test]
    fn large_buffers_are_zeroed_and_recycled() {
        let bytes = 3 << 20;
        let mut first = Buffer::zeroed(bytes);
        assert!(first.as_slice::<u64>().iter().all(|v| *v == 0));
        first.as_mut_slice::<u64>()[0] = 7;
        let address = first.as_bytes().as_ptr() as usize;
        drop(first);
        let reused = Buffer::for_output(bytes);
        // No other test of this crate maps buffers, so the cache hands back this very block.
        assert_eq!(reused.as_bytes().as_ptr() as usize, address);
        assert_eq!(reused.len_bytes(), bytes);
        assert!(
            Buffer::zeroed(bytes)
                .as_slice::<u64>()
                .iter()
                .all(|v| *v == 0),
            "zeroed never recycles"
        );
    }

    #[test]
    fn external_buffer_runs_its_deleter_once_on_drop() {
        let mut storage = vec![1.0f32, 2.0];
        let freed = Arc::new(AtomicBool::new(false));
        let flag = freed.clone();
        let ptr = NonNull::new(storage.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `storage` outlives the buffer and is not touched while it lives.
        let buffer = unsafe {
            Buffer::from_external(ptr, 8, Box::new(move || flag.store(true, Ordering::SeqCst)))
        };
        assert_eq!(buffer.as_slice::<f32>(), &[1.0, 2.0]);
        drop(buffer);
        assert!(freed.load(Ordering::SeqCst));
    }
}
