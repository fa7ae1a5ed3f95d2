//! How long a cache line takes to go from one core to the other and back, in nanoseconds: two
//! threads pinned to cores 0 and 1 (Linux) pass a counter back and forth. On the project's
//! 2-core VMs it reads about 75 ns or about 320 ns, depending on where the host runs the two
//! virtual CPUs at the time (`docs/performance.md`, "Streaming stores" under "Tuning measurements").
//!
//! ```text
//! rustc --edition 2021 -O scripts/bench/cross_core.rs -o target/cross_core
//! target/cross_core            # one reading: the least of five samples of 20000 round trips
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

const TRIPS: u32 = 20_000;

/// Pins the calling thread to `core` (Linux; elsewhere the threads stay unpinned).
#[cfg(target_os = "linux")]
fn pin(core: usize) {
    #[repr(C)]
    struct CpuSet([u64; 16]);
    extern "C" {
        fn sched_setaffinity(pid: i32, size: usize, set: *const CpuSet) -> i32;
    }
    let mut set = CpuSet([0; 16]);
    set.0[core / 64] |= 1 << (core % 64);
    // SAFETY: `set` is a valid cpu_set_t-sized mask for the call's duration; pid 0 is the
    // calling thread. A failure (fewer cores) leaves the thread unpinned.
    unsafe {
        sched_setaffinity(0, std::mem::size_of::<CpuSet>(), &set);
    }
}

#[cfg(not(target_os = "linux"))]
fn pin(_core: usize) {}

fn sample() -> f64 {
    let turn = AtomicU32::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            pin(1);
            for trip in 0..TRIPS {
                while turn.load(Ordering::Acquire) != 2 * trip + 1 {
                    std::hint::spin_loop();
                }
                turn.store(2 * trip + 2, Ordering::Release);
            }
        });
        pin(0);
        let start = Instant::now();
        for trip in 0..TRIPS {
            turn.store(2 * trip + 1, Ordering::Release);
            while turn.load(Ordering::Acquire) != 2 * trip + 2 {
                std::hint::spin_loop();
            }
        }
        start.elapsed().as_secs_f64() * 1e9 / f64::from(TRIPS)
    })
}

fn main() {
    let least = (0..5).map(|_| sample()).fold(f64::INFINITY, f64::min);
    println!("{least:.0}");
}
