//! The packed product against dequantize-then-multiply, at every width, group and row count.

use super::bfloat16::try_product;
use super::*;
use crate::bf16;

/// Pseudo-random numbers in `[0, 1)` (a 64-bit LCG): enough to exercise every bit.
struct Numbers(u64);

impl Numbers {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A random quantized `[n, k]` matrix: the words' bytes, scales, biases and, dequantized,
/// `s·q + b` in f32 as MLX computes it.
struct Quantized<T> {
    bytes: Vec<u8>,
    scales: Vec<T>,
    biases: Vec<T>,
    dense: Vec<f32>,
}

fn quantized<T: Float>(dims: QuantizedDims, numbers: &mut Numbers) -> Quantized<T> {
    let QuantizedDims { n, k, bits, .. } = dims;
    let groups = dims.groups();
    let mut words = vec![0u32; n * dims.row_bytes() / 4];
    let scales: Vec<T> = (0..n * groups)
        .map(|_| T::from_f32((numbers.next() * 0.2 - 0.1) as f32))
        .collect();
    let biases: Vec<T> = (0..n * groups)
        .map(|_| T::from_f32((numbers.next() * 2.0 - 1.0) as f32))
        .collect();
    let mut dense = vec![0.0f32; n * k];
    for row in 0..n {
        for col in 0..k {
            let q = (numbers.next() * f64::from(1u32 << bits)) as u32;
            let bit = (row * k + col) * bits as usize;
            let (word, offset) = (bit / 32, (bit % 32) as u32);
            words[word] |= q << offset;
            if offset + bits > 32 {
                words[word + 1] |= q >> (32 - offset);
            }
            let g = row * groups + col / dims.group_size;
            dense[row * k + col] = scales[g].to_f32() * q as f32 + biases[g].to_f32();
        }
    }
    Quantized {
        bytes: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
        scales,
        biases,
        dense,
    }
}

/// Checks the kernel against the dequantized matrix multiplied in f64, within `rel` of
/// `Σ|x·w|` per output (plus `rel` of the result for the final rounding to `T`).
fn check_against_dequantized<T: Float>(dims: QuantizedDims, rel: f64, seed: u64) {
    let mut numbers = Numbers(seed);
    let QuantizedDims { m, n, k, .. } = dims;
    let w = quantized::<T>(dims, &mut numbers);
    let x: Vec<T> = (0..m * k)
        .map(|_| T::from_f32((numbers.next() * 2.0 - 1.0) as f32))
        .collect();
    let mut out = vec![T::from_f32(f32::NAN); m * n];
    quantized_matmul_t(&x, &w.bytes, &w.scales, &w.biases, dims, &mut out);
    for i in 0..m {
        for j in 0..n {
            let (mut exact, mut magnitude) = (0.0f64, 0.0f64);
            for c in 0..k {
                let term = f64::from(x[i * k + c].to_f32()) * f64::from(w.dense[j * k + c]);
                exact += term;
                magnitude += term.abs();
            }
            let got = f64::from(out[i * n + j].to_f32());
            let allowed = rel * (magnitude + exact.abs()) + 1e-6;
            assert!(
                (got - exact).abs() <= allowed,
                "{dims:?} {}: y[{i}][{j}] = {got}, expected {exact}",
                T::DTYPE
            );
        }
    }
}

#[test]
fn packed_products_equal_dequantize_then_multiply_for_every_width_group_and_row_count() {
    for bits in [2, 3, 4, 5, 6, 8] {
        for group_size in [32, 64, 128] {
            // One row, tiles of rows, and dequantized blocks from MIN_GEMM_ROWS on.
            for m in [1, 3, MIN_GEMM_ROWS - 1, 17] {
                // Three groups per row: rows end inside the words of other widths' groups.
                let dims = QuantizedDims {
                    m,
                    n: 7,
                    k: 3 * group_size,
                    group_size,
                    bits,
                };
                let seed = u64::from(bits) * 1000 + group_size as u64 + m as u64;
                check_against_dequantized::<f32>(dims, 1e-5, seed);
                check_against_dequantized::<bf16>(dims, 1.0 / 128.0, seed);
            }
        }
    }
}

#[test]
fn products_split_across_threads_cover_every_output() {
    for bits in [3, 4, 8] {
        for m in [1, 5, MIN_GEMM_ROWS + 8] {
            let dims = QuantizedDims {
                m,
                n: 301,
                k: 256,
                group_size: 64,
                bits,
            };
            check_against_dequantized::<f32>(dims, 1e-5, 7 + m as u64);
            check_against_dequantized::<crate::f16>(dims, 1.0 / 512.0, 9 + m as u64);
            check_against_dequantized::<bf16>(dims, 1.0 / 128.0, 11 + m as u64);
        }
    }
}

#[test]
fn long_rows_are_dequantized_in_runs_of_whole_groups() {
    let dims = QuantizedDims {
        m: MIN_GEMM_ROWS + 4,
        n: 37,
        k: 2 * GEMM_DEPTH + 512,
        group_size: 128,
        bits: 5,
    };
    check_against_dequantized::<f32>(dims, 1e-5, 21);
}

#[test]
fn a_row_of_x_gives_the_same_bits_alone_or_with_other_rows() {
    let dims = QuantizedDims {
        m: 6,
        n: 9,
        k: 256,
        group_size: 64,
        bits: 4,
    };
    let mut numbers = Numbers(3);
    let w = quantized::<f32>(dims, &mut numbers);
    let x: Vec<f32> = (0..6 * 256).map(|_| numbers.next() as f32 - 0.5).collect();
    let mut together = vec![0.0f32; 6 * 9];
    quantized_matmul_t(&x, &w.bytes, &w.scales, &w.biases, dims, &mut together);
    for (row, expected) in together.chunks_exact(9).enumerate() {
        let mut alone = vec![0.0f32; 9];
        let one_row = QuantizedDims { m: 1, ..dims };
        let x_row = &x[row * 256..(row + 1) * 256];
        quantized_matmul_t(x_row, &w.bytes, &w.scales, &w.biases, one_row, &mut alone);
        assert_eq!(alone, expected, "row {row}");
    }
}

/// bfloat16 operands (the bfloat16 dot-product route where the CPU has it) give the f32
/// route's sums on the same values, up to the order of the additions, and a row of `x` the
/// same bits alone or in a tile.
#[test]
fn bfloat16_route_sums_as_the_f32_route_does() {
    if !crate::os::has_bf16_dot() {
        eprintln!("note: this CPU has no bfloat16 dot products; the route is not taken here");
    }
    for (m, group_size) in [(1, 64), (1, 128), (6, 64), (MIN_GEMM_ROWS - 1, 128)] {
        let dims = QuantizedDims {
            m,
            n: 45,
            k: 4 * group_size,
            group_size,
            bits: 4,
        };
        let mut numbers = Numbers(m as u64 + group_size as u64);
        let w = quantized::<bf16>(dims, &mut numbers);
        let x: Vec<bf16> = (0..m * dims.k)
            .map(|_| bf16::from_f64(numbers.next() * 2.0 - 1.0))
            .collect();
        let mut got = vec![bf16::ZERO; m * 45];
        assert_eq!(
            try_product(&x, &w.bytes, &w.scales, &w.biases, dims, &mut got),
            crate::os::has_bf16_dot(),
            "the bfloat16 route is taken exactly when the CPU has it"
        );
        quantized_matmul_t(&x, &w.bytes, &w.scales, &w.biases, dims, &mut got);
        let widen = |v: &[bf16]| v.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
        let mut wide = vec![0.0f32; m * 45];
        let (scales, biases) = (widen(&w.scales), widen(&w.biases));
        quantized_matmul_t(&widen(&x), &w.bytes, &scales, &biases, dims, &mut wide);
        for (index, (g, w)) in got.iter().zip(&wide).enumerate() {
            // Both sum in f32; only the rounding to bfloat16 and the order differ.
            let expected = bf16::from_f32(*w).to_f32();
            assert!(
                (g.to_f32() - expected).abs() <= expected.abs() / 128.0 + 1e-4,
                "{dims:?}: y[{index}] = {g}, the f32 route gives {w}"
            );
        }
        for row in 0..m {
            let one_row = QuantizedDims { m: 1, ..dims };
            let mut alone = vec![bf16::ZERO; 45];
            let x_row = &x[row * dims.k..(row + 1) * dims.k];
            quantized_matmul_t(x_row, &w.bytes, &w.scales, &w.biases, one_row, &mut alone);
            assert_eq!(alone, got[row * 45..(row + 1) * 45], "{dims:?} row {row}");
        }
    }
}

#[test]
fn empty_contraction_gives_zeros() {
    let dims = QuantizedDims {
        m: 2,
        n: 3,
        k: 0,
        group_size: 64,
        bits: 4,
    };
    let mut out = [f32::NAN; 6];
    quantized_matmul_t::<f32>(&[], &[], &[], &[], dims, &mut out);
    assert_eq!(out, [0.0; 6]);
}
