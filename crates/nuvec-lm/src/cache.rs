//! The key/value cache of one attention layer, as mlx-lm's `KVCache`: the keys and values
//! of every position seen so far, `[batch, kv_heads, positions, head_dim]`, and the offset
//! at which the next positions' rotary angles start.

use nuvec_core::{ops, Array, Result};

/// Positions by which the cache's buffers grow (mlx-lm's `KVCache.step`).
pub const STEP: usize = 256;

/// The first `count` positions of a `[B, H, positions, D]` array.
fn first_positions(a: &Array, count: usize) -> Array {
    let mut stop = a.shape().to_vec();
    stop[2] = count as i32;
    ops::slice(a, &[0, 0, 0, 0], &stop, &[1, 1, 1, 1])
}

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

    /// Writes `keys`/`values` `[B, Hkv, L, D]` after the cached positions and returns every
    /// cached position's. The buffers grow by whole [`STEP`]s of positions, as mlx-lm's, and
    /// each step's keys and values are written into them in place (`slice_update`).
    pub fn update_and_fetch(&mut self, keys: &Array, values: &Array) -> (Array, Array) {
        let previous = self.offset;
        let length = keys.shape().get(2).copied().unwrap_or(0) as usize;
        let grow = |old: Option<Array>, new: &Array| {
            let mut shape = new.shape().to_vec();
            shape[2] = (length.div_ceil(STEP) * STEP) as i32;
            let room = ops::zeros(&shape, new.dtype());
            match old {
                Some(old) => ops::concatenate(&[first_positions(&old, previous), room], 2),
                None => room,
            }
        };
        let (old_keys, old_values) = match (self.keys.take(), self.values.take()) {
            (Some(k), Some(v)) if previous + length <= k.shape()[2] as usize => (k, v),
            (k, v) => (grow(k, keys), grow(v, values)),
        };
        self.offset += length;
        let write = |old: &Array, new: &Array| {
            let mut stop = old.shape().to_vec();
            stop[2] = self.offset as i32;
            let start = [0, 0, previous as i32, 0];
            ops::slice_update(old, new, &start, &stop, &[1, 1, 1, 1])
        };
        let (k, v) = (write(&old_keys, keys), write(&old_values, values));
        let fetched = (
            first_positions(&k, self.offset),
            first_positions(&v, self.offset),
        );
        self.keys = Some(k);
        self.values = Some(v);
        fetched
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

    /// Drops positions past `length` (for reusing a shared prompt prefix): the next update
    /// writes over them.
    pub fn truncate(&mut self, length: usize) {
        self.offset = self.offset.min(length);
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

#[cfg(test)]
mod tests {
    use super::{KvCache, STEP};
    use nuvec_core::{Array, DType};

    /// `[1, 2, length, 3]` positions numbered from `first`.
    fn positions(first: usize, length: usize) -> Array {
        let values: Vec<f32> = (0..2 * length * 3)
            .map(|i| (first + (i / 3) % length) as f32)
            .collect();
        Array::from_vec(values, &[1, 2, length as i32, 3])
    }

    #[test]
    fn the_buffers_grow_by_whole_steps_and_fetch_every_position_written() {
        let mut cache = KvCache::new();
        let bytes_per_position = 2 * 2 * 3 * DType::F32.size();
        let (k, _) = cache.update_and_fetch(&positions(0, 5), &positions(0, 5));
        assert_eq!(k.shape(), [1, 2, 5, 3]);
        cache.eval().unwrap();
        assert_eq!(cache.nbytes(), STEP * bytes_per_position);
        for step in 0..STEP {
            let (k, v) = cache.update_and_fetch(&positions(5 + step, 1), &positions(5 + step, 1));
            cache.eval().unwrap();
            assert_eq!(k.shape()[2] as usize, 6 + step);
            if step + 1 == STEP {
                let expected = positions(0, 6 + step).to_vec::<f32>().unwrap();
                assert_eq!(k.to_vec::<f32>().unwrap(), expected);
                assert_eq!(v.to_vec::<f32>().unwrap(), expected);
            }
        }
        assert_eq!(cache.offset(), STEP + 5);
        assert_eq!(cache.nbytes(), 2 * STEP * bytes_per_position);
    }

    #[test]
    fn positions_after_a_truncation_are_written_over() {
        let mut cache = KvCache::new();
        let _written = cache.update_and_fetch(&positions(0, 8), &positions(0, 8));
        cache.truncate(3);
        let (k, _) = cache.update_and_fetch(&positions(3, 2), &positions(3, 2));
        assert_eq!(cache.offset(), 5);
        let expected = positions(0, 5).to_vec::<f32>().unwrap();
        assert_eq!(k.to_vec::<f32>().unwrap(), expected);
    }

    #[test]
    fn a_prompt_longer_than_a_step_takes_as_many_steps_as_it_needs() {
        let mut cache = KvCache::new();
        let (k, _) = cache.update_and_fetch(&positions(0, STEP + 1), &positions(0, STEP + 1));
        assert_eq!(k.shape()[2] as usize, STEP + 1);
        assert_eq!(cache.nbytes(), 2 * STEP * 2 * 2 * 3 * DType::F32.size());
    }
}
