//! Core-op benchmark of nuvec: f32 matmul (256, 1024, 2048 square), element-wise `add` and
//! `exp`, and a full `sum`, each over 16M (16 * 1024 * 1024) f32 elements.
//!
//! Run it in release mode (debug timings mean nothing):
//!
//! ```text
//! cargo run --release -p nuvec-bench --bin bench_core            # every benchmark
//! cargo run --release -p nuvec-bench --bin bench_core -- matmul  # names containing "matmul"
//! ```
//!
//! Each benchmark evaluates its inputs before the clock starts, warms up, then times
//! `op(...).eval()` for an adaptive number of iterations (about 1.5 s worth, at least 5, at
//! most 200) and prints one JSON object per line on stdout:
//!
//! ```text
//! {"bench":"matmul_f32_256","median_ms":0.4123,"iters":200}
//! ```
//!
//! `scripts/bench/numpy_core.py` runs the same benchmarks with numpy, and
//! `cargo xtask bench-core` runs both and compares them.

use nuvec::ops::{add, exp, matmul};
use nuvec::{Array, Result};
use std::io::Write;
use std::time::{Duration, Instant};

/// Elements of the element-wise and reduction inputs.
const ELEMENTWISE_LEN: usize = 16 * 1024 * 1024;
/// Time the timed iterations aim for.
const TARGET: Duration = Duration::from_millis(1500);
/// Warm-up lasts at least this long (and at least `MIN_WARMUP_ITERS` runs).
const WARMUP: Duration = Duration::from_millis(300);
const MIN_WARMUP_ITERS: usize = 2;
const MAX_WARMUP_ITERS: usize = 50;
const MIN_ITERS: usize = 5;
const MAX_ITERS: usize = 200;

/// A cheap deterministic pattern in [-0.5, 0.5): no two neighbours equal, nothing that
/// overflows in a product or an `exp`.
fn pattern(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i.wrapping_mul(7919).wrapping_add(seed * 104_729)) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

/// An evaluated f32 array of `shape` filled with `pattern`.
fn input(shape: &[i32], seed: usize) -> Result<Array> {
    let len = shape.iter().map(|&d| d as usize).product();
    let array = Array::from_vec(pattern(len, seed), shape);
    array.eval()?;
    Ok(array)
}

/// Builds the op's (lazy) output; `run` times only its evaluation.
type Build<'a> = Box<dyn Fn() -> Array + 'a>;

/// One evaluation of `build()`: the graph is built before the clock starts, and the result
/// is dropped after it stops.
fn time_once(build: &Build<'_>) -> Result<Duration> {
    let out = build();
    let start = Instant::now();
    out.eval()?;
    let elapsed = start.elapsed();
    drop(out);
    Ok(elapsed)
}

/// Warms up, picks the iteration count, times, and prints the JSON line.
fn run(name: &str, build: Build<'_>) -> Result<()> {
    let mut warm = Vec::new();
    let warm_start = Instant::now();
    while warm.len() < MIN_WARMUP_ITERS
        || (warm_start.elapsed() < WARMUP && warm.len() < MAX_WARMUP_ITERS)
    {
        warm.push(time_once(&build)?);
    }
    let estimate = nuvec_bench::median_time(&mut warm).max(Duration::from_nanos(1));
    let iters = ((TARGET.as_secs_f64() / estimate.as_secs_f64()).ceil() as usize)
        .clamp(MIN_ITERS, MAX_ITERS);
    let mut times = (0..iters)
        .map(|_| time_once(&build))
        .collect::<Result<Vec<_>>>()?;
    let median_ms = nuvec_bench::median_time(&mut times).as_secs_f64() * 1e3;
    let mut stdout = std::io::stdout().lock();
    // A closed pipe only loses the report; the benchmark itself did not fail.
    let _ = writeln!(
        stdout,
        "{{\"bench\":\"{name}\",\"median_ms\":{median_ms:.4},\"iters\":{iters}}}"
    );
    let _ = stdout.flush();
    Ok(())
}

fn main() -> Result<()> {
    let filters: Vec<String> = std::env::args().skip(1).collect();
    let wanted =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));

    for n in [256, 1024, 2048] {
        let name = format!("matmul_f32_{n}");
        if wanted(&name) {
            let (a, b) = (input(&[n, n], 1)?, input(&[n, n], 2)?);
            run(&name, Box::new(|| matmul(&a, &b)))?;
        }
    }

    let len = ELEMENTWISE_LEN as i32;
    let elementwise = ["add_f32_16m", "exp_f32_16m", "sum_f32_16m"];
    if elementwise.iter().any(|name| wanted(name)) {
        let (x, y) = (input(&[len], 3)?, input(&[len], 4)?);
        if wanted("add_f32_16m") {
            run("add_f32_16m", Box::new(|| add(&x, &y)))?;
        }
        if wanted("exp_f32_16m") {
            run("exp_f32_16m", Box::new(|| exp(&x)))?;
        }
        if wanted("sum_f32_16m") {
            run("sum_f32_16m", Box::new(|| x.sum(None, false)))?;
        }
    }
    // Attention's softmax: 14 heads of 512 × 512 scores, over the last axis.
    if wanted("softmax_f32_7168x512") {
        let scores = input(&[7168, 512], 5)?;
        run(
            "softmax_f32_7168x512",
            Box::new(|| nuvec::ops::softmax(&scores, -1)),
        )?;
    }
    Ok(())
}
