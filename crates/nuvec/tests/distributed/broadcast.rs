//! `broadcast`, `barrier` and `all_to_all` on the ring: every dtype (and root) on 1–4
//! ranks, roots or sizes that differ, the transforms, and a rank that leaves before a
//! barrier.

use super::*;
use common::all_to_all as exchanges;
use common::broadcast as bodies;

#[test]
fn all_to_all_sends_each_rank_its_blocks_on_2_ranks() {
    run_ranks(
        test_name!(),
        2,
        TIMEOUT,
        exchanges::all_to_all_sends_each_rank_its_blocks,
    );
}

#[test]
fn all_to_all_sends_each_rank_its_blocks_on_3_ranks() {
    run_ranks(
        test_name!(),
        3,
        TIMEOUT,
        exchanges::all_to_all_sends_each_rank_its_blocks,
    );
}

#[test]
fn all_to_all_sends_each_rank_its_blocks_on_4_ranks() {
    run_ranks(
        test_name!(),
        4,
        TIMEOUT,
        exchanges::all_to_all_sends_each_rank_its_blocks,
    );
}

#[test]
fn all_to_all_v_sends_rows_by_count_on_3_ranks() {
    run_ranks(
        test_name!(),
        3,
        TIMEOUT,
        exchanges::all_to_all_v_sends_rows_by_count,
    );
}

#[test]
fn all_to_all_v_moves_regions_of_every_size_on_3_and_4_ranks() {
    for n in [3, 4] {
        run_ranks(
            test_name!(),
            n,
            TIMEOUT,
            exchanges::all_to_all_v_moves_regions_of_every_size,
        );
        if nuvec_test_support::ranks::is_child() {
            return;
        }
    }
}

#[test]
fn all_to_all_refuses_uneven_or_mismatched_sizes() {
    run_ranks(test_name!(), 3, TIMEOUT, |group| {
        exchanges::all_to_all_refuses_an_uneven_first_axis(group);
        exchanges::all_to_all_of_different_sizes_fails_everywhere(group);
    });
}

#[test]
fn all_to_all_differentiates_and_batches() {
    run_ranks(
        test_name!(),
        3,
        TIMEOUT,
        exchanges::all_to_all_under_transforms,
    );
}

#[test]
fn broadcast_gives_every_rank_the_roots_array_on_2_ranks() {
    run_ranks(
        test_name!(),
        2,
        TIMEOUT,
        bodies::broadcast_gives_every_rank_the_roots_array,
    );
}

#[test]
fn broadcast_gives_every_rank_the_roots_array_on_3_ranks() {
    run_ranks(
        test_name!(),
        3,
        TIMEOUT,
        bodies::broadcast_gives_every_rank_the_roots_array,
    );
}

#[test]
fn broadcast_gives_every_rank_the_roots_array_on_4_ranks() {
    run_ranks(
        test_name!(),
        4,
        TIMEOUT,
        bodies::broadcast_gives_every_rank_the_roots_array,
    );
}

#[test]
fn broadcast_on_a_group_of_one_is_the_identity() {
    let group = distributed::default_group();
    assert_eq!(group.size(), 1);
    let x = array![1.0f32, 2.0];
    let got = distributed::broadcast(&x, 0, Some(&group));
    assert_eq!(got.to_vec::<f32>().unwrap(), [1.0, 2.0]);
    distributed::barrier(Some(&group)).unwrap();
    let refused = distributed::broadcast(&x, 1, Some(&group))
        .check()
        .unwrap_err();
    assert!(refused.to_string().contains("root rank 1"), "{refused}");
}

#[test]
fn broadcasts_with_different_roots_fail_on_every_rank_naming_them() {
    run_ranks(test_name!(), 3, TIMEOUT, |group| {
        bodies::broadcast_refuses_a_root_outside_the_group(group);
        bodies::broadcast_with_different_roots_fails_naming_them(group);
    });
}

#[test]
fn broadcast_differentiates_and_batches() {
    run_ranks(test_name!(), 3, TIMEOUT, bodies::broadcast_under_transforms);
}

#[test]
fn a_barrier_that_a_rank_leaves_fails_naming_it() {
    let launch = Launch {
        group_timeout: Some(Duration::from_secs(20)),
        ..Launch::default()
    };
    launch_ranks(test_name!(), 3, TIMEOUT, &launch, |group| {
        let group = group.unwrap();
        distributed::barrier(Some(&group)).expect("the first barrier");
        if group.rank() == 2 {
            group.close();
            return;
        }
        let start = std::time::Instant::now();
        let error = distributed::barrier(Some(&group)).unwrap_err().to_string();
        assert!(
            error.starts_with("[barrier]") && error.contains('2'),
            "{error}"
        );
        assert!(start.elapsed() < Duration::from_secs(15), "{error}");
    });
}

/// Over TCP alone (the chain from the root, the pairwise exchange) and on one machine with
/// reading each other's memory turned off (the mailboxes carry the large ones too).
#[test]
fn broadcast_and_all_to_all_over_tcp_and_without_reading_memory_on_3_ranks() {
    for (variable, value) in [
        ("NUVEC_RING_SHARED_MEMORY", "off"),
        ("NUVEC_RING_CROSS_MEMORY", "off"),
    ] {
        launch_with_each(test_name!(), 3, (variable, &[value]), |group, _| {
            bodies::broadcast_gives_every_rank_the_roots_array(group);
            exchanges::all_to_all_sends_each_rank_its_blocks(group);
            exchanges::all_to_all_v_sends_rows_by_count(group);
            exchanges::all_to_all_v_moves_regions_of_every_size(group);
        });
        if nuvec_test_support::ranks::is_child() {
            return;
        }
    }
}

/// Different roots over TCP alone, along the chain: every rank fails naming the calls.
#[test]
fn broadcasts_with_different_roots_over_tcp_fail_on_every_rank() {
    let tcp = ("NUVEC_RING_SHARED_MEMORY", &["off"][..]);
    launch_with_each(test_name!(), 3, tcp, |group, _| {
        bodies::broadcast_with_different_roots_fails_naming_them(group);
    });
}

/// Different sizes over TCP alone, in the pairwise exchange: every rank fails.
#[test]
fn all_to_alls_of_different_sizes_over_tcp_fail_on_every_rank() {
    let tcp = ("NUVEC_RING_SHARED_MEMORY", &["off"][..]);
    launch_with_each(test_name!(), 3, tcp, |group, _| {
        exchanges::all_to_all_of_different_sizes_fails_everywhere(group);
    });
}

/// A rank bound to one core counts the machine crowded where its peer, free to use both
/// cores, does not; the path a broadcast takes depends on it (where ranks outnumber cores the
/// root writes into its readers only from 1 MiB). The ranks agree on it at init, so root and
/// reader never pick different paths, and every broadcast arrives whole from either root.
#[cfg(target_os = "linux")]
#[test]
fn ranks_that_count_the_cores_differently_agree_on_the_broadcast_path() {
    // In the parent alone: rank 0's process, under taskset, sees one core by design.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !nuvec_test_support::ranks::is_child() && cores < 2 {
        eprintln!(
            "SKIPPED {}: it needs 2 cores, so that only the rank under taskset counts the \
             machine crowded (this machine has {cores})",
            test_name!()
        );
        return;
    }
    let one_core = ["taskset", "-c", "0"].map(String::from).to_vec();
    let launch = Launch {
        prefix: vec![one_core],
        ..Launch::default()
    };
    launch_ranks(test_name!(), 2, TIMEOUT, &launch, |group| {
        let group = group.unwrap();
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        if group.rank() == 0 {
            assert_eq!(cores, 1, "rank 0 runs under taskset on one core");
        } else {
            assert!(
                cores >= 2,
                "rank 1 runs free and sees this machine's cores: {cores}"
            );
        }
        bodies::broadcast_gives_every_rank_the_roots_array(group);
    });
}
