//! The layers a checkpoint is made of, full precision or MLX-quantized from the same names:
//! a projection `W` (`<name>.weight`, and for quantized layers `<name>.scales` and
//! `<name>.biases`), an embedding table, and a normalisation's weight.

use crate::weights::Weights;
use crate::{Error, Result};
use nuvec_core::distributed::{all_gather, all_sum, Group};
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
    fn take(weights: &mut Weights, name: &str, rows: i32, cols: i32, part: Part) -> Result<Packed> {
        Packed::take_stacked(weights, name, &[], (rows, cols), part)
    }

    /// [`take`](Packed::take) for a stack of matrices: every tensor has the leading
    /// dimensions `lead` (a mixture of experts' `[experts]`). With a `part`, only that part
    /// of each tensor is read: whole groups of the packed input features.
    pub(crate) fn take_stacked(
        weights: &mut Weights,
        name: &str,
        lead: &[i32],
        (rows, cols): (i32, i32),
        part: Part,
    ) -> Result<Packed> {
        let shape = |last: Option<i32>| -> Vec<Option<i32>> {
            lead.iter()
                .map(|&d| Some(d))
                .chain([Some(rows), last])
                .collect()
        };
        let scales_name = format!("{name}.scales");
        let weight_name = format!("{name}.weight");
        let last = |tensor: &str| {
            weights
                .shape(tensor)
                .and_then(|s| s.last().copied())
                .unwrap_or(0)
        };
        let (groups, words) = (last(&scales_name), last(&weight_name));
        let axis = lead.len() + part.axis;
        let (index, parts) = (part.index, part.parts);
        let scales = weights.take_part(&scales_name, &shape(None), axis, index, parts)?;
        let weight = weights.take_part(&weight_name, &shape(None), axis, index, parts)?;
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
        let biases_name = format!("{name}.biases");
        let biases = weights.take_part(&biases_name, &shape(Some(groups)), axis, index, parts)?;
        Ok(Packed {
            weight,
            scales,
            biases,
            quantization,
        })
    }

    /// `<prefix>.weight`, `.scales` and `.biases`.
    pub(crate) fn named(&self, prefix: &str, out: &mut Vec<(String, Array)>) {
        for (part, array) in [
            ("weight", &self.weight),
            ("scales", &self.scales),
            ("biases", &self.biases),
        ] {
            out.push((format!("{prefix}.{part}"), array.clone()));
        }
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
        Matrix::take_part(weights, name, rows, cols, Part::WHOLE)
    }

    /// [`take`](Matrix::take), reading only `part` of the matrix.
    pub fn take_part(
        weights: &mut Weights,
        name: &str,
        rows: i32,
        cols: i32,
        part: Part,
    ) -> Result<Matrix> {
        if weights.contains(&format!("{name}.scales")) {
            return Packed::take(weights, name, rows, cols, part).map(Matrix::Quantized);
        }
        let shape = [Some(rows), Some(cols)];
        let weight_name = format!("{name}.weight");
        weights
            .take_part(&weight_name, &shape, part.axis, part.index, part.parts)
            .map(Matrix::Full)
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

    /// The tensors under mlx-lm's names: `<prefix>.weight`, and `.scales`, `.biases` when
    /// packed.
    pub fn named(&self, prefix: &str, out: &mut Vec<(String, Array)>) {
        match self {
            Matrix::Full(w) => out.push((format!("{prefix}.weight"), w.clone())),
            Matrix::Quantized(p) => p.named(prefix, out),
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

/// Part `index` of `parts` equal parts of a matrix along `axis` (0: rows, 1: columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// 0 splits the rows (output features), 1 the columns (input features).
    pub axis: usize,
    /// Which part.
    pub index: usize,
    /// How many parts.
    pub parts: usize,
}

impl Part {
    /// The whole matrix.
    pub const WHOLE: Part = Part {
        axis: 0,
        index: 0,
        parts: 1,
    };
}

/// How a tensor-parallel rank holds a projection `W [out, in]`, as mlx-lm's `shard_linear`.
#[derive(Debug, Clone, Copy)]
pub enum Sharding {
    /// Every rank holds all of it.
    Whole,
    /// Each rank holds its contiguous share of the output features (and of the bias):
    /// "all-to-sharded".
    Outputs(Group),
    /// Each rank holds its share of the input features; the partial products are summed
    /// over the group with one `all_sum`, then the (whole) bias added: "sharded-to-all".
    Inputs(Group),
}

impl Sharding {
    /// The part of `W` this rank holds.
    pub fn part(&self) -> Part {
        match self {
            Sharding::Whole => Part::WHOLE,
            Sharding::Outputs(group) => Part {
                axis: 0,
                index: group.rank(),
                parts: group.size(),
            },
            Sharding::Inputs(group) => Part {
                axis: 1,
                index: group.rank(),
                parts: group.size(),
            },
        }
    }
}

/// `y = x·Wᵀ + b`, or this rank's share of it (see [`Sharding`]).
#[derive(Debug, Clone)]
pub struct Linear {
    /// `W` `[out, in]` (this rank's part when sharded).
    pub weight: Matrix,
    /// `b` `[out]` (this rank's part when the outputs are sharded).
    pub bias: Option<Array>,
    /// The group the partial products are summed over (sharded inputs).
    pub sum_over: Option<Group>,
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
        Linear::take_sharded(weights, name, input, output, bias, Sharding::Whole)
    }

    /// [`take`](Linear::take) of this rank's share, reading only that share's bytes.
    pub fn take_sharded(
        weights: &mut Weights,
        name: &str,
        input: i32,
        output: i32,
        bias: bool,
        sharding: Sharding,
    ) -> Result<Linear> {
        let part = sharding.part();
        let weight = Matrix::take_part(weights, name, output, input, part)?;
        let bias_name = format!("{name}.bias");
        let bias = match (bias, sharding) {
            (false, _) => None,
            (true, Sharding::Outputs(group)) => Some(weights.take_part(
                &bias_name,
                &[Some(output)],
                0,
                group.rank(),
                group.size(),
            )?),
            (true, _) => Some(weights.take(&bias_name, &[Some(output)])?),
        };
        let sum_over = match sharding {
            Sharding::Inputs(group) => Some(group),
            _ => None,
        };
        Ok(Linear {
            weight,
            bias,
            sum_over,
        })
    }

    /// The layer's tensors under mlx-lm's names (`<prefix>.weight`, …, `<prefix>.bias`).
    pub fn named(&self, prefix: &str, out: &mut Vec<(String, Array)>) {
        self.weight.named(prefix, out);
        if let Some(bias) = &self.bias {
            out.push((format!("{prefix}.bias"), bias.clone()));
        }
    }

    /// Applies the layer to `x` `[..., in]` (this rank's share of `in` when the inputs are
    /// sharded).
    pub fn forward(&self, x: &Array) -> Array {
        let y = self.weight.matmul_transposed(x);
        let y = match &self.sum_over {
            Some(group) => all_sum(&y, Some(group)),
            None => y,
        };
        match &self.bias {
            Some(b) => y + b,
            None => y,
        }
    }
}

/// An embedding table `[vocabulary, dims]`, which can also serve as the output projection
/// (tied embeddings); in a tensor-parallel group, optionally each rank's contiguous share of
/// the vocabulary.
#[derive(Debug, Clone)]
pub struct Embedding {
    /// The table (this rank's rows when split).
    pub table: Matrix,
    /// The group the vocabulary is split over, and this rank's first row.
    pub split: Option<(Group, i32)>,
}

impl Embedding {
    /// Takes `<name>.weight` (packed or not) of shape `[vocabulary, dims]`.
    pub fn take(
        weights: &mut Weights,
        name: &str,
        vocabulary: i32,
        dims: i32,
    ) -> Result<Embedding> {
        Embedding::take_split(weights, name, vocabulary, dims, None)
    }

    /// [`take`](Embedding::take) of this rank's share of the vocabulary when `group` is
    /// given: only those rows are read.
    pub fn take_split(
        weights: &mut Weights,
        name: &str,
        vocabulary: i32,
        dims: i32,
        group: Option<Group>,
    ) -> Result<Embedding> {
        let part = group.map_or(Part::WHOLE, |g| Sharding::Outputs(g).part());
        let table = Matrix::take_part(weights, name, vocabulary, dims, part)?;
        let split = group.map(|g| (g, vocabulary / g.size() as i32 * g.rank() as i32));
        Ok(Embedding { table, split })
    }

    /// The rows of `tokens`. Split, each rank looks up the tokens in its rows (zeros for the
    /// others) and one `all_sum` assembles them.
    pub fn forward(&self, tokens: &Array) -> Array {
        let Some((group, first)) = &self.split else {
            return self.table.rows(tokens);
        };
        let rows = self.rows();
        let local = tokens - *first;
        let mine = ops::logical_and(ops::greater_equal(&local, 0), ops::less(&local, rows));
        let picked = self.table.rows(&ops::where_(&mine, &local, 0));
        let kept = &picked * ops::expand_dims(&mine, &[-1]).astype(picked.dtype());
        all_sum(&kept, Some(group))
    }

    /// `x · tableᵀ`: scores over the vocabulary. Split, each rank scores its rows and one
    /// `all_gather` puts the scores together.
    pub fn as_linear(&self, x: &Array) -> Array {
        let scores = self.table.matmul_transposed(x);
        match &self.split {
            Some((group, _)) => gather_last_axis(&scores, group),
            None => scores,
        }
    }

    /// Rows of the table this rank holds.
    fn rows(&self) -> i32 {
        match &self.table {
            Matrix::Full(w) => w.shape()[0],
            Matrix::Quantized(p) => p.weight.shape()[0],
        }
    }
}

/// Every rank's `x` `[..., n]` side by side along the last axis, `[..., n · ranks]`, in rank
/// order (`all_gather` joins along the first axis).
pub fn gather_last_axis(x: &Array, group: &Group) -> Array {
    let shape = x.shape().to_vec();
    let n = shape[shape.len() - 1];
    let columns = ops::transpose(&ops::reshape(x, &[-1, n]), None);
    let gathered = ops::transpose(&all_gather(&columns, Some(group)), None);
    let mut whole = shape;
    *whole.last_mut().expect("scores have an axis") = n * group.size() as i32;
    ops::reshape(&gathered, &whole)
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
