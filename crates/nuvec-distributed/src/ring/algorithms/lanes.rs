//! Lanes: a large all-reduce split into independent rings that run at once, one per
//! connection and direction. With several addresses per rank in the hostfile, neighbours
//! share several connections; with three ranks or more, a second ring runs the other way
//! round, so both directions of every connection carry data (on two ranks the one ring
//! already does).
//!
//! Every rank derives the same lanes from the hostfile and the buffer's size, and each lane
//! is a whole ring all-reduce over its slice (own header, chunks and checks). Lane 0 runs on
//! the calling thread, the others on scoped threads of the collective. A lane that fails
//! tells every peer at once, so the other lanes on every rank stop instead of waiting out
//! their timeouts.

use super::outbox::Outbox;
use super::ring_phases::{all_gather_phase, reduce_scatter_phase};
use super::{kind_of, CHUNK_BYTES};
use crate::ring::transport::{Link, Transport};
use crate::schedule::segment;
use crate::tcp::frame::Header;
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Error, Result};

/// The fewest bytes a lane is given: below this, a lane's thread and header cost more than
/// the transfer gains.
pub(crate) const LANE_MIN_BYTES: usize = 1 << 20;

/// Whether rings also run counter-clockwise on three ranks or more.
pub(crate) const BOTH_DIRECTIONS: bool = true;

/// One ring of a collective: which of the neighbours' connections it uses, and which way
/// round it goes.
/// The default is the first connection, clockwise: the only lane of a small collective.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Lane {
    pub(crate) connection: usize,
    pub(crate) reversed: bool,
}

/// The lanes for a collective of `bytes` over a ring of `size` ranks whose neighbours share
/// `connections` connections (the same on every rank).
pub(crate) fn plan(size: usize, connections: usize, bytes: usize) -> Vec<Lane> {
    let directions = if size >= 3 && BOTH_DIRECTIONS { 2 } else { 1 };
    let most = connections.max(1) * directions;
    let count = most.min(bytes / LANE_MIN_BYTES).max(1);
    (0..count)
        .map(|index| Lane {
            connection: index / directions,
            reversed: index % directions == 1,
        })
        .collect()
}

/// One lane's all-reduce into `data`, its slice of the buffer, of the same slice of the input
/// when given (else of `data` itself).
pub(crate) fn all_reduce_lane<T: Transport + ?Sized>(
    transport: &T,
    (lane, sequence): (Lane, u64),
    (input, data): (Option<&[u8]>, &mut [u8]),
    (dtype, op): (DType, ReduceOp),
    scratch: &mut Vec<u8>,
) -> Result<()> {
    let ours = Header {
        kind: kind_of(op),
        dtype,
        sequence,
        bytes: data.len() as u64,
    };
    let link = Link::open(transport, lane.connection, lane.reversed, ours)?;
    let mut outbox = Outbox::new(link.window(), input);
    reduce_scatter_phase(&link, data, (dtype, op), (scratch, &mut outbox))?;
    all_gather_phase(&link, data, dtype.size(), &mut outbox, None)?;
    link.flush_right()
}

/// The all-reduce of `data` over `lanes` (more than one) at once, each on its slice: the
/// first on the calling thread, the others on scoped threads. A lane that fails tells every
/// peer at once, so the other lanes on every rank stop instead of waiting out their timeouts.
pub(crate) fn all_reduce_lanes<T: Transport + ?Sized>(
    transport: &T,
    (lanes, sequence): (&[Lane], u64),
    (input, data): (Option<&[u8]>, &mut [u8]),
    (dtype, op): (DType, ReduceOp),
    scratches: &mut Vec<Vec<u8>>,
) -> Result<()> {
    let width = dtype.size();
    let elements = data.len() / width;
    scratches.resize_with(lanes.len(), || Vec::with_capacity(CHUNK_BYTES));
    let mut slices = Vec::with_capacity(lanes.len());
    let mut rest = data;
    for index in 0..lanes.len() {
        let range = segment(elements, lanes.len(), index);
        // Each lane announces its slice; the transport must know them all before any starts.
        transport.accept((range.len() * width) as u64);
        let (slice, tail) = rest.split_at_mut(range.len() * width);
        let from = input.map(|input| &input[range.start * width..range.end * width]);
        slices.push((from, slice));
        rest = tail;
    }
    let lane_failed = |error: Error| {
        transport.abort_all(&error);
        error
    };
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let mut work = lanes.iter().zip(slices).zip(scratches.iter_mut());
        let first = work.next();
        let others: Vec<_> = work.collect();
        let handles: Vec<_> = others
            .into_iter()
            .map(|((&lane, slice), scratch)| {
                scope.spawn(move || {
                    all_reduce_lane(transport, (lane, sequence), slice, (dtype, op), scratch)
                        .map_err(lane_failed)
                })
            })
            .collect();
        let mut results = Vec::with_capacity(lanes.len());
        if let Some(((&lane, slice), scratch)) = first {
            results.push(
                all_reduce_lane(transport, (lane, sequence), slice, (dtype, op), scratch)
                    .map_err(lane_failed),
            );
        }
        for handle in handles {
            results.push(handle.join().unwrap_or_else(|_| {
                Err(lane_failed(Error::Distributed {
                    op: kind_of(op).name().into(),
                    rank: None,
                    reason: "a lane's thread panicked".into(),
                }))
            }));
        }
        results
    });
    // The first lane's error is the one to report: it is the one with the root cause when
    // several fail.
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_collectives_use_one_lane() {
        assert_eq!(plan(4, 2, LANE_MIN_BYTES - 1).len(), 1);
        assert_eq!(plan(2, 1, 64 * LANE_MIN_BYTES).len(), 1);
    }

    #[test]
    fn lanes_cover_every_connection_and_both_directions_on_three_ranks_or_more() {
        let lanes = plan(4, 2, 64 * LANE_MIN_BYTES);
        let expected = [(0, false), (0, true), (1, false), (1, true)];
        let got: Vec<_> = lanes.iter().map(|l| (l.connection, l.reversed)).collect();
        assert_eq!(got, expected);
        // Two ranks: one direction (the ring already uses both), one lane per connection.
        let got: Vec<_> = plan(2, 3, 64 * LANE_MIN_BYTES)
            .iter()
            .map(|l| (l.connection, l.reversed))
            .collect();
        assert_eq!(got, [(0, false), (1, false), (2, false)]);
    }

    #[test]
    fn each_lane_gets_at_least_the_minimum() {
        assert_eq!(plan(4, 4, 3 * LANE_MIN_BYTES).len(), 3);
        assert_eq!(plan(3, 1, 2 * LANE_MIN_BYTES).len(), 2);
    }
}
