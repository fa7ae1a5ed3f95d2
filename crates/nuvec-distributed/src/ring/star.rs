//! The latency path for small reductions on groups of three ranks or more: every rank sends
//! its data to rank 0, which combines the parts in rank order, ((x0 + x1) + x2) + x3 for
//! four ranks, and sends the result back. Two hops whatever the group's size, like recursive
//! doubling on four ranks, but each rank other than rank 0 sends once and wakes once instead
//! of once per step. Where ranks outnumber cores (four ranks on two, say), wake-ups are what
//! a small collective's time is made of. Rank 0 computes alone, so every rank gets its bits,
//! and reruns repeat them.

use super::frame::HEADER_BYTES;
use super::wire::read_frame;
use super::{kernel_op, kind_of, RingCommunicator, State};
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Result};
use nuvec_cpu::bytes::reduce_bytes;

/// The rank that combines the parts.
const ROOT: usize = 0;
/// The largest reduction (bytes) that takes this path on a power-of-two group. Rank 0's link
/// carries n − 1 parts each way, so past a few pages recursive doubling's exchanges win (on
/// four ranks over loopback the two are even at 64 KiB; between hosts, rank 0's link is the
/// bottleneck).
pub(super) const STAR_PATH_BYTES: usize = 16 * 1024;
/// The same for other groups, where the alternative is the ring's 2(n − 1) hops (three ranks
/// over loopback, 64 KiB: 0.1 ms through rank 0 against 0.2 ms round the ring).
pub(super) const STAR_PATH_BYTES_NO_DOUBLING: usize = 64 * 1024;
/// The largest group that takes this path: rank 0 handles every part in turn.
pub(super) const STAR_PATH_RANKS: usize = 8;

impl RingCommunicator {
    /// Whether an all-reduce of `bytes` goes through rank 0.
    pub(super) fn uses_star(&self, bytes: usize) -> bool {
        let limit = if self.size.is_power_of_two() {
            STAR_PATH_BYTES
        } else {
            STAR_PATH_BYTES_NO_DOUBLING
        };
        (3..=STAR_PATH_RANKS).contains(&self.size) && bytes <= limit
    }

    /// All-reduce of `data` through rank 0.
    pub(super) fn all_reduce_star(
        &self,
        state: &mut State,
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let kind = kind_of(op);
        let name = kind.name();
        let ours = Self::header(state, kind, dtype, data.len());
        let frame_bytes = HEADER_BYTES + data.len();
        state
            .scratch
            .resize(state.scratch.len().max(frame_bytes), 0);
        let frame = &mut state.scratch[..frame_bytes];
        if self.rank == ROOT {
            for peer in (0..self.size).filter(|&peer| peer != ROOT) {
                let theirs = read_frame(self.reader(name, peer)?, name, frame, self.timeout)?;
                self.same_call(peer, &theirs, &ours)?;
                reduce_bytes(data, &frame[HEADER_BYTES..], dtype, kernel_op(op));
            }
            for peer in (0..self.size).filter(|&peer| peer != ROOT) {
                self.send_part(&ours, peer, data)?;
            }
        } else {
            self.send_part(&ours, ROOT, data)?;
            // Rank 0 hears from every rank, so when one stalls it is rank 0 that times out
            // on it and tells the others which rank it was. They give rank 0 half a timeout
            // more, so that its notice, not their own timeout on rank 0, ends their wait.
            let wait = self.timeout.saturating_add(self.timeout / 2);
            let theirs = read_frame(self.reader(name, ROOT)?, name, frame, wait)?;
            self.same_call(ROOT, &theirs, &ours)?;
            data.copy_from_slice(&frame[HEADER_BYTES..]);
        }
        // Rank 0 exchanged with every rank, the others with rank 0 alone.
        let partners =
            (0..self.size).filter(|&peer| peer != self.rank && (self.rank == ROOT || peer == ROOT));
        self.finish_exchanges(kind, partners)
    }
}
