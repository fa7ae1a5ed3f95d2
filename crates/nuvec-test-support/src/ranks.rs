//! Multi-rank tests: a test re-runs its own binary as N processes on loopback, each with the
//! environment `mlx.launch` writes for the ring (`MLX_RANK`, `MLX_HOSTFILE`).

use nuvec_core::distributed::Group;
use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the environment of child processes.
const CHILD_VARIABLE: &str = "NUVEC_TEST_CHILD";

/// Free loopback ports, found by binding port 0 (released before the children start).
pub fn free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("binding a loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local address").port())
        .collect()
}

/// Writes an MLX ring hostfile for `ports` on loopback; returns its path.
pub fn write_hostfile(ports: &[u16]) -> std::path::PathBuf {
    let entries: Vec<String> = ports
        .iter()
        .map(|p| format!("[\"127.0.0.1:{p}\"]"))
        .collect();
    let path = std::env::temp_dir().join(format!(
        "nuvec-hostfile-{}-{}.json",
        std::process::id(),
        ports[0]
    ));
    std::fs::write(&path, format!("[{}]", entries.join(", "))).expect("writing the hostfile");
    path
}

/// Whether this process is one rank of a multi-rank test.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_VARIABLE).is_some()
}

/// Runs `body` on `n_ranks` processes. In the parent (the test as started by `cargo test`)
/// this spawns the ranks running only the test named `test_name` and fails with every rank's
/// output unless all succeed within `timeout`. In a child it joins the group with
/// `nuvec_distributed::init(true)` and runs `body`.
pub fn run_ranks(test_name: &str, n_ranks: usize, timeout: Duration, body: impl FnOnce(Group)) {
    if is_child() {
        let group = nuvec_distributed::init(true).expect("joining the group");
        body(group);
        return;
    }
    let ports = free_ports(n_ranks);
    let hostfile = write_hostfile(&ports);
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut children: Vec<_> = (0..n_ranks)
        .map(|rank| {
            Command::new(&exe)
                .args([test_name, "--exact", "--nocapture", "--test-threads", "1"])
                .env(CHILD_VARIABLE, "1")
                .env("MLX_RANK", rank.to_string())
                .env("MLX_HOSTFILE", &hostfile)
                .env(
                    "NUVEC_DISTRIBUTED_TIMEOUT",
                    timeout.as_secs().max(1).to_string(),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawning a rank")
        })
        .collect();
    let deadline = Instant::now() + timeout + Duration::from_secs(10);
    let mut report = Vec::new();
    let mut all_ok = true;
    for (rank, child) in children.iter_mut().enumerate() {
        let status = loop {
            if let Some(status) = child.try_wait().expect("waiting for a rank") {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = stdout.read_to_string(&mut out);
        }
        if let Some(mut stderr) = child.stderr.take() {
            let _ = stderr.read_to_string(&mut err);
        }
        let ok = status.is_some_and(|s| s.success()) && out.contains("1 passed");
        all_ok &= ok;
        report.push(format!("--- rank {rank}: {status:?}\n{out}\n{err}"));
    }
    let _ = std::fs::remove_file(&hostfile);
    assert!(
        all_ok,
        "a rank of {test_name} failed:\n{}",
        report.join("\n")
    );
}
