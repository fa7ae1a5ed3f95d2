//! The examples run as their header comments say, alone as well as in a group.

use nuvec_test_support::ranks::example;
use std::process::Command;

/// Runs example `name` as a single process with no launcher's environment.
fn alone(name: &str) -> (bool, String, String) {
    let output = Command::new(example(name))
        .env_remove("MLX_RANK")
        .env_remove("MLX_HOSTFILE")
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .env_remove("PMI_SIZE")
        .output()
        .expect("running the example");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_demo_runs_alone_and_skips_what_needs_a_peer() {
    let (ok, stdout, stderr) = alone("distributed_demo");
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("rank 0/1: alone:") && stdout.contains("send/recv needs a peer: skipped"),
        "{stdout}"
    );
}

#[test]
fn the_spec_s_first_example_runs_alone_as_a_group_of_one() {
    let (ok, stdout, stderr) = alone("hello_distributed");
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("rank 0 of 1: all_sum = array([1, 2, 3], dtype=float32)"),
        "{stdout}"
    );
}
