//! Gathering by index: `take` along an axis and `take_along_axis`.

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Error, Result};
use nuvec_cpu::{with_dtype, Buffer, Element};
use std::sync::Arc;

/// Reads the integer indices of `input` as `i64`.
pub(crate) fn indices_of(input: &Input) -> Vec<i64> {
    with_dtype!(
        input.dtype,
        T,
        input
            .slice::<T>()
            .iter()
            .map(|v| v.to_i128() as i64)
            .collect()
    )
}

/// Wraps a negative index and checks the range.
pub(crate) fn resolve(op: &str, index: i64, len: usize) -> Result<usize> {
    let resolved = if index < 0 { index + len as i64 } else { index };
    if resolved < 0 || resolved >= len as i64 {
        return Err(Error::eval(
            op,
            format!("index {index} is out of range for an axis of length {len}"),
        ));
    }
    Ok(resolved as usize)
}

/// `out[..., i..., ...] = a[..., indices[i...], ...]` along `axis`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Take {
    pub(crate) axis: usize,
}

fn take_into<T: Element>(a: &Input, axis: usize, indices: &[usize], out: &mut [T]) {
    let outer: usize = a.shape[..axis].iter().product();
    let len = a.shape[axis];
    let inner: usize = a.shape[axis + 1..].iter().product();
    let data = a.slice::<T>();
    let mut cursor = 0;
    for o in 0..outer {
        for &i in indices {
            let start = (o * len + i) * inner;
            out[cursor..cursor + inner].copy_from_slice(&data[start..start + inner]);
            cursor += inner;
        }
    }
}

impl Primitive for Take {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (a, idx) = (&inputs[0], &inputs[1]);
        let shape = nuvec_cuda::ops::Gather {
            outer: a.shape[..self.axis].iter().product::<usize>() as u64,
            axis: a.shape[self.axis] as u64,
            taken: idx.size() as u64,
            inner: a.shape[self.axis + 1..].iter().product::<usize>() as u64,
            per_element: false,
        };
        let _ = outputs;
        gather_gpu(gpu, "take", a, idx, shape)
    }

    fn name(&self) -> &str {
        "take"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let (a, idx) = (&inputs[0], &inputs[1]);
        let len = a.shape[self.axis];
        let resolved = indices_of(idx)
            .into_iter()
            .map(|i| resolve("take", i, len))
            .collect::<Result<Vec<_>>>()?;
        with_dtype!(
            a.dtype,
            T,
            output::<T>(&outputs[0], |out| take_into(a, self.axis, &resolved, out))
        )
    }

    /// The cotangent's rows added into the rows they were taken from.
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(super::indexed_vjp(inputs, argnums, || {
            super::scatter::take_vjp(&cotangents[0], &inputs[1], self.axis, inputs[0].shape())
        }))
    }

    /// Linear in the data; the indices only choose.
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
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        use super::batching::{batch_size, to_front};
        use crate::ops;
        let axis = self.axis as i32;
        match (axes[0], axes[1]) {
            // Batched data: take along the shifted axis; the batch axis stays in front.
            (Some(_), None) => {
                let data = to_front(&inputs[0], axes[0]);
                Ok((
                    vec![ops::take(&data, &inputs[1], Some(axis + 1))],
                    vec![Some(0)],
                ))
            }
            // Batched indices: their batch axis lands where the indices go.
            (None, Some(_)) => {
                let indices = to_front(&inputs[1], axes[1]);
                Ok((
                    vec![ops::take(&inputs[0], &indices, Some(axis))],
                    vec![Some(self.axis)],
                ))
            }
            // Both: fold the batch into the taken axis and offset each slice's indices.
            _ => {
                let size = batch_size(inputs, axes);
                let data = ops::moveaxis(&to_front(&inputs[0], axes[0]), axis + 1, 1);
                let len = data.shape()[1];
                let mut folded_shape = vec![size * len];
                folded_shape.extend_from_slice(&data.shape()[2..]);
                let folded = data.reshape(&folded_shape);
                let indices = to_front(&inputs[1], axes[1]).astype(crate::DType::I64);
                let mut offset_shape = vec![size];
                offset_shape.extend(std::iter::repeat_n(1, indices.ndim() - 1));
                let offsets = ops::arange(0.0, f64::from(size), 1.0, crate::DType::I64)
                    .reshape(&offset_shape);
                // Negative indices count from each slice's end, as in `take`.
                let wrapped =
                    ops::where_(ops::less(&indices, 0), &indices + i64::from(len), &indices);
                let taken = ops::take(&folded, &(&wrapped + &(offsets * i64::from(len))), Some(0));
                // `taken` is (batch, index dims…, data dims after the axis…, before…): put the
                // data dims before the axis back in front of the index dims.
                let before = self.axis;
                let index_dims = inputs[1].ndim() - 1;
                let after = taken.ndim() - 1 - index_dims - before;
                let mut perm: Vec<i32> = vec![0];
                perm.extend((0..before).map(|i| (1 + index_dims + after + i) as i32));
                perm.extend((0..index_dims + after).map(|i| (1 + i) as i32));
                Ok((vec![ops::transpose(&taken, Some(&perm))], vec![Some(0)]))
            }
        }
    }

    same_as!();
}

/// `out[p, j, q] = a[p, indices[p, j, q], q]` where `indices` has `a`'s shape but along `axis`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TakeAlongAxis {
    pub(crate) axis: usize,
}

impl Primitive for TakeAlongAxis {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (a, idx) = (&inputs[0], &inputs[1]);
        let shape = nuvec_cuda::ops::Gather {
            outer: a.shape[..self.axis].iter().product::<usize>() as u64,
            axis: a.shape[self.axis] as u64,
            taken: idx.shape[self.axis] as u64,
            inner: a.shape[self.axis + 1..].iter().product::<usize>() as u64,
            per_element: true,
        };
        let _ = outputs;
        gather_gpu(gpu, "take_along_axis", a, idx, shape)
    }

    fn name(&self) -> &str {
        "take_along_axis"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let (a, idx) = (&inputs[0], &inputs[1]);
        let axis = self.axis;
        let len = a.shape[axis];
        let inner: usize = a.shape[axis + 1..].iter().product();
        let out_len = idx.shape[axis];
        let indices = indices_of(idx);
        let mut sources = Vec::with_capacity(indices.len());
        for (flat, &index) in indices.iter().enumerate() {
            let q = flat % inner;
            let p = flat / (inner * out_len);
            sources.push((p * len + resolve("take_along_axis", index, len)?) * inner + q);
        }
        with_dtype!(a.dtype, T, {
            let data = a.slice::<T>();
            output::<T>(&outputs[0], |out| {
                for (o, &s) in out.iter_mut().zip(&sources) {
                    *o = data[s];
                }
            })
        })
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(super::indexed_vjp(inputs, argnums, || {
            super::scatter::scatter_add(&cotangents[0], &inputs[1], self.axis, inputs[0].shape())
        }))
    }

    /// Linear in the data; the indices only choose.
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
        let shifted = TakeAlongAxis {
            axis: self.axis + 1,
        };
        super::indexed_vmap(shifted, inputs, outputs, axes)
    }

    same_as!();
}

/// A gather on the GPU, its indices made `int32` first where they are another integer type.
#[cfg(feature = "cuda")]
fn gather_gpu(
    gpu: &Arc<crate::gpu::Gpu>,
    op: &str,
    a: &crate::gpu::GpuInput,
    idx: &crate::gpu::GpuInput,
    shape: nuvec_cuda::ops::Gather,
) -> crate::gpu::GpuOutputs {
    let mut converted = None;
    let indices = crate::gpu::int32_indices(gpu, op, idx, &mut converted)?;
    let out = nuvec_cuda::ops::gather(gpu, (a.buffer(), a.dtype.size()), indices, shape);
    crate::gpu::one(gpu, op, out)
}
