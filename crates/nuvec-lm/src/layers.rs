//! The layers a checkpoint is made of, full precision or MLX-quantized from the same names:
//! a projection `W` (`<name>.weight`, and for quantized layers `<name>.scales` and
//! `<name>.biases`), an embedding table, and a normalisation's weight.

use crate::weights::Weights;
use crate::{Error, Result};
use nuvec_core::{ops, Array, DType};

/// MLX's quantization of one layer: `bits` per value, groups of `group_size` along the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantization {
    /// Values per scale and bias.
    pub group_size: usize,
    /// Bits per value.
    pub bits: u32,
}

/// The packed form of a matrix `[rows, cols]`: words, scales and biases.
#[derive(Debug, Clone)]
pub struct Packed {
    /// `uint32` words `[rows, cols·bits/32]`.
    pub weight: Array,
    /// `[rows, cols/group_size]`.
    pub scales: Array,
    /// `[rows, cols/group_size]`.
    pub biases: Array,
    /// The layer's quantization.
    pub quantization: Quantization,
}

impl Packed {
    /// Takes `<name>.{weight,scales,biases}` of a quantized `[rows, cols]` matrix, working
    /// out its group size and bits from the shapes (as mlx-lm does).
    fn take(weights: &mut Weights, name: &str, rows: i32, cols: i32) -> Result<Packed> {
        Packed::take_stacked(weights, name, &[], rows, cols)
    }

    /// [`take`](Packed::take) for a stack of matrices: every tensor has the leading
    /// dimensions `lead` (a mixture of experts' `[experts]`).
    pub(crate) fn take_stacked(
        weights: &mut Weights,
        name: &str,
        lead: &[i32],
        rows: i32,
        cols: i32,
    ) -> Result<Packed> {
        let shape = |last: Option<i32>| -> Vec<Option<i32>> {
            lead.iter()
                .map(|&d| Some(d))
                .chain([Some(rows), last])
                .collect()
        };
        let scales = weights.take(&format!("{name}.scales"), &shape(None))?;
        let groups = scales.shape()[lead.len() + 1];
        let weight = weights.take(&format!("{name}.weight"), &shape(None))?;
        let words = weight.shape()[lead.len() + 1];
        let bad = |reason: String| Error::load("<weights>", format!("{name}: {reason}"));
        if groups <= 0 || cols % groups != 0 || (words * 32) % cols != 0 {
            return Err(bad(format!(
                "quantized shapes weight {:?} and scales {:?} do not fit {cols} input features",
                weight.shape(),
                scales.shape()
            )));
        }
        let quantization = Quantization {
            group_size: (cols / groups) as usize,
            bits: (words * 32 / cols) as u32,
        };
        if ![32, 64, 128].contains(&quantization.group_size)
            || ![2, 3, 4, 5, 6, 8].contains(&quantization.bits)
        {
            return Err(bad(format!(
                "group size {} and {} bits are not MLX's (32, 64 or 128; 2, 3, 4, 5, 6 or 8)",
                quantization.group_size, quantization.bits
            )));
        }
        if weight.dtype() != DType::U32 {
            return Err(bad(format!(
                "packed weight has dtype {}, expected uint32",
                weight.dtype()
            )));
        }
        let biases = weights.take(&format!("{name}.biases"), &shape(Some(groups)))?;
        Ok(Packed {
            weight,
            scales,
            biases,
            quantization,
        })
    }

    /// `x · Wᵀ` straight from the packed words.
    fn matmul_transposed(&self, x: &Array) -> Array {
        let q = self.quantization;
        ops::quantized_matmul(
            x,
            &self.weight,
            &self.scales,
            &self.biases,
            true,
            q.group_size,
            q.bits,
        )
    }

    /// Rows `indices` of the matrix, dequantized.
    fn rows(&self, indices: &Array) -> Array {
        let q = self.quantization;
        let pick = |a: &Array| ops::take(a, indices, Some(0));
        ops::dequantize(
            &pick(&self.weight),
            &pick(&self.scales),
            &pick(&self.biases),
            q.group_size,
            q.bits,
        )
    }
}

/// A matrix `W` `[out, in]`, as stored or packed.
#[derive(Debug, Clone)]
pub enum Matrix {
    /// Floats.
    Full(Array),
    /// MLX-quantized.
    Quantized(Packed),
}

impl Matrix {
    /// Takes `<name>.weight` (and, when `<name>.scales` exists, the packed form) of shape
    /// `[rows, cols]`.
    pub fn take(weights: &mut Weights, name: &str, rows: i32, cols: i32) -> Result<Matrix> {
        if weights.contains(&format!("{name}.scales")) {
            Packed::take(weights, name, rows, cols).map(Matrix::Quantized)
        } else {
            let weight = weights.take(&format!("{name}.weight"), &[Some(rows), Some(cols)])?;
            if !weight.dtype().is_float() {
                return Err(Error::load(
                    "<weights>",
                    format!(
                        "{name}.weight has dtype {}, expected floats",
                        weight.dtype()
                    ),
                ));
            }
            Ok(Matrix::Full(weight))
        }
    }

    /// `x · Wᵀ`.
    pub fn matmul_transposed(&self, x: &Array) -> Array {
        match self {
            Matrix::Full(w) => ops::linear(x, w),
            Matrix::Quantized(p) => p.matmul_transposed(x),
        }
    }

    /// Rows `indices` of `W` as floats (an embedding lookup).
    pub fn rows(&self, indices: &Array) -> Array {
        match self {
            Matrix::Full(w) => ops::take(w, indices, Some(0)),
            Matrix::Quantized(p) => p.rows(indices),
        }
    }

    /// The quantization, if packed.
    pub fn quantization(&self) -> Option<Quantization> {
        match self {
            Matrix::Full(_) => None,
            Matrix::Quantized(p) => Some(p.quantization),
        }
    }
}

/// `y = x·Wᵀ + b`.
#[derive(Debug, Clone)]
pub struct Linear {
    /// `W` `[out, in]`.
    pub weight: Matrix,
    /// `b` `[out]`.
    pub bias: Option<Array>,
}

impl Linear {
    /// Takes `<name>.weight` (packed or not) and, with `bias`, `<name>.bias`.
    pub fn take(
        weights: &mut Weights,
        name: &str,
        input: i32,
        output: i32,
        bias: bool,
    ) -> Result<Linear> {
        let weight = Matrix::take(weights, name, output, input)?;
        let bias = if bias {
            Some(weights.take(&format!("{name}.bias"), &[Some(output)])?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// Applies the layer to `x` `[..., in]`.
    pub fn forward(&self, x: &Array) -> Array {
        let y = self.weight.matmul_transposed(x);
        match &self.bias {
            Some(b) => y + b,
            None => y,
        }
    }
}

/// An embedding table `[vocabulary, dims]`, which can also serve as the output projection
/// (tied embeddings).
#[derive(Debug, Clone)]
pub struct Embedding {
    /// The table.
    pub table: Matrix,
}

impl Embedding {
    /// Takes `<name>.weight` (packed or not) of shape `[vocabulary, dims]`.
    pub fn take(
        weights: &mut Weights,
        name: &str,
        vocabulary: i32,
        dims: i32,
    ) -> Result<Embedding> {
        Ok(Embedding {
            table: Matrix::take(weights, name, vocabulary, dims)?,
        })
    }

    /// The rows of `tokens`.
    pub fn forward(&self, tokens: &Array) -> Array {
        self.table.rows(tokens)
    }

    /// `x · tableᵀ`: scores over the vocabulary.
    pub fn as_linear(&self, x: &Array) -> Array {
        self.table.matmul_transposed(x)
    }
}

/// RMS normalisation with a learned weight, as `nn.RMSNorm` (`mx.fast.rms_norm`).
#[derive(Debug, Clone)]
pub struct RmsNorm {
    /// `[dims]`.
    pub weight: Array,
    /// Added to the mean square.
    pub eps: f32,
}

impl RmsNorm {
    /// Takes `<name>.weight` of shape `[dims]`.
    pub fn take(weights: &mut Weights, name: &str, dims: i32, eps: f32) -> Result<RmsNorm> {
        Ok(RmsNorm {
            weight: weights.take(&format!("{name}.weight"), &[Some(dims)])?,
            eps,
        })
    }

    /// Normalises `x` over its last axis.
    pub fn forward(&self, x: &Array) -> Array {
        ops::fast::rms_norm(x, Some(&self.weight), self.eps)
    }
}
