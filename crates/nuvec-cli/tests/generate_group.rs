//! `nuvec generate` and `nuvec chat` started by `nuvec launch` on 2 ranks split the model
//! over the group (tensor parallel, or `--pipeline` stages) and print once, on rank 0, what one process prints
//! (rank 0 reads standard input and hands it to the other rank).

use nuvec_test_support::ranks::launch_on_free_ports;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../nuvec-lm/tests/fixtures")
        .join(name)
}

/// `nuvec ARGS` as one process, or as `ranks` ranks under `nuvec launch`, with `input` on
/// standard input.
fn run(ranks: usize, args: &[&str], input: &str) -> Output {
    let start = |mut command: Command| {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting nuvec");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    if ranks == 1 {
        let mut command = Command::new(env!("CARGO_BIN_EXE_nuvec"));
        command.args(args);
        return start(command);
    }
    launch_on_free_ports(ranks, |port| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_nuvec"));
        command
            .args(["launch", "-n", &ranks.to_string(), "-p", &port.to_string()])
            .args(["--no-prefix", "--"])
            .arg(env!("CARGO_BIN_EXE_nuvec"))
            .args(args);
        start(command)
    })
}

fn stdout_of(output: &Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn generate_on_two_ranks_prints_once_what_one_process_prints() {
    for name in ["llama-f32", "qwen3-q4", "qwen3_moe-f32"] {
        let dir = fixture(name);
        let args = [
            "generate",
            "--model",
            dir.to_str().unwrap(),
            "--prompt",
            "-",
            "--max-tokens",
            "24",
            "--verbose",
            "false",
        ];
        let alone = stdout_of(&run(1, &args, "Tell me about the fox."), name);
        let split = stdout_of(&run(2, &args, "Tell me about the fox."), name);
        assert!(!alone.trim().is_empty(), "{name}: no completion");
        assert_eq!(split, alone, "{name}: 2 ranks against one process");
    }
}

#[test]
fn generate_in_two_pipeline_stages_prints_once_what_one_process_prints() {
    let dir = fixture("qwen3_moe-q4");
    let mut args = vec![
        "generate",
        "--model",
        dir.to_str().unwrap(),
        "--prompt",
        "The weather was cold",
        "--ignore-chat-template",
        "--max-tokens",
        "24",
        "--verbose",
        "false",
    ];
    let alone = stdout_of(&run(1, &args, ""), "one process");
    args.push("--pipeline");
    let split = stdout_of(&run(2, &args, ""), "2 pipeline stages");
    assert!(!alone.trim().is_empty(), "no completion");
    assert_eq!(split, alone);
    args.extend(["--pipeline-split", "2,0"]);
    let refused = run(2, &args, "");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("pipeline split [2, 0]"), "{stderr}");
}

#[test]
fn chat_on_two_ranks_answers_as_one_process() {
    let dir = fixture("qwen2-f32");
    let args = [
        "chat",
        "--model",
        dir.to_str().unwrap(),
        "--max-tokens",
        "16",
    ];
    let input = "Tell me about the fox.\nAnd the dog?\nq\n";
    let alone = stdout_of(&run(1, &args, input), "chat");
    let split = stdout_of(&run(2, &args, input), "chat on 2 ranks");
    assert_eq!(alone.matches(">> ").count(), 3, "{alone}");
    // The launcher ends an unfinished last line (the final prompt) with a newline.
    assert_eq!(split.trim_end(), alone.trim_end());
}
