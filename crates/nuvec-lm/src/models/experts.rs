//! A mixture-of-experts feed-forward, as mlx-lm's `SparseMoeBlock` with a `SwitchGLU`: a
//! router scores the experts per token (softmax in float32), each token goes to its top
//! `k`, whose SwiGLU MLPs' outputs are summed with the (optionally renormalised) scores.
//!
//! Tokens are grouped by expert on the host, so each expert runs once per step over the
//! tokens routed to it (no gathered copy of an expert's weights per token).

use super::transformer::{swiglu, MoeSpec};
use crate::layers::Linear;
use crate::weights::Weights;
use crate::{Error, Result};
use nuvec_core::{ops, Array, DType};

#[derive(Debug, Clone)]
struct Expert {
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// The experts of one layer and their router.
#[derive(Debug, Clone)]
pub(crate) struct Experts {
    router: Linear,
    experts: Vec<Expert>,
    spec: MoeSpec,
}

/// Splits mlx-lm's stacked `switch_mlp.<proj>.{weight,scales,biases}` `[E, …]` into
/// per-expert tensors `experts.<e>.<proj>.*`, the names checkpoints store them under.
fn unstack(weights: &mut Weights, prefix: &str, experts: usize) -> Result<()> {
    for proj in ["gate_proj", "up_proj", "down_proj"] {
        for part in ["weight", "scales", "biases"] {
            let name = format!("{prefix}.switch_mlp.{proj}.{part}");
            let Some(stacked) =
                weights.take_optional(&name, &[Some(experts as i32), None, None])?
            else {
                continue;
            };
            for e in 0..experts {
                let one = ops::take(&stacked, &Array::scalar(e as i32), Some(0));
                weights.insert(format!("{prefix}.experts.{e}.{proj}.{part}"), one);
            }
        }
    }
    Ok(())
}

impl Experts {
    pub(crate) fn load(
        weights: &mut Weights,
        prefix: &str,
        dims: i32,
        spec: MoeSpec,
    ) -> Result<Experts> {
        unstack(weights, prefix, spec.experts)?;
        let router = Linear::take(
            weights,
            &format!("{prefix}.gate"),
            dims,
            spec.experts as i32,
            false,
        )?;
        let hidden = spec.intermediate as i32;
        let experts = (0..spec.experts)
            .map(|e| {
                let name = |proj: &str| format!("{prefix}.experts.{e}.{proj}");
                Ok(Expert {
                    gate: Linear::take(weights, &name("gate_proj"), dims, hidden, false)?,
                    up: Linear::take(weights, &name("up_proj"), dims, hidden, false)?,
                    down: Linear::take(weights, &name("down_proj"), hidden, dims, false)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if spec.per_token == 0 || spec.per_token > spec.experts {
            return Err(Error::load(
                "<config>",
                format!(
                    "{prefix}: {} experts per token of {} experts",
                    spec.per_token, spec.experts
                ),
            ));
        }
        Ok(Experts {
            router,
            experts,
            spec,
        })
    }

    /// `x` `[..., D]` through each token's experts.
    pub(crate) fn forward(&self, x: &Array) -> Result<Array> {
        let shape = x.shape().to_vec();
        let dims = shape[shape.len() - 1];
        let flat = ops::reshape(x, &[-1, dims]);
        let tokens = flat.shape()[0] as usize;
        let (count, k) = (self.spec.experts as i32, self.spec.per_token as i32);
        let logits = self.router.forward(&flat);
        let gates = ops::softmax(&logits.astype(DType::F32), -1).astype(logits.dtype());
        let order = ops::argsort(&gates, Some(-1));
        let chosen = ops::slice(&order, &[0, count - k], &[tokens as i32, count], &[1, 1]);
        let mut scores = ops::take_along_axis(&gates, &chosen, Some(-1));
        if self.spec.normalize {
            scores = &scores / ops::sum(&scores, -1, true);
        }
        let chosen = chosen.astype(DType::U32).to_vec::<u32>()?;
        // Each expert's (token, slot) pairs, then every expert's outputs in that order.
        let mut routed: Vec<Vec<usize>> = vec![Vec::new(); self.experts.len()];
        for (pair, &e) in chosen.iter().enumerate() {
            routed[e as usize].push(pair);
        }
        let mut outputs = Vec::new();
        let mut position = vec![0i32; chosen.len()];
        let mut next = 0;
        for (expert, pairs) in self.experts.iter().zip(&routed) {
            if pairs.is_empty() {
                continue;
            }
            let rows: Vec<i32> = pairs.iter().map(|&p| (p / k as usize) as i32).collect();
            let picked = ops::take(
                &flat,
                &Array::from_vec(rows, &[pairs.len() as i32]),
                Some(0),
            );
            let hidden = swiglu(&expert.gate.forward(&picked), &expert.up.forward(&picked));
            outputs.push(expert.down.forward(&hidden));
            for &p in pairs {
                position[p] = next;
                next += 1;
            }
        }
        let all = ops::concatenate(&outputs, 0);
        let per_pair = ops::take(
            &all,
            &Array::from_vec(position, &[tokens as i32 * k]),
            Some(0),
        );
        let per_pair = ops::reshape(&per_pair, &[tokens as i32, k, dims]);
        let mixed = ops::sum(&(per_pair * ops::expand_dims(&scores, &[-1])), -2, false);
        Ok(ops::reshape(&mixed, &shape))
    }
}
