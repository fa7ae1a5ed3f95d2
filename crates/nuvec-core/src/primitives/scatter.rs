//! Scatter-add along an axis: the adjoint of gathering (`take`, `take_along_axis`, sorting,
//! strided views), used by their vjp rules.

use super::index::{indices_of, resolve};
use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::{with_dtype, Buffer, Element};
use std::sync::Arc;

/// `out = zeros(shape); out[p, indices[p, j, q], q] += updates[p, j, q]` along `axis`, where
/// `updates` and `indices` have one shape and `out` differs from it only along `axis`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScatterAdd {
    pub(crate) axis: usize,
}

fn scatter_into<T: Element>(
    updates: &Input,
    indices: &[usize],
    axis: usize,
    len: usize,
    out: &mut [T],
) {
    out.fill(T::from_f64(0.0));
    let inner: usize = updates.shape[axis + 1..].iter().product();
    let taken = updates.shape[axis];
    for (flat, (&value, &index)) in updates.slice::<T>().iter().zip(indices).enumerate() {
        let q = flat % inner.max(1);
        let p = flat / (inner * taken).max(1);
        let target = (p * len + index) * inner + q;
        out[target] = out[target].add(value);
    }
}

impl Primitive for ScatterAdd {
    fn name(&self) -> &str {
        "scatter_add"
    }

    /// One GPU thread per lane of the axis adds its updates in order: the CPU's bits.
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (updates, idx) = (&inputs[0], &inputs[1]);
        let mut converted = None;
        let indices = crate::gpu::int32_indices(gpu, "scatter_add", idx, &mut converted)?;
        let shape = nuvec_cuda::scatter::Scatter {
            outer: updates.shape[..self.axis].iter().product::<usize>() as u64,
            taken: updates.shape[self.axis] as u64,
            len: outputs[0].shape[self.axis] as u64,
            inner: updates.shape[self.axis + 1..].iter().product::<usize>() as u64,
        };
        let out = nuvec_cuda::scatter::scatter_add(
            gpu,
            (updates.buffer(), updates.dtype),
            indices,
            shape,
        );
        crate::gpu::one(gpu, "scatter_add", out)
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let len = spec.shape[self.axis];
        let resolved = indices_of(&inputs[1])
            .into_iter()
            .map(|i| resolve("scatter_add", i, len))
            .collect::<Result<Vec<_>>>()?;
        let updates = &inputs[0];
        with_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| scatter_into(
                updates, &resolved, self.axis, len, out
            ))
        )
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let axis = Some(self.axis as i32);
        Ok(super::indexed_vjp(inputs, argnums, || {
            crate::ops::take_along_axis(&cotangents[0], &inputs[1], axis)
        }))
    }

    /// Linear in the updates; the indices only choose.
    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        super::indexed_jvp(self, inputs, outputs, tangents, argnums)
    }

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        let shifted = ScatterAdd {
            axis: self.axis + 1,
        };
        super::indexed_vmap(shifted, inputs, outputs, axes)
    }

    same_as!();
}

/// Adds `updates` into zeros of `shape` at `indices` along `axis` (indices of `updates`'s
/// shape; negative ones count from the end).
pub(crate) fn scatter_add(updates: &Array, indices: &Array, axis: usize, shape: &[i32]) -> Array {
    Array::from_primitive(
        Arc::new(ScatterAdd { axis }),
        vec![updates.clone(), indices.clone()],
        shape.to_vec(),
        updates.dtype(),
    )
}

/// The vjp of `take(a, indices, axis)` for `a` of `shape`: the cotangent's rows added into
/// the rows they were taken from.
pub(crate) fn take_vjp(cotangent: &Array, indices: &Array, axis: usize, shape: &[i32]) -> Array {
    let taken = indices.size() as i32;
    let mut flat_shape = shape[..axis].to_vec();
    flat_shape.push(taken);
    flat_shape.extend_from_slice(&shape[axis + 1..]);
    let updates = cotangent.reshape(&flat_shape);
    let mut index_shape = vec![1; shape.len()];
    index_shape[axis] = taken;
    let spread = crate::ops::broadcast_to(&indices.reshape(&index_shape), &flat_shape);
    scatter_add(&updates, &spread, axis, shape)
}

/// The vjp of a strided view (element `o` of the output is element `offset + Σ o_i s_i` of
/// the flat input): the cotangent added back at those flat positions.
pub(crate) fn strided_vjp(
    cotangent: &Array,
    strides: &[isize],
    offset: isize,
    shape: &[i32],
) -> Array {
    use crate::ops::{arange, reshape};
    let out_shape = cotangent.shape().to_vec();
    let mut flat = Array::scalar(offset as i64);
    for (axis, (&dim, &stride)) in out_shape.iter().zip(strides).enumerate() {
        let mut along = vec![1; out_shape.len()];
        along[axis] = dim;
        let steps = reshape(&arange(0.0, f64::from(dim), 1.0, crate::DType::I64), &along);
        flat = &flat + &(steps * stride as i64);
    }
    let flat = crate::ops::broadcast_to(&flat, &out_shape).reshape(&[-1]);
    let size: i32 = shape.iter().product();
    scatter_add(&cotangent.reshape(&[-1]), &flat, 0, &[size]).reshape(shape)
}
