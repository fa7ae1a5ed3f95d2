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

/// Rank `from`'s rows for rank `to` in [`all_to_all_v_sends_rows_by_count`]: `count(from,
/// to)` rows of two floats, each naming both ranks and its place.
fn rows_for(from: usize, to: usize, size: usize) -> Vec<f32> {
    (0..(from + to) % 3)
        .flat_map(|i| {
            [
                from as f32 * 100.0 + to as f32,
                i as f32 + size as f32 / 10.0,
            ]
        })
        .collect()
}

/// Rank `r` sends `(r + j) % 3` rows (some none) to rank `j`: the counts exchange tells each
/// rank how many it gets, the rows arrive in rank order, the gradient goes back by the
/// swapped counts, and counts that disagree fail naming the other rank.
pub(crate) fn all_to_all_v_sends_rows_by_count(group: Group) {
    use nuvec::transforms::grad;
    let (rank, size) = (group.rank(), group.size());
    let send: Vec<usize> = (0..size).map(|to| (rank + to) % 3).collect();
    let recv = distributed::all_to_all_counts(&send, Some(&group)).unwrap();
    let expected: Vec<usize> = (0..size).map(|from| (from + rank) % 3).collect();
    assert_eq!(recv, expected, "rank {rank}");
    let mine: Vec<f32> = (0..size).flat_map(|to| rows_for(rank, to, size)).collect();
    let x = Array::from_vec(mine.clone(), &[send.iter().sum::<usize>() as i32, 2]);
    let got = distributed::all_to_all_v(&x, &send, &recv, Some(&group));
    let want: Vec<f32> = (0..size)
        .flat_map(|from| rows_for(from, rank, size))
        .collect();
    assert_eq!(got.to_vec::<f32>().unwrap(), want, "rank {rank}");
    let weights = ops::multiply(&got, rank as f32 + 1.0);
    let gradient = grad(|v: &[Array]| {
        let moved = distributed::all_to_all_v(&v[0], &send, &recv, Some(&group));
        ops::sum(&(moved * &weights), None, false)
    })(std::slice::from_ref(&x))
    .unwrap();
    let back = distributed::all_to_all_v(&weights, &recv, &send, Some(&group));
    assert_same(&gradient[0], &back, "the gradient");
    // Rank 0 expects one row too many from the last rank.
    let mut wrong = recv.clone();
    if rank == 0 {
        wrong[size - 1] += 1;
    }
    // Every rank learns it from the counts, before any row moves.
    let error = distributed::all_to_all_v(&x, &send, &wrong, Some(&group))
        .check()
        .unwrap_err()
        .to_string();
    let last = size - 1;
    assert!(
        error.starts_with("[all_to_all_v]") && error.contains("sends rank 0"),
        "rank {rank}: {error}"
    );
    assert!(
        error.contains(&format!("rank {last}")),
        "rank {rank}: {error}"
    );
}

/// Regions of different sizes in one call, some empty, some small, some large (a backend's
/// paths for small and large regions in the same exchange): rank `from` sends
/// `[0, 100, 5000][(from + to) % 3]` rows of four floats to rank `to`.
pub(crate) fn all_to_all_v_moves_regions_of_every_size(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    let count = |from: usize, to: usize| [0usize, 100, 5000][(from + to) % 3];
    let rows = |from: usize, to: usize| -> Vec<f32> {
        (0..count(from, to) * 4)
            .map(|i| (from * 1_000_000 + to * 1000) as f32 + (i % 1000) as f32)
            .collect()
    };
    let send: Vec<usize> = (0..size).map(|to| count(rank, to)).collect();
    let recv: Vec<usize> = (0..size).map(|from| count(from, rank)).collect();
    let mine: Vec<f32> = (0..size).flat_map(|to| rows(rank, to)).collect();
    let x = Array::from_vec(mine, &[send.iter().sum::<usize>() as i32, 4]);
    let got = distributed::all_to_all_v(&x, &send, &recv, Some(&group));
    let want: Vec<f32> = (0..size).flat_map(|from| rows(from, rank)).collect();
    assert!(
        got.to_vec::<f32>().unwrap() == want,
        "rank {rank}: the rows differ"
    );
}
