//! `nuvec serve` through real clients: OpenAI's Python package (pinned in .ci/run) and curl,
//! streamed and whole, give `nuvec generate`'s text for the same seed; mlx_lm.server (mlx-lm
//! 0.32.2) answers the same requests with the same text and counts. Without the package, curl
//! or mlx-lm a test says SKIPPED with the reason, and fails instead when CI asks for them
//! (`NUVEC_REQUIRE_OPENAI=1`, `NUVEC_REQUIRE_CURL=1`, `NUVEC_REQUIRE_MLX_LM=1`).

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

/// The repository's MLX venv when mlx-lm is installed in it.
fn python_with_mlx_lm() -> Option<PathBuf> {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-mlx/bin/python");
    let works = Command::new(&python)
        .args(["-c", "import mlx_lm"])
        .output()
        .is_ok_and(|o| o.status.success());
    works.then_some(python)
}

#[test]
fn the_same_requests_get_mlx_lm_servers_text_and_counts() {
    let Some(python) = python_with_mlx_lm() else {
        let reason = "mlx-lm is not installed in .venv-mlx (pip install mlx-lm==0.32.2)";
        assert!(!required("NUVEC_REQUIRE_MLX_LM"), "{reason}");
        return skip(&format!("serve_clients: {reason}"));
    };
    let ours = Server::start(MODEL, 1, &[], &[]);
    let port = nuvec_test_support::ranks::free_ports(1)[0];
    let theirs = Command::new(&python)
        .args(["-m", "mlx_lm", "server", "--model"])
        .arg(serve_support::fixture(MODEL))
        .args(["--port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Stopped however the test ends.
    let _theirs = KillOnDrop(theirs);
    let address = format!("127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let up = || {
        std::net::TcpStream::connect(&address).is_ok()
            && serve_support::http(&address, "GET", "/health", &[], b"").0 == 200
    };
    while !up() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "mlx_lm.server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let requests = [
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16}"#,
        ),
        (
            "/v1/chat/completions",
            r#"{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why?"}], "max_tokens": 40}"#,
        ),
        (
            "/v1/completions",
            r#"{"prompt": "once upon a time", "max_tokens": 12}"#,
        ),
        (
            "/v1/completions",
            r#"{"prompt": "the end", "max_tokens": 200}"#,
        ),
        (
            "/v1/completions",
            r#"{"prompt": "once", "max_tokens": 8, "logit_bias": {"264": 3.0}, "repetition_penalty": 1.3}"#,
        ),
    ];
    for (path, body) in requests {
        let answer = |address: &str| -> Value {
            let (status, text) = serve_support::http(address, "POST", path, &[], body.as_bytes());
            assert_eq!(status, 200, "{address}{path} {body}: {text}");
            serde_json::from_str(&text).unwrap()
        };
        let (a, b) = (answer(&ours.address), answer(&address));
        let choice = |v: &Value| {
            let c = &v["choices"][0];
            (
                c["message"]["content"]
                    .as_str()
                    .or_else(|| c["text"].as_str())
                    .map(str::to_string),
                c["finish_reason"].clone(),
            )
        };
        assert_eq!(choice(&a), choice(&b), "{path} {body}");
        for count in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            assert_eq!(
                a["usage"][count], b["usage"][count],
                "{path} {body}: {count}"
            );
        }
        assert_eq!(a["object"], b["object"]);
    }
}

/// A child process killed when this goes out of scope.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}
