//! `Group::split` on the ring: sub-groups by color ordered by key, each with connections of
//! its own, working at the same time as each other and as the parent.

use super::*;

#[test]
fn ring_groups_split_by_color_and_order_by_key() {
    run_ranks(
        test_name!(),
        4,
        TIMEOUT,
        common::split::groups_split_by_color_and_order_by_key,
    );
}

/// On every rank, one thread sums over the parent while another sums over its half, many
/// times: neither reads the other's bytes, and both get their own sums. Then the halves
/// gather large arrays (their shared-memory and memory-reading paths) while the parent does.
#[test]
fn a_split_group_and_its_parent_run_at_the_same_time_without_mixing() {
    run_ranks(test_name!(), 4, TIMEOUT, |world| {
        let rank = world.rank();
        let half = world.split((rank % 2) as i32, -1).unwrap();
        let parent = std::thread::spawn(move || {
            for i in 0..200 {
                let x = Array::scalar((rank * 1000 + i) as i32);
                let total = distributed::all_sum(&x, Some(&world))
                    .item::<i32>()
                    .unwrap();
                assert_eq!(total, 6000 + 4 * i as i32, "parent call {i} on rank {rank}");
            }
            let big = ops::full(&[200_000], (rank + 1) as f64, DType::F32);
            let all = distributed::all_gather(&big, Some(&world))
                .to_vec::<f32>()
                .unwrap();
            assert_eq!((all[0], all[all.len() - 1]), (1.0, 4.0));
        });
        let partner = rank ^ 2;
        for i in 0..200 {
            let x = Array::scalar((rank * 1000 + i) as i32);
            let total = distributed::all_sum(&x, Some(&half)).item::<i32>().unwrap();
            let want = ((rank + partner) * 1000 + 2 * i) as i32;
            assert_eq!(total, want, "half call {i} on rank {rank}");
        }
        let big = ops::full(&[300_000], (rank + 1) as f64, DType::F32);
        let both = distributed::all_gather(&big, Some(&half))
            .to_vec::<f32>()
            .unwrap();
        let first = (rank.min(partner) + 1) as f32;
        assert_eq!((both[0], both[both.len() - 1]), (first, first + 2.0));
        parent.join().unwrap();
    });
}
