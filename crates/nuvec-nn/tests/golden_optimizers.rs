//! Optimizers, schedules and gradient clipping against MLX 0.32.4
//! (`scripts/golden/make_nn_fixtures.py`): parameters after each of three steps, the final
//! state (by MLX's flattened names), and the state saved and restored mid-run.

use nuvec::Array;
use nuvec_nn::optim::{self, schedules, Adam, AdamW, LearningRate, Optimizer, Sgd};
use nuvec_nn::Parameters;
use nuvec_test_support::{array_of, compare_with, load_fixture_file};
use serde_json::Value;
use std::path::Path;

fn cases(kind: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/optimizers.json");
    let found: Vec<Value> = load_fixture_file(&path)
        .cases
        .into_iter()
        .filter(|c| c["kind"] == kind)
        .collect();
    assert!(!found.is_empty(), "no {kind} cases");
    found
}

#[track_caller]
fn close(actual: &Array, expected: &Value, what: &str) {
    compare_with(actual, expected, Some((2e-6, 1e-7))).unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn tree(spec: &Value) -> Parameters {
    spec.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), array_of(v)))
        .collect()
}

fn schedule(spec: &Value) -> LearningRate {
    let args = spec["args"].as_array().unwrap();
    let f = |i: usize| args[i].as_f64().unwrap();
    let u = |i: usize| args[i].as_u64().unwrap();
    match spec["schedule"].as_str().unwrap() {
        "cosine_decay" => {
            schedules::cosine_decay(f(0), u(1), args.get(2).map_or(0.0, |v| v.as_f64().unwrap()))
        }
        "exponential_decay" => schedules::exponential_decay(f(0), f(1)),
        "step_decay" => schedules::step_decay(f(0), f(1), u(2)),
        "linear_schedule" => schedules::linear_schedule(f(0), f(1), u(2)),
        "join_schedules" => schedules::join_schedules(
            args[0].as_array().unwrap().iter().map(schedule).collect(),
            args[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap())
                .collect(),
        ),
        other => panic!("no schedule {other}"),
    }
}

fn rate(kwargs: &Value) -> LearningRate {
    match &kwargs["learning_rate"] {
        Value::Object(_) => schedule(&kwargs["learning_rate"]),
        v => LearningRate::Constant(v.as_f64().unwrap()),
    }
}

/// One optimizer step: new parameters and the state after it.
type Stepper = Box<dyn FnMut(&Parameters, &Parameters) -> (Parameters, optim::OptimizerState)>;

fn optimizer(case: &Value) -> Stepper {
    let kwargs = &case["kwargs"];
    let num = |k: &str, d: f64| kwargs[k].as_f64().unwrap_or(d);
    let flag = |k: &str| kwargs[k].as_bool().unwrap_or(false);
    fn boxed<O: Optimizer + 'static>(mut o: O) -> Stepper {
        Box::new(move |g, p| (o.apply_gradients(g, p).unwrap(), o.state().clone()))
    }
    match case["optimizer"].as_str().unwrap() {
        "SGD" => boxed(
            Sgd::new(rate(kwargs))
                .momentum(num("momentum", 0.0))
                .weight_decay(num("weight_decay", 0.0))
                .dampening(num("dampening", 0.0))
                .nesterov(flag("nesterov")),
        ),
        "Adam" => {
            let betas = kwargs["betas"]
                .as_array()
                .map(|b| (b[0].as_f64().unwrap(), b[1].as_f64().unwrap()));
            let (b1, b2) = betas.unwrap_or((0.9, 0.999));
            boxed(
                Adam::new(rate(kwargs))
                    .betas(b1, b2)
                    .eps(num("eps", 1e-8))
                    .bias_correction(flag("bias_correction")),
            )
        }
        "AdamW" => boxed(
            AdamW::new(rate(kwargs))
                .weight_decay(num("weight_decay", 0.01))
                .bias_correction(flag("bias_correction")),
        ),
        other => panic!("no optimizer {other}"),
    }
}

#[test]
fn optimizer_steps_and_states_equal_mlx() {
    for case in cases("optimizer") {
        let name = case["name"].as_str().unwrap();
        let mut step = optimizer(&case);
        let mut params = tree(&case["params"]);
        let mut state = optim::OptimizerState::default();
        for (i, (grads, expected)) in case["grads"]
            .as_array()
            .unwrap()
            .iter()
            .zip(case["steps"].as_array().unwrap())
            .enumerate()
        {
            let (updated, s) = step(&tree(grads), &params);
            for (k, v) in expected.as_object().unwrap() {
                close(&updated[k], v, &format!("{name} step {i} {k}"));
            }
            let lr = &case["learning_rate_after_step"][i]["data"][0];
            assert!(
                (s.learning_rate - lr.as_f64().unwrap()).abs() < 1e-7,
                "{name} step {i} rate"
            );
            params = updated;
            state = s;
        }
        let expected_state = case["state"].as_object().unwrap();
        assert_eq!(
            state.step,
            expected_state["step"]["data"][0].as_u64().unwrap(),
            "{name} step"
        );
        for (k, v) in expected_state
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "step" | "learning_rate"))
        {
            let ours = state
                .arrays
                .get(k)
                .unwrap_or_else(|| panic!("{name}: no state {k}"));
            close(ours, v, &format!("{name} state {k}"));
        }
        assert_eq!(
            state.arrays.len() + 2,
            expected_state.len(),
            "{name}: state names"
        );
    }
}

#[test]
fn schedules_equal_mlx() {
    for case in cases("schedule") {
        let name = case["name"].as_str().unwrap();
        let s = schedule(&case["schedule"]);
        let values = &case["values"]["data"];
        for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let got = s.at(step.as_u64().unwrap()) as f32;
            let want = values[i].as_f64().unwrap() as f32;
            assert!(
                (got - want).abs() <= 1e-7 + 1e-6 * want.abs(),
                "{name} at {step}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn clip_grad_norm_equals_mlx() {
    for case in cases("clip_grad_norm") {
        let name = case["name"].as_str().unwrap();
        let (clipped, norm) =
            optim::clip_grad_norm(&tree(&case["grads"]), case["max_norm"].as_f64().unwrap());
        close(&norm, &case["total_norm"], name);
        for (k, v) in case["clipped"].as_object().unwrap() {
            close(&clipped[k], v, &format!("{name} {k}"));
        }
    }
}

#[test]
fn a_saved_state_resumes_the_same_run() {
    let case = cases("optimizer")
        .into_iter()
        .find(|c| c["name"] == "adam_bias_correction")
        .unwrap();
    let grads: Vec<Parameters> = case["grads"].as_array().unwrap().iter().map(tree).collect();
    let make = || Adam::new(0.01).bias_correction(true);
    let mut straight = make();
    let mut params = tree(&case["params"]);
    for g in &grads {
        params = straight.apply_gradients(g, &params).unwrap();
    }
    let mut first = make();
    let mut resumed = tree(&case["params"]);
    resumed = first.apply_gradients(&grads[0], &resumed).unwrap();
    let path = std::env::temp_dir().join(format!("nuvec-optim-{}.safetensors", std::process::id()));
    first.save_state(&path).unwrap();
    let mut second = make();
    second.load_state(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(second.state().step, 1);
    for g in &grads[1..] {
        resumed = second.apply_gradients(g, &resumed).unwrap();
    }
    for (k, v) in &params {
        assert_eq!(
            resumed[k].to_vec::<f32>().unwrap(),
            v.to_vec::<f32>().unwrap(),
            "{k}"
        );
    }
}
