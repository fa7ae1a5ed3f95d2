//! JACCL's mesh: every pair of ranks has its own queue pair.
//!
//! Reductions add the ranks' values in rank order (rank 0's, then rank 1's, …) on the rank
//! that owns a segment, so every rank gets the same bits and reruns repeat them:
//! - up to [`SMALL_BYTES`], every rank sends its whole buffer to every peer and each rank
//!   reduces all of them (one round trip);
//! - above, a reduce-scatter (each rank receives its segment from every peer, chunk by chunk,
//!   and reduces it in rank order) then an all-gather of the reduced segments.
//!
//! Scratch memory is one chunk per rank, whatever the message size.

use super::exchange::{carve, Links, Transfer};
use super::scratch::{fold_in_rank_order, Scratch, CHUNK_BYTES};
use crate::schedule::segment;
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Result};

/// Messages up to this size take the one-round path.
pub(crate) const SMALL_BYTES: usize = 64 * 1024;

/// Channel indices of a mesh: entry `p` is the queue pair to rank `p`.
#[derive(Debug)]
pub(crate) struct Mesh {
    pub(crate) rank: usize,
    /// Per peer, the channels of its cables (empty for this rank).
    pub(crate) channel_of: Vec<Vec<usize>>,
}

/// Transfers below this size use one cable; larger ones are split over every cable to the peer.
const SPREAD_BYTES: usize = 64 * 1024;

/// Where a reduce-scatter reads this rank's values and writes its reduced segment.
pub(crate) enum Target<'a> {
    /// `all_sum` and friends: in place, the segment written back into the buffer.
    InPlace(&'a mut [u8]),
    /// `sum_scatter`: from the input into a separate output.
    Separate(&'a [u8], &'a mut [u8]),
}

impl Target<'_> {
    fn source(&self) -> &[u8] {
        match self {
            Target::InPlace(data) => data,
            Target::Separate(input, _) => input,
        }
    }

    /// The output bytes for `range` of the source (its own segment).
    fn out(&mut self, range: std::ops::Range<usize>, segment_start: usize) -> &mut [u8] {
        match self {
            Target::InPlace(data) => &mut data[range],
            Target::Separate(_, output) => {
                &mut output[range.start - segment_start..range.end - segment_start]
            }
        }
    }
}

impl Mesh {
    fn size(&self) -> usize {
        self.channel_of.len()
    }

    /// The transfers that send `send` to `peer` and receive `recv` from it: one cable below
    /// [`SPREAD_BYTES`], else one equal share per cable (both ends split a length alike).
    fn spread<'a>(&self, peer: usize, send: &'a [u8], recv: &'a mut [u8]) -> Vec<Transfer<'a>> {
        let cables = &self.channel_of[peer];
        let ways = |len: usize| if len < SPREAD_BYTES { 1 } else { cables.len() };
        let (send_ways, recv_ways) = (ways(send.len()), ways(recv.len()));
        let ranges: Vec<_> = (0..recv_ways)
            .map(|k| segment(recv.len(), recv_ways, k))
            .collect();
        let mut recvs = carve(recv, &ranges).expect("segments are disjoint");
        cables
            .iter()
            .enumerate()
            .map(|(k, &channel)| Transfer {
                channel,
                send: if k < send_ways {
                    &send[segment(send.len(), send_ways, k)]
                } else {
                    &[]
                },
                recv: if k < recv_ways {
                    std::mem::take(&mut recvs[k])
                } else {
                    &mut []
                },
            })
            .collect()
    }

    pub(crate) fn all_reduce(
        &self,
        links: &mut Links,
        scratch: &mut Scratch,
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
        kind: u8,
    ) -> Result<()> {
        let name = op.collective_name();
        let (n, width) = (self.size(), dtype.size());
        let count = data.len() / width;
        if data.len() <= SMALL_BYTES || count < n {
            return self.reduce_whole(links, scratch, data, dtype, op, kind);
        }
        let segments: Vec<_> = (0..n)
            .map(|p| segment(count, n, p))
            .map(|r| r.start * width..r.end * width)
            .collect();
        self.reduce_scatter_phase(
            links,
            scratch,
            &segments,
            Target::InPlace(data),
            dtype,
            op,
            name,
            kind,
        )?;
        let mut pieces = carve(data, &segments).expect("segments are disjoint");
        let own: &mut [u8] = std::mem::take(&mut pieces[self.rank]);
        let own: &[u8] = own;
        let mut transfers: Vec<Transfer<'_>> = pieces
            .into_iter()
            .enumerate()
            .filter(|&(p, _)| p != self.rank)
            .flat_map(|(p, recv)| self.spread(p, own, recv))
            .collect();
        links.exchange(name, kind, &mut transfers)
    }

    /// Every rank's whole buffer to every peer, chunk by chunk, reduced in rank order.
    fn reduce_whole(
        &self,
        links: &mut Links,
        scratch: &mut Scratch,
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
        kind: u8,
    ) -> Result<()> {
        let n = self.size();
        let step = CHUNK_BYTES / dtype.size() * dtype.size();
        let pieces = scratch.buffers(n);
        for start in (0..data.len()).step_by(step.max(1)) {
            let end = (start + step).min(data.len());
            {
                let (own_piece, others) = split_own(pieces, self.rank);
                own_piece[..end - start].copy_from_slice(&data[start..end]);
                let mut transfers: Vec<Transfer<'_>> = others
                    .flat_map(|(p, buffer)| {
                        self.spread(p, &data[start..end], &mut buffer[..end - start])
                    })
                    .collect();
                links.exchange(op.collective_name(), kind, &mut transfers)?;
            }
            fold_in_rank_order(&mut data[start..end], pieces, dtype, op);
        }
        Ok(())
    }

    /// Rank `p` ends with segment `p` reduced over every rank, in rank order.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reduce_scatter_phase(
        &self,
        links: &mut Links,
        scratch: &mut Scratch,
        segments: &[std::ops::Range<usize>],
        mut target: Target<'_>,
        dtype: DType,
        op: ReduceOp,
        name: &str,
        kind: u8,
    ) -> Result<()> {
        let n = self.size();
        let step = (CHUNK_BYTES / dtype.size() * dtype.size()).max(1);
        let longest = segments.iter().map(|s| s.len()).max().unwrap_or(0);
        let own = segments[self.rank].clone();
        let pieces = scratch.buffers(n);
        for offset in (0..longest).step_by(step) {
            let piece_of = |p: usize| {
                let s = &segments[p];
                (s.start + offset).min(s.end)..(s.start + offset + step).min(s.end)
            };
            let mine = piece_of(self.rank);
            {
                let source = target.source();
                let (own_piece, others) = split_own(pieces, self.rank);
                own_piece[..mine.len()].copy_from_slice(&source[mine.clone()]);
                let mut transfers: Vec<Transfer<'_>> = others
                    .flat_map(|(p, buffer)| {
                        self.spread(p, &source[piece_of(p)], &mut buffer[..mine.len()])
                    })
                    .collect();
                links.exchange(name, kind, &mut transfers)?;
            }
            if !mine.is_empty() {
                fold_in_rank_order(target.out(mine, own.start), pieces, dtype, op);
            }
        }
        Ok(())
    }

    pub(crate) fn all_gather(
        &self,
        links: &mut Links,
        input: &[u8],
        output: &mut [u8],
    ) -> Result<()> {
        let n = self.size();
        let ranges: Vec<_> = (0..n)
            .map(|p| p * input.len()..(p + 1) * input.len())
            .collect();
        let mut pieces = carve(output, &ranges).expect("blocks are disjoint");
        pieces[self.rank].copy_from_slice(input);
        let mut transfers: Vec<Transfer<'_>> = pieces
            .into_iter()
            .enumerate()
            .filter(|&(p, _)| p != self.rank)
            .flat_map(|(p, recv)| self.spread(p, input, recv))
            .collect();
        links.exchange("all_gather", super::exchange::ALL_GATHER, &mut transfers)
    }

    pub(crate) fn reduce_scatter(
        &self,
        links: &mut Links,
        scratch: &mut Scratch,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let n = self.size();
        let segments: Vec<_> = (0..n)
            .map(|p| p * output.len()..(p + 1) * output.len())
            .collect();
        self.reduce_scatter_phase(
            links,
            scratch,
            &segments,
            Target::Separate(input, output),
            dtype,
            op,
            "sum_scatter",
            super::exchange::SUM_SCATTER,
        )
    }

    pub(crate) fn channel_to(&self, peer: usize) -> Result<usize, String> {
        self.channel_of
            .get(peer)
            .and_then(|c| c.first())
            .copied()
            .ok_or_else(|| {
                format!(
                    "rank {peer} is not a peer of rank {} in this mesh of {}",
                    self.rank,
                    self.size()
                )
            })
    }
}

/// This rank's scratch buffer, and the others with their ranks.
fn split_own(
    pieces: &mut [Vec<u8>],
    rank: usize,
) -> (&mut Vec<u8>, impl Iterator<Item = (usize, &mut Vec<u8>)>) {
    let (before, rest) = pieces.split_at_mut(rank);
    let (own, after) = rest.split_first_mut().expect("this rank's buffer");
    let others = before.iter_mut().enumerate().chain(
        after
            .iter_mut()
            .enumerate()
            .map(move |(i, b)| (rank + 1 + i, b)),
    );
    (own, others)
}
