//! The process's peak resident memory, the figure generation reports as "peak memory".
//! The crate's one platform-specific file.

/// Peak resident set size of this process in bytes (0 where the platform does not say).
#[cfg(target_os = "linux")]
pub fn peak_bytes() -> u64 {
    // VmHWM is the high-water mark of the resident set, in KiB.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Peak resident set size of this process in bytes (0 where the platform does not say).
#[cfg(not(target_os = "linux"))]
pub fn peak_bytes() -> u64 {
    0
}
