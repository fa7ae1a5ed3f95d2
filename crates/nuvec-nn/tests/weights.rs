//! Weights files both ways with MLX 0.32.4: a file written by `mlx.nn`'s `save_weights`
//! loads here and gives MLX's output; a file written here loads in MLX and gives ours.
//! Loading a file that lacks a parameter or has another shape is an error naming it.

use nuvec::{ops, random, DType};
use nuvec_nn::{Activation, Layer, Linear, Sequential, Weights};
use nuvec_test_support::{array_of, compare_with};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn mlp() -> Sequential {
    Sequential::new(vec![
        Layer::Linear(Linear::new(4, 8)),
        Layer::Activation(Activation::Relu),
        Layer::Linear(Linear::new(8, 2)),
    ])
}

#[test]
fn weights_saved_by_mlx_load_and_give_mlx_output() {
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("mlp_weights.json")).unwrap(),
    )
    .unwrap();
    let mut model = mlp();
    model
        .load_weights(fixtures().join("mlp_weights.safetensors"))
        .unwrap();
    let y = model.forward(&array_of(&expected["x"]));
    compare_with(&y, &expected["y"], Some((1e-5, 1e-6))).unwrap();
}

/// The venv's Python with MLX, as CI installs it; `None` (a visible skip) when absent and not
/// required.
fn mlx_python() -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-mlx/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var_os("NUVEC_REQUIRE_MLX_LAUNCH").is_none(),
        "NUVEC_REQUIRE_MLX_LAUNCH is set but .venv-mlx/bin/python is missing"
    );
    eprintln!("SKIPPED: MLX is not installed in .venv-mlx (`cargo xtask golden` installs it)");
    None
}

#[test]
fn weights_saved_here_load_in_mlx_and_give_our_output() {
    let Some(python) = mlx_python() else {
        return;
    };
    random::seed(5);
    let model = mlp();
    let path =
        std::env::temp_dir().join(format!("nuvec-weights-{}.safetensors", std::process::id()));
    model.save_weights(&path).unwrap();
    let x = random::normal(&[2, 4], DType::F32, None);
    let ours = model.forward(&x).to_vec::<f32>().unwrap();
    let script = format!(
        "import mlx.core as mx, mlx.nn as nn\n\
         m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n\
         m.load_weights({path:?})\n\
         x = mx.array({x:?}, dtype=mx.float32).reshape(2, 4)\n\
         print(' '.join(repr(v) for v in m(x).reshape(-1).tolist()))\n",
        path = path.display().to_string(),
        x = x.to_vec::<f32>().unwrap(),
    );
    let output = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let theirs: Vec<f32> = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(theirs.len(), ours.len());
    for (a, b) in theirs.iter().zip(&ours) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "{theirs:?} vs {ours:?}"
        );
    }
}

#[test]
fn loading_a_file_that_does_not_fit_the_model_names_what_is_wrong() {
    let mut bigger = Sequential::new(vec![
        Layer::Linear(Linear::new(4, 8)),
        Layer::Linear(Linear::new(8, 3)),
    ]);
    let error = bigger
        .load_weights(fixtures().join("mlp_weights.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("layers.1"), "{error}");
    let mut wide = mlp();
    if let Layer::Linear(l) = &mut wide.layers[2] {
        l.weight = ops::zeros(&[3, 8], DType::F32);
    }
    let error = wide
        .load_weights(fixtures().join("mlp_weights.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("layers.2.weight") && error.contains("[3, 8]"),
        "{error}"
    );
    let error = mlp()
        .load_weights("/nonexistent/weights.safetensors")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("/nonexistent/weights.safetensors"),
        "{error}"
    );
}
