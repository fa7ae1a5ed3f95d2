//! `nuvec launch` end to end: the environment each rank gets, exit status, cleanup of whole
//! process groups on failure and on Ctrl-C, output prefixes, stdin broadcast, idle CPU, the
//! port check, keys, and nuvec programs under both launchers.

use nuvec_test_support::ranks::{example, free_port_range, launch_on_free_ports};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nuvec() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nuvec"))
}

fn launch(n: usize, extra: &[&str], script: &str) -> Output {
    launch_on_free_ports(n, |port| {
        nuvec()
            .args(["launch", "-n", &n.to_string(), "-p", &port.to_string()])
            .args(extra)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("running nuvec launch")
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether process `pid` still runs (a zombie waiting for its reaper counts as ended).
fn is_alive(pid: &str) -> bool {
    let pid = pid.trim();
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
        return !matches!(state, Some(Some('Z' | 'X')));
    }
    Command::new("kill")
        .args(["-0", pid])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nuvec-launch-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn one_two_and_four_local_ranks_get_the_environment_mlx_launch_writes() {
    for n in [1, 2, 4] {
        let output = launch(
            n,
            &["--env", "GREETING=hello world"],
            r#"echo "rank=$MLX_RANK greeting=$GREETING hostfile=$(cat "$MLX_HOSTFILE")""#,
        );
        assert!(
            output.status.success(),
            "{n} ranks: {}",
            text(&output.stderr)
        );
        let stdout = text(&output.stdout);
        for rank in 0..n {
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("[{rank}] rank={rank} ")))
                .unwrap_or_else(|| panic!("no line from rank {rank}: {stdout}"));
            assert!(line.contains("greeting=hello world"), "{line}");
            if n == 1 {
                assert!(
                    line.ends_with("hostfile="),
                    "one rank gets an empty hostfile: {line}"
                );
            } else {
                let entries = line.matches("127.0.0.1:").count();
                assert_eq!(entries, n, "{line}");
            }
        }
    }
}

#[test]
fn a_failing_rank_ends_every_rank_and_its_children_and_sets_the_exit_status() {
    let dir = scratch("failing");
    let script = format!(
        r#"sleep 60 & echo $! > {dir}/child-$MLX_RANK; echo $$ > {dir}/rank-$MLX_RANK
           if [ "$MLX_RANK" = 2 ]; then sleep 0.5; exit 7; fi; wait"#,
        dir = dir.display()
    );
    let start = Instant::now();
    let output = launch(4, &[], &script);
    assert_eq!(output.status.code(), Some(7), "{}", text(&output.stderr));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
    assert!(text(&output.stderr).contains("rank 2 exited with status 7"));
    for entry in std::fs::read_dir(&dir).unwrap() {
        let pid = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!is_alive(&pid), "process {} survived", pid.trim());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn spawn_launcher(n: usize, script: &str) -> Child {
    let port = free_port_range(n).to_string();
    nuvec()
        .args([
            "launch",
            "-n",
            &n.to_string(),
            "-p",
            &port,
            "--",
            "sh",
            "-c",
            script,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for_files(dir: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(dir).unwrap().count() < count {
        assert!(Instant::now() < deadline, "the ranks never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
}

#[test]
fn ctrl_c_ends_every_rank_and_its_children_and_removes_temporary_files() {
    let dir = scratch("ctrl-c");
    let script = format!(
        r#"sleep 60 & echo $! > {dir}/child-$MLX_RANK; echo $$ > {dir}/rank-$MLX_RANK; wait"#,
        dir = dir.display()
    );
    let mut launcher = spawn_launcher(2, &script);
    wait_for_files(&dir, 4);
    let pid = launcher.id().to_string();
    let files: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("nuvec-launch-{pid}-"))
        })
        .collect();
    assert_eq!(
        files.len(),
        1,
        "the launcher's private directory exists while it runs"
    );
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    let start = Instant::now();
    let status = launcher.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(start.elapsed() < Duration::from_secs(10));
    for entry in std::fs::read_dir(&dir).unwrap() {
        let pid = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!is_alive(&pid), "process {} survived", pid.trim());
    }
    assert!(
        !files[0].path().exists(),
        "temporary files were left behind"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stdin_reaches_every_rank() {
    let mut launcher = spawn_launcher(3, r#"read line; echo "got $line""#);
    launcher
        .stdin
        .take()
        .unwrap()
        .write_all(b"the same line for all\n")
        .unwrap();
    let output = launcher.wait_with_output().unwrap();
    assert!(output.status.success());
    let stdout = text(&output.stdout);
    for rank in 0..3 {
        assert!(
            stdout.contains(&format!("[{rank}] got the same line for all")),
            "{stdout}"
        );
    }
}

#[test]
fn output_lines_are_prefixed_per_rank_with_stdout_and_stderr_apart() {
    let output = launch(2, &[], r#"echo out-$MLX_RANK; echo err-$MLX_RANK >&2"#);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    for rank in 0..2 {
        assert!(
            stdout.contains(&format!("[{rank}] out-{rank}\n")),
            "{stdout}"
        );
        assert!(
            stderr.contains(&format!("[{rank}] err-{rank}\n")),
            "{stderr}"
        );
        assert!(!stdout.contains("err-") && !stderr.contains("out-"));
    }
    let output = launch(2, &["--no-prefix"], "echo plain");
    assert_eq!(text(&output.stdout), "plain\nplain\n");
}

#[test]
fn print_hostfile_shows_each_rank_without_running_anything() {
    let output = nuvec()
        .args(["launch", "-n", "2", "--print-hostfile", "--", "false"])
        .env_remove("NUVEC_DISTRIBUTED_KEY")
        .output()
        .unwrap();
    assert!(output.status.success());
    let stdout = text(&output.stdout);
    assert!(stdout.contains("rank 1 on 127.0.0.1 (local)"), "{stdout}");
    assert!(stdout.contains("MLX_RANK=1"), "{stdout}");
    assert!(stdout.contains(r#"MLX_HOSTFILE=<file> [["127.0.0.1:32323"], ["127.0.0.1:32324"]]"#));
    assert!(
        stdout.contains("NUVEC_DISTRIBUTED_KEY=<generated>"),
        "{stdout}"
    );
}

#[test]
fn a_port_in_use_is_reported_before_any_rank_starts() {
    let dir = scratch("port");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let output = nuvec()
        .args(["launch", "-n", "2", "-p", &port, "--", "sh", "-c"])
        .arg(format!("touch {}/ran-$MLX_RANK", dir.display()))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!("127.0.0.1:{port} is not free"))
            && stderr.contains("--starting-port"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "a rank ran");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_launch_hands_all_ranks_one_fresh_key() {
    let keys = |output: &Output| -> Vec<String> {
        text(&output.stdout)
            .lines()
            .map(|l| l.split_once("] ").unwrap().1.to_string())
            .collect()
    };
    let script = r#"echo "$NUVEC_DISTRIBUTED_KEY""#;
    let first = Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args([
            "launch",
            "-n",
            "3",
            "-p",
            &free_port_range(3).to_string(),
            "--",
            "sh",
            "-c",
            script,
        ])
        .env_remove("NUVEC_DISTRIBUTED_KEY")
        .output()
        .unwrap();
    let first = keys(&first);
    assert_eq!(first.len(), 3);
    assert!(first.iter().all(|k| k == &first[0]), "{first:?}");
    assert_eq!(first[0].len(), 64);
    assert!(first[0].chars().all(|c| c.is_ascii_hexdigit()));
    let second = Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args(["launch", "-n", "1", "--", "sh", "-c", script])
        .env_remove("NUVEC_DISTRIBUTED_KEY")
        .output()
        .unwrap();
    assert_ne!(keys(&second)[0], first[0]);
    // A key the user set is the one every rank gets.
    let chosen = Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args(["launch", "-n", "1", "--", "sh", "-c", script])
        .env("NUVEC_DISTRIBUTED_KEY", "my own key of enough length")
        .output()
        .unwrap();
    assert_eq!(keys(&chosen), ["my own key of enough length"]);
}

/// User + system CPU seconds of process `pid` so far (Linux's /proc).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().ok()? + fields[12].parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

#[test]
fn the_launcher_uses_no_cpu_while_ranks_run() {
    let mut launcher = spawn_launcher(2, "sleep 3");
    std::thread::sleep(Duration::from_millis(500));
    let Some(before) = cpu_seconds(launcher.id()) else {
        nuvec_test_support::skip("reading CPU time needs Linux's /proc");
        let _ = launcher.wait();
        return;
    };
    std::thread::sleep(Duration::from_secs(2));
    let after = cpu_seconds(launcher.id()).unwrap();
    assert!(launcher.wait().unwrap().success());
    // mlx.launch spins about 1.3 cores; idle threads blocked on pipes use nothing.
    assert!(
        after - before < 0.05,
        "the launcher used {:.2} s of CPU in 2 s",
        after - before
    );
}

/// Each rank's result lines, without prefixes, sorted.
fn results(stdout: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = text(stdout)
        .lines()
        .filter(|l| l.contains("all_sum"))
        .map(|l| l.split_once("] ").map_or(l, |(_, rest)| rest).to_string())
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_nuvec_program_gives_the_same_results_under_nuvec_launch_and_mlx_launch() {
    let program = example("hello_distributed");
    let ours = nuvec()
        .args([
            "launch",
            "-n",
            "4",
            "-p",
            &free_port_range(4).to_string(),
            "--",
        ])
        .arg(&program)
        .output()
        .unwrap();
    assert!(ours.status.success(), "{}", text(&ours.stderr));
    let ours = results(&ours.stdout);
    assert_eq!(ours.len(), 4, "{ours:?}");
    assert!(
        ours[0].starts_with("rank 0 of 4: all_sum = array([4, 8, 12], dtype=float32)"),
        "{ours:?}"
    );

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mlx_launch = std::env::var_os("NUVEC_MLX_LAUNCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv-mlx/bin/mlx.launch"));
    if !mlx_launch.exists() {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_MLX_LAUNCH").is_none(),
            "NUVEC_REQUIRE_MLX_LAUNCH is set but {} is missing",
            mlx_launch.display()
        );
        nuvec_test_support::skip(&format!(
            "the mlx.launch half: {} is missing (pip install \"mlx[cpu]==0.32.4\" into .venv-mlx)",
            mlx_launch.display()
        ));
        return;
    }
    let theirs = Command::new(&mlx_launch)
        .args([
            "--backend",
            "ring",
            "-n",
            "4",
            "--starting-port",
            &free_port_range(4).to_string(),
            "--",
        ])
        .arg(&program)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(results(&theirs.stdout), ours, "{}", text(&theirs.stderr));
}

#[test]
fn the_mpi_backend_hands_the_launch_to_mpirun_without_the_key_on_its_command_line() {
    // A stand-in mpirun that shows what it was given.
    let dir = scratch("mpirun");
    let fake = dir.join("mpirun");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"args: $*\"\nwhile [ \"$1\" != --hostfile ]; do shift; done\necho \"hosts: $(cat \"$2\" | tr '\\n' ';')\"\necho \"key: ${#NUVEC_DISTRIBUTED_KEY}\"\nexit 5\n",
    )
    .unwrap();
    Command::new("chmod")
        .args(["+x"])
        .arg(&fake)
        .status()
        .unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = nuvec()
        .args([
            "launch",
            "--backend",
            "mpi",
            "--hosts",
            "h1,h2",
            "-n",
            "2",
            "--env",
            "A=1",
            // ./prog is on the hosts h1 and h2 only.
            "--no-verify-script",
        ])
        .args(["--mpi-arg", "--bind-to none", "--", "./prog", "x"])
        .env("PATH", &path)
        .env_remove("NUVEC_DISTRIBUTED_KEY")
        .output()
        .unwrap();
    // mpirun's status is the launcher's.
    assert_eq!(output.status.code(), Some(5), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("-x A=1 -x NUVEC_DISTRIBUTED_KEY --bind-to none -- ./prog x"),
        "{stdout}"
    );
    assert!(stdout.contains("hosts: h1 slots=2;h2 slots=2;"), "{stdout}");
    assert!(stdout.contains("key: 64"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_hello_distributed_example_runs_under_nuvec_launch_backend_mpi_with_open_mpi() {
    let Some(_) = nuvec_test_support::mpi::mpirun("launch --backend mpi") else {
        return;
    };
    let example = example("hello_distributed");
    for n in [2, 4] {
        let output = nuvec()
            .args([
                "launch",
                "--backend",
                "mpi",
                "-n",
                &n.to_string(),
                "--verbose",
                "--",
            ])
            .arg(&example)
            .stdin(Stdio::null())
            .output()
            .expect("running nuvec launch");
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert!(output.status.success(), "-n {n}: {stdout}\n{stderr}");
        for rank in 0..n {
            // Each line keeps its rank's prefix, as under the other backends.
            let line = format!(
                "[{rank}] rank {rank} of {n}: all_sum = array([{n}, {}, {}]",
                2 * n,
                3 * n
            );
            assert!(
                stdout.lines().any(|l| l.starts_with(&line)),
                "-n {n}: no line starting {line:?} in\n{stdout}\n{stderr}"
            );
        }
        // Open MPI 4 is told nothing it rejects (mlx.launch passes `--output :raw`), and
        // `--verbose` shows the mpirun command.
        assert!(!stderr.contains("unknown option"), "{stderr}");
        assert!(
            stderr.contains("[nuvec launch] ") && stderr.contains("mpirun"),
            "{stderr}"
        );
    }
}
