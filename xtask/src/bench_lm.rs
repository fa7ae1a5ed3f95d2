//! `cargo xtask bench-lm`: nuvec-lm against mlx-lm on a model of Qwen2.5-0.5B's shape made
//! here (bfloat16 and its 4-bit conversion), prompt 512 / generation 128, the two sides
//! alternating, each in its own process: tokens per second, peak resident memory and load
//! time, with each side's share of this machine's rooflines.
//!
//! Options: `--prompt N` (512), `--generate N` (128), `--rounds N` (1), `--models DIR`
//! (target/lm-bench), `--only bf16|4bit`; `--parallel` runs the multi-rank comparison of
//! `bench_lm_parallel` instead.

use crate::bench_mlx::mlx_python;
use crate::{run, stdout_of, workspace_root};
use std::path::Path;
use std::process::Command;

/// One side's figures for one run.
#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    prompt_tps: f64,
    generation_tps: f64,
    peak_gb: f64,
    load_s: f64,
}

/// The number after `key=` in a line of `key=value` fields.
pub(crate) fn field(line: &str, key: &str) -> Option<f64> {
    line.split([' ', ',']).find_map(|part| {
        part.trim()
            .strip_prefix(key)?
            .strip_prefix('=')?
            .parse()
            .ok()
    })
}

fn ours(binary: &Path, model: &Path, prompt: usize, generate: usize) -> Result<Figures, String> {
    let out = stdout_of(
        Command::new(binary).args([
            "--model",
            &model.to_string_lossy(),
            "-p",
            &prompt.to_string(),
            "-g",
            &generate.to_string(),
            "-n",
            "1",
        ]),
        "bench_lm",
        "bench_lm failed",
    )?;
    let text = String::from_utf8_lossy(&out);
    let mut figures = Figures::default();
    for line in text.lines() {
        if let Some(v) = field(line, "load_s") {
            figures.load_s = v;
        }
        if let (Some(p), Some(g), Some(m)) = (
            field(line, "prompt_tps"),
            field(line, "generation_tps"),
            field(line, "peak_gb"),
        ) {
            (figures.prompt_tps, figures.generation_tps, figures.peak_gb) = (p, g, m);
        }
    }
    Ok(figures)
}

/// mlx_lm.benchmark (its warm-up and one trial) in a Python that also reports its own peak
/// resident memory, and mlx_lm.load's time in another.
fn theirs(python: &Path, model: &Path, prompt: usize, generate: usize) -> Result<Figures, String> {
    let script = format!(
        "import resource, runpy, sys\n\
         sys.argv = ['mlx_lm.benchmark', '--model', {model:?}, '-p', '{prompt}', '-g', '{generate}', '-n', '1']\n\
         runpy.run_module('mlx_lm.benchmark', run_name='__main__')\n\
         print('peak_rss_gb=%.3f' % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9))\n",
        model = model.to_string_lossy()
    );
    let out = stdout_of(
        Command::new(python).args(["-c", &script]),
        "mlx_lm.benchmark",
        "mlx_lm.benchmark failed",
    )?;
    let text = String::from_utf8_lossy(&out);
    let mut figures = Figures::default();
    for line in text.lines() {
        if line.starts_with("Trial") {
            figures.prompt_tps = field(line, "prompt_tps").unwrap_or(0.0);
            figures.generation_tps = field(line, "generation_tps").unwrap_or(0.0);
        }
        if let Some(v) = field(line, "peak_rss_gb") {
            figures.peak_gb = v;
        }
    }
    let load = format!(
        "import time\nfrom mlx_lm import load\nt = time.perf_counter()\nload({:?})\nprint('load_s=%.3f' % (time.perf_counter() - t))\n",
        model.to_string_lossy()
    );
    let out = stdout_of(
        Command::new(python).args(["-c", &load]),
        "mlx_lm.load",
        "mlx_lm.load failed",
    )?;
    figures.load_s = String::from_utf8_lossy(&out)
        .lines()
        .find_map(|l| field(l, "load_s"))
        .unwrap_or(0.0);
    Ok(figures)
}

/// MLX's Python with mlx-lm (installed into .venv-mlx when missing), after making the models
/// of Qwen2.5-0.5B's shape in `models` (kept when they exist).
pub(crate) fn make_models(root: &Path, models: &Path) -> Result<std::path::PathBuf, String> {
    let python = mlx_python(root)?;
    let has_lm = Command::new(&python)
        .args(["-c", "import mlx_lm"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_lm {
        run(
            ".venv-mlx/bin/pip",
            &["install", "--quiet", "mlx-lm==0.32.2"],
        )?;
    }
    run(
        &python.to_string_lossy(),
        &[
            "scripts/bench/make_lm_bench_model.py",
            &models.to_string_lossy(),
        ],
    )?;
    Ok(python)
}

/// The value after `name` in `args`, or `default`.
pub(crate) fn option(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

pub(crate) fn run_bench(args: &[String]) -> Result<(), String> {
    let number = |name: &str, default: &str| -> Result<usize, String> {
        option(args, name, default)
            .parse()
            .map_err(|_| format!("{name} needs a number"))
    };
    let (prompt, generate, rounds) = (
        number("--prompt", "512")?,
        number("--generate", "128")?,
        number("--rounds", "1")?,
    );
    let root = workspace_root();
    let models = root.join(option(args, "--models", "target/lm-bench"));
    let only = option(args, "--only", "");
    let python = make_models(&root, &models)?;
    run(
        "cargo",
        &[
            "build",
            "--release",
            "-p",
            "nuvec-bench",
            "--bin",
            "bench_lm",
        ],
    )?;
    run("cargo", &["build", "--release", "-p", "nuvec-cli"])?;
    if args.iter().any(|a| a == "--parallel") {
        return crate::bench_lm_parallel::run_parallel(&models, prompt, generate);
    }
    let binary = root.join("target/release/bench_lm");
    // This machine's ceilings: bytes of weights read per generated token at the memory
    // bandwidth of one core, and the prompt's multiply-adds at the matrix products' rate.
    let (bandwidth, flops) = (8.5e9, 120e9);
    println!("| model | side | prompt tok/s | generation tok/s | peak GB | load s | generation / memory roofline | prompt / matmul roofline |");
    println!("|---|---|---|---|---|---|---|---|");
    for (name, folder) in [
        ("bf16", "qwen2.5-0.5b-shape-bf16"),
        ("4bit", "qwen2.5-0.5b-shape-4bit"),
    ] {
        if !only.is_empty() && only != name {
            continue;
        }
        let dir = models.join(folder);
        let weight_bytes: u64 = std::fs::read_dir(&dir)
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
            .filter_map(|e| e.metadata().ok().map(|m| m.len()))
            .sum();
        let generation_roof = bandwidth / weight_bytes as f64;
        // About 2 FLOPs per parameter per token; 494M parameters in this shape.
        let prompt_roof = flops / (2.0 * 494e6);
        for round in 0..rounds {
            for side in ["nuvec-lm", "mlx-lm"] {
                let f = if side == "nuvec-lm" {
                    ours(&binary, &dir, prompt, generate)?
                } else {
                    theirs(&python, &dir, prompt, generate)?
                };
                println!(
                    "| {name} (round {}) | {side} | {:.1} | {:.2} | {:.3} | {:.2} | {:.0}% | {:.0}% |",
                    round + 1,
                    f.prompt_tps,
                    f.generation_tps,
                    f.peak_gb,
                    f.load_s,
                    100.0 * f.generation_tps / generation_roof,
                    100.0 * f.prompt_tps / prompt_roof
                );
            }
        }
    }
    Ok(())
}
