//! Reduce-scatter on the ring without copying the input: the running sums of the segment in
//! flight live in the output, which is one segment long.
//!
//! At each step a rank receives a partial result for one segment from its left, combines its
//! own input's part of that segment with it, and passes it right; the last segment it
//! receives is its own, and what it computes there is the result. The first segment it sends
//! comes straight from the input. A chunk of the output is overwritten only after its
//! previous contents were sent: the outbox always sends at least one chunk beyond those
//! received, and the chunks of consecutive steps line up.

use super::chunk_bytes;
use super::outbox::Outbox;
use crate::kernels::kernel_op;
use crate::ring::transport::{Link, Transport};
use crate::schedule::{chunks, reduce_scatter_steps, segment};
use crate::tcp::frame::Kind;
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Error, Result};
use nuvec_cpu::bytes::combine_bytes;

/// This rank's segment of the reduction of `input` (whose length is `size` times the
/// output's) into `output`, over `link`.
pub(crate) fn reduce_scatter_into<T: Transport + ?Sized>(
    link: &Link<'_, T>,
    (input, output): (&[u8], &mut [u8]),
    (dtype, op): (DType, ReduceOp),
    scratch: &mut Vec<u8>,
) -> Result<()> {
    let kind = Kind::SumScatter;
    let (n, width) = (link.transport.size(), dtype.size());
    if input.len() != output.len() * n || output.len() % width != 0 {
        return Err(Error::Distributed {
            op: kind.name().into(),
            rank: None,
            reason: format!(
                "an input of {} bytes does not split into {n} segments of {} bytes",
                input.len(),
                output.len()
            ),
        });
    }
    if n == 1 {
        output.copy_from_slice(input);
        return Ok(());
    }
    let elements = output.len() / width;
    let chunk_elements = (chunk_bytes(input.len()) / width).max(1);
    let steps = reduce_scatter_steps(n, link.position);
    let mut outbox = Outbox::new(link.window(), Some(input));
    let first = segment(elements * n, n, steps[0].send);
    for piece in chunks(first, chunk_elements) {
        outbox.push_input(piece.start * width..piece.end * width);
    }
    outbox.pump(link, output)?;
    link.check_left()?;
    for (index, step) in steps.iter().enumerate() {
        let last = index + 1 == steps.len();
        let base = step.recv * elements;
        for piece in chunks(0..elements, chunk_elements) {
            let here = piece.start * width..piece.end * width;
            let own = (base + piece.start) * width..(base + piece.end) * width;
            let mut combine = |offset: usize, incoming: &[u8]| {
                let (at, own) = (here.start + offset, own.start + offset);
                let out = &mut output[at..at + incoming.len()];
                let own = &input[own..own + incoming.len()];
                combine_bytes(out, own, incoming, dtype, kernel_op(op));
            };
            link.recv_chunk_with(here.len(), scratch, &mut combine)?;
            outbox.received(here.len());
            if !last {
                outbox.push(here);
            }
            outbox.pump(link, output)?;
        }
    }
    outbox.drain(link, output)
}
