//! Stochastic gradient descent with MLX's momentum, dampening, Nesterov and weight decay.

use super::{slot, LearningRate, Optimizer, OptimizerState};
use nuvec_core::{Array, Result};

/// MLX's `optim.SGD`: with weight decay `λ` the gradient becomes `g + λw`; with momentum `μ`,
/// `v ← μv + (1 - dampening)·g` and the step is `v` (or `g + μv` with Nesterov); then
/// `w ← w - lr · step`.
#[derive(Clone, Debug)]
pub struct Sgd {
    /// The learning rate or its schedule.
    pub learning_rate: LearningRate,
    /// Momentum `μ` (0: none).
    pub momentum: f64,
    /// Weight decay `λ`.
    pub weight_decay: f64,
    /// Dampening of the gradient in the momentum.
    pub dampening: f64,
    /// Nesterov momentum (needs momentum and no dampening).
    pub nesterov: bool,
    state: OptimizerState,
}

impl Sgd {
    /// Plain SGD at `learning_rate` (a rate or a schedule).
    pub fn new(learning_rate: impl Into<LearningRate>) -> Sgd {
        Sgd {
            learning_rate: learning_rate.into(),
            momentum: 0.0,
            weight_decay: 0.0,
            dampening: 0.0,
            nesterov: false,
            state: OptimizerState::default(),
        }
    }

    /// With momentum `momentum`.
    pub fn momentum(mut self, momentum: f64) -> Sgd {
        self.momentum = momentum;
        self
    }

    /// With weight decay `weight_decay`.
    pub fn weight_decay(mut self, weight_decay: f64) -> Sgd {
        self.weight_decay = weight_decay;
        self
    }

    /// With dampening `dampening`.
    pub fn dampening(mut self, dampening: f64) -> Sgd {
        self.dampening = dampening;
        self
    }

    /// With Nesterov momentum.
    pub fn nesterov(mut self, nesterov: bool) -> Sgd {
        self.nesterov = nesterov;
        self
    }
}

impl Optimizer for Sgd {
    fn state(&self) -> &OptimizerState {
        &self.state
    }

    fn state_mut(&mut self) -> &mut OptimizerState {
        &mut self.state
    }

    fn learning_rate_at(&self, step: u64) -> f64 {
        self.learning_rate.at(step)
    }

    fn apply_single(
        &mut self,
        name: &str,
        gradient: &Array,
        parameter: &Array,
        rate: f64,
    ) -> Result<Array> {
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(nuvec_core::Error::Transform {
                transform: "optimizer",
                reason: "Nesterov momentum needs a positive momentum and zero dampening".into(),
            });
        }
        let mut gradient = gradient.clone();
        if self.weight_decay != 0.0 {
            gradient = gradient + parameter * self.weight_decay;
        }
        if self.momentum <= 0.0 {
            // MLX keeps a (zero) velocity for every parameter even without momentum; so
            // does this state, so that saved states match.
            let v = slot(&self.state, name, "v", parameter);
            self.state.arrays.insert(format!("{name}.v"), v);
            return Ok(parameter - gradient * rate);
        }
        let mut v = slot(&self.state, name, "v", parameter) * self.momentum;
        v = if self.dampening > 0.0 {
            v + &gradient * (1.0 - self.dampening)
        } else {
            v + &gradient
        };
        let step = if self.nesterov {
            &gradient + &v * self.momentum
        } else {
            v.clone()
        };
        self.state.arrays.insert(format!("{name}.v"), v);
        Ok(parameter - step * rate)
    }
}
