//! Optimizers with MLX's update rules (`mlx.optimizers`): [`Sgd`], [`Adam`], [`AdamW`],
//! learning-rate [`schedules`], and [`clip_grad_norm`].
//!
//! An optimizer keeps its state by parameter name (`w.m`, `w.v`, as MLX's `tree_flatten` of
//! `optimizer.state` names it), plus `step` and `learning_rate`, and saves and restores it as
//! a safetensors file.

mod adam;
mod clip;
pub mod schedules;
mod sgd;

pub use adam::{Adam, AdamW};
pub use clip::clip_grad_norm;
pub use sgd::Sgd;

use crate::io::{load_safetensors, save_safetensors};
use crate::module::{Module, Parameters};
use nuvec_core::{Array, DType, Error, Result};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// A learning rate: fixed, or a schedule of the step (the number of updates done so far).
#[derive(Clone)]
pub enum LearningRate {
    /// The same rate at every step.
    Constant(f64),
    /// A rate computed from the step, as MLX's schedules.
    Schedule(Arc<dyn Fn(u64) -> f64 + Send + Sync>),
}

impl std::fmt::Debug for LearningRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LearningRate::Constant(rate) => write!(f, "Constant({rate})"),
            LearningRate::Schedule(_) => f.write_str("Schedule(..)"),
        }
    }
}

impl From<f64> for LearningRate {
    fn from(rate: f64) -> LearningRate {
        LearningRate::Constant(rate)
    }
}

impl LearningRate {
    /// The rate at `step`.
    pub fn at(&self, step: u64) -> f64 {
        match self {
            LearningRate::Constant(rate) => *rate,
            LearningRate::Schedule(schedule) => schedule(step),
        }
    }
}

/// What every optimizer keeps: the updates done so far, the rate used by the last one, and
/// per-parameter arrays (`name.m`, …).
#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    /// Updates done.
    pub step: u64,
    /// The learning rate of the last update.
    pub learning_rate: f64,
    /// Per-parameter state by `parameter.slot` name.
    pub arrays: Parameters,
}

/// An optimizer: turns gradients into new parameters.
pub trait Optimizer {
    /// The state (read).
    fn state(&self) -> &OptimizerState;

    /// The state (write).
    fn state_mut(&mut self) -> &mut OptimizerState;

    /// The new value of one parameter `name` for `gradient`, at learning rate `rate`;
    /// `state.step` already counts this update.
    fn apply_single(
        &mut self,
        name: &str,
        gradient: &Array,
        parameter: &Array,
        rate: f64,
    ) -> Result<Array>;

    /// The rate the optimizer uses at `step`.
    fn learning_rate_at(&self, step: u64) -> f64;

    /// New values for the parameters that have gradients: MLX's `apply_gradients`. The
    /// schedule is read at the step before this update, and the step is then counted.
    fn apply_gradients(
        &mut self,
        gradients: &Parameters,
        parameters: &Parameters,
    ) -> Result<Parameters> {
        let step = self.state().step;
        let rate = self.learning_rate_at(step);
        self.state_mut().learning_rate = rate;
        self.state_mut().step = step + 1;
        let mut updated = Parameters::new();
        for (name, gradient) in gradients {
            let parameter = parameters.get(name).ok_or_else(|| Error::Transform {
                transform: "optimizer",
                reason: format!("a gradient for {name:?}, which the parameters lack"),
            })?;
            if gradient.shape() != parameter.shape() {
                return Err(Error::Transform {
                    transform: "optimizer",
                    reason: format!(
                        "the gradient of {name:?} has shape {:?}, the parameter {:?}",
                        gradient.shape(),
                        parameter.shape()
                    ),
                });
            }
            let new = self.apply_single(name, gradient, parameter, rate)?;
            updated.insert(name.clone(), new);
        }
        Ok(updated)
    }

    /// Updates `model` with `gradients` (by parameter name, as [`crate::value_and_grad`]
    /// gives them).
    fn update<M: Module>(&mut self, model: &mut M, gradients: &Parameters) -> Result<()>
    where
        Self: Sized,
    {
        let updated = self.apply_gradients(gradients, &model.parameters())?;
        model.update(&updated)
    }

    /// Writes the state to `path` (safetensors: the per-parameter arrays, `step` as a uint64
    /// and `learning_rate` as a float32 scalar, as MLX's flattened state).
    fn save_state(&self, path: impl AsRef<Path>) -> Result<()>
    where
        Self: Sized,
    {
        let state = self.state();
        let mut arrays = state.arrays.clone();
        arrays.insert("step".into(), Array::scalar(state.step));
        arrays.insert(
            "learning_rate".into(),
            Array::scalar(state.learning_rate as f32),
        );
        save_safetensors(path, &arrays, &HashMap::new())
    }

    /// Restores a state written by [`Optimizer::save_state`].
    fn load_state(&mut self, path: impl AsRef<Path>) -> Result<()>
    where
        Self: Sized,
    {
        let (mut arrays, _) = load_safetensors(path)?;
        let step = arrays
            .remove("step")
            .map(|s| s.astype(DType::U64).item::<u64>())
            .transpose()?
            .unwrap_or(0);
        let learning_rate = arrays
            .remove("learning_rate")
            .map(|r| r.astype(DType::F32).item::<f32>())
            .transpose()?
            .map_or(0.0, f64::from);
        *self.state_mut() = OptimizerState {
            step,
            learning_rate,
            arrays,
        };
        Ok(())
    }
}

/// `state.arrays[name.slot]`, zeros like `like` when absent (MLX's `init_single`).
pub(crate) fn slot(state: &OptimizerState, name: &str, slot: &str, like: &Array) -> Array {
    state
        .arrays
        .get(&format!("{name}.{slot}"))
        .cloned()
        .unwrap_or_else(|| nuvec_core::ops::zeros_like(like))
}
