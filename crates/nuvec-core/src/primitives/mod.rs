//! The primitives of the graph: each file holds one family's shape rules and CPU evaluation
//! (and, as transforms land, its vjp, jvp and vmap rules).

pub(crate) mod astype;
pub(crate) mod batching;
pub(crate) mod binary;
pub(crate) mod fused;
pub(crate) mod gather_matmul;
pub(crate) mod index;
pub(crate) mod layout;
pub(crate) mod linear;
pub(crate) mod matmul;
pub(crate) mod quantized;
pub(crate) mod quantized_matmul;
pub(crate) mod random_bits;
pub(crate) mod reduce;
pub(crate) mod scan;
pub(crate) mod scatter;
pub(crate) mod select;
pub(crate) mod slice_update;
pub(crate) mod softmax;
pub(crate) mod sort;
pub(crate) mod transfer;
pub(crate) mod unary;

use crate::primitive::{OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::{Buffer, Element};
use std::sync::Arc;

/// Allocates the buffer of `spec` and fills it through `fill` as a slice of `T`.
pub(crate) fn output<T: Element>(
    spec: &OutputSpec,
    fill: impl FnOnce(&mut [T]),
) -> Result<Vec<Arc<Buffer>>> {
    let mut buffer = spec.alloc();
    fill(&mut buffer.as_mut_slice::<T>()[..spec.size()]);
    Ok(vec![Arc::new(buffer)])
}

/// Implements `is_equivalent` by comparing with another primitive of the same type.
macro_rules! same_as {
    () => {
        fn is_equivalent(&self, other: &dyn $crate::primitive::Primitive) -> bool {
            (other as &dyn std::any::Any).downcast_ref::<Self>() == Some(self)
        }
    };
}
pub(crate) use same_as;

/// The tangents of every input: those of `argnums` and zeros for the others.
pub(crate) fn full_tangents(inputs: &[Array], tangents: &[Array], argnums: &[usize]) -> Vec<Array> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| match argnums.iter().position(|&a| a == i) {
            Some(slot) => tangents[slot].astype(input.dtype()),
            None => crate::ops::zeros_like(input),
        })
        .collect()
}

/// The jvp of a primitive that is linear in its inputs: the primitive applied to the tangents.
pub(crate) fn linear_jvp<P: Primitive + Clone>(
    primitive: &P,
    inputs: &[Array],
    outputs: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    Ok(Array::from_primitive_multi(
        Arc::new(primitive.clone()),
        full_tangents(inputs, tangents, argnums),
        outputs
            .iter()
            .map(|o| (o.shape().to_vec(), o.dtype()))
            .collect(),
    ))
}

/// The tangent of an output that is the sum of one term per differentiated input (product
/// rules): the terms added and broadcast to the output's shape and dtype.
pub(crate) fn sum_of_terms(terms: impl Iterator<Item = Array>, output: &Array) -> Array {
    let total = terms
        .reduce(|acc, term| crate::ops::add(&acc, &term))
        .unwrap_or_else(|| crate::ops::zeros_like(output));
    crate::ops::broadcast_to(&total, output.shape()).astype(output.dtype())
}

/// A jvp that is zero: for outputs that do not vary smoothly with the inputs (integers,
/// comparisons, random bits).
pub(crate) fn zero_jvp(outputs: &[Array]) -> Result<Vec<Array>> {
    Ok(outputs.iter().map(crate::ops::zeros_like).collect())
}

/// Implements `jvp` as [`linear_jvp`].
macro_rules! jvp_linear {
    () => {
        fn jvp(
            &self,
            inputs: &[$crate::Array],
            outputs: &[$crate::Array],
            tangents: &[$crate::Array],
            argnums: &[usize],
        ) -> $crate::Result<Vec<$crate::Array>> {
            $crate::primitives::linear_jvp(self, inputs, outputs, tangents, argnums)
        }
    };
}
pub(crate) use jvp_linear;

/// Implements `jvp` as [`zero_jvp`].
macro_rules! jvp_zero {
    () => {
        fn jvp(
            &self,
            _inputs: &[$crate::Array],
            outputs: &[$crate::Array],
            _tangents: &[$crate::Array],
            _argnums: &[usize],
        ) -> $crate::Result<Vec<$crate::Array>> {
            $crate::primitives::zero_jvp(outputs)
        }
    };
}
pub(crate) use jvp_zero;

/// The jvp of a primitive linear in its first input whose second input (indices) only
/// chooses: the primitive applied to the data's tangent and the same indices.
pub(crate) fn indexed_jvp<P: Primitive + Clone>(
    primitive: &P,
    inputs: &[Array],
    outputs: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let Some(slot) = argnums.iter().position(|&a| a == 0) else {
        return zero_jvp(outputs);
    };
    let tangent = tangents[slot].astype(inputs[0].dtype());
    Ok(vec![Array::from_primitive(
        Arc::new(primitive.clone()),
        vec![tangent, inputs[1].clone()],
        outputs[0].shape().to_vec(),
        outputs[0].dtype(),
    )])
}

/// The vjp of such a primitive: `data` (the data's cotangent) for input 0, zeros for the
/// indices.
pub(crate) fn indexed_vjp(
    inputs: &[Array],
    argnums: &[usize],
    data: impl Fn() -> Array,
) -> Vec<Array> {
    argnums
        .iter()
        .map(|&i| {
            if i == 0 {
                data()
            } else {
                crate::ops::zeros_like(&inputs[1])
            }
        })
        .collect()
}

/// The batching rule of such a primitive with its axis shifted (`shifted`): data and
/// indices both batch-first.
pub(crate) fn indexed_vmap<P: Primitive>(
    shifted: P,
    inputs: &[Array],
    outputs: &[Array],
    axes: &[Option<usize>],
) -> Result<batching::Batched> {
    use batching::{apply, batch_size, batched_front};
    let size = batch_size(inputs, axes);
    let moved = vec![
        batched_front(&inputs[0], axes[0], size),
        batched_front(&inputs[1], axes[1], size),
    ];
    Ok((
        apply(Arc::new(shifted), moved, outputs, size),
        vec![Some(0)],
    ))
}
