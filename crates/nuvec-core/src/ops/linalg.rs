//! Matrix products: `matmul` (batched, broadcast) and `addmm`.

use super::broadcast_shapes;
use crate::primitives::matmul::Matmul;
use crate::{Array, DType};
use std::sync::Arc;

/// The matrix product with NumPy's rules: 1-D operands are promoted to a row (left) or a
/// column (right) and the added axis removed; batch dims broadcast. Floats only, as MLX.
///
/// ```
/// use nuvec_core::{array, ops::matmul};
/// let c = matmul(&array![[1.0, 2.0], [3.0, 4.0]], &array![1.0, 1.0]);
/// assert_eq!(c.to_vec::<f32>()?, [3.0, 7.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn matmul(a: &Array, b: &Array) -> Array {
    for x in [a, b] {
        if let Some(error) = x.known_error() {
            return Array::failed(error);
        }
    }
    if a.ndim() == 0 || b.ndim() == 0 {
        return Array::invalid(
            "matmul",
            format!(
                "operands must be at least 1-D, got {:?} and {:?}",
                a.shape(),
                b.shape()
            ),
        );
    }
    let dtype = DType::promote(a.dtype(), b.dtype());
    if !dtype.is_float() {
        return Array::invalid(
            "matmul",
            format!("only floating point types are supported, got {dtype}"),
        );
    }
    let lhs = if a.ndim() == 1 {
        crate::ops::reshape(a, &[1, a.shape()[0]])
    } else {
        a.clone()
    };
    let rhs = if b.ndim() == 1 {
        crate::ops::reshape(b, &[b.shape()[0], 1])
    } else {
        b.clone()
    };
    let (ln, rn) = (lhs.ndim(), rhs.ndim());
    let (m, k) = (lhs.shape()[ln - 2], lhs.shape()[ln - 1]);
    let (k2, n) = (rhs.shape()[rn - 2], rhs.shape()[rn - 1]);
    if k != k2 {
        return Array::invalid(
            "matmul",
            format!(
                "inner dimensions differ: {:?} @ {:?} ({k} != {k2})",
                a.shape(),
                b.shape()
            ),
        );
    }
    let batch = match broadcast_shapes(&lhs.shape()[..ln - 2], &rhs.shape()[..rn - 2]) {
        Ok(batch) => batch,
        Err(reason) => return Array::invalid("matmul", reason),
    };
    let mut shape = batch;
    shape.extend([m, n]);
    let out = Array::build1(
        Arc::new(Matmul),
        vec![lhs.astype(dtype), rhs.astype(dtype)],
        shape.clone(),
        dtype,
    );
    let mut final_shape = shape;
    if b.ndim() == 1 {
        final_shape.pop();
    }
    if a.ndim() == 1 {
        let at = final_shape.len() - if b.ndim() == 1 { 1 } else { 2 };
        final_shape.remove(at);
    }
    crate::ops::reshape(&out, &final_shape)
}

/// `alpha * (a @ b) + beta * c`.
#[track_caller]
pub fn addmm(c: &Array, a: &Array, b: &Array, alpha: f32, beta: f32) -> Array {
    let product = matmul(a, b);
    let scaled = if alpha == 1.0 {
        product
    } else {
        crate::ops::multiply(&product, f64::from(alpha))
    };
    if beta == 0.0 {
        // c only contributes its shape (NaN * 0 must not leak in), as MLX.
        return match broadcast_shapes(c.shape(), scaled.shape()) {
            Ok(shape) => crate::ops::broadcast_to(&scaled, &shape),
            Err(reason) => Array::invalid("addmm", reason),
        };
    }
    crate::ops::add(&scaled, crate::ops::multiply(c, f64::from(beta)))
}

/// `x · wᵀ` for a weight `w` `[n, k]` and `x` `[..., k]`: the product of a linear layer,
/// `[..., n]`. Equal to `matmul(x, transpose(w))`, but reads `w` where it lies, in its own
/// float dtype, with no transposed or widened copy (the form decoding needs: at one token a
/// step it is a pass over the weights). The result has the promoted dtype.
///
/// ```
/// use nuvec_core::{array, ops};
/// let w = array![[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]];
/// let y = ops::linear(&array![[3.0, 4.0]], &w);
/// assert_eq!(y.to_vec::<f32>()?, [3.0, 7.0, 8.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn linear(x: &Array, w: &Array) -> Array {
    for a in [x, w] {
        if let Some(error) = a.known_error() {
            return Array::failed(error);
        }
    }
    let dtype = DType::promote(x.dtype(), w.dtype());
    if !dtype.is_float() || !w.dtype().is_float() {
        return Array::invalid(
            "linear",
            format!(
                "only floating point types are supported, got {} and {}",
                x.dtype(),
                w.dtype()
            ),
        );
    }
    if w.ndim() != 2 || x.ndim() == 0 || x.shape()[x.ndim() - 1] != w.shape()[1] {
        return Array::invalid(
            "linear",
            format!(
                "needs x [..., k] and a weight [n, k], got {:?} and {:?}",
                x.shape(),
                w.shape()
            ),
        );
    }
    let mut shape = x.shape().to_vec();
    let last = shape.len() - 1;
    shape[last] = w.shape()[0];
    Array::build1(
        Arc::new(crate::primitives::linear::Linear),
        vec![x.astype(dtype), w.clone()],
        shape,
        dtype,
    )
}
