//! `nuvec serve` through real clients: OpenAI's Python package (pinned in .ci/run) and curl,
//! streamed and whole, give `nuvec generate`'s text for the same seed. Without the package or
//! curl the test says SKIPPED with the reason, and fails instead when CI asks for them
//! (`NUVEC_REQUIRE_OPENAI=1`, `NUVEC_REQUIRE_CURL=1`).

mod serve_support;

use nuvec_test_support::skip;
use serde_json::Value;
use serve_support::{generate, Server};
use std::path::PathBuf;
use std::process::Command;

const MODEL: &str = "qwen3-f32";
const KEY: &str = "client-test-key";

fn required(variable: &str) -> bool {
    std::env::var(variable).is_ok_and(|v| v == "1")
}

/// A Python with the `openai` package: `NUVEC_PYTHON`, the repository's .venv-mlx, or
/// python3.
fn python_with_openai() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidates = [
        std::env::var_os("NUVEC_PYTHON").map(PathBuf::from),
        Some(root.join(".venv-mlx/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|python| {
        Command::new(python)
            .args(["-c", "import openai"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn the_openai_python_client_gets_nuvec_generates_text_whole_and_streamed() {
    let Some(python) = python_with_openai() else {
        let reason = "the `openai` Python package is not installed (pip install openai==1.109.1)";
        assert!(!required("NUVEC_REQUIRE_OPENAI"), "{reason}");
        return skip(&format!("serve_clients: {reason}"));
    };
    let server = Server::start(MODEL, 1, &["--api-key", KEY], &[]);
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/serve/openai_client.py");
    for (prompt, seed, temp) in [("hello there", "4", "0.0"), ("a long story", "11", "0.9")] {
        let output = Command::new(&python)
            .arg(&script)
            .arg(format!("http://{}/v1", server.address))
            .args([KEY, prompt, seed, "14", temp])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&output.stderr),
            server.log()
        );
        let got: Value = serde_json::from_slice(&output.stdout).unwrap();
        let args = [
            "--prompt",
            prompt,
            "--max-tokens",
            "14",
            "--temp",
            temp,
            "--seed",
            seed,
        ];
        let expected = generate(MODEL, &args);
        assert_eq!(got["chat"], expected.as_str(), "{got}");
        assert_eq!(got["streamed"], expected.as_str(), "{got}");
        assert_eq!(got["streamed_finish"], got["chat_finish"]);
        assert_eq!(got["streamed_usage"], got["chat_usage"]);
        let raw = generate(MODEL, &[&args[..], &["--ignore-chat-template"]].concat());
        assert_eq!(got["completion"], raw.as_str());
        assert_eq!(got["not_found"], 404);
        assert_eq!(got["unauthorized"], 401);
    }
}

#[test]
fn curl_gets_nuvec_generates_text_whole_and_streamed() {
    if Command::new("curl").arg("--version").output().is_err() {
        let reason = "curl is not installed";
        assert!(!required("NUVEC_REQUIRE_CURL"), "{reason}");
        return skip(&format!("serve_clients: {reason}"));
    }
    let server = Server::start(MODEL, 1, &[], &[]);
    let expected = generate(
        MODEL,
        &[
            "--prompt",
            "hi",
            "--max-tokens",
            "10",
            "--seed",
            "2",
            "--temp",
            "0.7",
        ],
    );
    let body = r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "seed": 2, "temperature": 0.7"#;
    let curl = |body: String| {
        let output = Command::new("curl")
            .args([
                "-sS",
                "-N",
                "-H",
                "Content-Type: application/json",
                "-d",
                &body,
            ])
            .arg(format!("http://{}/v1/chat/completions", server.address))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let whole: Value = serde_json::from_str(&curl(format!("{body}}}"))).unwrap();
    assert_eq!(whole["choices"][0]["message"]["content"], expected.as_str());
    let streamed = curl(format!("{body}, \"stream\": true}}"));
    let events: Vec<String> = (streamed.lines())
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(serve_support::streamed_text(&events), expected);
}
