//! `RmsNorm` and `LayerNorm` over the last axis, as MLX's `nn.RMSNorm` and `nn.LayerNorm`.

use nuvec_core::transforms::ModuleState;
use nuvec_core::{ops, Array, DType};
use nuvec_macros::Tree;

/// `x / √(mean(x²) + eps) · weight` over the last axis; `weight` starts at ones.
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct RmsNorm {
    /// `[dims]`.
    pub weight: Array,
    /// Added to the mean square (MLX's default 1e-5).
    #[tree(skip)]
    pub eps: f32,
    /// Training mode and frozen parameters.
    #[tree(state)]
    pub state: ModuleState,
}

impl RmsNorm {
    /// A layer over `dims` features with MLX's `eps` of 1e-5.
    pub fn new(dims: usize) -> RmsNorm {
        RmsNorm::with_eps(dims, 1e-5)
    }

    /// A layer with another `eps`.
    pub fn with_eps(dims: usize, eps: f32) -> RmsNorm {
        RmsNorm {
            weight: ops::ones(&[dims as i32], DType::F32),
            eps,
            state: ModuleState::default(),
        }
    }

    /// Normalises `x` over its last axis.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        let mean_square = ops::mean(&ops::square(x), -1, true);
        x * ops::rsqrt(&(mean_square + self.eps)) * &self.weight
    }
}

/// `(x - mean) / √(var + eps) · weight + bias` over the last axis; `weight` starts at ones and
/// `bias` at zeros, both absent without `affine`.
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct LayerNorm {
    /// `[dims]`, with `affine`.
    pub weight: Option<Array>,
    /// `[dims]`, with `affine` and `bias`.
    pub bias: Option<Array>,
    /// Added to the variance (MLX's default 1e-5).
    #[tree(skip)]
    pub eps: f32,
    /// Training mode and frozen parameters.
    #[tree(state)]
    pub state: ModuleState,
}

impl LayerNorm {
    /// An affine layer with a bias over `dims` features, `eps` 1e-5.
    pub fn new(dims: usize) -> LayerNorm {
        LayerNorm::with_options(dims, 1e-5, true, true)
    }

    /// MLX's `LayerNorm(dims, eps, affine, bias)`.
    pub fn with_options(dims: usize, eps: f32, affine: bool, bias: bool) -> LayerNorm {
        let d = [dims as i32];
        LayerNorm {
            weight: affine.then(|| ops::ones(&d, DType::F32)),
            bias: (affine && bias).then(|| ops::zeros(&d, DType::F32)),
            eps,
            state: ModuleState::default(),
        }
    }

    /// Normalises `x` over its last axis.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        let mean = ops::mean(x, -1, true);
        let centered = x - &mean;
        let var = ops::mean(&ops::square(&centered), -1, true);
        let mut y = centered * ops::rsqrt(&(var + self.eps));
        if let Some(weight) = &self.weight {
            y = y * weight;
        }
        if let Some(bias) = &self.bias {
            y = y + bias;
        }
        y
    }
}
