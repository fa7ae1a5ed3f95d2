//! `qwen2` (Qwen 2 and 2.5): biases on the query, key and value projections.

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
    num_key_value_heads: usize,
    #[serde(default = "default_theta")]
    rope_theta: f32,
    #[serde(default)]
    rope_traditional: bool,
    rope_scaling: Option<Value>,
    #[serde(default = "yes")]
    tie_word_embeddings: bool,
}

fn default_theta() -> f32 {
    1_000_000.0
}

fn yes() -> bool {
    true
}

pub(crate) fn spec(config: &Value, weights: &mut Weights) -> Result<Spec> {
    let args: Args = super::args(config)?;
    let head_dim = args.hidden_size / args.num_attention_heads.max(1);
    super::drop_rotary_frequencies(weights, args.num_hidden_layers);
    if args.tie_word_embeddings {
        weights.discard("lm_head.weight");
    }
    let spec = Spec {
        hidden: args.hidden_size,
        layers: args.num_hidden_layers,
        heads: args.num_attention_heads,
        kv_heads: args.num_key_value_heads,
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
        qkv_bias: true,
        o_bias: false,
        mlp_bias: false,
        qk_norm: false,
        tied_embeddings: args.tie_word_embeddings,
        moe: None,
    };
    Ok(spec)
}
