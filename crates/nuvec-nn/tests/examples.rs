//! The data-parallel and tensor-parallel examples, run by `nuvec launch` on 4 local ranks.

use std::path::PathBuf;
use std::process::Command;

/// `target/debug`, where `cargo test` put this test and the package's examples.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .to_path_buf()
}

/// A binary of the workspace, built first when a filtered run did not build it.
fn built(path: PathBuf, cargo_args: &[&str]) -> PathBuf {
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(cargo_args)
            .status()
            .expect("running cargo");
        assert!(status.success(), "cargo {cargo_args:?} failed");
    }
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Runs example `name` on 4 ranks through the launcher; returns its output.
fn launch(name: &str) -> String {
    let target = target_dir();
    let nuvec = built(target.join("nuvec"), &["build", "-p", "nuvec-cli"]);
    let example = built(
        target.join("examples").join(name),
        &["build", "-p", "nuvec-nn", "--example", name],
    );
    let port = nuvec_test_support::ranks::free_port_range(4);
    let output = Command::new(nuvec)
        .args(["launch", "-n", "4", "-p", &port.to_string(), "--"])
        .arg(example)
        .output()
        .expect("running nuvec launch");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{name}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
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
