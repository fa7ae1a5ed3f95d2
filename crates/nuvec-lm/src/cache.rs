//! The key/value cache of one attention layer, as mlx-lm's `KVCache`: the keys and values
//! of every position seen so far, `[batch, kv_heads, positions, head_dim]`, and the offset
//! at which the next positions' rotary angles start.

use nuvec_core::{ops, Array, Result};

/// One layer's cached keys and values.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    keys: Option<Array>,
    values: Option<Array>,
    offset: usize,
    /// Evaluated with the cache: a pipeline stage's `send` of its last step.
    with: Option<Array>,
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> KvCache {
        KvCache::default()
    }

    /// Positions cached so far.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Appends `keys`/`values` `[B, Hkv, L, D]` and returns every cached position's.
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> (Array, Array) {
        let append = |old: &Option<Array>, new: &Array| match old {
            Some(old) => ops::concatenate(&[old.clone(), new.clone()], 2),
            None => new.clone(),
        };
        let (k, v) = (append(&self.keys, keys), append(&self.values, values));
        self.offset += keys.shape().get(2).copied().unwrap_or(0) as usize;
        self.keys = Some(k.clone());
        self.values = Some(v.clone());
        (k, v)
    }

    /// The arrays to evaluate with a step's output, so the cache holds values rather than
    /// a growing graph.
    pub fn state(&self) -> Vec<Array> {
        self.keys
            .iter()
            .chain(self.values.iter())
            .chain(self.with.iter())
            .cloned()
            .collect()
    }

    /// Makes `array` part of [`state`](KvCache::state) until the next one, as mlx-lm's
    /// `mx.depends(cache.keys, h)`: a pipeline stage sends its activations when its cache
    /// is evaluated.
    pub fn evaluate_with(&mut self, array: Array) {
        self.with = Some(array);
    }

    /// Evaluates the cached keys and values.
    pub fn eval(&self) -> Result<()> {
        nuvec_core::eval(&self.state())
    }

    /// Drops positions past `length` (for reusing a shared prompt prefix).
    pub fn truncate(&mut self, length: usize) {
        if length >= self.offset {
            return;
        }
        let cut = |a: &Option<Array>| {
            a.as_ref().map(|a| {
                let mut stop = a.shape().to_vec();
                stop[2] = length as i32;
                ops::slice(a, &[0, 0, 0, 0], &stop, &[1, 1, 1, 1])
            })
        };
        self.keys = cut(&self.keys);
        self.values = cut(&self.values);
        self.offset = length;
    }

    /// Bytes held by the cached keys and values.
    pub fn nbytes(&self) -> usize {
        self.keys
            .iter()
            .chain(self.values.iter())
            .map(Array::nbytes)
            .sum()
    }
}
