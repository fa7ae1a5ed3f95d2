//! Reduce-scatter on the ring without copying the input: the running sums of the segment in
//! flight live in the output, which is one segment long.
//!
//! At each step a rank receives a partial result for one segment from its left, combines its
//! own input's part of that segment with it, and passes it right; the last segment it
//! receives is its own, and what it computes there is the result. The first segment it sends
//! comes straight from the input. A chunk of the output is overwritten only after its
//! previous contents were sent: the outbox always sends at least one chunk beyond those
//! received, and the chunks of consecutive steps line up.

use super::super::link::Link;
use super::super::{chunk_bytes, RingCommunicator};
use super::outbox::Outbox;
use crate::kernels::kernel_op;
use crate::schedule::{chunks, reduce_scatter_steps, segment};
use crate::tcp::frame::Kind;
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Error, Result};
use nuvec_cpu::bytes::combine_bytes;

impl RingCommunicator {
    /// Reduce-scatter of `input` (`size` segments of `output.len()` bytes) into `output`,
    /// with `scratch` holding one received chunk at a time.
    pub(crate) fn reduce_scatter_into(
        &self,
        link: &Link<'_>,
        (input, output): (&[u8], &mut [u8]),
        (dtype, op): (DType, ReduceOp),
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let kind = Kind::SumScatter;
        let (n, width) = (self.size, dtype.size());
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
        let mut outbox = Outbox::reading(Some(input));
        let first = segment(elements * n, n, steps[0].send);
        for piece in chunks(first, chunk_elements) {
            outbox.push_input(piece.start * width..piece.end * width);
        }
        outbox.pump(link, kind, output)?;
        self.check_left(link)?;
        for (index, step) in steps.iter().enumerate() {
            let last = index + 1 == steps.len();
            let base = step.recv * elements;
            for piece in chunks(0..elements, chunk_elements) {
                let here = piece.start * width..piece.end * width;
                let own = (base + piece.start) * width..(base + piece.end) * width;
                // Own part first, as the all-reduce combines them, so results match its bits.
                let mut combine = |offset: usize, incoming: &[u8]| {
                    let (at, own) = (here.start + offset, own.start + offset);
                    let out = &mut output[at..at + incoming.len()];
                    let own = &input[own..own + incoming.len()];
                    combine_bytes(out, own, incoming, dtype, kernel_op(op));
                };
                link.recv_chunk_with(kind, here.len(), scratch, &mut combine)?;
                outbox.received(here.len());
                if !last {
                    outbox.push(here);
                }
                outbox.pump(link, kind, output)?;
            }
        }
        outbox.drain(link, kind, output)
    }
}
