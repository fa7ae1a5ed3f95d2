//! `Embedding`: a table of vectors looked up by index, as MLX's `nn.Embedding`.

use nuvec_core::transforms::ModuleState;
use nuvec_core::{ops, random, Array, DType};
use nuvec_macros::Tree;

/// `weight[indices]`, with `weight` of shape `[num_embeddings, dims]` drawn from a normal of
/// standard deviation `1/√dims` (MLX's initialisation).
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct Embedding {
    /// `[num_embeddings, dims]`.
    pub weight: Array,
    /// Training mode and frozen parameters.
    #[tree(state)]
    pub state: ModuleState,
}

impl Embedding {
    /// A table of `num_embeddings` vectors of `dims` values.
    pub fn new(num_embeddings: usize, dims: usize) -> Embedding {
        let scale = (1.0 / dims as f64).sqrt();
        let shape = [num_embeddings as i32, dims as i32];
        let weight = random::normal_with(&shape, DType::F32, 0.0, scale, None);
        Embedding::from_weight(weight)
    }

    /// A table with this weight.
    pub fn from_weight(weight: Array) -> Embedding {
        Embedding {
            weight,
            state: ModuleState::default(),
        }
    }

    /// The rows of `indices` (integers of any shape): shape `indices.shape + [dims]`.
    #[track_caller]
    pub fn forward(&self, indices: &Array) -> Array {
        ops::take(&self.weight, indices, Some(0))
    }

    /// `x · weightᵀ`: the table used as an output projection (tied embeddings).
    #[track_caller]
    pub fn as_linear(&self, x: &Array) -> Array {
        ops::matmul(x, &ops::transpose(&self.weight, None))
    }
}
