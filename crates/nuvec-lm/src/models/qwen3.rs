//! `qwen3`: RMS norms of the queries and keys per head, an explicit head size, no biases.

use super::rope;
use super::transformer::Spec;
use crate::weights::Weights;
use crate::{Error, Result};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct Args {
    hidden_size: usize,
    num_hidden_layers: usize,
    intermediate_size: usize,
    num_attention_heads: usize,
    rms_norm_eps: f32,
    vocab_size: usize,
    num_key_value_heads: usize,
    head_dim: usize,
    tie_word_embeddings: bool,
    rope_theta: Option<f32>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
}

pub(crate) fn spec(config: &Value, weights: &mut Weights) -> Result<Spec> {
    let args: Args = super::args(config)?;
    // transformers 5 nests rope_theta and the scaling under rope_parameters.
    let nested = args.rope_parameters.as_ref();
    let theta = args
        .rope_theta
        .or_else(|| {
            nested
                .and_then(|p| p.get("rope_theta"))
                .and_then(Value::as_f64)
                .map(|t| t as f32)
        })
        .ok_or_else(|| Error::load("<config>", "rope_theta is missing from the model config"))?;
    let scaling = args.rope_scaling.as_ref().or(nested);
    if args.tie_word_embeddings {
        weights.discard("lm_head.weight");
    }
    let spec = Spec {
        hidden: args.hidden_size,
        layers: args.num_hidden_layers,
        heads: args.num_attention_heads,
        kv_heads: args.num_key_value_heads,
        head_dim: args.head_dim,
        intermediate: args.intermediate_size,
        vocabulary: args.vocab_size,
        eps: args.rms_norm_eps,
        rope: rope::initialize(args.head_dim, theta, false, scaling)?,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        qk_norm: true,
        tied_embeddings: args.tie_word_embeddings,
        moe: None,
    };
    Ok(spec)
}
