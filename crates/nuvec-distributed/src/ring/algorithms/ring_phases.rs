//! The two phases of a ring collective, chunk by chunk: reduce-scatter (each received chunk
//! combined into this rank's buffer and forwarded) and all-gather (each received chunk put in
//! place and forwarded). `crate::schedule` says which segment moves at each step; the link
//! says where chunks go; the outbox how far ahead sends may run.

use super::chunk_bytes;
use super::outbox::{Outbox, OwnBlock};
use crate::kernels::kernel_op;
use crate::ring::transport::{Link, Transport};
use crate::schedule::{all_gather_steps, chunks, reduce_scatter_steps, segment};
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Result};
use nuvec_cpu::bytes::{combine_bytes, reduce_bytes};

/// The reduce-scatter phase of an all-reduce over `data` split in `size` segments; the
/// finished segment is forwarded to start the all-gather. When the outbox reads an input,
/// `data`'s old contents are ignored: the first segment goes right straight from the input,
/// and each received one is combined with the input's part.
pub(crate) fn reduce_scatter_phase<T: Transport + ?Sized>(
    link: &Link<'_, T>,
    data: &mut [u8],
    (dtype, op): (DType, ReduceOp),
    (scratch, outbox): (&mut Vec<u8>, &mut Outbox<'_>),
) -> Result<()> {
    let from_input = outbox.input();
    let (n, width) = (link.transport.size(), dtype.size());
    let len = data.len() / width;
    let chunk_elements = (chunk_bytes(data.len()) / width).max(1);
    let steps = reduce_scatter_steps(n, link.position);
    for piece in chunks(segment(len, n, steps[0].send), chunk_elements) {
        outbox.push_input(piece.start * width..piece.end * width);
    }
    outbox.pump(link, data)?;
    link.check_left()?;
    for step in &steps {
        for piece in chunks(segment(len, n, step.recv), chunk_elements) {
            let bytes = piece.start * width..piece.end * width;
            let mut reduce = |offset: usize, incoming: &[u8]| {
                let at = bytes.start + offset..bytes.start + offset + incoming.len();
                let out = &mut data[at.clone()];
                match from_input {
                    Some(input) => combine_bytes(out, &input[at], incoming, dtype, kernel_op(op)),
                    None => reduce_bytes(out, incoming, dtype, kernel_op(op)),
                }
            };
            link.recv_chunk_with(bytes.len(), scratch, &mut reduce)?;
            outbox.received(bytes.len());
            outbox.push(bytes);
            outbox.pump(link, data)?;
        }
    }
    Ok(())
}

/// The all-gather phase: this rank owns segment `position` (already being sent right). `own`,
/// when given, is that segment still in the caller's input: it is copied into place a chunk
/// per chunk received, so the copy overlaps the transfer.
pub(crate) fn all_gather_phase<T: Transport + ?Sized>(
    link: &Link<'_, T>,
    data: &mut [u8],
    width: usize,
    outbox: &mut Outbox<'_>,
    mut own: Option<&mut OwnBlock<'_>>,
) -> Result<()> {
    let n = link.transport.size();
    let len = data.len() / width;
    let chunk_elements = (chunk_bytes(data.len()) / width).max(1);
    let steps = all_gather_steps(n, link.position);
    for (index, step) in steps.iter().enumerate() {
        for piece in chunks(segment(len, n, step.recv), chunk_elements) {
            let bytes = piece.start * width..piece.end * width;
            link.recv_chunk(&mut data[bytes.clone()])?;
            outbox.received(bytes.len());
            if index + 1 < steps.len() {
                outbox.push(bytes.clone());
            }
            outbox.pump(link, data)?;
            if let Some(own) = own.as_deref_mut() {
                own.copy_next(data, bytes.len());
            }
        }
    }
    outbox.drain(link, data)?;
    if let Some(own) = own {
        own.copy_next(data, usize::MAX);
    }
    Ok(())
}
