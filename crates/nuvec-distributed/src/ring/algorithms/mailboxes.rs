//! The latency path for small collectives of a group on one machine: every rank posts its
//! part straight into every other rank's mailbox (`shm/mailbox.rs`) and combines the parts
//! it receives, in rank order, so every rank gets the same bits: ((x0 + x1) + x2) + x3 for a
//! sum of four ranks. One hop, no frame on TCP and no system call while the ranks keep up.
//! A part larger than a post goes in pieces of `POST_BYTES`, two in flight each way.
//!
//! - `all_sum` and its kin: every rank posts its whole array to every other and folds all;
//! - `all_gather`: every rank posts its block to every other and places the blocks;
//! - `sum_scatter`: every rank posts block `j` of its input to rank `j` and folds its own.
//!
//! Each rank posts piece `k` to every peer before it waits for any peer's piece `k`, and a
//! post waits only for the piece two before it to be taken, which its receiver took before
//! posting its own piece `k`: no rank waits on one that waits on it.

use super::{kind_of, Calls};
use crate::kernels::kernel_op;
use crate::ring::channels::Nearby;
use crate::ring::transport::Transport;
use crate::shm::{Channel, Mailbox, POST_BYTES};
use crate::tcp::frame::{Header, Kind};
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Error, Result};
use nuvec_cpu::bytes::{combine_bytes, reduce_bytes};
use std::ops::Range;

/// The largest collective (bytes of the larger of its input and output) that takes this
/// path, by collective and group size. On two ranks the ring, whose two ranks each fold half
/// and copy the other half, wins past these; on more ranks the mailboxes won at every size
/// measured, up to 64 MB (`docs/performance.md`, "Tuning measurements").
const TWO_RANK_SUM_BYTES: usize = 128 << 10;
const TWO_RANK_BYTES: usize = 512 << 10;
const MORE_RANKS_BYTES: usize = 64 << 20;
/// The largest all-reduce on more than two ranks in which every rank folds every part;
/// larger ones go in two phases, each rank folding one block.
const MORE_RANKS_DIRECT_SUM_BYTES: usize = 8 << 10;

/// Whether a collective of `bytes` (its input or output, the larger) on a group of `size`
/// whose ranks all share this machine takes the mailboxes; `sum` for an all-reduce.
pub(crate) fn uses_mailboxes(size: usize, bytes: usize, sum: bool) -> bool {
    bytes
        <= match (size, sum) {
            (2, true) => TWO_RANK_SUM_BYTES,
            (2, false) => TWO_RANK_BYTES,
            _ => MORE_RANKS_BYTES,
        }
}

/// Whether an all-reduce of `bytes` on `size` ranks goes in two phases
/// ([`all_reduce_in_blocks`]) rather than with every rank folding every part.
pub(crate) fn reduces_in_blocks(size: usize, bytes: usize) -> bool {
    size > 2 && bytes > MORE_RANKS_DIRECT_SUM_BYTES
}

/// The pieces a payload of `bytes` is posted in (one, empty, for an empty payload: the
/// ranks still meet).
pub(super) fn pieces(bytes: usize) -> impl Iterator<Item = Range<usize>> {
    let count = bytes.div_ceil(POST_BYTES).max(1);
    (0..count).map(move |k| k * POST_BYTES..((k + 1) * POST_BYTES).min(bytes))
}

/// One call's view of the mailboxes: posting to a peer, taking a peer's next piece.
pub(super) struct Call<'a, T: ?Sized> {
    pub(super) t: &'a T,
    pub(super) near: &'a Nearby,
    pub(super) ours: Header,
}

impl<'a, T: Transport + ?Sized> Call<'a, T> {
    fn to(&self, peer: usize) -> Result<&'a Channel> {
        self.near
            .channel_to(peer)
            .ok_or_else(|| self.lost(peer, "to"))
    }

    fn from(&self, peer: usize) -> Result<&'a Channel> {
        self.near
            .channel_from(peer)
            .ok_or_else(|| self.lost(peer, "from"))
    }

    fn lost(&self, peer: usize, way: &str) -> Error {
        Error::Distributed {
            op: self.ours.kind.name().into(),
            rank: Some(peer),
            reason: format!("no shared-memory channel {way} rank {peer}"),
        }
    }

    /// Posts `piece`, at `offset` in this rank's part, to `peer`.
    pub(super) fn post(&self, peer: usize, offset: usize, piece: &[u8]) -> Result<()> {
        let (t, kind) = (self.t, self.ours.kind);
        let mut alive = || t.still_going(kind, peer);
        self.to(peer)?.post(
            Mailbox::Collectives,
            &self.ours,
            offset,
            &[piece],
            (t.timeout(), &mut alive),
        )
    }

    /// Takes `peer`'s next piece, which must belong to this call, lie at `offset` and hold
    /// `bytes`; in place until [`Call::release`].
    pub(super) fn take(&self, peer: usize, offset: usize, bytes: usize) -> Result<&'a [u8]> {
        let (t, kind) = (self.t, self.ours.kind);
        let mut alive = || t.still_going(kind, peer);
        let post = self.from(peer)?.next_post(
            Mailbox::Collectives,
            kind.name(),
            (t.timeout(), &mut alive),
        )?;
        if post.header != self.ours {
            return Err(self.ours.mismatch(t.rank(), peer, &post.header));
        }
        if post.offset != offset as u64 || post.piece.len() != bytes {
            return Err(Error::Distributed {
                op: kind.name().into(),
                rank: Some(peer),
                reason: format!(
                    "rank {peer} posted {} bytes at {} of {}, where rank {} expected {bytes} at {offset}",
                    post.piece.len(),
                    post.offset,
                    self.ours.describe(),
                    t.rank()
                ),
            });
        }
        Ok(post.piece)
    }

    pub(super) fn release(&self, peer: usize) -> Result<()> {
        self.from(peer)?.release(Mailbox::Collectives);
        Ok(())
    }

    pub(super) fn others(&self) -> impl Iterator<Item = usize> + '_ {
        let rank = self.t.rank();
        (0..self.t.size()).filter(move |&peer| peer != rank)
    }

    /// Folds into `out`, in rank order, every rank's piece at `offset` (this rank's from
    /// `own`), releasing each peer's piece once used.
    fn fold(
        &self,
        out: &mut [u8],
        offset: usize,
        own: &[u8],
        (dtype, op): (DType, ReduceOp),
    ) -> Result<()> {
        let (rank, bytes) = (self.t.rank(), out.len());
        let part = |j: usize| match j == rank {
            true => Ok(own),
            false => self.take(j, offset, bytes),
        };
        let (first, second) = (part(0)?, part(1)?);
        combine_bytes(out, first, second, dtype, kernel_op(op));
        for j in [0, 1].into_iter().filter(|&j| j != rank) {
            self.release(j)?;
        }
        for j in 2..self.t.size() {
            reduce_bytes(out, part(j)?, dtype, kernel_op(op));
            if j != rank {
                self.release(j)?;
            }
        }
        Ok(())
    }
}

/// Starts the call `kind` on the mailboxes.
pub(super) fn start<'a, T: Transport + ?Sized>(
    t: &'a T,
    near: &'a Nearby,
    calls: &mut Calls,
    (kind, dtype, bytes): (Kind, DType, usize),
) -> Call<'a, T> {
    let ours = calls.header(t, kind, dtype, bytes);
    Call { t, near, ours }
}

/// All-reduce into `data` of `input` when given (else of `data` itself).
pub(crate) fn all_reduce<T: Transport + ?Sized>(
    t: &T,
    near: &Nearby,
    calls: &mut Calls,
    (input, data): (Option<&[u8]>, &mut [u8]),
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    let call = start(t, near, calls, (kind_of(op), dtype, data.len()));
    let first_peer = usize::from(t.rank() == 0);
    for piece in pieces(data.len()) {
        let source = input.unwrap_or(data);
        for peer in call.others() {
            call.post(peer, piece.start, &source[piece.clone()])?;
        }
        // This rank's part, as posted (the output may overwrite the input).
        let own = call
            .to(first_peer)?
            .latest_post(Mailbox::Collectives, piece.len());
        call.fold(&mut data[piece.clone()], piece.start, own, (dtype, op))?;
    }
    Ok(())
}

/// The byte range of block `j` of `bytes` split into `n` blocks of whole elements of `width`.
fn block(j: usize, n: usize, (bytes, width): (usize, usize)) -> Range<usize> {
    let elements = bytes / width;
    j * elements / n * width..(j + 1) * elements / n * width
}

/// All-reduce in two phases, each rank folding one block: rank `j` receives block `j` of
/// every rank's part and folds it in rank order, then posts the sum to every rank. Each rank
/// folds 1/n of the data instead of all of it.
pub(crate) fn all_reduce_in_blocks<T: Transport + ?Sized>(
    t: &T,
    near: &Nearby,
    calls: &mut Calls,
    (input, data): (Option<&[u8]>, &mut [u8]),
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    let bytes = data.len();
    let call = start(t, near, calls, (kind_of(op), dtype, bytes));
    let (rank, n, width) = (t.rank(), t.size(), dtype.size());
    let blocks: Vec<Range<usize>> = (0..n).map(|j| block(j, n, (bytes, width))).collect();
    let counts: Vec<usize> = blocks.iter().map(|b| pieces(b.len()).count()).collect();
    let most = counts.iter().copied().max().unwrap_or(1);
    let own = blocks[rank].clone();
    // This rank's own block of its part, kept apart: the sum is written over it.
    let mine = calls.scratch(own.len());
    mine.copy_from_slice(&input.unwrap_or(data)[own.clone()]);
    for k in 0..most {
        for peer in call.others() {
            if let Some(piece) = pieces(blocks[peer].len()).nth(k) {
                let at = blocks[peer].start + piece.start;
                call.post(
                    peer,
                    piece.start,
                    &input.unwrap_or(data)[at..at + piece.len()],
                )?;
            }
        }
        if let Some(piece) = pieces(own.len()).nth(k) {
            let out = &mut data[own.start + piece.start..own.start + piece.end];
            call.fold(out, piece.start, &mine[piece.clone()], (dtype, op))?;
        }
    }
    for k in 0..most {
        if let Some(piece) = pieces(own.len()).nth(k) {
            for peer in call.others() {
                let at = own.start + piece.start;
                call.post(peer, piece.start, &data[at..at + piece.len()])?;
            }
        }
        for peer in call.others() {
            if let Some(piece) = pieces(blocks[peer].len()).nth(k) {
                let at = blocks[peer].start + piece.start;
                let sum = call.take(peer, piece.start, piece.len())?;
                data[at..at + piece.len()].copy_from_slice(sum);
                call.release(peer)?;
            }
        }
    }
    Ok(())
}

/// All-gather of every rank's `input` into `output` (rank `r`'s at block `r`).
pub(crate) fn all_gather<T: Transport + ?Sized>(
    t: &T,
    near: &Nearby,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    dtype: DType,
) -> Result<()> {
    let call = start(t, near, calls, (Kind::AllGather, dtype, input.len()));
    let block = input.len();
    output[t.rank() * block..(t.rank() + 1) * block].copy_from_slice(input);
    for piece in pieces(block) {
        for peer in call.others() {
            call.post(peer, piece.start, &input[piece.clone()])?;
        }
        for peer in call.others() {
            let at = peer * block + piece.start;
            let part = call.take(peer, piece.start, piece.len())?;
            output[at..at + piece.len()].copy_from_slice(part);
            call.release(peer)?;
        }
    }
    Ok(())
}

/// This rank's block of the reduction of every rank's `input` into `output`.
pub(crate) fn reduce_scatter<T: Transport + ?Sized>(
    t: &T,
    near: &Nearby,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    let call = start(t, near, calls, (Kind::SumScatter, dtype, input.len()));
    let block = output.len();
    let own = t.rank() * block;
    for piece in pieces(block) {
        for peer in call.others() {
            let at = peer * block + piece.start;
            call.post(peer, piece.start, &input[at..at + piece.len()])?;
        }
        let mine = &input[own + piece.start..own + piece.end];
        call.fold(&mut output[piece.clone()], piece.start, mine, (dtype, op))?;
    }
    Ok(())
}
