//! Products of matrices picked by index from stacks (MLX's `mx.gather_mm` and
//! `mx.gather_qmm`): a mixture-of-experts layer multiplies each token by the matrices of the
//! experts routed to it.
//!
//! `a: [..., M, K]` and `b: [..., K, N]` are stacks of matrices (their batch dimensions
//! flattened); `lhs_indices` picks from `a`'s stack and `rhs_indices` from `b`'s, broadcast
//! together to a shape `S`; the result is `S + [M, N]`. A missing index array means every
//! matrix of its stack in order (`arange` shaped as the batch dimensions), as in MLX.

use super::quantized::{dequantize, quantized_problem};
use crate::primitives::gather_matmul::gather_matmul_array;
use crate::{ops, Array, DType};

/// The operands once the indices are resolved: each stack `[count, rows, cols]` and the
/// indices broadcast and flattened (`[T]`, int32), with their shape `S`.
pub(crate) struct Gathered {
    pub(crate) lhs: Array,
    pub(crate) rhs: Array,
    pub(crate) shape: Vec<i32>,
}

/// `indices`, or every matrix of a stack with batch dimensions `batch` in order.
fn indices_or_all(indices: Option<&Array>, batch: &[i32]) -> Array {
    match indices {
        Some(indices) => indices.astype(DType::I32),
        None => {
            let count: i32 = batch.iter().product();
            ops::reshape(&ops::arange(0.0, f64::from(count), 1.0, DType::I32), batch)
        }
    }
}

/// Checks the indices and broadcasts them; `lhs_batch` and `rhs_batch` are the stacks' batch
/// dimensions.
fn gather_indices(
    op: &str,
    lhs_indices: Option<&Array>,
    rhs_indices: Option<&Array>,
    (lhs_batch, rhs_batch): (&[i32], &[i32]),
) -> Result<Gathered, String> {
    for (name, indices) in [("lhs_indices", lhs_indices), ("rhs_indices", rhs_indices)] {
        if let Some(indices) = indices.filter(|i| !i.dtype().is_integer()) {
            return Err(format!("{name} must be integers, got {}", indices.dtype()));
        }
    }
    let lhs = indices_or_all(lhs_indices, lhs_batch);
    let rhs = indices_or_all(rhs_indices, rhs_batch);
    let shape = super::broadcast_shapes(lhs.shape(), rhs.shape()).map_err(|_| {
        format!(
            "{op}: lhs_indices of shape {:?} and rhs_indices of shape {:?} do not broadcast",
            lhs.shape(),
            rhs.shape()
        )
    })?;
    let flat = |i: &Array| ops::reshape(&ops::broadcast_to(i, &shape), &[-1]);
    Ok(Gathered {
        lhs: flat(&lhs),
        rhs: flat(&rhs),
        shape,
    })
}

/// A stack `[..., rows, cols]` as `[count, rows, cols]`.
fn stack(a: &Array) -> Array {
    let n = a.ndim();
    let (rows, cols) = (a.shape()[n - 2], a.shape()[n - 1]);
    ops::reshape(a, &[-1, rows, cols])
}

/// `a[lhs_indices] · b[rhs_indices]` for stacks of matrices `a: [..., M, K]` and
/// `b: [..., K, N]` (MLX's `mx.gather_mm`). Differentiable in `a` and `b`. Consecutive equal
/// `rhs_indices` run as one product over all their rows (MLX's `sorted_indices` hint is
/// therefore not needed: sorting the indices is what makes the runs long).
///
/// ```
/// use nuvec_core::{array, ops, Array};
/// // Two experts [2, 2, 1]; tokens 0, 1, 2 go to experts 1, 0, 1.
/// let experts = Array::from_vec(vec![1.0f32, 1.0, 10.0, 10.0], &[2, 2, 1]);
/// let tokens = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 1, 2]);
/// let y = ops::gather_mm(&tokens, &experts, None, Some(&array![1, 0, 1]));
/// assert_eq!(y.shape(), [3, 1, 1]);
/// assert_eq!(y.to_vec::<f32>()?, [30.0, 7.0, 110.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn gather_mm(
    a: &Array,
    b: &Array,
    lhs_indices: Option<&Array>,
    rhs_indices: Option<&Array>,
) -> Array {
    for x in [Some(a), Some(b), lhs_indices, rhs_indices]
        .into_iter()
        .flatten()
    {
        if let Some(error) = x.known_error() {
            return Array::failed(error);
        }
    }
    if a.ndim() < 2 || b.ndim() < 2 {
        return Array::invalid(
            "gather_mm",
            format!(
                "operands must be stacks of matrices (rank 2 or more), got {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        );
    }
    let (an, bn) = (a.ndim(), b.ndim());
    if a.shape()[an - 1] != b.shape()[bn - 2] {
        return Array::invalid(
            "gather_mm",
            format!("inner dimensions differ: {:?} @ {:?}", a.shape(), b.shape()),
        );
    }
    let batches = (&a.shape()[..an - 2], &b.shape()[..bn - 2]);
    let gathered = match gather_indices("gather_mm", lhs_indices, rhs_indices, batches) {
        Ok(gathered) => gathered,
        Err(reason) => return Array::invalid("gather_mm", reason),
    };
    let dtype = DType::promote(a.dtype(), b.dtype());
    if !dtype.is_float() {
        return Array::invalid(
            "gather_mm",
            format!("only floating point types are supported, got {dtype}"),
        );
    }
    let operands = [stack(&a.astype(dtype)), stack(&b.astype(dtype))];
    let product = gather_matmul_array(&operands, &gathered, None);
    let mut shape = gathered.shape;
    shape.extend([a.shape()[an - 2], b.shape()[bn - 1]]);
    ops::reshape(&product, &shape)
}

/// `x[lhs_indices] · W[rhs_indices]ᵀ` (with `transpose`, the layout of quantized linear
/// layers) or `· W[rhs_indices]` for a stack of quantized matrices `W` (words
/// `[..., N, K·bits/32]`, scales and biases `[..., N, K/group_size]`) and `x: [..., M, K]`
/// (MLX's `mx.gather_qmm` with `mode="affine"`). Differentiable in `x`, the scales and the
/// biases.
///
/// With `transpose` and float operands, each picked matrix is read in its packed form inside
/// the product's loop, as [`ops::quantized_matmul`] does; otherwise the picked matrices are
/// dequantized and multiplied.
#[allow(clippy::too_many_arguments)] // MLX's signature.
#[track_caller]
pub fn gather_qmm(
    x: &Array,
    wq: &Array,
    scales: &Array,
    biases: &Array,
    lhs_indices: Option<&Array>,
    rhs_indices: Option<&Array>,
    transpose: bool,
    group_size: usize,
    bits: u32,
) -> Array {
    for v in [
        Some(x),
        Some(wq),
        Some(scales),
        Some(biases),
        lhs_indices,
        rhs_indices,
    ]
    .into_iter()
    .flatten()
    {
        if let Some(error) = v.known_error() {
            return Array::failed(error);
        }
    }
    if let Some(reason) = quantized_problem(wq, scales, biases, group_size, bits) {
        return Array::invalid("gather_qmm", reason);
    }
    let wn = wq.ndim();
    let (rows, cols) = (wq.shape()[wn - 2], wq.shape()[wn - 1] * 32 / bits as i32);
    let (k, n) = if transpose {
        (cols, rows)
    } else {
        (rows, cols)
    };
    if x.ndim() < 2 || x.shape()[x.ndim() - 1] != k {
        return Array::invalid(
            "gather_qmm",
            format!(
                "x must be [..., M, {k}] for quantized matrices of shape [{rows}, {cols}]{}, got {:?}",
                if transpose { " (transposed)" } else { "" },
                x.shape()
            ),
        );
    }
    let batches = (&x.shape()[..x.ndim() - 2], &wq.shape()[..wn - 2]);
    let gathered = match gather_indices("gather_qmm", lhs_indices, rhs_indices, batches) {
        Ok(gathered) => gathered,
        Err(reason) => return Array::invalid("gather_qmm", reason),
    };
    let m = x.shape()[x.ndim() - 2];
    let dtype = DType::promote(x.dtype(), scales.dtype());
    let product = if transpose && matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        let operands = [
            stack(&x.astype(dtype)),
            stack(wq),
            stack(&scales.astype(dtype)),
            stack(&biases.astype(dtype)),
        ];
        gather_matmul_array(&operands, &gathered, Some((group_size, bits)))
    } else {
        let (x, scales, biases) = (stack(x), stack(scales), stack(biases));
        gather_qmm_dense(
            [&x, &stack(wq), &scales, &biases],
            &gathered,
            transpose,
            (group_size, bits),
        )
    };
    let mut shape = gathered.shape;
    shape.extend([m, n]);
    ops::reshape(&product, &shape)
}

/// The definition of [`gather_mm`] on stacks (`[count, rows, cols]`): the picked matrices
/// multiplied, `[T, M, N]`.
pub(crate) fn gather_mm_dense([a, b]: [&Array; 2], gathered: &Gathered) -> Array {
    ops::matmul(
        &ops::take(a, &gathered.lhs, Some(0)),
        &ops::take(b, &gathered.rhs, Some(0)),
    )
}

/// The definition of [`gather_qmm`] on stacks (`[count, rows, cols]`): the picked matrices
/// dequantized and multiplied, `[T, M, N]`.
pub(crate) fn gather_qmm_dense(
    [x, wq, scales, biases]: [&Array; 4],
    gathered: &Gathered,
    transpose: bool,
    (group_size, bits): (usize, u32),
) -> Array {
    let pick = |a: &Array| ops::take(a, &gathered.rhs, Some(0));
    let w = dequantize(&pick(wq), &pick(scales), &pick(biases), group_size, bits);
    let w = if transpose {
        ops::swapaxes(&w, -1, -2)
    } else {
        w
    };
    ops::matmul(&ops::take(x, &gathered.lhs, Some(0)), &w)
}
