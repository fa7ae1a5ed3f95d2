//! How fast this machine's cores pass a cache line to each other, sampled around every run
//! of `bench-distributed`.
//!
//! On the project's 2-core VMs the time for a cache line to go from one core to the other and
//! back moves between two levels, for seconds to minutes at a time: about 75 ns, and about
//! 320 ns (a C probe, 2026-12-02: `67 79 312 322 82 77 …`, one sample every 3 s). Our reading
//! is that the host places the two virtual CPUs on cores that share a cache or on cores that
//! do not. Every transfer between ranks crosses cores, so a run taken in the slow state is
//! slower for any side: the report records the state next to each run's times.

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// Round trips per sample.
const TRIPS: u32 = 20_000;

/// Nanoseconds for a cache line to go from one thread to another and back, the least of
/// five samples of [`TRIPS`] round trips each (the threads are not pinned, so a sample taken
/// while another process holds a core reads high: 1000 ns and more right after some runs);
/// `None` where a second thread cannot start.
pub(crate) fn cross_core_ns() -> Option<f64> {
    let samples: Vec<f64> = (0..5).map(|_| sample()).collect::<Option<_>>()?;
    Some(samples.into_iter().fold(f64::INFINITY, f64::min))
}

fn sample() -> Option<f64> {
    let turn = AtomicU32::new(0);
    std::thread::scope(|scope| {
        let peer = std::thread::Builder::new()
            .spawn_scoped(scope, || {
                for trip in 0..TRIPS {
                    while turn.load(Ordering::Acquire) != 2 * trip + 1 {
                        std::hint::spin_loop();
                    }
                    turn.store(2 * trip + 2, Ordering::Release);
                }
            })
            .ok()?;
        let start = Instant::now();
        for trip in 0..TRIPS {
            turn.store(2 * trip + 1, Ordering::Release);
            while turn.load(Ordering::Acquire) != 2 * trip + 2 {
                std::hint::spin_loop();
            }
        }
        let elapsed = start.elapsed();
        peer.join().ok()?;
        Some(elapsed.as_secs_f64() * 1e9 / f64::from(TRIPS))
    })
}

/// Records the probe's readings before and after one run on each of its records.
pub(crate) fn mark_cross_core(records: &mut [Value], before: Option<f64>, after: Option<f64>) {
    for record in records {
        if let Some(fields) = record.as_object_mut() {
            let round = |ns: Option<f64>| ns.map(|ns| json!(ns.round()));
            fields.insert("cross_core_ns".into(), json!([round(before), round(after)]));
        }
    }
}

/// "before–after ns" for the progress line.
pub(crate) fn describe(before: Option<f64>, after: Option<f64>) -> String {
    match (before, after) {
        (Some(before), Some(after)) => format!("{before:.0} ns before, {after:.0} ns after"),
        _ => "not measured".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_trip_takes_a_positive_finite_time_below_a_millisecond() {
        let ns = cross_core_ns().expect("a second thread");
        assert!(ns.is_finite() && ns > 0.0 && ns < 1e6, "{ns} ns");
    }

    #[test]
    fn readings_land_on_every_record_of_the_run() {
        let mut records = vec![json!({"op": "all_sum"}), json!({"op": "all_sum"})];
        mark_cross_core(&mut records, Some(74.6), Some(321.2));
        for record in &records {
            assert_eq!(record["cross_core_ns"], json!([75.0, 321.0]));
        }
        assert_eq!(describe(Some(74.6), None), "not measured");
    }
}
