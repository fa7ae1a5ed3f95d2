//! JACCL on the emulated fabric: each test starts N processes of this binary with the
//! environment `mlx.launch --backend jaccl` writes (a device file, a coordinator, the rank)
//! plus `NUVEC_JACCL_FABRIC=emulated`, and checks the mesh and the ring against references
//! computed locally.

use nuvec::distributed::{self, Group};
use nuvec::prelude::*;
use nuvec_test_support::ranks::{launch_ranks, Jaccl, Launch};
use nuvec_test_support::test_name;
use std::time::{Duration, Instant};

mod common;
use common::collectives::{self, assert_same, input, reference, sum_with_bool_or};

const TIMEOUT: Duration = Duration::from_secs(120);

fn mesh() -> Launch {
    mesh_of(1)
}

fn mesh_of(wires: usize) -> Launch {
    Launch {
        jaccl: Some(Jaccl { ring: false, wires }),
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
fn size_classes(group: Group, dtypes: &[DType]) {
    let (rank, size) = (group.rank(), group.size());
    for &dtype in dtypes {
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

/// Every dtype and odd shapes, then every size class (fewer dtypes on 8 ranks, which share
/// two cores).
fn everything(group: Group) {
    collectives::check_collectives(group);
    if group.size() < 8 {
        size_classes(group, &[DType::F32, DType::BF16, DType::F16, DType::I32]);
    } else {
        size_classes(group, &[DType::F32, DType::BF16]);
    }
}

#[test]
fn mesh_collectives_match_references_on_2_ranks() {
    run(test_name!(), 2, &mesh(), everything);
}

#[test]
fn mesh_collectives_match_references_on_3_ranks_with_4_cables() {
    run(test_name!(), 3, &mesh_of(4), everything);
}

#[test]
fn mesh_collectives_match_references_on_4_ranks_and_send_between_any_pair() {
    run(test_name!(), 4, &mesh(), |group| {
        everything(group);
        collectives::send_and_recv_everywhere(group);
    });
}

#[test]
fn mesh_collectives_match_references_on_8_ranks() {
    run(test_name!(), 8, &mesh(), everything);
}

#[test]
fn large_transfers_on_the_mesh_use_every_cable_of_a_pair() {
    run(test_name!(), 3, &mesh_of(2), |group| {
        let (rank, size) = (group.rank(), group.size());
        // 4 MB: the reduce-scatter and the all-gather both split each peer's share over
        // its two cables.
        let x = ops::full(&[1 << 20], rank as f64, DType::F32);
        let sum = distributed::all_sum(&x, Some(&group))
            .to_vec::<f32>()
            .unwrap();
        assert!(sum.iter().all(|&v| v == 3.0));
        let traffic = group.traffic();
        assert_eq!(traffic.len(), 2 * (size - 1), "{traffic:?}");
        for peer in (0..size).filter(|&p| p != rank) {
            let cables: Vec<_> = traffic.iter().filter(|t| t.peer == peer).collect();
            let names: std::collections::HashSet<_> = cables.iter().map(|t| &t.link).collect();
            assert_eq!((cables.len(), names.len()), (2, 2), "{traffic:?}");
            let sent: u64 = cables.iter().map(|t| t.sent).sum();
            let received: u64 = cables.iter().map(|t| t.received).sum();
            // Each peer gets this rank's third of the input twice (reduce-scatter, gather).
            assert!(sent >= 2 * (4 << 20) / 3 - 16, "{traffic:?}");
            assert!(received >= 2 * (4 << 20) / 3 - 16, "{traffic:?}");
            for cable in cables {
                // Each cable carries about half of what goes to its peer.
                assert!(
                    cable.sent * 5 >= sent * 2 && cable.received * 5 >= received * 2,
                    "cable {} carried {} of {sent} bytes sent, {} of {received} received",
                    cable.link,
                    cable.sent,
                    cable.received
                );
            }
        }
    });
}

#[test]
fn ring_collectives_match_references_on_2_ranks_with_4_cables() {
    run(test_name!(), 2, &ring(4), everything);
}

#[test]
fn ring_collectives_match_references_on_3_ranks_with_1_cable() {
    run(test_name!(), 3, &ring(1), |group| {
        everything(group);
        collectives::send_and_recv_ring(group);
    });
}

#[test]
fn ring_collectives_match_references_on_4_ranks_with_4_cables() {
    run(test_name!(), 4, &ring(4), |group| {
        everything(group);
        collectives::send_and_recv_ring(group);
    });
}

#[test]
fn ring_collectives_match_references_on_8_ranks_with_2_cables() {
    run(test_name!(), 8, &ring(2), everything);
}

#[test]
fn large_float_sums_agree_bitwise_and_rerun_on_the_mesh_and_the_ring() {
    for (ranks, launch) in [(4, mesh_of(2)), (3, ring(4)), (2, ring(1))] {
        launch_ranks(test_name!(), ranks, TIMEOUT, &launch, |group| {
            collectives::large_float_sums_agree_bitwise(group.unwrap())
        });
        if nuvec_test_support::ranks::is_child() {
            return;
        }
    }
}

#[test]
fn mismatched_calls_give_errors_naming_both_sides() {
    run(
        test_name!(),
        2,
        &mesh(),
        collectives::mismatched_calls_give_errors,
    );
}

#[test]
fn the_ring_sends_to_neighbours_only_and_says_so() {
    run(test_name!(), 4, &ring(1), |group| {
        let error = distributed::send(&array![1.0f32], (group.rank() + 2) % 4, Some(&group))
            .check()
            .unwrap_err()
            .to_string();
        assert!(error.contains("neighbours"), "{error}");
        // The refusal does not break the group.
        let sum = distributed::all_sum(&array![1.0f32], Some(&group));
        assert_eq!(sum.to_vec::<f32>().unwrap(), [4.0]);
    });
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
    launch_ranks(test_name!(), 2, TIMEOUT, &launch, |group| {
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
    });
}

#[test]
fn a_killed_peer_fails_collectives_naming_it_within_the_timeout() {
    let mut launch = with_group_timeout(mesh(), 3);
    launch.expendable = vec![2];
    launch_ranks(test_name!(), 3, TIMEOUT, &launch, |group| {
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
        // Stay a moment, so the other survivor meets rank 2's absence, not this rank's.
        std::thread::sleep(Duration::from_secs(1));
        assert!(error.contains("rank 2"), "{error}");
        let health = group.health().unwrap_err().to_string();
        assert!(health.contains("rank"), "{health}");
    });
}

/// Polls `group.health()` until it fails (at most 10 s); the error.
fn health_error(group: &Group) -> String {
    let start = Instant::now();
    loop {
        if let Err(error) = group.health() {
            return error.to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "rank {}: no lost peer found in 10 s",
            group.rank()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_rank_finds_a_lost_peer_without_a_collective_even_when_not_cabled_to_it() {
    // On a ring of 4, rank 3 has no cable to rank 1: it learns of rank 1's end through the
    // side channel's notice from rank 0; its neighbours through their queue pairs too.
    let mut launch = ring(1);
    launch.expendable = vec![1];
    launch_ranks(test_name!(), 4, TIMEOUT, &launch, |group| {
        let group = group.unwrap();
        let sum = distributed::all_sum(&array![1.0f32], Some(&group));
        assert_eq!(sum.to_vec::<f32>().unwrap(), [4.0]);
        if group.rank() == 1 {
            std::process::exit(0);
        }
        let error = health_error(&group);
        assert!(error.contains("rank 1 is gone"), "{error}");
        // Stay a moment, so no survivor meets another's exit first.
        std::thread::sleep(Duration::from_secs(1));
    });
}

#[test]
fn a_stalled_peer_times_out_with_an_error_naming_it() {
    let launch = with_group_timeout(mesh(), 2);
    launch_ranks(test_name!(), 2, TIMEOUT, &launch, |group| {
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
    });
}

mod in_process {
    //! Groups formed in code by threads of this process (`jaccl::init_with`).
    use super::*;
    use nuvec_distributed::jaccl::{init_with, Config, Fabric, Options};
    use nuvec_distributed::Address;
    use nuvec_test_support::ranks::free_ports;
    use std::sync::{Arc, Barrier, Mutex};

    const MESH3: &str = r#"[[null, "a", "b"], ["a", null, "c"], ["b", "c", null]]"#;

    fn config(text: &str, rank: usize, port: u16) -> Config {
        let coordinator = Address::parse(&format!("127.0.0.1:{port}")).unwrap();
        Config::parse(text, rank, Some(coordinator), false).unwrap()
    }

    fn options(secret: &str) -> Options {
        Options::default()
            .timeout(Duration::from_secs(3))
            .key(secret)
            .fabric(Fabric::Emulated)
    }

    /// Forms the group of `text` with each rank's options on its own thread; each thread's
    /// outcome, the sum of `[rank + 1]` when the group formed.
    fn form(
        text: &str,
        ranks: usize,
        options: impl Fn(usize) -> Options + Sync,
    ) -> Vec<Result<f32>> {
        let port = free_ports(1)[0];
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..ranks)
                .map(|rank| {
                    let options = &options;
                    scope.spawn(move || {
                        let group = init_with(&config(text, rank, port), &options(rank))?;
                        let sum = distributed::all_sum(&array![rank as f32 + 1.0], Some(&group))
                            .item::<f32>();
                        group.close();
                        sum
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn a_mesh_forms_in_code_with_a_key_and_a_wrong_key_is_refused() {
        let secret = "the shared secret of the tests";
        for outcome in form(MESH3, 3, |_| options(secret)) {
            assert_eq!(outcome.unwrap(), 6.0);
        }
        let outcomes = form(MESH3, 3, |rank| {
            options(if rank == 2 {
                "another secret, quite different"
            } else {
                secret
            })
        });
        let errors: Vec<String> = outcomes
            .into_iter()
            .map(|o| o.unwrap_err().to_string())
            .collect();
        assert!(errors[2].contains("key"), "{}", errors[2]);
        assert!(errors[0].contains("rank 2"), "{}", errors[0]);
        for error in &errors {
            assert!(!error.contains("secret"), "the key leaked: {error}");
        }
    }

    /// An all-gather over shared memory between threads.
    struct Board {
        slots: Mutex<Vec<Vec<u8>>>,
        barrier: Barrier,
    }

    impl Board {
        fn new(size: usize) -> Board {
            Board {
                slots: Mutex::new(vec![Vec::new(); size]),
                barrier: Barrier::new(size),
            }
        }

        fn all_gather(&self, rank: usize, bytes: &[u8]) -> Vec<u8> {
            self.slots.lock().unwrap()[rank] = bytes.to_vec();
            self.barrier.wait();
            let all = self.slots.lock().unwrap().concat();
            // Nobody writes the next round before everyone has read this one.
            self.barrier.wait();
            all
        }
    }

    #[test]
    fn a_callers_side_channel_replaces_the_coordinator() {
        let board = Arc::new(Board::new(2));
        let ring2 = r#"[[null, ["x", "y"]], [["x", "y"], null]]"#;
        let outcomes: Vec<Result<f32>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|rank| {
                    let board = board.clone();
                    scope.spawn(move || {
                        let config = Config::parse(ring2, rank, None, true).unwrap();
                        let options = Options::default()
                            .timeout(Duration::from_secs(5))
                            .fabric(Fabric::Emulated)
                            .side_channel(move |bytes: &[u8]| Ok(board.all_gather(rank, bytes)));
                        let group = init_with(&config, &options)?;
                        group.health()?;
                        let x = ops::full(&[1 << 18], rank as f64 + 1.0, DType::F32);
                        let sum = distributed::all_sum(&x, Some(&group))
                            .max(None, false)
                            .item::<f32>();
                        group.close();
                        assert!(group.health().is_err(), "a closed group is not healthy");
                        sum
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for outcome in outcomes {
            assert_eq!(outcome.unwrap(), 3.0);
        }
    }

    #[test]
    fn with_a_callers_side_channel_every_rank_finds_a_closed_peer() {
        let board = Arc::new(Board::new(3));
        let done = Arc::new(Barrier::new(3));
        let errors: Vec<Option<String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..3)
                .map(|rank| {
                    let (board, done) = (board.clone(), done.clone());
                    scope.spawn(move || {
                        let config = Config::parse(MESH3, rank, None, true).unwrap();
                        let options = Options::default()
                            .timeout(Duration::from_secs(5))
                            .fabric(Fabric::Emulated)
                            .side_channel(move |bytes: &[u8]| Ok(board.all_gather(rank, bytes)));
                        let group = init_with(&config, &options).unwrap();
                        let sum = distributed::all_sum(&array![1.0f32], Some(&group));
                        assert_eq!(sum.item::<f32>().unwrap(), 3.0);
                        let error = if rank == 2 {
                            group.close();
                            None
                        } else {
                            Some(health_error(&group))
                        };
                        done.wait();
                        group.close();
                        error
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for error in errors.into_iter().flatten() {
            assert!(error.contains("rank 2 is gone"), "{error}");
        }
    }

    #[test]
    fn the_verbs_fabric_names_a_device_this_machine_lacks() {
        let port = free_ports(1)[0];
        let options = Options::default()
            .timeout(Duration::from_secs(2))
            .fabric(Fabric::Verbs);
        let error = init_with(&config(MESH3, 0, port), &options)
            .unwrap_err()
            .to_string();
        // Without the library: says so and points at the emulated fabric; with it: names the
        // device and lists the ones this machine has.
        assert!(
            error.contains("NUVEC_JACCL_FABRIC=emulated")
                || error.contains("ibverbs device a: no such device"),
            "{error}"
        );
    }
}

/// Runs example `name` on 4 local ranks through `nuvec launch --backend jaccl` (which gives
/// them the emulated fabric) with `extra` launcher arguments; its success and output.
fn launch_example_with(name: &str, extra: &[&str]) -> (bool, String) {
    let nuvec = nuvec_test_support::ranks::binary_of("nuvec-cli", "nuvec");
    let example = nuvec_test_support::ranks::example(name);
    let port = nuvec_test_support::ranks::free_port_range(1);
    let output = std::process::Command::new(nuvec)
        .args([
            "launch",
            "--backend",
            "jaccl",
            "-n",
            "4",
            "-p",
            &port.to_string(),
        ])
        .args(extra)
        .arg("--")
        .arg(example)
        .output()
        .expect("running nuvec launch");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn launch_example(name: &str) -> String {
    let (ok, out) = launch_example_with(name, &[]);
    assert!(ok, "{name}: {out}");
    out
}

#[test]
fn the_spec_example_and_the_demo_run_under_nuvec_launch_backend_jaccl() {
    let out = launch_example("hello_distributed");
    for rank in 0..4 {
        assert!(out.contains(&format!("rank {rank} of 4")), "{out}");
    }
    let out = launch_example("distributed_demo");
    for rank in 0..4 {
        assert!(
            out.contains(&format!(
                "rank {rank}/4: all_sum, all_gather, sum_scatter and send/recv agree"
            )),
            "{out}"
        );
    }
    // The ranks really run over JACCL: a packet lost on the emulated fabric fails the demo.
    let (ok, out) = launch_example_with(
        "distributed_demo",
        &["--env", "NUVEC_JACCL_EMULATED_DROP=1:200"],
    );
    assert!(!ok && out.contains("lost on the link"), "{out}");
}

/// On machines with RDMA hardware: `NUVEC_JACCL_HOSTFILE` names an mlx.launch hostfile whose
/// hosts carry `rdma` rows, and the spec's example runs over the real verbs fabric under
/// `nuvec launch --backend jaccl`. Elsewhere the test says why it skipped (there is no
/// hardware where nuvec is built and tested), after checking what it can: that this machine's
/// device list is readable.
#[test]
fn the_spec_example_runs_over_real_rdma_hardware_when_there_is_some() {
    let devices = nuvec_distributed::jaccl::devices();
    let usable: Vec<String> = devices
        .iter()
        .flatten()
        .filter(|d| d.state == nuvec_distributed::jaccl::PortState::Active && d.ipv4.is_some())
        .map(|d| d.to_string())
        .collect();
    let Some(hostfile) = std::env::var_os("NUVEC_JACCL_HOSTFILE") else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED the JACCL hardware test: NUVEC_JACCL_HOSTFILE is not set (devices here: {:?}; usable: {usable:?})",
            devices.as_ref().map(|d| d.len()).map_err(|e| e.to_string())
        );
        return;
    };
    assert!(!usable.is_empty(), "NUVEC_JACCL_HOSTFILE is set but this machine has no active RDMA device with an IPv4 address: {devices:?}");
    let nuvec = nuvec_test_support::ranks::binary_of("nuvec-cli", "nuvec");
    let example = nuvec_test_support::ranks::example("hello_distributed");
    let output = std::process::Command::new(nuvec)
        .args(["launch", "--backend", "jaccl", "--hostfile"])
        .arg(hostfile)
        .arg("--")
        .arg(example)
        .output()
        .expect("running nuvec launch");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("rank 0 of"), "{stdout}");
}

#[test]
fn broadcast_and_all_to_all_on_the_mesh_match_references_and_differentiate() {
    run(test_name!(), 3, &mesh(), |group| {
        common::broadcast::broadcast_gives_every_rank_the_roots_array(group);
        common::broadcast::broadcast_under_transforms(group);
        common::all_to_all::all_to_all_sends_each_rank_its_blocks(group);
        common::all_to_all::all_to_all_under_transforms(group);
        common::all_to_all::all_to_all_v_sends_rows_by_count(group);
        common::all_to_all::all_to_all_v_moves_regions_of_every_size(group);
    });
}

#[test]
fn broadcast_and_all_to_all_on_the_ring_match_references_and_differentiate() {
    run(test_name!(), 3, &ring(1), |group| {
        common::broadcast::broadcast_gives_every_rank_the_roots_array(group);
        common::broadcast::broadcast_under_transforms(group);
        common::all_to_all::all_to_all_sends_each_rank_its_blocks(group);
        common::all_to_all::all_to_all_under_transforms(group);
        common::all_to_all::all_to_all_v_sends_rows_by_count(group);
        common::all_to_all::all_to_all_v_moves_regions_of_every_size(group);
    });
}

#[test]
fn mesh_groups_split_by_color_and_order_by_key() {
    run(test_name!(), 4, &mesh(), |world| {
        common::split::groups_split_by_color_and_order_by_key(world);
        common::split::a_split_group_runs_beside_its_parent(world);
    });
}

/// Neighbours of a ring form rings of two; ranks that are not cabled to each other cannot
/// form a group, and every rank says so (naming the color) instead of waiting.
#[test]
fn a_ring_splits_into_cabled_neighbours_and_refuses_uncabled_ranks_on_every_rank() {
    run(test_name!(), 4, &ring(2), |world| {
        let rank = world.rank();
        let pair = world.split((rank / 2) as i32, -1).unwrap();
        assert_eq!((pair.rank(), pair.size()), (rank % 2, 2));
        let x = ops::full(&[100_000], (rank + 1) as f64, DType::F32);
        let sum = distributed::all_sum(&x, Some(&pair))
            .to_vec::<f32>()
            .unwrap();
        let want = if rank < 2 { 3.0 } else { 7.0 };
        assert!(sum.iter().all(|&v| v == want), "rank {rank}: {}", sum[0]);
        let traffic = pair.traffic();
        assert_eq!(
            traffic.len(),
            2,
            "two cables to the one neighbour: {traffic:?}"
        );
        assert!(
            traffic.iter().all(|t| t.peer == 1 - rank % 2),
            "{traffic:?}"
        );
        let error = world.split((rank % 2) as i32, -1).unwrap_err().to_string();
        assert!(
            error.contains("[split]") && error.contains("neither a mesh nor a ring"),
            "{error}"
        );
        assert!(error.contains("color 0 ([0, 2]"), "{error}");
        // The failed split left the world as it was.
        let total = distributed::all_sum(&Array::scalar(rank as i32), Some(&world));
        assert_eq!(total.item::<i32>().unwrap(), 6);
    });
}

/// A sub-group learns of a lost rank of its parent through the parent's side channel, even
/// when the rank lost is in another sub-group; the lost rank's partner also through its
/// queue pair.
#[test]
fn a_split_group_finds_a_rank_its_parent_lost() {
    let mut launch = mesh();
    launch.expendable = vec![3];
    launch_ranks(test_name!(), 4, TIMEOUT, &launch, |world| {
        let world = world.unwrap();
        let rank = world.rank();
        let half = world.split((rank / 2) as i32, -1).unwrap();
        let sum = distributed::all_sum(&array![1.0f32], Some(&half));
        assert_eq!(sum.to_vec::<f32>().unwrap(), [2.0]);
        if rank == 3 {
            std::process::exit(0);
        }
        let error = health_error(&half);
        let from_parent =
            error.contains("split from lost a rank") && error.contains("rank 3 is gone");
        // Rank 2 may first see its own queue pair to rank 3 (rank 1 of the half) close.
        let from_pair = rank == 2 && error.contains("rank 1 is gone");
        assert!(from_parent || from_pair, "rank {rank}: {error}");
        std::thread::sleep(Duration::from_secs(1));
    });
}

/// How the odd rank (rank 2 of a mesh of 4) behaves at the group's second collective, in the
/// tests of where every rank is when a collective fails.
#[derive(Clone, Copy)]
enum Fault {
    /// Sleeps past the timeout outside nuvec's calls (its watcher still answers).
    Sleeps,
    /// Stops (SIGSTOP): its watcher stops too.
    Stops,
    /// Calls `all_sum` where the others call `all_gather`.
    CallsAnother,
    /// Its process ends.
    IsKilled,
}

/// Every rank sums once (collective #0), then the others gather 1024 floats (#1) and rank 2
/// does what `fault` says; `check` gets each survivor's error text after "where the ranks
/// are: ".
fn run_fault(test: &str, fault: Fault, check: impl Fn(usize, &str)) {
    let mut launch = with_group_timeout(mesh(), 2);
    launch.expendable = vec![2];
    launch_ranks(test, 4, TIMEOUT, &launch, |group| {
        let group = group.unwrap();
        let rank = group.rank();
        let one = distributed::all_sum(&array![1.0f32], Some(&group));
        one.eval().unwrap();
        let x = ops::ones(&[1024], DType::F32);
        let outcome = match (rank, fault) {
            (2, Fault::Sleeps) => {
                std::thread::sleep(Duration::from_secs(6));
                return;
            }
            (2, Fault::Stops) => {
                let status = std::process::Command::new("kill")
                    .args(["-STOP".to_string(), std::process::id().to_string()])
                    .status()
                    .expect("running kill");
                assert!(status.success());
                unreachable!("a stopped rank is killed by the test, never continued");
            }
            (2, Fault::CallsAnother) => distributed::all_sum(&x, Some(&group)).check(),
            (2, Fault::IsKilled) => std::process::exit(3),
            _ => distributed::all_gather(&x, Some(&group)).check(),
        };
        let error = outcome
            .expect_err("the second collective must fail")
            .to_string();
        let report = error
            .split_once("where the ranks are: ")
            .map_or("", |p| p.1);
        check(rank, report);
        if rank != 2 {
            assert!(
                report.contains("ranks 0, 1 and 3 are in all_gather #1 (float32 [1024], ")
                    && report.contains("jaccl.rs:"),
                "rank {rank}: {error}"
            );
        }
        // Stay a moment, so rank 0 is still there to answer a rank that failed later.
        std::thread::sleep(Duration::from_secs(1));
    });
}

#[test]
fn a_rank_sleeping_outside_the_calls_is_reported_past_its_last_one() {
    run_fault(test_name!(), Fault::Sleeps, |rank, report| {
        assert!(
            report.starts_with("rank 2 is past all_sum #0 (float32 [1], "),
            "rank {rank}: {report}"
        );
    });
}

#[test]
fn a_stopped_rank_is_reported_as_silent() {
    run_fault(test_name!(), Fault::Stops, |rank, report| {
        assert!(
            report.starts_with("rank 2 did not answer within 0.5 s"),
            "rank {rank}: {report}"
        );
    });
}

#[test]
fn a_rank_in_another_collective_is_reported_in_it() {
    run_fault(test_name!(), Fault::CallsAnother, |rank, report| {
        if rank != 2 {
            assert!(
                report.starts_with("rank 2 is in all_sum #1 (float32 [1024], "),
                "rank {rank}: {report}"
            );
        }
    });
}

#[test]
fn a_killed_rank_is_reported_as_gone() {
    run_fault(test_name!(), Fault::IsKilled, |rank, report| {
        assert!(
            report.starts_with("rank 2 left (the connection closed)"),
            "rank {rank}: {report}"
        );
    });
}
