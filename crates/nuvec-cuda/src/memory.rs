//! Device memory: plain device allocations (never managed memory, which can hang a shared GPU
//! when oversubscribed) kept in a cache when freed, as MLX and PyTorch keep theirs. Sizes are
//! rounded up to a class (a power of two below 1 MiB, then whole 2 MiB) so that arrays of
//! nearby sizes reuse each other's blocks; the cache holds at most [`CACHE_LIMIT`] bytes and
//! [`Pool::clear`] gives everything back.

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The most bytes of freed blocks a device keeps for reuse.
pub const CACHE_LIMIT: usize = 8 << 30;
/// The smallest block allocated.
const SMALLEST: usize = 256;
/// Blocks from this size on are rounded to whole multiples of [`GRANULE`].
const LARGE: usize = 1 << 20;
const GRANULE: usize = 2 << 20;

/// The size class a request of `bytes` is served from.
pub fn size_class(bytes: usize) -> usize {
    if bytes < LARGE {
        bytes.max(SMALLEST).next_power_of_two()
    } else {
        bytes.div_ceil(GRANULE) * GRANULE
    }
}

#[derive(Debug, Default)]
struct Cached {
    free: BTreeMap<usize, Vec<CudaSlice<u8>>>,
    bytes: usize,
}

/// A device's allocator.
#[derive(Debug)]
pub struct Pool {
    stream: Arc<CudaStream>,
    cached: Arc<Mutex<Cached>>,
}

impl Pool {
    /// A pool allocating on `stream`'s device, in its order.
    pub fn new(stream: Arc<CudaStream>) -> Pool {
        Pool {
            stream,
            cached: Arc::default(),
        }
    }

    /// A block of at least `bytes` bytes: a cached one of its class, or a new allocation (after
    /// freeing the cache once, if the device is out of memory).
    pub fn take(&self, bytes: usize) -> Result<DeviceBuffer, String> {
        let class = size_class(bytes);
        let reused = {
            let mut cached = lock(&self.cached);
            let block = cached.free.get_mut(&class).and_then(Vec::pop);
            if block.is_some() {
                cached.bytes -= class;
            }
            block
        };
        let block = match reused {
            Some(block) => block,
            None => self.allocate(class).or_else(|_| {
                self.clear();
                self.allocate(class)
            })?,
        };
        Ok(DeviceBuffer {
            block: Some(block),
            len: bytes,
            cached: self.cached.clone(),
        })
    }

    fn allocate(&self, class: usize) -> Result<CudaSlice<u8>, String> {
        // SAFETY: the block's contents are unspecified until written, as `take` documents;
        // every kernel writes its output before anything reads it.
        unsafe { self.stream.alloc::<u8>(class) }
            .map_err(|e| format!("{class} bytes of device memory: {e}"))
    }

    /// Gives every cached block back to the device.
    pub fn clear(&self) {
        let mut cached = lock(&self.cached);
        cached.free.clear();
        cached.bytes = 0;
    }

    /// The bytes of freed blocks kept for reuse.
    pub fn cached_bytes(&self) -> usize {
        lock(&self.cached).bytes
    }
}

fn lock(cached: &Mutex<Cached>) -> std::sync::MutexGuard<'_, Cached> {
    cached
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A block of device memory holding `len` bytes; back to its pool's cache when dropped.
pub struct DeviceBuffer {
    block: Option<CudaSlice<u8>>,
    len: usize,
    cached: Arc<Mutex<Cached>>,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({} bytes)", self.len)
    }
}

impl DeviceBuffer {
    /// The bytes it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole block, for reading.
    pub fn slice(&self) -> CudaView<'_, u8> {
        self.block.as_ref().expect("a live buffer").slice(..)
    }

    /// The whole block, for writing.
    pub fn slice_mut(&mut self) -> CudaViewMut<'_, u8> {
        self.block.as_mut().expect("a live buffer").slice_mut(..)
    }

    /// The block itself (kernel launches take it).
    pub fn block(&self) -> &CudaSlice<u8> {
        self.block.as_ref().expect("a live buffer")
    }

    /// The block itself, for a kernel that writes it.
    pub fn block_mut(&mut self) -> &mut CudaSlice<u8> {
        self.block.as_mut().expect("a live buffer")
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        let class = block.len();
        let mut cached = lock(&self.cached);
        if cached.bytes + class <= CACHE_LIMIT {
            cached.bytes += class;
            cached.free.entry(class).or_default().push(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_to_powers_of_two_then_to_granules() {
        assert_eq!(size_class(0), 256);
        assert_eq!(size_class(257), 512);
        assert_eq!(size_class((1 << 20) - 1), 1 << 20);
        assert_eq!(size_class(1 << 20), 2 << 20);
        assert_eq!(size_class((2 << 20) + 1), 4 << 20);
        assert_eq!(size_class(5 << 20), 6 << 20);
    }
}
