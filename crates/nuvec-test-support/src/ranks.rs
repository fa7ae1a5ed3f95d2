//! Multi-rank tests: a test re-runs its own binary as N processes on loopback, each with the
//! environment `mlx.launch` writes for the ring (`MLX_RANK`, `MLX_HOSTFILE`).

use nuvec_core::distributed::Group;
use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the environment of child processes.
const CHILD_VARIABLE: &str = "NUVEC_TEST_CHILD";

/// Ports the multi-rank tests hand out when the machine's range for outgoing connections is
/// unknown: below the default ranges of Linux (32768–60999) and macOS (49152–65535).
const DEFAULT_TEST_PORTS: std::ops::Range<u16> = 20_000..32_768;
/// The fewest ports a range outside the machine's ephemeral range must have to be used.
const ENOUGH_PORTS: u16 = 4_000;

/// Ports the multi-rank tests hand out: outside the range the kernel gives to outgoing
/// connections and to binds of port 0 (on Linux, read from `ip_local_port_range`; a machine
/// may widen it), so nothing but these tests takes them. The wider of the spans below and
/// above that range, from port 20000 up; the default when neither is wide enough.
/// Read once per process.
fn test_ports() -> std::ops::Range<u16> {
    static PORTS: std::sync::OnceLock<std::ops::Range<u16>> = std::sync::OnceLock::new();
    PORTS
        .get_or_init(|| {
            let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
                .ok()
                .and_then(|text| {
                    let mut bounds = text.split_whitespace().map(|n| n.parse::<u16>().ok());
                    Some((bounds.next()??, bounds.next()??))
                });
            ports_outside(ephemeral)
        })
        .clone()
}

/// The test ports for an ephemeral range of `low..=high`, if known.
fn ports_outside(ephemeral: Option<(u16, u16)>) -> std::ops::Range<u16> {
    let Some((low, high)) = ephemeral else {
        return DEFAULT_TEST_PORTS;
    };
    let below = DEFAULT_TEST_PORTS.start..low.max(DEFAULT_TEST_PORTS.start);
    let above = high.saturating_add(1).max(DEFAULT_TEST_PORTS.start)..u16::MAX;
    let wider = if below.len() >= above.len() {
        below
    } else {
        above
    };
    if wider.len() >= usize::from(ENOUGH_PORTS) {
        wider
    } else {
        DEFAULT_TEST_PORTS
    }
}

/// A start port with `n` free loopback ports after it (launchers number the ring's ports
/// consecutively).
pub fn free_port_range(n: usize) -> u16 {
    free_ports(n.max(1))[0]
}

/// `count` consecutive free loopback ports, released before the children start. They come
/// in turn from a sequence that every test process of this user shares (a file in the
/// temporary directory, locked while it advances): tests running at once never get the same
/// ports, where ports the kernel picks for a bind of port 0 could be handed to another test
/// (or to an outgoing connection) between the check and the children's bind.
pub fn free_ports(count: usize) -> Vec<u16> {
    use std::io::{Seek, Write};
    use std::os::fd::AsRawFd;
    let path = std::env::temp_dir().join("nuvec-test-ports");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap_or_else(|e| panic!("opening the test port sequence {}: {e}", path.display()));
    // SAFETY: flock on a descriptor this function owns; the lock ends when `file` closes.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "locking {}", path.display());
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let test_ports = test_ports();
    let span = test_ports.end - test_ports.start;
    let mut next = text
        .trim()
        .parse::<u16>()
        .ok()
        .filter(|port| test_ports.contains(port))
        .unwrap_or_else(|| test_ports.start + (std::process::id() % u32::from(span)) as u16);
    let count = u16::try_from(count).expect("a port count");
    for _ in 0..span {
        if next.saturating_add(count) > test_ports.end {
            next = test_ports.start;
        }
        let block = next..next + count;
        // Held until every port of the block is known to be free.
        let free: Option<Vec<TcpListener>> = block
            .clone()
            .map(|port| TcpListener::bind(("127.0.0.1", port)).ok())
            .collect();
        if free.is_none() {
            next += 1;
            continue;
        }
        let after = if block.end >= test_ports.end {
            test_ports.start
        } else {
            block.end
        };
        let saved = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{after}"));
        saved.unwrap_or_else(|e| panic!("saving the test port sequence {}: {e}", path.display()));
        return block.collect();
    }
    panic!("no {count} consecutive free loopback ports in {test_ports:?}");
}

/// How many times [`launch_on_free_ports`] tries.
const LAUNCH_ATTEMPTS: usize = 3;

/// Runs a launch of `n` ranks through `run`, which gets the starting port of `n` free ones.
/// The launcher checks its ports before starting any rank, so when another process took one
/// since they were handed out (its output says a port "is not free"), nothing ran and the
/// launch is tried again on fresh ports, at most three times in all. Any other output, failed
/// or not, is returned as it is.
pub fn launch_on_free_ports(
    n: usize,
    mut run: impl FnMut(u16) -> std::process::Output,
) -> std::process::Output {
    let mut attempt = 1;
    loop {
        let port = free_port_range(n);
        let output = run(port);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if output.status.success() || !stderr.contains("is not free") || attempt == LAUNCH_ATTEMPTS
        {
            return output;
        }
        eprintln!("a port from {port} was taken meanwhile, trying others: {stderr}");
        attempt += 1;
    }
}

/// The debug build of the `nuvec` crate's example `name`, built first when missing.
pub fn example(name: &str) -> std::path::PathBuf {
    example_of("nuvec", name)
}

/// The debug build of package `package`'s example `name`, built first when missing.
pub fn example_of(package: &str, name: &str) -> std::path::PathBuf {
    built(
        &format!("examples/{name}"),
        &["build", "-p", package, "--example", name],
    )
}

/// The debug build of package `package`'s binary `name`, built first when missing.
pub fn binary_of(package: &str, name: &str) -> std::path::PathBuf {
    built(name, &["build", "-p", package, "--bin", name])
}

/// `target/debug/<path>`, built with `cargo <cargo_args>` first when missing.
fn built(path: &str, cargo_args: &[&str]) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from);
    let path = target.join("debug").join(path);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(&root)
            .args(cargo_args)
            .status()
            .expect("running cargo");
        assert!(status.success(), "cargo {cargo_args:?} failed");
    }
    path.canonicalize().expect("the built file's path")
}

/// Writes an MLX ring hostfile for `ports` on loopback; returns its path.
pub fn write_hostfile(ports: &[u16]) -> std::path::PathBuf {
    let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    write_hostfile_of(&addresses)
}

/// Writes an MLX ring hostfile with one `host:port` address per rank; returns its path.
pub fn write_hostfile_of(addresses: &[String]) -> std::path::PathBuf {
    let entries: Vec<Vec<String>> = addresses.iter().map(|a| vec![a.clone()]).collect();
    write_hostfile_entries(&entries)
}

/// Files written by this process (for unique names).
static WRITTEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Writes an MLX ring hostfile with the addresses of each rank; returns its path.
pub fn write_hostfile_entries(ranks: &[Vec<String>]) -> std::path::PathBuf {
    let entries: Vec<String> = ranks
        .iter()
        .map(|addresses| {
            let quoted: Vec<String> = addresses.iter().map(|a| format!("\"{a}\"")).collect();
            format!("[{}]", quoted.join(", "))
        })
        .collect();
    let path = std::env::temp_dir().join(format!(
        "nuvec-hostfile-{}-{}.json",
        std::process::id(),
        WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&path, format!("[{}]", entries.join(", "))).expect("writing the hostfile");
    path
}

/// Whether this process is one rank of a multi-rank test.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_VARIABLE).is_some()
}

/// How a multi-rank test starts its ranks, beyond [`run_ranks`]'s defaults.
#[derive(Clone, Debug, Default)]
pub struct Launch {
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// Ranks that are expected to die or stop: their exit is not checked, and any still
    /// running when the others have finished are killed.
    pub expendable: Vec<usize>,
    /// Ranks in the hostfile that are never started.
    pub absent: Vec<usize>,
    /// The group timeout (`NUVEC_DISTRIBUTED_TIMEOUT`); the test's timeout when `None`.
    pub group_timeout: Option<Duration>,
    /// Each rank's listening address (`host:port`); free loopback ports when empty.
    pub addresses: Vec<String>,
    /// How many loopback addresses each rank lists when `addresses` is empty (one when 0):
    /// the connections every two ranks share.
    pub connections: usize,
    /// A command each rank is started under (`ip netns exec NAME`, say); none when empty.
    pub prefix: Vec<Vec<String>>,
    /// Form a JACCL group on the emulated fabric instead of a ring.
    pub jaccl: Option<Jaccl>,
}

/// A JACCL group on the emulated fabric: a mesh, or a ring with `wires` cables each way.
#[derive(Clone, Copy, Debug, Default)]
pub struct Jaccl {
    /// Cable the ranks as a ring (neighbours only) and prefer it; else a full mesh.
    pub ring: bool,
    /// Cables between each cabled pair (at least 1).
    pub wires: usize,
}

/// Writes a JACCL device file for `n` ranks cabled as `jaccl` says, with made-up device names.
pub fn write_device_file(n: usize, jaccl: Jaccl) -> std::path::PathBuf {
    let wires = jaccl.wires.max(1);
    let rows: Vec<String> = (0..n)
        .map(|i| {
            let entries: Vec<String> = (0..n)
                .map(|j| {
                    let neighbours = (i + 1) % n == j || (j + 1) % n == i;
                    if i == j || (jaccl.ring && !neighbours) {
                        "null".to_string()
                    } else {
                        let (a, b) = (i.min(j), i.max(j));
                        let names: Vec<String> =
                            (0..wires).map(|w| format!("\"emu{a}_{b}_{w}\"")).collect();
                        format!("[{}]", names.join(", "))
                    }
                })
                .collect();
            format!("[{}]", entries.join(", "))
        })
        .collect();
    let path = std::env::temp_dir().join(format!(
        "nuvec-devices-{}-{}.json",
        std::process::id(),
        WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&path, format!("[{}]", rows.join(", "))).expect("writing the device file");
    path
}

/// Runs `body` on `n_ranks` processes. In the parent (the test as started by `cargo test`)
/// this spawns the ranks running only the test named `test_name` and fails with every rank's
/// output unless all succeed within `timeout`. In a child it joins the group with
/// `nuvec_distributed::init(true)` and runs `body`.
pub fn run_ranks(test_name: &str, n_ranks: usize, timeout: Duration, body: impl FnOnce(Group)) {
    launch_ranks(test_name, n_ranks, timeout, &Launch::default(), |group| {
        body(group.expect("joining the group"))
    });
}

/// The variables that tell a rank its backend: the ring's hostfile, or JACCL's device file,
/// coordinator and the emulated fabric.
fn backend_environment(
    launch: &Launch,
    file: &std::path::Path,
    coordinator: &str,
) -> Vec<(String, String)> {
    let file = file.display().to_string();
    match launch.jaccl {
        None => vec![("MLX_HOSTFILE".into(), file)],
        Some(jaccl) => {
            let mut env = vec![
                ("MLX_IBV_DEVICES".into(), file),
                ("MLX_JACCL_COORDINATOR".into(), coordinator.to_string()),
                ("NUVEC_JACCL_FABRIC".into(), "emulated".into()),
            ];
            if jaccl.ring {
                env.push(("MLX_JACCL_RING".into(), "1".into()));
            }
            env
        }
    }
}

/// [`run_ranks`] with a [`Launch`]; in a child, `body` gets the outcome of `init(true)`.
pub fn launch_ranks(
    test_name: &str,
    n_ranks: usize,
    timeout: Duration,
    launch: &Launch,
    body: impl FnOnce(nuvec_core::Result<Group>),
) {
    if is_child() {
        body(nuvec_distributed::init(true));
        return;
    }
    let entries: Vec<Vec<String>> = if launch.addresses.is_empty() {
        let per_rank = launch.connections.max(1);
        free_ports(n_ranks * per_rank)
            .chunks(per_rank)
            .map(|ports| ports.iter().map(|p| format!("127.0.0.1:{p}")).collect())
            .collect()
    } else {
        launch.addresses.iter().map(|a| vec![a.clone()]).collect()
    };
    let hostfile = match launch.jaccl {
        Some(jaccl) => write_device_file(n_ranks, jaccl),
        None => write_hostfile_entries(&entries),
    };
    let coordinator = format!("127.0.0.1:{}", free_ports(1)[0]);
    let exe = std::env::current_exe().expect("the test binary's path");
    let group_timeout = launch.group_timeout.unwrap_or(timeout);
    let mut children: Vec<_> = (0..n_ranks)
        .filter(|rank| !launch.absent.contains(rank))
        .map(|rank| {
            let prefix = launch.prefix.get(rank).filter(|p| !p.is_empty());
            let mut command = match prefix {
                Some(prefix) => {
                    let mut command = Command::new(&prefix[0]);
                    command.args(&prefix[1..]).arg(&exe);
                    command
                }
                None => Command::new(&exe),
            };
            let child = command
                .args([test_name, "--exact", "--nocapture", "--test-threads", "1"])
                .env(CHILD_VARIABLE, "1")
                .env("MLX_RANK", rank.to_string())
                .envs(backend_environment(launch, &hostfile, &coordinator))
                .env(
                    "NUVEC_DISTRIBUTED_TIMEOUT",
                    format!("{}", group_timeout.as_secs_f64()),
                )
                .envs(launch.env.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawning a rank");
            (rank, child)
        })
        .collect();
    let deadline = Instant::now() + timeout + Duration::from_secs(10);
    // Wait for the ranks that must succeed, then stop the expendable ones.
    let mut statuses: Vec<Option<std::process::ExitStatus>> = vec![None; children.len()];
    loop {
        let mut waiting = false;
        for (index, (rank, child)) in children.iter_mut().enumerate() {
            if statuses[index].is_none() {
                statuses[index] = child.try_wait().expect("waiting for a rank");
                waiting |= statuses[index].is_none() && !launch.expendable.contains(rank);
            }
        }
        if !waiting || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut report = Vec::new();
    let mut all_ok = true;
    for (index, (rank, child)) in children.iter_mut().enumerate() {
        if statuses[index].is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = stdout.read_to_string(&mut out);
        }
        if let Some(mut stderr) = child.stderr.take() {
            let _ = stderr.read_to_string(&mut err);
        }
        let status = statuses[index];
        let ok = launch.expendable.contains(rank)
            || (status.is_some_and(|s| s.success()) && out.contains("1 passed"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_taken_at_once_are_distinct_consecutive_and_free() {
        let blocks: Vec<Vec<u16>> = std::thread::scope(|scope| {
            let takers: Vec<_> = (0..8).map(|_| scope.spawn(|| free_ports(4))).collect();
            takers.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut all: Vec<u16> = blocks.iter().flatten().copied().collect();
        for block in &blocks {
            assert!(block.windows(2).all(|w| w[1] == w[0] + 1), "{block:?}");
            assert!(block.iter().all(|p| test_ports().contains(p)), "{block:?}");
        }
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 32, "a port was handed out twice: {blocks:?}");
        let start = free_port_range(3);
        for port in start..start + 3 {
            TcpListener::bind(("127.0.0.1", port)).expect("a handed-out port is free");
        }
    }

    /// An output with exit `code` and `stderr`.
    fn output(code: i32, stderr: &str) -> std::process::Output {
        use std::os::unix::process::ExitStatusExt;
        std::process::Output {
            status: std::process::ExitStatus::from_raw(code << 8),
            stdout: Vec::new(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_launch_refused_for_a_taken_port_is_tried_again_on_other_ports_three_times_at_most() {
        let taken = "rank 1's address 127.0.0.1:20001 is not free (in use)";
        let mut ports = Vec::new();
        let done = launch_on_free_ports(2, |port| {
            ports.push(port);
            if ports.len() < 3 {
                output(1, taken)
            } else {
                output(0, "")
            }
        });
        assert!(done.status.success());
        assert_eq!(ports.len(), 3);
        assert!(ports.windows(2).all(|w| w[0] != w[1]), "{ports:?}");
        let mut calls = 0;
        let refused = launch_on_free_ports(2, |_| {
            calls += 1;
            output(1, taken)
        });
        assert_eq!((refused.status.code(), calls), (Some(1), 3));
        let mut calls = 0;
        let failed = launch_on_free_ports(2, |_| {
            calls += 1;
            output(3, "rank 0 failed")
        });
        assert_eq!((failed.status.code(), calls), (Some(3), 1));
    }

    #[test]
    fn test_ports_stay_out_of_the_kernels_range_for_outgoing_connections() {
        // Linux's default: the span below it is the wider.
        assert_eq!(ports_outside(Some((32_768, 60_999))), 20_000..32_768);
        // A machine that moved it down: the span above.
        assert_eq!(ports_outside(Some((15_000, 40_000))), 40_001..65_535);
        // One that starts it high: more room below, from port 20000.
        assert_eq!(ports_outside(Some((50_000, 65_000))), 20_000..50_000);
        // No span wide enough, or an unknown range: the default, and the risk it carries.
        assert_eq!(ports_outside(Some((1_024, 65_535))), DEFAULT_TEST_PORTS);
        assert_eq!(ports_outside(None), DEFAULT_TEST_PORTS);
        let ports = test_ports();
        assert!(ports.len() >= usize::from(ENOUGH_PORTS), "{ports:?}");
    }
}
