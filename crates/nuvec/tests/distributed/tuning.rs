//! Collectives on one machine time their two paths on their first calls of each size and
//! keep the faster (`NUVEC_RING_TUNING`): every rank takes the same path at every call, so
//! every call, during the trials and after, gives every rank the right bits.

use super::*;

/// 30 calls of each collective at sizes whose paths are timed, each checked against what
/// every rank contributed.
fn every_call_is_right_while_the_paths_are_timed(group: Group) {
    let (rank, n) = (group.rank(), group.size());
    let value = |r: usize, i: usize| (r * 100 + i) as f64;
    for i in 0..30 {
        let block = 16_384;
        let x = ops::full(&[block], value(rank, i), DType::F32);
        let all = distributed::all_gather(&x, Some(&group))
            .to_vec::<f32>()
            .unwrap();
        for r in 0..n {
            assert!(
                all[r * block as usize..(r + 1) * block as usize]
                    .iter()
                    .all(|&v| v == value(r, i) as f32),
                "all_gather call {i} on rank {rank}: rank {r}'s block"
            );
        }
        let root = i % n;
        let y = ops::full(&[20_000], value(rank, i), DType::F32);
        let got = distributed::broadcast(&y, root, Some(&group))
            .to_vec::<f32>()
            .unwrap();
        assert!(
            got.iter().all(|&v| v == value(root, i) as f32),
            "broadcast call {i} on rank {rank}"
        );
        let z = ops::full(&[n as i32 * 10_000], value(rank, i), DType::F32);
        let got = distributed::all_to_all(&z, Some(&group))
            .to_vec::<f32>()
            .unwrap();
        for r in 0..n {
            assert!(
                got[r * 10_000..(r + 1) * 10_000]
                    .iter()
                    .all(|&v| v == value(r, i) as f32),
                "all_to_all call {i} on rank {rank}: rank {r}'s block"
            );
        }
        if n == 2 {
            // Halves that do not add exactly in any order but one: a + b is b + a.
            let w = ops::full(&[65_536], value(rank, i) + 0.1, DType::F32);
            let sum = distributed::all_sum(&w, Some(&group))
                .to_vec::<f32>()
                .unwrap();
            let want = (value(0, i) + 0.1) as f32 + (value(1, i) + 0.1) as f32;
            assert!(
                sum.iter().all(|&v| v == want),
                "all_sum call {i} on rank {rank}"
            );
        }
    }
}

#[test]
fn every_call_is_right_while_the_paths_are_timed_on_2_and_4_ranks() {
    for n in [2, 4] {
        run_ranks(
            test_name!(),
            n,
            TIMEOUT,
            every_call_is_right_while_the_paths_are_timed,
        );
        if nuvec_test_support::ranks::is_child() {
            return;
        }
    }
}

/// With tuning off, the fixed thresholds alone.
#[test]
fn every_call_is_right_with_tuning_off() {
    let off = ("NUVEC_RING_TUNING", &["off"][..]);
    launch_with_each(test_name!(), 2, off, |group, _| {
        every_call_is_right_while_the_paths_are_timed(group)
    });
}
