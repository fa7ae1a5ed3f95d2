//! nuvec's benchmark programs live in `src/bin/`, one per benchmark; `cargo xtask bench-core`,
//! `bench-distributed`, `bench-transforms`, `bench-nn` and `bench-lm` build them in release mode
//! and run them beside the peers they are measured against (docs/performance.md).

use std::time::{Duration, Instant};

/// The median of `values` (the mean of the middle two for an even count); sorts them. NaN
/// sorts last.
///
/// ```
/// assert_eq!(nuvec_bench::median(&mut [3.0, 1.0, 2.0]), 2.0);
/// assert_eq!(nuvec_bench::median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
/// ```
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[middle],
        _ => (values[middle - 1] + values[middle]) / 2.0,
    }
}

/// The median of `times` (the mean of the middle two for an even count); sorts them.
///
/// ```
/// use std::time::Duration;
/// let mut times = [3, 1, 2, 4].map(Duration::from_millis);
/// assert_eq!(nuvec_bench::median_time(&mut times), Duration::from_micros(2500));
/// ```
pub fn median_time(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    let middle = times.len() / 2;
    match times.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => times[middle],
        _ => (times[middle - 1] + times[middle]) / 2,
    }
}

/// The median time of `run` after `warm_ups` untimed runs: at least `min_runs` timed runs,
/// then more while `budget` lasts, at most `max_runs`.
///
/// ```
/// use std::time::Duration;
/// let mut calls = 0;
/// let time = nuvec_bench::time_median((2, 5, 5), Duration::ZERO, || {
///     calls += 1;
///     Ok::<(), ()>(())
/// })?;
/// assert_eq!(calls, 7);
/// assert!(time < Duration::from_secs(1));
/// # Ok::<(), ()>(())
/// ```
pub fn time_median<E>(
    (warm_ups, min_runs, max_runs): (usize, usize, usize),
    budget: Duration,
    mut run: impl FnMut() -> Result<(), E>,
) -> Result<Duration, E> {
    for _ in 0..warm_ups {
        run()?;
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < min_runs || (start.elapsed() < budget && times.len() < max_runs) {
        let t = Instant::now();
        run()?;
        times.push(t.elapsed());
    }
    Ok(median_time(&mut times))
}
