//! The latency path for small reductions and gathers on a power-of-two group (where
//! `star.rs`, through rank 0, does not take them): recursive doubling over the full mesh,
//! log2(n) exchanges instead of the ring's 2(n − 1) or n − 1 hops; and its one-step case for
//! a 2-rank `sum_scatter`. The exchanges' framing (a header and the part in one frame, the
//! check for abort notices at the end) serves both paths.
//!
//! At step k, rank r swaps its partial result with rank r XOR 2^k and both combine them as
//! (lower rank's part) op (higher rank's part), so every rank computes the same tree,
//! ((x0 + x1) + (x2 + x3)) for 4 ranks, and gets the same bits; reruns repeat them.

use super::star::send_part;
use super::Calls;
use crate::kernels::kernel_op;
use crate::ring::transport::{same_call, Transport};
use crate::tcp::frame::{Header, Kind, HEADER_BYTES};
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Result};
use nuvec_cpu::bytes::reduce_bytes;

/// The largest reduction (bytes) that takes this path.
pub(crate) const LATENCY_PATH_BYTES: usize = 64 * 1024;

/// Whether an all-reduce of `bytes` on a group of `size` takes the recursive-doubling path.
pub(crate) fn uses_doubling(size: usize, bytes: usize) -> bool {
    size.is_power_of_two() && bytes <= LATENCY_PATH_BYTES
}

/// Sends `part` to `partner` in the frame `ours`, then reads and checks the partner's header
/// (its payload is left for the caller to read).
fn swap_headers<T: Transport + ?Sized>(
    t: &T,
    ours: &Header,
    partner: usize,
    part: &[u8],
) -> Result<()> {
    send_part(t, ours, partner, part)?;
    let theirs = t.recv_header(partner, 0, ours.kind.name())?;
    same_call(t.rank(), partner, &theirs, ours)
}

/// Sends `part` to `partner` in the frame `ours` and reads the partner's frame into `frame`
/// (room for the header and a part of the same size), checking its header.
fn swap_frames<T: Transport + ?Sized>(
    t: &T,
    ours: &Header,
    partner: usize,
    part: &[u8],
    frame: &mut [u8],
) -> Result<()> {
    send_part(t, ours, partner, part)?;
    let theirs = t.recv_frame(
        (partner, 0),
        ours.kind.name(),
        frame,
        &|h| h.bytes,
        t.timeout(),
    )?;
    same_call(t.rank(), partner, &theirs, ours)
}

/// The partners of this rank's exchanges, step by step.
fn partners<T: Transport + ?Sized>(t: &T) -> impl Iterator<Item = usize> {
    let (rank, size) = (t.rank(), t.size());
    std::iter::successors(Some(1usize), |distance| distance.checked_mul(2))
        .take_while(move |&distance| distance < size)
        .map(move |distance| rank ^ distance)
}

/// Ends a call of exchanges with `partners` ([`Transport::finish_exchange`]).
fn finish<T: Transport + ?Sized>(
    t: &T,
    kind: Kind,
    partners: impl Iterator<Item = usize>,
) -> Result<()> {
    for partner in partners {
        t.finish_exchange(partner, kind.name())?;
    }
    Ok(())
}

/// All-reduce of `data` by recursive doubling.
pub(crate) fn all_reduce<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    data: &mut [u8],
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    let kind = super::kind_of(op);
    let ours = calls.header(t, kind, dtype, data.len());
    let frame = calls.scratch(HEADER_BYTES + data.len());
    let rank = t.rank();
    let mut distance = 1;
    while distance < t.size() {
        let partner = rank ^ distance;
        swap_frames(t, &ours, partner, data, frame)?;
        let incoming = &mut frame[HEADER_BYTES..];
        if rank < partner {
            reduce_bytes(data, incoming, dtype, kernel_op(op));
        } else {
            reduce_bytes(incoming, data, dtype, kernel_op(op));
            data.copy_from_slice(incoming);
        }
        distance *= 2;
    }
    finish(t, kind, partners(t))
}

/// All-gather into `output` by recursive doubling, this rank's block of `block` bytes
/// already in place: at each step the partners swap everything they have gathered so far.
pub(crate) fn all_gather<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    output: &mut [u8],
    (block, dtype): (usize, DType),
) -> Result<()> {
    let kind = Kind::AllGather;
    let ours = calls.header(t, kind, dtype, block);
    let rank = t.rank();
    let mut distance = 1;
    while distance < t.size() {
        let partner = rank ^ distance;
        let mine = (rank & !(distance - 1)) * block;
        let theirs = (partner & !(distance - 1)) * block;
        let span = distance * block;
        swap_headers(t, &ours, partner, &output[mine..mine + span])?;
        t.recv_payload(partner, 0, kind.name(), &mut output[theirs..theirs + span])?;
        distance *= 2;
    }
    finish(t, kind, partners(t))
}

/// Reduce-scatter on two ranks in one exchange: each sends the other the half it needs and
/// combines the half it keeps, (rank 0's part) op (rank 1's part) on both.
pub(crate) fn reduce_scatter_pair<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    let kind = Kind::SumScatter;
    let block = output.len();
    let ours = calls.header(t, kind, dtype, input.len());
    let rank = t.rank();
    let partner = 1 - rank;
    let frame = calls.scratch(HEADER_BYTES + block);
    let theirs = &input[partner * block..(partner + 1) * block];
    send_part(t, &ours, partner, theirs)?;
    let name = kind.name();
    let header = t.recv_frame((partner, 0), name, frame, &|h| h.bytes / 2, t.timeout())?;
    same_call(rank, partner, &header, &ours)?;
    let (mine, received) = (
        &input[rank * block..(rank + 1) * block],
        &frame[HEADER_BYTES..],
    );
    let (first, second) = if rank == 0 {
        (mine, received)
    } else {
        (received, mine)
    };
    output.copy_from_slice(first);
    reduce_bytes(output, second, dtype, kernel_op(op));
    finish(t, kind, std::iter::once(partner))
}
