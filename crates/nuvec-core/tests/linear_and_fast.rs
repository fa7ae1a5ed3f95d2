//! `ops::linear` (x · wᵀ without copying w) equals `matmul(x, transpose(w))` under every
//! transform, and the `mx.fast` compositions keep their transforms.

use nuvec_core::ops::fast::{self, AttentionMask};
use nuvec_core::transforms::{grad, jvp, vmap};
use nuvec_core::{ops, random, Array, DType};

fn close(a: &Array, b: &Array, tolerance: f32) {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (
        a.astype(DType::F32).to_vec::<f32>().unwrap(),
        b.astype(DType::F32).to_vec::<f32>().unwrap(),
    );
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= tolerance * (1.0 + y.abs()), "{x} vs {y}");
    }
}

fn reference(x: &Array, w: &Array) -> Array {
    ops::matmul(x, &ops::transpose(w, None))
}

#[test]
fn linear_equals_the_transposed_product_for_every_dtype_and_rank() {
    let key = random::key(3);
    for &(shape, n) in &[
        (&[1, 96][..], 40),
        (&[3, 5, 96][..], 7),
        (&[20, 96][..], 130),
    ] {
        let x = random::normal(shape, DType::F32, Some(&key));
        let w = random::normal(&[n, 96], DType::F32, Some(&random::key(4)));
        close(&ops::linear(&x, &w), &reference(&x, &w), 1e-4);
        for dtype in [DType::BF16, DType::F16] {
            let (xh, wh) = (x.astype(dtype), w.astype(dtype));
            let y = ops::linear(&xh, &wh);
            assert_eq!(y.dtype(), dtype);
            close(
                &y,
                &reference(&xh.astype(DType::F32), &wh.astype(DType::F32)),
                2e-2,
            );
        }
        // f32 activations with bf16 weights: the weights are widened, not the result rounded.
        let y = ops::linear(&x, &w.astype(DType::BF16));
        assert_eq!(y.dtype(), DType::F32);
        close(
            &y,
            &reference(&x, &w.astype(DType::BF16).astype(DType::F32)),
            1e-4,
        );
    }
}

#[test]
fn linear_refuses_mismatched_shapes_and_integers() {
    let error = ops::linear(
        &ops::ones(&[2, 3], DType::F32),
        &ops::ones(&[4, 5], DType::F32),
    )
    .check()
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("[linear]") && error.contains("[2, 3]") && error.contains("[4, 5]"),
        "{error}"
    );
    let error = ops::linear(
        &ops::ones(&[2, 3], DType::I32),
        &ops::ones(&[4, 3], DType::I32),
    )
    .check()
    .unwrap_err()
    .to_string();
    assert!(error.contains("floating point"), "{error}");
}

#[test]
fn linear_gradients_jvps_and_vmaps_equal_the_transposed_products() {
    let key = random::key(5);
    let x = random::normal(&[4, 6], DType::F32, Some(&key));
    let w = random::normal(&[3, 6], DType::F32, Some(&random::key(4)));
    let ours = grad(|a| ops::sum(&ops::square(&ops::linear(&a[0], &a[1])), None, false));
    let theirs = grad(|a| ops::sum(&ops::square(&reference(&a[0], &a[1])), None, false));
    let (g1, g2) = (
        ours(&[x.clone(), w.clone()]).unwrap(),
        theirs(&[x.clone(), w.clone()]).unwrap(),
    );
    close(&g1[0], &g2[0], 1e-4);
    let tx = ops::ones_like(&x);
    let tw = ops::full_like(&w, 0.5, DType::F32);
    let (_, t1) = jvp(
        |a| vec![ops::linear(&a[0], &a[1])],
        &[x.clone(), w.clone()],
        &[tx.clone(), tw.clone()],
    )
    .unwrap();
    let (_, t2) = jvp(
        |a| vec![reference(&a[0], &a[1])],
        &[x.clone(), w.clone()],
        &[tx, tw],
    )
    .unwrap();
    close(&t1[0], &t2[0], 1e-4);
    let ws = random::normal(&[2, 3, 6], DType::F32, Some(&key));
    for in_axes in [[Some(0), None], [Some(1), Some(0)], [None, Some(0)]] {
        let xs = if in_axes[0] == Some(1) {
            random::normal(&[4, 2, 6], DType::F32, Some(&key))
        } else if in_axes[0].is_some() {
            random::normal(&[2, 4, 6], DType::F32, Some(&key))
        } else {
            x.clone()
        };
        let wv = if in_axes[1].is_some() {
            ws.clone()
        } else {
            w.clone()
        };
        let a = vmap(|a| vec![ops::linear(&a[0], &a[1])], &in_axes, &[Some(0)])(&[
            xs.clone(),
            wv.clone(),
        ])
        .unwrap();
        let b = vmap(|a| vec![reference(&a[0], &a[1])], &in_axes, &[Some(0)])(&[xs, wv]).unwrap();
        close(&a[0], &b[0], 1e-4);
    }
}

#[test]
fn attention_with_grouped_heads_equals_repeated_heads() {
    let key = random::key(9);
    let q = random::normal(&[1, 4, 3, 8], DType::F32, Some(&key));
    let k = random::normal(&[1, 2, 5, 8], DType::F32, Some(&random::key(4)));
    let v = random::normal(&[1, 2, 5, 8], DType::F32, Some(&random::key(11)));
    let grouped = fast::scaled_dot_product_attention(&q, &k, &v, 0.5, AttentionMask::Causal);
    let (kr, vr) = (ops::repeat(&k, 2, Some(1)), ops::repeat(&v, 2, Some(1)));
    // Repeated per query head, with the causal mask of the last 3 of 5 positions written out.
    let scores = ops::matmul(&(&q * 0.5), &ops::swapaxes(&kr, -1, -2));
    let visible = ops::tri(3, Some(5), 2, DType::Bool);
    let scores = ops::where_(&visible, &scores, f32::NEG_INFINITY as f64);
    let expected = ops::matmul(&ops::softmax(&scores, -1), &vr);
    close(&grouped, &expected, 1e-5);
}
