//! MLX's affine quantization as ops: [`quantize`], [`dequantize`], [`quantized_matmul`].

use crate::primitives::quantized::{dequantize_array, quantize_array};
use crate::primitives::quantized_matmul::quantized_matmul_array;
use crate::{ops, Array, DType};

/// Checks MLX's supported parameters; the reason when they are not.
fn check_parameters(group_size: usize, bits: u32) -> Option<String> {
    if ![32, 64, 128].contains(&group_size) {
        return Some(format!(
            "group size {group_size} is not supported (32, 64 or 128)"
        ));
    }
    if ![2, 3, 4, 5, 6, 8].contains(&bits) {
        return Some(format!(
            "{bits} bits are not supported (2, 3, 4, 5, 6 or 8)"
        ));
    }
    None
}

/// Quantizes `w` (floats, rank ≥ 2, the last axis a multiple of `group_size`) as MLX's
/// affine `mx.quantize`: packed `uint32` words `[..., n·bits/32]`, and scales and biases
/// `[..., n/group_size]` of `w`'s dtype. Invalid arguments give three failed arrays.
///
/// ```
/// use nuvec_core::{ops, DType};
/// let w = ops::reshape(&ops::arange(0.0, 64.0, 1.0, DType::F32), &[1, 64]);
/// let (wq, scales, biases) = ops::quantize(&w, 64, 8);
/// assert_eq!((wq.shape(), scales.shape()), (&[1, 16][..], &[1, 1][..]));
/// let back = ops::dequantize(&wq, &scales, &biases, 64, 8);
/// let error = ops::max(&ops::abs(&(back - &w)), None, false).item::<f32>()?;
/// assert!(error < 0.2);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn quantize(w: &Array, group_size: usize, bits: u32) -> (Array, Array, Array) {
    let failed = |reason: String| {
        let error = Array::invalid("quantize", reason);
        (error.clone(), error.clone(), error)
    };
    if let Some(reason) = check_parameters(group_size, bits) {
        return failed(reason);
    }
    if !w.dtype().is_float() || w.ndim() < 2 {
        return failed(format!(
            "needs floats of rank 2 or more, got {} of shape {:?}",
            w.dtype(),
            w.shape()
        ));
    }
    let n = *w.shape().last().unwrap_or(&0) as usize;
    if !n.is_multiple_of(group_size) {
        return failed(format!(
            "the last axis ({n}) must be a multiple of the group size {group_size}"
        ));
    }
    quantize_array(w, group_size, bits)
}

/// Why `wq`, `scales` and `biases` are not a quantized matrix of `bits`-bit values in groups
/// of `group_size`, if they are not.
pub(crate) fn quantized_problem(
    wq: &Array,
    scales: &Array,
    biases: &Array,
    group_size: usize,
    bits: u32,
) -> Option<String> {
    if let Some(reason) = check_parameters(group_size, bits) {
        return Some(reason);
    }
    if wq.dtype() != DType::U32 || wq.ndim() < 2 {
        return Some(format!(
            "needs packed uint32 words of rank 2 or more, got {} of shape {:?}",
            wq.dtype(),
            wq.shape()
        ));
    }
    let words = *wq.shape().last().unwrap_or(&0) as usize;
    let n = words * 32 / bits as usize;
    let mut expected = wq.shape().to_vec();
    *expected.last_mut().expect("rank 2 or more") = (n / group_size) as i32;
    for (name, part) in [("scales", scales), ("biases", biases)] {
        if part.shape() != expected.as_slice() || !part.dtype().is_float() {
            return Some(format!(
                "{name} must be floats of shape {expected:?} for words of shape {:?}, got {} {:?}",
                wq.shape(),
                part.dtype(),
                part.shape()
            ));
        }
    }
    if !(words * 32).is_multiple_of(bits as usize) || !n.is_multiple_of(group_size) {
        return Some(format!(
            "{words} words per row do not hold whole groups of {group_size} {bits}-bit values"
        ));
    }
    None
}

/// The floats `scale · q + bias` of a quantized matrix (MLX's `mx.dequantize`), of the
/// scales' dtype. Differentiable in the scales and biases.
#[track_caller]
pub fn dequantize(
    wq: &Array,
    scales: &Array,
    biases: &Array,
    group_size: usize,
    bits: u32,
) -> Array {
    match quantized_problem(wq, scales, biases, group_size, bits) {
        Some(reason) => Array::invalid("dequantize", reason),
        None => dequantize_array(wq, scales, biases, (group_size, bits), false),
    }
}

/// `x · Wᵀ` (with `transpose`, W's rows being output features, as `QuantizedLinear` stores
/// them) or `x · W` for the quantized `W` (MLX's `mx.quantized_matmul`). The product is of
/// the dequantized matrix, in the promoted dtype of `x` and the scales; it is differentiable
/// in `x`, the scales and the biases.
///
/// With `transpose` and a single matrix `W` (rank 2), the packed words are read inside the
/// product's loop, with sums in f32 (for f32, f16 and bf16); otherwise `W` is dequantized and
/// multiplied by [`ops::matmul`].
#[track_caller]
pub fn quantized_matmul(
    x: &Array,
    wq: &Array,
    scales: &Array,
    biases: &Array,
    transpose: bool,
    group_size: usize,
    bits: u32,
) -> Array {
    if let Some(reason) = quantized_problem(wq, scales, biases, group_size, bits) {
        return Array::invalid("quantized_matmul", reason);
    }
    let k = wq
        .shape()
        .last()
        .map_or(0, |&words| words as usize * 32 / bits as usize);
    if transpose && wq.ndim() == 2 && x.shape().last().map(|&d| d as usize) == Some(k) {
        let dtype = DType::promote(x.dtype(), scales.dtype());
        if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            let parts = (group_size, bits);
            let (scales, biases) = (scales.astype(dtype), biases.astype(dtype));
            return quantized_matmul_array(&x.astype(dtype), wq, &scales, &biases, parts);
        }
    }
    // With `transpose`, the matrix is dequantized straight into its transposed layout.
    let w = dequantize_array(wq, scales, biases, (group_size, bits), transpose);
    ops::matmul(x, &w)
}
