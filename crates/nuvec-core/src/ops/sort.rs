//! Sorting: `sort`, `argsort`, `topk` along any axis.

use crate::primitives::sort::{SortKind, SortLast};
use crate::{Array, DType};
use std::sync::Arc;

/// Moves `axis` last, runs `kind` over rows, and moves the axis back.
#[track_caller]
fn sort_along(name: &str, kind: SortKind, a: &Array, axis: Option<i32>) -> Array {
    if let Some(error) = a.known_error() {
        return Array::failed(error);
    }
    let (source, axis) = match super::axis_or_flattened(name, a, axis) {
        Ok(resolved) => resolved,
        Err(failed) => return failed,
    };
    let last = source.ndim() as i32 - 1;
    let moved = crate::ops::swapaxes(&source, axis as i32, last);
    let mut shape = moved.shape().to_vec();
    let dtype = match kind {
        SortKind::ArgSort => DType::U32,
        _ => source.dtype(),
    };
    if let SortKind::TopK(k) = kind {
        shape[last as usize] = k as i32;
    }
    let sorted = Array::build1(Arc::new(SortLast(kind)), vec![moved], shape, dtype);
    crate::ops::swapaxes(&sorted, axis as i32, last)
}

/// The values sorted ascending along `axis` (`None`: flattened); NaN sorts last.
#[track_caller]
pub fn sort(a: &Array, axis: Option<i32>) -> Array {
    sort_along("sort", SortKind::Sort, a, axis)
}

/// The (uint32) indices that sort `a` along `axis`, stable.
#[track_caller]
pub fn argsort(a: &Array, axis: Option<i32>) -> Array {
    sort_along("argsort", SortKind::ArgSort, a, axis)
}

/// The `k` largest values along `axis` (ascending; MLX leaves their order unspecified).
#[track_caller]
pub fn topk(a: &Array, k: i32, axis: Option<i32>) -> Array {
    let len = match axis {
        None => a.size() as i32,
        Some(axis) => a.dim(axis).unwrap_or(0),
    };
    if k < 0 || k > len {
        return Array::invalid(
            "topk",
            format!("k = {k} must be between 0 and the axis length {len}"),
        );
    }
    sort_along("topk", SortKind::TopK(k as usize), a, axis)
}
