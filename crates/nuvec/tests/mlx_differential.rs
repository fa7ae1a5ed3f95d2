//! nuvec against MLX 0.32.4 on random programs (see `mlx_diff/mod.rs`): a fixed set of seeds
//! in every test run, the saved regression cases, and a long run for `cargo xtask fuzz-mlx
//! --cases N`. Needs MLX's Python (`.venv-mlx`, or `NUVEC_MLX_PYTHON`); CI installs it.

mod mlx_diff;

use mlx_diff::{compare, generate, interpret, mlx::Mlx, shrink, Difference};
use nuvec_test_support::test_name;
use serde_json::Value;
use std::collections::BTreeMap;

/// Seeds every test run checks.
const FIXED_SEEDS: u64 = 1500;
/// Programs per MLX batch.
const BATCH: u64 = 500;

fn mlx_or_skip(test: &str) -> Option<Mlx> {
    let found = Mlx::find();
    if found.is_none() {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_MLX_LAUNCH").is_none(),
            "{test}: MLX's Python is required (NUVEC_REQUIRE_MLX_LAUNCH is set) but was not found"
        );
        nuvec_test_support::skip(&format!(
            "{test}: no MLX Python (.venv-mlx with mlx[cpu]==0.32.4, or NUVEC_MLX_PYTHON)"
        ));
    }
    found
}

/// Every difference over `seeds`; the first of each kind shrunk (shrinking runs MLX once per
/// round, so doing it for every case of a common kind would take most of a long run).
fn run_seeds(seeds: std::ops::Range<u64>, mlx: &Mlx) -> Vec<Difference> {
    let mut found = Vec::new();
    let mut start = seeds.start;
    let long = seeds.end - seeds.start > FIXED_SEEDS;
    while start < seeds.end {
        let end = (start + BATCH).min(seeds.end);
        let batch: Vec<u64> = (start..end).collect();
        let programs: Vec<Value> = batch.iter().map(|&s| generate::program(s)).collect();
        found.extend(mlx_diff::differences(&batch, &programs, mlx));
        start = end;
        if long && (start - seeds.start).is_multiple_of(10_000) {
            let line = format!(
                "{} programs from seed {}, {} differences so far\n{}",
                start - seeds.start,
                seeds.start,
                found.len(),
                report(&found)
            );
            eprintln!("{line}");
            let progress = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/mlx-diff-progress.txt");
            let _ = std::fs::write(progress, line);
        }
    }
    let mut shrunk_kinds = std::collections::HashSet::new();
    found
        .into_iter()
        .map(|d| {
            if !shrunk_kinds.insert(compare::kind(&d.why)) {
                return d;
            }
            let (program, why) = shrink::shrink(&d.program, &d.why, mlx, 30);
            let mlx_result = mlx.run(std::slice::from_ref(&program)).remove(0);
            let nuvec = interpret::run(&program);
            Difference {
                program,
                mlx: mlx_result,
                nuvec,
                why,
                ..d
            }
        })
        .collect()
}

fn report(differences: &[Difference]) -> String {
    let mut kinds: BTreeMap<String, Vec<&Difference>> = BTreeMap::new();
    for d in differences {
        kinds.entry(compare::kind(&d.why)).or_default().push(d);
    }
    let mut text = format!(
        "{} differences in {} kinds\n",
        differences.len(),
        kinds.len()
    );
    for (kind, cases) in &kinds {
        let first = cases[0];
        text += &format!(
            "\n{} × {kind}\n  seed {}: {}\n  program: {}\n",
            cases.len(),
            first.seed,
            first.why,
            first.program
        );
    }
    text
}

#[test]
fn the_same_seed_gives_the_same_program() {
    assert_eq!(generate::program(7), generate::program(7));
    assert_ne!(generate::program(7), generate::program(8));
}

#[test]
fn nuvec_agrees_with_mlx_on_the_fixed_seeds() {
    let Some(mlx) = mlx_or_skip(test_name!()) else {
        return;
    };
    let differences = run_seeds(0..FIXED_SEEDS, &mlx);
    assert!(differences.is_empty(), "{}", report(&differences));
}

#[test]
fn saved_regressions_agree_with_mlx_s_recorded_results() {
    let text = include_str!("fixtures/mlx_diff_regressions.json");
    let cases: Vec<Value> = serde_json::from_str(text).expect("the regressions are JSON");
    assert!(!cases.is_empty());
    let mut failures = Vec::new();
    for case in &cases {
        let ours = interpret::run(&case["program"]);
        if let Some(why) = compare::difference(&case["program"], &case["mlx"], &ours) {
            failures.push(format!("{}: {why}", case["name"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `cargo xtask fuzz-mlx --cases N [--seed S]`: N programs from seed S (default: after the
/// fixed seeds); prints the differences by kind and writes them, shrunk, as regression cases
/// to `target/mlx-diff-failures.json`.
#[test]
#[ignore = "long: run with cargo xtask fuzz-mlx"]
fn long_run() {
    let Some(mlx) = mlx_or_skip(test_name!()) else {
        return;
    };
    let number = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let cases = number("NUVEC_MLX_FUZZ_CASES", 10_000);
    let first = number("NUVEC_MLX_FUZZ_SEED", FIXED_SEEDS);
    let started = std::time::Instant::now();
    let differences = run_seeds(first..first + cases, &mlx);
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let cases_json: Vec<Value> = differences.iter().map(Difference::as_case).collect();
    let _ = std::fs::create_dir_all(&target);
    let _ = std::fs::write(
        target.join("mlx-diff-failures.json"),
        serde_json::to_string_pretty(&cases_json).unwrap_or_default(),
    );
    println!(
        "{cases} programs from seed {first} in {:.0} s: {}",
        started.elapsed().as_secs_f64(),
        report(&differences)
    );
    assert!(differences.is_empty(), "{}", report(&differences));
}

/// Runs the program in `NUVEC_MLX_DIFF_PROGRAM` (JSON, as in the failures file) in nuvec and
/// prints the result: for shrinking a case by hand. `cargo test -p nuvec --test
/// mlx_differential one_program -- --ignored --nocapture`.
#[test]
#[ignore = "a tool: reads a program from NUVEC_MLX_DIFF_PROGRAM"]
fn one_program() {
    let text = std::env::var("NUVEC_MLX_DIFF_PROGRAM").expect("NUVEC_MLX_DIFF_PROGRAM is set");
    let program: Value = serde_json::from_str(&text).expect("the program is JSON");
    println!("{}", interpret::run(&program));
}
