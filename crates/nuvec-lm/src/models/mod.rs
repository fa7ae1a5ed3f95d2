//! The architectures nuvec-lm runs, chosen by the config's `model_type` as mlx-lm chooses
//! them. Adding one is a file that reads its config into a [`transformer::Spec`] (or builds
//! its own layers) and a line in [`ARCHITECTURES`].

mod experts;
mod llama;
mod qwen2;
mod qwen3;
mod qwen3_moe;
mod rope;
pub mod transformer;

use crate::cache::KvCache;
use crate::weights::Weights;
use crate::{Error, Result};
use nuvec_core::distributed::Group;
use nuvec_core::{Array, DType};
use serde_json::Value;
use std::path::Path;
use transformer::{Parallel, Transformer};

/// Reads an architecture's config into the decoder's shape (dropping tensors the
/// architecture does not use, as mlx-lm's `sanitize`).
type Loader = fn(&Value, &mut Weights) -> Result<transformer::Spec>;

/// Every supported `model_type` and its loader (`mistral` is `llama`, as in mlx-lm).
pub const ARCHITECTURES: &[(&str, Loader)] = &[
    ("llama", llama::spec),
    ("mistral", llama::spec),
    ("qwen2", qwen2::spec),
    ("qwen3", qwen3::spec),
    ("qwen3_moe", qwen3_moe::spec),
];

/// An architecture's settings from `config.json`, with serde's message (naming the field)
/// when one is missing or of the wrong type.
pub(crate) fn args<T: serde::de::DeserializeOwned>(config: &Value) -> Result<T> {
    T::deserialize(config).map_err(|e| Error::load("config.json", e.to_string()))
}

/// Removes precomputed rotary frequencies some checkpoints carry (mlx-lm's `sanitize`).
pub(crate) fn drop_rotary_frequencies(weights: &mut Weights, layers: usize) {
    for i in 0..layers {
        weights.discard(&format!("model.layers.{i}.self_attn.rotary_emb.inv_freq"));
    }
}

/// A language model: token ids in, logits over the vocabulary out.
#[derive(Debug, Clone)]
pub struct Model {
    model_type: String,
    transformer: Transformer,
    config: Value,
}

impl Model {
    /// Builds the model `config.json` describes from `weights`; every tensor must be used.
    pub fn from_weights(config: Value, weights: Weights, dir: &Path) -> Result<Model> {
        Model::from_weights_parallel(config, weights, dir, &Parallel::default())
    }

    /// [`from_weights`](Model::from_weights) split over groups as mlx-lm's `shard(group)`
    /// and `pipeline(group)` split it (see [`transformer::Transformer::load`]): this rank
    /// reads only its share of the tensors.
    pub fn from_weights_parallel(
        config: Value,
        mut weights: Weights,
        dir: &Path,
        parallel: &Parallel,
    ) -> Result<Model> {
        let model_type = config
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::load(dir.join("config.json"), "no \"model_type\""))?
            .to_string();
        let Some((_, loader)) = ARCHITECTURES.iter().find(|(name, _)| *name == model_type) else {
            let names: Vec<&str> = ARCHITECTURES.iter().map(|(n, _)| *n).collect();
            return Err(Error::load(
                dir.join("config.json"),
                format!(
                    "model_type {model_type:?} is not supported; supported: {}",
                    names.join(", ")
                ),
            ));
        };
        let split = |group: &Option<Group>| group.as_ref().is_some_and(|g| g.size() > 1);
        if split(&parallel.tensor) || split(&parallel.pipeline) {
            weights.copy_out();
        }
        let built = loader(&config, &mut weights)
            .and_then(|spec| Transformer::load(spec, &mut weights, parallel));
        let transformer = built.map_err(|e| match e {
            Error::Load { path, reason } if path.to_str() == Some("<weights>") => {
                Error::load(dir, reason)
            }
            Error::Load { path, reason } if path.to_str() == Some("<config>") => {
                Error::load(dir.join("config.json"), reason)
            }
            other => other,
        })?;
        weights.finish(dir)?;
        Ok(Model {
            model_type,
            transformer,
            config,
        })
    }

    /// The config's `model_type`.
    pub fn model_type(&self) -> &str {
        &self.model_type
    }

    /// The parsed `config.json`.
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// Every tensor of the model under mlx-lm's names (`model.layers.0.mlp.up_proj.weight`,
    /// …), sorted; for a sharded model, this rank's part of each sharded tensor, as
    /// `tree_flatten(model.parameters())` lists it after mlx-lm's `shard`.
    pub fn parameters(&self) -> Vec<(String, Array)> {
        self.transformer.parameters()
    }

    /// The architecture's shape.
    pub fn spec(&self) -> &transformer::Spec {
        self.transformer.spec()
    }

    /// Decoder layers of the whole model.
    pub fn num_layers(&self) -> usize {
        self.spec().layers
    }

    /// The layers this rank runs, one cache each: all of them, or a pipeline stage's.
    pub fn local_layers(&self) -> usize {
        self.transformer.local_layers()
    }

    /// This rank's stage of a pipeline, if the model is one.
    pub fn stage(&self) -> Option<&transformer::Stage> {
        self.transformer.stage()
    }

    /// Size of the output vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.spec().vocabulary
    }

    /// A fresh cache, one entry per layer.
    pub fn make_cache(&self) -> Vec<KvCache> {
        vec![KvCache::new(); self.local_layers()]
    }

    /// Logits `[B, L, vocabulary]` for `tokens` `[B, L]` (integers), continuing from what
    /// `cache` holds.
    pub fn forward(&self, tokens: &Array, cache: &mut [KvCache]) -> Result<Array> {
        if tokens.ndim() != 2 || tokens.dtype().is_float() {
            return Err(Error::Generate(format!(
                "tokens must be integers of shape [batch, length], got {} of shape {:?}",
                tokens.dtype(),
                tokens.shape()
            )));
        }
        if cache.len() != self.local_layers() {
            return Err(Error::Generate(format!(
                "the cache has {} layers, the model {} on this rank",
                cache.len(),
                self.local_layers()
            )));
        }
        self.transformer.forward(&tokens.astype(DType::I32), cache)
    }

    /// Logits `[B, L, vocabulary]` for `tokens` `[B, L]`, row `b` continuing the sequence
    /// whose cache is `caches[b]`: the sequences of a continuous batch, each at its own
    /// position, decoded in one forward pass (the projections and feed-forward layers run on
    /// the whole batch, the attention row by row).
    pub fn forward_rows(&self, tokens: &Array, caches: &mut [&mut [KvCache]]) -> Result<Array> {
        let rows = tokens.shape().first().copied().unwrap_or(0) as usize;
        if tokens.ndim() != 2 || tokens.dtype().is_float() || rows != caches.len() || rows == 0 {
            return Err(Error::Generate(format!(
                "forward_rows takes integer tokens [rows, length] and one cache per row, got {} \
                 of shape {:?} and {} caches",
                tokens.dtype(),
                tokens.shape(),
                caches.len()
            )));
        }
        if let Some(bad) = caches.iter().find(|c| c.len() != self.local_layers()) {
            return Err(Error::Generate(format!(
                "a cache has {} layers, the model {} on this rank",
                bad.len(),
                self.local_layers()
            )));
        }
        self.transformer
            .forward_rows(&tokens.astype(DType::I32), caches)
    }
}
