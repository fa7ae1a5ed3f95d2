//! `qwen3_moe`: Qwen 3's attention with a mixture of experts in place of the MLP on the
//! layers `decoder_sparse_step` selects (except `mlp_only_layers`).

use super::rope;
use super::transformer::{MoeSpec, Spec};
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
    num_experts: usize,
    num_experts_per_tok: usize,
    decoder_sparse_step: usize,
    mlp_only_layers: Vec<usize>,
    moe_intermediate_size: usize,
    rms_norm_eps: f32,
    vocab_size: usize,
    num_key_value_heads: usize,
    head_dim: usize,
    rope_theta: f32,
    tie_word_embeddings: bool,
    norm_topk_prob: bool,
}

pub(crate) fn spec(config: &Value, weights: &mut Weights) -> Result<Spec> {
    let args: Args = super::args(config)?;
    if args.tie_word_embeddings {
        weights.discard("lm_head.weight");
    }
    let sparse: Vec<bool> = (0..args.num_hidden_layers)
        .map(|i| {
            !args.mlp_only_layers.contains(&i)
                && args.num_experts > 0
                && args.decoder_sparse_step > 0
                && (i + 1) % args.decoder_sparse_step == 0
        })
        .collect();
    let moe = MoeSpec {
        experts: args.num_experts,
        per_token: args.num_experts_per_tok,
        intermediate: args.moe_intermediate_size,
        normalize: args.norm_topk_prob,
    };
    let spec = Spec {
        hidden: args.hidden_size,
        layers: args.num_hidden_layers,
        heads: args.num_attention_heads,
        kv_heads: args.num_key_value_heads,
        head_dim: args.head_dim,
        intermediate: args.intermediate_size,
        vocabulary: args.vocab_size,
        eps: args.rms_norm_eps,
        // mlx-lm ignores rope_scaling for this architecture.
        rope: rope::initialize(args.head_dim, args.rope_theta, false, None)?,
        qkv_bias: false,
        o_bias: false,
        mlp_bias: false,
        qk_norm: true,
        tied_embeddings: args.tie_word_embeddings,
        moe: Some((moe, sparse)),
    };
    Ok(spec)
}
