//! MLX 0.32.4's affine quantization (`scripts/golden/make_nn_fixtures.py`): packed words,
//! scales, biases and dequantized values bit for bit, and quantized products to rounding,
//! for every width (2, 3, 4, 5, 6, 8 bits) and group size (32, 64, 128).

use nuvec::ops;
use nuvec_test_support::{array_of, compare, compare_f32_bits, compare_with, load_fixture_file};
use std::path::Path;

fn fixture(name: &str) -> nuvec_test_support::Fixture {
    load_fixture_file(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json")),
    )
}

#[test]
fn quantize_dequantize_and_quantized_matmul_equal_mlx() {
    let cases = fixture("quantize").cases;
    assert!(cases.len() >= 18, "every width and group size");
    for case in &cases {
        let name = case["name"].as_str().unwrap_or("?");
        let bits = case["bits"].as_u64().unwrap() as u32;
        let group = case["group_size"].as_u64().unwrap() as usize;
        let transpose = case["transpose"].as_bool().unwrap_or(true);
        let w = array_of(&case["w"]);
        let (wq, scales, biases) = ops::quantize(&w, group, bits);
        compare(&wq, &case["wq"]).unwrap_or_else(|e| panic!("{name}: wq: {e}"));
        compare_f32_bits(&scales, &case["scales"])
            .unwrap_or_else(|e| panic!("{name}: scales: {e}"));
        compare_f32_bits(&biases, &case["biases"])
            .unwrap_or_else(|e| panic!("{name}: biases: {e}"));
        // Dequantize MLX's own outputs, so the check does not depend on ours.
        let (mq, ms, mb) = (
            array_of(&case["wq"]),
            array_of(&case["scales"]),
            array_of(&case["biases"]),
        );
        let back = ops::dequantize(&mq, &ms, &mb, group, bits);
        compare_f32_bits(&back, &case["dequantized"])
            .unwrap_or_else(|e| panic!("{name}: dequantized: {e}"));
        let x = array_of(&case["x"]);
        let y = ops::quantized_matmul(&x, &mq, &ms, &mb, transpose, group, bits);
        compare_with(&y, &case["y"], Some((1e-4, 1e-4)))
            .unwrap_or_else(|e| panic!("{name}: quantized_matmul: {e}"));
    }
}

#[test]
fn unsupported_quantization_parameters_are_errors_naming_them() {
    let w = ops::ones(&[2, 64], nuvec::DType::F32);
    let error =
        |r: (nuvec::Array, nuvec::Array, nuvec::Array)| r.0.check().unwrap_err().to_string();
    assert!(error(ops::quantize(&w, 48, 4)).contains("group size 48"));
    assert!(error(ops::quantize(&w, 64, 7)).contains("7 bits"));
    assert!(error(ops::quantize(
        &ops::ones(&[2, 40], nuvec::DType::F32),
        32,
        4
    ))
    .contains("multiple"));
    assert!(error(ops::quantize(&ops::ones(&[64], nuvec::DType::F32), 32, 4)).contains("rank 2"));
    let (wq, scales, _) = ops::quantize(&w, 64, 4);
    let wrong = ops::dequantize(&wq, &scales, &ops::zeros(&[2, 2], nuvec::DType::F32), 64, 4);
    assert!(wrong.check().unwrap_err().to_string().contains("biases"));
}

#[test]
fn quantized_products_differentiate_in_x_scales_and_biases() {
    use nuvec::transforms::grad;
    let w = ops::reshape(&ops::arange(0.0, 128.0, 1.0, nuvec::DType::F32), &[2, 64]) / 50.0;
    let (wq, scales, biases) = ops::quantize(&w, 32, 4);
    let x = ops::ones(&[3, 64], nuvec::DType::F32);
    let dense = ops::dequantize(&wq, &scales, &biases, 32, 4);
    // d/dx of sum(x · Wᵀ) is the column sums of W; d/d(bias) of each group is the number of
    // rows of x times the group size (every element of a group adds its bias).
    let f = |v: &[nuvec::Array]| {
        ops::sum(
            &ops::quantized_matmul(&v[0], &wq, &v[1], &v[2], true, 32, 4),
            None,
            false,
        )
    };
    let grads = grad(f)(&[x.clone(), scales.clone(), biases.clone()]).unwrap();
    let expected_x = ops::broadcast_to(&ops::sum(&dense, 0, true), &[3, 64]);
    let err = ops::max(&ops::abs(&(&grads[0] - &expected_x)), None, false)
        .item::<f32>()
        .unwrap();
    assert!(err < 1e-5, "{err}");
    assert_eq!(grads[2].to_vec::<f32>().unwrap(), vec![96.0; 4]);
    let levels = ops::dequantize(
        &wq,
        &ops::ones_like(&scales),
        &ops::zeros_like(&biases),
        32,
        4,
    );
    let expected_s = ops::sum(&ops::reshape(&(levels * 3.0), &[2, 2, 32]), -1, false);
    assert_eq!(
        grads[1].to_vec::<f32>().unwrap(),
        expected_s.to_vec::<f32>().unwrap()
    );
}

#[test]
fn quantized_products_batch_under_vmap_and_have_forward_derivatives() {
    use nuvec::transforms::{jvp, vmap};
    let w = ops::reshape(&ops::arange(0.0, 256.0, 1.0, nuvec::DType::F32), &[4, 64]) / 100.0;
    let (wq, scales, biases) = ops::quantize(&w, 32, 8);
    let xs = ops::reshape(
        &ops::arange(0.0, 384.0, 1.0, nuvec::DType::F32),
        &[3, 2, 64],
    ) / 300.0;
    let product =
        |x: &nuvec::Array, s: &nuvec::Array| ops::quantized_matmul(x, &wq, s, &biases, true, 32, 8);
    let batched = vmap(
        |v: &[nuvec::Array]| vec![product(&v[0], &scales)],
        &[Some(0)],
        &[Some(0)],
    )(std::slice::from_ref(&xs))
    .unwrap();
    let stacked = ops::stack(
        &(0..3)
            .map(|i| product(&ops::take(&xs, &nuvec::Array::scalar(i), Some(0)), &scales))
            .collect::<Vec<_>>(),
        0,
    );
    assert_eq!(
        batched[0].to_vec::<f32>().unwrap(),
        stacked.to_vec::<f32>().unwrap()
    );
    // Along a tangent of the scales, the product moves by x · (q ⊙ ds)ᵀ.
    let x = ops::take(&xs, &nuvec::Array::scalar(0), Some(0));
    let ds = ops::ones_like(&scales) * 0.5;
    let (_, tangent) = jvp(
        |v: &[nuvec::Array]| vec![product(&x, &v[0])],
        std::slice::from_ref(&scales),
        std::slice::from_ref(&ds),
    )
    .unwrap();
    let levels = ops::dequantize(
        &wq,
        &ops::ones_like(&scales),
        &ops::zeros_like(&biases),
        32,
        8,
    );
    let expected = ops::matmul(&x, &ops::transpose(&(levels * 0.5), None));
    let error = ops::max(&ops::abs(&(&tangent[0] - &expected)), None, false)
        .item::<f32>()
        .unwrap();
    assert!(error < 1e-4, "{error}");
}
