//! Test helpers shared by nuvec's crates: golden fixtures written by MLX (see
//! `scripts/golden/make_fixtures.py`), closeness checks, launching ranks (`ranks`, `mpi`), throwaway
//! ssh servers (`sshd`) and small shared helpers (`helpers`).

use nuvec_core::{with_dtype, Array, DType, Element};
use serde_json::Value;
use std::path::Path;

/// One fixture file: cases computed by MLX.
#[derive(Debug)]
pub struct Fixture {
    /// The MLX version that computed it.
    pub mlx_version: String,
    /// The cases.
    pub cases: Vec<Value>,
}

/// Loads `crates/nuvec/tests/fixtures/<name>.json`.
pub fn load_fixture(name: &str) -> Fixture {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nuvec/tests/fixtures")
        .join(format!("{name}.json"));
    load_fixture_file(&path)
}

/// Loads the fixture file at `path`.
pub fn load_fixture_file(path: &Path) -> Fixture {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let json: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    Fixture {
        mlx_version: json["mlx_version"].as_str().unwrap_or("?").to_string(),
        cases: json["cases"].as_array().cloned().unwrap_or_default(),
    }
}

/// Compares a float32 array with an expected one bit for bit, each expected value (written
/// as its shortest decimal) rounded to float32 first.
pub fn compare_f32_bits(actual: &Array, expected: &Value) -> Result<(), String> {
    let shape = shape_of(expected);
    if actual.dtype() != DType::F32 || actual.shape() != shape.as_slice() {
        return Err(format!(
            "{} {:?} != expected float32 {shape:?}",
            actual.dtype(),
            actual.shape()
        ));
    }
    let got = actual.to_vec::<f32>().map_err(|e| e.to_string())?;
    for (i, (g, w)) in got.iter().zip(values_of(expected)).enumerate() {
        let w = number(&w) as f32;
        if g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()) {
            return Err(format!(
                "element {i}: {g:e} != expected {w:e} (bit for bit)"
            ));
        }
    }
    Ok(())
}

/// A JSON number, or one of the strings "nan", "inf", "-inf".
pub fn number(value: &Value) -> f64 {
    match value {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::String(s) => match s.as_str() {
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            _ => f64::NAN,
        },
        _ => f64::NAN,
    }
}

/// The shape of a fixture array.
pub fn shape_of(spec: &Value) -> Vec<i32> {
    spec["shape"]
        .as_array()
        .map(|s| s.iter().map(|d| d.as_i64().unwrap_or(0) as i32).collect())
        .unwrap_or_default()
}

/// The dtype of a fixture array.
pub fn dtype_of(spec: &Value) -> DType {
    DType::from_name(spec["dtype"].as_str().unwrap_or(""))
        .unwrap_or_else(|| panic!("unknown dtype in {spec}"))
}

/// The flat values of a fixture array (expanding the `gen` generators).
fn values_of(spec: &Value) -> Vec<Value> {
    if let Some(generator) = spec["gen"].as_str() {
        let size: i64 = shape_of(spec).iter().map(|&d| i64::from(d)).product();
        assert_eq!(generator, "mod5", "unknown generator {generator}");
        return (0..size).map(|k| Value::from(k % 5)).collect();
    }
    spec["data"].as_array().cloned().unwrap_or_default()
}

/// The array a fixture describes (`{"dtype", "shape", "data"}`).
pub fn array_of(spec: &Value) -> Array {
    let dtype = dtype_of(spec);
    let shape = shape_of(spec);
    let values = values_of(spec);
    with_dtype!(dtype, T, {
        let data: Vec<T> = values.iter().map(element_of::<T>).collect();
        Array::from_vec(data, &shape)
    })
}

fn element_of<T: Element>(value: &Value) -> T {
    match value {
        Value::Number(n) if n.is_i64() => T::from_i128(i128::from(n.as_i64().unwrap_or(0))),
        Value::Number(n) if n.is_u64() => T::from_i128(i128::from(n.as_u64().unwrap_or(0))),
        other => T::from_f64(number(other)),
    }
}

/// Compares `actual` with the expected fixture array: dtype and shape exactly, integers and
/// bools exactly, floats within a tolerance fitting the dtype. Returns what differs.
pub fn compare(actual: &Array, expected: &Value) -> Result<(), String> {
    compare_with(actual, expected, None)
}

/// [`compare`] with an explicit `(rtol, atol)` tolerance for floats.
pub fn compare_with(
    actual: &Array,
    expected: &Value,
    tolerance: Option<(f64, f64)>,
) -> Result<(), String> {
    let dtype = dtype_of(expected);
    let shape = shape_of(expected);
    if actual.dtype() != dtype {
        return Err(format!("dtype {} != expected {dtype}", actual.dtype()));
    }
    if actual.shape() != shape.as_slice() {
        return Err(format!("shape {:?} != expected {shape:?}", actual.shape()));
    }
    let want = values_of(expected);
    let got: Vec<f64> = with_dtype!(
        dtype,
        T,
        actual
            .to_vec::<T>()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|v| v.to_f64())
            .collect()
    );
    let exact_ints: Option<Vec<i128>> = if dtype.is_float() {
        None
    } else {
        Some(with_dtype!(
            dtype,
            T,
            actual
                .to_vec::<T>()
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|v| v.to_i128())
                .collect()
        ))
    };
    // Relative tolerance fitting the dtype, plus an absolute floor for values that cancel to
    // near zero (sums, matrix products).
    let (rtol, atol) = tolerance.unwrap_or(match dtype {
        DType::F16 => (2e-3, 1e-6),
        DType::BF16 => (1.6e-2, 1e-6),
        DType::F64 => (1e-12, 1e-12),
        _ => (2e-6, 1e-6),
    });
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        if let Some(ints) = &exact_ints {
            let expected_int = match w {
                Value::Number(n) if n.is_i64() => i128::from(n.as_i64().unwrap_or(0)),
                Value::Number(n) if n.is_u64() => i128::from(n.as_u64().unwrap_or(0)),
                other => number(other) as i128,
            };
            if ints[i] != expected_int {
                return Err(format!(
                    "element {i}: {} != expected {expected_int}",
                    ints[i]
                ));
            }
            continue;
        }
        let w = number(w);
        let same = (g.is_nan() && w.is_nan()) || g == &w || (g - w).abs() <= rtol * w.abs() + atol;
        if !same {
            return Err(format!("element {i}: {g} != expected {w} (rtol {rtol})"));
        }
    }
    Ok(())
}

pub mod helpers;
pub mod mpi;
pub mod ranks;
pub mod sshd;

pub use helpers::{values, wait_until_unhealthy};

/// Says on the terminal that a test skipped part of its work and why. It writes to stderr
/// directly: the test harness captures `eprintln!` of passing tests, which would hide it.
pub fn skip(reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {reason}");
}
