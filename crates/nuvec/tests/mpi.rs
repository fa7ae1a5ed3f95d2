//! The MPI backend under Open MPI's `mpirun`: each test re-runs this binary as N ranks and
//! checks the collectives against the same local references as the ring's tests. Without
//! `mpirun` the tests say they are skipped (CI sets `NUVEC_REQUIRE_MPI`, making that a failure).

use nuvec::distributed::{self, Backend};
use nuvec::prelude::*;
use nuvec_test_support::mpi::{mpi_ranks, mpi_ranks_with, mpirun, mpirun_args};
use nuvec_test_support::test_name;
use std::time::Duration;

mod common;
use common::collectives::{self, check_collectives};

const TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn mpi_collectives_match_local_references_on_2_ranks() {
    mpi_ranks(test_name!(), 2, TIMEOUT, |group| {
        assert_eq!(group.size(), 2);
        check_collectives(group);
    });
}

#[test]
fn mpi_collectives_match_local_references_on_4_ranks() {
    mpi_ranks(test_name!(), 4, TIMEOUT, check_collectives);
}

#[test]
fn mpi_collectives_split_into_pieces_beyond_the_count_limit() {
    // NUVEC_MPI_MAX_COUNT lowers MPI's int-count limit so that arrays of a few elements take
    // the chunked paths that arrays of more than 2^31 elements take in real use.
    mpi_ranks_with(
        test_name!(),
        3,
        TIMEOUT,
        &[("NUVEC_MPI_MAX_COUNT", "2")],
        |group| {
            assert_eq!(std::env::var("NUVEC_MPI_MAX_COUNT").as_deref(), Ok("2"));
            check_collectives(group);
            collectives::send_and_recv_ring(group);
            // Past the limit, all_to_all_v takes the checked default.
            common::all_to_all::all_to_all_v_sends_rows_by_count(group);
        },
    );
}

#[test]
fn mpi_large_float_sums_agree_bitwise_on_every_rank_and_rerun() {
    mpi_ranks(
        test_name!(),
        3,
        TIMEOUT,
        collectives::large_float_sums_agree_bitwise,
    );
}

#[test]
fn mpi_send_and_recv_work_between_any_two_ranks() {
    mpi_ranks(
        test_name!(),
        4,
        TIMEOUT,
        collectives::send_and_recv_everywhere,
    );
}

#[test]
fn mpi_recv_of_another_shape_names_both_and_the_next_message_arrives() {
    mpi_ranks(test_name!(), 2, TIMEOUT, collectives::mismatched_send_recv);
}

#[test]
fn mpi_gradients_flow_through_collectives_with_mlx_rules() {
    mpi_ranks(
        test_name!(),
        2,
        TIMEOUT,
        collectives::gradients_follow_mlx_rules,
    );
}

#[test]
fn mpi_groups_split_by_color_and_order_by_key() {
    mpi_ranks(
        test_name!(),
        4,
        TIMEOUT,
        common::split::groups_split_by_color_and_order_by_key,
    );
}

#[test]
fn mpi_init_makes_the_world_the_default_group() {
    mpi_ranks(test_name!(), 2, TIMEOUT, |world| {
        // `init` (any backend) finds MPI's environment and returns the same group.
        let again = distributed::init(true).unwrap();
        assert_eq!(again, world);
        assert!(distributed::is_available(Backend::Mpi));
        let sum = distributed::all_sum(&Array::scalar(world.rank() as f32 + 1.0), None);
        assert_eq!(sum.item::<f32>().unwrap(), 3.0);
        world.health().unwrap();
    });
}

#[test]
fn the_hello_distributed_example_runs_under_mpirun_on_4_ranks() {
    let Some(mpirun) = mpirun("the_hello_distributed_runs_under_mpirun_on_4_ranks") else {
        return;
    };
    let example = nuvec_test_support::ranks::example("hello_distributed");
    let output = std::process::Command::new(mpirun)
        .args(mpirun_args(4))
        .arg(&example)
        .env_remove("MLX_HOSTFILE")
        .env_remove("MLX_RANK")
        .output()
        .expect("running mpirun");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for rank in 0..4 {
        let line = format!("rank {rank} of 4: all_sum = array([4, 8, 12]");
        assert!(stdout.contains(&line), "no {line:?} in\n{stdout}\n{stderr}");
    }
}

#[test]
fn a_missing_mpi_library_is_reported_by_name_and_not_available() {
    const CHILD: &str = "NUVEC_TEST_MISSING_MPI_CHILD";
    if std::env::var_os(CHILD).is_some() {
        assert!(!distributed::is_available(Backend::Mpi));
        let error = distributed::init_backend(true, Backend::Mpi)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("[init]") && error.contains("/nonexistent/libmpi.so"),
            "{error}"
        );
        assert!(error.contains("NUVEC_MPI_LIBNAME"), "{error}");
        // Not strict: the group of this process alone.
        let alone = distributed::init_backend(false, Backend::Mpi).unwrap();
        assert_eq!((alone.rank(), alone.size()), (0, 1));
        return;
    }
    // The library is loaded once per process, so the check runs in a fresh one.
    run_in_a_fresh_process(
        test_name!(),
        CHILD,
        &[("NUVEC_MPI_LIBNAME", "/nonexistent/libmpi.so")],
    );
}

/// Runs test `test` again in a new process of this binary, with `child` set and `env` added
/// (and no launch environment of the ring or JACCL); fails unless it passes there.
fn run_in_a_fresh_process(test: &str, child: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(exe)
        .args([test, "--exact", "--nocapture"])
        .env(child, "1")
        .envs(env.iter().copied())
        .env_remove("MLX_HOSTFILE")
        .env_remove("MLX_RANK")
        .env_remove("MLX_IBV_DEVICES")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_process_started_by_mpirun_without_an_mpi_library_refuses_to_run_alone() {
    const CHILD: &str = "NUVEC_TEST_MPIRUN_WITHOUT_MPI_CHILD";
    if std::env::var_os(CHILD).is_some() {
        // MLX would give each of the two processes a group of one; nuvec refuses.
        for backend in [Backend::Any, Backend::Mpi] {
            let error = distributed::init_backend(false, backend)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("one of 2 that mpirun or srun started")
                    && error.contains("OMPI_COMM_WORLD_SIZE")
                    && error.contains("/nonexistent/libmpi.so")
                    && error.contains("NUVEC_MPI_LIBNAME"),
                "{error}"
            );
        }
        return;
    }
    run_in_a_fresh_process(
        test_name!(),
        CHILD,
        &[
            ("NUVEC_MPI_LIBNAME", "/nonexistent/libmpi.so"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_RANK", "1"),
        ],
    );
}

#[test]
fn mpi_vmap_through_collectives_equals_collectives_of_slices() {
    mpi_ranks(
        test_name!(),
        2,
        TIMEOUT,
        collectives::vmap_through_collectives,
    );
}

#[test]
fn mpi_compiled_collectives_communicate_on_every_call() {
    mpi_ranks(
        test_name!(),
        2,
        TIMEOUT,
        collectives::compiled_collectives_communicate_every_call,
    );
}

#[test]
fn mpi_broadcast_gives_every_rank_the_roots_array_and_differentiates() {
    mpi_ranks(test_name!(), 3, TIMEOUT, |group| {
        common::broadcast::broadcast_gives_every_rank_the_roots_array(group);
        common::broadcast::broadcast_under_transforms(group);
        common::broadcast::broadcast_refuses_a_root_outside_the_group(group);
        distributed::barrier(Some(&group)).unwrap();
    });
}

#[test]
fn mpi_all_to_all_sends_each_rank_its_blocks_and_differentiates() {
    mpi_ranks(test_name!(), 3, TIMEOUT, |group| {
        common::all_to_all::all_to_all_sends_each_rank_its_blocks(group);
        common::all_to_all::all_to_all_under_transforms(group);
        common::all_to_all::all_to_all_refuses_an_uneven_first_axis(group);
        common::all_to_all::all_to_all_v_sends_rows_by_count(group);
        common::all_to_all::all_to_all_v_moves_regions_of_every_size(group);
    });
}
