//! Ops: validate arguments, promote dtypes MLX's way, work out shapes, and build graph nodes.
//! Every op is `#[track_caller]` so a failed array names the user's line.

pub mod binary;
pub mod creation;
pub mod fast;
pub mod gather_matmul;
pub mod index;
pub mod linalg;
pub mod operand;
pub mod operators;
pub mod quantized;
pub mod reduce;
pub mod shape;
pub mod slicing;
pub mod sort;
pub mod unary;

pub use crate::primitives::transfer::to_device;
pub use binary::*;
pub use creation::*;
pub use gather_matmul::{gather_mm, gather_qmm};
pub use index::*;
pub use linalg::*;
pub use operand::IntoOperand;
pub use quantized::{dequantize, quantize, quantized_matmul};
pub use reduce::*;
pub use shape::*;
pub use slicing::*;
pub use sort::*;
pub use unary::*;

/// Resolves a possibly negative `axis` against `ndim`, or explains why it is out of range.
pub fn normalize_axis(axis: i32, ndim: usize) -> Result<usize, String> {
    let n = ndim as i32;
    let resolved = if axis < 0 { axis + n } else { axis };
    if resolved < 0 || resolved >= n {
        Err(format!(
            "axis {axis} is out of range for an array with {ndim} dimensions"
        ))
    } else {
        Ok(resolved as usize)
    }
}

/// The array and axis an axis-wise op works on: `None` means axis 0 of the flattened array.
/// An axis out of range gives the failed array to return.
#[track_caller]
pub(crate) fn axis_or_flattened(
    op: &str,
    a: &crate::Array,
    axis: Option<i32>,
) -> Result<(crate::Array, usize), crate::Array> {
    match axis {
        None => Ok((reshape(a, &[-1]), 0)),
        Some(axis) => match normalize_axis(axis, a.ndim()) {
            Ok(resolved) => Ok((a.clone(), resolved)),
            Err(reason) => Err(crate::Array::invalid(op, reason)),
        },
    }
}

/// Resolves a list of axes, rejecting repeats.
pub(crate) fn normalize_axes(axes: &[i32], ndim: usize) -> Result<Vec<usize>, String> {
    let mut resolved = Vec::with_capacity(axes.len());
    for &axis in axes {
        let a = normalize_axis(axis, ndim)?;
        if resolved.contains(&a) {
            return Err(format!("axis {axis} appears more than once in {axes:?}"));
        }
        resolved.push(a);
    }
    Ok(resolved)
}

/// NumPy's broadcast of two shapes.
pub(crate) fn broadcast_shapes(a: &[i32], b: &[i32]) -> Result<Vec<i32>, String> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(format!(
                    "shapes {a:?} and {b:?} cannot be broadcast together"
                ))
            }
        };
    }
    Ok(out)
}

/// Element strides that read an array of `shape` (contiguous) as if it had `target` shape:
/// 0 on broadcast axes.
pub(crate) fn broadcast_strides(shape: &[usize], target: &[usize]) -> Vec<isize> {
    let own = nuvec_cpu::strided::contiguous_strides(shape);
    let offset = target.len() - shape.len();
    (0..target.len())
        .map(|i| {
            if i < offset || shape[i - offset] == 1 && target[i] != 1 {
                0
            } else {
                own[i - offset]
            }
        })
        .collect()
}
