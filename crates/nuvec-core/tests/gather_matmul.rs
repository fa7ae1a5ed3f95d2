//! `gather_qmm` reads each picked quantized matrix in its packed form: its values and
//! derivatives are those of `gather_mm` on the dequantized stack, whatever the indices
//! (given, missing, broadcast) and the dtype; bad indices and shapes are errors naming it.

use nuvec_core::transforms::{jvp, vjp, vmap};
use nuvec_core::{array, ops, random, Array, DType};

fn normal(shape: &[i32], dtype: DType, seed: u64) -> Array {
    random::normal(shape, dtype, Some(&random::key(seed)))
}

/// The largest difference between `a` and `b`, relative to the largest magnitude of `b`.
fn relative_error(a: &Array, b: &Array) -> f32 {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.astype(DType::F32), b.astype(DType::F32));
    let scale = ops::max(&ops::abs(&b), None, false).item::<f32>().unwrap();
    let error = ops::max(&ops::abs(&(a - b)), None, false)
        .item::<f32>()
        .unwrap();
    error / scale.max(1e-6)
}

/// Four experts `[4, 24, 128]`, quantized in groups of 64.
struct Experts {
    wq: Array,
    scales: Array,
    biases: Array,
    /// The dequantized stack, transposed: `[4, 128, 24]`.
    dense_t: Array,
}

fn experts(dtype: DType, bits: u32) -> Experts {
    let w = normal(&[4, 24, 128], dtype, 1);
    let (wq, scales, biases) = ops::quantize(&w, 64, bits);
    let dense = ops::dequantize(&wq, &scales, &biases, 64, bits);
    Experts {
        wq,
        scales,
        biases,
        dense_t: ops::swapaxes(&dense, -1, -2),
    }
}

fn packed(x: &Array, e: &Experts, lhs: Option<&Array>, rhs: Option<&Array>, bits: u32) -> Array {
    ops::gather_qmm(x, &e.wq, &e.scales, &e.biases, lhs, rhs, true, 64, bits)
}

#[test]
fn packed_gathered_products_equal_gather_mm_of_the_dequantized_experts() {
    let routes = array![[0, 3], [2, 2], [1, 0]];
    for (dtype, bits, tolerance) in [
        (DType::F32, 4, 1e-5),
        (DType::F32, 8, 1e-5),
        (DType::BF16, 4, 2e-2),
        (DType::F16, 4, 4e-3),
    ] {
        let e = experts(dtype, bits);
        // Tokens [3, 1, 1, 128] routed to two experts each: y [3, 2, 1, 24].
        let x = normal(&[3, 1, 1, 128], dtype, 2);
        let got = packed(&x, &e, None, Some(&routes), bits);
        assert_eq!(got.shape(), [3, 2, 1, 24]);
        assert_eq!(got.dtype(), dtype);
        let want = ops::gather_mm(&x, &e.dense_t, None, Some(&routes));
        let error = relative_error(&got, &want);
        assert!(error <= tolerance, "{dtype} {bits}-bit: off by {error}");
        // Both indices given, a row of x per product, several rows of x per matrix.
        let x = normal(&[3, 5, 128], dtype, 3);
        let (lhs, rhs) = (array![0, 2, 1, 2], array![3, 0, 1, 1]);
        let got = packed(&x, &e, Some(&lhs), Some(&rhs), bits);
        let want = ops::gather_mm(&x, &e.dense_t, Some(&lhs), Some(&rhs));
        assert_eq!(got.shape(), [4, 5, 24]);
        let error = relative_error(&got, &want);
        assert!(
            error <= tolerance,
            "{dtype} {bits}-bit with lhs: off by {error}"
        );
    }
}

#[test]
fn without_transpose_the_stack_is_multiplied_as_stored() {
    // W [2, 64, 96] quantized along its last axis: x [.., 64] · W[e].
    let w = normal(&[2, 64, 96], DType::F32, 4);
    let (wq, scales, biases) = ops::quantize(&w, 32, 4);
    let dense = ops::dequantize(&wq, &scales, &biases, 32, 4);
    let x = normal(&[3, 2, 64], DType::F32, 5);
    let rhs = array![1, 0, 1];
    let got = ops::gather_qmm(&x, &wq, &scales, &biases, None, Some(&rhs), false, 32, 4);
    let want = ops::gather_mm(&x, &dense, None, Some(&rhs));
    assert!(relative_error(&got, &want) <= 1e-5);
}

#[test]
fn derivatives_are_those_of_gather_mm_on_the_dequantized_experts() {
    let e = experts(DType::F32, 4);
    let (lhs, rhs) = (array![0, 1, 1], array![2, 0, 3]);
    let x = normal(&[2, 3, 128], DType::F32, 6);
    let cotangent = normal(&[3, 3, 24], DType::F32, 7);
    let (_, got) = vjp(
        |a| vec![packed(&a[0], &e, Some(&lhs), Some(&rhs), 4)],
        std::slice::from_ref(&x),
        std::slice::from_ref(&cotangent),
    )
    .unwrap();
    let (_, want) = vjp(
        |a| vec![ops::gather_mm(&a[0], &e.dense_t, Some(&lhs), Some(&rhs))],
        std::slice::from_ref(&x),
        &[cotangent],
    )
    .unwrap();
    assert!(relative_error(&got[0], &want[0]) <= 1e-5);

    let tangent = normal(&[2, 3, 128], DType::F32, 8);
    let (_, got) = jvp(
        |a| vec![packed(&a[0], &e, Some(&lhs), Some(&rhs), 4)],
        std::slice::from_ref(&x),
        std::slice::from_ref(&tangent),
    )
    .unwrap();
    let want = packed(&tangent, &e, Some(&lhs), Some(&rhs), 4);
    assert!(relative_error(&got[0], &want) <= 1e-5);
}

#[test]
fn vmap_over_tokens_equals_one_product_per_batch() {
    let e = experts(DType::F32, 4);
    let rhs = array![[1, 3], [0, 0]];
    // A batch of 3 along axis 1 of x [2, 3, 1, 128].
    let x = normal(&[2, 3, 1, 128], DType::F32, 9);
    let f = |a: &[Array]| vec![packed(&a[0], &e, None, Some(&a[1]), 4)];
    let batched = vmap(f, &[Some(1), None], &[Some(0)])(&[x.clone(), rhs.clone()]).unwrap();
    assert_eq!(batched[0].shape(), [3, 2, 2, 1, 24]);
    for b in 0..3 {
        let one = ops::slice(&x, &[0, b, 0, 0], &[2, b + 1, 1, 128], &[1, 1, 1, 1]);
        let want = packed(&ops::reshape(&one, &[2, 1, 128]), &e, None, Some(&rhs), 4);
        let got = ops::slice(
            &batched[0],
            &[b, 0, 0, 0, 0],
            &[b + 1, 2, 2, 1, 24],
            &[1; 5],
        );
        let got = ops::reshape(&got, &[2, 2, 1, 24]);
        assert!(relative_error(&got, &want) <= 1e-6, "batch {b}");
    }
}

#[test]
fn bad_indices_and_shapes_are_errors_naming_gather_qmm() {
    let e = experts(DType::F32, 4);
    let x = normal(&[3, 1, 128], DType::F32, 10);
    let message = |a: Array| a.eval().map(|_| ()).unwrap_err().to_string();
    let out_of_range = packed(&x, &e, None, Some(&array![0, 4, 1]), 4);
    let text = message(out_of_range);
    assert!(
        text.contains("gather_qmm")
            && text.contains("rhs_indices[1] = 4")
            && text.contains("4 matrices"),
        "{text}"
    );
    let negative = packed(&x, &e, Some(&array![0, -1, 1]), Some(&array![0, 1, 1]), 4);
    assert!(message(negative).contains("lhs_indices[1] = -1"));
    let floats = packed(&x, &e, None, Some(&array![0.0f32, 1.0, 2.0]), 4);
    assert!(message(floats).contains("rhs_indices must be integers"));
    let unbroadcastable = packed(&x, &e, Some(&array![0, 1]), Some(&array![0, 1, 2]), 4);
    assert!(message(unbroadcastable).contains("do not broadcast"));
    let wrong_depth = packed(&normal(&[3, 1, 64], DType::F32, 11), &e, None, None, 4);
    let text = message(wrong_depth);
    assert!(
        text.contains("gather_qmm") && text.contains("[..., M, 128]"),
        "{text}"
    );
    let mismatched = ops::gather_mm(&x, &normal(&[2, 64, 8], DType::F32, 12), None, None);
    assert!(message(mismatched).contains("inner dimensions differ"));
}

/// `y[t] = x[lhs[t]] · b[rhs[t]]`, one `matmul` per product.
fn one_by_one(x: &Array, b: &Array, lhs: &[i32], rhs: &[i32]) -> Array {
    let products: Vec<Array> = lhs
        .iter()
        .zip(rhs)
        .map(|(&i, &e)| {
            let pick = |a: &Array, i: i32| ops::take(a, &Array::scalar(i), Some(0));
            ops::expand_dims(&ops::matmul(&pick(x, i), &pick(b, e)), &[0])
        })
        .collect();
    ops::concatenate(&products, 0)
}

#[test]
fn runs_of_one_expert_give_each_product_as_alone() {
    // Sorted by expert, as a mixture-of-experts layer sorts long inputs: runs of 3, 1, 2.
    let (lhs, rhs) = ([4, 0, 2, 1, 3, 0], [0, 0, 0, 2, 3, 3]);
    let (lhs_a, rhs_a) = (Array::from_slice(&lhs, &[6]), Array::from_slice(&rhs, &[6]));
    for (dtype, tolerance) in [(DType::F32, 1e-5), (DType::BF16, 1e-2)] {
        let x = normal(&[5, 2, 128], dtype, 13);
        let b = normal(&[4, 128, 24], dtype, 14);
        let got = ops::gather_mm(&x, &b, Some(&lhs_a), Some(&rhs_a));
        let error = relative_error(&got, &one_by_one(&x, &b, &lhs, &rhs));
        assert!(error <= tolerance, "{dtype} gather_mm: off by {error}");
        let e = experts(dtype, 4);
        let got = packed(&x, &e, Some(&lhs_a), Some(&rhs_a), 4);
        let error = relative_error(&got, &one_by_one(&x, &e.dense_t, &lhs, &rhs));
        assert!(error <= tolerance, "{dtype} gather_qmm: off by {error}");
    }
}
