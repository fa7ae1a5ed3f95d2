//! Test bodies shared by the ring's tests (`distributed/`) and MPI's (`mpi.rs`): each runs
//! on every rank of a group and checks the collectives against references computed locally.

use nuvec::distributed::{self, Group};
use nuvec::prelude::*;
use nuvec::with_dtype;

/// Rank `rank`'s deterministic input of `shape` and `dtype`: small values so sums are exact.
pub(crate) fn input(rank: usize, shape: &[i32], dtype: DType) -> Array {
    let size: i32 = shape.iter().product();
    let base = ops::arange(0.0, f64::from(size), 1.0, DType::I32);
    let values = ops::remainder(&(base * 7 + (rank as i32) * 3), 11);
    let values = if dtype == DType::Bool {
        ops::equal(ops::remainder(&values, 2), 0)
    } else {
        values.astype(dtype)
    };
    ops::reshape(&values, shape)
}

/// The element-wise fold of every rank's input, computed locally.
pub(crate) fn reference(
    size: usize,
    shape: &[i32],
    dtype: DType,
    fold: fn(&Array, &Array) -> Array,
) -> Array {
    (1..size).fold(input(0, shape, dtype), |acc, rank| {
        fold(&acc, &input(rank, shape, dtype))
    })
}

/// Bytes of an array, for bitwise comparisons.
fn bits(a: &Array) -> Vec<u8> {
    with_dtype!(a.dtype(), T, {
        let values = a.to_vec::<T>().expect("reading the result");
        values
            .iter()
            .flat_map(|v| format!("{v:?}").into_bytes())
            .collect()
    })
}

#[track_caller]
pub(crate) fn assert_same(actual: &Array, expected: &Array, what: &str) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    assert_eq!(actual.dtype(), expected.dtype(), "{what}: dtype");
    assert_eq!(bits(actual), bits(expected), "{what}: values");
}

pub(crate) fn sum_with_bool_or(a: &Array, b: &Array) -> Array {
    if a.dtype() == DType::Bool {
        ops::logical_or(a, b)
    } else {
        ops::add(a, b).astype(a.dtype())
    }
}

pub(crate) fn max_of(a: &Array, b: &Array) -> Array {
    ops::maximum(a, b)
}

fn min_of(a: &Array, b: &Array) -> Array {
    ops::minimum(a, b)
}

/// Every collective on every dtype and several shapes, against local references.
pub(crate) fn check_collectives(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    let shapes: [&[i32]; 4] = [&[], &[0], &[7, 3], &[5]];
    for dtype in DType::ALL {
        for shape in shapes {
            let x = input(rank, shape, dtype);
            let what = format!("{dtype} {shape:?} on {size} ranks");
            assert_same(
                &distributed::all_sum(&x, Some(&group)),
                &reference(size, shape, dtype, sum_with_bool_or),
                &format!("all_sum {what}"),
            );
            assert_same(
                &distributed::all_max(&x, Some(&group)),
                &reference(size, shape, dtype, max_of),
                &format!("all_max {what}"),
            );
            assert_same(
                &distributed::all_min(&x, Some(&group)),
                &reference(size, shape, dtype, min_of),
                &format!("all_min {what}"),
            );
            let gathered = distributed::all_gather(&x, Some(&group));
            let parts: Vec<Array> = (0..size)
                .map(|r| {
                    ops::reshape(&input(r, shape, dtype), &[-1]).reshape(&gathered_row_shape(shape))
                })
                .collect();
            assert_same(
                &gathered,
                &ops::concatenate(&parts, 0),
                &format!("all_gather {what}"),
            );
        }
        // sum_scatter: the first axis divides by the size.
        let shape = [2 * size as i32, 3];
        let x = input(rank, &shape, dtype);
        let total = reference(size, &shape, dtype, sum_with_bool_or);
        let mine = ops::slice(&total, &[2 * rank as i32], &[2 * rank as i32 + 2], &[1]);
        assert_same(
            &distributed::sum_scatter(&x, Some(&group)),
            &mine,
            &format!("sum_scatter {dtype}"),
        );
    }
}

fn gathered_row_shape(shape: &[i32]) -> Vec<i32> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    }
}

/// 64 MB of random floats: every rank and a rerun get the same bits, close to a local sum.
pub(crate) fn large_float_sums_agree_bitwise(group: Group) {
    // 16 M floats (64 MB) whose sum depends on the order of additions.
    nuvec::random::seed(group.rank() as u64);
    let x = nuvec::random::normal(&[16 << 20], DType::F32, None);
    let first = distributed::all_sum(&x, Some(&group));
    let second = distributed::all_sum(&x, Some(&group));
    let everyone = distributed::all_gather(&ops::expand_dims(&first, &[0]), Some(&group));
    let rows = ops::split(&everyone, group.size() as i32, 0);
    let mine = first.to_vec::<f32>().unwrap();
    assert_eq!(
        second.to_vec::<f32>().unwrap(),
        mine,
        "a rerun gives the same bits"
    );
    for (rank, row) in rows.iter().enumerate() {
        let theirs = row.reshape(&[-1]).to_vec::<f32>().unwrap();
        assert!(
            theirs
                .iter()
                .zip(&mine)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "rank {rank} got other bits"
        );
    }
    // An input nothing else holds is reduced in place; doubling every input doubles the
    // sum exactly, so the two paths must agree bit for bit.
    let doubled = distributed::all_sum(&(&x * 2.0), Some(&group));
    let twice = (&first * 2.0).to_vec::<f32>().unwrap();
    assert!(
        doubled.to_vec::<f32>().unwrap() == twice,
        "a donated input sums as a kept one"
    );
    // The values are right (to rounding) against a local sum of every rank's draw.
    let expected = (0..group.size()).fold(ops::zeros(&[16 << 20], DType::F32), |acc, r| {
        nuvec::random::seed(r as u64);
        acc + nuvec::random::normal(&[16 << 20], DType::F32, None)
    });
    let error = ops::abs(&(&first - &expected))
        .max(None, false)
        .item::<f32>()
        .unwrap();
    assert!(error < 1e-5, "largest error {error}");
    // sum_scatter over segments of many chunks: this rank's rows of the same total.
    let (rank, size) = (group.rank() as i32, group.size() as i32);
    let rows = (16 << 20) / size;
    let part = ops::slice(&x, &[0], &[rows * size], &[1]);
    let scattered = distributed::sum_scatter(&part, Some(&group));
    let want = ops::slice(&expected, &[rank * rows], &[(rank + 1) * rows], &[1]);
    let error = ops::abs(&(&scattered - &want))
        .max(None, false)
        .item::<f32>()
        .unwrap();
    assert!(error < 1e-5, "sum_scatter: largest error {error}");
}

/// A group whose ranks share several connections: large sums spread over them (and, on
/// three ranks or more, both directions) agree bitwise and are right; exact integer sums of
/// an odd length land in place; small collectives and send/recv work as on one connection.
pub(crate) fn sums_over_several_connections(group: Group) {
    large_float_sums_agree_bitwise(group);
    let (rank, size) = (group.rank(), group.size());
    let n = (3 << 20) + 3;
    let x = ops::arange(0.0, n as f64, 1.0, DType::I32) + rank as i32;
    let sum = distributed::all_sum(&x, Some(&group))
        .to_vec::<i32>()
        .unwrap();
    let offset: i32 = (0..size as i32).sum();
    assert!(
        sum.iter()
            .enumerate()
            .all(|(i, &v)| v == size as i32 * i as i32 + offset),
        "integer sums"
    );
    let largest = distributed::all_max(&x, Some(&group))
        .to_vec::<i32>()
        .unwrap();
    assert!(largest
        .iter()
        .enumerate()
        .all(|(i, &v)| v == i as i32 + size as i32 - 1));
    let small = distributed::all_sum(&array![1.0f32, 2.0], Some(&group));
    assert_eq!(
        small.to_vec::<f32>().unwrap(),
        [size as f32, 2.0 * size as f32]
    );
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    distributed::send(&array![rank as f32], right, Some(&group))
        .eval()
        .unwrap();
    let got = distributed::recv(&[1], DType::F32, left, Some(&group));
    assert_eq!(got.to_vec::<f32>().unwrap(), [left as f32]);
}

/// Every rank sends to every other rank, neighbours or not.
pub(crate) fn send_and_recv_everywhere(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    // Every rank sends its rank to every other rank, in rank order.
    for src in 0..size {
        if src == rank {
            for dst in (0..size).filter(|&d| d != rank) {
                let message = ops::full(&[2, 3], (10 * rank + dst) as f64, DType::I64);
                distributed::send(&message, dst, Some(&group))
                    .eval()
                    .unwrap();
            }
        } else {
            let got = distributed::recv(&[2, 3], DType::I64, src, Some(&group));
            assert_eq!(
                got.to_vec::<i64>().unwrap(),
                vec![(10 * src + rank) as i64; 6],
                "from rank {src}"
            );
        }
    }
}

/// `vmap` of `send` sends the whole batch as laid out (MLX's rule); `grad` and `jvp` through
/// `send` are clear errors, and the group stays usable after them (2 ranks).
pub(crate) fn send_under_transforms(group: Group) {
    use nuvec::transforms::{grad, jvp, vmap};
    if group.rank() == 0 {
        let x = Array::from_vec((0..6).map(|v| v as f32).collect::<Vec<_>>(), &[2, 3]);
        let g = group;
        let sent = vmap(
            move |v: &[Array]| vec![distributed::send(&v[0], 1, Some(&g))],
            &[Some(1)],
            &[Some(1)],
        )(std::slice::from_ref(&x))
        .unwrap();
        assert_eq!(sent[0].to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
        let g = group;
        let error =
            grad(move |v: &[Array]| ops::sum(&distributed::send(&v[0], 1, Some(&g)), None, false))(
                std::slice::from_ref(&x),
            )
            .unwrap_err()
            .to_string();
        assert!(error.contains("send has no vjp rule"), "{error}");
        let g = group;
        let error = jvp(
            move |v: &[Array]| vec![distributed::send(&v[0], 1, Some(&g))],
            std::slice::from_ref(&x),
            std::slice::from_ref(&x),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("send has no jvp rule"), "{error}");
        distributed::send(&array![7.0f32], 1, Some(&group))
            .eval()
            .unwrap();
    } else {
        let got = distributed::recv(&[2, 3], DType::F32, 0, Some(&group));
        assert_eq!(got.to_vec::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let next = distributed::recv(&[1], DType::F32, 0, Some(&group));
        assert_eq!(next.to_vec::<f32>().unwrap(), [7.0]);
    }
}

/// A receiver expecting another shape gets an error naming both, and the connection stays
/// usable for the next message (2 ranks).
pub(crate) fn mismatched_send_recv(group: Group) {
    let rank = group.rank();
    if rank == 0 {
        distributed::send(&ops::zeros(&[3], DType::F32), 1, Some(&group))
            .eval()
            .unwrap();
        distributed::send(&ops::ones(&[2], DType::F32), 1, Some(&group))
            .eval()
            .unwrap();
    } else {
        let error = distributed::recv(&[4], DType::F32, 0, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("rank 0") && error.contains("[3]") && error.contains("[4]"),
            "{error}"
        );
        let next = distributed::recv(&[2], DType::F32, 0, Some(&group));
        assert_eq!(next.to_vec::<f32>().unwrap(), [1.0, 1.0]);
    }
}

/// [`mismatched_send_recv`], then ranks calling different collectives both get an error
/// saying what each called (2 ranks).
pub(crate) fn mismatched_calls_give_errors(group: Group) {
    mismatched_send_recv(group);
    let rank = group.rank();
    // Different collectives on the two ranks: both get an error saying what each called.
    let x = ops::ones(&[8], DType::F32);
    let result = if rank == 0 {
        distributed::all_sum(&x, Some(&group))
    } else {
        distributed::all_gather(&x, Some(&group))
    };
    let error = result.check().unwrap_err().to_string();
    assert!(
        error.contains("all_sum") && error.contains("all_gather"),
        "{error}"
    );
    // The group then refuses further work with that first error.
    let later = distributed::all_sum(&x, Some(&group))
        .check()
        .unwrap_err()
        .to_string();
    assert!(later.contains("failed earlier"), "{later}");
}

/// Gradients and jvps through each collective follow MLX's rules (2 ranks).
pub(crate) fn gradients_follow_mlx_rules(group: Group) {
    use nuvec::transforms::grad;
    let rank = group.rank() as f32;
    let x = Array::from_vec(vec![1.0f32 + rank, 2.0 + rank], &[2]);
    let weights = array![3.0, 5.0];
    // all_sum passes the cotangent through: each rank's loss is its own.
    let through_sum = grad(|v: &[Array]| {
        ops::sum(
            &(distributed::all_sum(&v[0], Some(&group)) * &weights),
            None,
            false,
        )
    })(std::slice::from_ref(&x))
    .unwrap();
    assert_eq!(through_sum[0].to_vec::<f32>().unwrap(), [3.0, 5.0]);
    // all_gather: this rank's rows of the cotangent.
    let gather_weights = array![1.0, 2.0, 3.0, 4.0];
    let through_gather = grad(|v: &[Array]| {
        ops::sum(
            &(distributed::all_gather(&v[0], Some(&group)) * &gather_weights),
            None,
            false,
        )
    })(std::slice::from_ref(&x))
    .unwrap();
    let expected: Vec<f32> = if group.rank() == 0 {
        vec![1.0, 2.0]
    } else {
        vec![3.0, 4.0]
    };
    assert_eq!(through_gather[0].to_vec::<f32>().unwrap(), expected);
    // sum_scatter: the cotangent in this rank's rows, zero elsewhere.
    let through_scatter = grad(|v: &[Array]| {
        ops::sum(
            &(distributed::sum_scatter(&v[0], Some(&group)) * 7.0),
            None,
            false,
        )
    })(std::slice::from_ref(&x))
    .unwrap();
    let expected: Vec<f32> = if group.rank() == 0 {
        vec![7.0, 0.0]
    } else {
        vec![0.0, 7.0]
    };
    assert_eq!(through_scatter[0].to_vec::<f32>().unwrap(), expected);
    // sum_gradients: identity forward, all_sum of the cotangent backward.
    let own_weights = Array::from_vec(vec![1.0f32 + rank, 10.0 * (1.0 + rank)], &[2]);
    let through_sum_gradients = grad(|v: &[Array]| {
        ops::sum(
            &(distributed::sum_gradients(&v[0], Some(&group)) * &own_weights),
            None,
            false,
        )
    })(std::slice::from_ref(&x))
    .unwrap();
    assert_eq!(
        through_sum_gradients[0].to_vec::<f32>().unwrap(),
        [3.0, 30.0]
    );
    // jvp applies the same collective to the tangent (MLX's rule; ours for sum_scatter),
    // and sum_gradients passes the tangent through.
    use nuvec::transforms::jvp;
    let tangent = Array::from_vec(vec![10.0f32 * (1.0 + rank), -1.0], &[2]);
    let (_, tangents) = jvp(
        |v| {
            vec![
                distributed::all_sum(&v[0], Some(&group)),
                distributed::all_gather(&v[0], Some(&group)),
                distributed::sum_scatter(&v[0], Some(&group)),
                distributed::sum_gradients(&v[0], Some(&group)),
            ]
        },
        std::slice::from_ref(&x),
        std::slice::from_ref(&tangent),
    )
    .unwrap();
    assert_eq!(tangents[0].to_vec::<f32>().unwrap(), [30.0, -2.0]);
    assert_eq!(
        tangents[1].to_vec::<f32>().unwrap(),
        [10.0, -1.0, 20.0, -1.0]
    );
    let scattered = if group.rank() == 0 { [30.0] } else { [-2.0] };
    assert_eq!(tangents[2].to_vec::<f32>().unwrap(), scattered);
    assert_eq!(
        tangents[3].to_vec::<f32>().unwrap(),
        tangent.to_vec::<f32>().unwrap()
    );
}

/// Each rank sends a 5-element array to the next rank and receives one from the previous.
pub(crate) fn send_and_recv_ring(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    let (next, previous) = ((rank + 1) % size, (rank + size - 1) % size);
    let message = |from: usize| ops::arange(0.0, 5.0, 1.0, DType::F64) + (100 * from) as f64;
    let send = || {
        distributed::send(&message(rank), next, Some(&group))
            .eval()
            .unwrap()
    };
    let receive = || {
        let got = distributed::recv(&[5], DType::F64, previous, Some(&group));
        assert_eq!(
            got.to_vec::<f64>().unwrap(),
            message(previous).to_vec::<f64>().unwrap(),
            "from rank {previous}"
        );
    };
    // Rank 0 starts the chain so that no rank waits on a rank that waits on it.
    if rank == 0 {
        send();
        receive();
    } else {
        receive();
        send();
    }
}

/// `vmap` through each collective equals the collective of each slice, for batch axes 0 and 1
/// (MLX's all_gather is wrong for axis 0).
pub(crate) fn vmap_through_collectives(group: Group) {
    use nuvec::transforms::vmap;
    let rank = group.rank() as i32;
    let size = group.size() as i32;
    // Three slices of shape [2 * size]; rank r's values are offset by 100 r.
    let x = ops::reshape(
        &(ops::arange(0.0, f64::from(6 * size), 1.0, DType::F32) + f64::from(100 * rank)),
        &[3, 2 * size],
    );
    for (axis, input) in [(0, x.clone()), (1, x.t())] {
        let outputs = vmap(
            |v| {
                vec![
                    distributed::all_sum(&v[0], Some(&group)),
                    distributed::all_gather(&v[0], Some(&group)),
                    distributed::sum_scatter(&v[0], Some(&group)),
                ]
            },
            &[Some(axis)],
            &[Some(0)],
        )(std::slice::from_ref(&input))
        .unwrap();
        let rows = |f: &dyn Fn(&Array) -> Array| {
            let slices: Vec<Array> = (0..3)
                .map(|b| f(&ops::take(&x, &Array::scalar(b), Some(0))))
                .collect();
            ops::stack(&slices, 0)
        };
        let expected = [
            rows(&|s| distributed::all_sum(s, Some(&group))),
            rows(&|s| distributed::all_gather(s, Some(&group))),
            rows(&|s| distributed::sum_scatter(s, Some(&group))),
        ];
        for (name, (got, want)) in ["all_sum", "all_gather", "sum_scatter"]
            .iter()
            .zip(outputs.iter().zip(&expected))
        {
            assert_same(got, want, &format!("vmap of {name}, batch axis {axis}"));
        }
    }
    // A batch of 0-d arrays gathers to one row per rank.
    let scalars = Array::from_vec(vec![rank as f32, 10.0 + rank as f32], &[2]);
    let gathered = vmap(
        |v| vec![distributed::all_gather(&v[0], Some(&group))],
        &[Some(0)],
        &[Some(0)],
    )(std::slice::from_ref(&scalars))
    .unwrap();
    assert_eq!(gathered[0].shape(), [2, size]);
}

/// A compiled function with collectives communicates on every call, and two equal
/// collectives in it both run (effects are never merged).
pub(crate) fn compiled_collectives_communicate_every_call(group: Group) {
    use nuvec::transforms::compile;
    let size = group.size() as f32;
    let compiled = compile(|v: &[Array]| {
        let once = distributed::all_sum(&v[0], Some(&group));
        let twice = distributed::all_sum(&v[0], Some(&group));
        vec![once + twice * 10.0]
    });
    for call in 0..3 {
        let x = Array::from_vec(vec![call as f32 + group.rank() as f32], &[1]);
        let total: f32 = (0..group.size()).map(|r| call as f32 + r as f32).sum();
        let got = compiled.call(&[x]).unwrap()[0].to_vec::<f32>().unwrap();
        assert_eq!(got, [11.0 * total], "call {call} on {size} ranks");
    }
    assert_eq!(compiled.traces(), 1);
}

/// A node whose evaluation creates a file.
#[derive(Debug)]
struct Touch(std::path::PathBuf);

impl nuvec::primitive::Primitive for Touch {
    fn name(&self) -> &str {
        "touch"
    }

    fn eval_cpu(
        &self,
        inputs: &mut [nuvec::primitive::Input],
        _outputs: &[nuvec::primitive::OutputSpec],
    ) -> Result<Vec<std::sync::Arc<nuvec::primitive::Buffer>>> {
        std::fs::write(&self.0, b"computed")
            .map_err(|e| Error::eval("touch", format!("{}: {e}", self.0.display())))?;
        Ok(vec![inputs[0].buffer().clone()])
    }
}

/// Collectives run on the group's worker while the evaluating thread goes on (2 ranks, ring
/// launch environment). Rank 1 joins the all_sum only after rank 0 has computed a node that
/// comes after the all_sum in its evaluation: were the all_sum run on rank 0's evaluating
/// thread, both ranks would wait for each other until the group's timeout.
pub(crate) fn collectives_overlap_local_work(group: Group) {
    let hostfile = std::env::var("MLX_HOSTFILE").expect("the ring's launch environment");
    let marker = std::path::PathBuf::from(format!("{hostfile}.computed"));
    let x = ops::full(&[1000], (group.rank() + 1) as f64, DType::F32);
    if group.rank() == 0 {
        let reduced = distributed::all_sum(&x, Some(&group));
        let local = Array::from_primitive(
            std::sync::Arc::new(Touch(marker)),
            vec![&x * 2.0],
            vec![1000],
            DType::F32,
        );
        eval(&[reduced.clone(), local.clone()]).unwrap();
        assert_eq!(reduced.to_vec::<f32>().unwrap(), vec![3.0; 1000]);
        assert_eq!(local.to_vec::<f32>().unwrap(), vec![2.0; 1000]);
    } else {
        let start = std::time::Instant::now();
        while !marker.exists() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "rank 0 never computed past its in-flight all_sum"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let reduced = distributed::all_sum(&x, Some(&group));
        assert_eq!(reduced.to_vec::<f32>().unwrap(), vec![3.0; 1000]);
    }
}
