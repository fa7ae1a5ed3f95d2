//! `quantized_matmul` (4-bit, groups of 64, `x · Wᵀ`) against the float32 `matmul` of the
//! same shape and against dequantize-then-matmul, for the shapes of a Qwen-0.5B MLP (and, in
//! bfloat16, the 8 and 32 rows of a continuous batch's decoding step):
//! `cargo run --release -p nuvec-bench --bin bench_quantized_matmul [runs]`.
//!
//! Dequantize-then-matmul is timed through `transpose = false` on the quantized `Wᵀ`, which
//! still takes that path. Prints medians and the packed weights' read rate.

use nuvec_core::{ops, random, Array, DType, Result};
use std::time::Duration;

const GROUP_SIZE: usize = 64;
const BITS: u32 = 4;

/// The median of `runs` timed runs, after 3 warm-ups.
fn median(runs: usize, run: impl FnMut() -> Result<()>) -> Result<Duration> {
    nuvec_bench::time_median((3, runs, runs), Duration::ZERO, run)
}

fn ms(time: Duration) -> f64 {
    time.as_secs_f64() * 1e3
}

fn bench_shape(m: i32, n: i32, k: i32, dtype: DType, runs: usize) -> Result<()> {
    let x = random::normal(&[m, k], dtype, None);
    let w = random::normal(&[n, k], dtype, None);
    let w_t = ops::transpose(&w, None);
    let (wq, scales, biases) = ops::quantize(&w, GROUP_SIZE, BITS);
    let (wq_t, scales_t, biases_t) = ops::quantize(&w_t, GROUP_SIZE, BITS);
    nuvec_core::eval(&[
        x.clone(),
        w_t.clone(),
        wq.clone(),
        scales.clone(),
        biases.clone(),
        wq_t.clone(),
        scales_t.clone(),
        biases_t.clone(),
    ])?;
    let dense = median(runs, || ops::matmul(&x, &w_t).eval())?;
    let quantized = median(runs, || {
        ops::quantized_matmul(&x, &wq, &scales, &biases, true, GROUP_SIZE, BITS).eval()
    })?;
    let dequantize_first = median(runs, || {
        ops::quantized_matmul(&x, &wq_t, &scales_t, &biases_t, false, GROUP_SIZE, BITS).eval()
    })?;
    let packed_bytes = [&wq, &scales, &biases]
        .iter()
        .map(|a: &&Array| a.size() * a.dtype().size())
        .sum::<usize>() as f64;
    println!(
        "{dtype} [{m}, {k}] x [{n}, {k}]ᵀ: matmul {:.3} ms, quantized_matmul {:.3} ms \
         ({:.2}x matmul, {:.1} GB/s of packed weights), dequantize-then-matmul {:.3} ms",
        ms(dense),
        ms(quantized),
        quantized.as_secs_f64() / dense.as_secs_f64(),
        packed_bytes / quantized.as_secs_f64() / 1e9,
        ms(dequantize_first),
    );
    Ok(())
}

fn main() -> Result<()> {
    let runs = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    random::seed(0);
    for (m, n, k) in [
        (1, 4864, 896),
        (1, 896, 4864),
        (4, 4864, 896),
        (512, 4864, 896),
        (512, 896, 4864),
    ] {
        bench_shape(m, n, k, DType::F32, runs)?;
    }
    bench_shape(1, 4864, 896, DType::BF16, runs)?;
    // A continuous batch's decoding step: several rows, each a sequence's token.
    bench_shape(8, 4864, 896, DType::BF16, runs)?;
    bench_shape(32, 4864, 896, DType::BF16, runs)?;
    bench_shape(512, 4864, 896, DType::BF16, runs)?;
    Ok(())
}
