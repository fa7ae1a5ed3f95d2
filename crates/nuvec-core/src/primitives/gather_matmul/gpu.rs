//! [`GatherMatmul`] on a GPU: the indices are read back (one wait per call), then each run of
//! equal `rhs` indices multiplies its rows of `x`, gathered into one block, by its stack
//! matrix, copied out of the stack, with the GPU's matmul (cuBLAS) or quantized product, and
//! the result is copied into its place. The copies of the stack matrices cost a second read
//! of the weights each run reads.

use super::{checked, GatherMatmul};
use crate::gpu::{cuda, GpuBuffer, GpuInput, GpuOutputs};
use crate::primitive::OutputSpec;
use crate::Result;
use nuvec_cuda::ops::{copy_into, Dims};
use nuvec_cuda::{DeviceBuffer, Gpu};
use std::sync::Arc;

/// Copies `count` elements of `bytes` bytes from element `from.1` of `from.0` to element `to.1`
/// of `to.0`.
fn put(
    gpu: &Gpu,
    op: &str,
    from: (&DeviceBuffer, usize),
    to: (&mut DeviceBuffer, usize),
    (count, bytes): (usize, usize),
) -> Result<()> {
    let flat = Dims::copy(&[count as i64], &[1], &[1]).map_err(|e| cuda(op, e))?;
    copy_into(gpu, from, to, bytes, (count as u64, &flat)).map_err(|e| cuda(op, e))
}

/// `count` elements of `input` from element `at`, in a new buffer.
fn part(gpu: &Gpu, op: &str, input: &GpuInput, at: usize, count: usize) -> Result<DeviceBuffer> {
    crate::gpu::strided(gpu, op, (input.buffer(), at), input.dtype, &[count], &[1])
}

/// The `int32` indices of `input`, read back to the host.
fn indices(gpu: &Gpu, op: &str, input: &GpuInput) -> Result<Vec<i32>> {
    let bytes = gpu
        .download(input.buffer(), input.size() * 4)
        .map_err(|e| cuda(op, e))?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// `this` over `inputs` on `gpu`, run by run.
pub(super) fn eval(
    this: &GatherMatmul,
    gpu: &Arc<Gpu>,
    inputs: &[GpuInput],
    outputs: &[OutputSpec],
) -> GpuOutputs {
    let (op, spec) = (this.op_name(), &outputs[0]);
    let count = this.operands();
    let (lhs, rhs) = (
        indices(gpu, op, &inputs[count])?,
        indices(gpu, op, &inputs[count + 1])?,
    );
    let (x, stack) = (&inputs[0], &inputs[1]);
    let (m, k, n) = (x.shape[1], x.shape[2], spec.shape[2]);
    let (count_x, count_w) = (x.shape[0], stack.shape[0]);
    let size = spec.dtype.size();
    let mut out = gpu
        .alloc(rhs.len() * m * n * size)
        .map_err(|e| cuda(op, e))?;
    let mut start = 0;
    while start < rhs.len() {
        let e = checked(op, &rhs, start, count_w, "rhs_indices")?;
        let end = (start..rhs.len())
            .find(|&t| rhs[t] != rhs[start])
            .unwrap_or(rhs.len());
        let mut rows = gpu
            .alloc((end - start) * m * k * size)
            .map_err(|e| cuda(op, e))?;
        for t in start..end {
            let i = checked(op, &lhs, t, count_x, "lhs_indices")?;
            let to = (&mut rows, (t - start) * m * k);
            put(gpu, op, (x.buffer(), i * m * k), to, (m * k, size))?;
        }
        let run_rows = (end - start) * m;
        let product = match *this {
            GatherMatmul::Dense => {
                let w = part(gpu, op, stack, e * k * n, k * n)?;
                let shape = nuvec_cuda::matmul::Product {
                    batch: 1,
                    m: run_rows,
                    n,
                    k,
                    transpose_a: false,
                    transpose_b: false,
                };
                nuvec_cuda::matmul::matmul(gpu, (&rows, &w), shape, spec.dtype)
            }
            GatherMatmul::Quantized { group_size, bits } => {
                let (words, groups) = (n * k * bits as usize / 32, n * k / group_size);
                let w = part(gpu, op, stack, e * words, words)?;
                let s = part(gpu, op, &inputs[2], e * groups, groups)?;
                let b = part(gpu, op, &inputs[3], e * groups, groups)?;
                let shape = nuvec_cuda::quantized::Quantized {
                    m: run_rows as u64,
                    n: n as u64,
                    k: k as u64,
                    group_size: group_size as u64,
                    bits,
                };
                nuvec_cuda::quantized::quantized_matmul(gpu, &rows, (&w, &s, &b), shape, spec.dtype)
            }
        }
        .map_err(|e| cuda(op, e))?;
        put(
            gpu,
            op,
            (&product, 0),
            (&mut out, start * m * n),
            (run_rows * n, size),
        )?;
        start = end;
    }
    Ok(vec![GpuBuffer::new(gpu, out)])
}
