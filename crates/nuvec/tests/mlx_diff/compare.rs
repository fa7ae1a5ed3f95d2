//! What counts as a difference between MLX's result and nuvec's: an error in one and values in
//! the other, a panic in nuvec, or outputs that differ in number, dtype, shape or value
//! (NaN against NaN and equal infinities agree; floats within their dtype's tolerance). The
//! differences kept on purpose are listed in [`super::deliberate::DELIBERATE`], each with its
//! reason, as in docs/mlx-differences.md.

use super::deliberate::DELIBERATE;
use serde_json::Value;

/// The tolerance of a float dtype: (relative, absolute).
pub(super) fn tolerance(dtype: &str) -> (f64, f64) {
    match dtype {
        "float16" => (1e-2, 1e-3),
        "bfloat16" => (4e-2, 1e-2),
        _ => (2e-4, 1e-5),
    }
}

pub(super) fn number(value: &Value) -> Option<f64> {
    match value {
        Value::String(s) => match s.as_str() {
            "nan" => Some(f64::NAN),
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        other => other.as_f64(),
    }
}

pub(super) fn close(a: f64, b: f64, (relative, absolute): (f64, f64)) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= absolute + relative * a.abs().max(b.abs())
}

/// Output `index` of each side, compared within its dtype's tolerance, or `floor`'s where that
/// is looser.
pub(super) fn compare_output(
    index: usize,
    theirs: &Value,
    ours: &Value,
    floor: Option<&str>,
) -> Option<String> {
    let dtype = theirs["dtype"].as_str().unwrap_or("?");
    if theirs["dtype"] != ours["dtype"] {
        return Some(format!(
            "output {index}: dtype {} in MLX, {} in nuvec",
            theirs["dtype"], ours["dtype"]
        ));
    }
    if theirs["shape"] != ours["shape"] {
        return Some(format!(
            "output {index}: shape {} in MLX, {} in nuvec",
            theirs["shape"], ours["shape"]
        ));
    }
    let (a, b) = (
        theirs["data"].as_array().cloned().unwrap_or_default(),
        ours["data"].as_array().cloned().unwrap_or_default(),
    );
    if a.len() != b.len() {
        return Some(format!(
            "output {index}: {} values against {}",
            a.len(),
            b.len()
        ));
    }
    let float = matches!(dtype, "float16" | "bfloat16" | "float32" | "float64");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let (Some(x), Some(y)) = (number(x), number(y)) else {
            return Some(format!(
                "output {index}[{i}]: unreadable values {x} and {y}"
            ));
        };
        let same = if float {
            let (own, floor) = (tolerance(dtype), floor.map_or((0.0, 0.0), tolerance));
            close(x, y, (own.0.max(floor.0), own.1.max(floor.1)))
        } else {
            x == y
        };
        if !same {
            return Some(format!("output {index}[{i}] ({dtype}): MLX {x}, nuvec {y}"));
        }
    }
    None
}

/// The lowest float precision a program computes in (an input's dtype or a cast's): a result
/// that went through float16 or bfloat16 is compared within that type's tolerance, whatever
/// its own dtype, since a rounding of the narrow type, one ulp apart, carries into it.
pub(super) fn precision_floor(program: &Value) -> Option<&'static str> {
    let dtypes: Vec<&str> = program["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(program["ops"].as_array().into_iter().flatten())
        .filter_map(|v| v["dtype"].as_str())
        .collect();
    ["bfloat16", "float16"]
        .into_iter()
        .find(|narrow| dtypes.contains(narrow))
}

/// The difference between MLX's outcome and nuvec's, if any (and not a deliberate one).
pub(crate) fn difference(program: &Value, mlx: &Value, nuvec: &Value) -> Option<String> {
    let found = raw_difference(mlx, nuvec, precision_floor(program))?;
    if DELIBERATE.iter().any(|d| (d.matches)(program, mlx, nuvec)) {
        return None;
    }
    Some(found)
}

fn raw_difference(mlx: &Value, nuvec: &Value, floor: Option<&str>) -> Option<String> {
    if nuvec["panic"].as_bool() == Some(true) {
        return Some(format!("nuvec panicked: {}", nuvec["error"]));
    }
    match (mlx["ok"].as_bool(), nuvec["ok"].as_bool()) {
        (Some(false), Some(false)) => None,
        (Some(true), Some(false)) => Some(format!(
            "nuvec failed where MLX succeeded: {}",
            nuvec["error"]
        )),
        (Some(false), Some(true)) => {
            Some(format!("MLX refused what nuvec computed: {}", mlx["error"]))
        }
        (Some(true), Some(true)) => {
            let (a, b) = (
                mlx["outputs"].as_array().cloned().unwrap_or_default(),
                nuvec["outputs"].as_array().cloned().unwrap_or_default(),
            );
            if a.len() != b.len() {
                return Some(format!("{} outputs in MLX, {} in nuvec", a.len(), b.len()));
            }
            a.iter()
                .zip(&b)
                .enumerate()
                .find_map(|(i, (x, y))| compare_output(i, x, y, floor))
        }
        _ => Some("an unreadable result".into()),
    }
}

/// The kind of a difference, for grouping: its text without numbers.
pub(crate) fn kind(why: &str) -> String {
    why.chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect::<String>()
        .split(": MLX")
        .next()
        .unwrap_or("")
        .chars()
        .take(120)
        .collect()
}
