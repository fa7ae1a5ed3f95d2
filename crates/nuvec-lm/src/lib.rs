//! nuvec-lm: language models on nuvec, as mlx-lm. Load a model folder in the Hugging Face /
//! mlx-community layout (full precision or converted by `mlx_lm.convert`), then generate.
//!
//! ```no_run
//! use nuvec_lm::{generate, load, GenerateOptions};
//!
//! # fn main() -> nuvec_lm::Result<()> {
//! let (model, tokenizer) = load("models/Qwen2.5-0.5B-Instruct-4bit")?;
//! let options = GenerateOptions { max_tokens: 64, ..GenerateOptions::default() };
//! let text = generate(&model, &tokenizer, "The capital of France is", options)?;
//! println!("{text}");
//! # Ok(())
//! # }
//! ```
//!
//! Supported architectures (`model_type`): see [`models::ARCHITECTURES`].

#![warn(missing_docs)]

pub mod batch;
pub mod cache;
mod chat_template;
mod detokenizer;
mod error;
pub mod generate;
pub mod layers;
pub mod memory;
pub mod models;
pub mod sample;
mod tokenizer;
pub mod weights;

pub use batch::{BatchGenerator, BatchToken};
pub use cache::KvCache;
pub use detokenizer::StreamingDetokenizer;
pub use error::{Error, Result};
pub use generate::{
    generate, stream_generate, FinishReason, GenerateOptions, GenerationResponse, Prompt,
    TextStream, TokenGenerator,
};
pub use models::transformer::{Parallel, Stage};
pub use models::Model;
pub use sample::{LogitsProcessors, SamplerOptions};
pub use tokenizer::{Message, Tokenizer};

use nuvec_core::distributed::Group;
use serde_json::Value;
use std::path::Path;

/// Reads `config.json` of a model folder.
pub fn load_config(dir: &Path) -> Result<Value> {
    let file = dir.join("config.json");
    let text = std::fs::read_to_string(&file).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::load(&file, "missing: is this a model folder?")
        } else {
            Error::load(&file, e.to_string())
        }
    })?;
    serde_json::from_str(&text).map_err(|e| Error::load(&file, format!("not valid JSON: {e}")))
}

/// Loads the model of a folder (weights memory-mapped, read in place).
pub fn load_model(dir: impl AsRef<Path>) -> Result<Model> {
    let dir = dir.as_ref();
    let config = load_config(dir)?;
    let weights = weights::Weights::open(dir)?;
    Model::from_weights(config, weights, dir)
}

/// Loads this rank's share of a model folder's model, and the tokenizer, as mlx-lm's
/// `sharded_load(repo, pipeline_group, tensor_group)`: split over `tensor_group` as mlx-lm's
/// `shard(group)` splits it and into stages over `pipeline_group` (for every architecture),
/// reading only this rank's share of the tensors from the files (mlx-lm reads whole tensors
/// and slices them). With neither group, the default group splits it tensor-parallel, as in
/// mlx-lm. Every rank of the groups computes the same logits.
pub fn sharded_load(
    dir: impl AsRef<Path>,
    pipeline_group: Option<&Group>,
    tensor_group: Option<&Group>,
) -> Result<(Model, Tokenizer)> {
    let parallel = match (pipeline_group, tensor_group) {
        (None, None) => Parallel {
            tensor: Some(nuvec_core::distributed::default_group()),
            ..Parallel::default()
        },
        (pipeline, tensor) => Parallel {
            tensor: tensor.copied(),
            pipeline: pipeline.copied(),
            ..Parallel::default()
        },
    };
    load_parallel(dir, &parallel)
}

/// [`sharded_load`] with every choice open: the groups and the pipeline's split.
pub fn load_parallel(dir: impl AsRef<Path>, parallel: &Parallel) -> Result<(Model, Tokenizer)> {
    let dir = dir.as_ref();
    if !dir.is_dir() {
        return Err(Error::load(dir, "not a folder"));
    }
    let config = load_config(dir)?;
    let weights = weights::Weights::open(dir)?;
    let model = Model::from_weights_parallel(config, weights, dir, parallel)?;
    let tokenizer = Tokenizer::from_dir(dir, model.config())?;
    Ok((model, tokenizer))
}

/// Loads a model folder's model and tokenizer, as `mlx_lm.load`.
pub fn load(dir: impl AsRef<Path>) -> Result<(Model, Tokenizer)> {
    load_parallel(dir, &Parallel::default())
}

/// The Rust examples of docs/lm.md, compiled as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/lm.md")]
pub struct LmGuide;
