//! Remote ranks through ssh: the test starts Debian's sshd on a loopback port with throwaway
//! keys and launches one rank "remotely" on this machine through it. Needs root and
//! openssh-server; without them it says so and skips, unless `NUVEC_REQUIRE_SSHD` is set (CI
//! installs openssh-server and sets it).

use nuvec_test_support::ranks::{example, free_port_range, free_ports};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Sshd {
    dir: PathBuf,
    child: Child,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Starts sshd on a free loopback port; writes an ssh client config naming it `nuvec-remote`.
fn start_sshd(tag: &str) -> Result<Sshd, String> {
    let sshd = Path::new("/usr/sbin/sshd");
    if !sshd.exists() {
        return Err("/usr/sbin/sshd is missing (apt-get install openssh-server)".into());
    }
    let dir = std::env::temp_dir().join(format!("nuvec-sshd-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    for key in ["host_key", "client_key"] {
        run(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-f", &path(key)],
        )?;
    }
    std::fs::copy(path("client_key.pub"), path("authorized_keys")).map_err(|e| e.to_string())?;
    let port = free_ports(1)[0];
    std::fs::write(
        path("sshd_config"),
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\n\
             StrictModes no\nUsePAM no\nPermitRootLogin yes\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n",
            path("host_key"),
            path("sshd.pid"),
            path("authorized_keys")
        ),
    )
    .map_err(|e| e.to_string())?;
    let user = String::from_utf8_lossy(
        &Command::new("id")
            .arg("-un")
            .output()
            .map_err(|e| e.to_string())?
            .stdout,
    )
    .trim()
    .to_string();
    std::fs::write(
        path("ssh_config"),
        format!(
            "Host nuvec-remote\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {}\n  \
             IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n",
            path("client_key")
        ),
    )
    .map_err(|e| e.to_string())?;
    let _ = std::fs::create_dir_all("/run/sshd");
    let child = Command::new(sshd)
        .args(["-D", "-e", "-f", &path("sshd_config")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting sshd: {e}"))?;
    let client_config = path("ssh_config");
    let server = Sshd {
        dir: dir.clone(),
        child,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let probe = Command::new("ssh")
            .args([
                "-F",
                &client_config,
                "-o",
                "BatchMode=yes",
                "nuvec-remote",
                "true",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running ssh: {e}"))?;
        if probe.status.success() {
            return Ok(server);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "sshd did not accept us: {}",
                String::from_utf8_lossy(&probe.stderr)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sshd_or_skip(tag: &str) -> Option<Sshd> {
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
fn launch_half_remote(server: &Sshd, command: &[&str]) -> Output {
    let hostfile = server.dir.join("hosts.json");
    std::fs::write(
        &hostfile,
        r#"[{"ssh": "nuvec-remote", "ips": ["127.0.0.1"]}, {"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}]"#,
    )
    .unwrap();
    let ssh = format!("ssh -F {}", server.dir.join("ssh_config").display());
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
