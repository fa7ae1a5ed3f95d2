//! One rank of `cargo xtask bench-distributed`: times collectives with the nccl-tests
//! conventions and prints one JSON line per (op, size) on rank 0.
//!
//! - bytes is the big buffer: all_sum's input (= output), all_gather's output, sum_scatter's
//!   and all_to_all's input, broadcast's array (from rank 0); pingpong sends `bytes` each way
//!   between ranks 0 and 1 (time: half the round trip).
//! - each iteration starts after a barrier (a one-element all_sum); its time is the slowest
//!   rank's; the median and minimum over iterations are reported.
//! - iterations adapt to the size: warm-up time decides how many fit in `--budget` seconds.
//! - each output is freed before the next call, so the loop measures the steady state (memory
//!   recycled), not first-touch page faults.
//! - results are checked against the values every rank contributed.
//!
//! `scripts/bench/mlx_collectives.py` does the same for MLX.

use nuvec::distributed::{self, Group};
use nuvec::prelude::*;
use std::time::Instant;

/// The ops this benchmark times.
const OPS: [&str; 6] = [
    "all_sum",
    "all_gather",
    "sum_scatter",
    "pingpong",
    "broadcast",
    "all_to_all",
];

struct Settings {
    ops: Vec<String>,
    sizes: Vec<usize>,
    dtype: DType,
    budget: f64,
    min_iters: usize,
    max_iters: usize,
}

const USAGE: &str = "usage: bench_distributed [--ops all_sum,all_gather,sum_scatter,pingpong,broadcast,all_to_all] \
[--sizes 4K,64K,1M,16M,64M,256M] [--dtype float32|bfloat16] [--budget SECONDS] \
[--min-iters N] [--max-iters N] (started on every rank by `nuvec launch`)";

fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim().to_uppercase();
    let (digits, scale) = match text.chars().last() {
        Some('K') => (&text[..text.len() - 1], 1 << 10),
        Some('M') => (&text[..text.len() - 1], 1 << 20),
        Some('G') => (&text[..text.len() - 1], 1 << 30),
        _ => (text.as_str(), 1usize),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|count| count.checked_mul(scale))
        .ok_or_else(|| format!("--sizes: expected sizes like 4K, 1M or 4096, got {text:?}"))
}

fn parse<T: std::str::FromStr>(option: &str, value: &str, what: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{option}: expected {what}, got {value:?}"))
}

fn settings() -> Result<Settings, String> {
    let mut settings = Settings {
        ops: OPS.map(String::from).to_vec(),
        sizes: "4K,64K,1M,16M,64M,256M"
            .split(',')
            .map(parse_size)
            .collect::<Result<_, _>>()?,
        dtype: DType::F32,
        budget: 1.0,
        min_iters: 5,
        max_iters: 2000,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let option = pair[0].as_str();
        let value = pair
            .get(1)
            .ok_or_else(|| format!("{option} takes a value\n{USAGE}"))?;
        match option {
            "--ops" => {
                settings.ops = value.split(',').map(String::from).collect();
                if let Some(op) = settings.ops.iter().find(|op| !OPS.contains(&op.as_str())) {
                    return Err(format!(
                        "--ops: unknown op {op:?}; expected some of {OPS:?}"
                    ));
                }
            }
            "--sizes" => {
                settings.sizes = value.split(',').map(parse_size).collect::<Result<_, _>>()?
            }
            "--dtype" => {
                settings.dtype = match value.as_str() {
                    "float32" => DType::F32,
                    "bfloat16" => DType::BF16,
                    other => {
                        return Err(format!(
                            "--dtype: expected float32 or bfloat16, got {other:?}"
                        ))
                    }
                }
            }
            "--budget" => settings.budget = parse(option, value, "seconds")?,
            "--min-iters" => settings.min_iters = parse(option, value, "a count")?,
            "--max-iters" => settings.max_iters = parse(option, value, "a count")?,
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    if settings.min_iters > settings.max_iters {
        return Err(format!(
            "--min-iters {} is more than --max-iters {}\n{USAGE}",
            settings.min_iters, settings.max_iters
        ));
    }
    Ok(settings)
}

fn barrier(group: &Group) -> Result<()> {
    distributed::all_sum(&array![1.0], Some(group)).eval()
}

/// Runs `op` once on this rank; returns the output to check.
fn step(op: &str, x: &Array, group: &Group) -> Result<Array> {
    let out = match op {
        "all_sum" => distributed::all_sum(x, Some(group)),
        "all_gather" => distributed::all_gather(x, Some(group)),
        "sum_scatter" => distributed::sum_scatter(x, Some(group)),
        "broadcast" => distributed::broadcast(x, 0, Some(group)),
        "all_to_all" => distributed::all_to_all(x, Some(group)),
        "pingpong" => match group.rank() {
            0 => {
                distributed::send(x, 1, Some(group)).eval()?;
                distributed::recv_like(x, 1, Some(group))
            }
            1 => {
                let got = distributed::recv_like(x, 0, Some(group));
                got.eval()?;
                distributed::send(&got, 0, Some(group)).eval()?;
                got
            }
            _ => x.clone(),
        },
        other => panic!("unknown op {other}"),
    };
    out.eval()?;
    Ok(out)
}

/// The input of `op` on this rank: `bytes` of the big buffer, filled with rank + 1.
fn input(op: &str, bytes: usize, dtype: DType, group: &Group) -> Array {
    let n = group.size();
    let elements = bytes / dtype.size();
    let elements = match op {
        "all_gather" => elements / n,
        "sum_scatter" | "all_to_all" => elements / n * n,
        _ => elements,
    };
    let x = ops::full(&[elements as i32], (group.rank() + 1) as f64, dtype);
    x.eval().expect("input");
    x
}

/// Whether `out` holds what `op` must give on this rank.
fn correct(op: &str, out: &Array, group: &Group) -> Result<bool> {
    let n = group.size() as f32;
    let values = out.astype(DType::F32).to_vec::<f32>()?;
    // A size below one element per rank gives each rank an empty block: nothing to check.
    let (Some(&first), Some(&last)) = (values.first(), values.last()) else {
        return Ok(true);
    };
    Ok(match op {
        "all_sum" | "sum_scatter" => {
            let total = n * (n + 1.0) / 2.0;
            first == total && last == total
        }
        "all_gather" | "all_to_all" => first == 1.0 && last == n,
        "broadcast" => first == 1.0 && last == 1.0,
        "pingpong" => group.rank() > 1 || (first == 1.0 && last == 1.0),
        _ => false,
    })
}

/// What an iteration's time is divided by: a ping-pong's time is one way, half the round
/// trip (as in `../shared/bench` and the peers' figures).
fn one_way(op: &str) -> f64 {
    if op == "pingpong" {
        2.0
    } else {
        1.0
    }
}

fn bus_factor(op: &str, n: usize) -> f64 {
    let n = n as f64;
    match op {
        "all_sum" => 2.0 * (n - 1.0) / n,
        "all_gather" | "sum_scatter" | "all_to_all" => (n - 1.0) / n,
        _ => 1.0,
    }
}

fn time_op(op: &str, bytes: usize, settings: &Settings, group: &Group) -> Result<()> {
    let x = input(op, bytes, settings.dtype, group);
    // Warm-up: two runs, the second timed; all ranks agree on the slowest. Outputs are freed
    // at once, so their memory is recycled as in a steady loop.
    drop(step(op, &x, group)?);
    barrier(group)?;
    let start = Instant::now();
    drop(step(op, &x, group)?);
    let warm = start.elapsed().as_secs_f64();
    let warm = distributed::all_max(&array![warm as f32], Some(group)).item::<f32>()? as f64;
    let iters =
        ((settings.budget / warm.max(1e-7)) as usize).clamp(settings.min_iters, settings.max_iters);
    let mut times = Vec::with_capacity(iters);
    let mut last = None;
    for _ in 0..iters {
        // The previous output goes before the next call, as a training loop's would: the
        // call then reuses its memory instead of faulting in fresh pages.
        drop(last.take());
        barrier(group)?;
        let start = Instant::now();
        last = Some(step(op, &x, group)?);
        times.push((start.elapsed().as_secs_f64() / one_way(op)) as f32);
    }
    let ok = correct(op, last.as_ref().unwrap_or(&x), group)?;
    let all_ok = distributed::all_min(&array![if ok { 1.0 } else { 0.0 }], Some(group))
        .item::<f32>()?
        == 1.0;
    // The time of an iteration is the slowest rank's.
    let times = Array::from_slice(&times, &[iters as i32]);
    let slowest = distributed::all_max(&times, Some(group)).to_vec::<f32>()?;
    if group.rank() == 0 {
        let mut seconds: Vec<f64> = slowest.iter().map(|&t| t as f64).collect();
        let min = seconds.iter().copied().fold(f64::INFINITY, f64::min);
        let median = nuvec_bench::median(&mut seconds);
        let busbw = bytes as f64 / median * bus_factor(op, group.size()) / 1e9;
        println!(
            "{{\"impl\": \"nuvec\", \"op\": \"{op}\", \"bytes\": {bytes}, \"ranks\": {}, \"dtype\": \"{}\", \"iters\": {iters}, \"median_us\": {:.3}, \"min_us\": {:.3}, \"busbw_gbps\": {busbw:.4}, \"ok\": {all_ok}}}",
            group.size(),
            settings.dtype,
            median * 1e6,
            min * 1e6
        );
        if op == "all_sum" && bytes == 4096 {
            let ns = recorder_ns();
            println!(
                "{{\"impl\": \"nuvec\", \"op\": \"recorder\", \"bytes\": {bytes}, \"ranks\": {}, \"recorder_ns\": {ns:.1}, \"all_sum_median_us\": {:.3}, \"share_percent\": {:.2}}}",
                group.size(),
                median * 1e6,
                ns / (median * 1e9) * 100.0
            );
        }
    }
    Ok(())
}

/// The flight recorder's cost per collective: a record begun and ended (what every call of
/// a group adds), in nanoseconds, over a million calls on a recorder of the default size.
fn recorder_ns() -> f64 {
    let trace = distributed::Trace::with_capacity(256);
    let here = std::panic::Location::caller();
    let calls = 1_000_000u32;
    let start = Instant::now();
    for _ in 0..calls {
        let shape = std::hint::black_box(&[1024usize][..]);
        let index = trace.begin("all_sum", (DType::F32, shape), None, here);
        trace.end(index, &Ok(()));
    }
    start.elapsed().as_nanos() as f64 / f64::from(calls)
}

fn main() -> Result<()> {
    if std::env::args().any(|arg| arg == "--help" || arg == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    let settings = match settings() {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("bench_distributed: {message}");
            std::process::exit(2);
        }
    };
    let group = distributed::init(true)?;
    for op in &settings.ops {
        if op == "pingpong" && group.size() < 2 {
            continue;
        }
        for &bytes in &settings.sizes {
            time_op(op, bytes, &settings, &group)?;
        }
    }
    Ok(())
}
