//! `Sequential`: layers applied one after the other, as MLX's `nn.Sequential`, and
//! [`Layer`], the layers it can hold.

use super::{Dropout, Embedding, LayerNorm, Linear, RmsNorm, Rope};
use crate::activations::Activation;
use crate::quantized::{QuantizedEmbedding, QuantizedLinear};
use nuvec_core::transforms::{ModuleState, Tree};
use nuvec_core::{Array, Result};
use nuvec_macros::Tree;

/// One layer of a [`Sequential`].
#[derive(Clone, Debug)]
pub enum Layer {
    /// [`Linear`].
    Linear(Linear),
    /// [`QuantizedLinear`].
    QuantizedLinear(QuantizedLinear),
    /// [`Embedding`].
    Embedding(Embedding),
    /// [`QuantizedEmbedding`].
    QuantizedEmbedding(QuantizedEmbedding),
    /// [`RmsNorm`].
    RmsNorm(RmsNorm),
    /// [`LayerNorm`].
    LayerNorm(LayerNorm),
    /// [`Rope`].
    Rope(Rope),
    /// [`Dropout`].
    Dropout(Dropout),
    /// An activation without parameters.
    Activation(Activation),
    /// A nested [`Sequential`].
    Sequential(Sequential),
}

/// Applies `$body` to the layer inside `$layer` (bound as `$inner`), whatever its kind;
/// activations go to `$activation`.
macro_rules! each_layer {
    ($layer:expr, $inner:ident => $body:expr, $act:ident => $activation:expr) => {
        match $layer {
            Layer::Linear($inner) => $body,
            Layer::QuantizedLinear($inner) => $body,
            Layer::Embedding($inner) => $body,
            Layer::QuantizedEmbedding($inner) => $body,
            Layer::RmsNorm($inner) => $body,
            Layer::LayerNorm($inner) => $body,
            Layer::Rope($inner) => $body,
            Layer::Dropout($inner) => $body,
            Layer::Sequential($inner) => $body,
            Layer::Activation($act) => $activation,
        }
    };
}

impl Layer {
    /// The layer applied to `x`.
    pub fn forward(&self, x: &Array) -> Array {
        each_layer!(self, layer => layer.forward(x), activation => activation.forward(x))
    }
}

impl Tree for Layer {
    fn flatten_into(&self, leaves: &mut Vec<Array>) {
        each_layer!(self, layer => layer.flatten_into(leaves), _a => ())
    }

    fn rebuild(&self, leaves: &mut dyn Iterator<Item = Array>) -> Result<Self> {
        Ok(match self {
            Layer::Linear(l) => Layer::Linear(l.rebuild(leaves)?),
            Layer::QuantizedLinear(l) => Layer::QuantizedLinear(l.rebuild(leaves)?),
            Layer::Embedding(l) => Layer::Embedding(l.rebuild(leaves)?),
            Layer::QuantizedEmbedding(l) => Layer::QuantizedEmbedding(l.rebuild(leaves)?),
            Layer::RmsNorm(l) => Layer::RmsNorm(l.rebuild(leaves)?),
            Layer::LayerNorm(l) => Layer::LayerNorm(l.rebuild(leaves)?),
            Layer::Rope(l) => Layer::Rope(l.rebuild(leaves)?),
            Layer::Dropout(l) => Layer::Dropout(l.rebuild(leaves)?),
            Layer::Sequential(l) => Layer::Sequential(l.rebuild(leaves)?),
            Layer::Activation(a) => Layer::Activation(*a),
        })
    }

    fn structure(&self, key: &mut String) {
        each_layer!(self, layer => layer.structure(key), activation => {
            key.push_str(&format!("{activation:?}"))
        })
    }

    fn flatten_named(&self, prefix: &str, leaves: &mut Vec<(String, Array)>) {
        each_layer!(self, layer => layer.flatten_named(prefix, leaves), _a => ())
    }

    fn visit_states(&mut self, prefix: &str, visit: &mut dyn FnMut(&str, &mut ModuleState)) {
        each_layer!(self, layer => layer.visit_states(prefix, visit), _a => ())
    }
}

/// Layers applied in order; parameters are named `layers.0.weight`, … as MLX names them.
///
/// ```
/// use nuvec::{array, random};
/// use nuvec_nn::{Activation, Layer, Linear, Sequential};
/// random::seed(0);
/// let mlp = Sequential::new(vec![
///     Layer::Linear(Linear::new(2, 8)),
///     Layer::Activation(Activation::Relu),
///     Layer::Linear(Linear::new(8, 1)),
/// ]);
/// assert_eq!(mlp.forward(&array![[1.0, 2.0]]).shape(), [1, 1]);
/// ```
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct Sequential {
    /// The layers, first applied first.
    pub layers: Vec<Layer>,
    /// Training mode and frozen parameters.
    #[tree(state)]
    pub state: ModuleState,
}

impl Sequential {
    /// The layers in order.
    pub fn new(layers: Vec<Layer>) -> Sequential {
        Sequential {
            layers,
            state: ModuleState::default(),
        }
    }

    /// `x` through every layer.
    pub fn forward(&self, x: &Array) -> Array {
        self.layers
            .iter()
            .fold(x.clone(), |h, layer| layer.forward(&h))
    }
}
