//! JACCL on the emulated fabric: each test starts N processes of this binary with the
//! environment `mlx.launch --backend jaccl` writes (a device file, a coordinator, the rank)
//! plus `NUVEC_JACCL_FABRIC=emulated`, and checks the mesh and the ring against references
//! computed locally.

use nuvec::distributed::{self, Group};
use nuvec::prelude::*;
use nuvec_test_support::ranks::{launch_ranks, Jaccl, Launch};
use std::time::{Duration, Instant};

mod common;
use common::collectives::{self, assert_same, input, reference, sum_with_bool_or};

const TIMEOUT: Duration = Duration::from_secs(120);

fn mesh() -> Launch {
    Launch {
        jaccl: Some(Jaccl {
            ring: false,
            wires: 1,
        }),
        ..Default::default()
    }
}

fn ring(wires: usize) -> Launch {
    Launch {
        jaccl: Some(Jaccl { ring: true, wires }),
        ..Default::default()
    }
}

fn run(test: &str, ranks: usize, launch: &Launch, body: impl FnOnce(Group)) {
    launch_ranks(test, ranks, TIMEOUT, launch, |group| {
        let group = group.expect("joining the JACCL group");
        assert_eq!(
            group.communicator().expect("a group of several").backend(),
            "jaccl"
        );
        body(group)
    });
}

/// Element counts around every size that changes the path: the 4 KiB emulated MTU, the
/// 64 KiB small-message paths, a 128 KiB slot, a 1 MiB scratch chunk, and sizes that do not
/// divide by the group or the lanes.
const SIZE_CLASSES: [usize; 8] = [1, 1023, 1025, 16_391, 32_760, 32_777, 262_143, 262_151];

/// Every collective at every size class for f32, bf16, f16 and i32 (exact small integers,
/// so the reference is exact); sum_scatter on blocks of each size.
fn size_classes(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    for dtype in [DType::F32, DType::BF16, DType::F16, DType::I32] {
        for len in SIZE_CLASSES {
            let shape = [len as i32];
            let what = format!("{dtype} [{len}] on {size} ranks");
            let x = input(rank, &shape, dtype);
            assert_same(
                &distributed::all_sum(&x, Some(&group)),
                &reference(size, &shape, dtype, sum_with_bool_or),
                &format!("all_sum {what}"),
            );
            assert_same(
                &distributed::all_max(&x, Some(&group)),
                &reference(size, &shape, dtype, |a, b| ops::maximum(a, b)),
                &format!("all_max {what}"),
            );
            let parts: Vec<Array> = (0..size).map(|r| input(r, &shape, dtype)).collect();
            assert_same(
                &distributed::all_gather(&x, Some(&group)),
                &ops::concatenate(&parts, 0),
                &format!("all_gather {what}"),
            );
            let blocks = [(size * len) as i32];
            let total = reference(size, &blocks, dtype, sum_with_bool_or);
            let start = (rank * len) as i32;
            assert_same(
                &distributed::sum_scatter(&input(rank, &blocks, dtype), Some(&group)),
                &ops::slice(&total, &[start], &[start + len as i32], &[1]),
                &format!("sum_scatter {what}"),
            );
        }
    }
}

/// Every dtype and odd shapes, then every size class.
fn everything(group: Group) {
    collectives::check_collectives(group);
    size_classes(group);
}

#[test]
fn mesh_collectives_match_references_on_2_ranks() {
    run(
        "mesh_collectives_match_references_on_2_ranks",
        2,
        &mesh(),
        everything,
    );
}

#[test]
fn mesh_collectives_match_references_on_3_ranks() {
    run(
        "mesh_collectives_match_references_on_3_ranks",
        3,
        &mesh(),
        everything,
    );
}

#[test]
fn mesh_collectives_match_references_on_4_ranks_and_send_between_any_pair() {
    run(
        "mesh_collectives_match_references_on_4_ranks_and_send_between_any_pair",
        4,
        &mesh(),
        |group| {
            everything(group);
            collectives::send_and_recv_everywhere(group);
        },
    );
}

#[test]
fn mesh_collectives_match_references_on_8_ranks() {
    run(
        "mesh_collectives_match_references_on_8_ranks",
        8,
        &mesh(),
        everything,
    );
}

#[test]
fn ring_collectives_match_references_on_2_ranks_with_4_cables() {
    run(
        "ring_collectives_match_references_on_2_ranks_with_4_cables",
        2,
        &ring(4),
        everything,
    );
}

#[test]
fn ring_collectives_match_references_on_3_ranks_with_1_cable() {
    run(
        "ring_collectives_match_references_on_3_ranks_with_1_cable",
        3,
        &ring(1),
        |group| {
            everything(group);
            collectives::send_and_recv_ring(group);
        },
    );
}

#[test]
fn ring_collectives_match_references_on_4_ranks_with_4_cables() {
    run(
        "ring_collectives_match_references_on_4_ranks_with_4_cables",
        4,
        &ring(4),
        |group| {
            everything(group);
            collectives::send_and_recv_ring(group);
        },
    );
}

#[test]
fn ring_collectives_match_references_on_8_ranks_with_2_cables() {
    run(
        "ring_collectives_match_references_on_8_ranks_with_2_cables",
        8,
        &ring(2),
        everything,
    );
}

#[test]
fn large_float_sums_agree_bitwise_and_rerun_on_the_mesh_and_the_ring() {
    for (ranks, launch) in [(4, mesh()), (3, ring(4)), (2, ring(1))] {
        launch_ranks(
            "large_float_sums_agree_bitwise_and_rerun_on_the_mesh_and_the_ring",
            ranks,
            TIMEOUT,
            &launch,
            |group| collectives::large_float_sums_agree_bitwise(group.unwrap()),
        );
        if nuvec_test_support::ranks::is_child() {
            return;
        }
    }
}

#[test]
fn mismatched_calls_give_errors_naming_both_sides() {
    run(
        "mismatched_calls_give_errors_naming_both_sides",
        2,
        &mesh(),
        collectives::mismatched_calls_give_errors,
    );
}

#[test]
fn the_ring_sends_to_neighbours_only_and_says_so() {
    run(
        "the_ring_sends_to_neighbours_only_and_says_so",
        4,
        &ring(1),
        |group| {
            let error = distributed::send(&array![1.0f32], (group.rank() + 2) % 4, Some(&group))
                .check()
                .unwrap_err()
                .to_string();
            assert!(error.contains("neighbours"), "{error}");
            // The refusal does not break the group.
            let sum = distributed::all_sum(&array![1.0f32], Some(&group));
            assert_eq!(sum.to_vec::<f32>().unwrap(), [4.0]);
        },
    );
}

fn with_group_timeout(mut launch: Launch, seconds: u64) -> Launch {
    launch.group_timeout = Some(Duration::from_secs(seconds));
    launch
}

#[test]
fn a_lost_frame_fails_the_operation_naming_the_sender() {
    // Rank 1 loses its 40th packet: part of the first large all_sum's messages to rank 0.
    let mut launch = with_group_timeout(mesh(), 3);
    launch
        .env
        .push(("NUVEC_JACCL_EMULATED_DROP".into(), "1:40".into()));
    launch_ranks(
        "a_lost_frame_fails_the_operation_naming_the_sender",
        2,
        TIMEOUT,
        &launch,
        |group| {
            let group = group.unwrap();
            let x = ops::ones(&[1 << 20], DType::F32);
            let start = Instant::now();
            let error = distributed::all_sum(&x, Some(&group))
                .check()
                .unwrap_err()
                .to_string();
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "took {:?}",
                start.elapsed()
            );
            if group.rank() == 0 {
                assert!(
                    error.contains("rank 1") && error.contains("lost"),
                    "{error}"
                );
            } else {
                assert!(error.contains("rank 0"), "{error}");
            }
            let later = distributed::all_sum(&x, Some(&group))
                .check()
                .unwrap_err()
                .to_string();
            assert!(later.contains("failed earlier"), "{later}");
        },
    );
}

#[test]
fn a_killed_peer_fails_collectives_naming_it_within_the_timeout() {
    let mut launch = with_group_timeout(mesh(), 3);
    launch.expendable = vec![2];
    launch_ranks(
        "a_killed_peer_fails_collectives_naming_it_within_the_timeout",
        3,
        TIMEOUT,
        &launch,
        |group| {
            let group = group.unwrap();
            if group.rank() == 2 {
                std::process::exit(0);
            }
            std::thread::sleep(Duration::from_millis(300));
            let start = Instant::now();
            let x = ops::ones(&[1 << 18], DType::F32);
            let error = distributed::all_sum(&x, Some(&group))
                .check()
                .unwrap_err()
                .to_string();
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "took {:?}",
                start.elapsed()
            );
            assert!(error.contains("rank 2"), "{error}");
            let health = group.health().unwrap_err().to_string();
            assert!(health.contains("rank"), "{health}");
        },
    );
}

#[test]
fn a_stalled_peer_times_out_with_an_error_naming_it() {
    let launch = with_group_timeout(mesh(), 2);
    launch_ranks(
        "a_stalled_peer_times_out_with_an_error_naming_it",
        2,
        TIMEOUT,
        &launch,
        |group| {
            let group = group.unwrap();
            let x = ops::ones(&[16], DType::F32);
            if group.rank() == 1 {
                std::thread::sleep(Duration::from_secs(6));
                assert!(distributed::all_sum(&x, Some(&group)).check().is_err());
                return;
            }
            let start = Instant::now();
            let error = distributed::all_sum(&x, Some(&group))
                .check()
                .unwrap_err()
                .to_string();
            let waited = start.elapsed();
            assert!(
                error.contains("rank 1") && error.contains("no progress"),
                "{error}"
            );
            assert!(
                waited >= Duration::from_millis(1900) && waited < Duration::from_secs(5),
                "waited {waited:?}"
            );
        },
    );
}
