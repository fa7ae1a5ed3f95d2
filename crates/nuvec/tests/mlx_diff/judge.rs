//! The float64 judge of a difference: the program run again by nuvec with its float inputs
//! widened to float64, and how each side's result compares with that value. A difference
//! both sides share with the exact value (both miss it, or both are within the tolerance of
//! it) is the float type's, not MLX's or nuvec's.

use super::compare::{close, number, tolerance};
use super::questions::differing;
use serde_json::Value;

/// The program's outcome in float64, its float inputs widened; `None` for a program that
/// casts (a cast would narrow the values again) or fails in float64.
fn run_in_float64(program: &Value) -> Option<Value> {
    let ops = program["ops"].as_array().cloned().unwrap_or_default();
    if ops.iter().any(|op| op.get("dtype").is_some()) {
        return None;
    }
    let mut wide = program.clone();
    for input in wide["inputs"].as_array_mut().into_iter().flatten() {
        if matches!(
            input["dtype"].as_str(),
            Some("float16" | "bfloat16" | "float32")
        ) {
            input["dtype"] = Value::from("float64");
        }
    }
    let exact = super::interpret::run(&wide);
    (exact["ok"] == true).then_some(exact)
}

/// The values of an output.
fn values(output: &Value) -> Vec<Value> {
    output["data"].as_array().cloned().unwrap_or_default()
}

/// How the two results of an element that differs compare with the program's float64 value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Both within the float32 tolerance of it (they differ by float32 roundings).
    BothHit,
    /// Both further from it than the tolerance (float32 cannot compute the element).
    BothMiss,
    /// Only nuvec's result is within the tolerance of it.
    OnlyNuvecHits,
    /// Only MLX's result is within the tolerance of it.
    OnlyMlxHits,
}

/// The verdict of every element where the outputs differ, judged against the program run
/// again by nuvec with its float inputs widened to float64, within the tolerance of the
/// output's dtype (or of the narrowest float type the program computes in); `None` when the
/// program cannot be judged so (it casts, fails in float64, or an element is not a finite
/// number there).
pub(super) fn float64_verdicts(
    program: &Value,
    mlx: &Value,
    nuvec: &Value,
) -> Option<Vec<Verdict>> {
    let exact = run_in_float64(program)?;
    let floor = super::compare::precision_floor(program).map(tolerance);
    let mut verdicts = Vec::new();
    for i in differing(mlx, nuvec) {
        let own = tolerance(mlx["outputs"][i]["dtype"].as_str().unwrap_or(""));
        let (relative, absolute) = floor.map_or(own, |f| (own.0.max(f.0), own.1.max(f.1)));
        let tolerance = (relative, absolute);
        let (a, b) = (values(&mlx["outputs"][i]), values(&nuvec["outputs"][i]));
        let e = values(&exact["outputs"][i]);
        if a.len() != b.len() || a.len() != e.len() {
            return None;
        }
        for ((x, y), z) in a.iter().zip(&b).zip(&e) {
            let (x, y, z) = (number(x)?, number(y)?, number(z)?);
            if close(x, y, tolerance) {
                continue;
            }
            if !z.is_finite() {
                return None;
            }
            verdicts.push(match (close(x, z, tolerance), close(y, z, tolerance)) {
                (true, true) => Verdict::BothHit,
                (false, false) => Verdict::BothMiss,
                (false, true) => Verdict::OnlyNuvecHits,
                (true, false) => Verdict::OnlyMlxHits,
            });
        }
    }
    (!verdicts.is_empty()).then_some(verdicts)
}

/// Whether the float64 run judges every differing element and none of them for MLX alone:
/// nuvec's result is the exact one, or neither side's is, or both are.
pub(super) fn float64_sides_with_nuvec(program: &Value, mlx: &Value, nuvec: &Value) -> bool {
    float64_verdicts(program, mlx, nuvec)
        .is_some_and(|verdicts| verdicts.iter().all(|v| *v != Verdict::OnlyMlxHits))
}

/// Whether every element where the outputs differ is 0 in the program run in float64 (float
/// inputs widened) and, on both sides, within 8 ulps of the narrow float type the program
/// computes in, scaled by the largest magnitude among MLX's outputs.
pub(super) fn half_precision_noise_around_zero(
    program: &Value,
    mlx: &Value,
    nuvec: &Value,
) -> bool {
    let epsilon = match super::compare::precision_floor(program) {
        Some("float16") => 2f64.powi(-10),
        Some("bfloat16") => 2f64.powi(-7),
        _ => return false,
    };
    let Some(exact) = run_in_float64(program) else {
        return false;
    };
    let scale = mlx["outputs"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(values)
        .filter_map(|v| number(&v))
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    let noise = 8.0 * epsilon * scale;
    let differing = differing(mlx, nuvec);
    !differing.is_empty()
        && differing.iter().all(|&i| {
            let (a, b) = (values(&mlx["outputs"][i]), values(&nuvec["outputs"][i]));
            let e = values(&exact["outputs"][i]);
            let tolerance = tolerance(mlx["outputs"][i]["dtype"].as_str().unwrap_or(""));
            a.len() == b.len()
                && a.len() == e.len()
                && a.iter().zip(&b).zip(&e).all(|((x, y), z)| {
                    let (Some(x), Some(y), Some(z)) = (number(x), number(y), number(z)) else {
                        return false;
                    };
                    close(x, y, tolerance)
                        || (z.abs() <= 1e-9 * scale.max(1.0)
                            && x.abs() <= noise
                            && y.abs() <= noise)
                })
        })
}
