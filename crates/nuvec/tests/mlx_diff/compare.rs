//! What counts as a difference between MLX's result and nuvec's: an error in one and values in
//! the other, a panic in nuvec, or outputs that differ in number, dtype, shape or value
//! (NaN against NaN and equal infinities agree; floats within their dtype's tolerance). The
//! differences kept on purpose are listed in [`DELIBERATE`], each with its reason, as in
//! docs/mlx-differences.md.

use serde_json::Value;

/// A difference nuvec keeps on purpose: its name, why, and whether a case is one.
pub(crate) struct Deliberate {
    pub(crate) name: &'static str,
    pub(crate) reason: &'static str,
    pub(crate) matches: fn(program: &Value, mlx: &Value, nuvec: &Value) -> bool,
}

/// The differences from MLX that nuvec keeps, all of them strictly safer.
pub(crate) const DELIBERATE: &[Deliberate] = &[];

/// The tolerance of a float dtype: (relative, absolute).
fn tolerance(dtype: &str) -> (f64, f64) {
    match dtype {
        "float16" => (1e-2, 1e-3),
        "bfloat16" => (4e-2, 1e-2),
        _ => (2e-4, 1e-5),
    }
}

fn number(value: &Value) -> Option<f64> {
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

fn close(a: f64, b: f64, (relative, absolute): (f64, f64)) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= absolute + relative * a.abs().max(b.abs())
}

fn compare_output(index: usize, theirs: &Value, ours: &Value) -> Option<String> {
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
        return Some(format!("output {index}: {} values against {}", a.len(), b.len()));
    }
    let float = matches!(dtype, "float16" | "bfloat16" | "float32" | "float64");
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let (Some(x), Some(y)) = (number(x), number(y)) else {
            return Some(format!("output {index}[{i}]: unreadable values {x} and {y}"));
        };
        let same = if float {
            close(x, y, tolerance(dtype))
        } else {
            x == y
        };
        if !same {
            return Some(format!(
                "output {index}[{i}] ({dtype}): MLX {x}, nuvec {y}"
            ));
        }
    }
    None
}

/// The difference between MLX's outcome and nuvec's, if any (and not a deliberate one).
pub(crate) fn difference(program: &Value, mlx: &Value, nuvec: &Value) -> Option<String> {
    let found = raw_difference(mlx, nuvec)?;
    if DELIBERATE.iter().any(|d| (d.matches)(program, mlx, nuvec)) {
        return None;
    }
    Some(found)
}

fn raw_difference(mlx: &Value, nuvec: &Value) -> Option<String> {
    if nuvec["panic"].as_bool() == Some(true) {
        return Some(format!("nuvec panicked: {}", nuvec["error"]));
    }
    match (mlx["ok"].as_bool(), nuvec["ok"].as_bool()) {
        (Some(false), Some(false)) => None,
        (Some(true), Some(false)) => Some(format!("nuvec failed where MLX succeeded: {}", nuvec["error"])),
        (Some(false), Some(true)) => Some(format!("MLX refused what nuvec computed: {}", mlx["error"])),
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
                .find_map(|(i, (x, y))| compare_output(i, x, y))
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
