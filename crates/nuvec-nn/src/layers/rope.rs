//! `Rope`: rotary position embeddings, as MLX's `nn.RoPE` (`mx.fast.rope`).

use nuvec_core::transforms::ModuleState;
use nuvec_core::{ops, Array};
use nuvec_macros::Tree;

/// Rotates pairs of the first `dims` features of each position by angles that grow with the
/// position: `(offset + p) · scale · base^(-2i/dims)` for pair `i`. Pairs are `(i, i + dims/2)`
/// by default, `(2i, 2i + 1)` when `traditional`. Features past `dims` pass through. Positions
/// run along the second-to-last axis.
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct Rope {
    /// Features rotated (even).
    #[tree(skip)]
    pub dims: usize,
    /// Adjacent pairs instead of halves.
    #[tree(skip)]
    pub traditional: bool,
    /// The base of the frequencies (MLX's default 10 000).
    #[tree(skip)]
    pub base: f32,
    /// Multiplies the positions (MLX's default 1).
    #[tree(skip)]
    pub scale: f32,
    /// Training mode (unused: the layer has no parameters).
    #[tree(state)]
    pub state: ModuleState,
}

impl Rope {
    /// MLX's defaults: halves, base 10 000, scale 1.
    pub fn new(dims: usize) -> Rope {
        Rope::with_options(dims, false, 10_000.0, 1.0)
    }

    /// MLX's `RoPE(dims, traditional, base, scale)`.
    pub fn with_options(dims: usize, traditional: bool, base: f32, scale: f32) -> Rope {
        Rope {
            dims,
            traditional,
            base,
            scale,
            state: ModuleState::default(),
        }
    }

    /// `x` rotated, its positions starting at 0.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        self.forward_at(x, 0)
    }

    /// `x` rotated, its positions starting at `offset` (the tokens already in a cache).
    #[track_caller]
    pub fn forward_at(&self, x: &Array, offset: usize) -> Array {
        let frequencies = ops::fast::RopeFrequencies::Base(self.base);
        ops::fast::rope(
            x,
            self.dims,
            self.traditional,
            frequencies,
            self.scale,
            offset,
        )
    }
}
