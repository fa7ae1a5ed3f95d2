//! Learning-rate schedules with MLX's formulas (`mlx.optimizers.schedulers`). Each returns
//! a [`LearningRate`] for an optimizer; `LearningRate::at(step)` evaluates it.

use super::LearningRate;
use std::sync::Arc;

fn schedule(f: impl Fn(u64) -> f64 + Send + Sync + 'static) -> LearningRate {
    LearningRate::Schedule(Arc::new(f))
}

/// `init · decay_rate^step`.
pub fn exponential_decay(init: f64, decay_rate: f64) -> LearningRate {
    schedule(move |step| init * decay_rate.powf(step as f64))
}

/// `init · decay_rate^(step / step_size)` (integer division).
pub fn step_decay(init: f64, decay_rate: f64, step_size: u64) -> LearningRate {
    schedule(move |step| init * decay_rate.powf((step / step_size.max(1)) as f64))
}

/// Cosine from `init` down to `end` over `decay_steps`, then `end`.
pub fn cosine_decay(init: f64, decay_steps: u64, end: f64) -> LearningRate {
    schedule(move |step| {
        let s = step.min(decay_steps) as f64;
        let decay = 0.5 * (1.0 + (std::f64::consts::PI / decay_steps as f64 * s).cos());
        end + decay * (init - end)
    })
}

/// Linear from `init` to `end` over `steps`, then `end`.
pub fn linear_schedule(init: f64, end: f64, steps: u64) -> LearningRate {
    schedule(move |step| {
        let s = step.min(steps) as f64;
        s * ((end - init) / steps as f64) + init
    })
}

/// `schedules[0]` until `boundaries[0]`, then `schedules[1]` counted from that boundary, and
/// so on (MLX's `join_schedules`).
pub fn join_schedules(schedules: Vec<LearningRate>, boundaries: Vec<u64>) -> LearningRate {
    schedule(move |step| {
        let index = boundaries.iter().take_while(|&&b| step >= b).count();
        let start = if index == 0 { 0 } else { boundaries[index - 1] };
        schedules
            .get(index)
            .or_else(|| schedules.last())
            .map_or(0.0, |s| s.at(step - start))
    })
}
