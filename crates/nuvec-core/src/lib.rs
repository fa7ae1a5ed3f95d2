//! nuvec's core: lazy arrays over CPU kernels, MLX's model in Rust.
//!
//! An [`Array`] is a node of a lazy graph; ops build nodes and nothing computes until a
//! value is read ([`Array::item`], [`Array::to_vec`]) or [`eval`]/[`async_eval`] runs.
//! Invalid ops never panic: they return a failed array whose error comes out of the first
//! read or evaluation.
#![warn(missing_docs)]
#![doc(test(attr(deny(warnings))))]
#![deny(unsafe_code)]

mod array;
mod display;
pub mod distributed;
mod error;
mod eval;
#[cfg(feature = "cuda")]
pub mod gpu;
#[doc(hidden)]
pub mod literal;
mod node_hash;
pub mod ops;
pub mod primitive;
mod primitives;
pub mod random;
mod stream;
pub mod transforms;

pub use array::Array;
pub use error::{Error, Result, SourceLocation};
pub use eval::{async_eval, eval, eval_on_pool};
pub use nuvec_cpu::{bf16, f16, with_dtype, with_float_dtype, DType, Element};
pub use stream::{
    default_device, default_stream, set_default_device, with_default_device, Device, Stream,
};
