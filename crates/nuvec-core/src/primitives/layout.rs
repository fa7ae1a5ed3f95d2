//! Layout primitives: strided views materialised (broadcast, transpose, slice), reshape
//! (which shares its input's buffer), concatenation and padding.

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::strided::{contiguous_strides, gather};
use nuvec_cpu::{with_dtype, Buffer, Element};
use std::sync::Arc;

/// Reads the input through element `strides` from element `offset` into a contiguous result:
/// the one primitive behind `broadcast_to`, `transpose` and `slice`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AsStrided {
    pub(crate) view: View,
    pub(crate) strides: Vec<isize>,
    pub(crate) offset: isize,
}

/// Which op a strided view implements (its gradient rule depends on it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum View {
    /// Axes permuted: output axis `i` is input axis `perm[i]`.
    Transpose(Vec<usize>),
    /// Axes added or stretched.
    Broadcast,
    /// Python slicing: per axis, the first index taken and the step.
    Slice { first: Vec<i64>, steps: Vec<i64> },
}

impl Primitive for AsStrided {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (x, spec) = (&inputs[0], &outputs[0]);
        let offset = usize::try_from(self.offset).map_err(|_| {
            crate::Error::eval(self.name(), format!("a negative offset {}", self.offset))
        })?;
        let from: Vec<i64> = self.strides.iter().map(|&s| s as i64).collect();
        let out = crate::gpu::strided(
            gpu,
            self.name(),
            (x.buffer(), offset),
            x.dtype,
            &spec.shape,
            &from,
        )?;
        Ok(vec![crate::gpu::GpuBuffer::new(gpu, out)])
    }

    fn name(&self) -> &str {
        match self.view {
            View::Transpose(_) => "transpose",
            View::Broadcast => "broadcast_to",
            View::Slice { .. } => "slice",
        }
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let (x, c) = (&inputs[0], &cotangents[0]);
        let grad = match &self.view {
            View::Transpose(perm) => {
                let mut inverse = vec![0i32; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i as i32;
                }
                crate::ops::transpose(c, Some(&inverse))
            }
            View::Broadcast => {
                // The stretched axes are those read with stride 0 (under vmap the batch axis
                // leads, so the output is not a NumPy broadcast of the input's shape).
                let stretched: Vec<i32> = self
                    .strides
                    .iter()
                    .enumerate()
                    .filter(|&(axis, &s)| s == 0 && c.shape()[axis] != 1)
                    .map(|(axis, _)| axis as i32)
                    .collect();
                let summed = if stretched.is_empty() {
                    c.clone()
                } else {
                    crate::ops::sum(c, stretched, false)
                };
                crate::ops::reshape(&summed, x.shape())
            }
            View::Slice { first, steps } => {
                if steps.iter().any(|&s| s != 1) {
                    let grad =
                        super::scatter::strided_vjp(c, &self.strides, self.offset, x.shape());
                    return Ok(vec![grad]);
                }
                let widths: Vec<(i32, i32)> = (0..x.ndim())
                    .map(|axis| {
                        let low = first.get(axis).copied().unwrap_or(0) as i32;
                        let high = x.shape()[axis] - low - c.shape()[axis];
                        (
                            if c.shape()[axis] == 0 { 0 } else { low },
                            if c.shape()[axis] == 0 {
                                x.shape()[axis]
                            } else {
                                high
                            },
                        )
                    })
                    .collect();
                crate::ops::pad(c, &widths, 0.0)
            }
        };
        Ok(vec![grad])
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let input = &inputs[0];
        with_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| gather(
                input.slice::<T>(),
                self.offset,
                &spec.shape,
                &self.strides,
                out
            ))
        )
    }

    super::jvp_linear!();

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        // The batch axis in front is one more strided axis: each slice is a whole input.
        let slice_size: usize = inputs[0]
            .shape()
            .iter()
            .enumerate()
            .filter(|&(i, _)| Some(i) != axes[0])
            .map(|(_, &d)| d as usize)
            .product();
        let view = match &self.view {
            View::Transpose(perm) => View::Transpose(
                std::iter::once(0)
                    .chain(perm.iter().map(|p| p + 1))
                    .collect(),
            ),
            View::Broadcast => View::Broadcast,
            View::Slice { first, steps } => View::Slice {
                first: std::iter::once(0).chain(first.iter().copied()).collect(),
                steps: std::iter::once(1).chain(steps.iter().copied()).collect(),
            },
        };
        let shifted = AsStrided {
            view,
            strides: std::iter::once(slice_size as isize)
                .chain(self.strides.iter().copied())
                .collect(),
            offset: self.offset,
        };
        super::batching::batch_first(shifted, inputs, outputs, axes)
    }

    same_as!();
}

/// Same elements, new shape: the output shares the input's buffer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reshape;

impl Primitive for Reshape {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let _ = (gpu, outputs);
        Ok(vec![inputs[0].data.clone()])
    }

    fn name(&self) -> &str {
        "reshape"
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::reshape(&cotangents[0], inputs[0].shape())])
    }

    fn eval_cpu(&self, inputs: &mut [Input], _outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        Ok(vec![inputs[0].buffer().clone()])
    }

    super::jvp_linear!();

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        super::batching::batch_first(Reshape, inputs, outputs, axes)
    }

    same_as!();
}

/// The identity that blocks gradients: the output shares the input's buffer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StopGradient;

impl Primitive for StopGradient {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let _ = (gpu, outputs);
        Ok(vec![inputs[0].data.clone()])
    }

    fn name(&self) -> &str {
        "stop_gradient"
    }

    /// Nothing flows through, as in MLX, which leaves it off the tape: not even zeros, which
    /// an infinite derivative further back would turn into NaN.
    fn differentiates_input(&self, _input: usize) -> bool {
        false
    }

    fn eval_cpu(&self, inputs: &mut [Input], _outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        Ok(vec![inputs[0].buffer().clone()])
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        _cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![crate::ops::zeros_like(&inputs[0])])
    }

    super::jvp_zero!();

    super::batching::vmap_elementwise!();

    fn is_elementwise(&self) -> bool {
        true
    }

    same_as!();
}

/// Joins inputs of one dtype along `axis`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Concatenate {
    pub(crate) axis: usize,
}

fn concat_into<T: Element>(inputs: &[Input], axis: usize, out: &mut [T]) {
    let outer: usize = inputs[0].shape[..axis].iter().product();
    let mut column = 0;
    let out_row: usize = inputs
        .iter()
        .map(|i| i.shape[axis..].iter().product::<usize>())
        .sum();
    for input in inputs {
        let row: usize = input.shape[axis..].iter().product();
        let data = input.slice::<T>();
        for o in 0..outer {
            out[o * out_row + column..o * out_row + column + row]
                .copy_from_slice(&data[o * row..(o + 1) * row]);
        }
        column += row;
    }
}

impl Primitive for Concatenate {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::{contiguous, cuda, i64s};
        let spec = &outputs[0];
        let mut out = gpu
            .alloc(spec.bytes())
            .map_err(|e| cuda("concatenate", e))?;
        let to = contiguous(&spec.shape);
        let inner = to[self.axis] as usize;
        let mut start = 0;
        for input in inputs.iter() {
            let dims =
                nuvec_cuda::ops::Dims::copy(&i64s(&input.shape), &contiguous(&input.shape), &to)
                    .map_err(|e| cuda("concatenate", e))?;
            nuvec_cuda::ops::copy_into(
                gpu,
                (input.buffer(), 0),
                (&mut out, start * inner),
                spec.dtype.size(),
                (input.size() as u64, &dims),
            )
            .map_err(|e| cuda("concatenate", e))?;
            start += input.shape[self.axis];
        }
        Ok(vec![crate::gpu::GpuBuffer::new(gpu, out)])
    }

    fn name(&self) -> &str {
        "concatenate"
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let mut bounds = vec![0i32];
        for input in inputs {
            bounds.push(bounds[bounds.len() - 1] + input.shape()[self.axis]);
        }
        let parts =
            crate::ops::split_indices(&cotangents[0], &bounds[1..inputs.len()], self.axis as i32);
        Ok(argnums.iter().map(|&i| parts[i].clone()).collect())
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        with_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| concat_into(inputs, self.axis, out))
        )
    }

    super::jvp_linear!();

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        use super::batching::{apply, batch_size, batched_front};
        let size = batch_size(inputs, axes);
        let moved = inputs
            .iter()
            .zip(axes)
            .map(|(x, &axis)| batched_front(x, axis, size))
            .collect();
        let shifted = Concatenate {
            axis: self.axis + 1,
        };
        Ok((
            apply(Arc::new(shifted), moved, outputs, size),
            vec![Some(0)],
        ))
    }

    same_as!();
}

/// Surrounds the input with `low`/`high` elements per axis, filled with `value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pad {
    pub(crate) low: Vec<usize>,
    pub(crate) value: f64,
}

fn pad_into<T: Element>(
    input: &Input,
    low: &[usize],
    value: T,
    out_shape: &[usize],
    out: &mut [T],
) {
    out.fill(value);
    if input.size() == 0 {
        return;
    }
    let out_strides = contiguous_strides(out_shape);
    let offset: isize = low
        .iter()
        .zip(&out_strides)
        .map(|(&l, &s)| l as isize * s)
        .sum();
    // Scatter rows of the input into the interior of the output.
    let n = input.shape.len();
    let inner = input.shape[n - 1];
    let rows = nuvec_cpu::strided::RowOffsets::new(
        &input.shape[..n - 1],
        &out_strides[..n - 1],
        offset,
        0,
    );
    let data = input.slice::<T>();
    for (row, start) in data.chunks(inner).zip(rows) {
        let start = start as usize;
        out[start..start + inner].copy_from_slice(row);
    }
}

impl Primitive for Pad {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::{contiguous, cuda, i64s};
        let (x, spec) = (&inputs[0], &outputs[0]);
        let value: Vec<u8> = with_dtype!(
            spec.dtype,
            T,
            Buffer::from_slice(&[T::from_f64(self.value)])
                .as_bytes()
                .to_vec()
        );
        let fill = gpu.upload(&value).map_err(|e| cuda("pad", e))?;
        let zeros = vec![0i64; spec.shape.len()];
        let mut out = crate::gpu::strided(gpu, "pad", (&fill, 0), spec.dtype, &spec.shape, &zeros)?;
        if x.size() > 0 {
            let to = contiguous(&spec.shape);
            let offset: i64 = self.low.iter().zip(&to).map(|(&l, &s)| l as i64 * s).sum();
            let dims = nuvec_cuda::ops::Dims::copy(&i64s(&x.shape), &contiguous(&x.shape), &to)
                .map_err(|e| cuda("pad", e))?;
            nuvec_cuda::ops::copy_into(
                gpu,
                (x.buffer(), 0),
                (&mut out, offset as usize),
                spec.dtype.size(),
                (x.size() as u64, &dims),
            )
            .map_err(|e| cuda("pad", e))?;
        }
        Ok(vec![crate::gpu::GpuBuffer::new(gpu, out)])
    }

    fn name(&self) -> &str {
        "pad"
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let x = &inputs[0];
        let start: Vec<i32> = self.low.iter().map(|&l| l as i32).collect();
        let stop: Vec<i32> = start.iter().zip(x.shape()).map(|(s, d)| s + d).collect();
        Ok(vec![crate::ops::slice(
            &cotangents[0],
            &start,
            &stop,
            &vec![1; x.ndim()],
        )])
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let input = &inputs[0];
        with_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| pad_into(
                input,
                &self.low,
                T::from_f64(self.value),
                &spec.shape,
                out
            ))
        )
    }

    fn jvp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        // The padding is a constant: its tangent is zero.
        let zero_pad = Pad {
            low: self.low.clone(),
            value: 0.0,
        };
        super::linear_jvp(&zero_pad, _inputs, _outputs, tangents, _argnums)
    }

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        let shifted = Pad {
            low: std::iter::once(0).chain(self.low.iter().copied()).collect(),
            value: self.value,
        };
        super::batching::batch_first(shifted, inputs, outputs, axes)
    }

    same_as!();
}
