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
    fn name(&self) -> &str {
        "random_bits"
    }

    fn eval_cpu(&self, inputs: &mut [Input], outputs: &[OutputSpec]) -> Result<Vec<Arc<Buffer>>> {
        let key_words = inputs[0].slice::<u32>();
        let [k0, k1] = key_words else {
            return Err(Error::eval(
                "random_bits",
                format!("a key has 2 uint32 words, got {}", key_words.len()),
            ));
        };
        let spec = &outputs[0];
        let bytes = random_bits([*k0, *k1], spec.size(), self.width);
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

    same_as!();
}
