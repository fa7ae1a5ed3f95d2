//! Random bits from a threefry key, bit-compatible with MLX.

use super::{output, same_as};
use crate::primitive::{Input, OutputSpec, Primitive};
use crate::{Array, Error, Result};
use nuvec_cpu::threefry::random_bits;
use nuvec_cpu::Buffer;
use std::sync::Arc;

/// Draws `width`-byte words of random bits from the key input (uint32 `[2]`). The key is an
/// input, so the draw is a pure function of it; the effect is in advancing the global key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RandomBits {
    pub(crate) width: usize,
}

impl Primitive for RandomBits {
    #[cfg(feature = "cuda")]
    fn eval_gpu(
        &self,
        gpu: &Arc<crate::gpu::Gpu>,
        inputs: &mut [crate::gpu::GpuInput],
        outputs: &[OutputSpec],
    ) -> crate::gpu::GpuOutputs {
        use crate::gpu::cuda;
        let (key, spec) = (&inputs[0], &outputs[0]);
        let words = key.size();
        if words == 0 || !words.is_multiple_of(2) || key.dtype != crate::DType::U32 {
            return Err(Error::eval(
                "random_bits",
                format!("a key has 2 uint32 words, got {words} of {}", key.dtype),
            ));
        }
        let keys: Vec<u32> = gpu
            .download(key.buffer(), words * 4)
            .map_err(|e| cuda("random_bits", e))?
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let per_key = spec.bytes() / (words / 2);
        if words == 2 {
            let out = nuvec_cuda::ops::random_bits(gpu, [keys[0], keys[1]], per_key as u64);
            return crate::gpu::one(gpu, "random_bits", out);
        }
        let mut out = gpu
            .alloc(spec.bytes())
            .map_err(|e| cuda("random_bits", e))?;
        let dims = crate::gpu::flat(per_key)?;
        for (i, pair) in keys.chunks_exact(2).enumerate() {
            let part = nuvec_cuda::ops::random_bits(gpu, [pair[0], pair[1]], per_key as u64)
                .map_err(|e| cuda("random_bits", e))?;
            nuvec_cuda::ops::copy_into(
                gpu,
                (&part, 0),
                (&mut out, i * per_key),
                1,
                (per_key as u64, &dims),
            )
            .map_err(|e| cuda("random_bits", e))?;
        }
        Ok(vec![crate::gpu::GpuBuffer::new(gpu, out)])
    }

    fn name(&self) -> &str {
        "random_bits"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        // One key (`[2]`), or a batch of keys (`[batch, 2]`, from vmap) each drawing its
        // share of the output as it would alone.
        let key_words = inputs[0].slice::<u32>();
        if key_words.is_empty() || !key_words.len().is_multiple_of(2) {
            return Err(Error::eval(
                "random_bits",
                format!("a key has 2 uint32 words, got {}", key_words.len()),
            ));
        }
        let spec = &outputs[0];
        let keys = key_words.len() / 2;
        let per_key = spec.size() / keys;
        let bytes: Vec<u8> = key_words
            .chunks_exact(2)
            .flat_map(|k| random_bits([k[0], k[1]], per_key, self.width))
            .collect();
        output::<u8>(
            &OutputSpec {
                shape: vec![spec.bytes()],
                dtype: nuvec_cpu::DType::U8,
            },
            |out| out.copy_from_slice(&bytes),
        )
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

    /// A batch of keys draws one block per key in a single primitive.
    fn vmap(
        &self,
        inputs: &[Array],
        outputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<super::batching::Batched> {
        let keys = super::batching::to_front(&inputs[0], axes[0]);
        if keys.ndim() != 2 {
            return Err(super::batching::unsupported(
                "random_bits",
                "a batch of keys must have shape [batch, 2]",
            ));
        }
        super::batching::batch_first(self.clone(), &[keys], outputs, &[Some(0)])
    }

    same_as!();
}
