//! Data-parallel training: [`average_gradients`], as MLX's `nn.average_gradients`.

use crate::module::Parameters;
use nuvec_core::distributed::{all_sum, default_group, Group};
use nuvec_core::{ops, Array};

/// MLX's default bucket size: gradients are packed into buffers of at least this many bytes.
pub const DEFAULT_ALL_REDUCE_SIZE: usize = 32 << 20;

/// Every rank's gradients averaged: summed over `group` (the default group when `None`) and
/// divided by its size. Consecutive gradients are packed into buckets of at least
/// `all_reduce_size` bytes, so that one `all_sum` covers many small arrays; gradients of
/// mixed dtypes, or a size of 0, take one `all_sum` each (as MLX). A group of one returns
/// the gradients unchanged. The results are lazy: evaluating them all at once lets the
/// group's worker reduce one bucket while the next is being computed.
pub fn average_gradients(
    gradients: &Parameters,
    group: Option<&Group>,
    all_reduce_size: usize,
) -> Parameters {
    let group = group.copied().unwrap_or_else(default_group);
    let size = group.size();
    if size == 1 {
        return gradients.clone();
    }
    let average = |g: &Array| all_sum(g, Some(&group)) / size as f64;
    let names: Vec<&String> = gradients.keys().collect();
    let arrays: Vec<&Array> = gradients.values().collect();
    let one_dtype = arrays.windows(2).all(|w| w[0].dtype() == w[1].dtype());
    if all_reduce_size == 0 || !one_dtype {
        return gradients
            .iter()
            .map(|(name, g)| (name.clone(), average(g)))
            .collect();
    }
    let mut averaged = Parameters::new();
    let mut start = 0;
    while start < arrays.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < arrays.len() && (end == start || bytes < all_reduce_size) {
            bytes += arrays[end].nbytes();
            end += 1;
        }
        let flat: Vec<Array> = arrays[start..end]
            .iter()
            .map(|g| ops::reshape(g, &[-1]))
            .collect();
        let reduced = average(&ops::concatenate(&flat, 0));
        let mut offset = 0;
        for (name, g) in names[start..end].iter().zip(&arrays[start..end]) {
            let len = g.size() as i32;
            let piece = ops::slice(&reduced, &[offset], &[offset + len], &[1]);
            averaged.insert((*name).clone(), ops::reshape(&piece, g.shape()));
            offset += len;
        }
        start = end;
    }
    averaged
}
