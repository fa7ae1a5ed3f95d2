//! `quantized_matmul` with `transpose` reads the packed words in its loop: its values, dtypes
//! and derivatives are those of dequantizing `W` and multiplying by `Wᵀ` with `matmul`.

use nuvec_core::transforms::{jvp, vjp, vmap};
use nuvec_core::{ops, random, Array, DType};

fn normal(shape: &[i32], dtype: DType, seed: u64) -> Array {
    random::normal(shape, dtype, Some(&random::key(seed)))
}

/// The largest difference between `a` and `b`, relative to the largest magnitude of `b`.
fn relative_error(a: &Array, b: &Array) -> f32 {
    let (a, b) = (a.astype(DType::F32), b.astype(DType::F32));
    let scale = ops::max(&ops::abs(&b), None, false).item::<f32>().unwrap();
    let error = ops::max(&ops::abs(&(a - b)), None, false)
        .item::<f32>()
        .unwrap();
    error / scale.max(1e-6)
}

/// `x · Wᵀ` through the dequantized `W`: what `quantized_matmul` computed before it read the
/// packed words.
fn dequantize_then_matmul(x: &Array, wq: &Array, s: &Array, b: &Array, bits: u32) -> Array {
    let w = ops::dequantize(wq, s, b, 64, bits);
    ops::matmul(x, &ops::transpose(&w, None))
}

#[test]
fn packed_products_equal_dequantize_then_matmul_for_every_shape_of_x() {
    for bits in [3, 4, 8] {
        let (wq, scales, biases) = ops::quantize(&normal(&[48, 256], DType::F32, 1), 64, bits);
        // A vector, one row, a few rows (tiles) and many rows (dequantized blocks).
        for shape in [
            &[256][..],
            &[1, 256],
            &[5, 256],
            &[2, 3, 256],
            &[2, 20, 256],
        ] {
            let x = normal(shape, DType::F32, 2);
            let y = ops::quantized_matmul(&x, &wq, &scales, &biases, true, 64, bits);
            let expected = dequantize_then_matmul(&x, &wq, &scales, &biases, bits);
            assert_eq!(y.shape(), expected.shape());
            let error = relative_error(&y, &expected);
            assert!(error < 1e-5, "{bits} bits, x {shape:?}: {error}");
        }
    }
}

#[test]
fn bf16_products_sum_in_f32_and_round_once() {
    let w = normal(&[40, 128], DType::BF16, 3);
    let (wq, scales, biases) = ops::quantize(&w, 64, 4);
    let x = normal(&[3, 128], DType::BF16, 4);
    let y = ops::quantized_matmul(&x, &wq, &scales, &biases, true, 64, 4);
    assert_eq!(y.dtype(), DType::BF16);
    let wide = |a: &Array| a.astype(DType::F32);
    let exact = dequantize_then_matmul(&wide(&x), &wq, &wide(&scales), &wide(&biases), 4);
    let error = relative_error(&y, &exact);
    assert!(error < 1.0 / 128.0, "{error}");
}

#[test]
fn mixed_dtypes_promote_as_matmul_does() {
    let (wq, scales, biases) = ops::quantize(&normal(&[8, 64], DType::BF16, 5), 64, 4);
    let x = normal(&[2, 64], DType::F32, 6);
    let y = ops::quantized_matmul(&x, &wq, &scales, &biases, true, 64, 4);
    assert_eq!(y.dtype(), DType::F32);
    // `W` is computed in f32 from the bf16 scales and biases, not rounded to bf16 first.
    let (wide_scales, wide_biases) = (scales.astype(DType::F32), biases.astype(DType::F32));
    let expected = dequantize_then_matmul(&x, &wq, &wide_scales, &wide_biases, 4);
    assert!(relative_error(&y, &expected) < 1e-5);
    let half = ops::quantized_matmul(&x.astype(DType::F16), &wq, &scales, &biases, true, 64, 4);
    assert_eq!(half.dtype(), DType::F32, "f16 with bf16 promotes to f32");
}

#[test]
fn gradients_equal_those_of_dequantize_then_matmul() {
    let (wq, scales, biases) = ops::quantize(&normal(&[24, 128], DType::F32, 7), 64, 4);
    let x = normal(&[2, 3, 128], DType::F32, 8);
    let cotangent = normal(&[2, 3, 24], DType::F32, 9);
    let primals = [x, scales, biases];
    let packed = |v: &[Array]| vec![ops::quantized_matmul(&v[0], &wq, &v[1], &v[2], true, 64, 4)];
    let dense = |v: &[Array]| vec![dequantize_then_matmul(&v[0], &wq, &v[1], &v[2], 4)];
    let (_, got) = vjp(packed, &primals, std::slice::from_ref(&cotangent)).unwrap();
    let (_, expected) = vjp(dense, &primals, std::slice::from_ref(&cotangent)).unwrap();
    for (name, (g, e)) in ["x", "scales", "biases"]
        .iter()
        .zip(got.iter().zip(&expected))
    {
        assert_eq!(g.shape(), e.shape(), "{name}");
        let error = relative_error(g, e);
        assert!(error < 1e-5, "{name}: {error}");
    }
    let tangents: Vec<Array> = primals
        .iter()
        .enumerate()
        .map(|(i, p)| normal(p.shape(), DType::F32, 10 + i as u64))
        .collect();
    let (_, got) = jvp(packed, &primals, &tangents).unwrap();
    let (_, expected) = jvp(dense, &primals, &tangents).unwrap();
    let error = relative_error(&got[0], &expected[0]);
    assert!(error < 1e-5, "jvp: {error}");
}

#[test]
fn batched_weights_and_rows_vectorise_as_stacked_products() {
    let (wq, scales, biases) = ops::quantize(&normal(&[3, 16, 128], DType::F32, 11), 64, 4);
    let xs = normal(&[3, 2, 128], DType::F32, 12);
    let product = |v: &[Array]| {
        vec![ops::quantized_matmul(
            &v[0], &v[1], &v[2], &v[3], true, 64, 4,
        )]
    };
    let slice = |a: &Array, i: i32| ops::take(a, &Array::scalar(i), Some(0));
    for (x_axis, name) in [(Some(0), "batched x"), (None, "shared x")] {
        let batched = vmap(product, &[x_axis, Some(0), Some(0), Some(0)], &[Some(0)])(&[
            xs.clone(),
            wq.clone(),
            scales.clone(),
            biases.clone(),
        ])
        .unwrap();
        let stacked: Vec<Array> = (0..3)
            .map(|i| {
                let x = if x_axis.is_some() {
                    slice(&xs, i)
                } else {
                    xs.clone()
                };
                let parts = [x, slice(&wq, i), slice(&scales, i), slice(&biases, i)];
                product(&parts).remove(0)
            })
            .collect();
        let expected = ops::stack(&stacked, 0);
        assert_eq!(batched[0].shape(), expected.shape(), "{name}");
        let error = relative_error(&batched[0], &expected);
        assert!(error < 1e-5, "{name}: {error}");
    }
}
