//! Multi-rank tests of the ring backend: each test starts N processes of this binary on
//! loopback with the environment `mlx.launch` writes, and checks the collectives against
//! references computed locally.

use nuvec::distributed::{self, Group};
use nuvec::prelude::*;
use nuvec::with_dtype;
use nuvec_test_support::ranks::run_ranks;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Rank `rank`'s deterministic input of `shape` and `dtype`: small values so sums are exact.
fn input(rank: usize, shape: &[i32], dtype: DType) -> Array {
    let size: i32 = shape.iter().product();
    let base = ops::arange(0.0, f64::from(size), 1.0, DType::I32);
    let values = ops::remainder(&(base * 7 + (rank as i32) * 3), 11);
    let values = if dtype == DType::Bool {
        ops::equal(ops::remainder(&values, 2), 0)
    } else {
        values.astype(dtype)
    };
    ops::reshape(&values, shape)
}

/// The element-wise fold of every rank's input, computed locally.
fn reference(size: usize, shape: &[i32], dtype: DType, fold: fn(&Array, &Array) -> Array) -> Array {
    (1..size).fold(input(0, shape, dtype), |acc, rank| {
        fold(&acc, &input(rank, shape, dtype))
    })
}

/// Bytes of an array, for bitwise comparisons.
fn bits(a: &Array) -> Vec<u8> {
    with_dtype!(a.dtype(), T, {
        let values = a.to_vec::<T>().expect("reading the result");
        values
            .iter()
            .flat_map(|v| format!("{v:?}").into_bytes())
            .collect()
    })
}

#[track_caller]
fn assert_same(actual: &Array, expected: &Array, what: &str) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    assert_eq!(actual.dtype(), expected.dtype(), "{what}: dtype");
    assert_eq!(bits(actual), bits(expected), "{what}: values");
}

fn sum_with_bool_or(a: &Array, b: &Array) -> Array {
    if a.dtype() == DType::Bool {
        ops::logical_or(a, b)
    } else {
        ops::add(a, b).astype(a.dtype())
    }
}

fn max_of(a: &Array, b: &Array) -> Array {
    ops::maximum(a, b)
}

fn min_of(a: &Array, b: &Array) -> Array {
    ops::minimum(a, b)
}

/// Every collective on every dtype and several shapes, against local references.
fn check_collectives(group: Group) {
    let (rank, size) = (group.rank(), group.size());
    let shapes: [&[i32]; 4] = [&[], &[0], &[7, 3], &[5]];
    for dtype in DType::ALL {
        for shape in shapes {
            let x = input(rank, shape, dtype);
            let what = format!("{dtype} {shape:?} on {size} ranks");
            assert_same(
                &distributed::all_sum(&x, Some(&group)),
                &reference(size, shape, dtype, sum_with_bool_or),
                &format!("all_sum {what}"),
            );
            assert_same(
                &distributed::all_max(&x, Some(&group)),
                &reference(size, shape, dtype, max_of),
                &format!("all_max {what}"),
            );
            assert_same(
                &distributed::all_min(&x, Some(&group)),
                &reference(size, shape, dtype, min_of),
                &format!("all_min {what}"),
            );
            let gathered = distributed::all_gather(&x, Some(&group));
            let parts: Vec<Array> = (0..size)
                .map(|r| {
                    ops::reshape(&input(r, shape, dtype), &[-1]).reshape(&gathered_row_shape(shape))
                })
                .collect();
            assert_same(
                &gathered,
                &ops::concatenate(&parts, 0),
                &format!("all_gather {what}"),
            );
        }
        // sum_scatter: the first axis divides by the size.
        let shape = [2 * size as i32, 3];
        let x = input(rank, &shape, dtype);
        let total = reference(size, &shape, dtype, sum_with_bool_or);
        let mine = ops::slice(&total, &[2 * rank as i32], &[2 * rank as i32 + 2], &[1]);
        assert_same(
            &distributed::sum_scatter(&x, Some(&group)),
            &mine,
            &format!("sum_scatter {dtype}"),
        );
    }
}

fn gathered_row_shape(shape: &[i32]) -> Vec<i32> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    }
}

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
        |group| {
            // 16 M floats (64 MB) whose sum depends on the order of additions.
            nuvec::random::seed(group.rank() as u64);
            let x = nuvec::random::normal(&[16 << 20], DType::F32, None);
            let first = distributed::all_sum(&x, Some(&group));
            let second = distributed::all_sum(&x, Some(&group));
            let everyone = distributed::all_gather(&ops::expand_dims(&first, &[0]), Some(&group));
            let rows = ops::split(&everyone, group.size() as i32, 0);
            let mine = first.to_vec::<f32>().unwrap();
            assert_eq!(
                second.to_vec::<f32>().unwrap(),
                mine,
                "a rerun gives the same bits"
            );
            for (rank, row) in rows.iter().enumerate() {
                let theirs = row.reshape(&[-1]).to_vec::<f32>().unwrap();
                assert!(
                    theirs
                        .iter()
                        .zip(&mine)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "rank {rank} got other bits"
                );
            }
            // The values are right (to rounding) against a local sum of every rank's draw.
            let expected = (0..group.size()).fold(ops::zeros(&[16 << 20], DType::F32), |acc, r| {
                nuvec::random::seed(r as u64);
                acc + nuvec::random::normal(&[16 << 20], DType::F32, None)
            });
            let error = ops::abs(&(&first - &expected))
                .max(None, false)
                .item::<f32>()
                .unwrap();
            assert!(error < 1e-5, "largest error {error}");
        },
    );
}

#[test]
fn send_and_recv_work_between_neighbours_and_non_neighbours() {
    run_ranks(
        "send_and_recv_work_between_neighbours_and_non_neighbours",
        4,
        TIMEOUT,
        |group| {
            let rank = group.rank();
            // Every rank sends its rank to every other rank, in rank order.
            for src in 0..4 {
                if src == rank {
                    for dst in (0..4).filter(|&d| d != rank) {
                        let message = ops::full(&[2, 3], (10 * rank + dst) as f64, DType::I64);
                        distributed::send(&message, dst, Some(&group))
                            .eval()
                            .unwrap();
                    }
                } else {
                    let got = distributed::recv(&[2, 3], DType::I64, src, Some(&group));
                    assert_eq!(
                        got.to_vec::<i64>().unwrap(),
                        vec![(10 * src + rank) as i64; 6],
                        "from rank {src}"
                    );
                }
            }
        },
    );
}

#[test]
fn mismatched_calls_give_errors_naming_both_sides() {
    run_ranks(
        "mismatched_calls_give_errors_naming_both_sides",
        2,
        TIMEOUT,
        |group| {
            let rank = group.rank();
            // A receiver expecting another shape gets an error naming both, and the connection
            // stays usable for the next message.
            if rank == 0 {
                distributed::send(&ops::zeros(&[3], DType::F32), 1, Some(&group))
                    .eval()
                    .unwrap();
                distributed::send(&ops::ones(&[2], DType::F32), 1, Some(&group))
                    .eval()
                    .unwrap();
            } else {
                let error = distributed::recv(&[4], DType::F32, 0, Some(&group))
                    .check()
                    .unwrap_err()
                    .to_string();
                assert!(
                    error.contains("rank 0") && error.contains("[3]") && error.contains("[4]"),
                    "{error}"
                );
                let next = distributed::recv(&[2], DType::F32, 0, Some(&group));
                assert_eq!(next.to_vec::<f32>().unwrap(), [1.0, 1.0]);
            }
            // Different collectives on the two ranks: both get an error saying what each called.
            let x = ops::ones(&[8], DType::F32);
            let result = if rank == 0 {
                distributed::all_sum(&x, Some(&group))
            } else {
                distributed::all_gather(&x, Some(&group))
            };
            let error = result.check().unwrap_err().to_string();
            assert!(
                error.contains("all_sum") && error.contains("all_gather"),
                "{error}"
            );
            // The group then refuses further work with that first error.
            let later = distributed::all_sum(&x, Some(&group))
                .check()
                .unwrap_err()
                .to_string();
            assert!(later.contains("failed earlier"), "{later}");
        },
    );
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
    assert!(!distributed::is_available(distributed::Backend::Jaccl));
    let jaccl = distributed::init_backend(true, distributed::Backend::Jaccl)
        .unwrap_err()
        .to_string();
    assert!(
        jaccl.contains("jaccl") && jaccl.contains("not available"),
        "{jaccl}"
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

/// The spec's first example as a program. `cargo test` builds the examples with the tests; a
/// filtered run may not have, so build it then.
fn spec_example() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let example = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples/spec_first_example");
    if !example.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "-p", "nuvec", "--example", "spec_first_example"])
            .status()
            .expect("running cargo");
        assert!(status.success(), "building the example failed");
    }
    assert!(example.exists(), "{} was not built", example.display());
    example
}

#[test]
fn the_spec_first_example_runs_on_4_ranks() {
    let example = spec_example();
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

#[test]
fn a_stalled_peer_times_out_with_an_error_naming_it() {
    run_ranks(
        "a_stalled_peer_times_out_with_an_error_naming_it",
        2,
        Duration::from_secs(2),
        |group| {
            let x = ops::ones(&[16], DType::F32);
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
        },
    );
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
    let example = spec_example();
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
        |group| {
            use nuvec::transforms::grad;
            let rank = group.rank() as f32;
            let x = Array::from_vec(vec![1.0f32 + rank, 2.0 + rank], &[2]);
            let weights = array![3.0, 5.0];
            // all_sum passes the cotangent through: each rank's loss is its own.
            let through_sum = grad(|v: &[Array]| {
                ops::sum(
                    &(distributed::all_sum(&v[0], Some(&group)) * &weights),
                    None,
                    false,
                )
            })(std::slice::from_ref(&x))
            .unwrap();
            assert_eq!(through_sum[0].to_vec::<f32>().unwrap(), [3.0, 5.0]);
            // all_gather: this rank's rows of the cotangent.
            let gather_weights = array![1.0, 2.0, 3.0, 4.0];
            let through_gather = grad(|v: &[Array]| {
                ops::sum(
                    &(distributed::all_gather(&v[0], Some(&group)) * &gather_weights),
                    None,
                    false,
                )
            })(std::slice::from_ref(&x))
            .unwrap();
            let expected: Vec<f32> = if group.rank() == 0 {
                vec![1.0, 2.0]
            } else {
                vec![3.0, 4.0]
            };
            assert_eq!(through_gather[0].to_vec::<f32>().unwrap(), expected);
            // sum_scatter: the cotangent in this rank's rows, zero elsewhere.
            let through_scatter = grad(|v: &[Array]| {
                ops::sum(
                    &(distributed::sum_scatter(&v[0], Some(&group)) * 7.0),
                    None,
                    false,
                )
            })(std::slice::from_ref(&x))
            .unwrap();
            let expected: Vec<f32> = if group.rank() == 0 {
                vec![7.0, 0.0]
            } else {
                vec![0.0, 7.0]
            };
            assert_eq!(through_scatter[0].to_vec::<f32>().unwrap(), expected);
            // sum_gradients: identity forward, all_sum of the cotangent backward.
            let own_weights = Array::from_vec(vec![1.0f32 + rank, 10.0 * (1.0 + rank)], &[2]);
            let through_sum_gradients = grad(|v: &[Array]| {
                ops::sum(
                    &(distributed::sum_gradients(&v[0], Some(&group)) * &own_weights),
                    None,
                    false,
                )
            })(std::slice::from_ref(&x))
            .unwrap();
            assert_eq!(
                through_sum_gradients[0].to_vec::<f32>().unwrap(),
                [3.0, 30.0]
            );
        },
    );
}
