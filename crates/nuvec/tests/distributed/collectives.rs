//! Collectives on 1 to 4 ranks against references computed locally: every path (through rank
//! 0, recursive doubling, the ring, lanes), over TCP and shared memory, bit for bit where the
//! order of a sum is defined.

use super::*;

#[test]
fn collectives_match_local_references_on_2_ranks() {
    run_ranks(test_name!(), 2, TIMEOUT, check_collectives);
}

#[test]
fn collectives_match_local_references_on_3_ranks() {
    run_ranks(test_name!(), 3, TIMEOUT, check_collectives);
}

#[test]
fn collectives_match_local_references_on_4_ranks() {
    run_ranks(test_name!(), 4, TIMEOUT, check_collectives);
}

#[test]
fn collectives_of_failed_arrays_fail_with_the_first_error() {
    let bad = ops::reshape(&array![1.0, 2.0, 3.0], &[2, 2]);
    for result in [
        distributed::all_sum(&bad, None),
        distributed::all_gather(&bad, None),
        distributed::sum_scatter(&bad, None),
        distributed::sum_gradients(&bad, None),
    ] {
        let error = result.check().unwrap_err().to_string();
        assert!(error.contains("[reshape]"), "{error}");
    }
}

#[test]
fn a_group_of_one_makes_every_collective_the_identity() {
    let group = Group::single();
    let x = array![[1.0, 2.0], [3.0, 4.0]];
    assert!(
        distributed::all_sum(&x, Some(&group)).same_node(&x),
        "records nothing"
    );
    assert_eq!(
        distributed::all_gather(&Array::scalar(5i32), Some(&group)).shape(),
        [1]
    );
    assert!(distributed::sum_scatter(&x, Some(&group)).same_node(&x));
}

#[test]
fn large_float_sums_agree_bitwise_on_every_rank_and_rerun() {
    run_ranks(
        test_name!(),
        3,
        TIMEOUT,
        references::large_float_sums_agree_bitwise,
    );
}

/// Sizes of ring collectives, in floats: just past the small paths (64 KB), 1.5 MB (chunks
/// of 512 KiB, several slots each), and 4 MB and a little (chunks of 128 KiB; on 3 ranks or
/// more, two lanes, one each way round). All are odd, so segments differ by an element.
const RING_ELEMENTS: [i32; 3] = [16_411, 393_219, (1 << 20) + 5];

/// Every ring collective at [`RING_ELEMENTS`] against references computed locally (small
/// integers, so every order of addition gives the same bits).
fn ring_collectives_match_references(group: Group) {
    collectives_match_references_at(group, &RING_ELEMENTS);
}

/// Sizes, in floats, that take the mailboxes of a group on one machine: fewer than the ranks,
/// a page, just under a post (the largest two-rank sum on this path), 50_001 (a two-rank
/// gather of 400 KB in two pieces a rank), and 600_001 (on more ranks, a two-phase sum whose
/// blocks go in several pieces each). All but one are odd, so blocks differ by an element.
const MAILBOX_ELEMENTS: [i32; 5] = [3, 1025, 32_000, 50_001, 600_001];

#[test]
fn mailbox_collectives_on_2_ranks_match_references() {
    run_ranks(test_name!(), 2, TIMEOUT, |group| {
        collectives_match_references_at(group, &MAILBOX_ELEMENTS)
    });
}

#[test]
fn mailbox_collectives_on_3_ranks_match_references() {
    run_ranks(test_name!(), 3, TIMEOUT, |group| {
        collectives_match_references_at(group, &MAILBOX_ELEMENTS)
    });
}

#[test]
fn mailbox_collectives_on_4_ranks_match_references() {
    run_ranks(test_name!(), 4, TIMEOUT, |group| {
        collectives_match_references_at(group, &MAILBOX_ELEMENTS)
    });
}

/// Large all-gathers on one machine read each peer's block from its memory; a rank told not
/// to (`CrossMemory::Off`, as where the kernel refuses) gets its peers' blocks through shared
/// memory instead, on the first call and on later ones, while the others still read its
/// block and each other's. Three ranks as threads of this process, so one rank's options can
/// differ.
#[test]
fn large_gathers_read_peers_memory_and_a_rank_that_may_not_gets_the_same_values() {
    let ports = nuvec_test_support::ranks::free_ports(3);
    let nodes: Vec<Vec<String>> = ports
        .iter()
        .map(|p| vec![format!("127.0.0.1:{p}")])
        .collect();
    let handles: Vec<_> = (0..3)
        .map(|rank| {
            let nodes = nodes.clone();
            std::thread::spawn(move || {
                let mut options = distributed::Options::with_timeout(Duration::from_secs(20));
                if rank == 1 {
                    options = options.cross_memory(distributed::CrossMemory::Off);
                }
                let group = distributed::init_with(&nodes, rank, &options).expect("forming");
                for (call, elements) in [(0, 40_000), (1, 40_000), (2, 300_001), (3, 9_000)] {
                    let part = |r: usize| {
                        nuvec_test_support::helpers::values(
                            &[elements],
                            -1.0,
                            1.0,
                            7 * call + r as u64,
                        )
                        .astype(DType::F32)
                    };
                    let gathered = distributed::all_gather(&part(rank), Some(&group));
                    let parts: Vec<Array> = (0..3).map(part).collect();
                    let want = ops::concatenate(&parts, 0).to_vec::<f32>().unwrap();
                    let got = gathered.to_vec::<f32>().unwrap();
                    assert!(
                        got == want,
                        "rank {rank}, call {call}: {elements} floats a rank"
                    );
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("a rank's thread");
    }
}

/// `all_sum`, `all_max` (float32 and bfloat16), `all_gather` and `sum_scatter` of each size
/// in `sizes` against references computed locally.
fn collectives_match_references_at(group: Group, sizes: &[i32]) {
    let (rank, size) = (group.rank(), group.size());
    let n = size as i32;
    let floats = |a: &Array| a.to_vec::<f32>().unwrap();
    for &elements in sizes {
        let what = format!("{elements} floats on {size} ranks, rank {rank}");
        let shape = [elements];
        let x = references::input(rank, &shape, DType::F32);
        let sum = references::reference(size, &shape, DType::F32, references::sum_with_bool_or);
        let got = distributed::all_sum(&x, Some(&group));
        assert!(floats(&got) == floats(&sum), "all_sum of {what}");
        let max = references::reference(size, &shape, DType::F32, references::max_of);
        let got = distributed::all_max(&x, Some(&group));
        assert!(floats(&got) == floats(&max), "all_max of {what}");
        let x16 = references::input(rank, &shape, DType::BF16);
        let sum16 = references::reference(size, &shape, DType::BF16, references::sum_with_bool_or);
        let got = distributed::all_sum(&x16, Some(&group));
        assert!(
            floats(&got.astype(DType::F32)) == floats(&sum16.astype(DType::F32)),
            "bf16 all_sum of {what}"
        );
        let gathered = distributed::all_gather(&x, Some(&group));
        let parts: Vec<Array> = (0..size)
            .map(|r| references::input(r, &shape, DType::F32))
            .collect();
        let all = ops::concatenate(&parts, 0);
        assert!(floats(&gathered) == floats(&all), "all_gather of {what}");
        // sum_scatter of n blocks of `elements` floats: this rank's block of the total.
        let wide = [n * elements];
        let x = references::input(rank, &wide, DType::F32);
        let total = references::reference(size, &wide, DType::F32, references::sum_with_bool_or);
        let start = rank as i32 * elements;
        let mine = ops::slice(&total, &[start], &[start + elements], &[1]);
        let got = distributed::sum_scatter(&x, Some(&group));
        assert!(floats(&got) == floats(&mine), "sum_scatter of {what}");
    }
}

/// [`ring_collectives_match_references`] on `n` ranks, once under each value of the
/// environment variable that `setting` names (variable, values).
fn ring_collectives_under_each(test: &str, n: usize, setting: (&str, &[&str])) {
    launch_with_each(test, n, setting, |group, _| {
        ring_collectives_match_references(group)
    });
}

/// [`ring_collectives_match_references`] on `n` ranks, over TCP and through shared memory.
fn ring_collectives_over_tcp_and_shared_memory(test: &str, n: usize) {
    ring_collectives_under_each(test, n, ("NUVEC_RING_SHARED_MEMORY", &["off", "auto"]));
}

#[test]
fn ring_collectives_on_2_ranks_match_references_over_tcp_and_shared_memory() {
    ring_collectives_over_tcp_and_shared_memory(test_name!(), 2);
}

#[test]
fn ring_collectives_on_3_ranks_match_references_over_tcp_and_shared_memory() {
    ring_collectives_over_tcp_and_shared_memory(test_name!(), 3);
}

#[test]
fn ring_collectives_on_4_ranks_match_references_over_tcp_and_shared_memory() {
    ring_collectives_over_tcp_and_shared_memory(test_name!(), 4);
}

#[test]
fn ring_collectives_match_references_with_streaming_and_with_plain_stores() {
    ring_collectives_under_each(
        test_name!(),
        3,
        ("NUVEC_RING_STREAMING_STORES", &["on", "off"]),
    );
}

#[test]
fn collectives_run_on_the_group_worker_while_evaluation_goes_on() {
    run_ranks(
        test_name!(),
        2,
        TIMEOUT,
        references::collectives_overlap_local_work,
    );
}

#[test]
fn several_addresses_per_rank_spread_large_collectives_over_several_connections() {
    for (ranks, connections) in [(2, 3), (3, 2)] {
        let launch = Launch {
            connections,
            ..Default::default()
        };
        launch_ranks(test_name!(), ranks, TIMEOUT, &launch, |group| {
            references::sums_over_several_connections(group.unwrap())
        });
        if nuvec_test_support::ranks::is_child() {
            return;
        }
    }
}

/// Exact integer sums of several chunks, and a gather, on `group`.
fn several_chunk_sums_are_exact(group: Group) {
    let (rank, size) = (group.rank() as i32, group.size() as i32);
    let n = (3 << 20) + 3;
    let x = ops::arange(0.0, n as f64, 1.0, DType::I32) + rank;
    let sum = distributed::all_sum(&x, Some(&group))
        .to_vec::<i32>()
        .unwrap();
    let offset: i32 = (0..size).sum();
    assert!(sum
        .iter()
        .enumerate()
        .all(|(i, &v)| v == size * i as i32 + offset));
    let ranks = distributed::all_gather(&array![rank], Some(&group));
    assert_eq!(
        ranks.to_vec::<i32>().unwrap(),
        (0..size).collect::<Vec<_>>()
    );
}

#[test]
fn every_read_polling_mode_gives_the_same_results() {
    launch_with_each(
        test_name!(),
        3,
        ("NUVEC_RING_POLL", &["off", "yield", "spin", "auto"]),
        |group, _| several_chunk_sums_are_exact(group),
    );
}

/// Floats whose sums depend on the order of the additions, different on every rank.
fn uneven_floats(rank: usize, elements: i32) -> Array {
    let base = ops::arange(0.0, f64::from(elements), 1.0, DType::F32);
    ops::sin(&(base * (0.37 * (rank + 1) as f32))) * 1000.0 + 1e-3 * rank as f32
}

/// Sums on 3 and 4 ranks of one machine add the parts in rank order (in every rank's
/// mailbox, or in rank 0's on the path through it): every rank gets the bits of the local
/// fold ((x0 + x1) + x2) + x3, at sizes on every small path (the largest folded by blocks),
/// and again on a rerun; `sum_scatter` gives this rank's rows of the same fold.
fn small_float_sums_match_the_rank_order_fold(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    let largest = if size.is_power_of_two() { 4096 } else { 16384 };
    for elements in [size as i32, 1000, largest, 100_003] {
        let fold = (1..size)
            .fold(uneven_floats(0, elements), |acc, r| {
                acc + uneven_floats(r, elements)
            })
            .to_vec::<f32>()
            .unwrap();
        let mine = uneven_floats(rank, elements);
        let rows = elements as usize / size;
        let scattered = ops::slice(&mine, &[0], &[(rows * size) as i32], &[1]);
        for (how, sum, expected) in [
            (
                "all_sum",
                distributed::all_sum(&mine, Some(&group)),
                &fold[..],
            ),
            (
                "rerun",
                distributed::all_sum(&mine, Some(&group)),
                &fold[..],
            ),
            (
                "sum_scatter",
                distributed::sum_scatter(&scattered, Some(&group)),
                &fold[rank * rows..(rank + 1) * rows],
            ),
        ] {
            let sum = sum.to_vec::<f32>().unwrap();
            assert_eq!(sum.len(), expected.len(), "{how} of {elements} floats");
            let differ = sum
                .iter()
                .zip(expected)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differ, 0,
                "{how} of {elements} floats on rank {rank} of {size}: {differ} values differ"
            );
        }
    }
}

#[test]
fn small_float_sums_on_3_ranks_equal_the_rank_order_fold_bitwise() {
    run_ranks(
        test_name!(),
        3,
        TIMEOUT,
        small_float_sums_match_the_rank_order_fold,
    );
}

#[test]
fn small_float_sums_on_4_ranks_equal_the_rank_order_fold_bitwise() {
    run_ranks(
        test_name!(),
        4,
        TIMEOUT,
        small_float_sums_match_the_rank_order_fold,
    );
}
