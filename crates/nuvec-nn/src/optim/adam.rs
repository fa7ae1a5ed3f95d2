//! Adam and AdamW with MLX's update rules.

use super::{slot, LearningRate, Optimizer, OptimizerState};
use nuvec_core::{ops, Array, Result};

/// MLX's `optim.Adam`: `m ← β₁m + (1-β₁)g`, `v ← β₂v + (1-β₂)g²`, `w ← w - lr·m/(√v + ε)`;
/// with `bias_correction`, `w ← w - (lr/(1-β₁ᵗ))·m / (√v/√(1-β₂ᵗ) + ε)` at step `t`.
#[derive(Clone, Debug)]
pub struct Adam {
    /// The learning rate or its schedule.
    pub learning_rate: LearningRate,
    /// `(β₁, β₂)`, MLX's default `(0.9, 0.999)`.
    pub betas: (f64, f64),
    /// `ε`, MLX's default 1e-8.
    pub eps: f64,
    /// Bias correction (MLX's default: off).
    pub bias_correction: bool,
    state: OptimizerState,
}

impl Adam {
    /// Adam with MLX's defaults at `learning_rate`.
    pub fn new(learning_rate: impl Into<LearningRate>) -> Adam {
        Adam {
            learning_rate: learning_rate.into(),
            betas: (0.9, 0.999),
            eps: 1e-8,
            bias_correction: false,
            state: OptimizerState::default(),
        }
    }

    /// With these betas.
    pub fn betas(mut self, beta1: f64, beta2: f64) -> Adam {
        self.betas = (beta1, beta2);
        self
    }

    /// With this epsilon.
    pub fn eps(mut self, eps: f64) -> Adam {
        self.eps = eps;
        self
    }

    /// With or without bias correction.
    pub fn bias_correction(mut self, on: bool) -> Adam {
        self.bias_correction = on;
        self
    }

    /// The Adam step for one parameter (shared with AdamW).
    fn step(&mut self, name: &str, gradient: &Array, parameter: &Array, rate: f64) -> Array {
        let (b1, b2) = self.betas;
        let m = slot(&self.state, name, "m", parameter) * b1 + gradient * (1.0 - b1);
        let v = slot(&self.state, name, "v", parameter) * b2 + ops::square(gradient) * (1.0 - b2);
        self.state.arrays.insert(format!("{name}.m"), m.clone());
        self.state.arrays.insert(format!("{name}.v"), v.clone());
        if self.bias_correction {
            let t = self.state.step as i32;
            let c1 = rate / (1.0 - b1.powi(t));
            let c2 = 1.0 / (1.0 - b2.powi(t)).sqrt();
            let denominator = ops::sqrt(&v) * c2 + self.eps;
            parameter - (m * c1) / denominator
        } else {
            parameter - m * rate / (ops::sqrt(&v) + self.eps)
        }
    }
}

impl Optimizer for Adam {
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
        Ok(self.step(name, gradient, parameter, rate))
    }
}

/// MLX's `optim.AdamW`: Adam on the decayed weights `w · (1 - lr·λ)` (MLX's default
/// `λ` = 0.01).
#[derive(Clone, Debug)]
pub struct AdamW {
    /// The Adam part.
    pub adam: Adam,
    /// Weight decay `λ`.
    pub weight_decay: f64,
}

impl AdamW {
    /// AdamW with MLX's defaults at `learning_rate`.
    pub fn new(learning_rate: impl Into<LearningRate>) -> AdamW {
        AdamW {
            adam: Adam::new(learning_rate),
            weight_decay: 0.01,
        }
    }

    /// With this weight decay.
    pub fn weight_decay(mut self, weight_decay: f64) -> AdamW {
        self.weight_decay = weight_decay;
        self
    }

    /// With or without bias correction.
    pub fn bias_correction(mut self, on: bool) -> AdamW {
        self.adam.bias_correction = on;
        self
    }
}

impl Optimizer for AdamW {
    fn state(&self) -> &OptimizerState {
        &self.adam.state
    }

    fn state_mut(&mut self) -> &mut OptimizerState {
        &mut self.adam.state
    }

    fn learning_rate_at(&self, step: u64) -> f64 {
        self.adam.learning_rate.at(step)
    }

    fn apply_single(
        &mut self,
        name: &str,
        gradient: &Array,
        parameter: &Array,
        rate: f64,
    ) -> Result<Array> {
        let decayed = parameter * (1.0 - rate * self.weight_decay);
        Ok(self.adam.step(name, gradient, &decayed, rate))
    }
}
