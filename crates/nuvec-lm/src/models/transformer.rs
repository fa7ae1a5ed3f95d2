//! The decoder every supported architecture is a variant of: token embeddings, then layers
//! of (RMS norm → attention with rotary positions → residual, RMS norm → feed-forward →
//! residual), a final norm and the vocabulary projection (its own or the embeddings').
//! An architecture's file reads its config into a [`Spec`] and names nothing else, since
//! mlx-lm's weight names are common to them (`model.layers.N.self_attn.q_proj`, …).

use super::experts::Experts;
use crate::cache::KvCache;
use crate::layers::{gather_last_axis, Embedding, Linear, RmsNorm, Sharding};
use crate::weights::Weights;
use crate::{Error, Result};
use nuvec_core::distributed::{all_gather, recv_like, send, Group};
use nuvec_core::ops::fast::{self, AttentionMask, RopeFrequencies};
use nuvec_core::{ops, Array};

/// Rotary embedding settings of the attention layers.
#[derive(Debug, Clone)]
pub struct Rope {
    /// Features rotated per head.
    pub dims: usize,
    /// Adjacent pairs rather than halves.
    pub traditional: bool,
    /// Base of the frequencies (ignored when `freqs` is given).
    pub base: f32,
    /// Multiplies positions (`1 / factor` for linear scaling).
    pub scale: f32,
    /// Explicit per-pair wavelengths (Llama 3 scaling).
    pub freqs: Option<Array>,
}

impl Rope {
    fn apply(&self, x: &Array, offset: usize) -> Array {
        let frequencies = match &self.freqs {
            Some(f) => RopeFrequencies::Explicit(f),
            None => RopeFrequencies::Base(self.base),
        };
        fast::rope(
            x,
            self.dims,
            self.traditional,
            frequencies,
            self.scale,
            offset,
        )
    }
}

/// The mixture-of-experts feed-forward of a layer.
#[derive(Debug, Clone, Copy)]
pub struct MoeSpec {
    /// Experts in the layer.
    pub experts: usize,
    /// Experts each token goes to.
    pub per_token: usize,
    /// Hidden features of one expert.
    pub intermediate: usize,
    /// Whether the chosen experts' weights are renormalised to sum to one.
    pub normalize: bool,
}

/// An architecture's shape, read from its config.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Model width.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Features per head.
    pub head_dim: usize,
    /// Hidden features of the dense MLP.
    pub intermediate: usize,
    /// Vocabulary size.
    pub vocabulary: usize,
    /// RMS norms' epsilon.
    pub eps: f32,
    /// Rotary embedding.
    pub rope: Rope,
    /// Biases on the query, key and value projections.
    pub qkv_bias: bool,
    /// A bias on the output projection.
    pub o_bias: bool,
    /// Biases on the MLP's projections.
    pub mlp_bias: bool,
    /// RMS norms of queries and keys per head (Qwen 3).
    pub qk_norm: bool,
    /// The output projection is the embedding table.
    pub tied_embeddings: bool,
    /// Mixture of experts, and which layers use it.
    pub moe: Option<(MoeSpec, Vec<bool>)>,
}

/// How a model is split over groups of processes (mlx-lm's `sharded_load`): each rank of
/// `tensor` holds a share of every layer; each rank of `pipeline` runs a contiguous stage
/// of layers.
#[derive(Debug, Clone, Default)]
pub struct Parallel {
    /// Tensor parallelism: attention by heads, MLPs and experts by hidden features.
    pub tensor: Option<Group>,
    /// Pipeline parallelism: contiguous stages of layers, the last layers on rank 0.
    pub pipeline: Option<Group>,
    /// Layers per pipeline rank (rank 0 first), summing to the model's layers; `None`
    /// splits them evenly, the low ranks taking one more when they do not divide.
    pub split: Option<Vec<usize>>,
    /// With `tensor`, split the embeddings and the output projection by vocabulary too
    /// (one more `all_sum` after the lookup, an `all_gather` of the scores): less memory and
    /// fewer bytes read per token on each rank. mlx-lm keeps them whole; so does `false`.
    pub vocabulary: bool,
}

/// The layers `start..end` this rank runs as a stage of a pipeline over `group`.
#[derive(Debug, Clone)]
pub struct Stage {
    group: Group,
    /// The first layer of this stage.
    pub start: usize,
    /// One past its last layer.
    pub end: usize,
}

impl Stage {
    /// Stages in the pipeline (ranks of its group).
    pub fn stages(&self) -> usize {
        self.group.size()
    }

    /// This rank's stage of `layers` layers split over `group` as mlx-lm's `pipeline`
    /// splits them: rank `r` runs the layers after those of ranks `r + 1 …`, so the last
    /// rank runs the first layers and rank 0 the last.
    pub fn new(layers: usize, group: Group, split: Option<&[usize]>) -> Result<Stage> {
        let size = group.size();
        let split: Vec<usize> = match split {
            Some(split) => split.to_vec(),
            None => {
                let (base, extra) = (layers / size, layers % size);
                (0..size).map(|r| base + usize::from(r < extra)).collect()
            }
        };
        if split.len() != size {
            return Err(Error::load(
                "<config>",
                format!(
                    "the pipeline split {split:?} has {} entries for {size} ranks",
                    split.len()
                ),
            ));
        }
        if split.contains(&0) || split.iter().sum::<usize>() != layers {
            return Err(Error::load(
                "<config>",
                format!(
                    "the pipeline split {split:?} must give every one of {size} ranks at least one \
                     layer and sum to the model's {layers} layers"
                ),
            ));
        }
        let rank = group.rank();
        let start = split[rank + 1..].iter().sum::<usize>();
        Ok(Stage {
            group,
            start,
            end: start + split[rank],
        })
    }
}

#[derive(Debug, Clone)]
struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    rope: Rope,
}

impl Attention {
    /// With a group, this rank's heads: query and key/value projections by rows (whole
    /// heads), the output projection by columns (mlx-lm's `shard`).
    fn load(
        spec: &Spec,
        weights: &mut Weights,
        prefix: &str,
        group: Option<Group>,
    ) -> Result<Attention> {
        let (d, h, kv, hd) = (
            spec.hidden as i32,
            spec.heads as i32,
            spec.kv_heads as i32,
            spec.head_dim as i32,
        );
        let (outputs, inputs, ranks) = match group {
            Some(g) => (Sharding::Outputs(g), Sharding::Inputs(g), g.size() as i32),
            None => (Sharding::Whole, Sharding::Whole, 1),
        };
        let norm = |weights: &mut Weights, name: &str| -> Result<Option<RmsNorm>> {
            if spec.qk_norm {
                RmsNorm::take(weights, &format!("{prefix}.{name}"), hd, spec.eps).map(Some)
            } else {
                Ok(None)
            }
        };
        let mut projection = |name: &str, (input, output): (i32, i32), bias, sharding| {
            let name = format!("{prefix}.{name}");
            Linear::take_sharded(weights, &name, input, output, bias, sharding)
        };
        let q = projection("q_proj", (d, h * hd), spec.qkv_bias, outputs)?;
        let k = projection("k_proj", (d, kv * hd), spec.qkv_bias, outputs)?;
        let v = projection("v_proj", (d, kv * hd), spec.qkv_bias, outputs)?;
        let o = projection("o_proj", (h * hd, d), spec.o_bias, inputs)?;
        Ok(Attention {
            q,
            k,
            v,
            o,
            q_norm: norm(weights, "q_norm")?,
            k_norm: norm(weights, "k_norm")?,
            heads: h / ranks,
            kv_heads: kv / ranks,
            head_dim: hd,
            rope: spec.rope.clone(),
        })
    }

    /// `x` `[B, L, D]` attending to the cache and itself: one cache for the whole batch, or
    /// one per row (sequences of a continuous batch, each at its own position). The
    /// projections run on the whole batch; each row attends to its own cache.
    fn forward_rows(&self, x: &Array, caches: &mut [&mut KvCache]) -> Array {
        let (b, l) = (x.shape()[0], x.shape()[1]);
        let split_heads = |y: Array, heads: i32, norm: &Option<RmsNorm>| {
            let y = ops::reshape(&y, &[b, l, heads, self.head_dim]);
            let y = match norm {
                Some(n) => n.forward(&y),
                None => y,
            };
            ops::transpose(&y, Some(&[0, 2, 1, 3]))
        };
        let q = split_heads(self.q.forward(x), self.heads, &self.q_norm);
        let k = split_heads(self.k.forward(x), self.kv_heads, &self.k_norm);
        let v = split_heads(self.v.forward(x), self.kv_heads, &None);
        let attend = |q: &Array, k: &Array, v: &Array, cache: &mut KvCache| {
            let offset = cache.offset();
            let (q, k) = (self.rope.apply(q, offset), self.rope.apply(k, offset));
            let (k, v) = cache.update_and_fetch(&k, v);
            let mask = if l > 1 {
                AttentionMask::Causal
            } else {
                AttentionMask::None
            };
            let scale = (self.head_dim as f32).powf(-0.5);
            fast::scaled_dot_product_attention(&q, &k, &v, scale, mask)
        };
        let out = match caches {
            [cache] => attend(&q, &k, &v, cache),
            rows => {
                let row = |a: &Array, i: usize| {
                    let mut stop = a.shape().to_vec();
                    stop[0] = i as i32 + 1;
                    let start = [i as i32, 0, 0, 0];
                    ops::slice(a, &start, &stop, &[1, 1, 1, 1])
                };
                let outs: Vec<Array> = rows
                    .iter_mut()
                    .enumerate()
                    .map(|(i, cache)| attend(&row(&q, i), &row(&k, i), &row(&v, i), cache))
                    .collect();
                ops::concatenate(&outs, 0)
            }
        };
        let out = ops::reshape(
            &ops::transpose(&out, Some(&[0, 2, 1, 3])),
            &[b, l, self.heads * self.head_dim],
        );
        self.o.forward(&out)
    }
}

/// `down(silu(gate(x)) · up(x))`.
#[derive(Debug, Clone)]
pub(crate) struct Mlp {
    gate: Linear,
    up: Linear,
    down: Linear,
}

impl Mlp {
    /// With a group, this rank's share of the hidden features: gate and up by rows, down by
    /// columns (mlx-lm's `shard`).
    fn load(
        weights: &mut Weights,
        prefix: &str,
        (dims, hidden): (i32, i32),
        bias: bool,
        group: Option<Group>,
    ) -> Result<Mlp> {
        let (outputs, inputs) = match group {
            Some(g) => (Sharding::Outputs(g), Sharding::Inputs(g)),
            None => (Sharding::Whole, Sharding::Whole),
        };
        let mut projection = |name: &str, (input, output): (i32, i32), sharding| {
            let name = format!("{prefix}.{name}");
            Linear::take_sharded(weights, &name, input, output, bias, sharding)
        };
        Ok(Mlp {
            gate: projection("gate_proj", (dims, hidden), outputs)?,
            up: projection("up_proj", (dims, hidden), outputs)?,
            down: projection("down_proj", (hidden, dims), inputs)?,
        })
    }

    fn forward(&self, x: &Array) -> Array {
        self.down
            .forward(&swiglu(&self.gate.forward(x), &self.up.forward(x)))
    }
}

/// `silu(gate) · up`.
pub(crate) fn swiglu(gate: &Array, up: &Array) -> Array {
    gate * ops::sigmoid(gate) * up
}

#[derive(Debug, Clone)]
enum FeedForward {
    Dense(Mlp),
    Experts(Experts),
}

#[derive(Debug, Clone)]
struct Block {
    input_norm: RmsNorm,
    attention: Attention,
    post_norm: RmsNorm,
    feed_forward: FeedForward,
}

/// A loaded decoder.
#[derive(Debug, Clone)]
pub struct Transformer {
    embed: Embedding,
    /// The layers this rank runs (all of them outside a pipeline).
    layers: Vec<Block>,
    norm: RmsNorm,
    head: Option<Linear>,
    spec: Spec,
    stage: Option<Stage>,
}

impl Transformer {
    /// Takes the decoder's tensors from `weights` by mlx-lm's names. With a `tensor_group`
    /// of several ranks, this rank takes its share as mlx-lm's `shard(group)` splits the
    /// model: attention by heads and the MLPs (and each expert) by hidden features, in
    /// contiguous equal parts, with one `all_sum` after each attention and each
    /// feed-forward; embeddings, norms, routers and the output projection whole.
    ///
    /// With a `pipeline` group of several ranks, this rank takes only its stage's layers
    /// (the other layers' tensors are never read), and the embeddings, final norm and output
    /// projection; activations pass from stage to stage by `send`/`recv`.
    pub fn load(spec: Spec, weights: &mut Weights, parallel: &Parallel) -> Result<Transformer> {
        let (d, v) = (spec.hidden as i32, spec.vocabulary as i32);
        let group = parallel.tensor.filter(|g| g.size() > 1);
        let stage = match parallel.pipeline.filter(|g| g.size() > 1) {
            Some(g) => Some(Stage::new(spec.layers, g, parallel.split.as_deref())?),
            None => None,
        };
        let own = stage.as_ref().map_or(0..spec.layers, |s| s.start..s.end);
        for i in (0..spec.layers).filter(|i| !own.contains(i)) {
            weights.discard_prefix(&format!("model.layers.{i}."));
        }
        if let Some(g) = group {
            let n = g.size();
            if !spec.heads.is_multiple_of(n) || !spec.kv_heads.is_multiple_of(n) {
                return Err(Error::load(
                    "<config>",
                    format!(
                        "model.layers.*.self_attn: {} query heads and {} key/value heads do not \
                         split over {n} ranks (each rank needs whole heads of both)",
                        spec.heads, spec.kv_heads
                    ),
                ));
            }
        }
        let by_vocabulary = group.filter(|_| parallel.vocabulary);
        let embed = Embedding::take_split(weights, "model.embed_tokens", v, d, by_vocabulary)?;
        let mut layers = Vec::with_capacity(own.len());
        for i in own {
            let prefix = format!("model.layers.{i}");
            let sparse = spec.moe.as_ref().filter(|(_, which)| which[i]);
            let feed_forward = match sparse {
                Some((moe, _)) => FeedForward::Experts(Experts::load(
                    weights,
                    &format!("{prefix}.mlp"),
                    d,
                    *moe,
                    group,
                )?),
                None => FeedForward::Dense(Mlp::load(
                    weights,
                    &format!("{prefix}.mlp"),
                    (d, spec.intermediate as i32),
                    spec.mlp_bias,
                    group,
                )?),
            };
            layers.push(Block {
                input_norm: RmsNorm::take(
                    weights,
                    &format!("{prefix}.input_layernorm"),
                    d,
                    spec.eps,
                )?,
                attention: Attention::load(&spec, weights, &format!("{prefix}.self_attn"), group)?,
                post_norm: RmsNorm::take(
                    weights,
                    &format!("{prefix}.post_attention_layernorm"),
                    d,
                    spec.eps,
                )?,
                feed_forward,
            });
        }
        let norm = RmsNorm::take(weights, "model.norm", d, spec.eps)?;
        let head = if spec.tied_embeddings {
            None
        } else {
            let sharding = by_vocabulary.map_or(Sharding::Whole, Sharding::Outputs);
            Some(Linear::take_sharded(
                weights, "lm_head", d, v, false, sharding,
            )?)
        };
        Ok(Transformer {
            embed,
            layers,
            norm,
            head,
            spec,
            stage,
        })
    }

    /// Every tensor under mlx-lm's names (`model.layers.0.self_attn.q_proj.weight`, …),
    /// sorted: this rank's part of the sharded ones.
    pub fn parameters(&self) -> Vec<(String, Array)> {
        let mut out = Vec::new();
        self.embed.table.named("model.embed_tokens", &mut out);
        let first = self.stage.as_ref().map_or(0, |s| s.start);
        for (i, layer) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{}", first + i);
            let norm = |name: &str, n: &RmsNorm| (format!("{p}.{name}.weight"), n.weight.clone());
            out.push(norm("input_layernorm", &layer.input_norm));
            out.push(norm("post_attention_layernorm", &layer.post_norm));
            let a = &layer.attention;
            for (name, linear) in [
                ("q_proj", &a.q),
                ("k_proj", &a.k),
                ("v_proj", &a.v),
                ("o_proj", &a.o),
            ] {
                linear.named(&format!("{p}.self_attn.{name}"), &mut out);
            }
            for (name, n) in [("q_norm", &a.q_norm), ("k_norm", &a.k_norm)] {
                if let Some(n) = n {
                    out.push(norm(&format!("self_attn.{name}"), n));
                }
            }
            match &layer.feed_forward {
                FeedForward::Dense(mlp) => {
                    for (name, linear) in [
                        ("gate_proj", &mlp.gate),
                        ("up_proj", &mlp.up),
                        ("down_proj", &mlp.down),
                    ] {
                        linear.named(&format!("{p}.mlp.{name}"), &mut out);
                    }
                }
                FeedForward::Experts(experts) => experts.named(&format!("{p}.mlp"), &mut out),
            }
        }
        out.push(("model.norm.weight".into(), self.norm.weight.clone()));
        if let Some(head) = &self.head {
            head.named("lm_head", &mut out);
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The layers this rank runs (one cache each): all of them outside a pipeline.
    pub fn local_layers(&self) -> usize {
        self.layers.len()
    }

    /// This rank's stage of a pipeline, if the model is one.
    pub fn stage(&self) -> Option<&Stage> {
        self.stage.as_ref()
    }

    /// The shape read from the config.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Logits `[B, L, vocabulary]` of tokens `[B, L]`, appending their keys and values to
    /// `cache` (one per layer).
    pub fn forward(&self, tokens: &Array, cache: &mut [KvCache]) -> Result<Array> {
        let mut layers: Vec<Vec<&mut KvCache>> = cache.iter_mut().map(|c| vec![c]).collect();
        self.forward_layers(tokens, &mut layers)
    }

    /// Logits `[B, L, vocabulary]` of tokens `[B, L]` where row `b` continues the sequence
    /// whose cache is `caches[b]` (one per layer): a continuous batch's decoding step.
    pub fn forward_rows(&self, tokens: &Array, caches: &mut [&mut [KvCache]]) -> Result<Array> {
        let layers = caches.first().map_or(0, |c| c.len());
        let mut by_layer: Vec<Vec<&mut KvCache>> = (0..layers).map(|_| Vec::new()).collect();
        for row in caches.iter_mut() {
            for (layer, cache) in row.iter_mut().enumerate() {
                by_layer[layer].push(cache);
            }
        }
        self.forward_layers(tokens, &mut by_layer)
    }

    /// The decoder over `tokens`, layer `i` attending through `caches[i]` (one cache for the
    /// batch or one per row).
    fn forward_layers(&self, tokens: &Array, caches: &mut [Vec<&mut KvCache>]) -> Result<Array> {
        let mut h = self.embed.forward(tokens);
        if let Some(stage) = &self.stage {
            // The activations of the previous stage (the next rank), as mlx-lm's pipeline.
            let (rank, size) = (stage.group.rank(), stage.group.size());
            if rank + 1 < size {
                h = recv_like(&h, rank + 1, Some(&stage.group));
            }
        }
        for (layer, cache) in self.layers.iter().zip(caches.iter_mut()) {
            let attended = layer
                .attention
                .forward_rows(&layer.input_norm.forward(&h), cache);
            h = h + attended;
            let normed = layer.post_norm.forward(&h);
            let ff = match &layer.feed_forward {
                FeedForward::Dense(mlp) => mlp.forward(&normed),
                FeedForward::Experts(experts) => experts.forward(&normed)?,
            };
            h = h + ff;
        }
        if let Some(stage) = &self.stage {
            let batch = h.shape()[0];
            if stage.group.rank() != 0 {
                h = send(&h, stage.group.rank() - 1, Some(&stage.group));
                // Evaluating the cache (the prompt's chunks) sends them on: the next chunk's
                // first stages run while the later ones work on this one.
                if let Some(last) = caches.last_mut().and_then(|c| c.first_mut()) {
                    last.evaluate_with(h.clone());
                }
            }
            // Rank 0's output, on every rank.
            let gathered = all_gather(&h, Some(&stage.group));
            let mut stop = gathered.shape().to_vec();
            stop[0] = batch;
            h = ops::slice(&gathered, &vec![0; stop.len()], &stop, &vec![1; stop.len()]);
        }
        let h = self.norm.forward(&h);
        Ok(match (&self.head, &self.embed.split) {
            (Some(head), Some((group, _))) => gather_last_axis(&head.forward(&h), group),
            (Some(head), None) => head.forward(&h),
            (None, _) => self.embed.as_linear(&h),
        })
    }
}
