//! Shape ops: reshape, transpose and friends, broadcast, concatenate/stack/split, pad,
//! repeat, tile, tril/triu (slicing is in `slicing.rs`).

use super::slicing::slice;
use super::{broadcast_shapes, normalize_axes, normalize_axis};
use crate::array::checked_size;
use crate::primitives::layout::{AsStrided, Concatenate, Pad, Reshape, View};
use crate::{Array, DType};
use nuvec_cpu::strided::contiguous_strides;
use std::sync::Arc;

fn to_usize(shape: &[i32]) -> Vec<usize> {
    shape.iter().map(|&d| d as usize).collect()
}

/// Returns early with the input's error when it already failed.
macro_rules! check_input {
    ($a:expr) => {
        if let Some(error) = $a.known_error() {
            return Array::failed(error);
        }
    };
}

/// The same elements in a new shape; one dim may be -1 (inferred).
///
/// ```
/// use nuvec_core::{ops::{arange, reshape}, DType};
/// let a = reshape(&arange(0.0, 6.0, 1.0, DType::I32), &[2, -1]);
/// assert_eq!(a.shape(), [2, 3]);
/// ```
#[track_caller]
pub fn reshape(a: &Array, shape: &[i32]) -> Array {
    check_input!(a);
    let mut resolved = shape.to_vec();
    let inferred: Vec<usize> = shape
        .iter()
        .enumerate()
        .filter(|(_, &d)| d == -1)
        .map(|(i, _)| i)
        .collect();
    if inferred.len() > 1 || shape.iter().any(|&d| d < -1) {
        return Array::invalid(
            "reshape",
            format!("invalid shape {shape:?}: at most one -1 and no other negative dims"),
        );
    }
    let known: usize = shape
        .iter()
        .filter(|&&d| d != -1)
        .map(|&d| d as usize)
        .product();
    if let Some(&i) = inferred.first() {
        if known == 0 || !a.size().is_multiple_of(known) {
            return Array::invalid(
                "reshape",
                format!(
                    "cannot reshape array of size {} into shape {shape:?}",
                    a.size()
                ),
            );
        }
        resolved[i] = (a.size() / known) as i32;
    }
    if checked_size(&resolved) != Some(a.size()) {
        return Array::invalid(
            "reshape",
            format!(
                "cannot reshape array of shape {:?} (size {}) into shape {shape:?}",
                a.shape(),
                a.size()
            ),
        );
    }
    if resolved == a.shape() {
        return a.clone();
    }
    Array::build1(Arc::new(Reshape), vec![a.clone()], resolved, a.dtype())
}

/// Merges axes `start_axis..=end_axis` into one.
#[track_caller]
pub fn flatten(a: &Array, start_axis: i32, end_axis: i32) -> Array {
    check_input!(a);
    if a.ndim() == 0 {
        return reshape(a, &[1]);
    }
    let (start, end) = match (
        normalize_axis(start_axis, a.ndim()),
        normalize_axis(end_axis, a.ndim()),
    ) {
        (Ok(s), Ok(e)) => (s, e),
        (Err(reason), _) | (_, Err(reason)) => return Array::invalid("flatten", reason),
    };
    if start > end {
        return Array::invalid(
            "flatten",
            format!("start_axis {start_axis} comes after end_axis {end_axis}"),
        );
    }
    let shape = a.shape();
    let mut new_shape = shape[..start].to_vec();
    new_shape.push(shape[start..=end].iter().product());
    new_shape.extend_from_slice(&shape[end + 1..]);
    reshape(a, &new_shape)
}

/// Strided copy of `a` into `shape` (the shared body of transpose, broadcast and slice).
pub(super) fn as_strided(
    view: View,
    a: &Array,
    shape: Vec<i32>,
    strides: Vec<isize>,
    offset: isize,
) -> Array {
    Array::build1(
        Arc::new(AsStrided {
            view,
            strides,
            offset,
        }),
        vec![a.clone()],
        shape,
        a.dtype(),
    )
}

/// Permutes the axes (`None`: reverses them).
#[track_caller]
pub fn transpose(a: &Array, axes: Option<&[i32]>) -> Array {
    check_input!(a);
    let n = a.ndim();
    let axes: Vec<usize> = match axes {
        None => (0..n).rev().collect(),
        Some(axes) => match normalize_axes(axes, n) {
            Ok(resolved) if resolved.len() == n => resolved,
            Ok(_) => {
                return Array::invalid(
                    "transpose",
                    format!("axes {axes:?} must name each of the {n} axes once"),
                )
            }
            Err(reason) => return Array::invalid("transpose", reason),
        },
    };
    if axes.iter().enumerate().all(|(i, &a)| i == a) {
        return a.clone();
    }
    let strides = contiguous_strides(&to_usize(a.shape()));
    let shape = axes.iter().map(|&i| a.shape()[i]).collect();
    as_strided(
        View::Transpose(axes.clone()),
        a,
        shape,
        axes.iter().map(|&i| strides[i]).collect(),
        0,
    )
}

/// Exchanges two axes.
#[track_caller]
pub fn swapaxes(a: &Array, axis1: i32, axis2: i32) -> Array {
    check_input!(a);
    match (
        normalize_axis(axis1, a.ndim()),
        normalize_axis(axis2, a.ndim()),
    ) {
        (Ok(x), Ok(y)) => {
            let mut perm: Vec<i32> = (0..a.ndim() as i32).collect();
            perm.swap(x, y);
            transpose(a, Some(&perm))
        }
        (Err(reason), _) | (_, Err(reason)) => Array::invalid("swapaxes", reason),
    }
}

/// Moves axis `source` to position `destination`.
#[track_caller]
pub fn moveaxis(a: &Array, source: i32, destination: i32) -> Array {
    check_input!(a);
    match (
        normalize_axis(source, a.ndim()),
        normalize_axis(destination, a.ndim()),
    ) {
        (Ok(s), Ok(d)) => {
            let mut perm: Vec<i32> = (0..a.ndim() as i32).filter(|&i| i as usize != s).collect();
            perm.insert(d, s as i32);
            transpose(a, Some(&perm))
        }
        (Err(reason), _) | (_, Err(reason)) => Array::invalid("moveaxis", reason),
    }
}

/// Inserts axes of length 1 at the given positions (of the result).
#[track_caller]
pub fn expand_dims(a: &Array, axes: &[i32]) -> Array {
    check_input!(a);
    let out_ndim = a.ndim() + axes.len();
    let resolved = match normalize_axes(axes, out_ndim) {
        Ok(r) => r,
        Err(reason) => return Array::invalid("expand_dims", reason),
    };
    let mut source = a.shape().iter();
    let shape: Vec<i32> = (0..out_ndim)
        .map(|i| {
            if resolved.contains(&i) {
                1
            } else {
                *source.next().unwrap_or(&1)
            }
        })
        .collect();
    reshape(a, &shape)
}

/// Removes axes of length 1 (`None`: all of them).
#[track_caller]
pub fn squeeze(a: &Array, axes: Option<&[i32]>) -> Array {
    check_input!(a);
    let remove: Vec<usize> = match axes {
        None => (0..a.ndim()).filter(|&i| a.shape()[i] == 1).collect(),
        Some(axes) => match normalize_axes(axes, a.ndim()) {
            Ok(r) => {
                if let Some(&bad) = r.iter().find(|&&i| a.shape()[i] != 1) {
                    return Array::invalid(
                        "squeeze",
                        format!("cannot squeeze axis {bad} of length {}", a.shape()[bad]),
                    );
                }
                r
            }
            Err(reason) => return Array::invalid("squeeze", reason),
        },
    };
    let shape: Vec<i32> = (0..a.ndim())
        .filter(|i| !remove.contains(i))
        .map(|i| a.shape()[i])
        .collect();
    reshape(a, &shape)
}

/// Repeats `a` along new or length-1 axes to `shape` (NumPy broadcasting).
#[track_caller]
pub fn broadcast_to(a: &Array, shape: &[i32]) -> Array {
    check_input!(a);
    match broadcast_shapes(a.shape(), shape) {
        Ok(result) if result == shape => {}
        _ => {
            return Array::invalid(
                "broadcast_to",
                format!("cannot broadcast shape {:?} to {shape:?}", a.shape()),
            )
        }
    }
    if a.shape() == shape {
        return a.clone();
    }
    let strides = super::broadcast_strides(&to_usize(a.shape()), &to_usize(shape));
    as_strided(View::Broadcast, a, shape.to_vec(), strides, 0)
}

/// Joins arrays along `axis`; dtypes promote, the other dims must match.
#[track_caller]
pub fn concatenate(arrays: &[Array], axis: i32) -> Array {
    let Some(first) = arrays.first() else {
        return Array::invalid("concatenate", "needs at least one array");
    };
    for a in arrays {
        check_input!(a);
    }
    let axis = match normalize_axis(axis, first.ndim()) {
        Ok(axis) => axis,
        Err(reason) => return Array::invalid("concatenate", reason),
    };
    let mut shape = first.shape().to_vec();
    let mut dtype = first.dtype();
    for a in &arrays[1..] {
        let same_rank = a.ndim() == first.ndim();
        if !same_rank || (0..a.ndim()).any(|i| i != axis && a.shape()[i] != first.shape()[i]) {
            return Array::invalid(
                "concatenate",
                format!(
                    "all arrays must match except on axis {axis}: got {:?} and {:?}",
                    first.shape(),
                    a.shape()
                ),
            );
        }
        shape[axis] += a.shape()[axis];
        dtype = DType::promote(dtype, a.dtype());
    }
    let inputs: Vec<Array> = arrays.iter().map(|a| a.astype(dtype)).collect();
    Array::build1(Arc::new(Concatenate { axis }), inputs, shape, dtype)
}

/// Stacks arrays of one shape along a new axis.
#[track_caller]
pub fn stack(arrays: &[Array], axis: i32) -> Array {
    let Some(first) = arrays.first() else {
        return Array::invalid("stack", "needs at least one array");
    };
    if let Some(a) = arrays
        .iter()
        .find(|a| a.shape() != first.shape() && a.known_error().is_none())
    {
        return Array::invalid(
            "stack",
            format!(
                "all arrays must have one shape: got {:?} and {:?}",
                first.shape(),
                a.shape()
            ),
        );
    }
    let expanded: Vec<Array> = arrays.iter().map(|a| expand_dims(a, &[axis])).collect();
    concatenate(&expanded, axis)
}

/// Splits into `sections` equal parts along `axis`.
#[track_caller]
pub fn split(a: &Array, sections: i32, axis: i32) -> Vec<Array> {
    let len = match normalize_axis(axis, a.ndim()) {
        Ok(ax) => a.shape()[ax],
        Err(reason) => return vec![Array::invalid("split", reason)],
    };
    if sections <= 0 || len % sections != 0 {
        return vec![Array::invalid(
            "split",
            format!("axis of length {len} cannot be split into {sections} equal sections"),
        )];
    }
    let step = len / sections;
    let indices: Vec<i32> = (1..sections).map(|i| i * step).collect();
    split_indices(a, &indices, axis)
}

/// Splits along `axis` before each of `indices`.
#[track_caller]
pub fn split_indices(a: &Array, indices: &[i32], axis: i32) -> Vec<Array> {
    let ax = match normalize_axis(axis, a.ndim()) {
        Ok(ax) => ax,
        Err(reason) => return vec![Array::invalid("split", reason)],
    };
    let len = a.shape()[ax];
    let mut bounds = vec![0];
    bounds.extend(
        indices
            .iter()
            .map(|&i| if i < 0 { (i + len).max(0) } else { i.min(len) }),
    );
    bounds.push(len);
    bounds
        .windows(2)
        .map(|w| {
            let mut start = vec![0; a.ndim()];
            let mut stop = a.shape().to_vec();
            start[ax] = w[0];
            stop[ax] = w[1].max(w[0]);
            slice(a, &start, &stop, &vec![1; a.ndim()])
        })
        .collect()
}

/// Pads every axis with `pad_width[axis] = (low, high)` elements of `value`.
#[track_caller]
pub fn pad(a: &Array, pad_width: &[(i32, i32)], value: f64) -> Array {
    check_input!(a);
    if pad_width.len() != a.ndim() || pad_width.iter().any(|&(l, h)| l < 0 || h < 0) {
        return Array::invalid(
            "pad",
            format!("pad_width {pad_width:?} must give one non-negative (low, high) pair per axis of {:?}", a.shape()),
        );
    }
    if a.ndim() == 0 || pad_width.iter().all(|&(l, h)| l == 0 && h == 0) {
        return a.clone();
    }
    let shape: Vec<i32> = a
        .shape()
        .iter()
        .zip(pad_width)
        .map(|(&d, &(l, h))| d + l + h)
        .collect();
    let low = pad_width.iter().map(|&(l, _)| l as usize).collect();
    Array::build1(
        Arc::new(Pad { low, value }),
        vec![a.clone()],
        shape,
        a.dtype(),
    )
}

/// Repeats each element `repeats` times along `axis` (`None`: of the flattened array).
#[track_caller]
pub fn repeat(a: &Array, repeats: i32, axis: Option<i32>) -> Array {
    check_input!(a);
    if repeats < 0 {
        return Array::invalid("repeat", format!("repeats must be >= 0, got {repeats}"));
    }
    let (source, axis) = match axis {
        None => (flatten(a, 0, -1), 0),
        Some(axis) => match normalize_axis(axis, a.ndim()) {
            Ok(ax) => (a.clone(), ax),
            Err(reason) => return Array::invalid("repeat", reason),
        },
    };
    let expanded = expand_dims(&source, &[axis as i32 + 1]);
    let mut target = expanded.shape().to_vec();
    target[axis + 1] = repeats;
    let mut shape = source.shape().to_vec();
    shape[axis] *= repeats;
    reshape(&broadcast_to(&expanded, &target), &shape)
}

/// Repeats the whole array `reps[i]` times along each axis, as NumPy's `tile`.
#[track_caller]
pub fn tile(a: &Array, reps: &[i32]) -> Array {
    check_input!(a);
    if reps.iter().any(|&r| r < 0) {
        return Array::invalid("tile", format!("reps must be >= 0, got {reps:?}"));
    }
    let n = a.ndim().max(reps.len());
    let mut shape = vec![1; n - a.ndim()];
    shape.extend_from_slice(a.shape());
    let mut full_reps = vec![1; n - reps.len()];
    full_reps.extend_from_slice(reps);
    // Interleave a new axis of length reps[i] before every axis, broadcast, then merge pairs.
    let interleaved: Vec<i32> = shape.iter().flat_map(|&d| [1, d]).collect();
    let target: Vec<i32> = shape
        .iter()
        .zip(&full_reps)
        .flat_map(|(&d, &r)| [r, d])
        .collect();
    let result_shape: Vec<i32> = shape.iter().zip(&full_reps).map(|(&d, &r)| d * r).collect();
    reshape(
        &broadcast_to(&reshape(a, &interleaved), &target),
        &result_shape,
    )
}

/// Keeps the lower triangle (on and below diagonal `k`) of the last two axes, zeroing the rest.
#[track_caller]
pub fn tril(a: &Array, k: i32) -> Array {
    triangle("tril", a, k, true)
}

/// Keeps the upper triangle (on and above diagonal `k`) of the last two axes.
#[track_caller]
pub fn triu(a: &Array, k: i32) -> Array {
    triangle("triu", a, k, false)
}

#[track_caller]
fn triangle(op: &str, a: &Array, k: i32, lower: bool) -> Array {
    check_input!(a);
    if a.ndim() < 2 {
        return Array::invalid(
            op,
            format!("needs at least 2 dimensions, got shape {:?}", a.shape()),
        );
    }
    let (n, m) = (a.shape()[a.ndim() - 2], a.shape()[a.ndim() - 1]);
    let mask = if lower {
        crate::ops::tri(n, Some(m), k, DType::Bool)
    } else {
        crate::ops::logical_not(&crate::ops::tri(n, Some(m), k - 1, DType::Bool))
    };
    crate::ops::where_(&mask, a, crate::ops::zeros(&[], a.dtype()))
}

impl Array {
    /// See [`reshape`].
    #[track_caller]
    pub fn reshape(&self, shape: &[i32]) -> Array {
        reshape(self, shape)
    }

    /// See [`transpose`] (all axes reversed).
    #[track_caller]
    pub fn t(&self) -> Array {
        transpose(self, None)
    }
}
