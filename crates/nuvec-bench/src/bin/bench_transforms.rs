//! Transform benchmarks: a compiled element-wise chain (gelu over 16M float32) against the
//! same chain uncompiled, and the cost of building and evaluating graphs of many small ops.
//!
//! ```text
//! cargo run --release -p nuvec-bench --bin bench_transforms
//! ```
//!
//! Each case warms up, then times whole iterations (building the graph and evaluating it)
//! for about a second; it prints medians and the ratios, and one JSON line per case.

use nuvec::ops;
use nuvec::transforms::compile;
use nuvec::{Array, Result};
use std::time::Duration;

const LEN: usize = 16 * 1024 * 1024;
const SMALL_OPS: usize = 1000;

fn gelu(x: &Array) -> Array {
    x * 0.5 * (ops::erf(&(x / std::f64::consts::SQRT_2)) + 1.0)
}

/// The median of `run`'s time over about `budget` (at least 5 runs, after 2 warm-ups).
fn median(budget: Duration, run: impl FnMut() -> Result<()>) -> Result<Duration> {
    nuvec_bench::time_median((2, 5, 500), budget, run)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<()> {
    let data: Vec<f32> = (0..LEN)
        .map(|i| ((i * 7919) % 10_007) as f32 / 2_500.0 - 2.0)
        .collect();
    let x = Array::from_vec(data, &[LEN as i32]);
    x.eval()?;
    let budget = Duration::from_secs(2);

    let plain = median(budget, || gelu(&x).eval())?;
    let compiled_gelu = compile(|v: &[Array]| vec![gelu(&v[0])]);
    let compiled = median(budget, || {
        compiled_gelu.call(std::slice::from_ref(&x))?[0].eval()
    })?;
    // The two agree bit for bit.
    let (a, b) = (
        gelu(&x),
        compiled_gelu.call(std::slice::from_ref(&x))?.remove(0),
    );
    assert_eq!(a.to_vec::<f32>()?, b.to_vec::<f32>()?);
    let speedup = plain.as_secs_f64() / compiled.as_secs_f64();
    println!("gelu over 16M float32: uncompiled {:.2} ms, compiled {:.2} ms: {speedup:.2}x faster compiled (goal >= 3x)", ms(plain), ms(compiled));
    println!(
        "{{\"bench\":\"gelu_16m_f32\",\"uncompiled_ms\":{:.4},\"compiled_ms\":{:.4},\"speedup\":{speedup:.3}}}",
        ms(plain),
        ms(compiled)
    );

    // Many small ops: a chain of SMALL_OPS adds and multiplies on 16 floats.
    let small = Array::from_vec(vec![1.0f32; 16], &[16]);
    small.eval()?;
    let chain = |v: &Array| {
        let mut y = v.clone();
        for i in 0..SMALL_OPS {
            y = if i % 2 == 0 { &y + 1.0 } else { &y * 0.5 };
        }
        y
    };
    let build_only = median(budget / 2, || {
        let _ = std::hint::black_box(chain(&small));
        Ok(())
    })?;
    let build_and_eval = median(budget / 2, || chain(&small).eval())?;
    let compiled_chain = compile(|v: &[Array]| vec![chain(&v[0])]);
    let compiled_small = median(budget / 2, || {
        compiled_chain.call(std::slice::from_ref(&small))?[0].eval()
    })?;
    let per_op = |d: Duration| d.as_secs_f64() * 1e6 / SMALL_OPS as f64;
    println!(
        "{SMALL_OPS} small ops: building {:.3} µs/op, building and evaluating {:.3} µs/op, compiled {:.3} µs/op",
        per_op(build_only),
        per_op(build_and_eval),
        per_op(compiled_small)
    );
    println!(
        "{{\"bench\":\"small_ops\",\"build_us_per_op\":{:.4},\"build_eval_us_per_op\":{:.4},\"compiled_us_per_op\":{:.4}}}",
        per_op(build_only),
        per_op(build_and_eval),
        per_op(compiled_small)
    );
    Ok(())
}
