//! What ranks say while their group forms: one line per rank when it is still forming after a
//! few seconds, errors that name the variable setting the timeout, and the formation's log
//! under `MLX_RING_VERBOSE` (what `nuvec launch --verbose` and mlx.launch set).

use nuvec_test_support::ranks::{example, free_ports, write_hostfile};
use std::process::{Command, Output};

/// Runs the spec's first example as rank `rank` of the group in `hostfile`.
fn rank(hostfile: &std::path::Path, rank: usize, env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(example("hello_distributed"));
    command
        .env("MLX_RANK", rank.to_string())
        .env("MLX_HOSTFILE", hostfile)
        .envs(env.iter().copied());
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_rank_waiting_for_its_peer_says_so_once_and_its_timeout_names_the_variable() {
    let ports = free_ports(2);
    let hostfile = write_hostfile(&ports);
    // Rank 1 never starts.
    let output = rank(&hostfile, 0, &[("NUVEC_DISTRIBUTED_TIMEOUT", "7")])
        .output()
        .expect("running rank 0");
    let text = stderr(&output);
    assert!(!output.status.success(), "{text}");
    let expected = format!(
        "rank 0: waiting for rank 1 at 127.0.0.1:{}; gives up after 7 s, NUVEC_DISTRIBUTED_TIMEOUT",
        ports[1]
    );
    assert_eq!(text.matches(&expected).count(), 1, "{text}");
    let error = text
        .lines()
        .find(|l| l.starts_with("Error: "))
        .unwrap_or("");
    assert!(
        error.contains("[init] rank 1:")
            && error.contains("within 7 s (NUVEC_DISTRIBUTED_TIMEOUT)"),
        "{text}"
    );
    let _ = std::fs::remove_file(hostfile);
}

#[test]
fn mlx_ring_verbose_logs_each_connection_and_handshake() {
    let ports = free_ports(2);
    let hostfile = write_hostfile(&ports);
    let verbose = [
        ("MLX_RING_VERBOSE", "1"),
        ("NUVEC_DISTRIBUTED_TIMEOUT", "30"),
    ];
    let children: Vec<_> = (0..2)
        .map(|r| rank(&hostfile, r, &verbose).spawn_output())
        .collect();
    let outputs: Vec<Output> = children.into_iter().map(|c| c.join()).collect();
    for (r, output) in outputs.iter().enumerate() {
        let text = stderr(output);
        assert!(output.status.success(), "rank {r}: {text}");
        // Rank 0 opens both connections of the pair (`tcp/pairs.rs`); rank 1 accepts them.
        let sides = match r {
            0 => [
                format!("connected to rank 1 at 127.0.0.1:{}", ports[1]),
                "handshake with rank 1 done".to_string(),
            ],
            _ => [
                "accepted rank 0 from 127.0.0.1:".to_string(),
                format!("listening on 127.0.0.1:{}", ports[1]),
            ],
        };
        for needle in [
            format!("[ring] rank {r} at "),
            format!("listening on 127.0.0.1:{}", ports[r]),
            "group of 2 formed".to_string(),
        ]
        .into_iter()
        .chain(sides)
        {
            assert!(text.contains(&needle), "rank {r}: no {needle:?} in\n{text}");
        }
    }
    // Without the variable, a group that forms at once says nothing.
    let quiet: Vec<_> = (0..2)
        .map(|r| rank(&hostfile, r, &[("NUVEC_DISTRIBUTED_TIMEOUT", "30")]).spawn_output())
        .collect();
    for output in quiet.into_iter().map(|c| c.join()) {
        assert!(output.status.success());
        assert_eq!(stderr(&output), "");
    }
    let _ = std::fs::remove_file(hostfile);
}

/// A command running on its own thread.
trait SpawnOutput {
    fn spawn_output(self) -> Running;
}

struct Running(std::thread::JoinHandle<Output>);

impl Running {
    fn join(self) -> Output {
        self.0.join().expect("rank thread")
    }
}

impl SpawnOutput for Command {
    fn spawn_output(mut self) -> Running {
        Running(std::thread::spawn(move || {
            self.output().expect("running a rank")
        }))
    }
}
