//! CPU kernels of nuvec.
//!
//! This crate knows nothing of graphs or arrays: it holds the element types ([`DType`],
//! [`Element`]), aligned host memory ([`Buffer`]) and loops over typed slices. `nuvec-core`
//! dispatches on a dtype once (see [`with_dtype!`]) and calls one kernel here.
#![warn(missing_docs)]
#![doc(test(attr(deny(warnings))))]

pub mod binary;
pub mod blas;
pub mod buffer;
pub mod bytes;
pub mod dtype;
pub mod element;
pub mod linear;
pub mod matmul;
mod os;
pub mod parallel;
pub mod quantized;
pub mod reduce;
pub mod scan;
pub mod sort;
pub mod strided;
pub mod threefry;
pub mod unary;

pub use buffer::Buffer;
pub use dtype::{Category, DType};
pub use element::{Element, Float};
pub use half::{bf16, f16};
pub use os::{copy_streaming, counter, with_wide_vectors};
