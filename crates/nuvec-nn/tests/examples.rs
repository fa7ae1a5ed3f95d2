//! The data-parallel and tensor-parallel examples, run by `nuvec launch` on 4 local ranks.

use std::process::Command;

/// Runs example `name` on 4 ranks through the launcher (on fresh ports should one be taken
/// meanwhile); returns its output.
fn launch(name: &str) -> String {
    let nuvec = nuvec_test_support::ranks::binary_of("nuvec-cli", "nuvec");
    let example = nuvec_test_support::ranks::example_of("nuvec-nn", name);
    let output = nuvec_test_support::ranks::launch_on_free_ports(4, |port| {
        Command::new(&nuvec)
            .args(["launch", "-n", "4", "-p", &port.to_string(), "--"])
            .arg(&example)
            .output()
            .expect("running nuvec launch")
    });
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{name}: {stdout}\n{stderr}");
    stdout
}

#[test]
fn the_data_parallel_example_trains_on_4_ranks_like_one_process() {
    let out = launch("data_parallel");
    assert!(out.contains("epoch 4: loss"), "{out}");
    for rank in 0..4 {
        assert!(
            out.contains(&format!("rank {rank} of 4: parameters agree on every rank")),
            "{out}"
        );
    }
}

#[test]
fn the_tensor_parallel_example_equals_the_unsharded_mlp_on_4_ranks() {
    let out = launch("tensor_parallel");
    for rank in 0..4 {
        assert!(
            out.contains(&format!(
                "rank {rank} of 4: 256 of 1024 hidden features here"
            )),
            "{out}"
        );
    }
}
