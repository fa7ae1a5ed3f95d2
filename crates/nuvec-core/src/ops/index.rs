//! Indexing by integer arrays: `take` and `take_along_axis`.

use super::{broadcast_shapes, normalize_axis};
use crate::primitives::index::{Take, TakeAlongAxis};
use crate::Array;
use std::sync::Arc;

/// Elements of `a` at `indices` along `axis` (`None`: of the flattened array). Negative
/// indices count from the end; an index out of range fails evaluation with an error.
///
/// ```
/// use nuvec_core::{array, ops::take};
/// let a = array![[1, 2], [3, 4]];
/// assert_eq!(take(&a, &array![1, -2], Some(0)).to_vec::<i32>()?, [3, 4, 1, 2]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn take(a: &Array, indices: &Array, axis: Option<i32>) -> Array {
    for x in [a, indices] {
        if let Some(error) = x.known_error() {
            return Array::failed(error);
        }
    }
    if !indices.dtype().is_integer() {
        return Array::invalid(
            "take",
            format!("indices must be integers, got {}", indices.dtype()),
        );
    }
    let (source, axis) = match super::axis_or_flattened("take", a, axis) {
        Ok(resolved) => resolved,
        Err(failed) => return failed,
    };
    if source.shape()[axis] == 0 && indices.size() > 0 {
        return Array::invalid("take", "cannot take from an empty axis");
    }
    let mut shape = source.shape()[..axis].to_vec();
    shape.extend_from_slice(indices.shape());
    shape.extend_from_slice(&source.shape()[axis + 1..]);
    let dtype = source.dtype();
    Array::build1(
        Arc::new(Take { axis }),
        vec![source, indices.clone()],
        shape,
        dtype,
    )
}

/// `a` read at `indices` along `axis`, where `indices` broadcasts against `a` on every other
/// axis (NumPy's `take_along_axis`; `None`: of the flattened array).
#[track_caller]
pub fn take_along_axis(a: &Array, indices: &Array, axis: Option<i32>) -> Array {
    for x in [a, indices] {
        if let Some(error) = x.known_error() {
            return Array::failed(error);
        }
    }
    if !indices.dtype().is_integer() {
        return Array::invalid(
            "take_along_axis",
            format!("indices must be integers, got {}", indices.dtype()),
        );
    }
    let (source, indices, axis) = match axis {
        None => (
            crate::ops::reshape(a, &[-1]),
            crate::ops::reshape(indices, &[-1]),
            0,
        ),
        Some(axis) => match normalize_axis(axis, a.ndim()) {
            Ok(ax) if indices.ndim() == a.ndim() => (a.clone(), indices.clone(), ax),
            Ok(_) => {
                return Array::invalid(
                    "take_along_axis",
                    format!(
                        "indices of shape {:?} must have as many dims as a {:?}",
                        indices.shape(),
                        a.shape()
                    ),
                )
            }
            Err(reason) => return Array::invalid("take_along_axis", reason),
        },
    };
    // Broadcast every axis but `axis` between the two.
    let mut a_shape = source.shape().to_vec();
    let mut i_shape = indices.shape().to_vec();
    a_shape[axis] = 1;
    i_shape[axis] = 1;
    let common = match broadcast_shapes(&a_shape, &i_shape) {
        Ok(s) => s,
        Err(reason) => return Array::invalid("take_along_axis", reason),
    };
    let mut a_target = common.clone();
    a_target[axis] = source.shape()[axis];
    let mut i_target = common;
    i_target[axis] = indices.shape()[axis];
    let source = crate::ops::broadcast_to(&source, &a_target);
    let indices = crate::ops::broadcast_to(&indices, &i_target);
    let dtype = source.dtype();
    Array::build1(
        Arc::new(TakeAlongAxis { axis }),
        vec![source, indices],
        i_target,
        dtype,
    )
}
