//! Remote ranks through ssh: the test starts Debian's sshd on a loopback port with throwaway
//! keys and launches one rank "remotely" on this machine through it. Needs root and
//! openssh-server; without them it says so and skips, unless `NUVEC_REQUIRE_SSHD` is set (CI
//! installs openssh-server and sets it).

use nuvec_test_support::ranks::{example, free_port_range, free_ports};
use nuvec_test_support::sshd::SshServers;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Starts sshd on a free loopback port, named `nuvec-remote` in the client config.
fn start_sshd(tag: &str) -> Result<SshServers, String> {
    let mut servers = SshServers::new(tag)?;
    servers.start("nuvec-remote", "127.0.0.1", free_ports(1)[0], None, "")?;
    Ok(servers)
}

fn sshd_or_skip(tag: &str) -> Option<SshServers> {
    match start_sshd(tag) {
        Ok(server) => Some(server),
        Err(reason) => {
            assert!(
                std::env::var_os("NUVEC_REQUIRE_SSHD").is_none(),
                "NUVEC_REQUIRE_SSHD is set but sshd cannot be started: {reason}"
            );
            nuvec_test_support::skip(&format!("cannot start a local sshd ({reason})"));
            None
        }
    }
}

/// Launches with rank 0 on `nuvec-remote` (through sshd) and rank 1 local.
fn launch_half_remote(server: &SshServers, command: &[&str]) -> Output {
    let hostfile = server.dir.join("hosts.json");
    std::fs::write(
        &hostfile,
        r#"[{"ssh": "nuvec-remote", "ips": ["127.0.0.1"]}, {"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}]"#,
    )
    .unwrap();
    let ssh = format!("ssh -F {}", server.client_config());
    let port = free_port_range(2).to_string();
    Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args(["launch", "--hostfile"])
        .arg(&hostfile)
        .args(["--ssh", &ssh, "-p", &port, "--grace", "3", "--"])
        .args(command)
        .stdin(Stdio::null())
        .env_remove("NUVEC_DISTRIBUTED_KEY")
        .output()
        .unwrap()
}

#[test]
fn a_rank_started_through_ssh_joins_the_group_with_the_same_key() {
    let Some(server) = sshd_or_skip("group") else {
        return;
    };
    let program = example("hello_distributed");
    let output = launch_half_remote(&server, &[program.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Both ranks authenticated with the launcher's fresh key: rank 0 got it over ssh's stdin.
    assert!(
        stdout.contains("[0] rank 0 of 2: all_sum = array([2, 4, 6], dtype=float32)"),
        "{stdout}"
    );
    assert!(stdout.contains("[1] rank 1 of 2: all_sum"), "{stdout}");
}

#[test]
fn a_failing_local_rank_ends_the_remote_rank_and_its_children() {
    let Some(server) = sshd_or_skip("failing") else {
        return;
    };
    let marks = server.dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let script = format!(
        r#"if [ "$MLX_RANK" = 0 ]; then sleep 60 & echo $! > {m}/child; echo $$ > {m}/rank; wait;
           else sleep 1; exit 3; fi"#,
        m = marks.display()
    );
    let start = Instant::now();
    let output = launch_half_remote(&server, &["sh", "-c", &script]);
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(start.elapsed() < Duration::from_secs(30));
    for name in ["child", "rank"] {
        let pid = std::fs::read_to_string(marks.join(name)).expect("the remote rank started");
        let alive =
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|stat| {
                !stat
                    .rsplit_once(") ")
                    .is_some_and(|(_, s)| s.starts_with('Z'))
            });
        assert!(!alive, "remote {name} {} survived", pid.trim());
    }
}
