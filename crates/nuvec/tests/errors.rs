//! Bad input to every op family gives a clear `Err` naming the op and the caller's line; it
//! never panics, and the failure is sticky downstream.

use nuvec::ops;
use nuvec::prelude::*;

/// Asserts that `a` fails with a message mentioning every one of `needles`.
#[track_caller]
fn assert_fails(a: &Array, needles: &[&str]) {
    let error = a.check().expect_err("expected the op to fail");
    let text = error.to_string();
    for needle in needles {
        assert!(
            text.contains(needle),
            "error {text:?} does not mention {needle:?}"
        );
    }
    assert!(
        text.contains("errors.rs"),
        "error {text:?} does not name the caller's file"
    );
}

#[test]
fn binary_ops_reject_shapes_that_do_not_broadcast() {
    let a = array![[1.0, 2.0, 3.0]];
    let b = array![[1.0, 2.0], [3.0, 4.0]];
    assert_fails(&ops::add(&a, &b), &["[add]", "[1, 3]", "[2, 2]"]);
    assert_fails(
        &ops::where_(array![true, false, true], &a, &b),
        &["[where]"],
    );
    assert_fails(&ops::equal(array![1, 2], array![1, 2, 3]), &["[equal]"]);
}

#[test]
fn reductions_reject_axes_out_of_range() {
    let a = array![[1.0, 2.0], [3.0, 4.0]];
    assert_fails(&a.sum(2, false), &["[sum]", "axis 2", "2 dimensions"]);
    assert_fails(&ops::mean(&a, [-3], false), &["axis -3"]);
    assert_fails(&ops::argmax(&a, Some(5), false), &["[argmax]"]);
    assert_fails(&ops::cumsum(&a, Some(-4), false, true), &["[cumsum]"]);
    assert_fails(&ops::sum(&a, [0, 0], false), &["more than once"]);
    assert_fails(
        &ops::max(&ops::zeros(&[0], DType::F32), None, false),
        &["[max]", "axis 0 of length 0"],
    );
}

#[test]
fn shape_ops_reject_impossible_shapes() {
    let a = ops::arange(0.0, 6.0, 1.0, DType::I32);
    assert_fails(&ops::reshape(&a, &[4, 2]), &["[reshape]", "[4, 2]"]);
    assert_fails(&ops::reshape(&a, &[-1, -1]), &["[reshape]"]);
    assert_fails(
        &ops::transpose(&ops::reshape(&a, &[2, 3]), Some(&[0])),
        &["[transpose]"],
    );
    assert_fails(
        &ops::squeeze(&ops::reshape(&a, &[2, 3]), Some(&[0])),
        &["[squeeze]", "length 2"],
    );
    assert_fails(&ops::broadcast_to(&a, &[2, 3]), &["[broadcast_to]"]);
    assert_fails(
        &ops::concatenate(&[a.clone(), ops::reshape(&a, &[2, 3])], 0),
        &["[concatenate]"],
    );
    assert_fails(&ops::stack(&[], 0), &["[stack]"]);
    assert_fails(&ops::split(&a, 4, 0)[0], &["[split]", "4 equal sections"]);
    assert_fails(&ops::slice(&a, &[0], &[3], &[0]), &["[slice]", "stride"]);
    assert_fails(&ops::pad(&a, &[(1, -1)], 0.0), &["[pad]"]);
    assert_fails(&ops::tril(&a, 0), &["[tril]", "2 dimensions"]);
    assert_fails(&ops::flatten(&a, 1, 0), &["[flatten]"]);
}

#[test]
fn matmul_rejects_mismatched_inner_dims_and_integers() {
    let a = ops::ones(&[2, 3], DType::F32);
    let b = ops::ones(&[2, 3], DType::F32);
    assert_fails(
        &ops::matmul(&a, &b),
        &["[matmul]", "inner dimensions", "3 != 2"],
    );
    assert_fails(
        &ops::matmul(
            &ops::ones(&[2, 2], DType::I32),
            &ops::ones(&[2, 2], DType::I32),
        ),
        &["floating point"],
    );
    assert_fails(&ops::matmul(&Array::scalar(1.0f32), &a), &["at least 1-D"]);
}

#[test]
fn indexing_rejects_float_indices_and_reports_out_of_range_at_eval() {
    let a = array![1, 2, 3];
    assert_fails(&ops::take(&a, &array![0.0], None), &["[take]", "integers"]);
    let out_of_range = ops::take(&a, &array![3], None);
    let error = out_of_range.check().unwrap_err().to_string();
    assert!(
        error.contains("[take]") && error.contains("index 3") && error.contains("length 3"),
        "{error}"
    );
    assert_fails(
        &ops::take_along_axis(&a, &array![[0]], Some(0)),
        &["[take_along_axis]"],
    );
}

#[test]
fn sort_rejects_bad_axis_and_k() {
    let a = array![3, 1, 2];
    assert_fails(&ops::sort(&a, Some(1)), &["[sort]"]);
    assert_fails(&ops::topk(&a, 4, Some(0)), &["[topk]", "k = 4"]);
}

#[test]
fn creation_rejects_bad_arguments() {
    assert_fails(
        &Array::from_slice(&[1.0f32, 2.0], &[3]),
        &["[array]", "2 values", "[3]"],
    );
    assert_fails(&ops::zeros(&[-1], DType::F32), &["[full]", "[-1]"]);
    assert_fails(&ops::arange(0.0, 1.0, 0.0, DType::F32), &["[arange]"]);
    assert_fails(&ops::full(&[2], -1.0, DType::U8), &["[full]", "uint8"]);
    assert_fails(&ops::linspace(0.0, 1.0, -1, DType::F32), &["[linspace]"]);
    assert_fails(
        &ops::negative(&array![true]),
        &["[negative]", "logical_not"],
    );
    assert_fails(&ops::add(array![1u8 as i32], 1i64 << 40), &["overflow"]);
}

#[test]
fn reading_the_wrong_type_or_size_is_an_error() {
    let a = array![1, 2];
    assert!(matches!(
        a.item::<i32>(),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        a.to_vec::<f32>(),
        Err(Error::DTypeMismatch { .. })
    ));
}

#[test]
fn failures_are_sticky_downstream_and_keep_the_first_cause() {
    let bad = ops::reshape(&array![1.0, 2.0, 3.0], &[2, 2]);
    let downstream = ops::exp(&(&bad + 1.0)).sum(None, false);
    let text = downstream.check().unwrap_err().to_string();
    assert!(text.contains("[reshape]"), "{text}");
    assert!(downstream.item::<f32>().is_err());
    assert!(ops::concatenate(&[bad.clone(), array![1.0]], 0)
        .check()
        .is_err());
}

#[test]
fn a_main_returning_an_error_prints_its_readable_text() {
    // The spec's first example returns `nuvec::Result` from `main`; given a hostfile that does
    // not exist, `init` fails and Rust prints the error with `Debug` ("Error: ...").
    let example = nuvec_test_support::ranks::example("hello_distributed");
    let missing = std::env::temp_dir().join("nuvec-no-such-hostfile.json");
    let output = std::process::Command::new(example)
        .env("MLX_RANK", "0")
        .env("MLX_HOSTFILE", &missing)
        .output()
        .expect("running the example");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the example succeeded: {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("Error: "))
        .unwrap_or_else(|| {
            panic!("no `Error: ` line in the example's stderr:\n{stderr}");
        });
    assert!(line.starts_with("Error: [init]"), "{line}");
    assert!(line.contains("nuvec-no-such-hostfile.json"), "{line}");
    for debug_form in ["Distributed {", "op:", "reason:", "Some("] {
        assert!(
            !line.contains(debug_form),
            "Debug form {debug_form:?} in {line}"
        );
    }
}

#[test]
fn errors_print_the_same_text_with_debug_and_display() {
    let error = ops::add(array![1.0, 2.0], array![1.0, 2.0, 3.0])
        .check()
        .expect_err("shapes that do not broadcast");
    assert_eq!(format!("{error:?}"), error.to_string());
    assert!(error.to_string().starts_with("[add]"), "{error}");
}
