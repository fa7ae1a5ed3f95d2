//! Test bodies of `Group::split`, shared by the ring's tests (`distributed/`) and MPI's
//! (`mpi.rs`) and JACCL's (`jaccl.rs`): each runs on every rank of a group of 4.

use nuvec::distributed::{self, Group};
use nuvec::prelude::*;

/// Even and odd ranks in reverse order of world rank; a negative key keeps the order; a
/// group of one; closing a split group leaves the world working; a negative color refused.
pub(crate) fn groups_split_by_color_and_order_by_key(world: Group) {
    let rank = world.rank();
    // Even and odd ranks, in reverse order of world rank.
    let half = world.split((rank % 2) as i32, (10 - rank) as i32).unwrap();
    assert_eq!(half.size(), 2);
    assert_eq!(half.rank(), 1 - rank / 2, "world rank {rank}");
    let total = distributed::all_sum(&Array::scalar(rank as i32), Some(&half));
    assert_eq!(
        total.item::<i32>().unwrap(),
        if rank.is_multiple_of(2) { 2 } else { 4 }
    );
    let gathered = distributed::all_gather(&Array::scalar(rank as i32), Some(&half));
    let expected = if rank.is_multiple_of(2) {
        [2, 0]
    } else {
        [3, 1]
    };
    assert_eq!(gathered.to_vec::<i32>().unwrap(), expected);
    // A negative key keeps the world's order; a group of one is the identity.
    let same = world.split(0, -1).unwrap();
    assert_eq!((same.rank(), same.size()), (rank, 4));
    let alone = world.split(rank as i32, 0).unwrap();
    assert_eq!((alone.rank(), alone.size()), (0, 1));
    let x = array![1.0, 2.0];
    assert_eq!(
        distributed::all_sum(&x, Some(&alone))
            .to_vec::<f32>()
            .unwrap(),
        [1.0, 2.0]
    );
    // The world still works after splitting, and a closed split group says so.
    half.close();
    let closed = distributed::all_sum(&x, Some(&half)).check().unwrap_err();
    assert!(closed.to_string().contains("closed"), "{closed}");
    assert_eq!(
        distributed::all_sum(&Array::scalar(1i32), Some(&world))
            .item::<i32>()
            .unwrap(),
        4
    );
    let bad = world.split(-3, 0).unwrap_err().to_string();
    assert!(bad.contains("[split]") && bad.contains("-3"), "{bad}");
}

/// On every rank, one thread sums over the parent while another sums over its half, many
/// times: neither reads the other's bytes, and both get their own sums. Then the halves
/// gather large arrays (their shared-memory and memory-reading paths) while the parent does.
pub(crate) fn a_split_group_runs_beside_its_parent(world: Group) {
    {
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
    }
}
