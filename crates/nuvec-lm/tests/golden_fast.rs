//! The core's `ops::fast` against MLX's `mx.fast` (fixtures from
//! `scripts/golden/make_lm_fixtures.py`): `rms_norm`, `layer_norm`, `rope` (halves and pairs,
//! partial dims, offsets, scales, explicit frequencies) and `scaled_dot_product_attention`
//! (no mask, causal, additive and boolean masks, grouped heads, one query against a cache),
//! and `gather_qmm` / `gather_mm` (mixture-of-experts products): their values and the
//! gradients of `sum(out · cotangent)`.

use nuvec_core::ops::fast::{self, AttentionMask, RopeFrequencies};
use nuvec_core::transforms::vjp;
use nuvec_core::{ops, Array, DType};
use nuvec_test_support::{array_of, compare_with};
use serde_json::Value;

fn cases(kind: &str) -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fast.json");
    let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let picked: Vec<Value> = all["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == kind)
        .cloned()
        .collect();
    assert!(!picked.is_empty(), "no {kind} cases");
    picked
}

const TOLERANCE: Option<(f64, f64)> = Some((1e-4, 1e-5));

/// Checks `f`'s value and the gradients of `sum(f · cotangent)` for the named inputs.
fn check(case: &Value, names: &[&str], f: impl Fn(&[Array]) -> Array) {
    let inputs: Vec<Array> = names.iter().map(|n| array_of(&case[*n])).collect();
    let name = case["name"].as_str().unwrap();
    compare_with(&f(&inputs), &case["y"], TOLERANCE).unwrap_or_else(|e| panic!("{name}: {e}"));
    let cotangent = array_of(&case["cotangent"]);
    let (_, grads) = vjp(|a| vec![f(a)], &inputs, &[cotangent]).unwrap();
    for (input, grad) in names.iter().zip(&grads) {
        compare_with(grad, &case["grads"][*input], TOLERANCE)
            .unwrap_or_else(|e| panic!("{name}: gradient of {input}: {e}"));
    }
}

fn present<'a>(case: &'a Value, names: &[&'a str]) -> Vec<&'a str> {
    names
        .iter()
        .copied()
        .filter(|n| case.get(*n).is_some_and(|v| !v.is_null()))
        .collect()
}

#[test]
fn rms_norm_matches_mlx() {
    for case in cases("rms_norm") {
        let eps = case["eps"].as_f64().unwrap() as f32;
        check(&case, &["x", "weight"], |a| {
            fast::rms_norm(&a[0], Some(&a[1]), eps)
        });
    }
}

#[test]
fn layer_norm_matches_mlx() {
    for case in cases("layer_norm") {
        let eps = case["eps"].as_f64().unwrap() as f32;
        let names = present(&case, &["x", "weight", "bias"]);
        let (has_w, has_b) = (names.contains(&"weight"), names.contains(&"bias"));
        check(&case, &names, |a| {
            let w = has_w.then(|| &a[1]);
            let b = has_b.then(|| &a[if has_w { 2 } else { 1 }]);
            fast::layer_norm(&a[0], w, b, eps)
        });
    }
}

#[test]
fn rope_matches_mlx() {
    for case in cases("rope") {
        let dims = case["dims"].as_u64().unwrap() as usize;
        let traditional = case["traditional"].as_bool().unwrap();
        let scale = case["scale"].as_f64().unwrap() as f32;
        let offset = case["offset"].as_u64().unwrap() as usize;
        let freqs = case.get("freqs").filter(|f| !f.is_null()).map(array_of);
        let base = case["base"].as_f64().unwrap_or(0.0) as f32;
        check(&case, &["x"], |a| {
            let frequencies = match &freqs {
                Some(f) => RopeFrequencies::Explicit(f),
                None => RopeFrequencies::Base(base),
            };
            fast::rope(&a[0], dims, traditional, frequencies, scale, offset)
        });
    }
}

#[test]
fn attention_matches_mlx() {
    for case in cases("sdpa") {
        let scale = case["scale"].as_f64().unwrap() as f32;
        let mask = match &case["mask"] {
            Value::Null => None,
            Value::String(s) if s == "causal" => Some(None),
            spec => Some(Some(array_of(spec))),
        };
        check(&case, &["q", "k", "v"], |a| {
            let mask = match &mask {
                None => AttentionMask::None,
                Some(None) => AttentionMask::Causal,
                Some(Some(m)) => AttentionMask::Array(m),
            };
            fast::scaled_dot_product_attention(&a[0], &a[1], &a[2], scale, mask)
        });
    }
}

#[test]
fn bad_arguments_are_errors_naming_the_op() {
    let x = ops::ones(&[2, 8], DType::F32);
    let error = fast::rms_norm(&x, Some(&ops::ones(&[4], DType::F32)), 1e-5)
        .check()
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("[rms_norm] weight must have shape [8]"),
        "{error}"
    );
    let error = fast::rope(&x, 5, false, RopeFrequencies::Base(1e4), 1.0, 0)
        .check()
        .unwrap_err();
    assert!(error.to_string().contains("[rope]"), "{error}");
    let q = ops::ones(&[1, 3, 2, 8], DType::F32);
    let kv = ops::ones(&[1, 2, 2, 8], DType::F32);
    let error = fast::scaled_dot_product_attention(&q, &kv, &kv, 1.0, AttentionMask::None)
        .check()
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("3 query heads are not a multiple of 2"),
        "{error}"
    );
}

fn indices(case: &Value, name: &str) -> Option<Array> {
    case.get(name).filter(|v| !v.is_null()).map(array_of)
}

#[test]
fn gather_qmm_matches_mlx_with_its_gradient() {
    for case in cases("gather_qmm") {
        let name = case["name"].as_str().unwrap();
        let (wq, scales, biases) = (
            array_of(&case["wq"]),
            array_of(&case["scales"]),
            array_of(&case["biases"]),
        );
        let (lhs, rhs) = (indices(&case, "lhs_indices"), indices(&case, "rhs_indices"));
        let group_size = case["group_size"].as_u64().unwrap() as usize;
        let bits = case["bits"].as_u64().unwrap() as u32;
        let f = |x: &Array| {
            ops::gather_qmm(
                x,
                &wq,
                &scales,
                &biases,
                lhs.as_ref(),
                rhs.as_ref(),
                true,
                group_size,
                bits,
            )
        };
        let x = array_of(&case["x"]);
        compare_with(&f(&x), &case["y"], TOLERANCE).unwrap_or_else(|e| panic!("{name}: {e}"));
        if case.get("cotangent").is_some() {
            let cotangent = array_of(&case["cotangent"]);
            let (_, grads) = vjp(|a| vec![f(&a[0])], &[x], &[cotangent]).unwrap();
            compare_with(&grads[0], &case["grads"]["x"], TOLERANCE)
                .unwrap_or_else(|e| panic!("{name}: gradient of x: {e}"));
        }
    }
}

#[test]
fn gather_mm_matches_mlx_with_its_gradients() {
    for case in cases("gather_mm") {
        assert!(case["b_is_w_transposed"].as_bool().unwrap());
        let rhs = indices(&case, "rhs_indices");
        check(&case, &["x", "w"], |a| {
            ops::gather_mm(&a[0], &ops::swapaxes(&a[1], -1, -2), None, rhs.as_ref())
        });
    }
}
