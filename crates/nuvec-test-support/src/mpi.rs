//! Multi-rank tests under Open MPI: a test re-runs its own binary through `mpirun -n N`, and
//! each rank joins MPI's world with `init_backend(true, Backend::Mpi)`.

use nuvec_core::distributed::Group;
use nuvec_distributed::{init_backend, Backend};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Set in the environment of ranks started by [`mpi_ranks`].
const CHILD_VARIABLE: &str = "NUVEC_TEST_MPI_CHILD";

/// The folder where each rank of a test notes that its body passed.
const RESULTS_VARIABLE: &str = "NUVEC_TEST_MPI_RESULTS";

/// Set (by CI) to make a missing `mpirun` a failure instead of a visible skip.
pub const REQUIRE_VARIABLE: &str = "NUVEC_REQUIRE_MPI";

/// Whether this process is one rank of an MPI test.
pub fn is_mpi_child() -> bool {
    std::env::var_os(CHILD_VARIABLE).is_some()
}

/// `mpirun` on `PATH`, or `None` after printing why the test is skipped; panics instead when
/// [`REQUIRE_VARIABLE`] is set.
pub fn mpirun(test_name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("mpirun"))
        .find(|path| path.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os(REQUIRE_VARIABLE).is_none(),
            "{test_name}: mpirun is not on PATH but {REQUIRE_VARIABLE} is set (install openmpi-bin)"
        );
        crate::skip(&format!("{test_name}: mpirun is not on PATH (install openmpi-bin; set {REQUIRE_VARIABLE}=1 to make this a failure)"));
    }
    found
}

/// The arguments every test run of `mpirun` gets: room for more ranks than cores, and (as
/// root, in containers) Open MPI's explicit consent.
pub fn mpirun_args(n_ranks: usize) -> Vec<String> {
    let mut args = vec![
        "-n".to_string(),
        n_ranks.to_string(),
        "--oversubscribe".into(),
        "--mca".into(),
        "btl".into(),
        "self,vader,tcp".into(),
        "--mca".into(),
        "btl_tcp_if_include".into(),
        "lo".into(),
        "--mca".into(),
        "oob_tcp_if_include".into(),
        "lo".into(),
    ];
    if is_root() {
        args.push("--allow-run-as-root".into());
    }
    args
}

/// Whether this process runs as root (Linux; elsewhere assumed not).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs `body` on `n_ranks` processes started by `mpirun`. In the parent this starts
/// `mpirun` on this test binary (only the test `test_name`) and fails with the output unless
/// every rank passes within `timeout`; in a rank it joins MPI's world and runs `body`.
pub fn mpi_ranks(test_name: &str, n_ranks: usize, timeout: Duration, body: impl FnOnce(Group)) {
    mpi_ranks_with(test_name, n_ranks, timeout, &[], body);
}

/// [`mpi_ranks`] with extra environment for every rank.
pub fn mpi_ranks_with(
    test_name: &str,
    n_ranks: usize,
    timeout: Duration,
    env: &[(&str, &str)],
    body: impl FnOnce(Group),
) {
    if is_mpi_child() {
        let group = init_backend(true, Backend::Mpi).expect("joining MPI's world");
        let rank = group.rank();
        body(group);
        // mpirun merges the ranks' output mid-line, so each rank reports through a file.
        if let Some(dir) = std::env::var_os(RESULTS_VARIABLE) {
            std::fs::write(PathBuf::from(dir).join(format!("rank-{rank}")), "passed")
                .expect("writing this rank's result");
        }
        return;
    }
    let Some(mpirun) = mpirun(test_name) else {
        return;
    };
    // One job at a time: MPI ranks poll while they wait, and several jobs on a small machine
    // would mostly wait for each other.
    static ONE_JOB: Mutex<()> = Mutex::new(());
    let _one_job = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let exe = std::env::current_exe().expect("the test binary's path");
    let results =
        std::env::temp_dir().join(format!("nuvec-mpi-{}-{test_name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&results);
    std::fs::create_dir_all(&results).expect("creating the results folder");
    let mut child = Command::new(mpirun)
        .args(mpirun_args(n_ranks))
        .arg(&exe)
        .args([test_name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD_VARIABLE, "1")
        .env(RESULTS_VARIABLE, &results)
        .envs(env.iter().copied())
        .env_remove("MLX_HOSTFILE")
        .env_remove("MLX_RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting mpirun");
    let mut stdout = child.stdout.take().expect("mpirun's stdout");
    let mut stderr = child.stderr.take().expect("mpirun's stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for mpirun") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    let passed = (0..n_ranks)
        .filter(|rank| results.join(format!("rank-{rank}")).exists())
        .count();
    let _ = std::fs::remove_dir_all(&results);
    assert!(
        status.is_some_and(|s| s.success()) && passed == n_ranks,
        "{test_name} under mpirun -n {n_ranks}: {} ({passed} of {n_ranks} ranks passed)\n{out}\n{err}",
        status.map_or_else(|| "timed out".to_string(), |s| s.to_string())
    );
}
