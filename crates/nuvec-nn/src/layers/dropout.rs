//! `Dropout`: zeroes elements at random while training, as MLX's `nn.Dropout`.

use nuvec_core::transforms::ModuleState;
use nuvec_core::{random, Array};
use nuvec_macros::Tree;

/// In training mode, keeps each element with probability `1 - p` and scales the kept ones by
/// `1 / (1 - p)`; in evaluation mode, the identity. The mask is drawn from the global key as
/// MLX draws it, so after the same seed the same elements are dropped.
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct Dropout {
    /// The probability of dropping an element, in `[0, 1)`.
    #[tree(skip)]
    pub p: f64,
    /// Training mode (dropout active) and frozen parameters (none).
    #[tree(state)]
    pub state: ModuleState,
}

impl Dropout {
    /// Dropout with probability `p` (MLX's default is 0.5).
    pub fn new(p: f64) -> Dropout {
        Dropout {
            p,
            state: ModuleState::default(),
        }
    }

    /// `x` with elements dropped (training) or unchanged (evaluation).
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        if !(0.0..1.0).contains(&self.p) {
            return Array::invalid(
                "dropout",
                format!("the drop probability must be in [0, 1), got {}", self.p),
            );
        }
        if !self.state.training || self.p == 0.0 {
            return x.clone();
        }
        let keep = 1.0 - self.p;
        let mask = random::bernoulli(keep, x.shape(), None);
        (mask * x) * (1.0 / keep)
    }
}
