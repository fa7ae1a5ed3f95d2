//! `cargo xtask bench-core [--runs N] [FILTER...]`: nuvec against numpy on core ops.
//!
//! Builds `crates/nuvec-bench/src/bin/bench_core.rs` in release mode, then runs it and
//! `scripts/bench/numpy_core.py` alternately (nuvec, numpy, nuvec, numpy, ...; 3 rounds unless
//! `--runs N`), takes the median of each benchmark's per-run medians, prints a Markdown table on
//! stdout and writes it, with the date, `nproc` and the command, to `target/bench-core.md`.
//! FILTERs (substrings of benchmark names, e.g. `matmul`) are passed to both programs.
//!
//! numpy comes from `python3` when it imports numpy, else from a virtual environment at
//! `.venv-bench` (created with `python3 -m venv .venv-bench && .venv-bench/bin/pip install numpy`
//! when missing). When neither works the reason is printed and only nuvec's numbers are shown.
//! Progress goes to stderr.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// nuvec's time may be at most this multiple of numpy's.
const GOAL_RATIO: f64 = 1.25;
const DEFAULT_RUNS: usize = 3;
const NUMPY_SCRIPT: &str = "scripts/bench/numpy_core.py";
const VENV: &str = ".venv-bench";

macro_rules! progress {
    ($($arg:tt)*) => {{
        eprintln!("bench-core: {}", format_args!($($arg)*));
    }};
}

/// One benchmark's result from one run of a program.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    bench: String,
    median_ms: f64,
    iters: u64,
}

/// Per-benchmark medians over the runs of one program, in the order benchmarks first appeared.
#[derive(Debug, Default)]
struct Results {
    order: Vec<String>,
    medians: BTreeMap<String, Vec<f64>>,
}

impl Results {
    fn add(&mut self, samples: &[Sample]) {
        for s in samples {
            if !self.medians.contains_key(&s.bench) {
                self.order.push(s.bench.clone());
            }
            self.medians
                .entry(s.bench.clone())
                .or_default()
                .push(s.median_ms);
        }
    }

    /// The median over runs of `bench`'s medians.
    fn median(&self, bench: &str) -> Option<f64> {
        self.medians
            .get(bench)
            .and_then(|values| crate::stats::median(values))
    }
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let (runs, filters) = parse_args(args)?;
    let root = workspace_root();
    let command_line = std::iter::once("cargo xtask bench-core".to_string())
        .chain(args.iter().map(|a| shell_quote(a)))
        .collect::<Vec<_>>()
        .join(" ");

    progress!("building the benchmark (cargo build --release -p nuvec-bench --bin bench_core)");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(&cargo)
        .args([
            "build",
            "--release",
            "-p",
            "nuvec-bench",
            "--bin",
            "bench_core",
        ])
        .current_dir(&root)
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| format!("could not run {cargo}: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the bench_core benchmark failed ({status})"
        ));
    }
    let target_dir = target_dir(&root);
    let example = target_dir
        .join("release")
        .join(format!("bench_core{}", std::env::consts::EXE_SUFFIX));
    if !example.is_file() {
        return Err(format!(
            "built the benchmark but found no binary at {}",
            example.display()
        ));
    }

    let python = find_numpy_python(&root);
    let numpy_info = match &python {
        Ok(python) => {
            progress!("numpy side: {}", python.display());
            None
        }
        Err(why) => {
            progress!("numpy unavailable, showing nuvec's numbers only: {why}");
            Some(format!("numpy unavailable: {why}"))
        }
    };
    let mut python = python.ok();

    let load_before = load_average();
    if let Some(load) = load_before
        .as_deref()
        .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok())
    {
        if load >= 1.0 {
            progress!("warning: 1-minute load average is {load:.2}; other work on the machine skews the timings");
        }
    }
    let mut nuvec = Results::default();
    let mut numpy = Results::default();
    let mut numpy_meta: Option<String> = None;
    for round in 1..=runs {
        progress!("round {round}/{runs}: nuvec");
        let mut cmd = Command::new(&example);
        cmd.args(&filters).current_dir(&root);
        let output = run_capture(&mut cmd).map_err(|e| format!("nuvec benchmark: {e}"))?;
        let samples = parse_samples(&output);
        if samples.is_empty() {
            return Err(
                "the nuvec benchmark printed no results (does the filter match any benchmark?)"
                    .to_string(),
            );
        }
        report_samples("nuvec", &samples);
        nuvec.add(&samples);

        if let Some(py) = &python {
            progress!("round {round}/{runs}: numpy");
            let mut cmd = Command::new(py);
            cmd.arg(root.join(NUMPY_SCRIPT))
                .args(&filters)
                .current_dir(&root);
            match run_capture(&mut cmd) {
                Ok(output) => {
                    if numpy_meta.is_none() {
                        numpy_meta = parse_numpy_meta(&output);
                    }
                    let samples = parse_samples(&output);
                    report_samples("numpy", &samples);
                    numpy.add(&samples);
                }
                Err(e) => {
                    progress!("numpy benchmark failed, continuing with nuvec only: {e}");
                    python = None;
                }
            }
        }
    }

    let table = render_table(&nuvec, &numpy);
    println!("{table}");

    let mut report = String::new();
    let _ = writeln!(report, "# nuvec vs numpy: core ops\n");
    let _ = writeln!(report, "- date: {} (UTC)", utc_now());
    let _ = writeln!(report, "- nproc: {}", nproc());
    if let Some(cpu) = cpu_model() {
        let _ = writeln!(report, "- cpu: {cpu}");
    }
    if let Some(commit) = git_commit(&root) {
        let _ = writeln!(report, "- commit: {commit}");
    }
    let _ = writeln!(report, "- command: `{command_line}`");
    if let (Some(before), Some(after)) = (&load_before, load_average()) {
        let _ = writeln!(
            report,
            "- load average (1, 5, 15 min): {before} before, {after} after"
        );
    }
    let _ = writeln!(
        report,
        "- runs: {runs}, alternating nuvec (`{}`) and numpy (`{NUMPY_SCRIPT}`); cells are medians of per-run medians",
        relative(&example, &root).display()
    );
    match (&numpy_meta, &numpy_info) {
        (Some(meta), _) => {
            let _ = writeln!(report, "- numpy: {meta}");
        }
        (None, Some(info)) => {
            let _ = writeln!(report, "- {info}");
        }
        (None, None) => {}
    }
    let _ = writeln!(report, "\n{table}");
    let path = target_dir.join("bench-core.md");
    std::fs::write(&path, report).map_err(|e| format!("writing {}: {e}", path.display()))?;
    progress!("wrote {}", path.display());
    Ok(())
}

fn parse_args(args: &[String]) -> Result<(usize, Vec<String>), String> {
    let mut runs = DEFAULT_RUNS;
    let mut filters = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let value = if arg == "--runs" {
            Some(iter.next().ok_or("--runs needs a number")?.as_str())
        } else {
            arg.strip_prefix("--runs=")
        };
        if let Some(value) = value {
            runs = value
                .parse()
                .map_err(|_| format!("--runs: not a number: {value}"))?;
            if runs == 0 {
                return Err("--runs must be at least 1".to_string());
            }
        } else if arg == "-h" || arg == "--help" {
            return Err("usage: cargo xtask bench-core [--runs N] [FILTER...]".to_string());
        } else if arg.starts_with('-') {
            return Err(format!(
                "unknown option {arg} (usage: cargo xtask bench-core [--runs N] [FILTER...])"
            ));
        } else {
            filters.push(arg.clone());
        }
    }
    Ok((runs, filters))
}

/// The workspace root: the parent of this crate's directory.
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

fn relative<'a>(path: &'a Path, root: &Path) -> &'a Path {
    path.strip_prefix(root).unwrap_or(path)
}

/// Runs `cmd` with stderr shown, returning its stdout; a failed exit is an error.
fn run_capture(cmd: &mut Command) -> Result<String, String> {
    let output = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("could not start {:?}: {e}", cmd.get_program()))?;
    if !output.status.success() {
        return Err(format!(
            "{:?} failed ({})",
            cmd.get_program(),
            output.status
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("output is not UTF-8: {e}"))
}

fn report_samples(side: &str, samples: &[Sample]) {
    let mut err = std::io::stderr().lock();
    for s in samples {
        let _ = writeln!(
            err,
            "bench-core:   {side:5} {:<18} {:>10.3} ms  ({} iters)",
            s.bench, s.median_ms, s.iters
        );
    }
}

/// Whether `python` imports numpy.
fn imports_numpy(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import numpy"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn venv_python(root: &Path) -> PathBuf {
    if cfg!(windows) {
        root.join(VENV).join("Scripts").join("python.exe")
    } else {
        root.join(VENV).join("bin").join("python")
    }
}

/// A Python that imports numpy: `python3`, else `.venv-bench` (created when needed).
fn find_numpy_python(root: &Path) -> Result<PathBuf, String> {
    let system = PathBuf::from("python3");
    if imports_numpy(&system) {
        return Ok(system);
    }
    let venv = venv_python(root);
    if venv.is_file() && imports_numpy(&venv) {
        return Ok(venv);
    }
    progress!("python3 cannot import numpy; creating {VENV} (python3 -m venv {VENV} && {VENV}/bin/pip install numpy)");
    let status = Command::new("python3")
        .args(["-m", "venv", VENV])
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| format!("could not run python3: {e}"))?;
    if !status.success() {
        return Err(format!("python3 -m venv {VENV} failed ({status})"));
    }
    let pip = venv.with_file_name(if cfg!(windows) { "pip.exe" } else { "pip" });
    let status = Command::new(&pip)
        .args(["install", "numpy"])
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .map_err(|e| format!("could not run {}: {e}", pip.display()))?;
    if !status.success() {
        return Err(format!("{VENV}/bin/pip install numpy failed ({status})"));
    }
    if imports_numpy(&venv) {
        Ok(venv)
    } else {
        Err(format!(
            "{} still cannot import numpy after installing it",
            venv.display()
        ))
    }
}

/// The benchmark lines (`{"bench":...,"median_ms":...,"iters":...}`) of a program's output.
fn parse_samples(output: &str) -> Vec<Sample> {
    output
        .lines()
        .filter_map(|line| {
            Some(Sample {
                bench: json_string(line, "bench")?,
                median_ms: json_number(line, "median_ms")?,
                iters: json_number(line, "iters").map_or(0, |v| v as u64),
            })
        })
        .collect()
}

/// "numpy X (BLAS Y, Python Z)" from the numpy script's meta line.
fn parse_numpy_meta(output: &str) -> Option<String> {
    let line = output
        .lines()
        .find(|line| json_string(line, "meta").as_deref() == Some("numpy"))?;
    let version = json_string(line, "numpy_version")?;
    let blas = json_string(line, "blas").unwrap_or_else(|| "unknown".to_string());
    let python = json_string(line, "python").unwrap_or_else(|| "?".to_string());
    Some(format!(
        "{version} (BLAS: {blas}; Python {python}; default threading)"
    ))
}

/// The fields of `line` when it is a JSON object.
fn json_object(line: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_str(line.trim()) {
        Ok(serde_json::Value::Object(fields)) => Some(fields),
        _ => None,
    }
}

fn json_string(line: &str, key: &str) -> Option<String> {
    json_object(line)?.get(key)?.as_str().map(str::to_string)
}

fn json_number(line: &str, key: &str) -> Option<f64> {
    json_object(line)?.get(key)?.as_f64()
}

fn render_table(nuvec: &Results, numpy: &Results) -> String {
    let mut table = String::new();
    table.push_str("| benchmark | nuvec median (ms) | numpy median (ms) | ratio nuvec/numpy | goal (<= 1.25) |\n");
    table.push_str("| --- | ---: | ---: | ---: | :---: |\n");
    let mut benches = nuvec.order.clone();
    benches.extend(
        numpy
            .order
            .iter()
            .filter(|b| !nuvec.medians.contains_key(*b))
            .cloned(),
    );
    for bench in &benches {
        let ours = nuvec.median(bench);
        let theirs = numpy.median(bench);
        let cell = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), format_ms);
        let (ratio, goal) = match (ours, theirs) {
            (Some(a), Some(b)) if b > 0.0 => {
                let r = a / b;
                (
                    format!("{r:.2}"),
                    if r <= GOAL_RATIO {
                        "yes".to_string()
                    } else {
                        "**no**".to_string()
                    },
                )
            }
            _ => ("n/a".to_string(), "n/a".to_string()),
        };
        let _ = writeln!(
            table,
            "| {bench} | {} | {} | {ratio} | {goal} |",
            cell(ours),
            cell(theirs)
        );
    }
    table
}

fn format_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms:.4}")
    } else if ms < 100.0 {
        format!("{ms:.3}")
    } else {
        format!("{ms:.1}")
    }
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,".contains(c))
    {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// `nproc`'s answer, else the standard library's count of usable cores.
fn nproc() -> String {
    Command::new("nproc")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// The first three fields of `/proc/loadavg` (Linux only).
fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// `HEAD`'s short hash, with "+ local changes" when the work tree differs from it.
fn git_commit(root: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
    };
    let hash = git(&["rev-parse", "--short", "HEAD"])?.trim().to_string();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.trim().is_empty());
    Some(if dirty {
        format!("{hash} + local changes")
    } else {
        hash
    })
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

/// The current UTC time as `YYYY-MM-DD HH:MM:SS`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_programs_lines() {
        let out =
            "{\"meta\": \"numpy\", \"numpy_version\": \"2.4.6\", \"blas\": \"openblas 0.3\", \"python\": \"3.11.7\"}\n\
                   {\"bench\":\"matmul_f32_256\",\"median_ms\":0.4032,\"iters\":200}\n\
                   {\"bench\": \"sum_f32_16m\", \"median_ms\": 7.967, \"iters\": 200}\n";
        let samples = parse_samples(out);
        assert_eq!(samples.len(), 2);
        assert_eq!(
            samples[0],
            Sample {
                bench: "matmul_f32_256".into(),
                median_ms: 0.4032,
                iters: 200
            }
        );
        assert_eq!(samples[1].bench, "sum_f32_16m");
        assert_eq!(samples[1].median_ms, 7.967);
        assert_eq!(
            parse_numpy_meta(out).as_deref(),
            Some("2.4.6 (BLAS: openblas 0.3; Python 3.11.7; default threading)")
        );
    }

    #[test]
    fn median_of_medians_and_table() {
        let mut ours = Results::default();
        let mut theirs = Results::default();
        for (a, b) in [(3.0, 2.0), (1.0, 2.0), (2.0, 2.0)] {
            ours.add(&[Sample {
                bench: "x".into(),
                median_ms: a,
                iters: 5,
            }]);
            theirs.add(&[Sample {
                bench: "x".into(),
                median_ms: b,
                iters: 5,
            }]);
        }
        assert_eq!(ours.median("x"), Some(2.0));
        let table = render_table(&ours, &theirs);
        assert!(
            table.contains("| x | 2.000 | 2.000 | 1.00 | yes |"),
            "{table}"
        );
        let table = render_table(&ours, &Results::default());
        assert!(table.contains("| x | 2.000 | n/a | n/a | n/a |"), "{table}");
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_000), (2024, 10, 4));
    }

    #[test]
    fn args() {
        assert_eq!(parse_args(&[]).unwrap(), (3, vec![]));
        let args: Vec<String> = ["--runs", "5", "matmul"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(parse_args(&args).unwrap(), (5, vec!["matmul".to_string()]));
        assert!(parse_args(&["--runs=0".to_string()]).is_err());
    }
}
