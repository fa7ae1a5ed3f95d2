//! The latency path for small collectives on groups of three ranks or more: every rank sends
//! its part to rank 0, which combines the parts in rank order and sends each rank what it
//! needs. Two hops whatever the group's size, like recursive doubling on four ranks, but each
//! rank other than rank 0 sends once and wakes once instead of once per step. Where ranks
//! outnumber cores (four ranks on two, say), wake-ups are what a small collective's time is
//! made of. Rank 0 computes alone, so every rank gets its bits, ((x0 + x1) + x2) + x3 for a
//! sum of four ranks, and reruns repeat them.
//!
//! - `all_sum` and its kin: rank 0 folds the parts and sends the result to every rank;
//! - `all_gather`: rank 0 places the blocks and sends the whole to every rank;
//! - `sum_scatter`: rank 0 folds the whole inputs and sends each rank its block.

use super::super::{kind_of, RingCommunicator, State};
use crate::kernels::kernel_op;
use crate::tcp::frame::{Header, Kind, HEADER_BYTES};
use crate::tcp::wire::read_frame;
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Result};
use nuvec_cpu::bytes::reduce_bytes;

/// The rank that combines the parts.
const ROOT: usize = 0;
/// The largest collective (bytes of the larger of its input and output) that takes this path
/// on a power-of-two group. Rank 0's link carries n − 1 parts each way, so past a few pages
/// recursive doubling's exchanges win (over loopback the two are even at a larger size:
/// `docs/performance.md`, "Tuning measurements"; between hosts, rank 0's link is the
/// bottleneck).
pub(crate) const STAR_PATH_BYTES: usize = 16 * 1024;
/// The same for other groups, where the alternative is the ring's n − 1 or 2(n − 1) hops,
/// slower at this size (measured: `docs/performance.md`, "Tuning measurements").
pub(crate) const STAR_PATH_BYTES_NO_DOUBLING: usize = 64 * 1024;
/// The largest group that takes this path: rank 0 handles every part in turn.
pub(crate) const STAR_PATH_RANKS: usize = 8;

impl RingCommunicator {
    /// Whether a collective of `bytes` (its input or output, the larger) goes through rank 0.
    pub(crate) fn uses_star(&self, bytes: usize) -> bool {
        let limit = if self.size.is_power_of_two() {
            STAR_PATH_BYTES
        } else {
            STAR_PATH_BYTES_NO_DOUBLING
        };
        (3..=STAR_PATH_RANKS).contains(&self.size) && bytes <= limit
    }

    /// The other ranks, in rank order.
    fn others(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.size).filter(|&peer| peer != self.rank)
    }

    /// On rank 0: reads every other rank's part, in rank order, into `frame` (room for the
    /// header and a part), checks it called `ours`, and hands the part to `take`.
    fn gather_parts(
        &self,
        ours: &Header,
        frame: &mut [u8],
        mut take: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        let name = ours.kind.name();
        for peer in self.others() {
            let theirs = read_frame(self.reader(name, peer)?, name, frame, self.timeout)?;
            self.same_call(peer, &theirs, ours)?;
            take(peer, &frame[HEADER_BYTES..]);
        }
        Ok(())
    }

    /// On other ranks: sends `part` to rank 0, then reads rank 0's reply into `frame` (room
    /// for the header and the reply) and checks its header is `reply`.
    fn swap_with_root(
        &self,
        ours: &Header,
        part: &[u8],
        reply: &Header,
        frame: &mut [u8],
    ) -> Result<()> {
        self.send_part(ours, ROOT, part)?;
        // Rank 0 hears from every rank, so when one stalls it is rank 0 that times out on it
        // and tells the others which rank it was. They give rank 0 half a timeout more, so
        // that its notice, not their own timeout on rank 0, ends their wait.
        let wait = self.timeout.saturating_add(self.timeout / 2);
        let name = ours.kind.name();
        let theirs = read_frame(self.reader(name, ROOT)?, name, frame, wait)?;
        self.same_call(ROOT, &theirs, reply)
    }

    /// Ends a call through rank 0: rank 0 exchanged with every rank, the others with rank 0.
    fn finish_star(&self, kind: Kind) -> Result<()> {
        let partners =
            (0..self.size).filter(|&peer| peer != self.rank && (self.rank == ROOT || peer == ROOT));
        self.finish_exchanges(kind, partners)
    }

    /// All-reduce of `data` through rank 0.
    pub(crate) fn all_reduce_star(
        &self,
        state: &mut State,
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let kind = kind_of(op);
        let ours = self.header(state, kind, dtype, data.len());
        let frame = Self::scratch(state, HEADER_BYTES + data.len());
        if self.rank == ROOT {
            self.gather_parts(&ours, frame, |_, part| {
                reduce_bytes(data, part, dtype, kernel_op(op));
            })?;
            for peer in self.others() {
                self.send_part(&ours, peer, data)?;
            }
        } else {
            self.swap_with_root(&ours, data, &ours, frame)?;
            data.copy_from_slice(&frame[HEADER_BYTES..]);
        }
        self.finish_star(kind)
    }

    /// All-gather through rank 0 into `output`, this rank's block of `block` bytes already in
    /// place.
    pub(crate) fn all_gather_star(
        &self,
        state: &mut State,
        output: &mut [u8],
        block: usize,
        dtype: DType,
    ) -> Result<()> {
        let kind = Kind::AllGather;
        let ours = self.header(state, kind, dtype, block);
        let whole = Header {
            bytes: output.len() as u64,
            ..ours
        };
        self.watch.accept(whole.bytes);
        if self.rank == ROOT {
            let frame = Self::scratch(state, HEADER_BYTES + block);
            self.gather_parts(&ours, frame, |peer, part| {
                output[peer * block..(peer + 1) * block].copy_from_slice(part);
            })?;
            for peer in self.others() {
                self.send_part(&whole, peer, output)?;
            }
        } else {
            let frame = Self::scratch(state, HEADER_BYTES + output.len());
            let mine = &output[self.rank * block..(self.rank + 1) * block];
            self.swap_with_root(&ours, mine, &whole, frame)?;
            output.copy_from_slice(&frame[HEADER_BYTES..]);
        }
        self.finish_star(kind)
    }

    /// Reduce-scatter of `input` through rank 0: this rank's block of the sum into `output`.
    pub(crate) fn reduce_scatter_star(
        &self,
        state: &mut State,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let kind = Kind::SumScatter;
        let ours = self.header(state, kind, dtype, input.len());
        let block = output.len();
        let share = Header {
            bytes: block as u64,
            ..ours
        };
        self.watch.accept(share.bytes);
        if self.rank == ROOT {
            let scratch = Self::scratch(state, 2 * input.len() + HEADER_BYTES);
            let (sum, frame) = scratch.split_at_mut(input.len());
            sum.copy_from_slice(input);
            self.gather_parts(&ours, frame, |_, part| {
                reduce_bytes(sum, part, dtype, kernel_op(op));
            })?;
            for peer in self.others() {
                self.send_part(&share, peer, &sum[peer * block..(peer + 1) * block])?;
            }
            output.copy_from_slice(&sum[ROOT * block..(ROOT + 1) * block]);
        } else {
            let frame = Self::scratch(state, HEADER_BYTES + block);
            self.swap_with_root(&ours, input, &share, frame)?;
            output.copy_from_slice(&frame[HEADER_BYTES..]);
        }
        self.finish_star(kind)
    }
}
