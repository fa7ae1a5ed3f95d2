//! Differentiating a loss with respect to a module's trainable parameters, as MLX's
//! `nn.value_and_grad`.

use crate::module::{Module, Parameters};
use nuvec_core::transforms::tree;
use nuvec_core::{Array, Result};

/// `loss(model)` and its gradient with respect to the model's trainable parameters (frozen
/// ones are constants), by name.
///
/// ```
/// use nuvec::{array, ops, random};
/// use nuvec_nn::{value_and_grad, Linear};
/// random::seed(0);
/// let model = Linear::new(2, 1);
/// let x = array![[1.0, 2.0]];
/// let (loss, grads) = value_and_grad(|m: &Linear| ops::sum(&m.forward(&x), None, false))(&model)?;
/// assert_eq!(grads["weight"].to_vec::<f32>()?, [1.0, 2.0]);
/// assert_eq!(grads["bias"].to_vec::<f32>()?, [1.0]);
/// # Ok::<(), nuvec::Error>(())
/// ```
pub fn value_and_grad<M: Module + Clone>(
    loss: impl Fn(&M) -> Array,
) -> impl Fn(&M) -> Result<(Array, Parameters)> {
    move |model: &M| {
        let trainable = model.trainable_parameters();
        tree::value_and_grad(|params: &Parameters| {
            let mut traced = model.clone();
            match traced.update(params) {
                Ok(()) => loss(&traced),
                Err(error) => Array::failed(error),
            }
        })(&trainable)
    }
}
