//! Shrinking a program on which nuvec and MLX differ: try smaller programs (a transform fewer,
//! an op fewer, one output, values rounded to simpler ones) and keep the first that still
//! differs, until none does. Each round runs all its candidates in one MLX batch.

use super::compare;
use super::interpret;
use super::mlx::Mlx;
use serde_json::{json, Value};

/// `program` without op `index`: its uses read its first argument instead (or the program is
/// dropped when the op has none).
fn without_op(program: &Value, index: usize) -> Option<Value> {
    let inputs = program["inputs"].as_array()?.len();
    let ops = program["ops"].as_array()?;
    let removed = inputs + index;
    let replacement = ops[index]["args"].as_array()?.first()?.as_u64()? as usize;
    let renumber = |v: usize| -> usize {
        match v {
            v if v == removed => replacement,
            v if v > removed => v - 1,
            v => v,
        }
    };
    let mut new_ops = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if i == index {
            continue;
        }
        let mut op = op.clone();
        let args: Vec<usize> = op["args"]
            .as_array()?
            .iter()
            .filter_map(Value::as_u64)
            .map(|a| renumber(a as usize))
            .collect();
        op["args"] = json!(args);
        new_ops.push(op);
    }
    let outputs: Vec<usize> = program["outputs"]
        .as_array()?
        .iter()
        .filter_map(Value::as_u64)
        .map(|o| renumber(o as usize))
        .collect();
    let mut smaller = program.clone();
    smaller["ops"] = json!(new_ops);
    smaller["outputs"] = json!(outputs);
    Some(smaller)
}

/// Smaller programs to try, most reducing first.
fn candidates(program: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let transforms = program["transforms"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for i in 0..transforms.len() {
        let mut fewer = transforms.clone();
        fewer.remove(i);
        let mut candidate = program.clone();
        candidate["transforms"] = json!(fewer);
        // A vmap removed leaves its batch axis on the inputs: keep the program as it is
        // otherwise; the op-level candidates and later rounds take care of the rest.
        out.push(candidate);
    }
    let ops = program["ops"].as_array().map_or(0, Vec::len);
    for i in (0..ops).rev() {
        if let Some(candidate) = without_op(program, i) {
            out.push(candidate);
        }
    }
    if program["outputs"].as_array().map_or(0, Vec::len) > 1 {
        let mut candidate = program.clone();
        candidate["outputs"] = json!([program["outputs"][0]]);
        out.push(candidate);
        let mut candidate = program.clone();
        candidate["outputs"] = json!([program["outputs"][1]]);
        out.push(candidate);
    }
    // Simpler values: every float input as ones, then as its values rounded.
    for (i, input) in program["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let data = input["data"].as_array().cloned().unwrap_or_default();
        if data.iter().all(|v| v == &json!(1.0) || v == &json!(1)) {
            continue;
        }
        let ones: Vec<Value> = data
            .iter()
            .map(|v| match v {
                Value::Bool(_) => json!(true),
                v if v.is_i64() || v.is_u64() => json!(1),
                _ => json!(1.0),
            })
            .collect();
        let mut candidate = program.clone();
        candidate["inputs"][i]["data"] = json!(ones);
        out.push(candidate);
    }
    out
}

/// The smallest program reachable from `program` on which nuvec and MLX still differ, and
/// that difference; at most `rounds` rounds.
pub(crate) fn shrink(program: &Value, why: &str, mlx: &Mlx, rounds: usize) -> (Value, String) {
    let mut current = (program.clone(), why.to_string());
    for _ in 0..rounds {
        let tries = candidates(&current.0);
        if tries.is_empty() {
            break;
        }
        let theirs = mlx.run(&tries);
        let found = tries
            .into_iter()
            .zip(theirs)
            .find_map(|(candidate, theirs)| {
                let ours = interpret::run(&candidate);
                compare::difference(&candidate, &theirs, &ours).map(|why| (candidate, why))
            });
        match found {
            Some(smaller) => current = smaller,
            None => break,
        }
    }
    current
}
