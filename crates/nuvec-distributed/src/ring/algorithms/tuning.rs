//! Choosing, by timing them here, between two paths that both serve a collective of a given
//! kind, group size and size: where the fixed thresholds of `mailboxes.rs` and
//! `single_copy.rs` were measured on one machine, the crossing point moves with the machine
//! (cores, caches, how the kernel copies between processes).
//!
//! Each bucket (the collective, the group's size, the size's power of two) tries both paths
//! on its first calls, in the same order on every rank (every rank makes the same calls, so
//! they agree on each call's path without asking): [`WARM_UP`] calls on the thresholds' path,
//! then the two in turn until each has [`TRIALS`] timings. Each rank then takes the median of
//! its timings of each path, one small all-reduce takes the slowest rank's (a collective
//! takes as long as its slowest rank), and every rank keeps the path with the lower one: the
//! same everywhere, from the same numbers. The paths give the same bits (copies, or a sum of
//! two ranks, where `a + b` is `b + a`), so a call's result does not depend on which ran.
//! `NUVEC_RING_TUNING=off` (or `Options::tuning`) keeps the thresholds.

use crate::tcp::frame::Kind;
use std::collections::BTreeMap;
use std::time::Duration;

/// Calls of a bucket that take the thresholds' path before any is timed.
const WARM_UP: usize = 2;
/// Timed calls of each path before the choice.
const TRIALS: usize = 8;

/// One of the two paths of a bucket: the one the thresholds pick, or the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Thresholds,
    Other,
}

/// Which bucket a call falls in: the collective (its frame kind's code), the group's size,
/// the power of two at or above its size.
pub(crate) type Bucket = (u8, usize, u32);

/// The bucket of a call of `kind` on `size` ranks moving `bytes`.
pub(crate) fn bucket(kind: Kind, size: usize, bytes: usize) -> Bucket {
    (kind as u8, size, bytes.next_power_of_two().trailing_zeros())
}

#[derive(Debug, Default)]
struct Trials {
    calls: usize,
    thresholds: Vec<f64>,
    other: Vec<f64>,
    chosen: Option<Path>,
}

/// A group's choices, bucket by bucket.
#[derive(Debug, Default)]
pub(crate) struct Tuning {
    /// Whether to time at all (else every call takes the thresholds' path).
    pub(crate) enabled: bool,
    buckets: BTreeMap<Bucket, Trials>,
}

impl Tuning {
    /// The path of the next call of `bucket`.
    pub(crate) fn next(&mut self, bucket: Bucket) -> Path {
        if !self.enabled {
            return Path::Thresholds;
        }
        let trials = self.buckets.entry(bucket).or_default();
        match trials.chosen {
            Some(path) => path,
            None if trials.calls < WARM_UP => Path::Thresholds,
            None if (trials.calls - WARM_UP).is_multiple_of(2) => Path::Other,
            None => Path::Thresholds,
        }
    }

    /// Records that this rank's call of `bucket` took `path` for `elapsed`. Returns this
    /// rank's median seconds of each path (thresholds', other's) once both have their
    /// trials, at the same call on every rank: the caller agrees on them with the other
    /// ranks and passes the result to [`Tuning::decide`].
    pub(crate) fn record(
        &mut self,
        bucket: Bucket,
        path: Path,
        elapsed: Duration,
    ) -> Option<[f64; 2]> {
        let trials = self.buckets.get_mut(&bucket)?;
        if trials.chosen.is_some() {
            return None;
        }
        trials.calls += 1;
        if trials.calls <= WARM_UP {
            return None;
        }
        match path {
            Path::Thresholds => trials.thresholds.push(elapsed.as_secs_f64()),
            Path::Other => trials.other.push(elapsed.as_secs_f64()),
        }
        (trials.thresholds.len() >= TRIALS && trials.other.len() >= TRIALS)
            .then(|| [median(&mut trials.thresholds), median(&mut trials.other)])
    }

    /// Keeps, for `bucket`, the path whose agreed time (every rank's slowest median) is
    /// lower; the thresholds' on a tie.
    pub(crate) fn decide(&mut self, bucket: Bucket, agreed: [f64; 2]) {
        if let Some(trials) = self.buckets.get_mut(&bucket) {
            trials.chosen = Some(match agreed[1] < agreed[0] {
                true => Path::Other,
                false => Path::Thresholds,
            });
        }
    }

    /// The path kept for `bucket`, once chosen.
    #[cfg(test)]
    pub(crate) fn chosen(&self, bucket: Bucket) -> Option<Path> {
        self.buckets.get(&bucket)?.chosen
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_warms_up_alternates_then_keeps_the_faster_path() {
        let mut tuning = Tuning {
            enabled: true,
            ..Tuning::default()
        };
        let at = bucket(Kind::AllGather, 2, 100_000);
        assert_eq!(at, (Kind::AllGather as u8, 2, 17));
        let mut paths = Vec::new();
        let mut medians = None;
        while medians.is_none() {
            let path = tuning.next(at);
            paths.push(path);
            let millis = if path == Path::Other { 1 } else { 3 };
            medians = tuning.record(at, path, Duration::from_millis(millis));
        }
        assert_eq!(
            &paths[..4],
            [
                Path::Thresholds,
                Path::Thresholds,
                Path::Other,
                Path::Thresholds
            ]
        );
        assert_eq!(paths.len(), WARM_UP + 2 * TRIALS);
        assert_eq!(medians, Some([0.003, 0.001]));
        tuning.decide(at, [0.003, 0.002]);
        assert_eq!(tuning.chosen(at), Some(Path::Other));
        assert_eq!(tuning.next(at), Path::Other);
        // Another bucket starts over; a disabled tuning keeps the thresholds.
        assert_eq!(
            tuning.next(bucket(Kind::AllGather, 4, 100_000)),
            Path::Thresholds
        );
        let mut off = Tuning::default();
        assert_eq!(off.next(at), Path::Thresholds);
        assert_eq!(off.record(at, Path::Thresholds, Duration::ZERO), None);
    }
}
