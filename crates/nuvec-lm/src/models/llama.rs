//! `llama` (and `mistral`, which mlx-lm maps onto it): Llama 1–3 with grouped-query attention,
//! optional biases, and Llama 3's rope scaling.

use super::rope;
use super::transformer::Spec;
use crate::weights::Weights;
use crate::Result;
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
    head_dim: Option<usize>,
    num_key_value_heads: Option<usize>,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default = "default_theta")]
    rope_theta: f32,
    #[serde(default)]
    rope_traditional: bool,
    rope_scaling: Option<Value>,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn default_theta() -> f32 {
    10_000.0
}

fn yes() -> bool {
    true
}

pub(crate) fn spec(config: &Value, weights: &mut Weights) -> Result<Spec> {
    let args: Args = super::args(config)?;
    let head_dim = args
        .head_dim
        .unwrap_or_else(|| args.hidden_size / args.num_attention_heads.max(1));
    super::drop_rotary_frequencies(weights, args.num_hidden_layers);
    if args.tie_word_embeddings {
        weights.discard("lm_head.weight");
    }
    let spec = Spec {
        hidden: args.hidden_size,
        layers: args.num_hidden_layers,
        heads: args.num_attention_heads,
        kv_heads: args.num_key_value_heads.unwrap_or(args.num_attention_heads),
        head_dim,
        intermediate: args.intermediate_size,
        vocabulary: args.vocab_size,
        eps: args.rms_norm_eps,
        rope: rope::initialize(
            head_dim,
            args.rope_theta,
            args.rope_traditional,
            args.rope_scaling.as_ref(),
        )?,
        qkv_bias: args.attention_bias,
        o_bias: args.attention_bias,
        mlp_bias: args.mlp_bias,
        qk_norm: false,
        tied_embeddings: args.tie_word_embeddings,
        moe: None,
    };
    Ok(spec)
}
