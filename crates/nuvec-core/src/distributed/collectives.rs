//! The collectives as graph primitives: they run when their result is evaluated, on the
//! group's communicator, and are effects (compile never merges or folds them).

use super::shared::{along_first_axis, group_or_default, into_new_output};
use super::{Group, ReduceOp};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::Buffer;
use std::panic::Location;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq)]
struct AllReduce {
    group: Group,
    op: ReduceOp,
    at: &'static Location<'static>,
}

impl Primitive for AllReduce {
    /// On the host, but on the GPU for a backend with device collectives (NCCL).
    fn host_only(&self) -> bool {
        super::shared::on_host(&self.group)
    }

    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (count, dtype, op) = (outputs[0].size(), outputs[0].dtype, self.op);
        let call = (&self.group, op.collective_name(), self.at);
        super::shared::on_gpu(call, gpu, &inputs[0], &outputs[0], |d, input, out| {
            d.all_reduce((input, out), count, dtype, op)
        })
    }

    fn name(&self) -> &str {
        self.op.collective_name()
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let (bytes, dtype) = (outputs[0].bytes(), outputs[0].dtype);
        let what = (dtype, &outputs[0].shape[..], None);
        let name = self.op.collective_name();
        if let Some(mut data) = inputs[0].take_owned(bytes) {
            self.group.communicate(name, what, self.at, |c| {
                c.all_reduce(data.as_mut_bytes(), dtype, self.op)
            })?;
            return Ok(vec![Arc::new(data)]);
        }
        let mut data = Buffer::for_output(bytes);
        let input = &inputs[0].buffer().as_bytes()[..bytes];
        self.group.communicate(name, what, self.at, |c| {
            c.all_reduce_into(input, data.as_mut_bytes(), dtype, self.op)
        })?;
        Ok(vec![Arc::new(data)])
    }

    /// MLX's rule: the cotangent passes through (each rank's loss is its own).
    fn vjp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![cotangents[0].clone()])
    }

    // MLX's rule: the same collective applied to the tangent.
    crate::primitives::jvp_linear!();

    /// MLX's rule: the same reduction over the whole batch.
    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        crate::primitives::batching::elementwise(self, inputs, outputs, axes)
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        Some(vec![inputs[0].to_vec()])
    }

    fn is_effect(&self) -> bool {
        true
    }

    fn communication_group(&self) -> Option<Group> {
        Some(self.group)
    }
}

#[derive(Debug, Clone, PartialEq)]
struct AllGather {
    group: Group,
    at: &'static Location<'static>,
}

impl Primitive for AllGather {
    /// On the host, but on the GPU for a backend with device collectives (NCCL).
    fn host_only(&self) -> bool {
        super::shared::on_host(&self.group)
    }

    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let bytes = inputs[0].size() * inputs[0].dtype.size();
        let call = (&self.group, "all_gather", self.at);
        super::shared::on_gpu(call, gpu, &inputs[0], &outputs[0], |d, input, out| {
            d.all_gather((input, out), bytes)
        })
    }

    fn name(&self) -> &str {
        "all_gather"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let (input, dtype) = (&inputs[0], outputs[0].dtype);
        let call = (&self.group, "all_gather", self.at);
        into_new_output(call, input, &outputs[0], |c, input, out| {
            c.all_gather(input, out, dtype)
        })
    }

    /// This rank's rows of the cotangent.
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let rows = inputs[0].shape()[0];
        let start = rows * self.group.rank() as i32;
        Ok(vec![crate::ops::slice(
            &cotangents[0],
            &[start],
            &[start + rows],
            &[1],
        )])
    }

    // MLX's rule: the same collective applied to the tangent.
    crate::primitives::jvp_linear!();

    /// The batch axis goes second, so the gathered axis stays first: right for every batch
    /// axis (MLX's rule is wrong when the batch axis is 0).
    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok(along_first_axis(&inputs[0], axes[0], |x| {
            all_gather(x, Some(&self.group))
        }))
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        let mut shape = inputs[0].to_vec();
        let first = shape.first_mut()?;
        *first *= self.group.size() as i32;
        Some(vec![shape])
    }

    fn is_effect(&self) -> bool {
        true
    }

    fn communication_group(&self) -> Option<Group> {
        Some(self.group)
    }
}

#[derive(Debug, Clone, PartialEq)]
struct ReduceScatter {
    group: Group,
    at: &'static Location<'static>,
}

impl Primitive for ReduceScatter {
    /// On the host, but on the GPU for a backend with device collectives (NCCL).
    fn host_only(&self) -> bool {
        super::shared::on_host(&self.group)
    }

    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (count, dtype) = (outputs[0].size(), outputs[0].dtype);
        let call = (&self.group, "sum_scatter", self.at);
        super::shared::on_gpu(call, gpu, &inputs[0], &outputs[0], |d, input, out| {
            d.reduce_scatter((input, out), count, dtype, ReduceOp::Sum)
        })
    }

    fn name(&self) -> &str {
        "sum_scatter"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let (input, dtype) = (&inputs[0], outputs[0].dtype);
        let call = (&self.group, "sum_scatter", self.at);
        into_new_output(call, input, &outputs[0], |c, input, out| {
            c.reduce_scatter(input, out, dtype, ReduceOp::Sum)
        })
    }

    /// The cotangent in this rank's rows and zero elsewhere (MLX has no rule).
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let c = &cotangents[0];
        let rows = c.shape()[0];
        let before = rows * self.group.rank() as i32;
        let after = inputs[0].shape()[0] - before - rows;
        let mut widths = vec![(before, after)];
        widths.extend(std::iter::repeat_n((0, 0), c.ndim() - 1));
        Ok(vec![crate::ops::pad(c, &widths, 0.0)])
    }

    // The same collective applied to the tangent (MLX has no rule).
    crate::primitives::jvp_linear!();

    /// The batch axis goes second, so the scattered axis stays first (MLX has no rule).
    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Ok(along_first_axis(&inputs[0], axes[0], |x| {
            sum_scatter(x, Some(&self.group))
        }))
    }

    fn output_shapes(&self, inputs: &[&[i32]], _traced: &[Vec<i32>]) -> Option<Vec<Vec<i32>>> {
        let mut shape = inputs[0].to_vec();
        let first = shape.first_mut()?;
        let size = self.group.size() as i32;
        if *first % size != 0 {
            return None;
        }
        *first /= size;
        Some(vec![shape])
    }

    fn is_effect(&self) -> bool {
        true
    }

    fn communication_group(&self) -> Option<Group> {
        Some(self.group)
    }
}

#[track_caller]
fn all_reduce(op: ReduceOp, x: &Array, group: Option<&Group>) -> Array {
    let group = group_or_default(group);
    if group.size() == 1 {
        return x.clone();
    }
    Array::from_primitive(
        Arc::new(AllReduce {
            group,
            op,
            at: Location::caller(),
        }),
        vec![x.clone()],
        x.shape().to_vec(),
        x.dtype(),
    )
}

/// The element-wise sum of `x` over every rank of `group` (`None`: the default group).
/// Every rank gets the same bits; on a group of one it is `x` itself.
///
/// ```
/// use nuvec_core::{array, distributed};
/// let total = distributed::all_sum(&array![1.0, 2.0], None);
/// assert_eq!(total.to_vec::<f32>()?, [1.0, 2.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
#[track_caller]
pub fn all_sum(x: &Array, group: Option<&Group>) -> Array {
    all_reduce(ReduceOp::Sum, x, group)
}

/// The element-wise maximum of `x` over every rank.
#[track_caller]
pub fn all_max(x: &Array, group: Option<&Group>) -> Array {
    all_reduce(ReduceOp::Max, x, group)
}

/// The element-wise minimum of `x` over every rank.
#[track_caller]
pub fn all_min(x: &Array, group: Option<&Group>) -> Array {
    all_reduce(ReduceOp::Min, x, group)
}

/// Every rank's `x` concatenated along axis 0, in rank order. A 0-d `x` gives shape
/// `[size]` on every group size (MLX gives `[]` on a group of one).
#[track_caller]
pub fn all_gather(x: &Array, group: Option<&Group>) -> Array {
    if let Some(error) = x.known_error() {
        return Array::failed(error);
    }
    let group = group_or_default(group);
    let source = if x.ndim() == 0 {
        crate::ops::reshape(x, &[1])
    } else {
        x.clone()
    };
    if group.size() == 1 {
        return source;
    }
    let mut shape = source.shape().to_vec();
    shape[0] *= group.size() as i32;
    let dtype = source.dtype();
    Array::from_primitive(
        Arc::new(AllGather {
            group,
            at: Location::caller(),
        }),
        vec![source],
        shape,
        dtype,
    )
}

/// The sum of `x` over every rank, of which each rank keeps its slice of axis 0 (rank `r`
/// gets rows `r * n / size .. (r + 1) * n / size`). Axis 0 must divide by the group size.
#[track_caller]
pub fn sum_scatter(x: &Array, group: Option<&Group>) -> Array {
    let group = group_or_default(group);
    if let Some(error) = x.known_error() {
        return Array::failed(error);
    }
    let size = group.size() as i32;
    if x.ndim() == 0 || x.shape()[0] % size != 0 {
        return Array::invalid(
            "sum_scatter",
            format!(
                "the first axis of shape {:?} must be divisible by the group size {size}",
                x.shape()
            ),
        );
    }
    if size == 1 {
        return x.clone();
    }
    let mut shape = x.shape().to_vec();
    shape[0] /= size;
    Array::from_primitive(
        Arc::new(ReduceScatter {
            group,
            at: Location::caller(),
        }),
        vec![x.clone()],
        shape,
        x.dtype(),
    )
}

/// Identity forward; the cotangent is summed over the group backward.
#[derive(Debug, Clone, PartialEq)]
struct SumGradients {
    group: Group,
}

impl Primitive for SumGradients {
    /// Collectives run on the host (the ring's sockets and shared memory, JACCL, MPI).
    fn host_only(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "sum_gradients"
    }

    fn eval_cpu(&self, inputs: &mut [Input], _outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        Ok(vec![inputs[0].buffer().clone()])
    }

    fn vjp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![all_sum(&cotangents[0], Some(&self.group))])
    }

    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        crate::primitives::batching::elementwise(self, inputs, outputs, axes)
    }

    /// The identity's: the tangent itself.
    fn jvp(
        &self,
        _inputs: &[Array],
        _outputs: &[Array],
        tangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![tangents[0].clone()])
    }
}

/// The identity in the forward pass; its gradient is the `all_sum` of the cotangent (MLX's
/// `sum_gradients`, for data-parallel models). On a group of one it is `x` itself.
#[track_caller]
pub fn sum_gradients(x: &Array, group: Option<&Group>) -> Array {
    let group = group_or_default(group);
    if group.size() == 1 {
        return x.clone();
    }
    Array::from_primitive(
        Arc::new(SumGradients { group }),
        vec![x.clone()],
        x.shape().to_vec(),
        x.dtype(),
    )
}
