//! Reductions over a set of axes, and arg-reductions over one axis.

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::reduce::{arg_reduce, reduce, Layout3, ReduceOp};
use nuvec_cpu::strided::{contiguous_strides, gather};
use nuvec_cpu::{with_dtype, Buffer, Element};
use std::sync::Arc;

/// `shape` without `axes`, or with them set to 1 when the traced output kept its rank.
fn reduced_shape(shape: &[i32], axes: &[usize], traced: &[Vec<i32>]) -> Vec<i32> {
    let keep = traced.first().is_some_and(|t| t.len() == shape.len());
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keep) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Reduces the (sorted, distinct) `axes`; output dtype = input dtype.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reduce {
    pub(crate) op: ReduceOp,
    pub(crate) axes: Vec<usize>,
}

/// The `[outer, len, inner]` view of `shape` when `axes` are adjacent.
fn layout_of(shape: &[usize], axes: &[usize]) -> Option<Layout3> {
    let (first, last) = (*axes.first()?, *axes.last()?);
    if last - first + 1 != axes.len() {
        return None;
    }
    Some(Layout3 {
        outer: shape[..first].iter().product(),
        len: shape[first..=last].iter().product(),
        inner: shape[last + 1..].iter().product(),
    })
}

fn reduce_any_axes<T: Element>(op: ReduceOp, input: &Input, axes: &[usize], out: &mut [T]) {
    let data = input.slice::<T>();
    if axes.is_empty() {
        out.copy_from_slice(data);
        return;
    }
    if let Some(layout) = layout_of(&input.shape, axes) {
        reduce(op, data, layout, out);
        return;
    }
    // Scattered axes: move the kept axes first and the reduced ones last, then reduce rows.
    let kept: Vec<usize> = (0..input.shape.len())
        .filter(|a| !axes.contains(a))
        .collect();
    let permutation: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let strides = contiguous_strides(&input.shape);
    let shape: Vec<usize> = permutation.iter().map(|&a| input.shape[a]).collect();
    let permuted_strides: Vec<isize> = permutation.iter().map(|&a| strides[a]).collect();
    let mut moved = vec![T::zero(); data.len()];
    gather(data, 0, &shape, &permuted_strides, &mut moved);
    let outer: usize = kept.iter().map(|&a| input.shape[a]).product();
    let len: usize = axes.iter().map(|&a| input.shape[a]).product();
    reduce(
        op,
        &moved,
        Layout3 {
            outer,
            len,
            inner: 1,
        },
        out,
    );
}

/// For each element, the product of the other elements of its group over `axes` (what `prod`
/// differentiates to), without dividing: exclusive products from both ends of the group, so
/// zeros give exact values where `prod / x` gives NaN (as MLX).
fn product_of_others(x: &Array, axes: &[usize]) -> Array {
    use crate::ops::{cumprod, multiply, reshape, transpose};
    let rank = x.ndim();
    let kept: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
    let order: Vec<i32> = kept.iter().chain(axes).map(|&a| a as i32).collect();
    let moved = transpose(x, Some(&order));
    let mut grouped: Vec<i32> = kept.iter().map(|&a| x.shape()[a]).collect();
    grouped.push(axes.iter().map(|&a| x.shape()[a]).product());
    let rows = reshape(&moved, &grouped);
    let before = cumprod(&rows, Some(-1), false, false);
    let after = cumprod(&rows, Some(-1), true, false);
    let others = reshape(&multiply(&before, &after), moved.shape());
    let mut inverse = vec![0i32; rank];
    for (position, &axis) in order.iter().enumerate() {
        inverse[axis as usize] = position as i32;
    }
    transpose(&others, Some(&inverse))
}

/// The jvp of max (`largest`) or min over `axes`, as MLX's: the tangent at the first extreme
/// (argmax's or argmin's pick, a NaN first), the reduced axes moved last and flattened.
fn extreme_tangent(x: &Array, t: &Array, axes: &[usize], largest: bool) -> Array {
    use crate::ops::*;
    if x.size() == 0 {
        return zeros_like(x);
    }
    let kept: Vec<usize> = (0..x.ndim()).filter(|i| !axes.contains(i)).collect();
    let order: Vec<i32> = kept.iter().chain(axes).map(|&a| a as i32).collect();
    let flat: Vec<i32> = kept
        .iter()
        .map(|&a| x.shape()[a])
        .chain(std::iter::once(-1))
        .collect();
    let (x, t) = (
        reshape(&transpose(x, Some(&order)), &flat),
        reshape(&transpose(t, Some(&order)), &flat),
    );
    // The pick is locally constant in `x`: nothing is differentiated through it.
    let index = stop_gradient(&if largest {
        argmax(&x, Some(-1), true)
    } else {
        argmin(&x, Some(-1), true)
    });
    take_along_axis(&t, &index, Some(-1))
}

/// The reduced result reshaped with its reduced axes kept (as length 1).
fn with_kept_axes(value: &Array, input_shape: &[i32], axes: &[usize]) -> Array {
    let kept: Vec<i32> = input_shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect();
    crate::ops::reshape(value, &kept)
}

impl Primitive for Reduce {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use nuvec_cuda::kernels::reduce::Reduction;
        let (x, spec) = (&inputs[0], &outputs[0]);
        let reduction = match self.op {
            ReduceOp::Sum => Reduction::Sum,
            ReduceOp::Prod => Reduction::Prod,
            ReduceOp::Max => Reduction::Max,
            ReduceOp::Min => Reduction::Min,
            // Over booleans (0 or 1), all is the minimum and any the maximum.
            ReduceOp::All if x.dtype == crate::DType::Bool => Reduction::Min,
            ReduceOp::Any if x.dtype == crate::DType::Bool => Reduction::Max,
            _ => return Err(crate::gpu::no_kernel(self.name(), gpu)),
        };
        let cols: usize = self.axes.iter().map(|&a| x.shape[a]).product();
        reduce_rows_gpu(
            gpu,
            self.name(),
            x,
            &self.axes,
            reduction,
            (spec.size(), cols),
            spec.dtype,
        )
    }

    fn name(&self) -> &str {
        self.op.name()
    }

    fn vjp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        use crate::ops::*;
        let x = &inputs[0];
        let c = with_kept_axes(&cotangents[0], x.shape(), &self.axes);
        let out = with_kept_axes(&outputs[0], x.shape(), &self.axes);
        let grad = match self.op {
            ReduceOp::Sum => broadcast_to(&c, x.shape()),
            ReduceOp::Prod => multiply(&c, product_of_others(x, &self.axes)),
            ReduceOp::Max | ReduceOp::Min => {
                // Ties share the cotangent equally, as MLX (in its order of operations).
                let mask = equal(x, &out).astype(c.dtype());
                let axes: Vec<i32> = self.axes.iter().map(|&a| a as i32).collect();
                multiply(divide(&c, sum(&mask, axes, true)), mask)
            }
            _ => zeros_like(x),
        };
        Ok(vec![grad])
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let input = &inputs[0];
        with_dtype!(
            spec.dtype,
            T,
            output::<T>(spec, |out| reduce_any_axes(self.op, input, &self.axes, out))
        )
    }

    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        use crate::ops::*;
        let (x, t) = (&inputs[0], &tangents[0].astype(inputs[0].dtype()));
        let axes: Vec<i32> = self.axes.iter().map(|&a| a as i32).collect();
        let tangent = match self.op {
            ReduceOp::Sum => return super::linear_jvp(self, inputs, outputs, tangents, argnums),
            ReduceOp::Prod => sum(&multiply(t, product_of_others(x, &self.axes)), axes, false),
            ReduceOp::Max | ReduceOp::Min => {
                extreme_tangent(x, t, &self.axes, self.op == ReduceOp::Max)
            }
            _ => zeros_like(&outputs[0]),
        };
        Ok(vec![tangent.reshape(outputs[0].shape())])
    }

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        let shifted = Reduce {
            op: self.op,
            axes: self.axes.iter().map(|a| a + 1).collect(),
        };
        super::batching::batch_first(shifted, inputs, outputs, axes)
    }

    fn output_shapes(&self, inputs: &[&[i32]], traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        Some(vec![reduced_shape(inputs[0], &self.axes, traced)])
    }

    same_as!();
}

/// Index (uint32) of the largest or smallest element along `axis`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ArgReduce {
    pub(crate) largest: bool,
    pub(crate) axis: usize,
}

impl Primitive for ArgReduce {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use nuvec_cuda::kernels::reduce::Reduction;
        let (x, spec) = (&inputs[0], &outputs[0]);
        let reduction = if self.largest {
            Reduction::ArgMax
        } else {
            Reduction::ArgMin
        };
        let cols = x.shape.get(self.axis).copied().unwrap_or(1);
        reduce_rows_gpu(
            gpu,
            self.name(),
            x,
            &[self.axis],
            reduction,
            (spec.size(), cols),
            spec.dtype,
        )
    }

    fn name(&self) -> &str {
        if self.largest {
            "argmax"
        } else {
            "argmin"
        }
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

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let input = &inputs[0];
        let layout = layout_of(&input.shape, &[self.axis]).unwrap_or(Layout3 {
            outer: 1,
            len: 1,
            inner: 1,
        });
        with_dtype!(
            input.dtype,
            T,
            output::<u32>(&outputs[0], |out| arg_reduce(
                self.largest,
                input.slice::<T>(),
                layout,
                out
            ))
        )
    }

    super::jvp_zero!();

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        let shifted = ArgReduce {
            largest: self.largest,
            axis: self.axis + 1,
        };
        super::batching::batch_first(shifted, inputs, outputs, axes)
    }

    fn output_shapes(&self, inputs: &[&[i32]], traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        Some(vec![reduced_shape(inputs[0], &[self.axis], traced)])
    }

    same_as!();
}

pub(crate) fn axis_layout(shape: &[usize], axis: usize) -> Layout3 {
    layout_of(shape, &[axis]).unwrap_or(Layout3 {
        outer: 1,
        len: 1,
        inner: 1,
    })
}

/// `reduction` over `axes` of `x` on the GPU: the kept axes moved first and the reduced ones
/// last (a copy unless they are already so), then one row per output element.
#[cfg(feature = "cuda")]
fn reduce_rows_gpu(
    gpu: &Arc<crate::gpu::Gpu>,
    op: &str,
    x: &crate::gpu::GpuInput,
    axes: &[usize],
    reduction: nuvec_cuda::kernels::reduce::Reduction,
    (rows, cols): (usize, usize),
    dtype: crate::DType,
) -> crate::gpu::GpuOutputs {
    let kept: Vec<usize> = (0..x.shape.len()).filter(|a| !axes.contains(a)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let in_order = perm.iter().enumerate().all(|(i, &p)| i == p);
    let moved;
    let source = if in_order {
        x.buffer()
    } else {
        moved = crate::gpu::permuted(gpu, op, x, &perm)?;
        &moved
    };
    let out = nuvec_cuda::ops::reduce_rows(
        gpu,
        reduction,
        (source, x.dtype),
        (rows as u64, cols as u64),
        dtype,
    );
    crate::gpu::one(gpu, op, out)
}
