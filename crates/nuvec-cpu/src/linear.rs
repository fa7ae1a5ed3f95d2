//! `out = x · wᵀ` for a weight matrix `w` `[n, k]` stored as it is (row-major, any float
//! dtype): the product of every linear layer, read straight from the weights without a
//! transposed or widened copy of them. Accumulation is in f32.
//!
//! Few rows of `x` (decoding a token at a time) make the product a pass over the weights:
//! each weight row is read once and dotted with every row of `x`, output features split
//! between threads. Many rows (a prompt) widen a block of weight rows at a time into a small
//! f32 scratch and multiply it with `gemm`.

use crate::matmul::{matmul_transposed_f32, MatmulDims};
use crate::parallel::for_each_part;
use crate::Float;

/// Rows of `x` up to which the product is done as dot products over each weight row.
const DOT_ROWS: usize = 8;
/// Weight rows widened and multiplied together on the gemm path.
const BLOCK_ROWS: usize = 256;

/// `Σ w[i]·x[i]` in f32, over `w`'s dtype widened one element at a time, with independent
/// partial sums so the loop vectorises.
#[inline]
fn dot<W: Float>(w: &[W], x: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut sums = [0f32; LANES];
    let (w_body, w_tail) = w.split_at(w.len() - w.len() % LANES);
    let (x_body, x_tail) = x.split_at(w_body.len());
    for (wc, xc) in w_body.chunks_exact(LANES).zip(x_body.chunks_exact(LANES)) {
        for lane in 0..LANES {
            sums[lane] += wc[lane].to_f32() * xc[lane];
        }
    }
    let mut total = 0f32;
    for (wv, xv) in w_tail.iter().zip(x_tail) {
        total += wv.to_f32() * xv;
    }
    total + sums.iter().sum::<f32>()
}

/// The bits of `values` when they are bfloat16.
fn bf16_bits<T: Float>(values: &[T]) -> Option<&[u16]> {
    crate::matmul::same_type::<T, crate::bf16>(values).map(|v| {
        // SAFETY: bf16 is a transparent wrapper of u16: same size, alignment and every bit
        // pattern valid both ways.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u16>(), v.len()) }
    })
}

/// `out[m, n] = x[m, k] · w[n, k]ᵀ`.
///
/// # Panics
/// If a slice is shorter than `dims` say.
pub fn linear<T: Float, W: Float>(x: &[T], w: &[W], dims: MatmulDims, out: &mut [T]) {
    let MatmulDims { m, n, k } = dims;
    let (x, w, out) = (&x[..m * k], &w[..n * k], &mut out[..m * n]);
    // The product transposed, [n, m]: each part is a run of output features.
    let mut transposed = vec![0f32; n * m];
    let few_rows = m <= DOT_ROWS && m > 0;
    if let (Some(x_bits), Some(w_bits), true) = (
        bf16_bits(x),
        bf16_bits(w),
        few_rows && crate::os::has_bf16_dot(),
    ) {
        // bfloat16 times bfloat16: exact products summed in f32 by the CPU's dot products.
        for_each_part(&mut transposed, 16 * m, n * k * m, |start, part| {
            crate::os::bf16_dense_rows(w_bits, x_bits, (m, k), start / m, part);
        });
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = T::from_f32(transposed[j * m + i]);
            }
        }
        return;
    }
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    if m <= DOT_ROWS || k == 0 {
        let part_rows = 16;
        for_each_part(
            &mut transposed,
            part_rows * m.max(1),
            n * k * m,
            |start, part| {
                let first = start / m.max(1);
                for (j, outputs) in part.chunks_mut(m.max(1)).enumerate() {
                    let row = &w[(first + j) * k..(first + j + 1) * k];
                    for (i, o) in outputs.iter_mut().enumerate().take(m) {
                        *o = dot(row, &xf[i * k..(i + 1) * k]);
                    }
                }
            },
        );
    } else {
        for_each_part(&mut transposed, BLOCK_ROWS * m, n * k * m, |start, part| {
            let first = start / m;
            let rows = part.len() / m;
            let block = &w[first * k..(first + rows) * k];
            let widened: Vec<f32>;
            let block_f32: &[f32] = match crate::matmul::same_type::<W, f32>(block) {
                Some(f) => f,
                None => {
                    widened = block.iter().map(|v| v.to_f32()).collect();
                    &widened
                }
            };
            let dims = MatmulDims { m: rows, n: m, k };
            matmul_transposed_f32((block_f32, k), (&xf, k), dims, false, part);
        });
    }
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = T::from_f32(transposed[j * m + i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bf16;

    fn reference(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                    .sum::<f64>() as f32;
            }
        }
        out
    }

    fn values(count: usize, seed: u32) -> Vec<f32> {
        (0..count)
            .map(|i| {
                (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2001) as f32
                    / 1000.0
                    - 1.0
            })
            .collect()
    }

    #[test]
    fn every_path_matches_the_plain_product() {
        for &(m, n, k) in &[
            (1, 7, 33),
            (3, 100, 64),
            (8, 129, 17),
            (9, 70, 40),
            (40, 300, 96),
            (2, 5, 0),
        ] {
            let (x, w) = (values(m * k, 1), values(n * k, 2));
            let want = reference(&x, &w, m, n, k);
            let mut got = vec![0f32; m * n];
            linear(&x, &w, MatmulDims { m, n, k }, &mut got);
            for (g, e) in got.iter().zip(&want) {
                assert!(
                    (g - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "{m}x{n}x{k}: {g} vs {e}"
                );
            }
        }
    }

    /// bfloat16 activations and weights (the CPU's bfloat16 dot products where it has
    /// them): the exact products summed, rounded once to bfloat16.
    #[test]
    fn bfloat16_rows_of_x_give_the_widened_product() {
        if !crate::os::has_bf16_dot() {
            eprintln!("note: this CPU has no bfloat16 dot products; the route is not taken here");
        }
        for &(m, n, k) in &[
            (1, 7, 33),
            (3, 100, 64),
            (8, 129, 300),
            (1, 1000, 896),
            (2, 5, 0),
        ] {
            let x: Vec<bf16> = values(m * k, 5).into_iter().map(bf16::from_f32).collect();
            let w: Vec<bf16> = values(n * k, 6).into_iter().map(bf16::from_f32).collect();
            let widen = |v: &[bf16]| v.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
            let want = reference(&widen(&x), &widen(&w), m, n, k);
            let mut got = vec![bf16::from_f32(f32::NAN); m * n];
            linear(&x, &w, MatmulDims { m, n, k }, &mut got);
            for (index, (g, e)) in got.iter().zip(&want).enumerate() {
                let expected = bf16::from_f32(*e).to_f32();
                assert!(
                    (g.to_f32() - expected).abs() <= 1e-2 * (1.0 + e.abs()),
                    "{m}x{n}x{k}: y[{index}] = {g} vs {e}"
                );
            }
        }
    }

    #[test]
    fn half_precision_weights_are_widened_not_rounded_in_the_sum() {
        let (m, n, k) = (2, 33, 300);
        let x = values(m * k, 3);
        let w: Vec<bf16> = values(n * k, 4).into_iter().map(bf16::from_f32).collect();
        let w_f32: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
        let want = reference(&x, &w_f32, m, n, k);
        let mut got = vec![0f32; m * n];
        linear(&x, &w, MatmulDims { m, n, k }, &mut got);
        for (g, e) in got.iter().zip(&want) {
            assert!((g - e).abs() <= 1e-4 * (1.0 + e.abs()), "{g} vs {e}");
        }
    }
}
