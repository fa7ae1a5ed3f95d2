//! The questions the deliberate differences' predicates ask about a program and its two
//! outcomes.

use super::compare::{close, compare_output, number, tolerance};
use serde_json::Value;

pub(super) fn has_transform(program: &Value, kind: &str) -> bool {
    program["transforms"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["kind"] == kind))
}

pub(super) fn has_op(program: &Value, name: &str) -> bool {
    program["ops"]
        .as_array()
        .is_some_and(|ops| ops.iter().any(|op| op["op"] == name))
}

pub(super) fn differentiates(program: &Value) -> bool {
    ["grad", "vjp", "jvp"]
        .iter()
        .any(|k| has_transform(program, k))
}

/// How many of the transforms differentiate.
pub(super) fn differentiations(program: &Value) -> usize {
    program["transforms"].as_array().map_or(0, |t| {
        t.iter()
            .filter(|t| ["grad", "vjp", "jvp"].iter().any(|k| t["kind"] == *k))
            .count()
    })
}

pub(super) fn has_integer_input(program: &Value) -> bool {
    program["inputs"].as_array().is_some_and(|inputs| {
        inputs.iter().any(|i| {
            !matches!(
                i["dtype"].as_str(),
                Some("float32" | "float16" | "bfloat16")
            )
        })
    })
}

/// Whether the program has a boolean input or an op that gives booleans.
pub(super) fn makes_booleans(program: &Value) -> bool {
    let ops = [
        "equal",
        "greater",
        "less",
        "isnan",
        "logical_not",
        "any",
        "all",
    ];
    ops.iter().any(|op| has_op(program, op))
        || program["inputs"]
            .as_array()
            .is_some_and(|i| i.iter().any(|i| i["dtype"] == "bool"))
        || program["ops"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| o["dtype"] == "bool"))
}

/// Whether unsigned values appear: an input, a cast, or an op giving indices.
pub(super) fn makes_unsigned(program: &Value) -> bool {
    let unsigned = |d: &Value| d.as_str().is_some_and(|d| d.starts_with("uint"));
    program["inputs"]
        .as_array()
        .is_some_and(|i| i.iter().any(|i| unsigned(&i["dtype"])))
        || program["ops"]
            .as_array()
            .is_some_and(|o| o.iter().any(|o| unsigned(&o["dtype"])))
        || ["argmax", "argmin", "argsort"]
            .iter()
            .any(|op| has_op(program, op))
}

/// Whether an op gives booleans or indices.
pub(super) fn makes_booleans_or_indices(program: &Value) -> bool {
    makes_booleans(program)
        || ["argmax", "argmin", "argsort"]
            .iter()
            .any(|op| has_op(program, op))
}

/// Whether integer or boolean values appear: an input, an op that gives them, or a where
/// (whose condition becomes boolean).
pub(super) fn has_integer_values(program: &Value) -> bool {
    has_integer_input(program)
        || makes_booleans_or_indices(program)
        || has_op(program, "where")
        || program["ops"].as_array().is_some_and(|ops| {
            ops.iter().any(|o| {
                o["op"] == "astype"
                    && !matches!(
                        o["dtype"].as_str(),
                        Some("float32" | "float16" | "bfloat16")
                    )
            })
        })
}

/// Whether a float16 or bfloat16 input holds a NaN (what MLX's half-precision cummax and
/// cummin lose, so that everything computed from them differs: an argmin, a sum).
pub(super) fn half_precision_nan_input(program: &Value) -> bool {
    program["inputs"].as_array().is_some_and(|inputs| {
        inputs.iter().any(|i| {
            matches!(i["dtype"].as_str(), Some("float16" | "bfloat16"))
                && i["data"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|v| v == "nan"))
        })
    })
}

/// Whether an input has no elements.
pub(super) fn has_empty_input(program: &Value) -> bool {
    program["inputs"].as_array().is_some_and(|inputs| {
        inputs
            .iter()
            .any(|i| i["data"].as_array().is_some_and(Vec::is_empty))
    })
}

/// Whether erf is applied to an input that holds a zero.
pub(super) fn erf_of_an_input_holding_zero(program: &Value) -> bool {
    let inputs = program["inputs"].as_array().cloned().unwrap_or_default();
    program["ops"].as_array().is_some_and(|ops| {
        ops.iter().any(|op| {
            op["op"] == "erf"
                && op["args"][0]
                    .as_u64()
                    .and_then(|i| inputs.get(i as usize))
                    .and_then(|input| input["data"].as_array())
                    .is_some_and(|d| d.iter().any(|v| v.as_f64() == Some(0.0)))
        })
    })
}

/// Whether any output holds a NaN.
pub(super) fn nan_in_an_output(result: &Value) -> bool {
    result["outputs"].as_array().is_some_and(|outputs| {
        outputs.iter().any(|o| {
            o["data"]
                .as_array()
                .is_some_and(|d| d.iter().any(|v| v == "nan"))
        })
    })
}

pub(super) fn dims(output: &Value) -> Vec<u64> {
    output["shape"]
        .as_array()
        .map(|s| s.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

pub(super) fn both_ok(mlx: &Value, nuvec: &Value) -> bool {
    mlx["ok"] == true && nuvec["ok"] == true
}

pub(super) fn error_has(result: &Value, text: &str) -> bool {
    result["ok"] == false && result["error"].as_str().is_some_and(|e| e.contains(text))
}

/// The outputs that differ, when both have the same number.
pub(super) fn differing(mlx: &Value, nuvec: &Value) -> Vec<usize> {
    let (a, b) = (
        mlx["outputs"].as_array().cloned().unwrap_or_default(),
        nuvec["outputs"].as_array().cloned().unwrap_or_default(),
    );
    if a.len() != b.len() {
        return vec![usize::MAX];
    }
    (0..a.len())
        .filter(|&i| compare_output(i, &a[i], &b[i], None).is_some())
        .collect()
}

/// An output of zeros (or falses).
pub(super) fn all_zero(output: &Value) -> bool {
    output["data"].as_array().is_some_and(|d| {
        d.iter()
            .all(|v| v == &Value::Bool(false) || v.as_f64() == Some(0.0))
    })
}

/// A boolean or index output of zeros.
pub(super) fn zeros_without_derivative(output: &Value) -> bool {
    matches!(output["dtype"].as_str(), Some("bool" | "uint32")) && all_zero(output)
}

/// Outputs equal (within the dtype's tolerance) except where `excused(MLX's, nuvec's)` holds.
pub(super) fn equal_except(theirs: &Value, ours: &Value, excused: fn(f64, f64) -> bool) -> bool {
    let (Some(a), Some(b)) = (theirs["data"].as_array(), ours["data"].as_array()) else {
        return false;
    };
    let tolerance = tolerance(theirs["dtype"].as_str().unwrap_or(""));
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (number(x), number(y)) {
            (Some(x), Some(y)) => excused(x, y) || close(x, y, tolerance),
            _ => false,
        })
}

/// Outputs equal but where nuvec has NaN.
pub(super) fn nan_in_nuvec_only(theirs: &Value, ours: &Value) -> bool {
    equal_except(theirs, ours, |_, y| y.is_nan())
}

/// Whether every output that differs passes `check(MLX's, nuvec's)`.
pub(super) fn differing_outputs_all(
    mlx: &Value,
    nuvec: &Value,
    check: impl Fn(&Value, &Value) -> bool,
) -> bool {
    differing(mlx, nuvec)
        .iter()
        .all(|&i| check(&mlx["outputs"][i], &nuvec["outputs"][i]))
}

/// Whether the outputs agree but where MLX has NaN.
pub(super) fn only_mlx_has_nan(mlx: &Value, nuvec: &Value) -> bool {
    differing_outputs_all(mlx, nuvec, |a, b| equal_except(a, b, |x, _| x.is_nan()))
}

/// Whether the outputs agree but for the signs of zeros and infinities.
pub(super) fn only_signs_differ(mlx: &Value, nuvec: &Value) -> bool {
    differing_outputs_all(mlx, nuvec, |a, b| {
        equal_except(a, b, |x, y| x == -y && (x.is_infinite() || x == 0.0))
    })
}
