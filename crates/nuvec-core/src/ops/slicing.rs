//! Slicing: reading a strided slice (`slice`) and writing one (`slice_update`), with the
//! Python bounds rules both share.

use super::shape::as_strided;
use crate::primitives::layout::View;
use crate::primitives::slice_update::SliceUpdate;
use crate::Array;
use nuvec_cpu::strided::contiguous_strides;
use std::sync::Arc;

/// Where a slice of an array lies: its shape, each axis's first index and step, and the
/// element strides and offset at which it reads the (contiguous) array.
struct Region {
    shape: Vec<i32>,
    first: Vec<i64>,
    steps: Vec<i64>,
    strides: Vec<isize>,
    offset: isize,
}

/// Resolves `start:stop:strides` over `shape` as Python does: negative bounds count from the
/// end and are clamped; axes beyond the given ones are taken whole.
fn region(shape: &[i32], start: &[i32], stop: &[i32], strides: &[i32]) -> Result<Region, String> {
    if start.len() != stop.len() || start.len() != strides.len() || start.len() > shape.len() {
        return Err(format!(
            "start {start:?}, stop {stop:?} and strides {strides:?} must have one entry per axis of {shape:?}"
        ));
    }
    let own = contiguous_strides(&shape.iter().map(|&d| d as usize).collect::<Vec<_>>());
    let mut out = Region {
        shape: shape.to_vec(),
        first: Vec::with_capacity(start.len()),
        steps: strides.iter().map(|&s| i64::from(s)).collect(),
        strides: own.clone(),
        offset: 0,
    };
    for axis in 0..start.len() {
        let n = i64::from(shape[axis]);
        let step = i64::from(strides[axis]);
        if step == 0 {
            return Err(format!("stride of axis {axis} is 0"));
        }
        let wrap = |v: i32| {
            if v < 0 {
                i64::from(v) + n
            } else {
                i64::from(v)
            }
        };
        let (first, len) = if step > 0 {
            let (s, e) = (wrap(start[axis]).clamp(0, n), wrap(stop[axis]).clamp(0, n));
            (s, if e > s { (e - s + step - 1) / step } else { 0 })
        } else {
            let (s, e) = (
                wrap(start[axis]).clamp(-1, n - 1),
                wrap(stop[axis]).clamp(-1, n - 1),
            );
            (s, if s > e { (s - e - step - 1) / -step } else { 0 })
        };
        out.shape[axis] = len as i32;
        out.first.push(first);
        if len > 0 {
            out.offset += first as isize * own[axis];
        }
        out.strides[axis] = own[axis] * step as isize;
    }
    Ok(out)
}

/// Python-style slice `a[start0:stop0:stride0, ...]`: negative bounds count from the end and
/// are clamped like Python's; axes beyond the given ones are taken whole.
///
/// ```
/// use nuvec_core::{array, ops::slice};
/// let a = array![0, 1, 2, 3, 4, 5];
/// assert_eq!(slice(&a, &[4], &[0], &[-2]).to_vec::<i32>()?, [4, 2]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn slice(a: &Array, start: &[i32], stop: &[i32], strides: &[i32]) -> Array {
    if let Some(error) = a.known_error() {
        return Array::failed(error);
    }
    let region = match region(a.shape(), start, stop, strides) {
        Ok(region) => region,
        Err(reason) => return Array::invalid("slice", reason),
    };
    if region.shape == a.shape() && strides.iter().all(|&s| s == 1) {
        return a.clone();
    }
    let view = View::Slice {
        first: region.first,
        steps: region.steps,
    };
    as_strided(view, a, region.shape, region.strides, region.offset)
}

/// `src` with its slice `src[start0:stop0:stride0, ...]` (bounds as in [`slice()`]) replaced by
/// `update`, broadcast to the slice's shape and cast to `src`'s dtype, as MLX's
/// `slice_update`. When nothing else holds `src`'s buffer the update is written into it in
/// place, so a buffer updated step by step (a key/value cache) is not copied each time.
///
/// ```
/// use nuvec_core::{array, ops::{slice_update, zeros}, DType};
/// let cache = zeros(&[2, 4], DType::F32);
/// let row = slice_update(&cache, &array![[1.0f32, 2.0]], &[1, 1], &[2, 3], &[1, 1]);
/// assert_eq!(row.to_vec::<f32>()?, [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn slice_update(
    src: &Array,
    update: &Array,
    start: &[i32],
    stop: &[i32],
    strides: &[i32],
) -> Array {
    for input in [src, update] {
        if let Some(error) = input.known_error() {
            return Array::failed(error);
        }
    }
    let region = match region(src.shape(), start, stop, strides) {
        Ok(region) => region,
        Err(reason) => return Array::invalid("slice_update", reason),
    };
    if super::broadcast_shapes(update.shape(), &region.shape).as_deref() != Ok(&region.shape[..]) {
        return Array::invalid(
            "slice_update",
            format!(
                "an update of shape {:?} does not broadcast to the slice's shape {:?}",
                update.shape(),
                region.shape
            ),
        );
    }
    let update = super::broadcast_to(&update.astype(src.dtype()), &region.shape);
    if region.shape == src.shape() && region.steps.iter().all(|&s| s > 0) {
        return update;
    }
    Array::build1(
        Arc::new(SliceUpdate {
            first: region.first,
            steps: region.steps,
            strides: region.strides,
            offset: region.offset,
        }),
        vec![src.clone(), update],
        src.shape().to_vec(),
        src.dtype(),
    )
}
