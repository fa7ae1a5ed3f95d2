//! `cargo xtask bench-distributed`: nuvec's ring against MLX 0.32.4's ring, side by side, in
//! one run on this machine (or the hosts of `--hostfile`), with Open MPI over TCP (its own
//! collectives, through nuvec's MPI backend) and nuvec over JACCL's mesh on the emulated
//! fabric as further columns.
//!
//! For each rank count and collective it runs nuvec's rank program
//! (`examples/bench_distributed.rs`, started by `nuvec launch`) and MLX's
//! (`scripts/bench/mlx_collectives.py`, started directly with the ring's environment, since
//! mlx.launch spins a core), alternating which goes first. Both use the nccl-tests conventions
//! (big-buffer bytes, bus-bandwidth factors, a barrier before each iteration, the slowest
//! rank's time, the median). It also measures this machine's ceilings (`bench_floor.rs`):
//! single-core memcpy and reduction bandwidth and loopback TCP, from which each row gets a
//! floor, the least time its bytes take through loopback plus its reductions' CPU time.
//! Output: a table (stdout and target/bench-distributed.md), target/bench-distributed.json
//! and an SVG plot of bus bandwidth against size (target/bench-distributed.svg).
//! `--repeat N` runs every side N times and reports medians of the rounds' medians
//! (`bench_rounds.rs`); each run records how much CPU time the hypervisor stole meanwhile.

use crate::bench_floor::{lands_in_outputs, memcpy_ceiling, Ceilings};
use crate::bench_rounds::{cpu_ticks, describe_steal, mark_steal, merge, steal_percent};
use crate::{free_port_range, run, workspace_root};
use serde_json::{json, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

macro_rules! progress {
    ($($arg:tt)*) => {{
        eprintln!("bench-distributed: {}", format_args!($($arg)*));
    }};
}

struct Options {
    ranks: Vec<usize>,
    ops: Vec<String>,
    sizes: String,
    dtypes: Vec<String>,
    budget: String,
    /// The fewest timed iterations of a size: enough for a steady median of the large sizes
    /// on a shared machine (nccl-tests times 20).
    min_iters: String,
    /// How many times each side runs each collective (rounds alternate which goes first).
    repeat: usize,
    mlx: bool,
    mpi: bool,
    jaccl: bool,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        ranks: vec![2, 4],
        ops: ["all_sum", "all_gather", "sum_scatter", "pingpong"]
            .map(String::from)
            .to_vec(),
        sizes: "4K,64K,1M,16M,64M,256M".into(),
        dtypes: vec!["float32".into()],
        budget: "1.0".into(),
        min_iters: "15".into(),
        repeat: 1,
        mlx: true,
        mpi: true,
        jaccl: true,
    };
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        if flag == "--no-mlx" {
            options.mlx = false;
            continue;
        }
        if flag == "--no-mpi" {
            options.mpi = false;
            continue;
        }
        if flag == "--no-jaccl" {
            options.jaccl = false;
            continue;
        }
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--ranks" => {
                options.ranks = value
                    .split(',')
                    .map(|r| r.parse().map_err(|_| format!("--ranks: {r:?} is not a count")))
                    .collect::<Result<_, _>>()?;
            }
            "--ops" => options.ops = value.split(',').map(String::from).collect(),
            "--sizes" => options.sizes = value.clone(),
            "--dtypes" => options.dtypes = value.split(',').map(String::from).collect(),
            "--budget" => options.budget = value.clone(),
            "--min-iters" => match value.parse::<usize>() {
                Ok(n) if n >= 1 => options.min_iters = value.clone(),
                _ => return Err(format!("--min-iters: {value:?} is not a count of at least 1")),
            },
            "--repeat" => match value.parse::<usize>() {
                Ok(n) if n >= 1 => options.repeat = n,
                _ => return Err(format!("--repeat: {value:?} is not a count of at least 1")),
            },
            other => {
                return Err(format!(
                    "unknown option {other} (--ranks 2,4 --ops all_sum,... --sizes 4K,... --dtypes float32,bfloat16 --budget SECONDS --min-iters N --repeat N --no-mlx --no-mpi --no-jaccl)"
                ))
            }
        }
    }
    Ok(options)
}

/// The options both rank programs (nuvec's and MLX's) take.
fn rank_args<'a>(op: &'a str, dtype: &'a str, options: &'a Options) -> [&'a str; 10] {
    [
        "--ops",
        op,
        "--sizes",
        &options.sizes,
        "--dtype",
        dtype,
        "--budget",
        &options.budget,
        "--min-iters",
        &options.min_iters,
    ]
}

/// The JSON lines a run's rank 0 printed.
fn records(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
        .collect()
}

/// The Open MPI options of the peer column: TCP only (no shared memory), and ranks that
/// yield their core while they wait, as Open MPI does itself when it knows a machine is
/// oversubscribed (`nuvec launch` gives mpirun one slot per rank, so it does not know).
const OPEN_MPI_TCP: &str = "--mca btl self,tcp --mca mpi_yield_when_idle 1";

/// nuvec's rank program under `nuvec launch` with `backend`: `ring`, `mpi` (Open MPI over
/// TCP, which `nuvec launch` starts with `mpirun`: the collectives are Open MPI's own, called
/// through nuvec's MPI backend) or `jaccl` (JACCL's mesh on the emulated fabric).
fn run_ours(
    root: &Path,
    n: usize,
    (op, dtype): (&str, &str),
    options: &Options,
    backend: &str,
) -> Result<Vec<Value>, String> {
    let port = free_port_range(n)?.to_string();
    let mut command = Command::new(root.join("target/release/nuvec"));
    command.args(["launch", "-n", &n.to_string(), "--backend", backend]);
    if backend == "mpi" {
        command.args(["--mpi-arg", OPEN_MPI_TCP]);
    } else {
        command.args(["-p", &port, "--no-prefix"]);
    }
    let output = command
        .arg("--")
        .arg(root.join("target/release/examples/bench_distributed"))
        .args(rank_args(op, dtype, options))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running nuvec launch: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "nuvec's ranks failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(records(&output.stdout))
}

/// One side's run of `op` on `n` ranks. nuvec's failure ends the benchmark; a peer's is
/// reported and leaves its column empty.
fn run_side(
    side: &str,
    root: &Path,
    python: Option<&Path>,
    n: usize,
    (op, dtype): (&str, &str),
    options: &Options,
) -> Result<Vec<Value>, String> {
    let peer = match (side, python) {
        ("nuvec", _) => return run_ours(root, n, (op, dtype), options, "ring"),
        ("open-mpi-tcp", _) => run_ours(root, n, (op, dtype), options, "mpi")
            .map_err(|e| format!("Open MPI over TCP failed: {e}")),
        ("nuvec-jaccl", _) => run_ours(root, n, (op, dtype), options, "jaccl")
            .map_err(|e| format!("nuvec over JACCL (emulated) failed: {e}")),
        ("mlx", Some(python)) => {
            run_mlx(root, python, n, op, dtype, options).map_err(|e| format!("MLX failed: {e}"))
        }
        _ => Ok(Vec::new()),
    };
    Ok(peer.unwrap_or_else(|reason| {
        progress!("{reason}");
        Vec::new()
    }))
}

/// Whether `mpirun` is on `PATH` (for the MPI column).
fn has_mpirun() -> bool {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .any(|dir| dir.join("mpirun").is_file())
}

fn run_mlx(
    root: &Path,
    python: &Path,
    n: usize,
    op: &str,
    dtype: &str,
    options: &Options,
) -> Result<Vec<Value>, String> {
    let start = free_port_range(n)?;
    let hostfile =
        std::env::temp_dir().join(format!("nuvec-bench-mlx-{}.json", std::process::id()));
    let entries: Vec<String> = (0..n)
        .map(|r| format!("[\"127.0.0.1:{}\"]", start + r as u16))
        .collect();
    std::fs::write(&hostfile, format!("[{}]", entries.join(", "))).map_err(|e| e.to_string())?;
    let mut children = Vec::new();
    for rank in 0..n {
        children.push(
            Command::new(python)
                .arg(root.join("scripts/bench/mlx_collectives.py"))
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
fn mlx_python(root: &Path) -> Result<PathBuf, String> {
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

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{} MB", b >> 20),
        b if b >= 1 << 10 => format!("{} KB", b >> 10),
        b => format!("{b} B"),
    }
}

fn us(value: f64) -> String {
    if value >= 1000.0 {
        format!("{:.2} ms", value / 1000.0)
    } else {
        format!("{value:.0} µs")
    }
}

fn key(record: &Value) -> (String, u64, u64, String) {
    (
        record["op"].as_str().unwrap_or_default().to_string(),
        record["ranks"].as_u64().unwrap_or_default(),
        record["bytes"].as_u64().unwrap_or_default(),
        record["dtype"].as_str().unwrap_or_default().to_string(),
    )
}

/// The median and bus bandwidth of the record matching `k` in `records`, as table cells, and
/// the median itself.
fn cells(records: &[Value], k: &(String, u64, u64, String)) -> (String, String, f64) {
    match records.iter().find(|t| key(t) == *k) {
        Some(t) if t.get("error").is_none() => {
            let m = t["median_us"].as_f64().unwrap_or(f64::NAN);
            let bw = t["busbw_gbps"].as_f64().unwrap_or(f64::NAN);
            (us(m), format!("{bw:.3}"), m)
        }
        Some(_) => ("unsupported".into(), "–".into(), f64::NAN),
        None => ("–".into(), "–".into(), f64::NAN),
    }
}

fn ratio(mine: f64, other: f64) -> String {
    if other.is_nan() {
        "–".into()
    } else {
        format!("{:.3}", mine / other)
    }
}

fn table(
    ours: &[Value],
    theirs: &[Value],
    (mpi, jaccl): (&[Value], &[Value]),
    ceilings: &Ceilings,
) -> String {
    let mut out = String::from(
        "| op | ranks | dtype | size | nuvec median | MLX median | nuvec / MLX | nuvec busbw GB/s | MLX busbw GB/s | floor (loopback + reductions) | nuvec / floor | Open MPI TCP median | nuvec / Open MPI TCP | JACCL (emulated) median | JACCL busbw GB/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for record in ours {
        let k = key(record);
        let mine = record["median_us"].as_f64().unwrap_or(f64::NAN);
        let (their_median, their_bw, theirs_us) = cells(theirs, &k);
        let (mpi_median, _, mpi_us) = cells(mpi, &k);
        let (jaccl_median, jaccl_bw, _) = cells(jaccl, &k);
        let checked = if record["ok"].as_bool() == Some(true) {
            ""
        } else {
            " (WRONG RESULT)"
        };
        let floor = ceilings.floor_us(&k.0, k.1, k.2);
        out += &format!(
            "| {} | {} | {} | {} | {}{checked} | {their_median} | {} | {:.3} | {their_bw} | {} | {} | {mpi_median} | {} | {jaccl_median} | {jaccl_bw} |\n",
            k.0,
            k.1,
            k.3,
            human(k.2),
            us(mine),
            ratio(mine, theirs_us),
            record["busbw_gbps"].as_f64().unwrap_or(f64::NAN),
            us(floor),
            ratio(mine, floor),
            ratio(mine, mpi_us),
        );
    }
    out
}

pub(crate) fn run_bench(args: &[String]) -> Result<(), String> {
    let options = options(args)?;
    let root = workspace_root();
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
            "nuvec",
            "--example",
            "bench_distributed",
        ],
    )?;
    let python = if options.mlx {
        match mlx_python(&root) {
            Ok(python) => Some(python),
            Err(reason) => {
                progress!("MLX is not available ({reason}); printing nuvec's numbers alone");
                None
            }
        }
    } else {
        None
    };
    let mpi = options.mpi && has_mpirun();
    if options.mpi && !mpi {
        progress!("mpirun is not on PATH (install openmpi-bin); no Open MPI column");
    }
    progress!("measuring this machine's ceilings");
    let memcpy = memcpy_ceiling();
    let mut ceilings = Ceilings::measure(&options.ranks)?;
    let tcp = ceilings.one;
    progress!(
        "single-core memcpy {memcpy:.2} GB/s; {}",
        ceilings.describe()
    );
    let (mut ours, mut theirs, mut over_mpi, mut over_jaccl) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // The sides that run, each going first in turn.
    let sides: Vec<&str> = ["nuvec", "mlx", "open-mpi-tcp", "nuvec-jaccl"]
        .into_iter()
        .filter(|side| match *side {
            "mlx" => python.is_some(),
            "open-mpi-tcp" => mpi,
            "nuvec-jaccl" => options.jaccl,
            _ => true,
        })
        .collect();
    let mut turn = 0;
    for round in 1..=options.repeat {
        let of = if options.repeat > 1 {
            format!(", round {round} of {}", options.repeat)
        } else {
            String::new()
        };
        for &n in &options.ranks {
            for dtype in &options.dtypes {
                for op in &options.ops {
                    let mut order = sides.clone();
                    order.rotate_left(turn % sides.len());
                    turn += 1;
                    for side in order {
                        progress!("{n} ranks, {op}, {dtype}: {side} ({}{of})", options.sizes);
                        let before = cpu_ticks();
                        let mut results =
                            run_side(side, &root, python.as_deref(), n, (op, dtype), &options)?;
                        let steal = steal_percent(before, cpu_ticks());
                        mark_steal(&mut results, steal);
                        if let Some(steal) = steal.filter(|_| !results.is_empty()) {
                            progress!("  {side}: the hypervisor took {steal:.1}% of the CPU time meanwhile");
                        }
                        for record in &results {
                            if let Some(error) = record.get("error") {
                                progress!("  {side}: {op} unsupported: {error}");
                            } else {
                                progress!(
                                    "  {side}: {} {}: median {} ({:.3} GB/s busbw)",
                                    op,
                                    human(record["bytes"].as_u64().unwrap_or_default()),
                                    us(record["median_us"].as_f64().unwrap_or(f64::NAN)),
                                    record["busbw_gbps"].as_f64().unwrap_or(f64::NAN)
                                );
                            }
                        }
                        match side {
                            "nuvec" => ours.extend(results),
                            "mlx" => theirs.extend(results),
                            "nuvec-jaccl" => over_jaccl.extend(results),
                            _ => over_mpi.extend(results),
                        }
                    }
                }
            }
        }
    }
    let footer_steal = format!(
        "CPU time stolen by the hypervisor during the runs: nuvec's {}; MLX's {}",
        describe_steal(&ours),
        describe_steal(&theirs)
    );
    let (ours, theirs, over_mpi, over_jaccl) = (
        merge(&ours),
        merge(&theirs),
        merge(&over_mpi),
        merge(&over_jaccl),
    );
    let rows: Vec<(u64, u64)> = ours
        .iter()
        .map(key)
        .filter(|(op, ..)| lands_in_outputs(op))
        .map(|(_, ranks, bytes, _)| (ranks, bytes))
        .collect();
    if rows
        .iter()
        .any(|&(n, bytes)| ceilings.outgrows_cache(n, bytes))
    {
        progress!("measuring loopback into memory for outputs beyond the cache");
        ceilings.measure_into_memory(&rows)?;
    }
    let table = table(&ours, &theirs, (&over_mpi, &over_jaccl), &ceilings);
    let rounds = match options.repeat {
        1 => "one run per side and collective".to_string(),
        n => format!("medians of {n} rounds' medians per side and collective"),
    };
    let footer = format!(
        "ceilings: single-core memcpy {memcpy:.2} GB/s; {}\n{rounds}; {footer_steal}",
        ceilings.describe()
    );
    println!("{table}");
    println!("{footer}");
    let target = root.join("target");
    std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
    let command = format!("cargo xtask bench-distributed {}", args.join(" "));
    let report = json!({
        "command": command.trim(),
        "ceilings": {
            "memcpy_gbps": memcpy,
            "tcp_stream_gbps": tcp,
            "tcp_streams_at_once_gbps": ceilings.together.iter().map(|(n, rate)| json!({"streams": n, "gbps": rate})).collect::<Vec<_>>(),
            "tcp_into_memory_gbps": ceilings.into_memory.iter().map(|(n, bytes, rate)| json!({"streams": n, "output_bytes": bytes, "gbps": rate})).collect::<Vec<_>>(),
            "last_level_cache_bytes": ceilings.cache,
            "reduce_f32_gbps": ceilings.reduce,
            "cores": ceilings.cores,
        },
        "nuvec": ours,
        "mlx": theirs,
        "open_mpi_tcp": over_mpi,
        "nuvec_jaccl_emulated": over_jaccl,
    });
    std::fs::write(
        target.join("bench-distributed.json"),
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(
        target.join("bench-distributed.md"),
        format!("{table}\n{footer}\n\n`{}`\n", command.trim()),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(
        target.join("bench-distributed.svg"),
        crate::bench_plot::svg(&ours, &theirs, tcp, &options.ranks, &options.ops),
    )
    .map_err(|e| e.to_string())?;
    progress!("wrote target/bench-distributed.{{md,json,svg}}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_from_json_lines_among_other_output() {
        let output = b"[nuvec launch] a note\n{\"impl\": \"nuvec\", \"bytes\": 4096}\nplain text\n";
        let found = records(output);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0]["bytes"], 4096);
    }

    #[test]
    fn the_table_pairs_each_result_with_mlx_and_shows_the_ratio() {
        let ours = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 40.0, "busbw_gbps": 0.1, "ok": true}),
        ];
        let theirs = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 4000.0, "busbw_gbps": 0.001}),
        ];
        let over_mpi = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 20.0, "busbw_gbps": 0.2}),
        ];
        let over_jaccl = vec![
            json!({"op": "all_sum", "ranks": 2, "bytes": 4096, "dtype": "float32", "median_us": 60.0, "busbw_gbps": 0.07}),
        ];
        // 2 GB/s on two streams at once: an all-sum of 4 KiB on 2 ranks moves 8 KiB, 4.1 µs.
        let ceilings = Ceilings {
            one: 1.0,
            together: vec![(2, 2.0)],
            into_memory: Vec::new(),
            cache: 32 << 20,
            reduce: f64::INFINITY,
            cores: 2,
        };
        let table = table(&ours, &theirs, (&over_mpi, &over_jaccl), &ceilings);
        assert!(
            table.contains("| all_sum | 2 | float32 | 4 KB | 40 µs | 4.00 ms | 0.010 |"),
            "{table}"
        );
        assert!(table.contains("| 0.001 | 4 µs | 9.766 |"), "{table}");
        assert!(
            table.ends_with("| 20 µs | 2.000 | 60 µs | 0.070 |\n"),
            "{table}"
        );
    }
}
