//! `where(condition, x, y)`.

use super::{output, same_as};
use crate::ops::broadcast_strides;
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Result};
use nuvec_cpu::binary::{broadcast3, Operand};
use nuvec_cpu::{with_dtype, Buffer};
use std::sync::Arc;

/// `out = if condition { x } else { y }`, element-wise with broadcasting; the condition is bool.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Select;

impl Primitive for Select {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let spec = &outputs[0];
        let n = spec.size();
        let mut made = Vec::new();
        let operands = crate::gpu::flat_operands(gpu, "where", inputs, &spec.shape, &mut made)?;
        let operand = |k: usize| operands[k];
        let out = nuvec_cuda::ops::select(
            gpu,
            [operand(0), operand(1), operand(2)],
            spec.dtype.size(),
            n as u64,
        );
        crate::gpu::one(gpu, "where", out)
    }

    fn name(&self) -> &str {
        "where"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let (c, x, y) = (&inputs[0], &inputs[1], &inputs[2]);
        let (sc, sx, sy) = (
            broadcast_strides(&c.shape, &spec.shape),
            broadcast_strides(&x.shape, &spec.shape),
            broadcast_strides(&y.shape, &spec.shape),
        );
        let cond = c.slice::<bool>();
        with_dtype!(spec.dtype, T, {
            output::<T>(spec, |out| {
                broadcast3(
                    Operand {
                        data: cond,
                        strides: &sc,
                        offset: 0,
                    },
                    Operand {
                        data: x.slice::<T>(),
                        strides: &sx,
                        offset: 0,
                    },
                    Operand {
                        data: y.slice::<T>(),
                        strides: &sy,
                        offset: 0,
                    },
                    &spec.shape,
                    out,
                    |pick, p, q| if pick { p } else { q },
                )
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
        use crate::ops::*;
        let (cond, c) = (&inputs[0], &cotangents[0]);
        let grads = [zeros_like(cond), where_(cond, c, 0.0), where_(cond, 0.0, c)];
        Ok(argnums
            .iter()
            .map(|&i| crate::transforms::sum_to_shape(&grads[i], inputs[i].shape()))
            .collect())
    }

    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        // Linear in the two branches; the condition only chooses.
        let full = super::full_tangents(inputs, tangents, argnums);
        let picked = crate::ops::where_(&inputs[0], &full[1], &full[2]);
        Ok(vec![crate::ops::broadcast_to(&picked, outputs[0].shape())])
    }

    super::batching::vmap_elementwise!();

    fn is_elementwise(&self) -> bool {
        true
    }

    same_as!();
}
