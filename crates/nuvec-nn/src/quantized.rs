//! Quantized layers, as MLX's `nn.QuantizedLinear` and `nn.QuantizedEmbedding`, and
//! [`quantize`], which swaps a model's layers for them. Their arrays start frozen, as MLX's:
//! training leaves them alone unless the layer is unfrozen.

use crate::layers::{Embedding, Layer, Linear, Sequential};
use crate::module::Module;
use nuvec_core::transforms::ModuleState;
use nuvec_core::{ops, random, Array, DType, Error, Result};
use nuvec_macros::Tree;

/// MLX's default quantization: groups of 64, 4 bits.
pub const DEFAULT_GROUP_SIZE: usize = 64;
/// MLX's default bit width.
pub const DEFAULT_BITS: u32 = 4;

#[track_caller]
fn check_quantizable(layer: &str, input_dims: usize, group_size: usize) -> Result<()> {
    if !input_dims.is_multiple_of(group_size) {
        return Err(Error::invalid(
            "quantize",
            format!("{layer}: {input_dims} input features are not a multiple of the group size {group_size}"),
            std::panic::Location::caller(),
        ));
    }
    Ok(())
}

/// `y = x · dequantize(W)ᵀ + b` with `W` stored as MLX's affine quantization.
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct QuantizedLinear {
    /// Packed words `[output_dims, input_dims·bits/32]`.
    pub weight: Array,
    /// `[output_dims, input_dims/group_size]`.
    pub scales: Array,
    /// `[output_dims, input_dims/group_size]`.
    pub biases: Array,
    /// `[output_dims]`, when the layer has one.
    pub bias: Option<Array>,
    /// Values per group.
    #[tree(skip)]
    pub group_size: usize,
    /// Bits per value.
    #[tree(skip)]
    pub bits: u32,
    /// Training mode and frozen parameters (all, from the start).
    #[tree(state)]
    pub state: ModuleState,
}

impl QuantizedLinear {
    /// A layer drawn as `Linear::with_bias` draws its weight (a zero bias), then quantized.
    pub fn new(
        input_dims: usize,
        output_dims: usize,
        bias: bool,
        group_size: usize,
        bits: u32,
    ) -> Result<QuantizedLinear> {
        check_quantizable("QuantizedLinear", input_dims, group_size)?;
        let scale = (1.0 / input_dims as f64).sqrt();
        let shape = [output_dims as i32, input_dims as i32];
        let weight = random::uniform(-scale, scale, &shape, DType::F32, None);
        let bias = bias.then(|| ops::zeros(&[output_dims as i32], DType::F32));
        QuantizedLinear::quantize(&weight, bias, group_size, bits)
    }

    /// `linear`'s weight quantized, its bias kept.
    pub fn from_linear(linear: &Linear, group_size: usize, bits: u32) -> Result<QuantizedLinear> {
        check_quantizable("Linear", linear.input_dims(), group_size)?;
        QuantizedLinear::quantize(&linear.weight, linear.bias.clone(), group_size, bits)
    }

    fn quantize(
        weight: &Array,
        bias: Option<Array>,
        group_size: usize,
        bits: u32,
    ) -> Result<QuantizedLinear> {
        let (weight, scales, biases) = ops::quantize(weight, group_size, bits);
        weight.check()?;
        let mut layer = QuantizedLinear {
            weight,
            scales,
            biases,
            bias,
            group_size,
            bits,
            state: ModuleState::default(),
        };
        layer.freeze();
        Ok(layer)
    }

    /// Number of input features.
    pub fn input_dims(&self) -> usize {
        self.weight
            .shape()
            .last()
            .map_or(0, |&w| w as usize * 32 / self.bits as usize)
    }

    /// Number of output features.
    pub fn output_dims(&self) -> usize {
        self.weight.shape().first().map_or(0, |&d| d as usize)
    }

    /// `x · Wᵀ + b`.
    #[track_caller]
    pub fn forward(&self, x: &Array) -> Array {
        let y = ops::quantized_matmul(
            x,
            &self.weight,
            &self.scales,
            &self.biases,
            true,
            self.group_size,
            self.bits,
        );
        match &self.bias {
            Some(bias) => y + bias,
            None => y,
        }
    }
}

/// An embedding table stored quantized; rows are dequantized when looked up.
#[derive(Tree, Clone, Debug)]
#[tree(crate = "nuvec_core")]
pub struct QuantizedEmbedding {
    /// Packed words `[num_embeddings, dims·bits/32]`.
    pub weight: Array,
    /// `[num_embeddings, dims/group_size]`.
    pub scales: Array,
    /// `[num_embeddings, dims/group_size]`.
    pub biases: Array,
    /// Values per group.
    #[tree(skip)]
    pub group_size: usize,
    /// Bits per value.
    #[tree(skip)]
    pub bits: u32,
    /// Training mode and frozen parameters (all, from the start).
    #[tree(state)]
    pub state: ModuleState,
}

impl QuantizedEmbedding {
    /// `embedding`'s table quantized.
    pub fn from_embedding(
        embedding: &Embedding,
        group_size: usize,
        bits: u32,
    ) -> Result<QuantizedEmbedding> {
        let dims = embedding.weight.shape().get(1).copied().unwrap_or(0) as usize;
        check_quantizable("Embedding", dims, group_size)?;
        let (weight, scales, biases) = ops::quantize(&embedding.weight, group_size, bits);
        weight.check()?;
        let mut layer = QuantizedEmbedding {
            weight,
            scales,
            biases,
            group_size,
            bits,
            state: ModuleState::default(),
        };
        layer.freeze();
        Ok(layer)
    }

    /// The rows of `indices`, dequantized.
    #[track_caller]
    pub fn forward(&self, indices: &Array) -> Array {
        let rows = |a: &Array| ops::take(a, indices, Some(0));
        ops::dequantize(
            &rows(&self.weight),
            &rows(&self.scales),
            &rows(&self.biases),
            self.group_size,
            self.bits,
        )
    }

    /// `x · tableᵀ` (tied output projection).
    #[track_caller]
    pub fn as_linear(&self, x: &Array) -> Array {
        ops::quantized_matmul(
            x,
            &self.weight,
            &self.scales,
            &self.biases,
            true,
            self.group_size,
            self.bits,
        )
    }
}

/// Picks layers by path and kind.
pub type LayerPredicate = dyn Fn(&str, &Layer) -> bool;

/// `model` with its `Linear` and `Embedding` layers quantized (MLX's `nn.quantize`), nested
/// `Sequential`s included. `predicate(path, layer)` picks the layers (all when `None`);
/// a picked layer whose input features do not divide into groups is an error naming it.
pub fn quantize(
    model: &Sequential,
    group_size: usize,
    bits: u32,
    predicate: Option<&LayerPredicate>,
) -> Result<Sequential> {
    quantize_at(model, "layers", group_size, bits, predicate)
}

fn quantize_at(
    model: &Sequential,
    prefix: &str,
    group_size: usize,
    bits: u32,
    predicate: Option<&LayerPredicate>,
) -> Result<Sequential> {
    let mut layers = Vec::with_capacity(model.layers.len());
    for (i, layer) in model.layers.iter().enumerate() {
        let path = format!("{prefix}.{i}");
        let picked = predicate.is_none_or(|p| p(&path, layer));
        let named = |e: Error| {
            Error::invalid(
                "quantize",
                format!("layer {path}: {e}"),
                std::panic::Location::caller(),
            )
        };
        layers.push(match layer {
            Layer::Linear(l) if picked => Layer::QuantizedLinear(
                QuantizedLinear::from_linear(l, group_size, bits).map_err(named)?,
            ),
            Layer::Embedding(e) if picked => Layer::QuantizedEmbedding(
                QuantizedEmbedding::from_embedding(e, group_size, bits).map_err(named)?,
            ),
            Layer::Sequential(inner) => Layer::Sequential(quantize_at(
                inner,
                &format!("{path}.layers"),
                group_size,
                bits,
                predicate,
            )?),
            other => other.clone(),
        });
    }
    Ok(Sequential {
        layers,
        state: model.state.clone(),
    })
}
