//! A mixture-of-experts feed-forward, as mlx-lm's `SparseMoeBlock` with a `SwitchGLU`: a
//! router scores the experts per token (softmax in float32), each token goes to its top
//! `k`, whose SwiGLU MLPs' outputs are summed with the (optionally renormalised) scores.
//!
//! The experts' projections are stacks (`[experts, out, in]`) multiplied through
//! `gather_qmm` / `gather_mm`, so routing stays in the graph (no round trip to the host).
//! From 64 (token, expert) pairs on, the pairs are sorted by expert first, as mlx-lm sorts
//! them: the gathered product then reads each expert's weights once for all its tokens.

use super::transformer::{swiglu, MoeSpec};
use crate::layers::{Linear, Packed, Part, Sharding};
use crate::weights::Weights;
use crate::{Error, Result};
use nuvec_core::distributed::{all_sum, Group};
use nuvec_core::{ops, Array, DType};

/// From this many (token, expert) pairs on, they are sorted by expert (mlx-lm's threshold).
const SORT_FROM_PAIRS: i32 = 64;

/// One projection of every expert.
#[derive(Debug, Clone)]
enum Stack {
    /// Floats, transposed once at load: `[experts, in, out]`, `gather_mm`'s layout.
    Full(Array),
    /// MLX-quantized `[experts, out, in]`, multiplied transposed by `gather_qmm`.
    Quantized(Packed),
}

impl Stack {
    /// Takes `<prefix>.switch_mlp.<proj>.*` (`[experts, out, in]`), or this rank's `part` of
    /// every expert's matrix, stacking checkpoints' per-expert `<prefix>.experts.<e>.<proj>.*`
    /// under that name first, as mlx-lm's `sanitize` does.
    fn take(
        weights: &mut Weights,
        prefix: &str,
        proj: &str,
        (out, input): (i32, i32),
        (experts, part): (usize, Part),
    ) -> Result<Stack> {
        let name = format!("{prefix}.switch_mlp.{proj}");
        let mut shape = (out, input);
        let mut part = part;
        if weights.contains(&format!("{prefix}.experts.0.{proj}.weight")) {
            for kind in ["weight", "scales", "biases"] {
                let one = |e: usize| format!("{prefix}.experts.{e}.{proj}.{kind}");
                if !weights.contains(&one(0)) {
                    continue;
                }
                let mut each = Vec::with_capacity(experts);
                for e in 0..experts {
                    let (axis, index, parts) = (part.axis, part.index, part.parts);
                    each.push(weights.take_part(&one(e), &[None, None], axis, index, parts)?);
                }
                weights.insert(format!("{name}.{kind}"), ops::stack(&each, 0));
            }
            // Stacked from the parts: the whole of what is left is this rank's.
            let parts = part.parts as i32;
            shape = match part.axis {
                0 => (out / parts, input),
                _ => (out, input / parts),
            };
            part = Part::WHOLE;
        }
        let lead = [experts as i32];
        if weights.contains(&format!("{name}.scales")) {
            let packed = Packed::take_stacked(weights, &name, &lead, shape, part)?;
            return Ok(Stack::Quantized(packed));
        }
        let dims = [Some(lead[0]), Some(shape.0), Some(shape.1)];
        let axis = 1 + part.axis;
        let w = weights.take_part(
            &format!("{name}.weight"),
            &dims,
            axis,
            part.index,
            part.parts,
        )?;
        // Transposed once here rather than at every step.
        let transposed = ops::swapaxes(&w, -1, -2);
        transposed
            .eval()
            .map_err(|e| Error::load("<weights>", format!("{name}: {e}")))?;
        Ok(Stack::Full(transposed))
    }

    /// `<prefix>.weight` (`[experts, out, in]`, as stored) and, when packed, `.scales` and
    /// `.biases`.
    fn named(&self, prefix: &str, out: &mut Vec<(String, Array)>) {
        match self {
            Stack::Full(w) => out.push((format!("{prefix}.weight"), ops::swapaxes(w, -1, -2))),
            Stack::Quantized(p) => p.named(prefix, out),
        }
    }

    /// `x [..., M, in]` times the experts `indices` picks: `[..., M, out]`.
    fn forward(&self, x: &Array, indices: &Array) -> Array {
        match self {
            Stack::Full(w) => ops::gather_mm(x, w, None, Some(indices)),
            Stack::Quantized(p) => {
                let q = p.quantization;
                ops::gather_qmm(
                    x,
                    &p.weight,
                    &p.scales,
                    &p.biases,
                    None,
                    Some(indices),
                    true,
                    q.group_size,
                    q.bits,
                )
            }
        }
    }
}

/// The experts of one layer and their router.
#[derive(Debug, Clone)]
pub(crate) struct Experts {
    router: Linear,
    gate: Stack,
    up: Stack,
    down: Stack,
    spec: MoeSpec,
    /// Tensor parallel: each rank holds its share of every expert's hidden features, and
    /// the layer's output is summed over this group.
    sum_over: Option<Group>,
}

impl Experts {
    /// Takes the router and the experts; with a `group`, this rank's share of each expert's
    /// hidden features (mlx-lm's `shard_inplace`: gate and up by rows, down by columns).
    pub(crate) fn load(
        weights: &mut Weights,
        prefix: &str,
        dims: i32,
        spec: MoeSpec,
        group: Option<Group>,
    ) -> Result<Experts> {
        if spec.per_token == 0 || spec.per_token > spec.experts {
            return Err(Error::load(
                "<config>",
                format!(
                    "{prefix}: {} experts per token of {} experts",
                    spec.per_token, spec.experts
                ),
            ));
        }
        let router = Linear::take(
            weights,
            &format!("{prefix}.gate"),
            dims,
            spec.experts as i32,
            false,
        )?;
        let hidden = spec.intermediate as i32;
        let (outputs, inputs) = match group {
            Some(group) => (
                Sharding::Outputs(group).part(),
                Sharding::Inputs(group).part(),
            ),
            None => (Part::WHOLE, Part::WHOLE),
        };
        let mut stack = |proj: &str, shape: (i32, i32), part: Part| {
            Stack::take(weights, prefix, proj, shape, (spec.experts, part))
        };
        Ok(Experts {
            router,
            gate: stack("gate_proj", (hidden, dims), outputs)?,
            up: stack("up_proj", (hidden, dims), outputs)?,
            down: stack("down_proj", (dims, hidden), inputs)?,
            spec,
            sum_over: group,
        })
    }

    /// The router's and the experts' tensors under mlx-lm's names (`<prefix>.gate.*`,
    /// `<prefix>.switch_mlp.<proj>.*`).
    pub(crate) fn named(&self, prefix: &str, out: &mut Vec<(String, Array)>) {
        self.router.named(&format!("{prefix}.gate"), out);
        for (proj, stack) in [
            ("gate_proj", &self.gate),
            ("up_proj", &self.up),
            ("down_proj", &self.down),
        ] {
            stack.named(&format!("{prefix}.switch_mlp.{proj}"), out);
        }
    }

    /// `x` `[..., D]` through each token's experts.
    pub(crate) fn forward(&self, x: &Array) -> Result<Array> {
        let shape = x.shape().to_vec();
        let dims = shape[shape.len() - 1];
        let flat = ops::reshape(x, &[-1, dims]);
        let tokens = flat.shape()[0];
        let (count, k) = (self.spec.experts as i32, self.spec.per_token as i32);
        let logits = self.router.forward(&flat);
        let gates = ops::softmax(&logits.astype(DType::F32), -1).astype(logits.dtype());
        let order = ops::argsort(&gates, Some(-1));
        let chosen = ops::slice(&order, &[0, count - k], &[tokens, count], &[1, 1]);
        let mut scores = ops::take_along_axis(&gates, &chosen, Some(-1));
        if self.spec.normalize {
            scores = &scores / ops::sum(&scores, -1, true);
        }
        let outputs = self.switch_glu(&flat, &chosen);
        let mixed = ops::sum(&(outputs * ops::expand_dims(&scores, &[-1])), -2, false);
        let mixed = match &self.sum_over {
            Some(group) => all_sum(&mixed, Some(group)),
            None => mixed,
        };
        Ok(ops::reshape(&mixed, &shape))
    }

    /// mlx-lm's `SwitchGLU`: tokens `[T, D]` through the experts `chosen` (`[T, k]`) picks,
    /// `[T, k, D]`.
    fn switch_glu(&self, tokens: &Array, chosen: &Array) -> Array {
        let (t, dims) = (tokens.shape()[0], tokens.shape()[1]);
        let k = chosen.shape()[1];
        let mlp = |x: &Array, indices: &Array| {
            let hidden = swiglu(&self.gate.forward(x, indices), &self.up.forward(x, indices));
            self.down.forward(&hidden, indices)
        };
        if t * k < SORT_FROM_PAIRS {
            // x [T, 1, 1, D] against indices [T, k]: [T, k, 1, D].
            let x = ops::reshape(tokens, &[t, 1, 1, dims]);
            return ops::reshape(&mlp(&x, chosen), &[t, k, dims]);
        }
        // One row per pair, sorted by expert: [T·k, 1, D]; then back in pair order.
        let pairs = ops::reshape(chosen, &[-1]);
        let by_expert = ops::argsort(&pairs, Some(0));
        let back = ops::argsort(&by_expert, Some(0));
        let rows = ops::floor_divide(&by_expert, Array::scalar(k).astype(by_expert.dtype()));
        let x = ops::expand_dims(&ops::take(tokens, &rows, Some(0)), &[1]);
        let sorted = ops::take(&pairs, &by_expert, Some(0));
        let y = ops::take(&mlp(&x, &sorted), &back, Some(0));
        ops::reshape(&y, &[t, k, dims])
    }
}
