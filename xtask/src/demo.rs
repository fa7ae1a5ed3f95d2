//! `cargo xtask demo`: the main job. Builds `nuvec` (the launcher) and the distributed demo in
//! release, then runs `nuvec launch -n 4 -- target/release/examples/distributed_demo`: 4
//! processes on loopback with the environment mlx.launch writes for the ring, authenticated
//! with a fresh key.

/// Ranks the demo runs on.
const RANKS: usize = 4;

pub(crate) fn run() -> Result<(), String> {
    crate::run(
        "cargo",
        &[
            "build",
            "--release",
            "-p",
            "nuvec-cli",
            "-p",
            "nuvec",
            "--example",
            "distributed_demo",
            "--bin",
            "nuvec",
        ],
    )?;
    let root = crate::workspace_root();
    let launcher = root.join("target/release/nuvec");
    let demo = root.join("target/release/examples/distributed_demo");
    // A free range of ports for the ring, so a busy default port cannot get in the way.
    let start = crate::free_port_range(RANKS)?;
    crate::run(
        &launcher.to_string_lossy(),
        &[
            "launch",
            "-n",
            &RANKS.to_string(),
            "--starting-port",
            &start.to_string(),
            "--",
            &demo.to_string_lossy(),
        ],
    )
}
