//! `Linear`: `y = x Wᵀ + b`, initialised as MLX's `nn.Linear`.

use nuvec_core::transforms::ModuleState;
use nuvec_core::{ops, random, Array, DType};
use nuvec_macros::Tree;

/// A fully connected layer: `weight` of shape `[output_dims, input_dims]`, optional `bias`
/// of shape `[output_dims]`.
///
/// ```
/// use nuvec::{array, random};
/// use nuvec_nn::Linear;
/// random::seed(0);
/// let layer = Linear::new(3, 2);
/// assert_eq!(layer.weight.shape(), [2, 3]);
/// assert_eq!(layer.forward(&array![[1.0, 2.0, 3.0]]).shape(), [1, 2]);
/// ```
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct Linear {
    /// `[output_dims, input_dims]`.
    pub weight: Array,
    /// `[output_dims]`, when the layer has one.
    pub bias: Option<Array>,
    /// Training mode and frozen parameters.
    #[tree(state)]
    pub state: ModuleState,
}

impl Linear {
    /// A layer with a bias, drawn as MLX draws it: the weight, then the bias, uniform in
    /// `±1/√input_dims` from the global random key.
    pub fn new(input_dims: usize, output_dims: usize) -> Linear {
        Linear::with_bias(input_dims, output_dims, true)
    }

    /// A layer with or without a bias.
    pub fn with_bias(input_dims: usize, output_dims: usize, bias: bool) -> Linear {
        let scale = (1.0 / input_dims as f64).sqrt();
        let (i, o) = (input_dims as i32, output_dims as i32);
        let weight = random::uniform(-scale, scale, &[o, i], DType::F32, None);
        let bias = bias.then(|| random::uniform(-scale, scale, &[o], DType::F32, None));
        Linear::from_weights(weight, bias)
    }

    /// A layer with these arrays.
    pub fn from_weights(weight: Array, bias: Option<Array>) -> Linear {
        Linear {
            weight,
            bias,
            state: ModuleState::default(),
        }
    }

    /// Number of input features.
    pub fn input_dims(&self) -> usize {
        self.weight.shape().get(1).copied().unwrap_or(0) as usize
    }

    /// Number of output features.
    pub fn output_dims(&self) -> usize {
        self.weight.shape().first().copied().unwrap_or(0) as usize
    }

    /// `x Wᵀ + b` over the last axis of `x`.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        let wt = ops::transpose(&self.weight, None);
        match &self.bias {
            Some(bias) => ops::addmm(bias, x, &wt, 1.0, 1.0),
            None => ops::matmul(x, &wt),
        }
    }
}
