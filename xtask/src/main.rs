//! Project automation, run as `cargo xtask <task>`.
//!
//! - `ci`: what CI checks: formatting, clippy and rustdoc with warnings denied, the whole test
//!   suite.
//! - `demo`: the main job (the README's first command): 4 ranks on loopback.
//! - `golden`: regenerates the MLX fixtures with `scripts/golden/make_*fixtures.py`.
//! - `bench-core`: nuvec's core kernels against numpy, side by side.
//! - `bench-distributed`: nuvec's ring against MLX's ring, side by side (collectives, 2 and 4
//!   ranks, 4 KB to 256 MB), with this machine's ceilings and a bare ring; table, JSON and
//!   SVG.
//! - `bench-plot RUN.json OUT.svg`: the SVG of a recorded `bench-distributed` run, again.
//! - `bench-nn`: a 4-layer MLP's training step on one process and data-parallel on 2 ranks,
//!   and `quantized_matmul` against `matmul`.
//! - `bench-lm`: nuvec-lm against mlx-lm on a model of Qwen2.5-0.5B's shape (bf16 and
//!   4-bit), prompt 512 / generation 128.
//! - `bench-serve`: `nuvec serve` against `mlx_lm.server` on that model, 1, 8 and 32
//!   concurrent streaming clients: throughput and time to first token.
//! - `bench-gpu`: nuvec's arrays on GPU 0 against PyTorch on the same GPU (element-wise
//!   bandwidth, a row reduction, softmax, bf16 matmul, a compiled gelu chain).
//! - `fuzz-mlx [--cases N] [--seed S]`: the differential tester against MLX, a long run.
//! - `tidy`: repository hygiene (also run as a test: `cargo test -p xtask`).

mod bench_bare_ring;
mod bench_core;
mod bench_crosscore;
mod bench_distributed;
mod bench_floor;
mod bench_hosts;
mod bench_lm;
mod bench_lm_parallel;
mod bench_mlx;
mod bench_plot;
mod bench_rounds;
mod bench_serve;
mod bench_table;
mod demo;
mod stats;
mod tidy;
mod tidy_imports;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("demo") => demo::run(),
        Some("golden") => golden(),
        Some("bench-core") => bench_core::run(&args[1..]),
        Some("bench-distributed") => bench_distributed::run_bench(&args[1..]),
        Some("bench-plot") => bench_plot::replot(&args[1..]),
        // Compiled against uncompiled gelu, and the cost per op of small graphs.
        Some("bench-transforms") => run(
            "cargo",
            &["run", "--release", "-p", "nuvec-bench", "--bin", "bench_transforms"],
        ),
        Some("bench-nn") => bench_nn(),
        Some("bench-lm") => bench_lm::run_bench(&args[1..]),
        Some("bench-serve") => bench_serve::run_bench(&args[1..]),
        Some("bench-gpu") => run(
            "cargo",
            &[
                "run",
                "--release",
                "-p",
                "nuvec-bench",
                "--features",
                "cuda",
                "--bin",
                "bench_gpu",
            ],
        ),
        Some("fuzz-mlx") => fuzz_mlx(&args[1..]),
        Some("tidy") => tidy::check(&workspace_root()).map(|_| println!("tidy: ok")),
        _ => Err(
            "usage: cargo xtask <ci | demo | golden | bench-core | bench-distributed | bench-plot | bench-transforms | bench-nn | bench-lm | bench-serve | bench-gpu | fuzz-mlx | tidy>"
                .to_string(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask bench-nn`: the nn benchmark alone, then under `nuvec launch -n 2`.
fn bench_nn() -> Result<(), String> {
    run(
        "cargo",
        &[
            "build",
            "--release",
            "-p",
            "nuvec-cli",
            "--bin",
            "nuvec",
            "-p",
            "nuvec-bench",
            "--bin",
            "bench_nn",
        ],
    )?;
    let root = workspace_root();
    let bench = root.join("target/release/bench_nn");
    run(&bench.to_string_lossy(), &[])?;
    let start = free_port_range(2)?;
    run(
        &root.join("target/release/nuvec").to_string_lossy(),
        &[
            "launch",
            "-n",
            "2",
            "--starting-port",
            &start.to_string(),
            "--",
            &bench.to_string_lossy(),
        ],
    )
}

/// The workspace root (the parent of this crate's folder).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// A start port with `n` free loopback ports after it (for the ring's consecutive ports).
pub(crate) fn free_port_range(n: usize) -> Result<u16, String> {
    for _ in 0..100 {
        let start = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("finding a free port: {e}"))?
            .port();
        let free = (0..n as u16).all(|i| {
            start
                .checked_add(i)
                .is_some_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        });
        if free {
            return Ok(start);
        }
    }
    Err(format!("no range of {n} free ports found"))
}

/// Runs `command` with no input and returns its stdout; a command that cannot start is
/// `"running {what}: …"`, one that fails is `"{failed} ({status}): {stderr}"`.
pub(crate) fn stdout_of(
    command: &mut Command,
    what: &str,
    failed: &str,
) -> Result<Vec<u8>, String> {
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("running {what}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{failed} ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        ));
    }
    Ok(output.stdout)
}

/// Runs a command in the workspace root, failing with its status.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<(), String> {
    eprintln!("$ {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .current_dir(workspace_root())
        .status()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} {} failed with {status}", args.join(" ")))
    }
}

/// `cargo xtask fuzz-mlx [--cases N] [--seed S]`: the differential tester's long run (random
/// programs in nuvec and in MLX 0.32.4), in release; differences are written, shrunk, to
/// `target/mlx-diff-failures.json`.
fn fuzz_mlx(args: &[String]) -> Result<(), String> {
    let mut command = Command::new("cargo");
    command.args([
        "test",
        "--release",
        "-p",
        "nuvec",
        "--test",
        "mlx_differential",
        "--",
        "--ignored",
        "--nocapture",
        "long_run",
    ]);
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let variable = match flag.as_str() {
            "--cases" => "NUVEC_MLX_FUZZ_CASES",
            "--seed" => "NUVEC_MLX_FUZZ_SEED",
            other => {
                return Err(format!(
                    "fuzz-mlx: unknown option {other} (--cases N, --seed S)"
                ))
            }
        };
        let value = rest
            .next()
            .filter(|v| v.parse::<u64>().is_ok())
            .ok_or_else(|| format!("fuzz-mlx: {flag} needs a number"))?;
        command.env(variable, value);
    }
    let status = command.status().map_err(|e| format!("cargo test: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err("fuzz-mlx found differences (target/mlx-diff-failures.json)".into())
    }
}

fn ci() -> Result<(), String> {
    run("cargo", &["fmt", "--all", "--check"])?;
    run(
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    let status = Command::new("cargo")
        .args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings")
        .status()
        .map_err(|e| format!("cargo doc: {e}"))?;
    if !status.success() {
        return Err(format!(
            "cargo doc --workspace --no-deps failed with {status}"
        ));
    }
    run("cargo", &["test", "--workspace"])
}

fn golden() -> Result<(), String> {
    let venv_python = workspace_root().join(".venv-mlx/bin/python");
    if !venv_python.exists() {
        run("python3", &["-m", "venv", ".venv-mlx"])?;
        run(
            ".venv-mlx/bin/pip",
            &["install", "mlx[cpu]==0.32.4", "numpy"],
        )?;
    }
    run(".venv-mlx/bin/python", &["scripts/golden/make_fixtures.py"])?;
    run(
        ".venv-mlx/bin/python",
        &["scripts/golden/make_grad_fixtures.py"],
    )?;
    run(
        ".venv-mlx/bin/python",
        &["scripts/golden/make_nn_fixtures.py"],
    )?;
    // nuvec-lm's model folders need mlx-lm (with transformers and tokenizers).
    run(
        ".venv-mlx/bin/pip",
        &["install", "--quiet", "mlx-lm==0.32.2"],
    )?;
    run(
        ".venv-mlx/bin/python",
        &["scripts/golden/make_lm_fixtures.py"],
    )
}
