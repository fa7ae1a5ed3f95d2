//! MLX's side of `bench-distributed`: MLX 0.32.4's ring running
//! `scripts/bench/mlx_collectives.py`. On this machine its ranks start directly with the ring's
//! environment (`MLX_RANK`, `MLX_HOSTFILE`), since mlx.launch spins a core while they run;
//! with a hostfile that reaches other hosts, through `mlx.launch` (`bench_hosts.rs`).

use crate::bench_distributed::{rank_args, records, Options};
use crate::bench_hosts::{mlx_launch, ring_addresses, Hosts};
use crate::{free_port_range, run, stdout_of};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

macro_rules! progress {
    ($($arg:tt)*) => {{
        eprintln!("bench-distributed: {}", format_args!($($arg)*));
    }};
}

/// The rank program.
const SCRIPT: &str = "scripts/bench/mlx_collectives.py";

/// MLX's ring running `op` on `n` ranks of this machine, or on the ranks of `hosts`.
pub(crate) fn run_mlx(
    root: &Path,
    python: &Path,
    (n, hosts): (usize, Option<&Hosts>),
    (op, dtype): (&str, &str),
    options: &Options,
) -> Result<Vec<Value>, String> {
    let start = free_port_range(n)?;
    let addresses = match hosts {
        None => {
            let entries: Vec<String> = (0..n)
                .map(|r| format!("[\"127.0.0.1:{}\"]", start + r as u16))
                .collect();
            format!("[{}]", entries.join(", "))
        }
        // JACCL needs mlx.launch's device file and coordinator, wherever the hosts are.
        Some(hosts) if hosts.local && options.backend == "ring" => {
            ring_addresses(root, hosts, start)?
        }
        Some(hosts) => {
            let mut command =
                mlx_launch(python, hosts, start, &root.join(SCRIPT), &options.backend);
            command.args(rank_args(op, dtype, options));
            if options.backend != "ring" {
                command.args(["--backend", "jaccl"]);
            }
            return Ok(records(&stdout_of(
                &mut command,
                "mlx.launch",
                "mlx.launch failed",
            )?));
        }
    };
    let hostfile =
        std::env::temp_dir().join(format!("nuvec-bench-mlx-{}.json", std::process::id()));
    std::fs::write(&hostfile, addresses).map_err(|e| e.to_string())?;
    let mut children = Vec::new();
    for rank in 0..n {
        children.push(
            Command::new(python)
                .arg(root.join(SCRIPT))
                .args(rank_args(op, dtype, options))
                .env("MLX_RANK", rank.to_string())
                .env("MLX_HOSTFILE", &hostfile)
                .stdin(Stdio::null())
                .stdout(if rank == 0 {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("starting MLX rank {rank}: {e}"))?,
        );
    }
    let mut stdout = Vec::new();
    if let Some(mut out) = children[0].stdout.take() {
        let _ = out.read_to_end(&mut stdout);
    }
    let mut failure = None;
    for (rank, child) in children.iter_mut().enumerate() {
        let status = child.wait().map_err(|e| e.to_string())?;
        if !status.success() && failure.is_none() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            failure = Some(format!("MLX rank {rank} failed ({status}): {err}"));
        }
    }
    let _ = std::fs::remove_file(&hostfile);
    match failure {
        Some(reason) => Err(reason),
        None => Ok(records(&stdout)),
    }
}

/// MLX's Python: `.venv-mlx` (created with `pip install "mlx[cpu]==0.32.4"` when missing).
pub(crate) fn mlx_python(root: &Path) -> Result<PathBuf, String> {
    let python = root.join(".venv-mlx/bin/python");
    if !python.exists() {
        progress!("installing MLX 0.32.4 into .venv-mlx (python3 -m venv; pip install \"mlx[cpu]==0.32.4\")");
        run("python3", &["-m", "venv", ".venv-mlx"])?;
        run(
            ".venv-mlx/bin/pip",
            &["install", "--quiet", "mlx[cpu]==0.32.4"],
        )?;
    }
    let check = Command::new(&python)
        .args(["-c", "import mlx.core as mx; print(mx.__version__)"])
        .output()
        .map_err(|e| e.to_string())?;
    let version = String::from_utf8_lossy(&check.stdout).trim().to_string();
    if !check.status.success() {
        return Err(format!(
            "{} cannot import mlx: {}",
            python.display(),
            String::from_utf8_lossy(&check.stderr)
        ));
    }
    if version != "0.32.4" {
        progress!("note: .venv-mlx has MLX {version}, not 0.32.4");
    }
    Ok(python)
}
