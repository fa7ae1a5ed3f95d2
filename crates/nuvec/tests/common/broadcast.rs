//! Test bodies of `broadcast` and `barrier`, shared by the ring's tests (`distributed/`),
//! MPI's (`mpi.rs`) and JACCL's (`jaccl.rs`): each runs on every rank of a group.

use super::collectives::{assert_same, input};
use nuvec::distributed::{self, Group};
use nuvec::prelude::*;

/// Every dtype, every root, and shapes from a scalar and an empty array to one large enough
/// for each backend's large-message path: every rank gets the root's input, bit for bit.
pub(crate) fn broadcast_gives_every_rank_the_roots_array(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    for dtype in DType::ALL {
        for root in 0..size {
            for shape in [&[3, 5][..], &[], &[0, 4]] {
                let got = distributed::broadcast(&input(rank, shape, dtype), root, Some(&group));
                let what = format!("{dtype} {shape:?} from root {root} on rank {rank}");
                assert_same(&got, &input(root, shape, dtype), &what);
            }
        }
    }
    // Large ones, of odd lengths, from every root: on one machine the root writes the last
    // part of each reader's copy while the reader reads the rest (where ranks outnumber
    // cores, as 3 and 4 ranks on a 2-core machine, only the larger one).
    for root in 0..size {
        for (elements, dtype) in [(65_537, DType::U8), (300_007, DType::F32)] {
            let x = input(rank, &[elements], dtype);
            let got = distributed::broadcast(&x, root, Some(&group));
            let what = format!("a broadcast of {elements} {dtype} from root {root}");
            assert_same(&got, &input(root, &[elements], dtype), &what);
        }
    }
    // The group goes on after them.
    distributed::barrier(Some(&group)).expect("a barrier after the broadcasts");
}

/// A root outside the group is refused before anything is sent.
pub(crate) fn broadcast_refuses_a_root_outside_the_group(group: Group) {
    let outside = distributed::broadcast(&array![1.0f32], group.size(), Some(&group));
    let refused = outside.check().unwrap_err().to_string();
    assert!(
        refused.contains("broadcast") && refused.contains("root rank"),
        "{refused}"
    );
}

/// Ranks that name different roots fail on every rank, each error naming a rank whose root
/// differs (backends that check calls: not MPI, where a mismatch is undefined behaviour).
pub(crate) fn broadcast_with_different_roots_fails_naming_them(group: Group) {
    let rank = group.rank();
    let root = usize::from(rank == 0);
    let error = distributed::broadcast(&array![1.0f32, 2.0], root, Some(&group))
        .check()
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("[broadcast]") && error.contains("from root"),
        "rank {rank}: {error}"
    );
}

/// The derivatives: the root's input gets the sum of every rank's cotangent (the other
/// ranks' inputs none), a tangent is the root's, and a batch broadcasts whole.
pub(crate) fn broadcast_under_transforms(group: Group) {
    use nuvec::transforms::{grad, jvp, vmap};
    let (rank, size) = (group.rank(), group.size() as f32);
    let x = Array::from_vec(vec![1.0f32 + rank as f32, 2.0], &[2]);
    let weights = Array::from_vec(vec![1.0f32 + rank as f32, 10.0], &[2]);
    let gradient = grad(|v: &[Array]| {
        ops::sum(
            &(distributed::broadcast(&v[0], 0, Some(&group)) * &weights),
            None,
            false,
        )
    })(std::slice::from_ref(&x))
    .unwrap();
    // Σ over ranks of (1 + r) and of 10.
    let expected: Vec<f32> = match rank {
        0 => vec![size * (size + 1.0) / 2.0, 10.0 * size],
        _ => vec![0.0, 0.0],
    };
    assert_eq!(
        gradient[0].to_vec::<f32>().unwrap(),
        expected,
        "rank {rank}"
    );
    let tangent = Array::from_vec(vec![5.0f32 * (rank as f32 + 1.0), 0.5], &[2]);
    let (_, tangents) = jvp(
        |v: &[Array]| vec![distributed::broadcast(&v[0], 1, Some(&group))],
        std::slice::from_ref(&x),
        std::slice::from_ref(&tangent),
    )
    .unwrap();
    assert_eq!(tangents[0].to_vec::<f32>().unwrap(), [10.0, 0.5]);
    // A batch of three rows of 4 along axis 1, out along axis 0.
    let batch = input(rank, &[4, 3], DType::F32);
    let batched = vmap(
        |v: &[Array]| vec![distributed::broadcast(&v[0], 0, Some(&group))],
        &[Some(1)],
        &[Some(0)],
    )(std::slice::from_ref(&batch))
    .unwrap();
    let roots = ops::moveaxis(&input(0, &[4, 3], DType::F32), 1, 0);
    assert_same(&batched[0], &roots, "a batch along axis 1");
}
