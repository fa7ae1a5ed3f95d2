//! Helpers for the batching (`vmap`) rules: where a batched input's batch axis goes, and the
//! rules shared by whole families of primitives.

use crate::primitive::Primitive;
use crate::{Array, Error, Result};
use std::sync::Arc;

/// What a batching rule returns: the batched outputs and their batch axes.
pub(crate) type Batched = (Vec<Array>, Vec<Option<usize>>);

/// `x` with its batch axis (if any) moved to the front.
pub(crate) fn to_front(x: &Array, axis: Option<usize>) -> Array {
    match axis {
        Some(0) | None => x.clone(),
        Some(axis) => crate::ops::moveaxis(x, axis as i32, 0),
    }
}

/// The batch size: the length of the first batched input's batch axis.
pub(crate) fn batch_size(inputs: &[Array], axes: &[Option<usize>]) -> i32 {
    inputs
        .iter()
        .zip(axes)
        .find_map(|(x, a)| a.map(|a| x.shape()[a]))
        .unwrap_or(1)
}

/// A batch-first `x` with ones inserted after the batch axis up to `rank` + 1 dimensions, so
/// that it broadcasts against unbatched arrays of rank `rank` like its slices did.
pub(crate) fn align(x: &Array, rank: usize) -> Array {
    if x.ndim() > rank {
        return x.clone();
    }
    let mut shape = vec![x.shape()[0]];
    shape.extend(std::iter::repeat_n(1, rank + 1 - x.ndim()));
    shape.extend_from_slice(&x.shape()[1..]);
    x.reshape(&shape)
}

/// `x` batched along the front, of `size` rows: moved there, or broadcast when unbatched.
pub(crate) fn batched_front(x: &Array, axis: Option<usize>, size: i32) -> Array {
    match axis {
        Some(_) => to_front(x, axis),
        None => {
            let mut shape = vec![size];
            shape.extend_from_slice(x.shape());
            crate::ops::broadcast_to(&crate::ops::expand_dims(x, &[0]), &shape)
        }
    }
}

/// `shape` with a batch axis of `size` in front.
pub(crate) fn with_batch(size: i32, shape: &[i32]) -> Vec<i32> {
    let mut out = vec![size];
    out.extend_from_slice(shape);
    out
}

/// Applies `primitive` to `inputs` with outputs of the unbatched outputs' shapes and dtypes
/// behind a batch axis of `size`.
pub(crate) fn apply(
    primitive: Arc<dyn Primitive>,
    inputs: Vec<Array>,
    outputs: &[Array],
    size: i32,
) -> Vec<Array> {
    Array::from_primitive_multi(
        primitive,
        inputs,
        outputs
            .iter()
            .map(|o| (with_batch(size, o.shape()), o.dtype()))
            .collect(),
    )
}

/// The batching rule of element-wise primitives (which broadcast their inputs by shape):
/// batched inputs go batch-first and are aligned to the output's rank, unbatched inputs stay
/// as they are, and the primitive runs once on the whole batch.
pub(crate) fn elementwise<P: Primitive + Clone>(
    primitive: &P,
    inputs: &[Array],
    outputs: &[Array],
    axes: &[Option<usize>],
) -> Result<Batched> {
    let size = batch_size(inputs, axes);
    let rank = outputs[0].ndim();
    let moved = inputs
        .iter()
        .zip(axes)
        .map(|(x, &axis)| match axis {
            Some(_) => align(&to_front(x, axis), rank),
            None => x.clone(),
        })
        .collect();
    let batched = apply(Arc::new(primitive.clone()), moved, outputs, size);
    let count = batched.len();
    Ok((batched, vec![Some(0); count]))
}

/// The batching rule of a primitive that acts on each slice of its single input with the
/// batch axis in front: the same primitive, rebuilt by `shifted` for a batch-first input.
pub(crate) fn batch_first<P: Primitive>(
    shifted: P,
    inputs: &[Array],
    outputs: &[Array],
    axes: &[Option<usize>],
) -> Result<Batched> {
    let size = batch_size(inputs, axes);
    let x = to_front(&inputs[0], axes[0]);
    let batched = apply(Arc::new(shifted), vec![x], outputs, size);
    let count = batched.len();
    Ok((batched, vec![Some(0); count]))
}

/// Implements `vmap` with [`elementwise`].
macro_rules! vmap_elementwise {
    () => {
        fn vmap(
            &self,
            inputs: &[$crate::Array],
            outputs: &[$crate::Array],
            axes: &[Option<usize>],
        ) -> $crate::Result<(Vec<$crate::Array>, Vec<Option<usize>>)> {
            $crate::primitives::batching::elementwise(self, inputs, outputs, axes)
        }
    };
}
pub(crate) use vmap_elementwise;

/// The error of a primitive that has no batching rule for these inputs.
pub(crate) fn unsupported(name: &str, what: &str) -> Error {
    Error::Transform {
        transform: "vmap",
        reason: format!("{name}: {what}"),
    }
}
