//! `cargo xtask bench-distributed`: nuvec's ring against MLX 0.32.4's ring, side by side, in
//! one run on this machine (or the hosts of `--hostfile`, `bench_hosts.rs`), with Open MPI
//! over TCP (its own collectives, through nuvec's MPI backend), nuvec over JACCL's mesh on
//! the emulated fabric, and the bare ring (`bench_bare_ring.rs`) as further columns.
//!
//! For each rank count and collective it runs nuvec's rank program
//! (`nuvec-bench`'s `bench_distributed`, started by `nuvec launch`) and MLX's (`bench_mlx.rs`),
//! alternating which goes first. Both use the nccl-tests conventions (big-buffer bytes,
//! bus-bandwidth factors, a barrier before each iteration, the slowest rank's time, the
//! median). It also measures this machine's ceilings (`bench_floor.rs`): single-core memcpy
//! and reduction bandwidth and loopback TCP, from which each row gets a floor, the least time
//! its bytes take through loopback plus its reductions' CPU time; the bare ring is the same
//! algorithm as the ring's with blocking threads and no protocol, a reference measured for
//! the large `all_sum` rows.
//! Output: a table (stdout and target/bench-distributed.md, `bench_table.rs`),
//! target/bench-distributed.json and an SVG plot of bus bandwidth against size
//! (target/bench-distributed.svg). `--repeat N` runs every side N times and reports medians
//! of the rounds' medians (`bench_rounds.rs`); each run records how much CPU time the
//! hypervisor stole meanwhile.

use crate::bench_bare_ring;
use crate::bench_crosscore::{self, cross_core_ns, describe as describe_cores, mark_cross_core};
use crate::bench_floor::{lands_in_outputs, memcpy_ceiling, Ceilings};
use crate::bench_hosts::Hosts;
use crate::bench_mlx::{mlx_python, run_mlx};
use crate::bench_rounds::{cpu_ticks, describe_steal, mark_steal, merge, steal_percent};
use crate::bench_table::{human, key, table, us, Peers};
use crate::{free_port_range, run, stdout_of, workspace_root};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

macro_rules! progress {
    ($($arg:tt)*) => {{
        eprintln!("bench-distributed: {}", format_args!($($arg)*));
    }};
}

pub(crate) struct Options {
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
    /// Whether the bare ring (`bench_bare_ring.rs`) runs for the large `all_sum` rows.
    bare_ring: bool,
    /// The hostfile whose ranks run instead of `ranks` on loopback (`bench_hosts.rs`).
    hostfile: Option<PathBuf>,
    /// Whether `--ranks` was given (it and `--hostfile` exclude each other).
    ranks_given: bool,
    /// The backend both sides use on the hostfile's hosts: `ring`, or `jaccl` / `jaccl-ring`
    /// (MLX's JACCL through `mlx.launch --backend jaccl`), as `mlx.launch` names them.
    pub(crate) backend: String,
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
        bare_ring: true,
        hostfile: None,
        ranks_given: false,
        backend: "ring".into(),
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
        if flag == "--no-bare-ring" {
            options.bare_ring = false;
            continue;
        }
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--hostfile" => options.hostfile = Some(PathBuf::from(value)),
            "--backend" => match value.as_str() {
                "ring" | "jaccl" | "jaccl-ring" => options.backend = value.clone(),
                other => {
                    return Err(format!(
                        "--backend: {other:?} is not ring, jaccl or jaccl-ring"
                    ))
                }
            },
            "--ranks" => {
                options.ranks_given = true;
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
                    "unknown option {other} (--ranks 2,4 --hostfile FILE --backend ring|jaccl|jaccl-ring --ops all_sum,all_gather,sum_scatter,pingpong,broadcast,all_to_all --sizes 4K,... --dtypes float32,bfloat16 --budget SECONDS --min-iters N --repeat N --no-mlx --no-mpi --no-jaccl --no-bare-ring)"
                ))
            }
        }
    }
    if options.backend != "ring" && options.hostfile.is_none() {
        return Err(format!(
            "--backend {} needs --hostfile (hosts with RDMA devices); on this machine the nuvec-jaccl column already runs JACCL on the emulated fabric",
            options.backend
        ));
    }
    if options.hostfile.is_some() && options.ranks_given {
        return Err(
            "--ranks and --hostfile exclude each other: the hostfile says how many ranks run"
                .into(),
        );
    }
    Ok(options)
}

/// The options both rank programs (nuvec's and MLX's) take.
pub(crate) fn rank_args<'a>(op: &'a str, dtype: &'a str, options: &'a Options) -> [&'a str; 10] {
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
pub(crate) fn records(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| {
            // `nuvec launch` prefixes ranks' lines with `[rank] ` where it may.
            let line = line.trim();
            let bare = match line.split_once("] ") {
                Some((rank, rest)) if rank.starts_with('[') && !rest.is_empty() => rest,
                _ => line,
            };
            serde_json::from_str::<Value>(bare).ok()
        })
        .collect()
}

/// The Open MPI options of the peer column: TCP only (no shared memory), and ranks that
/// yield their core while they wait, as Open MPI does itself when it knows a machine is
/// oversubscribed (`nuvec launch` gives mpirun one slot per rank, so it does not know).
const OPEN_MPI_TCP: &str = "--mca btl self,tcp --mca mpi_yield_when_idle 1";
/// The Open MPI options of the shared-memory peer column (one host): its own shared-memory
/// transport (`vader`), through the `ob1` layer that uses it.
const OPEN_MPI_SHM: &str = "--mca pml ob1 --mca btl self,vader";
/// Added where the ranks outnumber the cores, as Open MPI does itself when it knows.
const OPEN_MPI_YIELD: &str = "--mca mpi_yield_when_idle 1";

/// nuvec's rank program under `nuvec launch` with `backend`: `ring`, `mpi` (Open MPI over
/// TCP, which `nuvec launch` starts with `mpirun`: the collectives are Open MPI's own, called
/// through nuvec's MPI backend), `mpi-shm` (the same through Open MPI's shared memory) or
/// `jaccl` (JACCL's mesh on the emulated fabric).
fn run_ours(
    root: &Path,
    (n, hosts): (usize, Option<&Hosts>),
    (op, dtype): (&str, &str),
    options: &Options,
    backend: &str,
) -> Result<Vec<Value>, String> {
    let port = free_port_range(n)?.to_string();
    let mut command = Command::new(root.join("target/release/nuvec"));
    command.arg("launch");
    match hosts {
        Some(hosts) => command.arg("--hostfile").arg(&hosts.file),
        None => command.args(["-n", &n.to_string()]),
    };
    match backend {
        "mpi-shm" => command.args(["--backend", "mpi"]),
        _ => command.args(["--backend", backend]),
    };
    if backend == "mpi" {
        command.args(["--mpi-arg", OPEN_MPI_TCP]);
    } else if backend == "mpi-shm" {
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let yields = if n > cores { OPEN_MPI_YIELD } else { "" };
        command.args(["--mpi-arg", &format!("{OPEN_MPI_SHM} {yields}")]);
    } else {
        command.args(["-p", &port, "--no-prefix"]);
    }
    command
        .arg("--")
        .arg(root.join("target/release/bench_distributed"))
        .args(rank_args(op, dtype, options));
    let stdout = stdout_of(&mut command, "nuvec launch", "nuvec's ranks failed")?;
    Ok(records(&stdout))
}

/// Where the ranks run (a hostfile's hosts, else loopback) and what the sides other than
/// nuvec's run: MLX's Python, the bare ring's binary.
#[derive(Clone, Copy)]
struct Tools<'a> {
    hosts: Option<&'a Hosts>,
    python: Option<&'a Path>,
    bare_ring: Option<&'a Path>,
}

/// One side's run of `op` on `n` ranks. nuvec's failure ends the benchmark; a peer's is
/// reported and leaves its column empty.
fn run_side(
    side: &str,
    root: &Path,
    tools: Tools<'_>,
    n: usize,
    (op, dtype): (&str, &str),
    options: &Options,
) -> Result<Vec<Value>, String> {
    let peer = match (side, tools.python) {
        ("bare-ring", _) => match tools.bare_ring {
            Some(binary) if op == "all_sum" && dtype == "float32" => {
                bench_bare_ring::run(binary, n as u64, &options.sizes)
            }
            _ => Ok(Vec::new()),
        },
        ("nuvec", _) => {
            return run_ours(
                root,
                (n, tools.hosts),
                (op, dtype),
                options,
                &options.backend,
            )
        }
        ("open-mpi-tcp", _) => run_ours(root, (n, None), (op, dtype), options, "mpi")
            .map_err(|e| format!("Open MPI over TCP failed: {e}")),
        ("open-mpi-shm", _) => run_ours(root, (n, None), (op, dtype), options, "mpi-shm")
            .map_err(|e| format!("Open MPI through shared memory failed: {e}")),
        ("nuvec-jaccl", _) => run_ours(root, (n, None), (op, dtype), options, "jaccl")
            .map_err(|e| format!("nuvec over JACCL (emulated) failed: {e}")),
        ("mlx", Some(python)) => run_mlx(root, python, (n, tools.hosts), (op, dtype), options)
            .map_err(|e| format!("MLX failed: {e}")),
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

/// Reads the hostfile `file` and narrows `options` to what runs on its hosts: its ranks, and
/// the loopback-only columns (Open MPI, JACCL; the bare ring and the floors unless every rank
/// is on this machine) left out.
fn hosts_of(root: &Path, file: &Path, options: &mut Options) -> Result<Hosts, String> {
    let hosts = crate::bench_hosts::read(root, file)?;
    let here = if hosts.local {
        ", all on this machine"
    } else {
        ""
    };
    progress!("{} ranks from {}{here}", hosts.ranks, file.display());
    options.ranks = vec![hosts.ranks];
    if options.mpi || options.jaccl {
        progress!("the Open MPI and JACCL columns run on loopback only: left out with --hostfile");
    }
    options.mpi = false;
    options.jaccl = false;
    if !hosts.local {
        progress!("the bare ring and the floors are for loopback: left out for other hosts");
        options.bare_ring = false;
    }
    Ok(hosts)
}

pub(crate) fn run_bench(args: &[String]) -> Result<(), String> {
    let mut options = options(args)?;
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
            "nuvec-bench",
            "--bin",
            "bench_distributed",
        ],
    )?;
    let hosts = match options.hostfile.clone() {
        Some(file) => Some(hosts_of(&root, &file, &mut options)?),
        None => None,
    };
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
    let bare_ring = if options.bare_ring && options.ops.iter().any(|op| op == "all_sum") {
        progress!("building the bare ring (scripts/bench/ring_floor.rs)");
        match bench_bare_ring::build(&root) {
            Ok(binary) => Some(binary),
            Err(reason) => {
                progress!("no bare-ring column: {reason}");
                None
            }
        }
    } else {
        None
    };
    let probe = match bench_crosscore::build(&root) {
        Ok(binary) => Some(binary),
        Err(reason) => {
            progress!("no cross-core readings: {reason}");
            None
        }
    };
    let tools = Tools {
        hosts: hosts.as_ref(),
        python: python.as_deref(),
        bare_ring: bare_ring.as_deref(),
    };
    progress!("measuring this machine's ceilings");
    let memcpy = memcpy_ceiling();
    let mut ceilings = Ceilings::measure(&options.ranks)?;
    let tcp = ceilings.one;
    progress!(
        "single-core memcpy {memcpy:.2} GB/s; {}",
        ceilings.describe()
    );
    let (mut ours, mut theirs, mut over_mpi, mut over_jaccl, mut bare) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut over_shm = Vec::new();
    // The sides that run, each going first in turn.
    let sides: Vec<&str> = [
        "nuvec",
        "mlx",
        "open-mpi-shm",
        "open-mpi-tcp",
        "nuvec-jaccl",
        "bare-ring",
    ]
    .into_iter()
    .filter(|side| match *side {
        "mlx" => python.is_some(),
        // Open MPI's shared memory joins the ranks of one host only.
        "open-mpi-shm" => mpi && hosts.is_none(),
        "open-mpi-tcp" => mpi,
        "nuvec-jaccl" => options.jaccl,
        "bare-ring" => bare_ring.is_some(),
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
                        if side == "bare-ring" && (op != "all_sum" || dtype != "float32") {
                            continue;
                        }
                        // MLX has neither broadcast nor all_to_all.
                        if side == "mlx" && matches!(op.as_str(), "broadcast" | "all_to_all") {
                            continue;
                        }
                        progress!("{n} ranks, {op}, {dtype}: {side} ({}{of})", options.sizes);
                        let cores_before = cross_core_ns(probe.as_deref());
                        let before = cpu_ticks();
                        let mut results = run_side(side, &root, tools, n, (op, dtype), &options)?;
                        // The flight recorder's cost, measured beside a 4 KB all_sum.
                        results.retain(|record| {
                            if record["op"] != "recorder" {
                                return true;
                            }
                            progress!(
                                "  {side}: the flight recorder costs {} ns per call, {}% of a 4 KB all_sum ({} µs)",
                                record["recorder_ns"],
                                record["share_percent"],
                                record["all_sum_median_us"]
                            );
                            false
                        });
                        let steal = steal_percent(before, cpu_ticks());
                        let cores_after = cross_core_ns(probe.as_deref());
                        mark_steal(&mut results, steal);
                        mark_cross_core(&mut results, cores_before, cores_after);
                        if let Some(steal) = steal.filter(|_| !results.is_empty()) {
                            progress!("  {side}: the hypervisor took {steal:.1}% of the CPU time meanwhile");
                        }
                        progress!(
                            "  {side}: a cache line's round trip between cores: {}",
                            describe_cores(cores_before, cores_after)
                        );
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
                            "bare-ring" => bare.extend(results),
                            "open-mpi-shm" => over_shm.extend(results),
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
    let over_shm = merge(&over_shm);
    let (ours, theirs, over_mpi, over_jaccl, bare) = (
        merge(&ours),
        merge(&theirs),
        merge(&over_mpi),
        merge(&over_jaccl),
        merge(&bare),
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
    // The floors are loopback's: not for hosts beyond this machine.
    let floors = hosts.as_ref().is_none_or(|h| h.local).then_some(&ceilings);
    let peers = Peers {
        mpi_shm: &over_shm,
        mpi_tcp: &over_mpi,
        jaccl: &over_jaccl,
        bare: &bare,
    };
    let table = table(&ours, &theirs, peers, floors);
    let rounds = match options.repeat {
        1 => "one run per side and collective".to_string(),
        n => format!("medians of {n} rounds' medians per side and collective"),
    };
    let whose = match floors {
        Some(_) => "ceilings",
        None => "this machine's ceilings (no floors: the ranks ran on other hosts)",
    };
    let footer = format!(
        "{whose}: single-core memcpy {memcpy:.2} GB/s; {}\n{rounds}; {footer_steal}",
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
        "open_mpi_shm": over_shm,
        "open_mpi_tcp": over_mpi,
        "nuvec_jaccl_emulated": over_jaccl,
        "bare_ring": bare,
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
        crate::bench_plot::svg((&ours, &theirs, &bare), tcp, &options.ranks, &options.ops),
    )
    .map_err(|e| e.to_string())?;
    progress!("wrote target/bench-distributed.{{md,json,svg}}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostfile_takes_the_place_of_the_rank_counts() {
        let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let parsed = options(&args(&["--hostfile", "hosts.json"])).expect("options");
        assert_eq!(parsed.hostfile, Some(PathBuf::from("hosts.json")));
        let error = options(&args(&["--hostfile", "h.json", "--ranks", "2"]))
            .err()
            .expect("refused");
        assert!(error.contains("exclude each other"), "{error}");
    }

    #[test]
    fn jaccl_across_hosts_needs_a_hostfile_and_a_known_backend() {
        let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        for backend in ["jaccl", "jaccl-ring"] {
            let parsed =
                options(&args(&["--hostfile", "h.json", "--backend", backend])).expect("options");
            assert_eq!(parsed.backend, backend);
            let error = options(&args(&["--backend", backend]))
                .err()
                .expect("refused");
            assert!(error.contains("needs --hostfile"), "{error}");
        }
        assert_eq!(options(&[]).expect("options").backend, "ring");
        let error = options(&args(&["--hostfile", "h.json", "--backend", "nccl"]))
            .err()
            .expect("refused");
        assert!(error.contains("not ring, jaccl or jaccl-ring"), "{error}");
    }

    #[test]
    fn records_are_read_from_json_lines_among_other_output() {
        let output = b"[nuvec launch] a note\n{\"impl\": \"nuvec\", \"bytes\": 4096}\nplain text\n[0] {\"bytes\": 8}\n";
        let found = records(output);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0]["bytes"], 4096);
        assert_eq!(found[1]["bytes"], 8);
    }
}
