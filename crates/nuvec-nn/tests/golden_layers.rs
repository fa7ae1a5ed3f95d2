//! nuvec-nn's layers, activations and losses against MLX 0.32.4
//! (`scripts/golden/make_nn_fixtures.py`): initialisation after a seed bit for bit, forward
//! passes, losses and a gradient to rounding.

use nuvec::{ops, random, Array};
use nuvec_nn::losses::{self, Reduction, Targets};
use nuvec_nn::{activations, Dropout, Embedding, LayerNorm, Linear, Module, RmsNorm, Rope};
use nuvec_test_support::{array_of, compare, compare_f32_bits, compare_with, load_fixture_file};
use serde_json::Value;
use std::path::Path;

fn cases() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layers.json");
    load_fixture_file(&path).cases
}

fn of_kind(kind: &str) -> Vec<Value> {
    let found: Vec<Value> = cases().into_iter().filter(|c| c["kind"] == kind).collect();
    assert!(!found.is_empty(), "no {kind} cases");
    found
}

fn name(case: &Value) -> &str {
    case["name"].as_str().unwrap_or("?")
}

#[track_caller]
fn close(actual: &Array, expected: &Value, what: &str) {
    compare_with(actual, expected, Some((1e-5, 1e-6))).unwrap_or_else(|e| panic!("{what}: {e}"));
}

#[test]
fn linear_and_embedding_draw_mlx_weights_after_the_same_seed() {
    for case in of_kind("linear_init") {
        random::seed(case["seed"].as_u64().unwrap());
        for (i, spec) in case["layers"].as_array().unwrap().iter().enumerate() {
            let layer = Linear::with_bias(
                spec["input_dims"].as_u64().unwrap() as usize,
                spec["output_dims"].as_u64().unwrap() as usize,
                spec["bias"].as_bool().unwrap(),
            );
            let what = format!("{} layer {i}", name(&case));
            compare_f32_bits(&layer.weight, &spec["weight"])
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            match (&layer.bias, spec.get("bias_value")) {
                (Some(bias), Some(expected)) => {
                    compare_f32_bits(bias, expected).unwrap_or_else(|e| panic!("{what} bias: {e}"))
                }
                (None, None) => {}
                _ => panic!("{what}: bias presence differs"),
            }
        }
    }
    for case in of_kind("embedding_init") {
        random::seed(case["seed"].as_u64().unwrap());
        let table = Embedding::new(
            case["num_embeddings"].as_u64().unwrap() as usize,
            case["dims"].as_u64().unwrap() as usize,
        );
        close(&table.weight, &case["weight"], name(&case));
    }
}

#[test]
fn layer_forward_passes_equal_mlx() {
    for case in of_kind("rms_norm") {
        let dims = case["params"]["dims"].as_u64().unwrap() as usize;
        let mut layer = RmsNorm::with_eps(dims, case["params"]["eps"].as_f64().unwrap() as f32);
        layer.weight = array_of(&case["weight"]);
        close(
            &layer.forward(&array_of(&case["x"])),
            &case["y"],
            name(&case),
        );
    }
    for case in of_kind("layer_norm") {
        let p = &case["params"];
        let affine = p["affine"].as_bool().unwrap();
        let mut layer = LayerNorm::with_options(
            p["dims"].as_u64().unwrap() as usize,
            p["eps"].as_f64().unwrap() as f32,
            affine,
            true,
        );
        if affine {
            layer.weight = Some(array_of(&case["weight"]));
            layer.bias = Some(array_of(&case["bias"]));
        }
        close(
            &layer.forward(&array_of(&case["x"])),
            &case["y"],
            name(&case),
        );
    }
    for case in of_kind("rope") {
        let p = &case["params"];
        let layer = Rope::with_options(
            p["dims"].as_u64().unwrap() as usize,
            p["traditional"].as_bool().unwrap(),
            p["base"].as_f64().unwrap() as f32,
            p["scale"].as_f64().unwrap() as f32,
        );
        let y = layer.forward_at(
            &array_of(&case["x"]),
            case["offset"].as_u64().unwrap() as usize,
        );
        close(&y, &case["y"], name(&case));
    }
    for case in of_kind("linear") {
        let bias = case.get("bias").map(array_of);
        let layer = Linear::from_weights(array_of(&case["weight"]), bias);
        close(
            &layer.forward(&array_of(&case["x"])),
            &case["y"],
            name(&case),
        );
    }
    for case in of_kind("embedding") {
        let table = Embedding::from_weight(array_of(&case["weight"]));
        compare(&table.forward(&array_of(&case["indices"])), &case["y"])
            .unwrap_or_else(|e| panic!("{}: {e}", name(&case)));
    }
}

#[test]
fn dropout_drops_what_mlx_drops_after_the_same_seed_and_nothing_in_eval_mode() {
    for case in of_kind("dropout") {
        random::seed(case["seed"].as_u64().unwrap_or(0));
        let mut layer = Dropout::new(case["p"].as_f64().unwrap());
        if case.get("training") == Some(&Value::Bool(false)) {
            layer.eval_mode();
        }
        compare_f32_bits(&layer.forward(&array_of(&case["x"])), &case["y"])
            .unwrap_or_else(|e| panic!("{}: {e}", name(&case)));
    }
}

fn activation(function: &str, x: &Array, case: &Value) -> Array {
    match function {
        "relu" => activations::relu(x),
        "relu6" => activations::relu6(x),
        "leaky_relu" => activations::leaky_relu(x, 0.01),
        "elu" => activations::elu(x, 1.0),
        "selu" => activations::selu(x),
        "celu" => activations::celu(x, 1.0),
        "silu" => activations::silu(x),
        "gelu" => activations::gelu(x),
        "gelu_approx" => activations::gelu_approx(x),
        "gelu_fast_approx" => activations::gelu_fast_approx(x),
        "softplus" => activations::softplus(x),
        "softsign" => activations::softsign(x),
        "mish" => activations::mish(x),
        "log_sigmoid" => activations::log_sigmoid(x),
        "sigmoid" => activations::sigmoid(x),
        "tanh" => activations::tanh(x),
        "hard_tanh" => activations::hard_tanh(x, -1.0, 1.0),
        "hardswish" => activations::hardswish(x),
        "step" => activations::step(x, 0.0),
        "prelu" => activations::prelu(x, &array_of(&case["inputs"]["alpha"])),
        "glu" => activations::glu(x, -1),
        "log_softmax" => activations::log_softmax(x, -1),
        "softmax" => activations::softmax(x, -1),
        other => panic!("no activation {other}"),
    }
}

#[test]
fn activations_equal_mlx() {
    for case in of_kind("activation") {
        let function = case["function"].as_str().unwrap();
        let y = activation(function, &array_of(&case["x"]), &case);
        close(&y, &case["y"], name(&case));
    }
}

fn reduction(kwargs: &Value, default: Reduction) -> Reduction {
    match kwargs["reduction"].as_str() {
        Some("none") => Reduction::None,
        Some("mean") => Reduction::Mean,
        Some("sum") => Reduction::Sum,
        _ => default,
    }
}

/// The loss of `case` with `first` in place of its first input (to differentiate it).
fn loss(case: &Value, first: &Array) -> Array {
    let (kwargs, inputs) = (&case["kwargs"], &case["inputs"]);
    let input = |k: &str| array_of(&inputs[k]);
    let number = |k: &str, d: f64| kwargs[k].as_f64().unwrap_or(d);
    match case["function"].as_str().unwrap() {
        "cross_entropy" => {
            let targets = input("targets");
            let weights = inputs.get("weights").map(array_of);
            let targets = if targets.ndim() == first.ndim() {
                Targets::Probabilities(&targets)
            } else {
                Targets::Classes(&targets)
            };
            losses::cross_entropy(
                first,
                targets,
                weights.as_ref(),
                number("label_smoothing", 0.0),
                reduction(kwargs, Reduction::None),
            )
        }
        "binary_cross_entropy" => losses::binary_cross_entropy(
            first,
            &input("targets"),
            kwargs["with_logits"].as_bool().unwrap_or(true),
            reduction(kwargs, Reduction::Mean),
        ),
        "mse_loss" => {
            losses::mse_loss(first, &input("targets"), reduction(kwargs, Reduction::Mean))
        }
        "l1_loss" => losses::l1_loss(first, &input("targets"), reduction(kwargs, Reduction::Mean)),
        "nll_loss" => {
            losses::nll_loss(first, &input("targets"), reduction(kwargs, Reduction::None))
        }
        "kl_div_loss" => {
            losses::kl_div_loss(first, &input("targets"), reduction(kwargs, Reduction::None))
        }
        "smooth_l1_loss" => losses::smooth_l1_loss(
            first,
            &input("targets"),
            number("beta", 1.0),
            reduction(kwargs, Reduction::Mean),
        ),
        "huber_loss" => losses::huber_loss(
            first,
            &input("targets"),
            number("delta", 1.0),
            reduction(kwargs, Reduction::None),
        ),
        other => panic!("no loss {other}"),
    }
}

fn first_input(case: &Value) -> Array {
    let inputs = case["inputs"].as_object().unwrap();
    let key = ["logits", "inputs", "predictions"]
        .into_iter()
        .find(|k| inputs.contains_key(*k))
        .unwrap();
    array_of(&inputs[key])
}

#[test]
fn losses_and_their_gradients_equal_mlx() {
    for case in of_kind("loss") {
        let first = first_input(&case);
        close(&loss(&case, &first), &case["y"], name(&case));
        if case.get("grad").is_some() {
            let g = nuvec::transforms::grad(|v: &[Array]| loss(&case, &v[0]))(
                std::slice::from_ref(&first),
            )
            .unwrap();
            close(&g[0], &case["grad"], &format!("{} gradient", name(&case)));
        }
    }
}

#[test]
fn modules_name_freeze_and_update_their_parameters_as_mlx() {
    random::seed(0);
    let mut model = nuvec_nn::Sequential::new(vec![
        nuvec_nn::Layer::Linear(Linear::new(4, 8)),
        nuvec_nn::Layer::Activation(nuvec_nn::Activation::Relu),
        nuvec_nn::Layer::Linear(Linear::with_bias(8, 2, false)),
    ]);
    let names: Vec<String> = model.parameters().into_keys().collect();
    assert_eq!(
        names,
        ["layers.0.bias", "layers.0.weight", "layers.2.weight"]
    );
    model.layers[0] = match &model.layers[0] {
        nuvec_nn::Layer::Linear(l) => {
            let mut frozen = l.clone();
            frozen.freeze_keys(&["bias"]);
            nuvec_nn::Layer::Linear(frozen)
        }
        other => other.clone(),
    };
    let trainable: Vec<String> = model.trainable_parameters().into_keys().collect();
    assert_eq!(trainable, ["layers.0.weight", "layers.2.weight"]);
    model.freeze();
    assert!(model.trainable_parameters().is_empty());
    model.unfreeze();
    assert_eq!(model.trainable_parameters().len(), 3);
    let zero = ops::zeros(&[2, 8], nuvec::DType::F32);
    let update = std::collections::BTreeMap::from([("layers.2.weight".to_string(), zero)]);
    model.update(&update).unwrap();
    let y = model.forward(&ops::ones(&[1, 4], nuvec::DType::F32));
    assert_eq!(y.to_vec::<f32>().unwrap(), [0.0, 0.0]);
    let bad = std::collections::BTreeMap::from([(
        "layers.9.weight".to_string(),
        ops::zeros(&[1], nuvec::DType::F32),
    )]);
    assert!(model
        .update(&bad)
        .unwrap_err()
        .to_string()
        .contains("layers.9.weight"));
    model.train(false);
    assert!(!model.is_training());
}
