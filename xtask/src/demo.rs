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
    let start = free_port_range(RANKS)?;
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

fn free_port_range(n: usize) -> Result<u16, String> {
    for _ in 0..100 {
        let start = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("finding a free port: {e}"))?
            .port();
        let free = (0..n as u16).all(|i| {
            start
                .checked_add(i)
                .is_some_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        });
        if free {
            return Ok(start);
        }
    }
    Err(format!("no range of {n} free ports found"))
}
