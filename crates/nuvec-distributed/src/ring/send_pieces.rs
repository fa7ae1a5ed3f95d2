//! How a large point-to-point payload is handed to the kernel: in sends of at most
//! [`SEND_PIECE`] bytes, or whole. Which is faster depends on the machine: over loopback,
//! pieces won on the Intel Xeon VM and whole sends on the AMD EPYC VM (`docs/performance.md`,
//! "Tuning measurements").
//!
//! So a rank tries both on its first large payloads to each other rank and keeps the
//! faster: after one payload to warm up (the receiver's first touch of its buffer would
//! count against whichever went first), it alternates until it has [`TRIALS`] timings of
//! each, then keeps the one with the lower median time per byte. Only the sender takes part;
//! the receiver reads whatever arrives. A timing includes waiting for the receiver to make
//! room, so a receiver that is busy elsewhere during the trials can mislead the choice; the
//! worst outcome is one of the two ways, each of which is the right one on some machine.

use crate::sync::lock;
use crate::tcp::SEND_PIECE;
use std::sync::Mutex;
use std::time::Duration;

/// How many timed payloads of each way decide.
const TRIALS: usize = 5;
/// How many payloads go first, untimed.
const WARM_UP: usize = 1;

/// One way of handing a payload to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sends {
    /// Sends of at most [`SEND_PIECE`] bytes.
    Pieces,
    /// As few sends as the kernel takes.
    Whole,
}

impl Sends {
    /// The most bytes one send may take.
    pub(crate) fn piece(self) -> usize {
        match self {
            Sends::Pieces => SEND_PIECE,
            Sends::Whole => usize::MAX,
        }
    }
}

/// The choice for one connection, made by timing its first large payloads.
#[derive(Debug, Default)]
pub(crate) struct PieceChoice {
    trials: Mutex<Trials>,
}

#[derive(Debug, Default)]
struct Trials {
    /// Payloads recorded so far, the warm-up included.
    seen: usize,
    /// Seconds per byte of each timed payload, per way.
    pieces: Vec<f64>,
    whole: Vec<f64>,
    chosen: Option<Sends>,
}

impl PieceChoice {
    /// The way to send the next large payload.
    pub(crate) fn next(&self) -> Sends {
        let trials = lock(&self.trials);
        match trials.chosen {
            Some(sends) => sends,
            None if trials.pieces.len() <= trials.whole.len() => Sends::Pieces,
            None => Sends::Whole,
        }
    }

    /// Records that a payload of `bytes` went `sends` in `elapsed`; decides once both ways
    /// have [`TRIALS`] timings.
    pub(crate) fn record(&self, sends: Sends, bytes: usize, elapsed: Duration) {
        let mut trials = lock(&self.trials);
        if trials.chosen.is_some() || bytes == 0 {
            return;
        }
        trials.seen += 1;
        if trials.seen <= WARM_UP {
            return;
        }
        let per_byte = elapsed.as_secs_f64() / bytes as f64;
        match sends {
            Sends::Pieces => trials.pieces.push(per_byte),
            Sends::Whole => trials.whole.push(per_byte),
        }
        if trials.pieces.len() >= TRIALS && trials.whole.len() >= TRIALS {
            let whole_faster = median(&mut trials.whole) < median(&mut trials.pieces);
            trials.chosen = Some(if whole_faster {
                Sends::Whole
            } else {
                Sends::Pieces
            });
        }
    }

    /// The way kept, once the trials are over.
    #[cfg(test)]
    pub(crate) fn chosen(&self) -> Option<Sends> {
        lock(&self.trials).chosen
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `count` payloads of 1 MiB through `choice`, each taking `pieces` or `whole`
    /// milliseconds by the way chosen; returns the ways in order.
    fn run(choice: &PieceChoice, count: usize, pieces: u64, whole: u64) -> Vec<Sends> {
        (0..count)
            .map(|_| {
                let sends = choice.next();
                let millis = match sends {
                    Sends::Pieces => pieces,
                    Sends::Whole => whole,
                };
                choice.record(sends, 1 << 20, Duration::from_millis(millis));
                sends
            })
            .collect()
    }

    /// A choice past its untimed warm-up payload.
    fn warmed_up() -> PieceChoice {
        let choice = PieceChoice::default();
        choice.record(Sends::Pieces, 1 << 20, Duration::from_millis(9));
        choice
    }

    #[test]
    fn alternates_after_the_warm_up_then_keeps_the_faster_way() {
        let choice = PieceChoice::default();
        let decided = WARM_UP + 2 * TRIALS;
        let ways = run(&choice, decided + 3, 4, 3);
        let (p, w) = (Sends::Pieces, Sends::Whole);
        assert_eq!(ways[..WARM_UP], [p; WARM_UP]);
        let trials = &ways[WARM_UP..decided];
        assert!(trials.chunks(2).all(|pair| pair == [p, w]), "{trials:?}");
        assert_eq!(choice.chosen(), Some(w));
        assert!(ways[decided..].iter().all(|&way| way == w));
    }

    #[test]
    fn keeps_pieces_when_they_are_faster() {
        let choice = PieceChoice::default();
        run(&choice, WARM_UP + 2 * TRIALS, 2, 3);
        assert_eq!(choice.chosen(), Some(Sends::Pieces));
        assert_eq!(choice.next(), Sends::Pieces);
    }

    #[test]
    fn the_warm_up_payload_does_not_count() {
        let choice = PieceChoice::default();
        // A slow first payload (in pieces), then pieces faster than whole sends.
        choice.record(Sends::Pieces, 1 << 20, Duration::from_secs(1));
        run(&choice, 2 * TRIALS - 1, 2, 3);
        assert_eq!(choice.chosen(), None, "the warm-up was counted as a trial");
        run(&choice, 1, 2, 3);
        assert_eq!(choice.chosen(), Some(Sends::Pieces));
    }

    #[test]
    fn a_slow_trial_is_outvoted() {
        let choice = warmed_up();
        // Pieces take 2 ms but for one stalled trial of 50 ms; whole sends take 3 ms.
        for trial in 0..TRIALS {
            let pieces = if trial == 0 { 50 } else { 2 };
            choice.record(Sends::Pieces, 1 << 20, Duration::from_millis(pieces));
            assert_eq!(choice.chosen(), None, "whole sends have {trial} timings");
            choice.record(Sends::Whole, 1 << 20, Duration::from_millis(3));
        }
        assert_eq!(choice.chosen(), Some(Sends::Pieces));
    }

    #[test]
    fn times_are_compared_per_byte() {
        let choice = warmed_up();
        for _ in 0..TRIALS {
            // Pieces carry four times the bytes in twice the time: faster per byte.
            choice.record(Sends::Pieces, 4 << 20, Duration::from_millis(2));
            choice.record(Sends::Whole, 1 << 20, Duration::from_millis(1));
        }
        assert_eq!(choice.chosen(), Some(Sends::Pieces));
    }
}
