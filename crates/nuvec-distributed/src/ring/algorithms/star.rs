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

use super::Calls;
use crate::kernels::kernel_op;
use crate::ring::transport::{same_call, Transport};
use crate::tcp::frame::{Header, Kind, HEADER_BYTES};
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

/// Whether a collective of `bytes` (its input or output, the larger) on a group of `size`
/// goes through rank 0.
pub(crate) fn uses_star(size: usize, bytes: usize) -> bool {
    let limit = if size.is_power_of_two() {
        STAR_PATH_BYTES
    } else {
        STAR_PATH_BYTES_NO_DOUBLING
    };
    (3..=STAR_PATH_RANKS).contains(&size) && bytes <= limit
}

/// The ranks other than this one, in rank order.
fn others<T: Transport + ?Sized>(t: &T) -> impl Iterator<Item = usize> + '_ {
    (0..t.size()).filter(move |&peer| peer != t.rank())
}

/// Sends the frame `ours` with `part` to rank `to`.
pub(crate) fn send_part<T: Transport + ?Sized>(
    t: &T,
    ours: &Header,
    to: usize,
    part: &[u8],
) -> Result<()> {
    t.send_frame(to, 0, ours, part)
}

/// On rank 0: reads every other rank's part, in rank order, into `frame` (room for the
/// header and a part), checks it called `ours`, and hands the part to `take`.
fn gather_parts<T: Transport + ?Sized>(
    t: &T,
    ours: &Header,
    frame: &mut [u8],
    mut take: impl FnMut(usize, &[u8]),
) -> Result<()> {
    let name = ours.kind.name();
    for peer in others(t) {
        let theirs = t.recv_frame((peer, 0), name, frame, &|h| h.bytes, t.timeout())?;
        same_call(t.rank(), peer, &theirs, ours)?;
        take(peer, &frame[HEADER_BYTES..]);
    }
    Ok(())
}

/// On other ranks: sends `part` to rank 0, then reads rank 0's reply into `frame` (room for
/// the header and the reply) and checks its header is `reply`.
fn swap_with_root<T: Transport + ?Sized>(
    t: &T,
    ours: &Header,
    part: &[u8],
    reply: &Header,
    frame: &mut [u8],
) -> Result<()> {
    send_part(t, ours, ROOT, part)?;
    // Rank 0 hears from every rank, so when one stalls it is rank 0 that times out on it and
    // tells the others which rank it was. They give rank 0 half a timeout more, so that its
    // notice, not their own timeout on rank 0, ends their wait.
    let wait = t.timeout().saturating_add(t.timeout() / 2);
    let name = ours.kind.name();
    let theirs = t.recv_frame((ROOT, 0), name, frame, &|h| h.bytes, wait)?;
    same_call(t.rank(), ROOT, &theirs, reply)
}

/// Ends a call through rank 0: rank 0 exchanged with every rank, the others with rank 0.
fn finish_star<T: Transport + ?Sized>(t: &T, kind: Kind) -> Result<()> {
    let rank = t.rank();
    for peer in (0..t.size()).filter(|&peer| peer != rank && (rank == ROOT || peer == ROOT)) {
        t.finish_exchange(peer, kind.name())?;
    }
    Ok(())
}

/// All-reduce of `data` through rank 0.
pub(crate) fn all_reduce<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    data: &mut [u8],
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    let kind = super::kind_of(op);
    let ours = calls.header(t, kind, dtype, data.len());
    let frame = calls.scratch(HEADER_BYTES + data.len());
    if t.rank() == ROOT {
        gather_parts(t, &ours, frame, |_, part| {
            reduce_bytes(data, part, dtype, kernel_op(op));
        })?;
        for peer in others(t) {
            send_part(t, &ours, peer, data)?;
        }
    } else {
        swap_with_root(t, &ours, data, &ours, frame)?;
        data.copy_from_slice(&frame[HEADER_BYTES..]);
    }
    finish_star(t, kind)
}

/// All-gather through rank 0 into `output`, this rank's block of `block` bytes already in
/// place.
pub(crate) fn all_gather<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    output: &mut [u8],
    (block, dtype): (usize, DType),
) -> Result<()> {
    let kind = Kind::AllGather;
    let ours = calls.header(t, kind, dtype, block);
    let whole = Header {
        bytes: output.len() as u64,
        ..ours
    };
    t.accept(whole.bytes);
    let rank = t.rank();
    if rank == ROOT {
        let frame = calls.scratch(HEADER_BYTES + block);
        gather_parts(t, &ours, frame, |peer, part| {
            output[peer * block..(peer + 1) * block].copy_from_slice(part);
        })?;
        for peer in others(t) {
            send_part(t, &whole, peer, output)?;
        }
    } else {
        let frame = calls.scratch(HEADER_BYTES + output.len());
        let mine = &output[rank * block..(rank + 1) * block];
        swap_with_root(t, &ours, mine, &whole, frame)?;
        output.copy_from_slice(&frame[HEADER_BYTES..]);
    }
    finish_star(t, kind)
}

/// Reduce-scatter of `input` through rank 0: this rank's block of the sum into `output`.
pub(crate) fn reduce_scatter<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    let kind = Kind::SumScatter;
    let ours = calls.header(t, kind, dtype, input.len());
    let block = output.len();
    let share = Header {
        bytes: block as u64,
        ..ours
    };
    t.accept(share.bytes);
    if t.rank() == ROOT {
        let scratch = calls.scratch(2 * input.len() + HEADER_BYTES);
        let (sum, frame) = scratch.split_at_mut(input.len());
        sum.copy_from_slice(input);
        gather_parts(t, &ours, frame, |_, part| {
            reduce_bytes(sum, part, dtype, kernel_op(op));
        })?;
        for peer in others(t) {
            send_part(t, &share, peer, &sum[peer * block..(peer + 1) * block])?;
        }
        output.copy_from_slice(&sum[ROOT * block..(ROOT + 1) * block]);
    } else {
        let frame = calls.scratch(HEADER_BYTES + block);
        swap_with_root(t, &ours, input, &share, frame)?;
        output.copy_from_slice(&frame[HEADER_BYTES..]);
    }
    finish_star(t, kind)
}
