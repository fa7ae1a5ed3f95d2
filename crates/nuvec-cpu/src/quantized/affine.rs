//! MLX's affine quantization of float rows: a group of `group_size` consecutive values shares
//! a scale `s` and a bias `b`; each value is stored as `q = clip(rint((w - b) / s), 0,
//! 2ᵇⁱᵗˢ - 1)` and read back as `s·q + b`. The values' bits are laid end to end, least
//! significant first, in 32-bit words, so 3-, 5- and 6-bit values may straddle two words,
//! exactly as MLX packs them. (`nuvec-cuda`'s quantize kernel does this arithmetic too, and
//! its tests compare it with this.)

use crate::Float;

/// The scale and bias of one group, computed in f32 as MLX's CPU kernel does: the end with
/// the larger magnitude becomes exactly representable (`q0 · s`), a zero range keeps `1e-7`.
pub fn group_parameters(values: impl Iterator<Item = f32> + Clone, bits: u32) -> (f32, f32) {
    let n_bins = ((1u32 << bits) - 1) as f32;
    let (mut w_min, mut w_max) = (f32::INFINITY, f32::NEG_INFINITY);
    for v in values {
        w_min = w_min.min(v);
        w_max = w_max.max(v);
    }
    let mask = w_min.abs() > w_max.abs();
    let mut scale = ((w_max - w_min) / n_bins).max(1e-7);
    if !mask {
        scale = -scale;
    }
    let edge = if mask { w_min } else { w_max };
    let q0 = (edge / scale).round_ties_even();
    if q0 != 0.0 {
        (edge / q0, edge)
    } else {
        (scale, 0.0)
    }
}

/// Writes `q` (of `bits` bits) at value position `index` of a little-endian bit stream.
pub fn pack(words: &mut [u32], index: usize, bits: u32, q: u32) {
    let bit = index * bits as usize;
    let (word, offset) = (bit / 32, (bit % 32) as u32);
    words[word] |= q << offset;
    if offset + bits > 32 {
        words[word + 1] |= q >> (32 - offset);
    }
}

/// Reads the value at position `index` of a bit stream of `bits`-bit values.
pub fn unpack(words: &[u32], index: usize, bits: u32) -> u32 {
    let bit = index * bits as usize;
    let (word, offset) = (bit / 32, (bit % 32) as u32);
    let mut q = words[word] >> offset;
    if offset + bits > 32 {
        q |= words[word + 1] << (32 - offset);
    }
    q & ((1u32 << bits) - 1)
}

/// Quantizes rows of `n` values of `w` in groups of `group` (a multiple of 32) to `bits`:
/// the packed words (`n·bits/32` per row), and a scale and a bias per group.
pub fn quantize_rows<T: Float>(
    w: &[T],
    (n, group, bits): (usize, usize, u32),
    (words, scales, biases): (&mut [u32], &mut [T], &mut [T]),
) {
    let n_bins = ((1u32 << bits) - 1) as f32;
    let words_per_row = n * bits as usize / 32;
    for (row, values) in w.chunks_exact(n).enumerate() {
        let row_words = &mut words[row * words_per_row..(row + 1) * words_per_row];
        row_words.fill(0);
        for (g, chunk) in values.chunks_exact(group).enumerate() {
            let (scale, bias) = group_parameters(chunk.iter().map(|v| v.to_f32()), bits);
            scales[row * (n / group) + g] = T::from_f32(scale);
            biases[row * (n / group) + g] = T::from_f32(bias);
            for (k, v) in chunk.iter().enumerate() {
                let level = ((v.to_f32() - bias) / scale)
                    .round_ties_even()
                    .clamp(0.0, n_bins);
                pack(row_words, g * group + k, bits, level as u32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_values_round_trip_at_every_width_and_position() {
        for bits in [2, 3, 4, 5, 6, 8] {
            let count = 64;
            let mut words = vec![0u32; count * bits as usize / 32];
            let values: Vec<u32> = (0..count as u32)
                .map(|i| (i * 7 + 3) % (1 << bits))
                .collect();
            for (i, &q) in values.iter().enumerate() {
                pack(&mut words, i, bits, q);
            }
            let back: Vec<u32> = (0..count).map(|i| unpack(&words, i, bits)).collect();
            assert_eq!(back, values, "{bits} bits");
        }
    }

    #[test]
    fn a_group_of_one_value_keeps_the_minimum_scale() {
        let (scale, bias) = group_parameters([0.0f32; 4].into_iter(), 4);
        assert_eq!((scale, bias), (-1e-7, 0.0));
    }
}
