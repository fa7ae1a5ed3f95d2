//! Reverse-mode gradients and forward-mode jvps against central finite differences in
//! float64, for every primitive with a vjp or jvp rule, plus the transforms' error cases.

use nuvec::ops;
use nuvec::prelude::*;
use nuvec::transforms::{grad, jvp, value_and_grad, vjp};
use nuvec_test_support::values;

/// Checks the gradient of `sum(f(x) * weights)` against central differences, element by
/// element, then the jvp of `f` ([`check_jvp`]).
#[track_caller]
fn check(name: &str, f: impl Fn(&Array) -> Array, x: Array) {
    let probe = f(&x);
    let weights = values(probe.shape(), -1.0, 1.0, 7);
    let loss = |a: &Array| ops::sum(&(f(a) * &weights), None, false);
    let analytic = grad(|inputs: &[Array]| loss(&inputs[0]))(std::slice::from_ref(&x))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let analytic = analytic[0]
        .to_vec::<f64>()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let base = x.to_vec::<f64>().unwrap();
    let step = 1e-6;
    for i in 0..base.len() {
        let shifted = |delta: f64| {
            let mut data = base.clone();
            data[i] += delta;
            loss(&Array::from_vec(data, x.shape()))
                .item::<f64>()
                .unwrap()
        };
        let numeric = (shifted(step) - shifted(-step)) / (2.0 * step);
        let tolerance = 1e-5 * numeric.abs().max(1.0);
        assert!(
            (analytic[i] - numeric).abs() <= tolerance,
            "{name}: d/dx[{i}] = {} but finite differences give {numeric}",
            analytic[i]
        );
    }
    let tangent = values(x.shape(), -1.0, 1.0, 11);
    check_jvp(name, &f, &x, &tangent);
    // The two modes agree: <weights, J t> = <J^T weights, t>.
    let (_, forward) = jvp(
        |v| vec![f(&v[0])],
        std::slice::from_ref(&x),
        std::slice::from_ref(&tangent),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    let left = ops::sum(&(&forward[0] * &weights), None, false)
        .item::<f64>()
        .unwrap();
    let right: f64 = analytic
        .iter()
        .zip(tangent.to_vec::<f64>().unwrap())
        .map(|(g, t)| g * t)
        .sum();
    assert!(
        (left - right).abs() <= 1e-9 * left.abs().max(1.0),
        "{name}: <w, J t> = {left} but <J^T w, t> = {right}"
    );
}

/// Checks `jvp(f, x, t)` against `(f(x + εt) − f(x − εt)) / 2ε`, element by element.
#[track_caller]
fn check_jvp(name: &str, f: &impl Fn(&Array) -> Array, x: &Array, t: &Array) {
    let (outputs, tangents) = jvp(
        |v| vec![f(&v[0])],
        std::slice::from_ref(x),
        std::slice::from_ref(t),
    )
    .unwrap_or_else(|e| panic!("{name}: jvp: {e}"));
    assert_eq!(
        outputs[0].shape(),
        tangents[0].shape(),
        "{name}: tangent shape"
    );
    let analytic = tangents[0]
        .astype(DType::F64)
        .to_vec::<f64>()
        .unwrap_or_else(|e| panic!("{name}: jvp: {e}"));
    let step = 1e-6;
    let at = |delta: f64| {
        f(&(x + &(t * delta)))
            .astype(DType::F64)
            .to_vec::<f64>()
            .unwrap()
    };
    let (plus, minus) = (at(step), at(-step));
    for (i, value) in analytic.iter().enumerate() {
        let numeric = (plus[i] - minus[i]) / (2.0 * step);
        assert!(
            (value - numeric).abs() <= 1e-5 * numeric.abs().max(1.0),
            "{name}: jvp[{i}] = {value} but finite differences give {numeric}"
        );
    }
}

#[test]
fn unary_gradients_match_finite_differences() {
    let x = || values(&[2, 3], 0.2, 0.9, 1);
    check("abs", |a| ops::abs(&(a - 0.5)), x());
    check("negative", ops::negative, x());
    check("square", ops::square, x());
    check("sqrt", ops::sqrt, x());
    check("rsqrt", ops::rsqrt, x());
    check("reciprocal", ops::reciprocal, x());
    check("exp", ops::exp, x());
    check("expm1", ops::expm1, x());
    check("log", ops::log, x());
    check("log1p", ops::log1p, x());
    check("log2", ops::log2, x());
    check("log10", ops::log10, x());
    check("sin", ops::sin, x());
    check("cos", ops::cos, x());
    check("tan", ops::tan, x());
    check("tanh", ops::tanh, x());
    check("sigmoid", ops::sigmoid, x());
    check("erf", ops::erf, x());
    check("erfinv", ops::erfinv, x());
}

#[test]
fn binary_gradients_match_finite_differences_with_broadcasting() {
    let row = values(&[3], 0.5, 1.5, 2);
    let x = || values(&[2, 3], 0.5, 1.5, 3);
    check("add", |a| ops::add(a, &row), x());
    check(
        "add broadcast operand",
        |r| ops::add(values(&[2, 3], 0.5, 1.5, 3), r),
        row.clone(),
    );
    check("subtract", |a| ops::subtract(&row, a), x());
    check("multiply", |a| ops::multiply(a, a), x());
    check(
        "multiply broadcast",
        |r| ops::multiply(values(&[2, 3], 0.5, 1.5, 3), r),
        row.clone(),
    );
    check("divide", |a| ops::divide(&row, a), x());
    check("power base", |a| ops::power(a, &row), x());
    check("power exponent", |a| ops::power(&row, a), x());
    check("maximum", |a| ops::maximum(a, 1.0), x());
    check("minimum", |a| ops::minimum(a, &row), x());
    check("logaddexp", |a| ops::logaddexp(a, &row), x());
    check("arctan2", |a| ops::arctan2(a, &row), x());
    check(
        "where",
        |a| ops::where_(ops::greater(a, 1.0), a, ops::square(a)),
        x(),
    );
}

#[test]
fn reduction_gradients_match_finite_differences() {
    let x = || values(&[2, 3, 4], 0.5, 1.5, 4);
    check("sum", |a| ops::sum(a, [0, 2], false), x());
    check("sum keepdims", |a| ops::sum(a, 1, true), x());
    check("mean", |a| ops::mean(a, -1, false), x());
    check("prod", |a| ops::prod(a, 1, false), x());
    check("max", |a| ops::max(a, 2, false), x());
    check("min", |a| ops::min(a, None, false), x());
    check("var", |a| ops::var(a, [1, 2], false, 1), x());
    check("std", |a| ops::std(a, 0, false, 0), x());
    check("logsumexp", |a| ops::logsumexp(a, -1, false), x());
    check("softmax", |a| ops::softmax(a, -1), x());
    check("cumsum", |a| ops::cumsum(a, Some(1), false, true), x());
    check(
        "cumsum reverse exclusive",
        |a| ops::cumsum(a, Some(2), true, false),
        x(),
    );
}

#[test]
fn layout_gradients_match_finite_differences() {
    let x = || values(&[2, 3, 4], -1.0, 1.0, 5);
    check("reshape", |a| ops::reshape(a, &[6, 4]), x());
    check("transpose", |a| ops::transpose(a, Some(&[2, 0, 1])), x());
    check(
        "broadcast_to",
        |a| ops::broadcast_to(&ops::expand_dims(a, &[0]), &[3, 2, 3, 4]),
        x(),
    );
    check(
        "slice",
        |a| ops::slice(a, &[1, 0, 1], &[2, 2, 4], &[1, 1, 1]),
        x(),
    );
    check(
        "concatenate",
        |a| ops::concatenate(&[a.clone(), ops::square(a)], 1),
        x(),
    );
    check("pad", |a| ops::pad(a, &[(1, 0), (0, 2), (1, 1)], 3.0), x());
    check("split", |a| ops::split(a, 2, 2)[1].clone(), x());
    check("tile", |a| ops::tile(a, &[2, 1, 1]), x());
    check("repeat", |a| ops::repeat(a, 2, Some(1)), x());
    check("tril", |a| ops::tril(&ops::reshape(a, &[4, 6]), 1), x());
}

#[test]
fn matmul_gradients_match_finite_differences() {
    let b = values(&[4, 5], -1.0, 1.0, 6);
    check(
        "matmul left",
        |a| ops::matmul(a, &b),
        values(&[2, 3, 4], -1.0, 1.0, 7),
    );
    check(
        "matmul right broadcast",
        |m| ops::matmul(&values(&[2, 3, 4], -1.0, 1.0, 7), m),
        b.clone(),
    );
    check(
        "matmul vector",
        |v| ops::matmul(&b.t(), v),
        values(&[4], -1.0, 1.0, 8),
    );
    check(
        "addmm",
        |a| ops::addmm(&values(&[3, 5], 0.0, 1.0, 9), a, &b, 0.5, 2.0),
        values(&[3, 4], -1.0, 1.0, 10),
    );
}

#[test]
fn an_mlp_loss_has_the_gradient_of_its_finite_differences() {
    let w1 = values(&[3, 4], -0.5, 0.5, 11);
    let labels = Array::from_vec(vec![0.0f64, 1.0, 0.0, 0.0, 0.0, 1.0], &[2, 3]);
    check(
        "mlp cross-entropy",
        |w2| {
            let x = values(&[2, 3], -1.0, 1.0, 12);
            let hidden = ops::tanh(&ops::matmul(&x, &w1));
            let logits = ops::matmul(&hidden, w2);
            let log_probs = &logits - &ops::logsumexp(&logits, -1, true);
            ops::negative(&ops::mean(
                &ops::sum(&(log_probs * &labels), -1, false),
                None,
                false,
            ))
        },
        values(&[4, 3], -0.5, 0.5, 13),
    );
}

#[test]
fn second_derivatives_come_from_nesting_grad() -> Result<()> {
    fn sum_of_sin(inputs: &[Array]) -> Array {
        ops::sum(&ops::sin(&inputs[0]), None, false)
    }
    fn sum_of_first_derivative(inputs: &[Array]) -> Array {
        let first = grad(sum_of_sin)(inputs).expect("first derivative");
        ops::sum(&first[0], None, false)
    }
    let d2 = |x: &Array| -> Result<Array> {
        Ok(grad(sum_of_first_derivative)(std::slice::from_ref(x))?[0].clone())
    };
    let x = values(&[5], -1.0, 1.0, 14);
    let expected = ops::negative(&ops::sin(&x));
    let got = d2(&x)?;
    let error = ops::abs(&(got - expected)).max(None, false).item::<f64>()?;
    assert!(error < 1e-12, "d²/dx² sin differs by {error}");
    Ok(())
}

#[test]
fn value_and_grad_respects_argnums() -> Result<()> {
    let f = |inputs: &[Array]| ops::sum(&(&inputs[0] * &inputs[1]), None, false);
    let (value, grads) = value_and_grad(f, &[1])(&[array![1.0, 2.0], array![3.0, 4.0]])?;
    assert_eq!(value.item::<f32>()?, 11.0);
    assert_eq!(grads.len(), 1);
    assert_eq!(grads[0].to_vec::<f32>()?, [1.0, 2.0]);
    Ok(())
}

/// A primitive from outside the core with no transform rules (the identity).
#[derive(Debug)]
struct Opaque;

impl nuvec::primitive::Primitive for Opaque {
    fn name(&self) -> &str {
        "opaque"
    }

    fn eval_cpu(
        &self,
        inputs: &mut [nuvec::primitive::Input],
        _outputs: &[nuvec::primitive::OutputSpec],
    ) -> Result<Vec<std::sync::Arc<nuvec::primitive::Buffer>>> {
        Ok(vec![inputs[0].buffer().clone()])
    }
}

fn opaque(x: &Array) -> Array {
    Array::from_primitive(
        std::sync::Arc::new(Opaque),
        vec![x.clone()],
        x.shape().to_vec(),
        x.dtype(),
    )
}

#[test]
fn transform_errors_name_the_transform() {
    let not_scalar = grad(|inputs: &[Array]| ops::square(&inputs[0]))(&[array![1.0, 2.0]])
        .unwrap_err()
        .to_string();
    assert!(
        not_scalar.contains("[grad]") && not_scalar.contains("scalar"),
        "{not_scalar}"
    );
    let bad_argnum =
        value_and_grad(|inputs: &[Array]| ops::sum(&inputs[0], None, false), &[3])(&[array![1.0]])
            .unwrap_err()
            .to_string();
    assert!(
        bad_argnum.contains("argnums") && bad_argnum.contains('3'),
        "{bad_argnum}"
    );
    let bad_cotangent = vjp(
        |x| vec![ops::exp(&x[0])],
        &[array![1.0, 2.0]],
        &[array![1.0]],
    )
    .unwrap_err()
    .to_string();
    assert!(
        bad_cotangent.contains("[vjp]") && bad_cotangent.contains("cotangent"),
        "{bad_cotangent}"
    );
    let no_rule =
        grad(|inputs: &[Array]| ops::sum(&opaque(&inputs[0]), None, false))(&[array![2.0, 1.0]])
            .unwrap_err()
            .to_string();
    assert!(
        no_rule.contains("[vjp]") && no_rule.contains("opaque") && no_rule.contains("no vjp rule"),
        "{no_rule}"
    );
}

/// The composite functions `scripts/golden/make_grad_fixtures.py` differentiates with MLX,
/// written with nuvec's ops in the same way.
fn golden_function(name: &str, x: &[Array]) -> Array {
    match name {
        "mlp_mse" => {
            let hidden = ops::tanh(&(ops::matmul(&x[0], &x[1]) + &x[2]));
            let out = ops::matmul(&hidden, &x[3]);
            ops::mean(&ops::square(&(out - &x[4])), None, false)
        }
        "softmax_cross_entropy" => {
            let log_probs = &x[0] - &ops::logsumexp(&x[0], -1, true);
            ops::mean(
                &ops::negative(&ops::sum(&(&x[1] * &log_probs), -1, false)),
                None,
                false,
            )
        }
        "layer_norm" => {
            let mu = ops::mean(&x[0], -1, true);
            let var = ops::var(&x[0], -1, true, 0);
            let normalized = (&x[0] - &mu) * ops::rsqrt(&(var + 1e-5));
            ops::sum(&((normalized * &x[1] + &x[2]) * &x[3]), None, false)
        }
        "sigmoid_bce" => {
            let p = ops::sigmoid(&x[0]);
            let terms = &x[1] * &ops::log(&p) + (1.0 - &x[1]) * ops::log(&(1.0 - &p));
            ops::negative(&ops::mean(&terms, None, false))
        }
        "softmax_weighted" => ops::sum(&(ops::softmax(&x[0], -1) * &x[1]), None, false),
        "max_and_exp" => {
            ops::sum(&ops::max(&x[0], 1, false), None, false)
                + ops::sum(&(ops::exp(&x[0]) * 0.1), None, false)
        }
        "broadcast_mul_div" => ops::sum(&(&x[0] * &x[1] / (&x[1] + 1.0)), None, false),
        "cumsum_square" => ops::sum(
            &ops::square(&ops::cumsum(&x[0], Some(1), false, true)),
            None,
            false,
        ),
        "slice_update_square" => {
            let b = ops::slice_update(
                &(&x[0] * 2.0),
                &ops::sin(&x[1]),
                &[1, 4],
                &[3, -6],
                &[1, -2],
            );
            ops::sum(&(ops::square(&b) * ops::cos(&b)), None, false)
        }
        other => panic!("golden: no function {other}"),
    }
}

#[test]
fn gradients_of_composite_functions_match_mlx() {
    use nuvec_test_support::{array_of, compare_with, load_fixture};
    let fixture = load_fixture("grad");
    assert!(!fixture.cases.is_empty());
    let mut failures = Vec::new();
    for case in &fixture.cases {
        let name = case["name"].as_str().unwrap_or("?");
        let function = case["function"].as_str().unwrap_or("?").to_string();
        let inputs: Vec<Array> = case["inputs"]
            .as_array()
            .map(|v| v.iter().map(array_of).collect())
            .unwrap_or_default();
        let argnums: Vec<usize> = (0..inputs.len()).collect();
        let (value, grads) =
            value_and_grad(|x: &[Array]| golden_function(&function, x), &argnums)(&inputs).unwrap();
        let tolerance = Some((1e-4, 1e-5));
        if let Err(reason) = compare_with(&value, &case["value"], tolerance) {
            failures.push(format!("{name} value: {reason}"));
        }
        for (index, (got, want)) in grads
            .iter()
            .zip(case["grads"].as_array().unwrap())
            .enumerate()
        {
            if let Err(reason) = compare_with(got, want, tolerance) {
                failures.push(format!("{name} d/dinput{index}: {reason}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "gradients differ from MLX:\n{}",
        failures.join("\n")
    );
}

#[test]
fn stop_gradient_blocks_the_gradient() -> Result<()> {
    let f = |x: &[Array]| ops::sum(&(&x[0] * &ops::stop_gradient(&x[0])), None, false);
    let grads = grad(f)(&[array![2.0, 3.0]])?;
    assert_eq!(
        grads[0].to_vec::<f32>()?,
        [2.0, 3.0],
        "only the unstopped factor contributes"
    );
    Ok(())
}

#[test]
fn jvps_of_primitives_without_a_vjp_match_finite_differences() {
    let x = values(&[3, 5], -1.0, 1.0, 12);
    let t = values(&[3, 5], -1.0, 1.0, 13);
    let indices = Array::from_vec(vec![4u32, 0, 2, 2], &[4]);
    check_jvp("take", &|a: &Array| ops::take(a, &indices, Some(1)), &x, &t);
    let along = Array::from_vec(vec![1u32, 0, 2, 2, 1, 0], &[3, 2]).astype(DType::U32);
    check_jvp(
        "take_along_axis",
        &|a: &Array| ops::take_along_axis(a, &along, Some(1)),
        &x,
        &t,
    );
    check_jvp("sort", &|a: &Array| ops::sort(a, Some(1)), &x, &t);
    check_jvp("sort axis 0", &|a: &Array| ops::sort(a, Some(0)), &x, &t);
    check_jvp("topk", &|a: &Array| ops::topk(a, 2, Some(-1)), &x, &t);
    // slice_update through both its inputs: the source and the values written.
    check_jvp(
        "slice_update",
        &|a: &Array| {
            let corner = ops::sin(&ops::slice(a, &[0, 0], &[2, 2], &[1, 1]));
            ops::slice_update(&ops::square(a), &corner, &[1, 4], &[3, 0], &[1, -2])
        },
        &x,
        &t,
    );
    // Integer outputs have zero tangents.
    let (_, tangents) = jvp(
        |v| vec![ops::argmax(&v[0], Some(1), false)],
        std::slice::from_ref(&x),
        std::slice::from_ref(&t),
    )
    .unwrap();
    assert_eq!(tangents[0].to_vec::<u32>().unwrap(), [0, 0, 0]);
}

#[test]
fn jvp_takes_several_inputs_and_outputs() -> Result<()> {
    let (a, b) = (array![1.0, 2.0], array![3.0, 5.0]);
    let (ta, tb) = (array![1.0, 0.0], array![0.5, 2.0]);
    let (outputs, tangents) = jvp(
        |v| vec![&v[0] * &v[1], ops::sum(&v[0], None, false), v[1].clone()],
        &[a, b],
        &[ta, tb],
    )?;
    assert_eq!(outputs[0].to_vec::<f32>()?, [3.0, 10.0]);
    // d(a·b) = ta·b + a·tb.
    assert_eq!(tangents[0].to_vec::<f32>()?, [3.5, 4.0]);
    assert_eq!(tangents[1].item::<f32>()?, 1.0);
    // An output that is an input: its tangent.
    assert_eq!(tangents[2].to_vec::<f32>()?, [0.5, 2.0]);
    // An output that does not depend on the inputs has a zero tangent.
    let (_, constant) = jvp(|_| vec![array![7.0]], &[array![1.0]], &[array![1.0]])?;
    assert_eq!(constant[0].to_vec::<f32>()?, [0.0]);
    Ok(())
}

#[test]
fn forward_and_reverse_mode_nest_into_second_derivatives() -> Result<()> {
    let f = |x: &Array| ops::sum(&(ops::sin(x) * x), None, false);
    let x = array![0.5, 1.0, 2.0];
    let v = array![1.0, -1.0, 0.5];
    // Forward over reverse: the Hessian of f times v (the Hessian is diagonal here).
    let (_, hvp) = jvp(
        |p| grad(|q: &[Array]| f(&q[0]))(&p[..1]).unwrap(),
        std::slice::from_ref(&x),
        std::slice::from_ref(&v),
    )?;
    let second = |x: f32| 2.0 * x.cos() - x * x.sin();
    let expected: Vec<f32> = [0.5f32, 1.0, 2.0]
        .iter()
        .zip([1.0f32, -1.0, 0.5])
        .map(|(&x, v)| second(x) * v)
        .collect();
    for (got, want) in hvp[0].to_vec::<f32>()?.iter().zip(&expected) {
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    }
    // Reverse over forward: the gradient of the directional derivative <∇f, v>.
    let directional = |p: &[Array]| {
        jvp(|q| vec![f(&q[0])], &p[..1], std::slice::from_ref(&v))
            .unwrap()
            .1[0]
            .clone()
    };
    let rof = grad(directional)(std::slice::from_ref(&x))?;
    for (got, want) in rof[0].to_vec::<f32>()?.iter().zip(&expected) {
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
    }
    // jvp of jvp: the second derivative along v twice.
    let (_, twice) = jvp(
        |p| {
            jvp(|q| vec![f(&q[0])], &p[..1], std::slice::from_ref(&v))
                .unwrap()
                .1
        },
        std::slice::from_ref(&x),
        std::slice::from_ref(&v),
    )?;
    let along: f32 = expected
        .iter()
        .zip([1.0f32, -1.0, 0.5])
        .map(|(h, v)| h * v)
        .sum();
    assert!((twice[0].item::<f32>()? - along).abs() < 1e-5);
    Ok(())
}

#[test]
fn jvp_errors_name_the_transform() {
    let count = jvp(|x| vec![x[0].clone()], &[array![1.0]], &[])
        .unwrap_err()
        .to_string();
    assert!(
        count.contains("[jvp]") && count.contains("tangents"),
        "{count}"
    );
    let shape = jvp(|x| vec![x[0].clone()], &[array![1.0, 2.0]], &[array![1.0]])
        .unwrap_err()
        .to_string();
    assert!(
        shape.contains("[jvp]") && shape.contains("[1]") && shape.contains("[2]"),
        "{shape}"
    );
    let no_rule = jvp(
        |x| vec![opaque(&x[0])],
        &[array![1.0, 2.0]],
        &[array![1.0, 1.0]],
    )
    .unwrap_err()
    .to_string();
    assert!(
        no_rule.contains("[jvp]") && no_rule.contains("opaque"),
        "{no_rule}"
    );
}

#[test]
fn gathers_sorts_strided_slices_and_scans_have_gradients() {
    let x = || values(&[3, 5], -1.0, 1.0, 30);
    let indices = Array::from_vec(vec![4i32, 0, -1, 2, 2], &[5]);
    check("take", |a| ops::take(a, &indices, Some(1)), x());
    check(
        "take 2-d indices",
        |a| ops::take(a, &Array::from_vec(vec![1i32, 1, 0, 2], &[2, 2]), Some(0)),
        x(),
    );
    check("take flattened", |a| ops::take(a, &indices, None), x());
    let along = Array::from_vec(vec![1u32, 0, 4, 4, 3, 0], &[3, 2]).astype(DType::U32);
    check(
        "take_along_axis",
        |a| ops::take_along_axis(a, &along, Some(1)),
        x(),
    );
    check("sort", |a| ops::sort(a, Some(1)), x());
    check("sort axis 0", |a| ops::sort(a, Some(0)), x());
    check("topk", |a| ops::topk(a, 3, Some(-1)), x());
    check(
        "slice with steps",
        |a| ops::slice(a, &[2, 0], &[-4, 5], &[-1, 2]),
        x(),
    );
    let positive = || values(&[3, 5], 0.5, 1.5, 31);
    check(
        "cumprod",
        |a| ops::cumprod(a, Some(1), false, true),
        positive(),
    );
    check(
        "cumprod reverse exclusive",
        |a| ops::cumprod(a, Some(0), true, false),
        positive(),
    );
    check("cummax", |a| ops::cummax(a, Some(1), false, true), x());
    check(
        "cummin reverse",
        |a| ops::cummin(a, Some(1), true, true),
        x(),
    );
}

#[test]
fn checkpointed_blocks_have_the_values_and_derivatives_of_the_block() {
    let block = |x: &[Array]| vec![ops::sin(&ops::exp(&x[0])) * &x[0]];
    let kept = nuvec::transforms::checkpoint(block);
    check(
        "checkpoint",
        |a| kept(std::slice::from_ref(a))[0].clone(),
        values(&[2, 3], 0.1, 0.9, 40),
    );
    // Second derivatives through a checkpoint.
    let x = array![0.3, 0.7];
    let twice = |f: &dyn Fn(&Array) -> Array| -> Vec<f32> {
        let first = |v: &[Array]| {
            grad(|q: &[Array]| ops::sum(&f(&q[0]), None, false))(v)
                .unwrap()
                .remove(0)
        };
        let second = grad(|v: &[Array]| ops::sum(&first(v), None, false));
        let result = second(std::slice::from_ref(&x)).unwrap();
        result[0].to_vec::<f32>().unwrap()
    };
    let plain = twice(&|a| block(std::slice::from_ref(a))[0].clone());
    let through = twice(&|a| kept(std::slice::from_ref(a))[0].clone());
    for (p, t) in plain.iter().zip(&through) {
        assert!((p - t).abs() < 1e-5, "{plain:?} vs {through:?}");
    }
}

#[test]
fn custom_functions_use_their_own_rules() -> Result<()> {
    use nuvec::transforms::{custom_function, vmap};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // A rounding op with a straight-through gradient and tangent.
    let straight = custom_function(|x| vec![ops::round(&x[0], 0)])
        .with_vjp(|_, _, c| vec![c[0].clone()])
        .with_jvp(|_, t| vec![t[0].clone()]);
    let x = array![0.2, 1.7];
    let g = grad(|v: &[Array]| ops::sum(&(straight.call(v)[0].clone() * 3.0), None, false))(
        std::slice::from_ref(&x),
    )?;
    assert_eq!(g[0].to_vec::<f32>()?, [3.0, 3.0]);
    let (out, tangent) = jvp(
        |v| straight.call(v),
        std::slice::from_ref(&x),
        &[array![1.0, -2.0]],
    )?;
    assert_eq!(out[0].to_vec::<f32>()?, [0.0, 2.0]);
    assert_eq!(tangent[0].to_vec::<f32>()?, [1.0, -2.0]);
    // A batching rule is called with the batched inputs.
    let called = Arc::new(AtomicBool::new(false));
    let seen = called.clone();
    let doubled = custom_function(|x| vec![&x[0] * 2.0]).with_vmap(move |inputs, axes| {
        seen.store(true, Ordering::SeqCst);
        (vec![&inputs[0] * 2.0], axes.to_vec())
    });
    let batched =
        vmap(|v| doubled.call(v), &[Some(0)], &[Some(0)])(&[array![[1.0, 2.0], [3.0, 4.0]]])?;
    assert!(called.load(Ordering::SeqCst));
    assert_eq!(batched[0].to_vec::<f32>()?, [2.0, 4.0, 6.0, 8.0]);
    // Without a batching rule, the function's own graph is batched.
    let plain = custom_function(|x| vec![ops::exp(&x[0])]);
    let rows = vmap(|v| plain.call(v), &[Some(1)], &[Some(0)])(&[array![[0.0, 1.0]]])?;
    assert_eq!(rows[0].shape(), [2, 1]);
    // A vjp rule that returns the wrong number of cotangents is an error naming vjp.
    let wrong = custom_function(|x| vec![&x[0] + 1.0]).with_vjp(|_, _, _| vec![]);
    let error =
        grad(|v: &[Array]| ops::sum(&wrong.call(v)[0], None, false))(std::slice::from_ref(&x))
            .unwrap_err()
            .to_string();
    assert!(
        error.contains("[vjp]") && error.contains("custom vjp"),
        "{error}"
    );
    Ok(())
}

#[test]
fn nothing_flows_through_stop_gradient_even_at_infinities() -> Result<()> {
    // logsumexp of a stopped -inf: MLX's tangent and cotangent are 0; a zero sent through
    // the stopped branch would meet 0/0 inside logsumexp and give NaN.
    let x = Array::from_vec(vec![f32::NEG_INFINITY, 1.0], &[2]);
    let f = |v: &[Array]| {
        let stopped = ops::stop_gradient(&ops::reshape(&v[0], &[2, 1]));
        vec![ops::logsumexp(&stopped, -1, false) + &v[0]]
    };
    let (_, tangent) = jvp(f, std::slice::from_ref(&x), &[ops::ones(&[2], DType::F32)])?;
    assert_eq!(tangent[0].to_vec::<f32>()?, [1.0, 1.0]);
    let (_, cotangent) = vjp(f, std::slice::from_ref(&x), &[ops::ones(&[2], DType::F32)])?;
    assert_eq!(cotangent[0].to_vec::<f32>()?, [1.0, 1.0]);
    Ok(())
}
