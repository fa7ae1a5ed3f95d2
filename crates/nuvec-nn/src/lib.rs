//! `nuvec-nn`: MLX's `mlx.nn` for nuvec.
//!
//! - [`Module`]: a model is a plain struct with `#[derive(Tree)]`; its parameters are its
//!   arrays, named by path as MLX names them (`layers.0.weight`), with freezing, training
//!   mode, [`Module::update`] and safetensors weights ([`Weights`]).
//! - Layers: [`Linear`], [`Embedding`], [`RmsNorm`], [`LayerNorm`], [`Rope`], [`Dropout`],
//!   [`Sequential`]; [`activations`] and [`losses`].
//! - Quantization as MLX's affine scheme: [`QuantizedLinear`], [`QuantizedEmbedding`],
//!   [`quantize`] (the ops are `nuvec::ops::{quantize, dequantize, quantized_matmul}`).
//! - [`optim`]: SGD, Adam, AdamW, schedules, gradient clipping, saved state.
//! - Distributed: [`average_gradients`] for data parallelism, [`sharded`] layers for tensor
//!   parallelism.
//! - [`value_and_grad`]: a loss and its gradient with respect to a model's trainable
//!   parameters.
//!
//! See [`docs/nn.md`](https://github.com/nuvec/nuvec/blob/main/docs/nn.md) for data-parallel and tensor-parallel use end to end.

pub mod activations;
mod distributed;
mod grad;
mod io;
mod layers;
pub mod losses;
mod module;
pub mod optim;
mod quantized;
pub mod sharded;

pub use activations::Activation;
pub use distributed::{average_gradients, DEFAULT_ALL_REDUCE_SIZE};
pub use grad::value_and_grad;
pub use io::{load_safetensors, nuvec_dtype as dtype_from_safetensors, save_safetensors, Weights};
pub use layers::{Dropout, Embedding, Layer, LayerNorm, Linear, RmsNorm, Rope, Sequential};
pub use module::{Module, Parameters};
pub use nuvec_core::transforms::{ModuleState, Tree};
pub use nuvec_macros::Tree;
pub use quantized::{
    quantize, LayerPredicate, QuantizedEmbedding, QuantizedLinear, DEFAULT_BITS, DEFAULT_GROUP_SIZE,
};
