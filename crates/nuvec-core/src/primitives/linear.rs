//! `x · wᵀ` with `w` read as stored: the product of a linear layer (`ops::linear`), whose
//! weight is never transposed or widened into a copy.

use super::batching::{batch_size, batched_front, to_front};
use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{ops, Array, Result};
use nuvec_cpu::linear::linear;
use nuvec_cpu::matmul::MatmulDims;
use nuvec_cpu::{with_float_dtype, Buffer, Float};
use std::sync::Arc;

/// `x [..., k] · w [n, k]ᵀ → [..., n]`; `x` and the output have the result dtype, `w` keeps
/// its own.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Linear;

impl Primitive for Linear {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::{cuda, flat, GpuBuffer};
        let spec = &outputs[0];
        let (x, w) = (&inputs[0], &inputs[1]);
        let (n, k) = (w.shape[0], w.shape[1]);
        if k == 0 {
            let zeros = gpu
                .upload(&vec![0u8; spec.bytes()])
                .map_err(|e| cuda("linear", e))?;
            return Ok(vec![GpuBuffer::new(gpu, zeros)]);
        }
        // A weight stored in another float type is converted once for the product.
        let converted;
        let weight = if w.dtype == spec.dtype {
            w.buffer()
        } else {
            converted = nuvec_cuda::ops::convert(
                gpu,
                (w.buffer(), w.dtype),
                (w.size() as u64, &flat(w.size())?),
                spec.dtype,
            )
            .map_err(|e| cuda("linear", e))?;
            &converted
        };
        let product = nuvec_cuda::matmul::Product {
            batch: 1,
            m: x.size() / k,
            n,
            k,
            transpose_a: false,
            transpose_b: true,
        };
        let out = nuvec_cuda::matmul::matmul(gpu, (x.buffer(), weight), product, spec.dtype);
        crate::gpu::one(gpu, "linear", out)
    }

    fn name(&self) -> &str {
        "linear"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let (x, w) = (&inputs[0], &inputs[1]);
        let k = w.shape[1];
        let dims = MatmulDims {
            m: x.size() / k.max(1),
            n: w.shape[0],
            k,
        };
        if k == 0 {
            return with_float_dtype!(
                spec.dtype,
                T,
                output::<T>(spec, |out| out.fill(<T as Float>::from_f32(0.0))),
                Err(crate::Error::eval("linear", "unsupported dtype"))
            );
        }
        with_float_dtype!(
            spec.dtype,
            T,
            with_float_dtype!(
                w.dtype,
                W,
                output::<T>(spec, |out| linear(
                    x.slice::<T>(),
                    w.slice::<W>(),
                    dims,
                    out
                )),
                Err(crate::Error::eval(
                    "linear",
                    format!("unsupported weight dtype {}", w.dtype)
                ))
            ),
            Err(crate::Error::eval(
                "linear",
                format!("unsupported dtype {}", spec.dtype)
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
        let (x, w, c) = (&inputs[0], &inputs[1], &cotangents[0]);
        Ok(argnums
            .iter()
            .map(|&i| {
                if i == 0 {
                    ops::matmul(c, &w.astype(c.dtype()))
                } else {
                    let k = x.shape()[x.ndim() - 1];
                    let n = c.shape()[c.ndim() - 1];
                    let c2 = ops::reshape(c, &[-1, n]);
                    let x2 = ops::reshape(x, &[-1, k]);
                    ops::matmul(&ops::transpose(&c2, None), &x2).astype(w.dtype())
                }
            })
            .collect())
    }

    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let terms = argnums.iter().zip(tangents).map(|(&i, t)| {
            if i == 0 {
                ops::linear(t, &inputs[1])
            } else {
                ops::linear(&inputs[0], t)
            }
        });
        Ok(vec![super::sum_of_terms(terms, &outputs[0])])
    }

    fn vmap(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        let (x, w) = (&inputs[0], &inputs[1]);
        if axes[1].is_none() {
            // Only x is batched: the batch is one more leading axis of x.
            return Ok((vec![ops::linear(&to_front(x, axes[0]), w)], vec![Some(0)]));
        }
        let size = batch_size(inputs, axes);
        let xb = batched_front(x, axes[0], size);
        let wb = to_front(w, axes[1]);
        let k = wb.shape()[2];
        let rows = ops::reshape(&xb, &[size, -1, k]);
        let product = ops::matmul(&rows, &ops::swapaxes(&wb, -1, -2));
        let mut shape = xb.shape().to_vec();
        let last = shape.len() - 1;
        shape[last] = wb.shape()[1];
        Ok((vec![ops::reshape(&product, &shape)], vec![Some(0)]))
    }

    same_as!();
}
