//! Conversion between dtypes, as a C++ cast (MLX's `astype`).

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, DType, Result};
use nuvec_cpu::{parallel, with_dtype, Buffer, Element};
use std::sync::Arc;

/// `out = x as dtype`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AsType(pub(crate) DType);

fn convert<S: Element, D: Element>(input: &[S], out: &mut [D]) {
    let exact_ints = !S::DTYPE.is_float() && !D::DTYPE.is_float();
    if exact_ints {
        parallel::map(input, out, |v| D::from_i128(v.to_i128()));
    } else if D::DTYPE == DType::Bool {
        parallel::map(input, out, |v| D::from_f64(f64::from(u8::from(v.truthy()))));
    } else {
        parallel::map(input, out, |v| D::from_f64(v.to_f64()));
    }
}

impl Primitive for AsType {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let (x, spec) = (&inputs[0], &outputs[0]);
        if x.dtype == self.0 {
            return Ok(vec![x.data.clone()]);
        }
        let n = spec.size();
        let dims = crate::gpu::flat(n)?;
        let out = nuvec_cuda::ops::convert(gpu, (x.buffer(), x.dtype), (n as u64, &dims), self.0);
        crate::gpu::one(gpu, "astype", out)
    }

    fn name(&self) -> &str {
        "astype"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let input = &inputs[0];
        if input.dtype == self.0 {
            return Ok(vec![input.buffer().clone()]);
        }
        with_dtype!(
            input.dtype,
            S,
            with_dtype!(
                self.0,
                D,
                output::<D>(&outputs[0], |out| convert(input.slice::<S>(), out))
            )
        )
    }

    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        _argnums: &[usize],
    ) -> Result<Vec<Array>> {
        Ok(vec![cotangents[0].astype(inputs[0].dtype())])
    }

    super::jvp_linear!();

    super::batching::vmap_elementwise!();

    fn is_elementwise(&self) -> bool {
        true
    }

    same_as!();
}
