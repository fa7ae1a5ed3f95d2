//! Choosing, by timing them here, between two paths that both serve a collective of a given
//! kind, group size and size: where the fixed thresholds of `mailboxes.rs` and
//! `single_copy.rs` were measured on one machine, the crossing point moves with the machine
//! (cores, caches, how the kernel copies between processes).
//!
//! Each bucket (the collective, the group's size, the size's power of two) tries both paths
//! on its first calls, in the same order on every rank (every rank makes the same calls, so
//! they agree on each call's path without asking): the thresholds' path for [`WARM_UP`]
//! untimed calls and [`TRIALS`] timed ones, then the other path the same way. Runs of one
//! path, not calls alternating between the two: a path's steady state (its buffers, caches
//! and waits warmed by its own last call) is what later calls get, and alternating measured
//! the ring's two-rank sum of 256 KiB at four times its steady time. Each rank then takes
//! the fastest of its timings of each path, one small all-reduce takes the slowest rank's
//! (a collective takes as long as its slowest rank), and every rank keeps the other path
//! only if it is clearly faster ([`MARGIN`]): the same everywhere, from the same numbers.
//! Where neither path is clearly faster, both are timed again, up to [`ROUNDS`] rounds, each
//! path's fastest over all its rounds deciding: one rank descheduled through every trial of
//! one path once made the slower path look level and kept it (the 4-rank 1 MiB all-to-all's
//! reads at about 240 µs where its mailboxes take 125-145 µs), and a second round rarely
//! finds the same rank slow again.
//! The paths give the same bits (copies, or a sum of two ranks, where `a + b` is `b + a`),
//! so a call's result does not depend on which ran. `NUVEC_RING_TUNING=off` (or
//! `Options::tuning`) keeps the thresholds.

use crate::tcp::frame::Kind;
use std::collections::BTreeMap;
use std::time::Duration;

/// Untimed calls of each path before its timed ones.
const WARM_UP: usize = 3;
/// Timed calls of each path before the choice.
const TRIALS: usize = 8;
/// How much faster than the thresholds' path the other must be to be kept.
const MARGIN: f64 = 0.8;
/// The most rounds of trials a bucket runs while neither path is clearly faster, after
/// which it keeps the thresholds' path.
const ROUNDS: usize = 3;

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
    /// Calls in the current round.
    calls: usize,
    /// Rounds of trials finished without a clear winner.
    rounds: usize,
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
            None if trials.calls < WARM_UP + TRIALS => Path::Thresholds,
            None => Path::Other,
        }
    }

    /// Records that this rank's call of `bucket` took `path` for `elapsed`. Returns this
    /// rank's fastest seconds of each path (thresholds', other's) once both have their
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
        let within = (trials.calls - 1) % (WARM_UP + TRIALS);
        if within < WARM_UP {
            return None;
        }
        match path {
            Path::Thresholds => trials.thresholds.push(elapsed.as_secs_f64()),
            Path::Other => trials.other.push(elapsed.as_secs_f64()),
        }
        let due = TRIALS * (trials.rounds + 1);
        (trials.thresholds.len() >= due && trials.other.len() >= due)
            .then(|| [fastest(&trials.thresholds), fastest(&trials.other)])
    }

    /// Keeps, for `bucket`, the other path if its agreed time (every rank's slowest) is
    /// below [`MARGIN`] of the thresholds' path's, and the thresholds' path if the other's
    /// is above `1 / MARGIN` of it: trials on a busy machine are noisy, and the thresholds
    /// were measured over many runs. Between the two, the bucket times both paths another
    /// round, keeping this round's timings, up to [`ROUNDS`]; then it keeps the thresholds'.
    pub(crate) fn decide(&mut self, bucket: Bucket, agreed: [f64; 2]) {
        let Some(trials) = self.buckets.get_mut(&bucket) else {
            return;
        };
        let [thresholds, other] = agreed;
        trials.chosen = if other < MARGIN * thresholds {
            Some(Path::Other)
        } else if other * MARGIN > thresholds || trials.rounds + 1 >= ROUNDS {
            Some(Path::Thresholds)
        } else {
            trials.rounds += 1;
            trials.calls = 0;
            None
        };
    }

    /// The path kept for `bucket`, once chosen.
    #[cfg(test)]
    pub(crate) fn chosen(&self, bucket: Bucket) -> Option<Path> {
        self.buckets.get(&bucket)?.chosen
    }
}

/// The fastest of a path's timings: what the path can do here. A median of so few calls
/// still held the odd call that slept waiting for a peer (about 50 µs on this VM) as often
/// as not, and chose by those.
fn fastest(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_times_each_path_in_turn_then_keeps_the_faster() {
        let mut tuning = Tuning {
            enabled: true,
            ..Tuning::default()
        };
        let at = bucket(Kind::AllGather, 2, 100_000);
        assert_eq!(at, (Kind::AllGather as u8, 2, 17));
        let mut paths = Vec::new();
        let mut fastest = None;
        while fastest.is_none() {
            let path = tuning.next(at);
            paths.push(path);
            let millis = if path == Path::Other { 1 } else { 3 };
            fastest = tuning.record(at, path, Duration::from_millis(millis));
        }
        // Each path's warm-up and timed calls in one run, the thresholds' first.
        let each = WARM_UP + TRIALS;
        assert_eq!(paths.len(), 2 * each);
        assert!(paths[..each].iter().all(|p| *p == Path::Thresholds));
        assert!(paths[each..].iter().all(|p| *p == Path::Other));
        // Each path's fastest timing.
        assert_eq!(fastest, Some([0.003, 0.001]));
        tuning.decide(at, [0.003, 0.002]);
        assert_eq!(tuning.chosen(at), Some(Path::Other));
        assert_eq!(tuning.next(at), Path::Other);
        assert_eq!(tuning.record(at, Path::Other, Duration::ZERO), None);
        // Another bucket starts over; a disabled tuning keeps the thresholds.
        assert_eq!(
            tuning.next(bucket(Kind::AllGather, 4, 100_000)),
            Path::Thresholds
        );
        let mut off = Tuning::default();
        assert_eq!(off.next(at), Path::Thresholds);
        assert_eq!(off.record(at, Path::Thresholds, Duration::ZERO), None);
    }

    /// Runs one round of `bucket`'s trials, each path's calls taking `millis`, and returns
    /// the paths taken and what the last call's record gave.
    fn round(tuning: &mut Tuning, at: Bucket, millis: [u64; 2]) -> (Vec<Path>, Option<[f64; 2]>) {
        let mut paths = Vec::new();
        for _ in 0..2 * (WARM_UP + TRIALS) {
            let path = tuning.next(at);
            paths.push(path);
            let ms = millis[usize::from(path == Path::Other)];
            if let Some(fastest) = tuning.record(at, path, Duration::from_millis(ms)) {
                return (paths, Some(fastest));
            }
        }
        (paths, None)
    }

    #[test]
    fn paths_within_the_margin_are_timed_again_keeping_each_paths_fastest() {
        let mut tuning = Tuning {
            enabled: true,
            ..Tuning::default()
        };
        let at = bucket(Kind::AllToAll, 4, 1 << 20);
        let each = WARM_UP + TRIALS;
        // Level: neither path is kept, and a second round runs both again in the same order.
        let (paths, fastest) = round(&mut tuning, at, [10, 9]);
        assert_eq!(fastest, Some([0.010, 0.009]));
        tuning.decide(at, [0.010, 0.009]);
        assert_eq!(tuning.chosen(at), None, "within the margin");
        let (again, fastest) = round(&mut tuning, at, [12, 5]);
        assert_eq!(again, paths);
        assert!(again[..each].iter().all(|p| *p == Path::Thresholds));
        assert!(again[each..].iter().all(|p| *p == Path::Other));
        // The fastest of both rounds: the thresholds' 10 ms from the first.
        assert_eq!(fastest, Some([0.010, 0.005]));
        tuning.decide(at, [0.010, 0.005]);
        assert_eq!(tuning.chosen(at), Some(Path::Other));

        // Level through every round: the thresholds' path, after the last.
        let at = bucket(Kind::AllToAll, 4, 1 << 16);
        for done in 1..=ROUNDS {
            let (_, fastest) = round(&mut tuning, at, [10, 10]);
            assert_eq!(fastest, Some([0.010, 0.010]), "round {done}");
            tuning.decide(at, [0.010, 0.010]);
            let expected = (done == ROUNDS).then_some(Path::Thresholds);
            assert_eq!(tuning.chosen(at), expected, "after round {done}");
        }

        // Clearly slower: the thresholds' path at once.
        let at = bucket(Kind::AllToAll, 2, 1 << 16);
        round(&mut tuning, at, [10, 20]);
        tuning.decide(at, [0.010, 0.020]);
        assert_eq!(tuning.chosen(at), Some(Path::Thresholds));
    }
}
