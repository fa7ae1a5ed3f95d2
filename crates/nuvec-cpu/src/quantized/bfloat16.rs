//! The bfloat16 route of [`quantized_matmul_t`](super::quantized_matmul_t): 4-bit weights
//! times bfloat16 activations, on CPUs with bfloat16 dot products (see `os::bf16_dot`).

use super::{gather_columns, QuantizedDims, MIN_GEMM_ROWS, W_ROWS};
use crate::{os, parallel, Float};
use half::bf16;

/// Values per step of the kernel: 32 packed bytes.
pub(crate) const STEP: usize = 64;

/// The packed weights and the activations of one product, as the kernel reads them.
pub(crate) struct Operands<'a> {
    /// `[n, k/2]` packed bytes.
    pub bytes: &'a [u8],
    /// `[n, k/group_size]` bfloat16 bits.
    pub scales: &'a [u16],
    /// `[n, k/group_size]` bfloat16 bits.
    pub biases: &'a [u16],
    /// `[m, k]` bfloat16 bits, each 64-value run stored as its even values, then its odd
    /// ones (see [`interleave`]).
    pub x: &'a [u16],
    /// `[m, k/group_size]`: the sums of `x` over each group, in f32.
    pub group_sums: &'a [f32],
    pub m: usize,
    pub k: usize,
    /// A multiple of [`STEP`].
    pub group_size: usize,
}

/// `x` with each 64-value run stored as its 32 even values, then its 32 odd ones.
fn interleave(x: &[bf16]) -> Vec<u16> {
    let mut out = vec![0u16; x.len()];
    for (to, from) in out.chunks_exact_mut(STEP).zip(x.chunks_exact(STEP)) {
        let (even, odd) = to.split_at_mut(STEP / 2);
        for j in 0..STEP / 2 {
            even[j] = from[2 * j].to_bits();
            odd[j] = from[2 * j + 1].to_bits();
        }
    }
    out
}

/// Computes the product this way and returns true when it applies: bfloat16 operands,
/// 4 bits, groups of a multiple of 64 values, fewer than [`MIN_GEMM_ROWS`] rows of `x`, and a
/// CPU with the instructions.
pub(super) fn try_product<T: Float>(
    x: &[T],
    bytes: &[u8],
    scales: &[T],
    biases: &[T],
    dims: QuantizedDims,
    out: &mut [T],
) -> bool {
    let (Some(x), Some(scales), Some(biases)) = (
        crate::matmul::same_type::<T, bf16>(x),
        crate::matmul::same_type::<T, bf16>(scales),
        crate::matmul::same_type::<T, bf16>(biases),
    ) else {
        return false;
    };
    let QuantizedDims {
        m,
        n,
        k,
        group_size,
        bits,
    } = dims;
    if bits != 4 || !group_size.is_multiple_of(STEP) || m >= MIN_GEMM_ROWS || !os::has_bf16_dot() {
        return false;
    }
    let x = &x[..m * k];
    let group_sums: Vec<f32> = x
        .chunks_exact(group_size)
        .map(|group| group.iter().map(|v| v.to_f32()).sum())
        .collect();
    let interleaved = interleave(x);
    let operands = Operands {
        bytes,
        scales: bits_of(scales),
        biases: bits_of(biases),
        x: &interleaved,
        group_sums: &group_sums,
        m,
        k,
        group_size,
    };
    // Several parts per thread even out their finishing times.
    let parts = rayon::current_num_threads().max(1) * 4;
    let rows_per_part = n.div_ceil(parts).next_multiple_of(W_ROWS);
    let mut columns = vec![0.0f32; m * n];
    parallel::for_each_part(&mut columns, rows_per_part * m, m * n * k, |start, part| {
        os::bf16_dot_part(&operands, start / m, part);
    });
    gather_columns(&columns, n, rows_per_part, &mut out[..m * n]);
    true
}

fn bits_of(values: &[bf16]) -> &[u16] {
    // SAFETY: bf16 is a transparent wrapper of u16: same size, alignment and every bit
    // pattern valid both ways.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u16>(), values.len()) }
}
