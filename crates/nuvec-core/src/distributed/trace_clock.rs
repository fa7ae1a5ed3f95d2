//! The flight recorder's clock: a stamp costs one read of the CPU's counter
//! (`nuvec_cpu::counter`: 11 ns on the 2-core AMD EPYC VM of `docs/performance.md`, where
//! `Instant::now` costs about 30), turned into wall-clock time only when records are read,
//! by the counter's rate measured between the clock's start and then. Where the CPU has no such counter, stamps are
//! nanoseconds of `Instant` since the start.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// How long a clock runs before its counter's rate is taken from it: a read sooner waits
/// out the rest (once), so that the rate is known to a part in ten thousand.
const RATE_AFTER: Duration = Duration::from_millis(10);

/// A clock for stamps taken on every call, read as wall-clock times.
#[derive(Debug)]
pub(super) struct Clock {
    read: fn() -> u64,
    /// The stamp, the instant and the wall-clock time at the start.
    start: (u64, Instant, SystemTime),
    /// The stamps per nanosecond and how long after the start they were measured: measured
    /// again only once the clock has run twice as long, so that the same stamp reads the same
    /// between measures, each within a few of `Instant`'s steps of the truth.
    rate: Mutex<(f64, Duration)>,
}

/// Stamps from `Instant`: nanoseconds since a base taken on the first call.
fn instant_stamp() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

impl Clock {
    pub(super) fn new() -> Clock {
        let read = nuvec_cpu::counter().unwrap_or(instant_stamp);
        Clock {
            read,
            start: (read(), Instant::now(), SystemTime::now()),
            rate: Mutex::new((1.0, Duration::ZERO)),
        }
    }

    /// A stamp of now.
    #[inline]
    pub(super) fn stamp(&self) -> u64 {
        (self.read)()
    }

    /// Wall-clock times of this clock's stamps, by the counter's rate since the start.
    pub(super) fn reader(&self) -> impl Fn(u64) -> SystemTime + '_ {
        let (stamp0, instant0, wall0) = self.start;
        let mut rate = crate::array::lock(&self.rate);
        let waited = instant0.elapsed();
        if rate.1.is_zero() || waited >= rate.1 * 2 {
            if waited < RATE_AFTER {
                std::thread::sleep(RATE_AFTER - waited);
            }
            let (stamp, elapsed) = (self.stamp(), instant0.elapsed());
            let per_ns = stamp.saturating_sub(stamp0) as f64 / elapsed.as_nanos().max(1) as f64;
            *rate = (if per_ns > 0.0 { per_ns } else { 1.0 }, elapsed);
        }
        let per_ns = rate.0;
        drop(rate);
        move |at: u64| {
            let after = (at.saturating_sub(stamp0) as f64 / per_ns) as u64;
            wall0 + Duration::from_nanos(after)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_read_back_as_the_wall_clock_times_they_were_taken_at() {
        let clock = Clock::new();
        std::thread::sleep(Duration::from_millis(20));
        let (before, stamp) = (SystemTime::now(), clock.stamp());
        std::thread::sleep(Duration::from_millis(30));
        let (after, later) = (SystemTime::now(), clock.stamp());
        let wall = clock.reader();
        let gap = wall(later).duration_since(wall(stamp)).unwrap();
        assert!(
            gap >= Duration::from_millis(25) && gap < Duration::from_secs(5),
            "{gap:?}"
        );
        // Within the wall clock's own steps of the times taken beside the stamps.
        let near = |a: SystemTime, b: SystemTime| {
            let d = a.duration_since(b).unwrap_or_else(|e| e.duration());
            d < Duration::from_millis(20)
        };
        assert!(near(wall(stamp), before), "{:?} {before:?}", wall(stamp));
        assert!(near(wall(later), after), "{:?} {after:?}", wall(later));
    }
}
