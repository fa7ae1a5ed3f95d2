//! The layers of `mlx.nn` with parameters or modes; activations are in `crate::activations`.

mod dropout;
mod embedding;
mod linear;
mod norm;
mod rope;
mod sequential;

pub use dropout::Dropout;
pub use embedding::Embedding;
pub use linear::Linear;
pub use norm::{LayerNorm, RmsNorm};
pub use rope::Rope;
pub use sequential::{Layer, Sequential};
