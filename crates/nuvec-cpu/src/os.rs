//! The one place with platform-specific code in this crate: large zeroed memory straight from
//! the operating system (lazily zeroed pages, huge pages on Linux).

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
