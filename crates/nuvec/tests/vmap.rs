//! `vmap` against stacking the function over slices, for every primitive family, with batch
//! axes anywhere; its composition with `grad` and `jvp`; and its errors.

use nuvec::ops;
use nuvec::prelude::*;
use nuvec::transforms::{grad, jvp, vmap};
use nuvec_test_support::values;

/// Whether two float64 arrays of one shape agree to 1e-12.
fn close(a: &Array, b: &Array) -> bool {
    a.shape() == b.shape()
        && a.to_vec::<f64>()
            .unwrap()
            .iter()
            .zip(b.to_vec::<f64>().unwrap())
            .all(|(x, y)| (x - y).abs() <= 1e-12 * y.abs().max(1.0))
}

/// Slice `b` of `x` along `axis`.
fn slice_at(x: &Array, axis: i32, b: i32) -> Array {
    ops::take(x, &Array::scalar(b), Some(axis))
}

/// Checks `vmap(f)` against `f` applied to each slice and stacked along axis 0.
#[track_caller]
fn check(name: &str, f: impl Fn(&[Array]) -> Array, inputs: &[Array], in_axes: &[Option<i32>]) {
    let batched = vmap(|x| vec![f(x)], in_axes, &[Some(0)])(inputs)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .remove(0);
    let (index, axis) = in_axes
        .iter()
        .enumerate()
        .find_map(|(i, a)| a.map(|a| (i, a)))
        .expect("a batched input");
    let axis_of = |a: i32, x: &Array| if a < 0 { a + x.ndim() as i32 } else { a };
    let size = inputs[index].shape()[axis_of(axis, &inputs[index]) as usize];
    let rows: Vec<Array> = (0..size)
        .map(|b| {
            let slices: Vec<Array> = inputs
                .iter()
                .zip(in_axes)
                .map(|(x, a)| match a {
                    Some(a) => slice_at(x, axis_of(*a, x), b),
                    None => x.clone(),
                })
                .collect();
            f(&slices)
        })
        .collect();
    let expected = ops::stack(&rows, 0);
    assert_eq!(batched.shape(), expected.shape(), "{name}: shape");
    assert_eq!(batched.dtype(), expected.dtype(), "{name}: dtype");
    let (got, want) = (
        batched
            .astype(DType::F64)
            .to_vec::<f64>()
            .unwrap_or_else(|e| panic!("{name}: {e}")),
        expected.astype(DType::F64).to_vec::<f64>().unwrap(),
    );
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * w.abs().max(1.0),
            "{name}: element {i} is {g}, stacking gives {w}"
        );
    }
}

#[test]
fn element_wise_ops_batch_with_broadcasting_and_any_axis() {
    let x = values(&[4, 3, 5], 0.1, 2.0, 1);
    let row = values(&[5], 0.1, 2.0, 2);
    check(
        "exp",
        |v| ops::exp(&v[0]),
        std::slice::from_ref(&x),
        &[Some(0)],
    );
    check(
        "exp axis 1",
        |v| ops::exp(&v[0]),
        std::slice::from_ref(&x),
        &[Some(1)],
    );
    check(
        "exp axis -1",
        |v| ops::exp(&v[0]),
        std::slice::from_ref(&x),
        &[Some(-1)],
    );
    check(
        "add with an unbatched row",
        |v| &v[0] + &v[1],
        &[x.clone(), row.clone()],
        &[Some(0), None],
    );
    check(
        "a batched row against an unbatched matrix",
        |v| ops::power(&v[1], &v[0]),
        &[values(&[4, 5], 0.5, 1.5, 3), values(&[3, 5], 0.5, 1.5, 4)],
        &[Some(0), None],
    );
    check(
        "both batched on different axes",
        |v| ops::maximum(&v[0], &v[1]),
        &[x.clone(), values(&[3, 4, 5], 0.1, 2.0, 5)],
        &[Some(0), Some(1)],
    );
    check(
        "where",
        |v| ops::where_(ops::greater(&v[0], 1.0), &v[0], &v[1]),
        &[x.clone(), row.clone()],
        &[Some(0), None],
    );
    check(
        "astype",
        |v| v[0].astype(DType::I32),
        &[x.clone() * 10.0],
        &[Some(0)],
    );
    check(
        "comparison",
        |v| ops::less(&v[0], &v[1]),
        &[x.clone(), row],
        &[Some(0), None],
    );
    check(
        "stop_gradient",
        |v| ops::stop_gradient(&v[0]),
        &[x],
        &[Some(1)],
    );
}

#[test]
fn layout_ops_batch() {
    let x = values(&[3, 4, 5], -1.0, 1.0, 6);
    check(
        "reshape",
        |v| ops::reshape(&v[0], &[5, 4]),
        std::slice::from_ref(&x),
        &[Some(0)],
    );
    check(
        "reshape axis 2",
        |v| ops::reshape(&v[0], &[12]),
        std::slice::from_ref(&x),
        &[Some(2)],
    );
    check(
        "transpose",
        |v| ops::transpose(&v[0], None),
        std::slice::from_ref(&x),
        &[Some(1)],
    );
    check(
        "broadcast_to",
        |v| ops::broadcast_to(&v[0], &[2, 4, 5]),
        &[values(&[3, 1, 5], -1.0, 1.0, 7)],
        &[Some(0)],
    );
    check(
        "slice with steps",
        |v| ops::slice(&v[0], &[3, 0], &[0, 5], &[-2, 2]),
        std::slice::from_ref(&x),
        &[Some(0)],
    );
    // Rows 3 and 1, columns 4 and 2 of each [4, 5] source.
    let update_slice = |v: &[Array]| ops::slice_update(&v[0], &v[1], &[3, 4], &[-5, 1], &[-2, -2]);
    check(
        "slice_update, both batched",
        update_slice,
        &[
            values(&[3, 4, 5], -1.0, 1.0, 9),
            values(&[2, 3, 2], 2.0, 3.0, 10),
        ],
        &[Some(0), Some(1)],
    );
    check(
        "slice_update of an unbatched source",
        update_slice,
        &[
            values(&[4, 5], -1.0, 1.0, 9),
            values(&[3, 2, 2], 2.0, 3.0, 10),
        ],
        &[None, Some(0)],
    );
    check(
        "slice_update with an unbatched update",
        update_slice,
        &[
            values(&[4, 5, 3], -1.0, 1.0, 9),
            values(&[2, 2], 2.0, 3.0, 10),
        ],
        &[Some(2), None],
    );
    check(
        "concatenate with an unbatched part",
        |v| ops::concatenate(&[v[0].clone(), v[1].clone()], 0),
        &[x.clone(), values(&[2, 5], 0.0, 1.0, 8)],
        &[Some(1), None],
    );
    check(
        "pad",
        |v| ops::pad(&v[0], &[(1, 0), (0, 2)], 3.0),
        std::slice::from_ref(&x),
        &[Some(0)],
    );
    check(
        "split",
        |v| ops::split(&v[0], 2, 1)[1].clone(),
        &[x],
        &[Some(2)],
    );
}

#[test]
fn reductions_scans_and_sorts_batch() {
    let x = values(&[3, 4, 5], -1.0, 1.0, 9);
    check(
        "sum",
        |v| ops::sum(&v[0], [0, 1], false),
        std::slice::from_ref(&x),
        &[Some(2)],
    );
    check(
        "max keepdims",
        |v| ops::max(&v[0], 1, true),
        std::slice::from_ref(&x),
        &[Some(0)],
    );
    check(
        "prod all",
        |v| ops::prod(&v[0], None, false),
        std::slice::from_ref(&x),
        &[Some(1)],
    );
    check(
        "argmax",
        |v| ops::argmax(&v[0], Some(0), false),
        std::slice::from_ref(&x),
        &[Some(1)],
    );
    check(
        "cumsum",
        |v| ops::cumsum(&v[0], Some(1), true, false),
        std::slice::from_ref(&x),
        &[Some(0)],
    );
    check(
        "sort",
        |v| ops::sort(&v[0], Some(0)),
        std::slice::from_ref(&x),
        &[Some(2)],
    );
    check(
        "argsort",
        |v| ops::argsort(&v[0], Some(-1)),
        std::slice::from_ref(&x),
        &[Some(0)],
    );
    check(
        "topk",
        |v| ops::topk(&v[0], 2, Some(-1)),
        std::slice::from_ref(&x),
        &[Some(1)],
    );
    check(
        "softmax",
        |v| ops::softmax(&v[0], -1),
        std::slice::from_ref(&x),
        &[Some(0)],
    );
    check(
        "logsumexp",
        |v| ops::logsumexp(&v[0], 0, false),
        &[x],
        &[Some(2)],
    );
}

#[test]
fn matmul_batches_matrices_and_vectors_on_either_side() {
    let a = values(&[3, 2, 4], -1.0, 1.0, 10);
    let b = values(&[4, 5], -1.0, 1.0, 11);
    let v = values(&[3, 4], -1.0, 1.0, 12);
    let mm = |x: &[Array]| ops::matmul(&x[0], &x[1]);
    check(
        "left batched",
        mm,
        &[a.clone(), b.clone()],
        &[Some(0), None],
    );
    check(
        "right batched",
        mm,
        &[b.t(), values(&[3, 4, 2], -1.0, 1.0, 13)],
        &[None, Some(0)],
    );
    check(
        "both batched",
        mm,
        &[a.clone(), values(&[4, 5, 3], -1.0, 1.0, 14)],
        &[Some(0), Some(2)],
    );
    check(
        "batched vector on the left",
        mm,
        &[v.clone(), b.clone()],
        &[Some(0), None],
    );
    check(
        "batched vector on the right",
        mm,
        &[a.clone(), v.clone()],
        &[None, Some(0)],
    );
    check(
        "vector dot vector",
        mm,
        &[v.clone(), values(&[4], -1.0, 1.0, 15)],
        &[Some(0), None],
    );
    check(
        "unbatched stack of matrices",
        mm,
        &[
            values(&[3, 2], -1.0, 1.0, 16),
            values(&[6, 2, 4], -1.0, 1.0, 17),
        ],
        &[Some(0), None],
    );
}

#[test]
fn indexing_batches_data_indices_or_both() {
    let x = values(&[3, 4, 5], -1.0, 1.0, 18);
    let indices = Array::from_vec(vec![4i32, 0, -1], &[3]);
    let take1 = |v: &[Array]| ops::take(&v[0], &v[1], Some(1));
    check(
        "data batched",
        take1,
        &[x.clone(), indices.clone()],
        &[Some(0), None],
    );
    let batch_of_indices = Array::from_vec(vec![0i32, 1, 2, 3, 3, 2, -1, 0], &[4, 2]);
    check(
        "indices batched",
        |v| ops::take(&v[0], &v[1], Some(1)),
        &[values(&[3, 5], -1.0, 1.0, 19), batch_of_indices.clone()],
        &[None, Some(0)],
    );
    check(
        "both batched",
        take1,
        &[
            x.clone(),
            Array::from_vec(vec![0i32, 4, 1, 3, -2, 2], &[3, 2]),
        ],
        &[Some(0), Some(0)],
    );
    check(
        "both batched, other axes",
        |v| ops::take(&v[0], &v[1], Some(0)),
        &[
            x.clone(),
            Array::from_vec(vec![0i32, 1, 1, 0, 2, 0, 1, 2, -1, 2], &[2, 5]),
        ],
        &[Some(2), Some(1)],
    );
    let along = Array::from_vec(vec![0u32, 2, 1, 4, 3, 0], &[3, 1, 2]).astype(DType::U32);
    check(
        "take_along_axis",
        |v| ops::take_along_axis(&v[0], &ops::broadcast_to(&v[1], &[4, 2]), Some(1)),
        &[x, along],
        &[Some(0), Some(0)],
    );
}

#[test]
fn gradients_of_gathers_batch_through_scatter_add() {
    let x = values(&[3, 4, 5], -1.0, 1.0, 26);
    let indices = Array::from_vec(vec![4i32, 0, 4], &[3]);
    let per_example = |v: &[Array]| {
        let loss =
            |q: &[Array]| ops::sum(&ops::square(&ops::take(&q[0], &v[1], Some(1))), None, false);
        grad(loss)(&v[..1]).unwrap().remove(0)
    };
    check(
        "grad of take",
        per_example,
        &[x.clone(), indices],
        &[Some(0), None],
    );
    check(
        "grad of sort",
        |v| {
            grad(|q: &[Array]| ops::sum(&(ops::sort(&q[0], Some(-1)) * &v[1]), None, false))(
                &v[..1],
            )
            .unwrap()
            .remove(0)
        },
        &[x, values(&[4, 5], -1.0, 1.0, 27)],
        &[Some(0), None],
    );
}

#[test]
fn a_batch_of_keys_draws_what_each_key_draws_alone() {
    let keys = nuvec::random::split(&nuvec::random::key(7), 3);
    check(
        "bits",
        |v| nuvec::random::bits(&[2, 3], 4, Some(&v[0])),
        std::slice::from_ref(&keys),
        &[Some(0)],
    );
    check(
        "normal",
        |v| nuvec::random::normal(&[5], DType::F32, Some(&v[0])),
        &[keys],
        &[Some(0)],
    );
}

#[test]
fn out_axes_place_or_broadcast_the_batch_axis() -> Result<()> {
    let x = values(&[3, 2], 0.0, 1.0, 20);
    let f = vmap(
        |v| vec![ops::exp(&v[0]), array![1.0, 2.0]],
        &[Some(0)],
        &[Some(1), Some(0)],
    );
    let out = f(std::slice::from_ref(&x))?;
    assert_eq!(out[0].shape(), [2, 3]);
    assert_eq!(out[0].to_vec::<f64>()?, ops::exp(&x).t().to_vec::<f64>()?);
    // An output that does not vary is broadcast along the batch.
    assert_eq!(out[1].shape(), [3, 2]);
    assert_eq!(out[1].to_vec::<f32>()?, [1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    let unbatched = vmap(|_| vec![array![5.0]], &[Some(0)], &[None])(std::slice::from_ref(&x))?;
    assert_eq!(unbatched[0].to_vec::<f32>()?, [5.0]);
    Ok(())
}

#[test]
fn vmap_composes_with_grad_and_jvp() -> Result<()> {
    let x = values(&[4, 3], 0.1, 1.0, 21);
    let f = |v: &Array| ops::sum(&(ops::sin(v) * v), None, false);
    // Per-example gradients: vmap of grad.
    let per_example = vmap(
        |v| grad(|q: &[Array]| f(&q[0]))(&v[..1]).unwrap(),
        &[Some(0)],
        &[Some(0)],
    )(std::slice::from_ref(&x))?;
    let expected = ops::cos(&x) * &x + ops::sin(&x);
    assert!(close(&per_example[0], &expected));
    // grad of vmap: the gradient of the summed per-example values.
    let summed = grad(|v: &[Array]| {
        let rows = vmap(|q| vec![f(&q[0])], &[Some(0)], &[Some(0)])(v).unwrap();
        ops::sum(&rows[0], None, false)
    })(std::slice::from_ref(&x))?;
    assert!(close(&summed[0], &expected));
    // jvp of vmap and vmap of jvp agree.
    let t = values(&[4, 3], -1.0, 1.0, 22);
    let (_, outer) = jvp(
        |v| vmap(|q| vec![f(&q[0])], &[Some(0)], &[Some(0)])(v).unwrap(),
        std::slice::from_ref(&x),
        std::slice::from_ref(&t),
    )?;
    let inner = vmap(
        |v| jvp(|q| vec![f(&q[0])], &v[..1], &v[1..]).unwrap().1,
        &[Some(0)],
        &[Some(0)],
    )(&[x.clone(), t.clone()])?;
    assert!(close(&outer[0], &inner[0]));
    // vmap of vmap.
    let twice = vmap(
        |v| {
            vmap(
                |q| vec![ops::sum(&q[0], None, false)],
                &[Some(0)],
                &[Some(0)],
            )(v)
            .unwrap()
        },
        &[Some(1)],
        &[Some(0)],
    )(std::slice::from_ref(&values(&[2, 3, 4], 0.0, 1.0, 23)))?;
    assert_eq!(twice[0].shape(), [3, 2]);
    Ok(())
}

#[test]
fn vmap_errors_name_the_transform_and_the_axes() {
    let x = values(&[3, 2], 0.0, 1.0, 24);
    let error = |r: Result<Vec<Array>>| r.unwrap_err().to_string();
    let sizes = error(vmap(|v| vec![&v[0] + &v[1]], &[Some(0)], &[Some(0)])(&[
        x.clone(),
        values(&[2, 2], 0.0, 1.0, 25),
    ]));
    assert!(
        sizes.contains("[vmap]") && sizes.contains("batch sizes") && sizes.contains('3'),
        "{sizes}"
    );
    let range = error(vmap(|v| vec![v[0].clone()], &[Some(2)], &[Some(0)])(
        std::slice::from_ref(&x),
    ));
    assert!(
        range.contains("[vmap]") && range.contains("in_axes[0] = 2"),
        "{range}"
    );
    let none = error(vmap(|v| vec![v[0].clone()], &[None], &[Some(0)])(
        std::slice::from_ref(&x),
    ));
    assert!(none.contains("at least one input"), "{none}");
    let count = error(vmap(
        |v| vec![v[0].clone()],
        &[Some(0), Some(0)],
        &[Some(0)],
    )(&[x.clone(), x.clone(), x.clone()]));
    assert!(count.contains("in_axes has 2 entries"), "{count}");
    let varies = error(vmap(|v| vec![ops::exp(&v[0])], &[Some(0)], &[None])(
        std::slice::from_ref(&x),
    ));
    assert!(varies.contains("out_axes[0] is None"), "{varies}");
    let out_range = error(vmap(|v| vec![ops::exp(&v[0])], &[Some(0)], &[Some(5)])(
        std::slice::from_ref(&x),
    ));
    assert!(out_range.contains("out_axes[0] = 5"), "{out_range}");
}

#[test]
fn gradients_flow_back_through_a_batched_broadcast() -> Result<()> {
    // Under vmap a broadcast reads the batch axis in front, so its output is no NumPy
    // broadcast of its input's shape; the vjp must still sum only the stretched axis.
    let x = values(&[3, 4], -1.0, 1.0, 31);
    let loss = |v: &[Array]| {
        let rows = vmap(
            |q| vec![ops::broadcast_to(&q[0], &[2, 4]) * &q[0]],
            &[Some(0)],
            &[Some(0)],
        )(v)
        .unwrap();
        ops::sum(&rows[0], None, false)
    };
    let gradient = grad(loss)(std::slice::from_ref(&x))?;
    // d/dx of sum over 2 copies of x * x: 4x.
    assert!(close(&gradient[0], &(&x * 4.0)));
    Ok(())
}
