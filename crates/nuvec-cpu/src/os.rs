//! The one place with platform-specific code in this crate: large zeroed memory straight from
//! the operating system (lazily zeroed pages, huge pages on Linux), loops compiled for the
//! CPU's widest vectors, and the CPU's own counter for cheap timestamps.

#[cfg(target_arch = "x86_64")]
mod bf16_dot;

/// Whether this CPU multiplies 4-bit or bfloat16 weights by bfloat16 activations with
/// bfloat16 dot products ([`bf16_dot_part`], [`bf16_dense_rows`]): x86-64 with AVX-512 BF16.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_bf16_dot() -> bool {
    bf16_dot::available()
}

/// One part of a 4-bit × bfloat16 product (see `os/bf16_dot.rs`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn bf16_dot_part(
    operands: &crate::quantized::bfloat16::Operands<'_>,
    first_row: usize,
    part: &mut [f32],
) {
    bf16_dot::part(operands, first_row, part);
}

/// Dot products of bfloat16 weight rows with bfloat16 activations (see `os/bf16_dot.rs`):
/// `out[r·m + i]` for weight rows `first_row..` and the `m` rows of `x`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn bf16_dense_rows(
    w: &[u16],
    x: &[u16],
    shape: (usize, usize),
    first_row: usize,
    out: &mut [f32],
) {
    bf16_dot::rows_bf16(w, x, shape, first_row, out);
}

/// Never called: [`has_bf16_dot`] is false here.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn bf16_dense_rows(_: &[u16], _: &[u16], _: (usize, usize), _: usize, _: &mut [f32]) {
    unreachable!("bf16_dense_rows: no bfloat16 dot products on this architecture");
}

/// Whether this CPU multiplies 4-bit weights by bfloat16 activations with bfloat16 dot
/// products: not on this architecture.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn has_bf16_dot() -> bool {
    false
}

/// Never called: [`has_bf16_dot`] is false here.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn bf16_dot_part(_: &crate::quantized::bfloat16::Operands<'_>, _: usize, _: &mut [f32]) {
    unreachable!("bf16_dot_part: no bfloat16 dot products on this architecture");
}

/// Runs `body` compiled for the widest vector instructions this CPU has: AVX2 on x86-64
/// CPUs that have it (the default x86-64 target stops at SSE2's four float lanes), the
/// plain build elsewhere (aarch64's NEON is always on).
///
/// Only wider registers change: Rust never contracts `a * b + c` into a fused multiply-add,
/// so the results are bit for bit those of the plain build. `body` and what it calls should
/// be `#[inline(always)]` so that they are compiled inside the wide function.
#[inline(always)]
pub fn with_wide_vectors<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn wide<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { wide(body) };
        }
    }
    body()
}

/// A reader of a counter that only grows at a constant rate, far cheaper than
/// `Instant::now` (one register read, no call into the OS): the time-stamp counter on x86-64
/// CPUs that say it is invariant (it runs at one rate on every core, whatever their clocks
/// and sleep states), the virtual counter on aarch64. `None` where there is none, and the
/// caller times with `Instant`. The rate is not given: callers measure it against a clock.
/// For timestamps on paths every call takes (the flight recorder's).
///
/// ```
/// if let Some(read) = nuvec_cpu::counter() {
///     let (a, b) = (read(), read());
///     assert!(b >= a);
/// }
/// ```
pub fn counter() -> Option<fn() -> u64> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // Leaf 0x8000_0007's EDX bit 8 is the invariant counter; the leaf exists where the
        // highest extended leaf (0x8000_0000's EAX) reaches it.
        let invariant =
            __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0;
        fn read() -> u64 {
            // SAFETY: `rdtsc` exists on every x86-64 CPU and only reads the counter.
            unsafe { std::arch::x86_64::_rdtsc() }
        }
        invariant.then_some(read as fn() -> u64)
    }
    #[cfg(target_arch = "aarch64")]
    {
        fn read() -> u64 {
            let value: u64;
            // SAFETY: `cntvct_el0` is readable from user space on Linux and macOS; the
            // instruction only reads it into a register.
            unsafe {
                std::arch::asm!("mrs {}, cntvct_el0", out(reg) value, options(nomem, nostack))
            };
            value
        }
        Some(read as fn() -> u64)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    None
}

/// Copies `src` into `dst` (of the same length) with stores that bypass the cache, on
/// x86-64: for outputs far larger than the cache, which would otherwise first read every
/// destination line only to overwrite it. Elsewhere a plain copy.
#[inline(always)]
pub fn copy_streaming<T: Copy>(src: &[T], dst: &mut [T]) {
    assert_eq!(src.len(), dst.len(), "copy_streaming: lengths differ");
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let bytes = size_of_val(src);
        let to = dst.as_mut_ptr().cast::<u8>();
        let from = src.as_ptr().cast::<u8>();
        // Plain stores up to the first 16-byte boundary of `dst`, then whole 16-byte lines.
        let head = to.align_offset(16).min(bytes);
        let lines = (bytes - head) / 16;
        // SAFETY: `src` and `dst` are distinct slices of `bytes` bytes (equal lengths, checked
        // above); every access below stays within them, the streamed stores go to 16-byte
        // aligned addresses of `dst`, and the fence orders them before later stores.
        unsafe {
            std::ptr::copy_nonoverlapping(from, to, head);
            for line in 0..lines {
                let at = head + line * 16;
                let value = _mm_loadu_si128(from.add(at).cast::<__m128i>());
                _mm_stream_si128(to.add(at).cast::<__m128i>(), value);
            }
            let done = head + lines * 16;
            std::ptr::copy_nonoverlapping(from.add(done), to.add(done), bytes - done);
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Memory of at least `bytes` bytes, page aligned and zeroed, from the OS; `None` if the OS
/// refuses. Release it with [`unmap`] and the same `bytes`.
#[cfg(unix)]
pub(crate) fn map_zeroed(bytes: usize) -> Option<std::ptr::NonNull<u8>> {
    // SAFETY: an anonymous private mapping with no address hint touches no existing memory;
    // failure is reported as MAP_FAILED and checked below.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    advise_huge_pages(raw, bytes);
    std::ptr::NonNull::new(raw.cast::<u8>())
}

/// Asks Linux for 2 MiB pages: a 64 MiB array then takes 32 page faults instead of 16384.
#[cfg(target_os = "linux")]
fn advise_huge_pages(raw: *mut libc::c_void, bytes: usize) {
    // SAFETY: `raw..raw + bytes` is the mapping just created; madvise only changes how the
    // kernel backs it, and a refusal leaves it as it was.
    let _ = unsafe { libc::madvise(raw, bytes, libc::MADV_HUGEPAGE) };
}

#[cfg(all(unix, not(target_os = "linux")))]
fn advise_huge_pages(_raw: *mut libc::c_void, _bytes: usize) {}

/// Returns memory from [`map_zeroed`] to the OS.
///
/// # Safety
/// `ptr` and `bytes` must come from one [`map_zeroed`] call, and the memory must not be used
/// afterwards.
#[cfg(unix)]
pub(crate) unsafe fn unmap(ptr: std::ptr::NonNull<u8>, bytes: usize) {
    // SAFETY: the caller passes a live mapping of exactly `bytes` bytes.
    let _ = unsafe { libc::munmap(ptr.as_ptr().cast(), bytes) };
}

/// Without `mmap`, large buffers come from the global allocator instead.
#[cfg(not(unix))]
pub(crate) fn map_zeroed(_bytes: usize) -> Option<std::ptr::NonNull<u8>> {
    None
}

/// Never called without `mmap` (nothing is mapped).
///
/// # Safety
/// As the unix version.
#[cfg(not(unix))]
pub(crate) unsafe fn unmap(_ptr: std::ptr::NonNull<u8>, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copies_equal_plain_copies_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..200u8).collect();
        for from in 0..17 {
            for len in 0..(200 - from).min(90) {
                let mut dst = [0xAAu8; 200];
                copy_streaming(&src[from..from + len], &mut dst[from..from + len]);
                assert_eq!(&dst[from..from + len], &src[from..from + len]);
                assert!(dst[..from].iter().all(|&b| b == 0xAA), "before {from}");
                assert!(
                    dst[from + len..].iter().all(|&b| b == 0xAA),
                    "after {from}+{len}"
                );
            }
        }
    }

    #[test]
    fn wide_vector_loops_compute_what_the_plain_build_does() {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 100.0).collect();
        let plain: Vec<f32> = x.iter().map(|v| v * 1.5 + 2.0 / (v * v + 1.0)).collect();
        let wide = with_wide_vectors(|| {
            x.iter()
                .map(|v| v * 1.5 + 2.0 / (v * v + 1.0))
                .collect::<Vec<f32>>()
        });
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&wide), bits(&plain));
    }
}
