//! Clipping gradients by their global norm, as MLX's `optim.clip_grad_norm`.

use crate::module::Parameters;
use nuvec_core::{ops, Array};

/// The gradients scaled by `min(max_norm / (‖g‖ + 1e-6), 1)` where `‖g‖` is the norm of all
/// of them together, and that norm.
///
/// ```
/// use nuvec::array;
/// use nuvec_nn::optim::clip_grad_norm;
/// use std::collections::BTreeMap;
/// let grads = BTreeMap::from([("w".to_string(), array![3.0, 4.0])]);
/// let (clipped, norm) = clip_grad_norm(&grads, 1.0);
/// assert_eq!(norm.item::<f32>()?, 5.0);
/// assert!((clipped["w"].to_vec::<f32>()?[0] - 0.6).abs() < 1e-6);
/// # Ok::<(), nuvec::Error>(())
/// ```
pub fn clip_grad_norm(gradients: &Parameters, max_norm: f64) -> (Parameters, Array) {
    let squared = gradients.values().fold(Array::scalar(0.0f32), |total, g| {
        total + ops::sum(&ops::square(g), None, false)
    });
    let norm = ops::sqrt(&squared);
    let normalizer = ops::minimum(&(max_norm / (&norm + 1e-6)), 1.0);
    let clipped = gradients
        .iter()
        .map(|(name, g)| (name.clone(), g * &normalizer))
        .collect();
    (clipped, norm)
}
