//! What every collective primitive shares: the default group, an input's bytes and dims, the
//! batching rule along the first axis, and the renaming of an error of the collective a
//! backend's default is built on.

use super::{Communicator, Group};
use crate::primitive::{Input, OutputSpec};
use crate::{Array, Error, Result};
use nuvec_cpu::Buffer;
use std::panic::Location;
use std::sync::Arc;

/// The batching rule of a collective along axis 0 (all_gather, sum_scatter): the batch axis
/// goes second, so the collective's axis stays first, whichever axis was batched.
pub(super) fn along_first_axis(
    x: &Array,
    axis: Option<usize>,
    collective: impl Fn(&Array) -> Array,
) -> (Vec<Array>, Vec<Option<usize>>) {
    let Some(axis) = axis else {
        return (vec![collective(x)], vec![None]);
    };
    let second = if x.ndim() == 1 {
        // A batch of 0-d arrays: each rank contributes one row of the batch.
        crate::ops::expand_dims(x, &[0])
    } else {
        crate::ops::moveaxis(x, axis as i32, 1)
    };
    (vec![collective(&second)], vec![Some(1)])
}

/// An array's dims as MLX's `i32`s, for the trace and the wire.
pub(super) fn dims(shape: &[usize]) -> Vec<i32> {
    shape.iter().map(|&d| d as i32).collect()
}

/// Resolves `None` to the default group.
pub(super) fn group_or_default(group: Option<&Group>) -> Group {
    group.copied().unwrap_or_else(super::default_group)
}

pub(super) fn bytes_of(input: &Input) -> &[u8] {
    &input.buffer().as_bytes()[..input.size() * input.dtype.size()]
}

/// `error` as the error of `op` when it is `underlying`'s (a default built on another
/// collective reports under the name the caller used); the peer's rank and the reason stay.
pub(super) fn as_op(error: Error, underlying: &str, op: &str) -> Error {
    match error {
        Error::Distributed {
            op: failed,
            rank,
            reason,
        } if failed == underlying => Error::Distributed {
            op: op.into(),
            rank,
            reason,
        },
        other => other,
    }
}

/// The CPU evaluation of a collective that reads its one input and fills a fresh output
/// (all_gather, sum_scatter, all_to_all, all_to_all_v): allocates the output, then records
/// and runs `run(communicator, input bytes, output bytes)` as the group's `op`, called at `at`.
pub(super) fn into_new_output(
    (group, op, at): (&Group, &'static str, &'static Location<'static>),
    input: &Input,
    output: &OutputSpec,
    run: impl FnOnce(&dyn Communicator, &[u8], &mut [u8]) -> Result<()>,
) -> Result<Vec<Arc<Buffer>>> {
    let mut out = output.alloc();
    let what = (output.dtype, &input.shape[..], None);
    group.communicate(op, what, at, |c| {
        run(c, bytes_of(input), out.as_mut_bytes())
    })?;
    Ok(vec![Arc::new(out)])
}

/// Whether `group`'s collectives run on the host: every backend's but one with device
/// collectives (NCCL).
pub(super) fn on_host(group: &Group) -> bool {
    #[cfg(feature = "cuda")]
    {
        group.communicator().is_none_or(|c| c.on_device().is_none())
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = group;
        true
    }
}

/// A collective of `group` over device memory: allocates the output on `gpu`, then records
/// and runs `run(device collectives, input, output)` as the group's `op`, called at `at`.
#[cfg(feature = "cuda")]
pub(super) fn on_gpu(
    (group, op, at): (&Group, &'static str, &'static Location<'static>),
    gpu: &Arc<crate::gpu::Gpu>,
    input: &crate::gpu::GpuInput,
    output: &OutputSpec,
    run: impl FnOnce(
        &dyn super::DeviceCollectives,
        &nuvec_cuda::DeviceBuffer,
        &mut nuvec_cuda::DeviceBuffer,
    ) -> Result<()>,
) -> crate::gpu::GpuOutputs {
    let mut out = gpu
        .alloc(output.bytes())
        .map_err(|e| crate::gpu::cuda(op, e))?;
    let what = (output.dtype, &input.shape[..], None);
    group.communicate(op, what, at, |c| match c.on_device() {
        Some(device) => run(device, input.buffer(), &mut out),
        None => Err(Error::eval(
            op,
            format!(
                "the {} backend has no collectives on GPU memory",
                c.backend()
            ),
        )),
    })?;
    Ok(vec![crate::gpu::GpuBuffer::new(gpu, out)])
}
