//! Moving an array to a device: the identity, run on the target device, so that evaluation
//! copies the input there (MLX has unified memory and no such op; on CUDA it is explicit).

use super::same_as;
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Device, Result};
use nuvec_cpu::Buffer;
use std::sync::Arc;

/// The input's elements on the op's device.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToDevice;

impl Primitive for ToDevice {
    fn name(&self) -> &str {
        "to_device"
    }

    fn eval_cpu(&self, inputs: &mut [Input], _outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        Ok(vec![inputs[0].buffer().clone()])
    }

    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        _gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        _outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        Ok(vec![inputs[0].data.clone()])
    }

    /// The cotangent goes back to where the input was.
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![to_device(&cotangents[0], inputs[0].device())])
    }

    super::jvp_linear!();

    super::batching::vmap_elementwise!();

    fn is_elementwise(&self) -> bool {
        true
    }

    same_as!();
}

/// `x` computed on `device`: its value, copied there when evaluated (lazy, as every op). Reading
/// an array back ([`Array::to_vec`]) works wherever it lives.
///
/// ```
/// use nuvec_core::{array, ops::to_device, Device};
/// let a = to_device(&array![1.0f32, 2.0], Device::Cpu);
/// assert_eq!(a.device(), Device::Cpu);
/// assert_eq!(a.to_vec::<f32>()?, [1.0, 2.0]);
/// # Ok::<(), nuvec_core::Error>(())
/// ```
pub fn to_device(x: &Array, device: Device) -> Array {
    crate::with_default_device(device, || {
        Array::build1(
            Arc::new(ToDevice),
            vec![x.clone()],
            x.shape().to_vec(),
            x.dtype(),
        )
    })
}
