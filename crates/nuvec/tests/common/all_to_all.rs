//! Test bodies of `all_to_all`, shared by the ring's tests (`distributed/`), MPI's (`mpi.rs`)
//! and JACCL's (`jaccl.rs`): each runs on every rank of a group.

use super::collectives::{assert_same, input};
use nuvec::distributed::{self, Group};
use nuvec::prelude::*;

/// What rank `rank` gets from an all-to-all of every rank's [`input`] of `shape`: block
/// `rank` of each rank's input, in rank order.
fn expected(rank: usize, size: usize, shape: &[i32], dtype: DType) -> Array {
    let rows = shape[0] / size as i32;
    let blocks: Vec<Array> = (0..size)
        .map(|from| {
            let x = input(from, shape, dtype);
            let start = rows * rank as i32;
            let mut stop = shape.to_vec();
            stop[0] = start + rows;
            let mut begin = vec![0; shape.len()];
            begin[0] = start;
            ops::slice(&x, &begin, &stop, &vec![1; shape.len()])
        })
        .collect();
    ops::concatenate(&blocks, 0)
}

/// Every dtype, blocks of one row, of several, of none, and a large float32 exchange.
pub(crate) fn all_to_all_sends_each_rank_its_blocks(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    let n = size as i32;
    for dtype in DType::ALL {
        for shape in [vec![n], vec![2 * n, 3], vec![0, 2]] {
            let got = distributed::all_to_all(&input(rank, &shape, dtype), Some(&group));
            let what = format!("{dtype} {shape:?} on rank {rank}");
            assert_same(&got, &expected(rank, size, &shape, dtype), &what);
        }
    }
    let large = [n * 70_001];
    let got = distributed::all_to_all(&input(rank, &large, DType::F32), Some(&group));
    assert_same(
        &got,
        &expected(rank, size, &large, DType::F32),
        "a large exchange",
    );
}

/// A first axis that does not divide by the group's size is refused on the spot.
pub(crate) fn all_to_all_refuses_an_uneven_first_axis(group: Group) {
    let n = group.size() as i32;
    let uneven = distributed::all_to_all(&ops::ones(&[n + 1], DType::F32), Some(&group));
    let error = uneven.check().unwrap_err().to_string();
    assert!(error.contains("divisible by the group size"), "{error}");
}

/// Ranks passing different sizes fail on every rank with an error naming another rank's
/// call (backends that check calls: not MPI, where a mismatch is undefined behaviour).
pub(crate) fn all_to_all_of_different_sizes_fails_everywhere(group: Group) {
    let (rank, n) = (group.rank(), group.size() as i32);
    let rows = if rank == 0 { 2 * n } else { n };
    let error = distributed::all_to_all(&ops::ones(&[rows], DType::F32), Some(&group))
        .check()
        .unwrap_err()
        .to_string();
    assert!(error.starts_with("[all_to_all]"), "rank {rank}: {error}");
}

/// The cotangent goes back by the same exchange, a tangent goes the same way, and a batch
/// along another axis exchanges whole.
pub(crate) fn all_to_all_under_transforms(group: Group) {
    use nuvec::transforms::{grad, jvp, vmap};
    let (rank, size) = (group.rank(), group.size());
    let shape = [2 * size as i32, 3];
    let x = input(rank, &shape, DType::F32);
    let weights = input(rank + 5, &shape, DType::F32);
    let gradient = grad(|v: &[Array]| {
        ops::sum(
            &(distributed::all_to_all(&v[0], Some(&group)) * &weights),
            None,
            false,
        )
    })(std::slice::from_ref(&x))
    .unwrap();
    // Rank j's gradient at block r is rank r's weights at block j.
    let by_weights = |rank: usize| {
        let rows = shape[0] / size as i32;
        let blocks: Vec<Array> = (0..size)
            .map(|from| {
                let w = input(from + 5, &shape, DType::F32);
                let start = rows * rank as i32;
                ops::slice(&w, &[start, 0], &[start + rows, 3], &[1, 1])
            })
            .collect();
        ops::concatenate(&blocks, 0)
    };
    assert_same(&gradient[0], &by_weights(rank), "the gradient");
    let tangent = input(rank + 2, &shape, DType::F32);
    let (_, tangents) = jvp(
        |v: &[Array]| vec![distributed::all_to_all(&v[0], Some(&group))],
        std::slice::from_ref(&x),
        std::slice::from_ref(&tangent),
    )
    .unwrap();
    let moved = distributed::all_to_all(&tangent, Some(&group));
    assert_same(&tangents[0], &moved, "the tangent");
    let batched = vmap(
        |v: &[Array]| vec![distributed::all_to_all(&v[0], Some(&group))],
        &[Some(1)],
        &[Some(1)],
    )(std::slice::from_ref(&x))
    .unwrap();
    assert_same(
        &batched[0],
        &expected(rank, size, &shape, DType::F32),
        "a batch",
    );
}
