//! `nuvec launch` catches a user's mistakes before starting anything, says what it ignores,
//! names how a rank ended, and takes mlx.launch's remaining options.

use nuvec_test_support::ranks::launch_on_free_ports;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn nuvec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running nuvec")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A scratch directory with a marker file path that a started rank would create.
fn marker(name: &str) -> (PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("nuvec-mistakes-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("started");
    (dir, format!("touch {}", file.display()))
}

#[test]
fn an_unknown_option_is_an_error_with_a_suggestion_and_never_the_program() {
    let (dir, touch) = marker("unknown");
    for (option, suggestion) in [
        ("--np", "-n (--repeat-hosts"),
        ("-np", "-n (--repeat-hosts"),
        ("--host", "--hosts"),
        ("--hostfle", "--hostfile"),
        ("--starting_port", "-p/--starting-port"),
    ] {
        let output = nuvec(&["launch", option, "2", "--", "sh", "-c", &touch]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{option}: {stderr}");
        assert!(
            stderr.contains(&format!("unknown option {option}"))
                && stderr.contains(&format!("did you mean {suggestion}")),
            "{option}: {stderr}"
        );
    }
    let output = nuvec(&["launch", "--frobnicate", "--", "sh", "-c", &touch]);
    assert!(text(&output.stderr).contains("unknown option --frobnicate;"));
    assert!(!dir.join("started").exists(), "a rank started");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn options_the_program_takes_after_its_name_are_its_own() {
    let output = nuvec(&["launch", "sh", "-c", "echo got $0", "--np"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "[0] got --np\n");
}

#[test]
fn refused_values_say_which_option_to_use() {
    for (args, needle) in [
        (&["launch", "-p", "0", "--", "true"][..], "--starting-port"),
        (&["launch", "-n", "0", "--", "true"], "--repeat-hosts"),
        (
            &["launch", "--hosts", "127.0.0.1:5000", "--", "true"],
            "--starting-port",
        ),
        (&["launch", "--", "./no-such-program"], "--no-verify-script"),
        (&["launch", "--", "no-such-program-anywhere"], "on PATH"),
    ] {
        let output = nuvec(args);
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("[0]"), "{args:?} started a rank: {stderr}");
    }
}

#[test]
fn a_ring_hostfile_given_to_hostfile_is_explained() {
    let (dir, _) = marker("ringfile");
    let file = dir.join("ring.json");
    std::fs::write(&file, r#"[["127.0.0.1:5000"], ["127.0.0.1:5001"]]"#).unwrap();
    let output = nuvec(&["launch", "--hostfile", file.to_str().unwrap(), "--", "true"]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("MLX_HOSTFILE") && stderr.contains("\"ssh\""),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn options_made_moot_by_the_hostfile_are_warned_about() {
    let (dir, _) = marker("moot");
    let file = dir.join("hosts.json");
    std::fs::write(&file, r#"[{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}]"#).unwrap();
    let output = launch_on_free_ports(1, |port| {
        nuvec(&[
            "launch",
            "-p",
            &port.to_string(),
            "--hostfile",
            file.to_str().unwrap(),
            "--hosts",
            "127.0.0.1",
            "-n",
            "3",
            "--",
            "sh",
            "-c",
            "echo ran",
        ])
    });
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        text(&output.stdout),
        "[0] ran\n",
        "one rank, from the hostfile"
    );
    assert!(
        stderr.contains("warning: --hosts 127.0.0.1 is ignored"),
        "{stderr}"
    );
    assert!(stderr.contains("warning: -n 3 is ignored"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_rank_killed_by_a_signal_is_reported_with_the_signal_s_name() {
    let output = launch_on_free_ports(2, |port| {
        nuvec(&[
            "launch",
            "-n",
            "2",
            "-p",
            &port.to_string(),
            "--",
            "sh",
            "-c",
            "if [ $MLX_RANK = 1 ]; then kill -SEGV $$; fi; sleep 30",
        ])
    });
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(139), "{stderr}");
    assert!(
        stderr.contains("rank 1 was killed by SIGSEGV; ending the other ranks"),
        "{stderr}"
    );
}

#[test]
fn verbose_shows_each_rank_s_command_and_never_the_key() {
    let output = launch_on_free_ports(2, |port| {
        Command::new(env!("CARGO_BIN_EXE_nuvec"))
            .args(["launch", "-n", "2", "-p", &port.to_string(), "--verbose"])
            .args(["--", "sh", "-c", "true"])
            .env("NUVEC_DISTRIBUTED_KEY", "a-secret-key-of-32-characters-ok")
            .stdin(Stdio::null())
            .output()
            .expect("running nuvec")
    });
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    for rank in 0..2 {
        assert!(
            stderr.contains(&format!("rank {rank} (local, in "))
                && stderr.contains(&format!("MLX_RANK='{rank}'")),
            "{stderr}"
        );
    }
    assert!(stderr.contains("'sh' '-c' 'true'"), "{stderr}");
    assert!(!stderr.contains("a-secret-key"), "{stderr}");
}

#[test]
fn an_ssh_failure_names_ssh_and_the_host() {
    if Command::new("ssh").arg("-V").output().is_err() {
        assert!(
            std::env::var_os("NUVEC_REQUIRE_SSHD").is_none(),
            "NUVEC_REQUIRE_SSHD is set but there is no ssh client"
        );
        nuvec_test_support::skip("an_ssh_failure_names_ssh_and_the_host: no ssh client");
        return;
    }
    // Nothing listens on port 1 of 127.0.0.2, so ssh itself fails (status 255).
    let output = nuvec(&[
        "launch",
        "--hosts",
        "127.0.0.2",
        "--ssh",
        "ssh -p 1 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        "--",
        "true",
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(255), "{stderr}");
    assert!(
        stderr.contains("rank 0: ssh to 127.0.0.2 failed"),
        "{stderr}"
    );
}

#[test]
fn scripts_run_under_the_python_option_and_programs_as_they_are() {
    let (dir, _) = marker("python");
    let script = dir.join("job.py");
    std::fs::write(&script, "print('hi')\n").unwrap();
    // A stand-in interpreter that shows what it was given.
    let interpreter = dir.join("interpreter");
    std::fs::write(&interpreter, "#!/bin/sh\necho \"interpreter got $*\"\n").unwrap();
    let chmod = |path: &PathBuf| {
        Command::new("chmod").arg("+x").arg(path).status().unwrap();
    };
    chmod(&interpreter);
    let python = interpreter.to_str().unwrap();
    let output = nuvec(&[
        "launch",
        "--python",
        python,
        "--",
        script.to_str().unwrap(),
        "a",
    ]);
    assert_eq!(
        text(&output.stdout),
        format!("[0] interpreter got {} a\n", script.display()),
        "{}",
        text(&output.stderr)
    );
    // An executable program is run as it is, even with --python.
    let output = nuvec(&[
        "launch",
        "--python",
        python,
        "--",
        "sh",
        "-c",
        "echo direct",
    ]);
    assert_eq!(text(&output.stdout), "[0] direct\n");
    let output = nuvec(&["launch", "--python", python, "--print-python"]);
    assert_eq!(text(&output.stdout), format!("{python}\n"));
    // mlx.launch's --nccl-port is taken, and said to do nothing here.
    let output = nuvec(&["launch", "--nccl-port", "12345", "--", "true"]);
    assert!(output.status.success());
    assert!(text(&output.stderr).contains("--nccl-port"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn launch_help_has_examples_and_explains_repeat_hosts() {
    let output = nuvec(&["launch", "--help"]);
    let help = text(&output.stdout);
    assert!(help.contains("Examples:"), "{help}");
    assert!(help.contains("ranks 0,1 on a and 2,3 on b"), "{help}");
    for option in ["--print-python", "--no-verify-script", "--nccl-port"] {
        assert!(help.contains(option), "{option} missing from\n{help}");
    }
}

#[test]
fn nccl_ranks_get_mlx_launch_s_environment_and_a_nuvec_program_says_it_has_no_nccl() {
    let output = nuvec(&[
        "launch",
        "-n",
        "2",
        "--backend",
        "nccl",
        "--nccl-port",
        "23456",
        "--print-hostfile",
        "--",
        "true",
    ]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    for expected in [
        "NCCL_HOST_IP=127.0.0.1",
        "NCCL_PORT=23456",
        "MLX_WORLD_SIZE=2",
        "CUDA_VISIBLE_DEVICES=1",
    ] {
        assert!(stdout.contains(expected), "{expected}: {stdout}");
    }
    // A nuvec program started so fails at init, naming the reason, rather than running alone.
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../nuvec-lm/tests/fixtures/qwen3-f32");
    let model = dir.to_string_lossy();
    let nuvec_binary = env!("CARGO_BIN_EXE_nuvec");
    let output = nuvec(&[
        "launch",
        "-n",
        "2",
        "--backend",
        "nccl",
        "--",
        nuvec_binary,
        "generate",
        "--model",
        &model,
    ]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("launched for NCCL") && stderr.contains("the nccl backend cannot run here"),
        "{stderr}"
    );
}
