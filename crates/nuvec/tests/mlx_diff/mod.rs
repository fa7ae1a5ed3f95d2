//! nuvec's differential tester against MLX 0.32.4: random small programs (ops over random
//! shapes and dtypes, wrapped in transforms nested in random order) run in nuvec and in MLX,
//! and their values, dtypes, shapes and errors compared.
//!
//! - `generate.rs`: a seed gives a program (JSON, the format `scripts/golden/mlx_diff.py` reads);
//! - `interpret.rs`: nuvec's meaning of a program, op for op and transform for transform;
//! - `mlx.rs`: MLX's results, from the Python script in one process per batch;
//! - `compare.rs`: what counts as a difference, and the differences kept on purpose;
//! - `shrink.rs`: a failing program made minimal, to save as a regression case.

#![allow(dead_code)]

pub(crate) mod compare;
pub(crate) mod deliberate;
pub(crate) mod generate;
pub(crate) mod interpret;
pub(crate) mod judge;
pub(crate) mod mlx;
pub(crate) mod questions;
pub(crate) mod shrink;

use serde_json::Value;

/// A program with its seed, nuvec's outcome and MLX's, where they differ.
#[derive(Debug, Clone)]
pub(crate) struct Difference {
    pub(crate) seed: u64,
    pub(crate) program: Value,
    pub(crate) mlx: Value,
    pub(crate) nuvec: Value,
    pub(crate) why: String,
}

impl Difference {
    /// The difference as a regression case for `fixtures/mlx_diff_regressions.json`.
    pub(crate) fn as_case(&self) -> Value {
        serde_json::json!({
            "name": format!("seed {}: {}", self.seed, self.why),
            "program": self.program,
            "mlx": self.mlx,
        })
    }
}

/// Runs `programs` in both and returns where they differ (deliberate differences excluded).
pub(crate) fn differences(seeds: &[u64], programs: &[Value], mlx: &mlx::Mlx) -> Vec<Difference> {
    let theirs = mlx.run(programs);
    programs
        .iter()
        .zip(theirs)
        .zip(seeds)
        .filter_map(|((program, theirs), &seed)| {
            let ours = interpret::run(program);
            let why = compare::difference(program, &theirs, &ours)?;
            Some(Difference {
                seed,
                program: program.clone(),
                mlx: theirs,
                nuvec: ours,
                why,
            })
        })
        .collect()
}
