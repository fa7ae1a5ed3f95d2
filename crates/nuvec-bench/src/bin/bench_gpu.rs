//! `cargo xtask bench-gpu`: nuvec's arrays on GPU 0 against PyTorch on the same GPU, in one run
//! (`scripts/bench/torch_gpu.py` times PyTorch's side the same way). Each figure is the median
//! of 10 timed runs after 3 warm-ups, each run timed between CUDA events recorded on the
//! device's stream before and after it (as `torch.cuda.Event` times PyTorch's); the ops run
//! through the array API (`Device::Gpu`), so graph building and evaluation are counted where
//! the device waits for them.

use nuvec::transforms::compile;
use nuvec::{ops, random, with_default_device, Array, DType, Device};
use std::process::{Command, ExitCode};

/// One figure: its name, what it moves or computes, and how that is reported.
struct Case {
    name: &'static str,
    /// Bytes moved (read + written) or floating-point operations.
    work: f64,
    /// `GB/s` or `TFLOP/s`.
    unit: &'static str,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench-gpu: {message}");
            ExitCode::FAILURE
        }
    }
}

fn gelu(v: &[Array]) -> Vec<Array> {
    let x = &v[0];
    let cube = ops::multiply(ops::multiply(x, x), x);
    let inner = ops::multiply(ops::add(x, ops::multiply(cube, 0.044715)), 0.797_884_6);
    vec![ops::multiply(
        ops::multiply(x, 0.5),
        ops::add(ops::tanh(&inner), 1.0),
    )]
}

fn run() -> Result<(), String> {
    let gpu = Device::Gpu(0);
    if let Some(reason) = gpu.unavailable_reason() {
        return Err(format!("no GPU to measure: {reason}"));
    }
    let device = nuvec::cuda::gpu(0).map_err(|e| e.to_string())?;
    println!("bench-gpu: {} ({})", device.name(), device.arch());
    let n: i32 = 1 << 28;
    let (x, y, rows, a, b) = with_default_device(gpu, || {
        let key = random::key(0);
        let keys = random::split(&key, 2);
        let x = random::uniform(
            0.0,
            1.0,
            &[n],
            DType::F32,
            Some(&ops::take(&keys, &Array::scalar(0i32), Some(0))),
        );
        let y = random::uniform(
            0.0,
            1.0,
            &[n],
            DType::F32,
            Some(&ops::take(&keys, &Array::scalar(1i32), Some(0))),
        );
        let rows = ops::reshape(&x, &[1 << 16, 1 << 12]);
        let a = random::normal(&[8192, 8192], DType::BF16, Some(&key));
        let b = random::normal(
            &[8192, 8192],
            DType::BF16,
            Some(&ops::take(&keys, &Array::scalar(1i32), Some(0))),
        );
        (x, y, rows, a, b)
    });
    nuvec::eval(&[x.clone(), y.clone(), rows.clone(), a.clone(), b.clone()])
        .map_err(|e| e.to_string())?;
    device.synchronize().map_err(|e| e.to_string())?;
    let gib = f64::from(n) * 4.0;
    let compiled = compile(gelu);
    let cases: Vec<(Case, Box<dyn Fn() -> Array>)> = vec![
        (
            Case {
                name: "copy",
                work: 2.0 * gib,
                unit: "GB/s",
            },
            // Timed apart, on nuvec's copy kernel (below): this closure is not run.
            Box::new(|| x.clone()),
        ),
        (
            Case {
                name: "x + 1",
                work: 2.0 * gib,
                unit: "GB/s",
            },
            Box::new(|| ops::add(&x, 1.0)),
        ),
        (
            Case {
                name: "add",
                work: 3.0 * gib,
                unit: "GB/s",
            },
            Box::new(|| ops::add(&x, &y)),
        ),
        (
            Case {
                name: "exp",
                work: 2.0 * gib,
                unit: "GB/s",
            },
            Box::new(|| ops::exp(&x)),
        ),
        (
            Case {
                name: "sum_rows",
                work: gib,
                unit: "GB/s",
            },
            Box::new(|| ops::sum(&rows, [1], false)),
        ),
        (
            Case {
                name: "softmax",
                work: 2.0 * gib,
                unit: "GB/s",
            },
            Box::new(|| ops::softmax(&rows, [1])),
        ),
        (
            Case {
                name: "matmul_bf16",
                work: 2.0 * 8192f64.powi(3),
                unit: "TFLOP/s",
            },
            Box::new(|| ops::matmul(&a, &b)),
        ),
        (
            Case {
                name: "gelu_compiled",
                work: 2.0 * gib,
                unit: "GB/s",
            },
            Box::new(|| {
                compiled
                    .call(std::slice::from_ref(&x))
                    .map(|mut v| v.remove(0))
                    .unwrap_or_else(Array::failed)
            }),
        ),
    ];
    // The copy ceiling: nuvec's copy kernel between two 1 GiB buffers.
    let (src, mut dst) = (
        device.alloc(gib as usize).map_err(|e| e.to_string())?,
        device.alloc(gib as usize).map_err(|e| e.to_string())?,
    );
    let words = u64::from(n.unsigned_abs());
    let flat =
        nuvec::cuda::ops::Dims::copy(&[words as i64], &[1], &[1]).map_err(|e| e.to_string())?;
    let copy = device_median(&device, &mut || {
        nuvec::cuda::ops::copy_into(&device, (&src, 0), (&mut dst, 0), 4, (words, &flat))
            .map_err(|e| e.to_string())
    })?;
    let mut ours = vec![copy];
    for (case, op) in cases.iter().skip(1) {
        let time = device_median(&device, &mut || {
            let out = with_default_device(gpu, op);
            out.eval().map_err(|e| format!("{}: {e}", case.name))
        })?;
        ours.push(time);
    }
    let torch = torch_times()?;
    let rate = |case: &Case, seconds: f64| {
        let scale = if case.unit == "TFLOP/s" { 1e12 } else { 1e9 };
        case.work / seconds / scale
    };
    let copy_rate = rate(&cases[0].0, ours[0]);
    println!("| op | nuvec | PyTorch | nuvec / PyTorch | nuvec / our copy |");
    println!("|---|---|---|---|---|");
    for ((case, _), &seconds) in cases.iter().zip(&ours) {
        let theirs = torch.get(case.name).and_then(serde_json::Value::as_f64);
        let mine = rate(case, seconds);
        let (their_rate, ratio) = match theirs {
            Some(t) => (
                format!("{:.1} {}", rate(case, t), case.unit),
                format!("{:.2}", mine / rate(case, t)),
            ),
            None => ("n/a".into(), "n/a".into()),
        };
        let of_copy = if case.unit == "GB/s" {
            format!("{:.2}", mine / copy_rate)
        } else {
            "-".into()
        };
        println!(
            "| {} | {mine:.1} {} | {their_rate} | {ratio} | {of_copy} |",
            case.name, case.unit
        );
    }
    Ok(())
}

/// The median device time of `run`, in seconds: 3 warm-ups, then 10 runs, each between two
/// events recorded on the device's stream.
fn device_median(
    device: &nuvec::cuda::Gpu,
    run: &mut dyn FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    let failed = |e: nuvec::cuda::CudaError| e.to_string();
    for _ in 0..3 {
        run()?;
    }
    device.synchronize().map_err(failed)?;
    let mut times = Vec::new();
    for _ in 0..10 {
        let start = device.mark().map_err(failed)?;
        run()?;
        let end = device.mark().map_err(failed)?;
        times.push(end.since(&start).map_err(failed)?.as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// PyTorch's times, from `scripts/bench/torch_gpu.py` (`NUVEC_TORCH_PYTHON` or `python3`).
fn torch_times() -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let python = std::env::var("NUVEC_TORCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = std::env::var("NUVEC_TORCH_SCRIPT").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/bench/torch_gpu.py"
        )
        .into()
    });
    let output = Command::new(&python)
        .arg(&script)
        .output()
        .map_err(|e| format!("running {python} {script}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{python} {script} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().last().unwrap_or_default();
    match serde_json::from_str(line) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        _ => Err(format!("{script} printed no JSON object: {text}")),
    }
}
