//! The latency path for small reductions and gathers on a power-of-two group (where
//! `star.rs`, through rank 0, does not take them): recursive doubling over the full mesh,
//! log2(n) exchanges instead of the ring's 2(n − 1) or n − 1 hops; and its one-step case for
//! a 2-rank `sum_scatter`. The exchanges' framing (a header and the part in one frame, the
//! check for abort notices at the end) serves both paths.
//!
//! At step k, rank r swaps its partial result with rank r XOR 2^k and both combine them as
//! (lower rank's part) op (higher rank's part), so every rank computes the same tree,
//! ((x0 + x1) + (x2 + x3)) for 4 ranks, and gets the same bits; reruns repeat them.

use super::super::{kind_of, RingCommunicator, State};
use crate::kernels::kernel_op;
use crate::tcp::frame::{Header, Kind, HEADER_BYTES};
use crate::tcp::wire::{pending_abort, read_frame, read_frame_of, read_header};
use crate::tcp::Connection;
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Result};
use nuvec_cpu::bytes::reduce_bytes;

/// The largest reduction (bytes) that takes this path.
pub(crate) const LATENCY_PATH_BYTES: usize = 64 * 1024;

impl RingCommunicator {
    /// Whether an all-reduce of `bytes` takes the recursive-doubling path.
    pub(crate) fn uses_doubling(&self, bytes: usize) -> bool {
        self.size.is_power_of_two() && bytes <= LATENCY_PATH_BYTES
    }

    /// Sends `part` to `partner` after this call's header, as one frame.
    pub(crate) fn send_part(&self, ours: &Header, partner: usize, part: &[u8]) -> Result<()> {
        let name = ours.kind.name();
        self.writer(name, partner)?
            .write(name, &[&ours.encode(), part])
    }

    /// Sends `part` to `partner` after this call's header and checks the partner's header;
    /// the partner's payload is then the next thing to read from the returned connection.
    fn swap_headers(&self, ours: &Header, partner: usize, part: &[u8]) -> Result<&Connection> {
        self.send_part(ours, partner, part)?;
        let name = ours.kind.name();
        let peer = self.reader(name, partner)?;
        let theirs = read_header(peer, name, self.timeout)?;
        self.same_call(partner, &theirs, ours)?;
        Ok(peer)
    }

    /// Sends `part` to `partner` after this call's header and reads the partner's frame,
    /// header and payload in one go, into `frame` (room for both); checks its header.
    fn swap_frames(
        &self,
        ours: &Header,
        partner: usize,
        part: &[u8],
        frame: &mut [u8],
    ) -> Result<()> {
        self.send_part(ours, partner, part)?;
        let name = ours.kind.name();
        let theirs = read_frame(self.reader(name, partner)?, name, frame, self.timeout)?;
        self.same_call(partner, &theirs, ours)
    }

    /// The partners of this rank's exchanges, step by step.
    fn doubling_partners(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::successors(Some(1usize), |distance| distance.checked_mul(2))
            .take_while(|&distance| distance < self.size)
            .map(|distance| self.rank ^ distance)
    }

    /// Ends a call of exchanges with `partners`: a partner that gave up on it (it timed out
    /// waiting for this rank, say) may have sent its part first, and its abort notice, already
    /// waiting, fails the call here too, so no rank takes a result that another rank reported
    /// as failed.
    pub(crate) fn finish_exchanges(
        &self,
        kind: Kind,
        partners: impl Iterator<Item = usize>,
    ) -> Result<()> {
        for partner in partners {
            let peer = self.reader(kind.name(), partner)?;
            if peer
                .waiting_header()
                .as_ref()
                .and_then(pending_abort)
                .is_some()
            {
                read_header(peer, kind.name(), self.timeout)?;
            }
            self.writer(kind.name(), partner)?
                .flush(kind.name(), self.timeout)?;
        }
        Ok(())
    }

    /// `state`'s scratch, at least `bytes` long (kept between calls).
    pub(crate) fn scratch(state: &mut State, bytes: usize) -> &mut [u8] {
        state.scratch.resize(state.scratch.len().max(bytes), 0);
        &mut state.scratch[..bytes]
    }

    /// The header of the collective starting now (which counts it, and which the group's
    /// watch then checks other ranks' frames against).
    pub(crate) fn header(
        &self,
        state: &mut State,
        kind: Kind,
        dtype: DType,
        bytes: usize,
    ) -> Header {
        let header = Header {
            kind,
            dtype,
            sequence: state.collectives,
            bytes: bytes as u64,
        };
        state.collectives += 1;
        self.watch.begin(header);
        header
    }

    /// All-reduce of `data` by recursive doubling.
    pub(crate) fn all_reduce_doubling(
        &self,
        state: &mut State,
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let kind = kind_of(op);
        let ours = self.header(state, kind, dtype, data.len());
        let frame = Self::scratch(state, HEADER_BYTES + data.len());
        let mut distance = 1;
        while distance < self.size {
            let partner = self.rank ^ distance;
            self.swap_frames(&ours, partner, data, frame)?;
            let incoming = &mut frame[HEADER_BYTES..];
            if self.rank < partner {
                reduce_bytes(data, incoming, dtype, kernel_op(op));
            } else {
                reduce_bytes(incoming, data, dtype, kernel_op(op));
                data.copy_from_slice(incoming);
            }
            distance *= 2;
        }
        self.finish_exchanges(kind, self.doubling_partners())
    }

    /// All-gather by recursive doubling: at step k each rank holds the 2^k blocks of its
    /// aligned group and swaps them with its partner's group, so `output` (this rank's block
    /// already in place) fills in log2(n) exchanges.
    pub(crate) fn all_gather_doubling(
        &self,
        state: &mut State,
        output: &mut [u8],
        block: usize,
        dtype: DType,
    ) -> Result<()> {
        let kind = Kind::AllGather;
        let ours = self.header(state, kind, dtype, block);
        let mut distance = 1;
        while distance < self.size {
            let partner = self.rank ^ distance;
            let mine = (self.rank & !(distance - 1)) * block;
            let theirs = (partner & !(distance - 1)) * block;
            let span = distance * block;
            let peer = self.swap_headers(&ours, partner, &output[mine..mine + span])?;
            peer.read_exact(
                kind.name(),
                &mut output[theirs..theirs + span],
                self.timeout,
            )?;
            distance *= 2;
        }
        self.finish_exchanges(kind, self.doubling_partners())
    }

    /// Reduce-scatter on two ranks in one exchange: each rank sends the block the other
    /// keeps, and both combine (rank 0's block) op (rank 1's block). The frame's header
    /// announces the whole input, as the ring's does, and carries half of it.
    pub(crate) fn reduce_scatter_pair(
        &self,
        state: &mut State,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let kind = Kind::SumScatter;
        let block = output.len();
        let ours = self.header(state, kind, dtype, input.len());
        let partner = 1 - self.rank;
        let frame = Self::scratch(state, HEADER_BYTES + block);
        let theirs = &input[partner * block..(partner + 1) * block];
        self.send_part(&ours, partner, theirs)?;
        let name = kind.name();
        let header = read_frame_of(
            self.reader(name, partner)?,
            name,
            frame,
            self.timeout,
            |h| h.bytes / 2,
        )?;
        self.same_call(partner, &header, &ours)?;
        let (mine, received) = (
            &input[self.rank * block..(self.rank + 1) * block],
            &frame[HEADER_BYTES..],
        );
        let (first, second) = if self.rank == 0 {
            (mine, received)
        } else {
            (received, mine)
        };
        output.copy_from_slice(first);
        reduce_bytes(output, second, dtype, kernel_op(op));
        self.finish_exchanges(kind, std::iter::once(partner))
    }
}
