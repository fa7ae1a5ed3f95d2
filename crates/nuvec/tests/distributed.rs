//! Multi-rank tests of the ring backend: each test starts N processes of this binary on
//! loopback with the environment `mlx.launch` writes, and checks the collectives against
//! references computed locally.

use nuvec::distributed::{self, Group};
use nuvec::prelude::*;
use nuvec_test_support::ranks::{launch_ranks, run_ranks, Launch};

mod common;
use common::collectives::{self, check_collectives};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn collectives_match_local_references_on_2_ranks() {
    run_ranks(
        "collectives_match_local_references_on_2_ranks",
        2,
        TIMEOUT,
        check_collectives,
    );
}

#[test]
fn collectives_match_local_references_on_3_ranks() {
    run_ranks(
        "collectives_match_local_references_on_3_ranks",
        3,
        TIMEOUT,
        check_collectives,
    );
}

#[test]
fn collectives_match_local_references_on_4_ranks() {
    run_ranks(
        "collectives_match_local_references_on_4_ranks",
        4,
        TIMEOUT,
        check_collectives,
    );
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
        "large_float_sums_agree_bitwise_on_every_rank_and_rerun",
        3,
        TIMEOUT,
        collectives::large_float_sums_agree_bitwise,
    );
}

#[test]
fn send_and_recv_work_between_neighbours_and_non_neighbours() {
    run_ranks(
        "send_and_recv_work_between_neighbours_and_non_neighbours",
        4,
        TIMEOUT,
        collectives::send_and_recv_everywhere,
    );
}

/// Elements of a large message (over the 32 MiB from which messages travel in two halves).
const LARGE_MESSAGE: usize = (64 << 20) / 4 + 3;

/// Element `i`'s value in a test message: varied enough that a half (or a piece) out of
/// place shows, and exact in `f32`.
fn message_value(i: usize, shift: f32) -> f32 {
    ((i * 7919) % 1_000_003) as f32 + shift
}

fn message(elements: usize, shift: f32) -> Array {
    let values: Vec<f32> = (0..elements).map(|i| message_value(i, shift)).collect();
    Array::from_slice(&values, &[elements as i32])
}

fn is_message(got: &Array, elements: usize, shift: f32) -> bool {
    let values = got.to_vec::<f32>().unwrap();
    values.len() == elements
        && values
            .iter()
            .enumerate()
            .all(|(i, &v)| v == message_value(i, shift))
}

fn large_message(shift: f32) -> Array {
    message(LARGE_MESSAGE, shift)
}

fn is_large_message(got: &Array, shift: f32) -> bool {
    is_message(got, LARGE_MESSAGE, shift)
}

#[test]
fn messages_written_in_two_pieces_arrive_whole_and_in_order() {
    // Payloads from 48 to 96 KiB are written in two halves, one after the other; the sizes
    // straddle both ends of that range, and an odd element count splits unevenly.
    const ELEMENTS: [usize; 6] = [
        12 * 1024 - 1,
        12 * 1024,
        16 * 1024 + 1,
        24 * 1024,
        24 * 1024 + 1,
        8,
    ];
    run_ranks(
        "messages_written_in_two_pieces_arrive_whole_and_in_order",
        2,
        TIMEOUT,
        |group| {
            let (me, other) = (group.rank(), 1 - group.rank());
            for (k, &elements) in ELEMENTS.iter().enumerate() {
                let shift = (2 * k + me) as f32;
                let sent = distributed::send(&message(elements, shift), other, Some(&group));
                let got = distributed::recv_like(&message(elements, 0.0), other, Some(&group));
                if me == 0 {
                    sent.check().unwrap();
                    got.eval().unwrap();
                } else {
                    got.eval().unwrap();
                    sent.check().unwrap();
                }
                assert!(
                    is_message(&got, elements, (2 * k + other) as f32),
                    "message {k} of {elements} elements from rank {other}"
                );
            }
        },
    );
}

#[test]
fn messages_of_64_mib_and_more_arrive_whole_both_ways() {
    // Such messages travel in two halves on two connections at once.
    run_ranks(
        "messages_of_64_mib_and_more_arrive_whole_both_ways",
        2,
        TIMEOUT,
        |group| {
            if group.rank() == 0 {
                distributed::send(&large_message(1.0), 1, Some(&group))
                    .check()
                    .unwrap();
                let back = distributed::recv_like(&large_message(0.0), 1, Some(&group));
                assert!(is_large_message(&back, 2.0));
            } else {
                let got = distributed::recv_like(&large_message(0.0), 0, Some(&group));
                assert!(is_large_message(&got, 1.0));
                distributed::send(&(&got + 1.0f32), 0, Some(&group))
                    .check()
                    .unwrap();
            }
            // The group goes on: a small sum after the large messages.
            let sum = distributed::all_sum(&array![1.0f32], Some(&group));
            assert_eq!(sum.to_vec::<f32>().unwrap(), vec![2.0]);
        },
    );
}

#[test]
fn messages_of_every_size_arrive_whole_over_tcp_and_through_shared_memory() {
    // With NUVEC_RING_SHARED_MEMORY=off every payload goes on TCP (whole, in two pieces, in
    // two halves on two connections); with auto, those of 32 KiB and more between ranks on
    // one machine go through shared memory. Element counts straddle the thresholds.
    const ELEMENTS: [usize; 6] = [
        1000,
        8 * 1024 - 1,
        8 * 1024,
        16 * 1024 + 1,
        1 << 18,
        (33 << 20) / 4 + 3,
    ];
    launch_with_each(
        "messages_of_every_size_arrive_whole_over_tcp_and_through_shared_memory",
        2,
        ("NUVEC_RING_SHARED_MEMORY", &["off", "auto"]),
        |group, mode| {
            let (me, other) = (group.rank(), 1 - group.rank());
            for (k, &elements) in ELEMENTS.iter().enumerate() {
                // Rank 0 sends first, then rank 1 answers with its own message.
                if me == 0 {
                    let shift = (2 * k) as f32;
                    distributed::send(&message(elements, shift), other, Some(&group))
                        .check()
                        .unwrap();
                }
                let got = distributed::recv_like(&message(elements, 0.0), other, Some(&group));
                got.eval().unwrap();
                assert!(
                    is_message(&got, elements, (2 * k + other) as f32),
                    "{mode}: message {k} of {elements} elements from rank {other}"
                );
                if me == 1 {
                    let shift = (2 * k + 1) as f32;
                    distributed::send(&message(elements, shift), other, Some(&group))
                        .check()
                        .unwrap();
                }
            }
        },
    );
}

/// Sizes of ring collectives, in floats: just past the small paths (64 KB), 1.5 MB (chunks
/// of 512 KiB, several slots each), and 4 MB and a little (chunks of 128 KiB; on 3 ranks or
/// more, two lanes, one each way round). All are odd, so segments differ by an element.
const RING_ELEMENTS: [i32; 3] = [16_411, 393_219, (1 << 20) + 5];

/// Every ring collective at [`RING_ELEMENTS`] against references computed locally (small
/// integers, so every order of addition gives the same bits).
fn ring_collectives_match_references(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    let n = size as i32;
    let floats = |a: &Array| a.to_vec::<f32>().unwrap();
    for elements in RING_ELEMENTS {
        let what = format!("{elements} floats on {size} ranks, rank {rank}");
        let shape = [elements];
        let x = collectives::input(rank, &shape, DType::F32);
        let sum = collectives::reference(size, &shape, DType::F32, collectives::sum_with_bool_or);
        let got = distributed::all_sum(&x, Some(&group));
        assert!(floats(&got) == floats(&sum), "all_sum of {what}");
        let max = collectives::reference(size, &shape, DType::F32, collectives::max_of);
        let got = distributed::all_max(&x, Some(&group));
        assert!(floats(&got) == floats(&max), "all_max of {what}");
        let x16 = collectives::input(rank, &shape, DType::BF16);
        let sum16 =
            collectives::reference(size, &shape, DType::BF16, collectives::sum_with_bool_or);
        let got = distributed::all_sum(&x16, Some(&group));
        assert!(
            floats(&got.astype(DType::F32)) == floats(&sum16.astype(DType::F32)),
            "bf16 all_sum of {what}"
        );
        let gathered = distributed::all_gather(&x, Some(&group));
        let parts: Vec<Array> = (0..size)
            .map(|r| collectives::input(r, &shape, DType::F32))
            .collect();
        let all = ops::concatenate(&parts, 0);
        assert!(floats(&gathered) == floats(&all), "all_gather of {what}");
        // sum_scatter of n blocks of `elements` floats: this rank's block of the total.
        let wide = [n * elements];
        let x = collectives::input(rank, &wide, DType::F32);
        let total = collectives::reference(size, &wide, DType::F32, collectives::sum_with_bool_or);
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
    ring_collectives_over_tcp_and_shared_memory(
        "ring_collectives_on_2_ranks_match_references_over_tcp_and_shared_memory",
        2,
    );
}

#[test]
fn ring_collectives_on_3_ranks_match_references_over_tcp_and_shared_memory() {
    ring_collectives_over_tcp_and_shared_memory(
        "ring_collectives_on_3_ranks_match_references_over_tcp_and_shared_memory",
        3,
    );
}

#[test]
fn ring_collectives_on_4_ranks_match_references_over_tcp_and_shared_memory() {
    ring_collectives_over_tcp_and_shared_memory(
        "ring_collectives_on_4_ranks_match_references_over_tcp_and_shared_memory",
        4,
    );
}

#[test]
fn ring_collectives_match_references_with_streaming_and_with_plain_stores() {
    ring_collectives_under_each(
        "ring_collectives_match_references_with_streaming_and_with_plain_stores",
        3,
        ("NUVEC_RING_STREAMING_STORES", &["on", "off"]),
    );
}

#[test]
fn init_refuses_an_unknown_choice_of_stores() {
    init_refuses(
        "init_refuses_an_unknown_choice_of_stores",
        ("NUVEC_RING_STREAMING_STORES", "always"),
    );
}

#[test]
fn init_refuses_an_unknown_shared_memory_choice() {
    init_refuses(
        "init_refuses_an_unknown_shared_memory_choice",
        ("NUVEC_RING_SHARED_MEMORY", "maybe"),
    );
}

#[test]
fn messages_of_16_mib_arrive_whole_in_both_ways_of_sending_them() {
    // From 16 MiB a sender times its first payloads sent in pieces and whole, alternating,
    // then keeps the faster way (ring/send_pieces.rs): eleven payloads decide, so thirteen cover
    // both ways and the one kept.
    // Both ways are TCP's: shared memory is turned off.
    const ELEMENTS: usize = (16 << 20) / 4 + 1;
    let launch = Launch {
        env: vec![("NUVEC_RING_SHARED_MEMORY".into(), "off".into())],
        ..Default::default()
    };
    launch_ranks(
        "messages_of_16_mib_arrive_whole_in_both_ways_of_sending_them",
        2,
        TIMEOUT,
        &launch,
        |group| {
            let group = group.unwrap();
            for k in 0..13 {
                let shift = k as f32;
                if group.rank() == 0 {
                    distributed::send(&message(ELEMENTS, shift), 1, Some(&group))
                        .check()
                        .unwrap();
                } else {
                    let got = distributed::recv_like(&message(ELEMENTS, 0.0), 0, Some(&group));
                    assert!(is_message(&got, ELEMENTS, shift), "message {k}");
                }
            }
        },
    );
}

#[test]
fn a_large_message_of_another_shape_is_refused_and_the_next_one_arrives() {
    // Over TCP (in two halves) and through shared memory.
    launch_with_each(
        "a_large_message_of_another_shape_is_refused_and_the_next_one_arrives",
        2,
        ("NUVEC_RING_SHARED_MEMORY", &["off", "auto"]),
        |group, _| refused_large_message_then_next(group),
    );
}

fn refused_large_message_then_next(group: Group) {
    let small = array![5.0f32, 6.0];
    if group.rank() == 0 {
        distributed::send(&large_message(0.0), 1, Some(&group))
            .check()
            .unwrap();
        distributed::send(&small, 1, Some(&group)).check().unwrap();
        distributed::send(&large_message(3.0), 1, Some(&group))
            .check()
            .unwrap();
    } else {
        let wrong = ops::zeros(&[LARGE_MESSAGE as i32 - 1], DType::F32);
        let error = distributed::recv_like(&wrong, 0, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("[recv] rank 0:")
                && error.contains(&format!("[{LARGE_MESSAGE}]"))
                && error.contains("expected"),
            "{error}"
        );
        let next = distributed::recv_like(&small, 0, Some(&group));
        assert_eq!(next.to_vec::<f32>().unwrap(), vec![5.0, 6.0]);
        // All of the refused message was drained: the next large one is whole.
        let large = distributed::recv_like(&large_message(0.0), 0, Some(&group));
        assert!(is_large_message(&large, 3.0));
    }
}

#[test]
fn mismatched_calls_give_errors_naming_both_sides() {
    run_ranks(
        "mismatched_calls_give_errors_naming_both_sides",
        2,
        TIMEOUT,
        collectives::mismatched_calls_give_errors,
    );
}

#[test]
fn send_batches_under_vmap_and_refuses_grad_and_jvp() {
    run_ranks(
        "send_batches_under_vmap_and_refuses_grad_and_jvp",
        2,
        TIMEOUT,
        collectives::send_under_transforms,
    );
}

#[test]
fn collectives_run_on_the_group_worker_while_evaluation_goes_on() {
    run_ranks(
        "collectives_run_on_the_group_worker_while_evaluation_goes_on",
        2,
        TIMEOUT,
        collectives::collectives_overlap_local_work,
    );
}

#[test]
fn several_addresses_per_rank_spread_large_collectives_over_several_connections() {
    for (ranks, connections) in [(2, 3), (3, 2)] {
        let launch = Launch {
            connections,
            ..Default::default()
        };
        launch_ranks(
            "several_addresses_per_rank_spread_large_collectives_over_several_connections",
            ranks,
            TIMEOUT,
            &launch,
            |group| collectives::sums_over_several_connections(group.unwrap()),
        );
        if nuvec_test_support::ranks::is_child() {
            return;
        }
    }
}

#[test]
fn init_without_environment_is_a_group_of_one_or_a_clear_error() {
    if nuvec_test_support::ranks::is_child() {
        return;
    }
    // This process has no launch environment (tests never set it on themselves).
    assert!(std::env::var_os("MLX_HOSTFILE").is_none());
    let group = distributed::init(false).unwrap();
    assert_eq!((group.rank(), group.size()), (0, 1));
    let error = distributed::init(true).unwrap_err().to_string();
    assert!(
        error.contains("MLX_HOSTFILE") && error.contains("MLX_RANK"),
        "{error}"
    );
    assert!(distributed::is_available(distributed::Backend::Ring));
    if std::env::var_os("NUVEC_REQUIRE_VERBS").is_some() {
        // The tests build JACCL, and CI installs the verbs library it loads.
        assert!(distributed::is_available(distributed::Backend::Jaccl));
    }
    let jaccl = distributed::init_backend(true, distributed::Backend::Jaccl)
        .unwrap_err()
        .to_string();
    assert!(
        jaccl.contains("jaccl")
            && jaccl.contains("MLX_IBV_DEVICES")
            && jaccl.contains("nuvec launch --backend jaccl"),
        "{jaccl}"
    );
    assert_eq!(
        distributed::init_backend(false, distributed::Backend::Jaccl)
            .unwrap()
            .size(),
        1,
        "not strict: the group of this process alone"
    );
}

#[test]
fn init_with_forms_a_group_from_addresses_in_code() {
    let ports = nuvec_test_support::ranks::free_ports(2);
    let nodes: Vec<Vec<String>> = ports
        .iter()
        .map(|p| vec![format!("127.0.0.1:{p}")])
        .collect();
    let options = distributed::Options::with_timeout(Duration::from_secs(20));
    let handles: Vec<_> = (0..2)
        .map(|rank| {
            let (nodes, options) = (nodes.clone(), options.clone());
            std::thread::spawn(move || {
                let group =
                    distributed::init_with(&nodes, rank, &options).expect("forming the group");
                // Nobody can close before the all_sum below, so the probe sees open peers.
                group.health().expect("a freshly formed group is healthy");
                let total = distributed::all_sum(&array![1.0, 2.0], Some(&group))
                    .to_vec::<f32>()
                    .unwrap();
                group.close();
                let closed = distributed::all_sum(&array![1.0], Some(&group))
                    .check()
                    .unwrap_err()
                    .to_string();
                (total, closed)
            })
        })
        .collect();
    for handle in handles {
        let (total, closed) = handle.join().expect("rank thread");
        assert_eq!(total, [2.0, 4.0]);
        assert!(closed.contains("closed"), "{closed}");
    }
}

#[test]
fn the_hello_distributed_example_runs_on_4_ranks() {
    let example = nuvec_test_support::ranks::example("hello_distributed");
    let ports = nuvec_test_support::ranks::free_ports(4);
    let hostfile = nuvec_test_support::ranks::write_hostfile(&ports);
    let children: Vec<_> = (0..4)
        .map(|rank| {
            let mut command = std::process::Command::new(&example);
            command
                .env("MLX_RANK", rank.to_string())
                .env("MLX_HOSTFILE", &hostfile)
                .env("NUVEC_DISTRIBUTED_TIMEOUT", "30");
            std::thread::spawn(move || command.output())
        })
        .collect();
    for (rank, child) in children.into_iter().enumerate() {
        let output = child
            .join()
            .expect("rank thread")
            .expect("running the example");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "rank {rank}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(stdout.contains(&format!("rank {rank} of 4")), "{stdout}");
    }
    let _ = std::fs::remove_file(hostfile);
}

#[test]
fn a_peer_that_leaves_fails_pending_collectives_naming_it() {
    run_ranks(
        "a_peer_that_leaves_fails_pending_collectives_naming_it",
        3,
        Duration::from_secs(20),
        |group| {
            let x = ops::ones(&[1 << 16], DType::F32);
            if group.rank() == 2 {
                // Leaving the group closes this rank's connections, as an exiting process does.
                group.close();
                return;
            }
            let start = std::time::Instant::now();
            let error = distributed::all_sum(&x, Some(&group))
                .check()
                .unwrap_err()
                .to_string();
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the failure took {:?}",
                start.elapsed()
            );
            assert!(
                error.contains("all_sum") && error.contains("rank "),
                "{error}"
            );
            if group.rank() == 0 {
                // Rank 0 reads from rank 2, the one that left.
                assert!(error.contains("rank 2"), "{error}");
            }
            let later = distributed::all_gather(&x, Some(&group))
                .check()
                .unwrap_err()
                .to_string();
            assert!(later.contains("failed earlier"), "{later}");
            assert!(group.health().is_err());
        },
    );
}

/// Rank 1 of 2 is busy elsewhere for longer than the group's timeout (2 s) before an
/// `all_sum` of `elements` floats: rank 0 times out, naming it, after about the timeout.
fn a_stalled_peer_is_named(test: &str, elements: i32) {
    run_ranks(test, 2, Duration::from_secs(2), |group| {
        let x = ops::ones(&[elements], DType::F32);
        if group.rank() == 1 {
            // Busy elsewhere for longer than the timeout, then too late.
            std::thread::sleep(Duration::from_secs(8));
            assert!(distributed::all_sum(&x, Some(&group)).check().is_err());
            return;
        }
        let start = std::time::Instant::now();
        let error = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        let waited = start.elapsed();
        assert!(
            error.contains("rank 1") && error.contains("timed out"),
            "{error}"
        );
        assert!(
            waited >= Duration::from_millis(1900) && waited < Duration::from_secs(7),
            "waited {waited:?}"
        );
    });
}

#[test]
fn a_stalled_peer_times_out_with_an_error_naming_it() {
    a_stalled_peer_is_named("a_stalled_peer_times_out_with_an_error_naming_it", 16);
}

#[test]
fn a_stalled_peer_in_a_ring_sum_times_out_naming_it() {
    a_stalled_peer_is_named("a_stalled_peer_in_a_ring_sum_times_out_naming_it", 1 << 18);
}

/// MLX's own launcher, from `NUVEC_MLX_LAUNCH` or the workspace's `.venv-mlx` (which
/// `cargo xtask golden` and CI create with `pip install "mlx[cpu]==0.32.4"`).
fn mlx_launch() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("NUVEC_MLX_LAUNCH") {
        return Some(path.into());
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join(".venv-mlx/bin/mlx.launch");
    venv.exists().then_some(venv)
}

#[test]
fn programs_started_by_mlx_launch_form_a_group() {
    let Some(launcher) = mlx_launch() else {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_MLX_LAUNCH").is_none(),
            "NUVEC_REQUIRE_MLX_LAUNCH is set but mlx.launch was not found"
        );
        eprintln!("skipped: mlx.launch not found (pip install \"mlx[cpu]==0.32.4\" into .venv-mlx, or set NUVEC_MLX_LAUNCH)");
        return;
    };
    let example = nuvec_test_support::ranks::example("hello_distributed");
    for ranks in [2, 4] {
        let output = std::process::Command::new(&launcher)
            .args(["--backend", "ring", "-n", &ranks.to_string(), "--"])
            .arg(&example)
            .env("NUVEC_DISTRIBUTED_TIMEOUT", "30")
            .output()
            .expect("running mlx.launch");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        for rank in 0..ranks {
            let line = format!(
                "rank {rank} of {ranks}: all_sum = array([{ranks}, {}, {}], dtype=float32)",
                2 * ranks,
                3 * ranks
            );
            assert!(
                stdout.contains(&line),
                "mlx.launch -n {ranks}: no {line:?} in\n{stdout}\n{stderr}"
            );
        }
    }
}

#[test]
fn gradients_flow_through_collectives_with_mlx_rules() {
    run_ranks(
        "gradients_flow_through_collectives_with_mlx_rules",
        2,
        TIMEOUT,
        collectives::gradients_follow_mlx_rules,
    );
}

#[test]
fn vmap_through_collectives_equals_collectives_of_slices() {
    run_ranks(
        "vmap_through_collectives_equals_collectives_of_slices",
        3,
        TIMEOUT,
        collectives::vmap_through_collectives,
    );
}

#[test]
fn compiled_collectives_communicate_on_every_call() {
    run_ranks(
        "compiled_collectives_communicate_on_every_call",
        2,
        TIMEOUT,
        collectives::compiled_collectives_communicate_every_call,
    );
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
        "every_read_polling_mode_gives_the_same_results",
        3,
        ("NUVEC_RING_POLL", &["off", "yield", "spin", "auto"]),
        |group, _| several_chunk_sums_are_exact(group),
    );
}

#[test]
fn init_refuses_an_unknown_read_polling_mode() {
    init_refuses(
        "init_refuses_an_unknown_read_polling_mode",
        ("NUVEC_RING_POLL", "busy"),
    );
}

/// Runs `body` on `n` ranks once for each value of the environment variable `variable`;
/// `body` gets the group and the value its rank runs under.
fn launch_with_each(
    test: &str,
    n: usize,
    (variable, values): (&str, &[&str]),
    body: impl Fn(Group, &str),
) {
    for value in values {
        let launch = Launch {
            env: vec![(variable.into(), (*value).into())],
            ..Default::default()
        };
        launch_ranks(test, n, TIMEOUT, &launch, |group| {
            // A rank is one launch: its own environment says which value it runs under.
            let value = std::env::var(variable).unwrap_or_default();
            body(group.unwrap(), &value)
        });
        if nuvec_test_support::ranks::is_child() {
            return;
        }
    }
}

/// `init` with `variable` set to the unknown `value` fails on every rank of 2, naming both.
fn init_refuses(test: &str, (variable, value): (&str, &str)) {
    let launch = Launch {
        env: vec![(variable.into(), value.into())],
        ..Default::default()
    };
    launch_ranks(test, 2, TIMEOUT, &launch, |group| {
        let error = group.unwrap_err().to_string();
        assert!(
            error.contains(variable) && error.contains(&format!("{value:?}")),
            "{error}"
        );
    });
}

/// Floats whose sums depend on the order of the additions, different on every rank.
fn uneven_floats(rank: usize, elements: i32) -> Array {
    let base = ops::arange(0.0, f64::from(elements), 1.0, DType::F32);
    ops::sin(&(base * (0.37 * (rank + 1) as f32))) * 1000.0 + 1e-3 * rank as f32
}

/// Small sums on 3 and 4 ranks go through rank 0, which adds the parts in rank order: every
/// rank gets the bits of the local fold ((x0 + x1) + x2) + x3, at every size up to the path's
/// limit (16 KiB on a power-of-two group, 64 KiB otherwise), and again on a rerun;
/// `sum_scatter` gives this rank's rows of the same fold.
fn small_float_sums_match_the_rank_order_fold(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    let largest = if size.is_power_of_two() { 4096 } else { 16384 };
    for elements in [size as i32, 1000, largest] {
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
        "small_float_sums_on_3_ranks_equal_the_rank_order_fold_bitwise",
        3,
        TIMEOUT,
        small_float_sums_match_the_rank_order_fold,
    );
}

#[test]
fn small_float_sums_on_4_ranks_equal_the_rank_order_fold_bitwise() {
    run_ranks(
        "small_float_sums_on_4_ranks_equal_the_rank_order_fold_bitwise",
        4,
        TIMEOUT,
        small_float_sums_match_the_rank_order_fold,
    );
}

/// Rank 3 of 4 calls `all_max` of `elements` floats where the others call `all_sum`: every
/// rank fails naming both calls and rank 3, and the group refuses further work.
fn mismatched_reductions_fail_everywhere(test: &str, elements: i32) {
    run_ranks(test, 4, TIMEOUT, |group| {
        let x = ops::ones(&[elements], DType::F32);
        let result = if group.rank() == 3 {
            distributed::all_max(&x, Some(&group))
        } else {
            distributed::all_sum(&x, Some(&group))
        };
        let error = result.check().unwrap_err().to_string();
        assert!(
            error.contains("all_sum") && error.contains("all_max") && error.contains("rank 3"),
            "rank {}: {error}",
            group.rank()
        );
        let later = distributed::all_sum(&x, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(later.contains("failed earlier"), "{later}");
    });
}

#[test]
fn mismatched_small_reductions_on_4_ranks_fail_everywhere_naming_both_calls() {
    mismatched_reductions_fail_everywhere(
        "mismatched_small_reductions_on_4_ranks_fail_everywhere_naming_both_calls",
        8,
    );
}

#[test]
fn mismatched_ring_reductions_on_4_ranks_fail_everywhere_naming_both_calls() {
    // 1 MB: the ring, its chunks through shared memory.
    mismatched_reductions_fail_everywhere(
        "mismatched_ring_reductions_on_4_ranks_fail_everywhere_naming_both_calls",
        1 << 18,
    );
}

/// Each rank calls `op` with `elements[rank]` floats, sizes that take different paths
/// (through rank 0 up to 16 or 64 KB, recursive doubling up to 64 KB, the ring above), so
/// ranks wait on connections their peers never write to: every rank fails well before the
/// group timeout (20 s) with an error naming another rank's call.
fn mismatched_sizes_fail_promptly(group: Group, op: &str, elements: &[usize]) {
    let rank = group.rank();
    let x = ops::ones(&[elements[rank] as i32], DType::F32);
    let start = std::time::Instant::now();
    let result = match op {
        "all_sum" => distributed::all_sum(&x, Some(&group)),
        "all_gather" => distributed::all_gather(&x, Some(&group)),
        _ => distributed::sum_scatter(&x, Some(&group)),
    };
    let error = result.check().unwrap_err().to_string();
    let took = start.elapsed();
    let names_another_size = elements
        .iter()
        .filter(|&&e| e != elements[rank])
        .any(|e| error.contains(&format!("{op} of {} bytes", e * 4)));
    assert!(
        took < Duration::from_secs(10),
        "rank {rank}: the failure took {took:?}: {error}"
    );
    assert!(names_another_size, "rank {rank}: {error}");
}

/// Runs [`mismatched_sizes_fail_promptly`] as the test `test`, one rank per entry of
/// `elements`, under a group timeout of 20 s.
fn run_mismatched_sizes(test: &str, op: &'static str, elements: &'static [usize]) {
    let launch = Launch {
        group_timeout: Some(Duration::from_secs(20)),
        ..Launch::default()
    };
    launch_ranks(test, elements.len(), TIMEOUT, &launch, |group| {
        mismatched_sizes_fail_promptly(group.unwrap(), op, elements)
    });
}

#[test]
fn sums_of_sizes_on_different_paths_fail_promptly_on_2_ranks() {
    run_mismatched_sizes(
        "sums_of_sizes_on_different_paths_fail_promptly_on_2_ranks",
        "all_sum",
        &[16, 1 << 18],
    );
}

#[test]
fn sums_of_sizes_on_different_paths_fail_promptly_on_4_ranks() {
    run_mismatched_sizes(
        "sums_of_sizes_on_different_paths_fail_promptly_on_4_ranks",
        "all_sum",
        &[1 << 18, 16, 1 << 18, 1 << 18],
    );
}

#[test]
fn sums_where_rank_0_takes_another_path_fail_promptly_on_4_ranks() {
    run_mismatched_sizes(
        "sums_where_rank_0_takes_another_path_fail_promptly_on_4_ranks",
        "all_sum",
        &[16, 1 << 18, 1 << 18, 1 << 18],
    );
}

#[test]
fn sums_through_rank_0_and_by_doubling_fail_promptly_on_4_ranks() {
    run_mismatched_sizes(
        "sums_through_rank_0_and_by_doubling_fail_promptly_on_4_ranks",
        "all_sum",
        &[16, 16, 8192, 16],
    );
}

#[test]
fn gathers_of_sizes_on_different_paths_fail_promptly_on_3_ranks() {
    run_mismatched_sizes(
        "gathers_of_sizes_on_different_paths_fail_promptly_on_3_ranks",
        "all_gather",
        &[16, 1 << 16, 1 << 16],
    );
}

#[test]
fn scatters_of_sizes_on_different_paths_fail_promptly_on_2_ranks() {
    run_mismatched_sizes(
        "scatters_of_sizes_on_different_paths_fail_promptly_on_2_ranks",
        "sum_scatter",
        &[16, 1 << 18],
    );
}

#[test]
fn a_message_not_yet_received_does_not_fail_a_collective_that_waits() {
    // Rank 2's message to rank 0 waits on a connection rank 0's ring sum never reads, while
    // rank 0 waits long for rank 3 (its left neighbour): the message is no sign of a
    // mismatched call, and rank 0 receives it after the sum.
    run_ranks(
        "a_message_not_yet_received_does_not_fail_a_collective_that_waits",
        4,
        TIMEOUT,
        |group| {
            let rank = group.rank();
            let message = ops::full(&[4], 7.0, DType::F32);
            if rank == 2 {
                distributed::send(&message, 0, Some(&group))
                    .check()
                    .unwrap();
            }
            if rank == 3 {
                std::thread::sleep(Duration::from_millis(300));
            }
            let x = ops::full(&[1 << 16], (rank + 1) as f64, DType::F32);
            let sum = distributed::all_sum(&x, Some(&group))
                .to_vec::<f32>()
                .unwrap();
            assert!(sum.iter().all(|&v| v == 10.0), "rank {rank}");
            if rank == 0 {
                let got = distributed::recv_like(&message, 2, Some(&group));
                assert_eq!(got.to_vec::<f32>().unwrap(), vec![7.0; 4]);
            }
        },
    );
}

/// Rank `leaver` leaves a group of 4 before a small `all_sum`: every other rank's call fails
/// quickly with an error naming it.
fn a_rank_leaving_a_small_sum_is_named(group: Group, leaver: usize) {
    let x = ops::ones(&[16], DType::F32);
    if group.rank() == leaver {
        group.close();
        return;
    }
    let start = std::time::Instant::now();
    let error = distributed::all_sum(&x, Some(&group))
        .check()
        .unwrap_err()
        .to_string();
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "the failure took {:?}",
        start.elapsed()
    );
    assert!(
        error.contains("all_sum") && error.contains(&format!("rank {leaver}")),
        "rank {}: {error}",
        group.rank()
    );
}

#[test]
fn a_rank_leaving_a_small_sum_on_4_ranks_is_named_by_every_other_rank() {
    run_ranks(
        "a_rank_leaving_a_small_sum_on_4_ranks_is_named_by_every_other_rank",
        4,
        Duration::from_secs(20),
        |group| a_rank_leaving_a_small_sum_is_named(group, 3),
    );
}

#[test]
fn rank_0_leaving_a_small_sum_on_4_ranks_is_named_by_every_other_rank() {
    run_ranks(
        "rank_0_leaving_a_small_sum_on_4_ranks_is_named_by_every_other_rank",
        4,
        Duration::from_secs(20),
        |group| a_rank_leaving_a_small_sum_is_named(group, 0),
    );
}
