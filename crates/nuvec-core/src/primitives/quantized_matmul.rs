//! `QuantizedMatmul`: `x · Wᵀ` straight from MLX's packed words (the layout of quantized
//! linear layers), with its vjp, jvp and vmap rules.

use super::batching;
use super::quantized::{dequantize_array, Dequantize};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{ops, Array, Error, Result};
use nuvec_cpu::quantized::{quantized_matmul_t, QuantizedDims};
use nuvec_cpu::{with_float_dtype, Buffer};
use std::sync::Arc;

/// `x · Wᵀ` for a quantized `W: [n, k]` (words, scales, biases), `x: [..., k]`, all floats of
/// one dtype: MLX's `QuantizedMatmul` with `transpose`, the layout of quantized linear
/// layers. The packed words are read inside the product's loop; `W` is never dequantized.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QuantizedMatmul {
    pub(crate) group_size: usize,
    pub(crate) bits: u32,
}

impl QuantizedMatmul {
    /// The dequantized matrix of these words with `scales` and `biases` (`[n, k]`, or `[k, n]`
    /// `transposed`), for the rules that need it whole.
    fn dense(&self, inputs: &[Array], scales: &Array, biases: &Array, transposed: bool) -> Array {
        let parts = (self.group_size, self.bits);
        dequantize_array(&inputs[1], scales, biases, parts, transposed)
    }
}

impl Primitive for QuantizedMatmul {
    fn name(&self) -> &str {
        "quantized_matmul"
    }

    /// A few rows of `x` read the packed words once (one block per weight row); more multiply
    /// the weights dequantized into `x`'s dtype with cuBLAS (`nuvec_cuda::quantized`).
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        let spec = &outputs[0];
        let (x, words) = (&inputs[0], &inputs[1]);
        let k = *x.shape.last().unwrap_or(&0);
        let dims = QuantizedDims {
            m: x.shape[..x.shape.len() - 1].iter().product(),
            n: words.shape[0],
            k,
            group_size: self.group_size,
            bits: self.bits,
        };
        if !dims.is_supported() {
            return Err(Error::eval(
                "quantized_matmul",
                format!(
                    "{} bits in groups of {} over {k} values has no GPU kernel (gpu:{})",
                    self.bits,
                    self.group_size,
                    gpu.index()
                ),
            ));
        }
        let shape = nuvec_cuda::quantized::Quantized {
            m: dims.m as u64,
            n: dims.n as u64,
            k: k as u64,
            group_size: self.group_size as u64,
            bits: self.bits,
        };
        let packed = (words.buffer(), inputs[2].buffer(), inputs[3].buffer());
        let product =
            nuvec_cuda::quantized::quantized_matmul(gpu, x.buffer(), packed, shape, spec.dtype);
        crate::gpu::one(gpu, "quantized_matmul", product)
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let spec = &outputs[0];
        let (x, words, scales, biases) = (&inputs[0], &inputs[1], &inputs[2], &inputs[3]);
        let k = *x.shape.last().unwrap_or(&0);
        let dims = QuantizedDims {
            m: x.shape[..x.shape.len() - 1].iter().product(),
            n: words.shape[0],
            k,
            group_size: self.group_size,
            bits: self.bits,
        };
        let bytes = &words.buffer().as_slice::<u8>()[..words.size() * 4];
        with_float_dtype!(
            spec.dtype,
            T,
            super::output::<T>(spec, |out| quantized_matmul_t(
                x.slice::<T>(),
                bytes,
                scales.slice::<T>(),
                biases.slice::<T>(),
                dims,
                out
            )),
            Err(Error::eval(
                "quantized_matmul",
                format!("needs floats, got {}", spec.dtype)
            ))
        )
    }

    /// `∂/∂x = c · W`; the scales and biases as [`Dequantize`]'s rule, for
    /// `∂/∂W = cᵀ · x` summed over the rows of `x`.
    fn vjp(
        &self,
        inputs: &[Array],
        _outputs: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let (x, cotangent) = (&inputs[0], &cotangents[0]);
        // `cᵀ · x` over all rows, once for both the scales and the biases.
        let dense_cotangent = argnums.iter().any(|&i| i == 2 || i == 3).then(|| {
            let (n, k) = (inputs[1].shape()[0], *x.shape().last().unwrap_or(&0));
            let rows_c = ops::reshape(cotangent, &[-1, n]);
            let rows_x = ops::reshape(x, &[-1, k]);
            ops::matmul(&ops::transpose(&rows_c, None), &rows_x)
        });
        let dequantize = Dequantize {
            group_size: self.group_size,
            bits: self.bits,
            transposed: false,
        };
        argnums
            .iter()
            .map(|&i| match (i, &dense_cotangent) {
                (0, _) => Ok(ops::matmul(
                    cotangent,
                    &self.dense(inputs, &inputs[2], &inputs[3], false),
                )),
                (2, Some(dense)) => {
                    let levels = dequantize.levels(&inputs[1..]);
                    Ok(dequantize.group_sum(&(dense * &levels), &inputs[2]))
                }
                (3, Some(dense)) => Ok(dequantize.group_sum(dense, &inputs[3])),
                _ => Err(Error::Transform {
                    transform: "vjp",
                    reason: "the packed integers of quantized_matmul have no gradient".into(),
                }),
            })
            .collect()
    }

    /// Linear in `x` and, jointly, in the scales and biases (`W = s·q + b`).
    fn jvp(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        tangents: &[Array],
        argnums: &[usize],
    ) -> Result<Vec<Array>> {
        let full = super::full_tangents(inputs, tangents, argnums);
        let mut terms = Vec::new();
        if argnums.contains(&0) {
            let mut with_tangent = inputs.to_vec();
            with_tangent[0] = full[0].clone();
            let shape = outputs[0].shape().to_vec();
            let this = Arc::new(self.clone());
            terms.push(Array::from_primitive(
                this,
                with_tangent,
                shape,
                outputs[0].dtype(),
            ));
        }
        if argnums.contains(&2) || argnums.contains(&3) {
            // The tangent of `W` is dequantized as the primal product once was.
            let w_t = self.dense(inputs, &full[2], &full[3], true);
            terms.push(ops::matmul(&inputs[0], &w_t));
        }
        Ok(vec![super::sum_of_terms(terms.into_iter(), &outputs[0])])
    }

    /// Rows of `x` are independent: a batched `x` goes batch-first. Batched weights are
    /// dequantized, batched, and multiplied by `matmul`'s rule.
    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<batching::Batched> {
        let size = batching::batch_size(inputs, axes);
        if axes[1..].iter().all(Option::is_none) {
            let x = batching::to_front(&inputs[0], axes[0]);
            let mut batched = inputs.to_vec();
            batched[0] = x;
            let out = batching::apply(Arc::new(self.clone()), batched, outputs, size);
            return Ok((out, vec![Some(0)]));
        }
        let weights: Vec<Array> = (1..4)
            .map(|i| batching::batched_front(&inputs[i], axes[i], size))
            .collect();
        let parts = (self.group_size, self.bits);
        let w_t = dequantize_array(&weights[0], &weights[1], &weights[2], parts, true);
        super::matmul::Matmul.vmap(&[inputs[0].clone(), w_t], outputs, &[axes[0], Some(0)])
    }

    super::same_as!();
}

/// [`QuantizedMatmul`] as an op: `x: [..., k]`, words `[n, k·bits/32]`, scales and biases
/// of `x`'s float dtype; checked by `ops::quantized_matmul`.
pub(crate) fn quantized_matmul_array(
    x: &Array,
    wq: &Array,
    scales: &Array,
    biases: &Array,
    (group_size, bits): (usize, u32),
) -> Array {
    let mut shape = x.shape().to_vec();
    *shape.last_mut().expect("checked rank") = wq.shape()[0];
    Array::from_primitive(
        Arc::new(QuantizedMatmul { group_size, bits }),
        vec![x.clone(), wq.clone(), scales.clone(), biases.clone()],
        shape,
        x.dtype(),
    )
}
