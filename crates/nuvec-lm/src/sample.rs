//! Choosing the next token, as mlx-lm's `sample_utils`: samplers over log-probabilities
//! (greedy, or temperature with top-p, min-p and top-k filters, applied in that order), and
//! logits processors (logit bias, repetition penalty) applied before them. Every step is an
//! array op in the logits' dtype, so a seed draws the same tokens as MLX.

use crate::{Error, Result};
use nuvec_core::{ops, random, Array, DType};
use std::collections::BTreeMap;

/// How the next token is drawn (mlx-lm's `make_sampler`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerOptions {
    /// 0 takes the most likely token.
    pub temp: f32,
    /// Nucleus sampling: keep the most likely tokens holding this much probability (off
    /// outside (0, 1)).
    pub top_p: f32,
    /// Keep tokens at least this fraction as likely as the most likely one (off at 0).
    pub min_p: f32,
    /// Tokens `min_p` always keeps.
    pub min_tokens_to_keep: usize,
    /// Keep the `top_k` most likely tokens (off at 0).
    pub top_k: usize,
}

impl Default for SamplerOptions {
    fn default() -> SamplerOptions {
        SamplerOptions {
            temp: 0.0,
            top_p: 1.0,
            min_p: 0.0,
            min_tokens_to_keep: 1,
            top_k: 0,
        }
    }
}

impl SamplerOptions {
    /// Why these options are invalid for a vocabulary of `vocabulary` tokens, if they are.
    pub fn check(&self, vocabulary: usize) -> Result<()> {
        let bad = |reason: String| Err(Error::Generate(reason));
        if self.temp.is_nan() || self.temp < 0.0 || self.temp.is_infinite() {
            return bad(format!(
                "temp must be a finite number >= 0, got {}",
                self.temp
            ));
        }
        if self.temp == 0.0 {
            return Ok(());
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if self.min_tokens_to_keep < 1 {
            return bad("min_tokens_to_keep must be at least 1".into());
        }
        if self.top_k > 0 && self.top_k >= vocabulary {
            return bad(format!(
                "top_k must be in (0, {vocabulary}) for this vocabulary, got {}",
                self.top_k
            ));
        }
        Ok(())
    }

    /// A token id `[B]` drawn from log-probabilities `[B, V]` (uint32 for greedy picks).
    pub fn sample(&self, logprobs: &Array) -> Array {
        self.sample_with_key(logprobs, None)
    }

    /// [`sample`](SamplerOptions::sample) drawing with `key` (uint32 `[2]`) rather than the
    /// next key of the global random state.
    pub fn sample_with_key(&self, logprobs: &Array, key: Option<&Array>) -> Array {
        if self.temp == 0.0 {
            return ops::argmax(logprobs, Some(-1), false);
        }
        let mut x = logprobs.clone();
        if self.top_p > 0.0 && self.top_p < 1.0 {
            x = apply_top_p(&x, self.top_p);
        }
        if self.min_p != 0.0 {
            x = apply_min_p(&x, self.min_p, self.min_tokens_to_keep);
        }
        if self.top_k > 0 {
            x = apply_top_k(&x, self.top_k);
        }
        random::categorical(&(x * (1.0 / self.temp as f64)), -1, None, key)
    }
}

/// Rank of each entry along the last axis when sorted descending (0 = largest).
fn descending_ranks(x: &Array) -> Array {
    let order = ops::argsort(&ops::negative(x), Some(-1));
    ops::argsort(&order, Some(-1))
}

/// Hides all but the `k` most likely tokens.
pub fn apply_top_k(logprobs: &Array, k: usize) -> Array {
    let keep = ops::less(descending_ranks(logprobs), k as i64);
    ops::where_(&keep, logprobs, f32::NEG_INFINITY as f64)
}

/// Hides tokens less likely than `min_p` times the most likely one, keeping at least
/// `min_tokens_to_keep`.
pub fn apply_min_p(logprobs: &Array, min_p: f32, min_tokens_to_keep: usize) -> Array {
    let top = ops::max(logprobs, -1, true);
    let threshold = top + (min_p as f64).ln();
    let mut remove = ops::less(logprobs, &threshold);
    if min_tokens_to_keep > 1 {
        let protected = ops::less(descending_ranks(logprobs), min_tokens_to_keep as i64);
        remove = ops::logical_and(&remove, ops::logical_not(&protected));
    }
    ops::where_(&remove, f32::NEG_INFINITY as f64, logprobs)
}

/// Keeps the most likely tokens whose probabilities sum to `top_p` of the total.
pub fn apply_top_p(logprobs: &Array, top_p: f32) -> Array {
    let sorted = ops::sort(logprobs, Some(-1));
    let probs = ops::exp(&sorted.astype(DType::F32));
    let mass_above = ops::cumsum(&probs, Some(-1), true, false);
    let n = probs.shape()[probs.ndim() - 1];
    let first = |a: &Array| {
        let mut stop = a.shape().to_vec();
        stop[a.ndim() - 1] = 1.min(n);
        ops::slice(a, &vec![0; a.ndim()], &stop, &vec![1; a.ndim()])
    };
    let total = first(&mass_above) + first(&probs);
    let dropped = ops::sum(
        &ops::greater_equal(&mass_above, &(total * top_p as f64)),
        -1,
        true,
    );
    let threshold = ops::take_along_axis(&sorted, &dropped.astype(DType::I32), Some(-1));
    ops::where_(
        ops::less(logprobs, &threshold),
        f32::NEG_INFINITY as f64,
        logprobs,
    )
}

/// Changes to the logits before sampling (mlx-lm's `make_logits_processors`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LogitsProcessors {
    /// Added to the logits of these token ids.
    pub logit_bias: BTreeMap<u32, f32>,
    /// Divides positive (multiplies negative) logits of recent tokens; off when `None`.
    pub repetition_penalty: Option<f32>,
    /// How many recent tokens (prompt included) the penalty looks at.
    pub repetition_context_size: usize,
}

impl LogitsProcessors {
    /// No processing.
    pub fn none() -> LogitsProcessors {
        LogitsProcessors {
            repetition_context_size: 20,
            ..LogitsProcessors::default()
        }
    }

    /// Whether any processor is on.
    pub fn is_active(&self) -> bool {
        !self.logit_bias.is_empty() || self.repetition_penalty.is_some_and(|p| p != 0.0)
    }

    /// Why these settings are invalid for `vocabulary` tokens, if they are.
    pub fn check(&self, vocabulary: usize) -> Result<()> {
        if let Some(p) = self.repetition_penalty {
            if p.is_nan() || p < 0.0 || p.is_infinite() {
                return Err(Error::Generate(format!(
                    "repetition_penalty must be a finite number >= 0, got {p}"
                )));
            }
        }
        if let Some((&id, _)) = self
            .logit_bias
            .iter()
            .find(|(&id, _)| id as usize >= vocabulary)
        {
            return Err(Error::Generate(format!(
                "logit_bias names token {id}, past the vocabulary of {vocabulary}"
            )));
        }
        Ok(())
    }

    /// The processed logits `[1, V]`, given every token so far.
    pub fn apply(&self, tokens: &[u32], logits: &Array) -> Array {
        let vocabulary = logits.shape()[logits.ndim() - 1] as usize;
        let mut logits = logits.clone();
        if !self.logit_bias.is_empty() {
            let mut bias = vec![0f32; vocabulary];
            for (&id, &value) in &self.logit_bias {
                bias[id as usize] += value;
            }
            let bias = Array::from_vec(bias, &[vocabulary as i32]).astype(logits.dtype());
            logits = logits + bias;
        }
        if let Some(penalty) = self.repetition_penalty.filter(|&p| p != 0.0) {
            let recent = &tokens[tokens.len().saturating_sub(self.repetition_context_size)..];
            if !recent.is_empty() {
                let mut seen = vec![false; vocabulary];
                for &t in recent {
                    if let Some(slot) = seen.get_mut(t as usize) {
                        *slot = true;
                    }
                }
                let seen = Array::from_vec(seen, &[vocabulary as i32]);
                let penalized = ops::where_(
                    ops::less(&logits, 0),
                    &logits * penalty as f64,
                    &logits / penalty as f64,
                );
                logits = ops::where_(&seen, &penalized, &logits);
            }
        }
        logits
    }
}
