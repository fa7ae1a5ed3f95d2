//! `cargo xtask demo`: the main job. Builds the distributed demo in release and runs it as
//! 4 processes on loopback with the environment `mlx.launch` writes for the ring.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};

/// Ranks the demo runs on.
const RANKS: usize = 4;

pub(crate) fn run() -> Result<(), String> {
    crate::run(
        "cargo",
        &[
            "build",
            "--release",
            "-p",
            "nuvec",
            "--example",
            "distributed_demo",
        ],
    )?;
    let root = crate::workspace_root();
    let exe = root.join("target/release/examples/distributed_demo");
    let listeners: Vec<TcpListener> = (0..RANKS)
        .map(|_| TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}")))
        .collect::<Result<_, _>>()?;
    let ports: Vec<u16> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .map(|a| a.port())
        .collect();
    drop(listeners);
    let hostfile = std::env::temp_dir().join(format!("nuvec-demo-{}.json", std::process::id()));
    let entries: Vec<String> = ports
        .iter()
        .map(|p| format!("[\"127.0.0.1:{p}\"]"))
        .collect();
    std::fs::write(&hostfile, format!("[{}]", entries.join(", ")))
        .map_err(|e| format!("writing the hostfile: {e}"))?;
    eprintln!(
        "starting {RANKS} ranks on loopback (hostfile {})",
        hostfile.display()
    );
    let mut children = Vec::new();
    for rank in 0..RANKS {
        let mut child = Command::new(&exe)
            .env("MLX_RANK", rank.to_string())
            .env("MLX_HOSTFILE", &hostfile)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting rank {rank}: {e}"))?;
        let stdout = child.stdout.take();
        let printer = std::thread::spawn(move || {
            if let Some(stdout) = stdout {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    println!("[{rank}] {line}");
                }
            }
        });
        children.push((rank, child, printer));
    }
    let mut failure = None;
    for (rank, mut child, printer) in children {
        let status = child
            .wait()
            .map_err(|e| format!("waiting for rank {rank}: {e}"))?;
        let _ = printer.join();
        if !status.success() && failure.is_none() {
            failure = Some(format!("rank {rank} failed with {status}"));
        }
    }
    let _ = std::fs::remove_file(&hostfile);
    failure.map_or(Ok(()), Err)
}
