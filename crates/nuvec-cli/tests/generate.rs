//! `nuvec generate` prints what `mlx_lm.generate` prints for the same model folder and
//! options (the fixtures of crates/nuvec-lm, made by scripts/golden/make_lm_fixtures.py),
//! and a bad folder is an error on standard error with a failing status.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../nuvec-lm/tests/fixtures")
        .join(name)
}

/// The completion between the two `==========` lines, and the lines after.
fn split(stdout: &str) -> (String, Vec<String>) {
    let body = stdout
        .strip_prefix("==========\n")
        .expect("starts with the separator");
    let (completion, rest) = body
        .split_once("\n==========\n")
        .expect("a closing separator");
    (
        completion.to_string(),
        rest.lines().map(str::to_string).collect(),
    )
}

#[test]
fn generate_prints_mlx_lm_generates_completion() {
    let mut compared = 0;
    for name in [
        "llama-f32",
        "mistral-f32",
        "qwen2-f32",
        "qwen3-f32",
        "qwen3_moe-f32",
        "qwen2-q4",
        "qwen3-q4",
        "llama-q4",
        "qwen3_moe-q4",
    ] {
        let dir = fixture(name);
        let expected: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap())
                .unwrap();
        for run in expected["cli"].as_array().unwrap() {
            let args: Vec<String> = run["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| {
                    a.as_str()
                        .unwrap()
                        .replace("MODEL_DIR", dir.to_str().unwrap())
                })
                .collect();
            if args.iter().any(|a| a == "--seed") {
                // mlx_lm.generate seeds before building the model, whose initialisation
                // draws keys; nuvec loads without drawing, so seeded runs start elsewhere.
                continue;
            }
            let gaps: Vec<f64> = run["top_gaps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g.as_f64().unwrap())
                .collect();
            if name.ends_with("q4") && gaps.iter().any(|&g| g < 0.01) {
                continue; // a near-tie: either token is right
            }
            let output = Command::new(env!("CARGO_BIN_EXE_nuvec"))
                .arg("generate")
                .args(&args)
                .output()
                .unwrap();
            let stdout = String::from_utf8(output.stdout).unwrap();
            assert!(
                output.status.success(),
                "{name} {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let (completion, stats) = split(&stdout);
            assert_eq!(
                completion,
                run["completion"].as_str().unwrap(),
                "{name} {args:?}"
            );
            let (_, want_stats) = split(run["stdout"].as_str().unwrap());
            assert_eq!(stats.len(), want_stats.len(), "{name}: {stdout}");
            for (got, want) in stats.iter().zip(&want_stats) {
                // The counts agree; the speeds and memory are this machine's.
                let label = |s: &str| {
                    s.split(',')
                        .next()
                        .unwrap_or("")
                        .split(':')
                        .next()
                        .unwrap_or("")
                        .to_string()
                };
                assert_eq!(label(got), label(want), "{name}: {stdout}");
                if !got.starts_with("Peak") {
                    assert_eq!(
                        got.split(',').next(),
                        want.split(',').next(),
                        "{name}: {stdout}"
                    );
                }
            }
            compared += 1;
        }
    }
    assert!(compared >= 14, "only {compared} runs compared");
}

#[test]
fn generate_reads_the_prompt_from_stdin_and_prints_only_text_without_verbose() {
    use std::io::Write;
    let dir = fixture("qwen2-f32");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args([
            "generate",
            "--model",
            dir.to_str().unwrap(),
            "--prompt",
            "-",
            "--max-tokens",
            "8",
            "--verbose",
            "false",
            "--ignore-chat-template",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"Our caf").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(!text.contains("=========="), "{text}");
    assert!(!text.trim().is_empty(), "{text:?}");
}

#[test]
fn generate_on_a_bad_folder_is_a_readable_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args(["generate", "--model", "/no/such/folder", "--prompt", "hi"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr.trim(),
        "nuvec generate: [load] /no/such/folder: not a folder"
    );
}

#[test]
fn chat_answers_each_turn_as_generate_does_and_starts_over_on_r() {
    use std::io::Write;
    let dir = fixture("qwen2-f32");
    let run = |input: &[u8]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nuvec"))
            .args([
                "chat",
                "--model",
                dir.to_str().unwrap(),
                "--max-tokens",
                "12",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success());
        String::from_utf8(output.stdout).unwrap()
    };
    let transcript = run(b"Tell me about the fox.\nAnd then?\nr\nTell me about the fox.\nq\n");
    let replies: Vec<&str> = transcript.split(">> ").skip(1).collect();
    assert_eq!(replies.len(), 5, "{transcript}");
    // The chat template with one user message is what `generate` feeds the model.
    let generated = Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args([
            "generate",
            "--model",
            dir.to_str().unwrap(),
            "--prompt",
            "Tell me about the fox.",
            "--max-tokens",
            "12",
            "--verbose",
            "false",
        ])
        .output()
        .unwrap();
    let generated = String::from_utf8(generated.stdout).unwrap();
    assert_eq!(replies[0], generated, "{transcript}");
    // After 'r' the conversation starts over and gives the first reply again.
    assert_eq!(replies[3], replies[0], "{transcript}");
    assert!(!replies[1].trim().is_empty(), "{transcript}");
}

#[test]
fn generate_on_a_device_that_cannot_run_says_why_and_cpu_runs() {
    let nuvec = env!("CARGO_BIN_EXE_nuvec");
    let model = fixture("qwen3-f32");
    let run = |device: &str| {
        Command::new(nuvec)
            .args(["generate", "--model"])
            .arg(&model)
            .args(["-m", "3", "--verbose", "false", "--device", device])
            .output()
            .unwrap()
    };
    let bad = run("tpu");
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("expected `cpu`, `gpu` or `gpu:N`"),
        "{stderr}"
    );
    let cpu = run("cpu");
    assert!(
        cpu.status.success(),
        "{}",
        String::from_utf8_lossy(&cpu.stderr)
    );
    if !nuvec_core::Device::Gpu(0).is_available() {
        let gpu = run("gpu");
        assert!(!gpu.status.success());
        let stderr = String::from_utf8_lossy(&gpu.stderr);
        assert!(
            stderr.contains("--device gpu") && stderr.contains("gpu:0"),
            "the error names the device and why: {stderr}"
        );
    }
}
