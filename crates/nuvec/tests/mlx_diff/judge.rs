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

/// The program cut after value `id`, which becomes its only output: the ops that come after
/// it are dropped.
fn up_to(program: &Value, id: u64) -> Value {
    let first_op = program["inputs"].as_array().map_or(0, Vec::len);
    let mut variant = program.clone();
    variant["outputs"] = Value::from(vec![id]);
    if let Some(ops) = program["ops"].as_array() {
        let keep = (id as usize + 1).saturating_sub(first_op).min(ops.len());
        variant["ops"] = Value::from(ops[..keep].to_vec());
    }
    variant
}

/// Whether a float16/bfloat16 cummax or cummin of the program is given a NaN (its input
/// computed by nuvec, under the program's vmaps; other transforms leave that value as it is).
pub(super) fn nan_reaches_a_half_precision_cumulative_extreme(program: &Value) -> bool {
    let ops = program["ops"].as_array().cloned().unwrap_or_default();
    let vmaps: Vec<Value> = program["transforms"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["kind"] == "vmap")
        .cloned()
        .collect();
    ops.iter()
        .filter(|op| op["op"] == "cummax" || op["op"] == "cummin")
        .filter_map(|op| op["args"][0].as_u64())
        .any(|argument| {
            let mut variant = up_to(program, argument);
            variant["transforms"] = Value::from(vmaps.clone());
            let result = super::interpret::run(&variant);
            let output = &result["outputs"][0];
            result["ok"] == true
                && matches!(output["dtype"].as_str(), Some("float16" | "bfloat16"))
                && output["data"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|v| v == "nan"))
        })
}

/// Whether every differing output is a cast to bool of a float value that is 0 in float64
/// (the program's float inputs widened; up to float64's own roundings, 1e-12 of the largest
/// value) and a float32 rounding from 0 in nuvec's result: where the sum cancels, one side's
/// roundings land on 0 and the other's just off it.
pub(super) fn casts_of_rounded_zeros(program: &Value, mlx: &Value, nuvec: &Value) -> bool {
    let ops = program["ops"].as_array().cloned().unwrap_or_default();
    let first_op = program["inputs"].as_array().map_or(0, Vec::len);
    let differing = differing(mlx, nuvec);
    !differing.is_empty()
        && differing.iter().all(|&i| {
            let Some(id) = program["outputs"][i].as_u64().map(|id| id as usize) else {
                return false;
            };
            let Some(op) = id.checked_sub(first_op).and_then(|k| ops.get(k)) else {
                return false;
            };
            let Some(argument) = op["args"][0].as_u64() else {
                return false;
            };
            if op["op"] != "astype" || op["dtype"] != "bool" {
                return false;
            }
            let variant = up_to(program, argument);
            let (Some(exact), ours) = (run_in_float64(&variant), super::interpret::run(&variant))
            else {
                return false;
            };
            let (e, o) = (values(&exact["outputs"][0]), values(&ours["outputs"][0]));
            let (a, b) = (values(&mlx["outputs"][i]), values(&nuvec["outputs"][i]));
            let scale = o
                .iter()
                .filter_map(number)
                .filter(|v| v.is_finite())
                .fold(0.0f64, |m, v| m.max(v.abs()));
            let noise = 8.0 * f64::from(f32::EPSILON) * scale;
            [a.len(), b.len(), e.len()].iter().all(|&n| n == o.len())
                && (0..o.len()).all(|j| {
                    a[j] == b[j]
                        || matches!(
                            (number(&e[j]), number(&o[j])),
                            (Some(exact), Some(ours))
                                if exact.abs() <= 1e-12 * scale && ours.abs() <= noise
                        )
                })
        })
}

/// Whether every element where the outputs differ is infinite or NaN on both sides and in the
/// program run in float64 too: an infinite factor met a term that is 0 in exact arithmetic,
/// and roundings gave that term its sign.
pub(super) fn infinities_signed_by_rounding(program: &Value, mlx: &Value, nuvec: &Value) -> bool {
    let Some(exact) = run_in_float64(program) else {
        return false;
    };
    let differing = differing(mlx, nuvec);
    !differing.is_empty()
        && differing.iter().all(|&i| {
            let (a, b) = (values(&mlx["outputs"][i]), values(&nuvec["outputs"][i]));
            let e = values(&exact["outputs"][i]);
            let tolerance = tolerance(mlx["outputs"][i]["dtype"].as_str().unwrap_or(""));
            a.len() == b.len()
                && a.len() == e.len()
                && (0..a.len()).all(|j| match (number(&a[j]), number(&b[j]), number(&e[j])) {
                    (Some(x), Some(y), Some(z)) => {
                        close(x, y, tolerance)
                            || (!x.is_finite() && !y.is_finite() && !z.is_finite())
                    }
                    _ => a[j] == b[j],
                })
        })
}
