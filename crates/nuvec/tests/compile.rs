//! `compile`: the same results as the uncompiled function (bit for bit), one trace per
//! signature, simplification and fusion, effects on every call, shapeless mode, stateful
//! steps, and composition with the other transforms.

use nuvec::ops;
use nuvec::prelude::*;
use nuvec::transforms::{compile, compile_shapeless, compile_step, grad, jvp, vmap};
use std::sync::atomic::{AtomicUsize, Ordering};

fn values(shape: &[i32], salt: u64) -> Array {
    let size: i32 = shape.iter().product();
    let data: Vec<f32> = (0..size as u64)
        .map(|i| ((i.wrapping_mul(2_654_435_761) + salt * 40_503) % 10_007) as f32 / 5_003.5 - 1.0)
        .collect();
    Array::from_vec(data, shape)
}

fn gelu(x: &Array) -> Array {
    x * 0.5 * (ops::erf(&(x / std::f64::consts::SQRT_2)) + 1.0)
}

fn layer_norm(x: &Array) -> Array {
    let mean = ops::mean(x, -1, true);
    let centered = x - &mean;
    let var = ops::mean(&ops::square(&centered), -1, true);
    centered * ops::rsqrt(&(var + 1e-5))
}

#[track_caller]
fn assert_bitwise(a: &Array, b: &Array, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtype");
    let (x, y) = (
        a.astype(DType::F64).to_vec::<f64>().unwrap(),
        b.astype(DType::F64).to_vec::<f64>().unwrap(),
    );
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!(
            p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()),
            "{what}: element {i}: {p} vs {q}"
        );
    }
}

/// A function under test.
type Case = Box<dyn Fn(&[Array]) -> Vec<Array>>;

#[test]
fn compiled_functions_give_the_bits_of_the_uncompiled_ones() {
    let x = values(&[4, 33], 1);
    let w = values(&[33, 8], 2);
    let cases: Vec<(&str, Case)> = vec![
        ("gelu", Box::new(|v: &[Array]| vec![gelu(&v[0])])),
        (
            "softmax",
            Box::new(|v: &[Array]| vec![ops::softmax(&v[0], -1)]),
        ),
        (
            "layer norm",
            Box::new(|v: &[Array]| vec![layer_norm(&v[0])]),
        ),
        (
            "mlp",
            Box::new(move |v: &[Array]| {
                vec![gelu(&ops::matmul(&v[0], &w)), ops::sum(&v[0], None, false)]
            }),
        ),
        (
            "broadcasting chain",
            Box::new(|v: &[Array]| {
                let row = ops::max(&v[0], 0, true);
                vec![ops::exp(&(&v[0] - &row)) * 3.0 + ops::tanh(&row)]
            }),
        ),
        (
            "mixed ops",
            Box::new(|v: &[Array]| {
                let t = ops::transpose(&ops::sigmoid(&v[0]), None);
                vec![
                    ops::cumsum(&t, Some(0), false, true),
                    ops::sort(&v[0], Some(-1)),
                    v[0].clone(),
                ]
            }),
        ),
    ];
    for (name, f) in &cases {
        let compiled = compile(|v: &[Array]| f(v));
        let expected = f(std::slice::from_ref(&x));
        for call in 0..2 {
            let got = compiled.call(std::slice::from_ref(&x)).unwrap();
            assert_eq!(got.len(), expected.len(), "{name}");
            for (g, e) in got.iter().zip(&expected) {
                assert_bitwise(g, e, &format!("{name}, call {call}"));
            }
        }
    }
}

#[test]
fn large_fused_outputs_written_past_the_cache_keep_the_bits() {
    // Over 16 MiB of float32 output, of an odd length, so the fused loop streams its stores
    // and its chunks start at every alignment.
    let x = values(&[(1 << 22) + 5], 3);
    let bias = values(&[1], 4);
    let f = |v: &[Array]| vec![gelu(&v[0]) * &v[1] + 0.25];
    let compiled = compile(f);
    let expected = f(&[x.clone(), bias.clone()]);
    let got = compiled.call(&[x, bias]).unwrap();
    assert_bitwise(&got[0], &expected[0], "streamed gelu");
}

#[test]
fn a_function_is_traced_once_per_signature() {
    let calls = AtomicUsize::new(0);
    let compiled = compile(|v: &[Array]| {
        calls.fetch_add(1, Ordering::SeqCst);
        vec![ops::exp(&v[0]) + 1.0]
    });
    for _ in 0..3 {
        compiled.call(&[values(&[3], 1)]).unwrap()[0]
            .eval()
            .unwrap();
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    compiled.call(&[values(&[4], 1)]).unwrap();
    compiled
        .call(&[values(&[3], 1).astype(DType::F64)])
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(compiled.traces(), 3);
}

#[test]
fn element_wise_chains_fuse_and_common_subexpressions_merge() {
    let x = values(&[1000], 3);
    // gelu is 6 element-wise ops: one fused step.
    let fused = compile(|v: &[Array]| vec![gelu(&v[0])]);
    assert_eq!(fused.program_len(std::slice::from_ref(&x)).unwrap(), 1);
    // exp(x) computed twice is computed once; the sum of both joins the chain.
    let twice = compile(|v: &[Array]| vec![ops::exp(&v[0]) + ops::exp(&v[0])]);
    assert_eq!(twice.program_len(std::slice::from_ref(&x)).unwrap(), 1);
    assert_bitwise(
        &twice.call(std::slice::from_ref(&x)).unwrap()[0],
        &(ops::exp(&x) * 2.0),
        "exp + exp",
    );
    // A value read outside the chain stays a separate output.
    let shared = compile(|v: &[Array]| {
        let e = ops::exp(&v[0]);
        vec![&e + 1.0, ops::sum(&e, None, false)]
    });
    let out = shared.call(std::slice::from_ref(&x)).unwrap();
    assert_bitwise(&out[1], &ops::sum(&ops::exp(&x), None, false), "shared exp");
}

#[test]
fn random_draws_happen_on_every_call_as_uncompiled() {
    let f = |v: &[Array]| vec![&v[0] + nuvec::random::normal(&[3], DType::F32, None)];
    let x = values(&[3], 4);
    nuvec::random::seed(11);
    let plain: Vec<Vec<f32>> = (0..3)
        .map(|_| f(std::slice::from_ref(&x))[0].to_vec::<f32>().unwrap())
        .collect();
    let compiled = compile(f);
    nuvec::random::seed(11);
    let again: Vec<Vec<f32>> = (0..3)
        .map(|_| {
            compiled.call(std::slice::from_ref(&x)).unwrap()[0]
                .to_vec::<f32>()
                .unwrap()
        })
        .collect();
    assert_eq!(plain, again);
    assert_ne!(again[0], again[1], "each call draws anew");
    // Two draws in one function are two effects, never merged.
    let pair = compile(|_: &[Array]| {
        vec![
            nuvec::random::normal(&[4], DType::F32, None),
            nuvec::random::normal(&[4], DType::F32, None),
        ]
    });
    let out = pair.call(&[Array::scalar(0.0f32)]).unwrap();
    assert_ne!(
        out[0].to_vec::<f32>().unwrap(),
        out[1].to_vec::<f32>().unwrap()
    );
}

#[test]
fn shapeless_programs_trace_again_only_for_new_ranks_or_dtypes() {
    let calls = AtomicUsize::new(0);
    let compiled = compile_shapeless(|v: &[Array]| {
        calls.fetch_add(1, Ordering::SeqCst);
        vec![gelu(&v[0]) * &v[1]]
    });
    for n in [3, 7, 1000] {
        let (x, y) = (values(&[n], 5), values(&[1], 6));
        let got = compiled.call(&[x.clone(), y.clone()]).unwrap();
        assert_bitwise(&got[0], &(gelu(&x) * &y), &format!("shapeless n = {n}"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    compiled
        .call(&[values(&[2, 3], 5), values(&[1], 6)])
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "a new rank traces again");
    // Ops that depend on shapes make each shape its own program, with the right results.
    let reducing = compile_shapeless(|v: &[Array]| vec![ops::sum(&v[0], None, false)]);
    for n in [3, 5] {
        let x = values(&[n], 7);
        assert_bitwise(
            &reducing.call(std::slice::from_ref(&x)).unwrap()[0],
            &ops::sum(&x, None, false),
            "sum",
        );
    }
}

#[test]
fn compile_composes_with_grad_vmap_and_jvp() {
    let x = values(&[5, 4], 8).astype(DType::F64);
    let loss = |v: &Array| ops::sum(&gelu(v), None, false);
    let expected = grad(|v: &[Array]| loss(&v[0]))(std::slice::from_ref(&x)).unwrap();
    // compile(grad(f))
    let compiled_grad = compile(|v: &[Array]| grad(|q: &[Array]| loss(&q[0]))(v).unwrap());
    assert_bitwise(
        &compiled_grad.call(std::slice::from_ref(&x)).unwrap()[0],
        &expected[0],
        "compile(grad)",
    );
    // grad(compile(f)): through the fused step's vjp.
    let compiled = compile(|v: &[Array]| vec![loss(&v[0])]);
    let through =
        grad(|v: &[Array]| compiled.call(v).unwrap().remove(0))(std::slice::from_ref(&x)).unwrap();
    let close = |a: &Array, b: &Array| {
        a.to_vec::<f64>()
            .unwrap()
            .iter()
            .zip(b.to_vec::<f64>().unwrap())
            .all(|(p, q)| (p - q).abs() <= 1e-12 * q.abs().max(1.0))
    };
    assert!(close(&through[0], &expected[0]), "grad(compile)");
    // compile(vmap(f)) and vmap(compile(f)).
    let rows = |v: &[Array]| vec![ops::sum(&gelu(&v[0]), None, false)];
    let plain = vmap(rows, &[Some(0)], &[Some(0)])(std::slice::from_ref(&x)).unwrap();
    let compiled_vmap = compile(|v: &[Array]| vmap(rows, &[Some(0)], &[Some(0)])(v).unwrap());
    assert_bitwise(
        &compiled_vmap.call(std::slice::from_ref(&x)).unwrap()[0],
        &plain[0],
        "compile(vmap)",
    );
    let inner = compile(|v: &[Array]| vec![gelu(&v[0])]);
    let vmapped =
        vmap(|v| inner.call(v).unwrap(), &[Some(1)], &[Some(1)])(std::slice::from_ref(&x)).unwrap();
    assert_bitwise(&vmapped[0], &gelu(&x), "vmap(compile)");
    // jvp(compile(f)).
    let t = values(&[5, 4], 9).astype(DType::F64);
    let (_, direct) = jvp(
        |v| vec![gelu(&v[0])],
        std::slice::from_ref(&x),
        std::slice::from_ref(&t),
    )
    .unwrap();
    let (_, through) = jvp(
        |v| inner.call(v).unwrap(),
        std::slice::from_ref(&x),
        std::slice::from_ref(&t),
    )
    .unwrap();
    assert!(close(&through[0], &direct[0]), "jvp(compile)");
}

#[test]
fn gradients_of_a_fused_chain_over_an_input_it_broadcasts() {
    // x - 1/y with y smaller than the result: the fused chain's unary step reads y stretched,
    // and differentiating the chain must stretch it too.
    let x = values(&[3, 1, 1], 4).astype(DType::F64);
    let y = values(&[2, 4], 5).astype(DType::F64) + 2.0;
    let compiled = compile(|v: &[Array]| vec![&v[0] - &ops::reciprocal(&v[1])]);
    let cotangent = ops::ones(&[3, 2, 4], DType::F64);
    for batched in [false, true] {
        let f = |v: &[Array]| {
            if batched {
                // vmap(compile(f)) over x's rows: the chain's output gains the batch axis.
                vmap(|q| compiled.call(q).unwrap(), &[Some(0), None], &[Some(0)])(v).unwrap()
            } else {
                compiled.call(v).unwrap()
            }
        };
        let (_, vjps) =
            nuvec::transforms::vjp(f, &[x.clone(), y.clone()], std::slice::from_ref(&cotangent))
                .unwrap();
        // Three rows of the cotangent reach each element of y, each with 1/y².
        let expected = ops::reciprocal(&ops::square(&y)) * 3.0;
        assert_eq!(vjps[1].shape(), [2, 4], "batched: {batched}");
        let (got, want) = (
            vjps[1].to_vec::<f64>().unwrap(),
            expected.to_vec::<f64>().unwrap(),
        );
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, b)| (a - b).abs() <= 1e-12 * b.abs()));
        assert_eq!(vjps[0].to_vec::<f64>().unwrap(), [8.0; 3]);
    }
}

#[test]
fn a_compiled_training_step_updates_its_state_like_the_plain_loop() {
    let data = values(&[8, 3], 10);
    let target = values(&[8], 11);
    let loss = |w: &Array, b: &Array| {
        let err = ops::matmul(&data, w) + b - &target;
        ops::mean(&ops::square(&err), None, false)
    };
    let update = |state: &[Array], _: &[Array]| {
        let grads = grad(|p: &[Array]| loss(&p[0], &p[1]))(state).unwrap();
        let new: Vec<Array> = state
            .iter()
            .zip(&grads)
            .map(|(p, g)| p - &(g * 0.1))
            .collect();
        let value = loss(&state[0], &state[1]);
        (new, vec![value])
    };
    let step = compile_step(update);
    let mut compiled_state = vec![ops::zeros(&[3], DType::F32), Array::scalar(0.0f32)];
    let mut plain_state = compiled_state.clone();
    let mut losses = Vec::new();
    for _ in 0..20 {
        let out = step(&mut compiled_state, &[]).unwrap();
        losses.push(out[0].item::<f32>().unwrap());
        plain_state = update(&plain_state, &[]).0;
    }
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "{losses:?}");
    for (c, p) in compiled_state.iter().zip(&plain_state) {
        assert_bitwise(c, p, "state after 20 steps");
    }
}

#[test]
fn compile_errors_surface_at_the_call() {
    let compiled = compile(|v: &[Array]| vec![ops::reshape(&v[0], &[7])]);
    let error = compiled.call(&[values(&[3], 1)]).unwrap_err().to_string();
    assert!(error.contains("[reshape]"), "{error}");
}

#[test]
fn a_compiled_chain_s_tangent_ignores_its_constants() {
    // floor_divide(x, x) · -0.5 has no derivative; the constant's zero tangent must not meet
    // the NaN of 0/0 or inf/inf (0 · NaN), as MLX leaves constants out.
    let x = Array::from_vec(vec![f32::NAN, f32::INFINITY, 1.0, 0.0], &[4]);
    let compiled = compile(|v: &[Array]| vec![ops::floor_divide(&v[0], &v[0]) * -0.5]);
    let (_, tangents) = jvp(
        |v| compiled.call(v).unwrap(),
        std::slice::from_ref(&x),
        std::slice::from_ref(&x),
    )
    .unwrap();
    assert!(tangents[0]
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .all(|t| *t == 0.0));
}
