//! `cargo xtask bench-serve`: `nuvec serve` against `mlx_lm.server` on the same model folder
//! (Qwen2.5-0.5B's shape, made by `bench-lm`'s script), 1, 8 and 32 concurrent streaming
//! clients, the two servers alternating, one at a time: generated tokens per second over all
//! clients, and time to first token (p50, p99).
//!
//! Each client sends `--requests N` (2) completions one after another, each a prompt of
//! `--prompt N` (8) words, greedy, `--generate N` (16) tokens with the end tokens biased away
//! so both servers generate the same number; no seed, so mlx_lm.server batches them too.
//! Options: `--clients 1,8,32`, `--rounds N` (1), `--models DIR` (target/lm-bench),
//! `--only bf16|4bit` (bf16: MLX's 4-bit path on this CPU generates 0.28 tokens a second,
//! see docs/performance.md). The sizes are small because mlx_lm.server is slow here.

use crate::bench_lm::{make_models, option};
use crate::stats::percentile;
use crate::{run, workspace_root};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server under test, killed when dropped.
struct Server {
    child: Child,
    address: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

/// Waits until `GET /health` answers 200 (mlx_lm.server's `/v1/models` fails without a
/// Hugging Face cache).
fn wait_ready(server: &mut Server, within: Duration) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let Ok(Some(status)) = server.child.try_wait() {
            return Err(format!("the server exited early: {status}"));
        }
        if let Ok((200, _)) = request(&server.address, "GET", "/health", "") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "the server at {} did not answer within {within:?}",
        server.address
    ))
}

fn start(side: &str, model: &Path, python: &Path, root: &Path) -> Result<Server, String> {
    let port = free_port()?;
    let mut command = match side {
        "nuvec" => {
            let mut c = Command::new(root.join("target/release/nuvec"));
            c.args(["serve", "--model"]).arg(model);
            c
        }
        _ => {
            let mut c = Command::new(python);
            c.args(["-m", "mlx_lm.server", "--model"]).arg(model);
            c
        }
    };
    command
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = command
        .spawn()
        .map_err(|e| format!("starting {side}: {e}"))?;
    let mut server = Server {
        child,
        address: format!("127.0.0.1:{port}"),
    };
    wait_ready(&mut server, Duration::from_secs(120))?;
    Ok(server)
}

/// A whole exchange (for readiness and warm-up).
fn request(address: &str, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(address).map_err(|e| e.to_string())?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).map_err(|e| e.to_string())?;
    let status = (raw.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    Ok((status, raw))
}

/// One streamed completion: time to its first text, and the tokens generated.
fn streamed(address: &str, body: &str) -> Result<(Duration, usize), String> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(address).map_err(|e| e.to_string())?;
    write!(
        stream,
        "POST /v1/completions HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    // Server-sent events are lines; HTTP chunk sizes, if any, are lines of their own that
    // are not `data:`.
    let mut first = None;
    let mut tokens = 0;
    let mut usage = None;
    for line in BufReader::new(stream).lines() {
        let line = line.map_err(|e| e.to_string())?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data.trim() == "[DONE]" {
            break;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if let Some(n) = chunk["usage"]["completion_tokens"].as_u64() {
            usage = Some(n as usize);
        }
        let text = chunk["choices"][0]["text"].as_str().unwrap_or("");
        if !chunk["choices"][0].is_null() {
            tokens += 1;
        }
        if first.is_none() && !text.is_empty() {
            first = Some(started.elapsed());
        }
    }
    let first = first.ok_or("no text came back")?;
    Ok((first, usage.unwrap_or(tokens)))
}

/// The model's end tokens, from its config and generation config.
fn end_tokens(model: &Path) -> Vec<u64> {
    let mut ids = Vec::new();
    for file in ["config.json", "generation_config.json"] {
        let text = std::fs::read_to_string(model.join(file)).unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match &v["eos_token_id"] {
            Value::Number(n) => ids.extend(n.as_u64()),
            Value::Array(list) => ids.extend(list.iter().filter_map(Value::as_u64)),
            _ => {}
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// What one load measured.
struct Load {
    tokens_per_second: f64,
    /// Milliseconds to the first text of each request that succeeded.
    ttft: Vec<f64>,
    /// Requests that failed, and the first reason.
    failed: usize,
    reason: Option<String>,
}

/// One load: `clients` threads, each `requests` completions in turn.
fn load(
    address: &str,
    clients: usize,
    requests: usize,
    body: impl Fn(usize) -> String + Sync,
) -> Load {
    let started = Instant::now();
    let results: Vec<Vec<Result<(Duration, usize), String>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let body = &body;
                scope.spawn(move || {
                    (0..requests)
                        .map(|r| streamed(address, &body(c * requests + r)))
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut load = Load {
        tokens_per_second: 0.0,
        ttft: Vec::new(),
        failed: 0,
        reason: None,
    };
    let mut tokens = 0;
    for result in results.into_iter().flatten() {
        match result {
            Ok((first, n)) => {
                load.ttft.push(first.as_secs_f64() * 1e3);
                tokens += n;
            }
            Err(reason) => {
                load.failed += 1;
                load.reason.get_or_insert(reason);
            }
        }
    }
    load.tokens_per_second = tokens as f64 / elapsed;
    load.ttft.sort_by(f64::total_cmp);
    load
}

pub(crate) fn run_bench(args: &[String]) -> Result<(), String> {
    let number = |name: &str, default: &str| -> Result<usize, String> {
        option(args, name, default)
            .parse()
            .map_err(|_| format!("{name} needs a number"))
    };
    let (prompt, generate, requests, rounds) = (
        number("--prompt", "8")?,
        number("--generate", "16")?,
        number("--requests", "2")?,
        number("--rounds", "1")?,
    );
    let clients: Vec<usize> = option(args, "--clients", "1,8,32")
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .map_err(|_| format!("--clients: {c:?} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    let root = workspace_root();
    let models = root.join(option(args, "--models", "target/lm-bench"));
    let folder = match option(args, "--only", "bf16").as_str() {
        "4bit" => "qwen2.5-0.5b-shape-4bit",
        _ => "qwen2.5-0.5b-shape-bf16",
    };
    let python = make_models(&root, &models)?;
    run("cargo", &["build", "--release", "-p", "nuvec-cli"])?;
    let model = models.join(folder);
    let bias: serde_json::Map<String, Value> = (end_tokens(&model).into_iter())
        .map(|id| (id.to_string(), json!(-100)))
        .collect();
    // Distinct prompts (no prefix shared past the first words) of `prompt` words.
    let body = |i: usize| {
        let words: Vec<String> = (0..prompt)
            .map(|w| format!("w{}", (i * 7919 + w * 31) % 997))
            .collect();
        json!({"prompt": format!("request {i}: {}", words.join(" ")), "max_tokens": generate,
               "temperature": 0.0, "stream": true, "stream_options": {"include_usage": true},
               "logit_bias": bias})
        .to_string()
    };
    println!("model {folder}, prompt {prompt} words, {generate} generated, {requests} requests per client");
    println!("| clients | side | generated tok/s | TTFT p50 ms | TTFT p99 ms | failed requests |");
    println!("|---|---|---|---|---|---|");
    let mut summary = Vec::new();
    for &c in &clients {
        for round in 0..rounds {
            let mut figures = Vec::new();
            for side in ["nuvec", "mlx_lm"] {
                let server = start(side, &model, &python, &root)?;
                // Warm-up: one request, not counted.
                streamed(&server.address, &body(1_000_000))?;
                let load = load(&server.address, c, requests, body);
                let (p50, p99) = (percentile(&load.ttft, 50.0), percentile(&load.ttft, 99.0));
                let failed = match &load.reason {
                    Some(reason) => format!("{} of {} ({reason})", load.failed, c * requests),
                    None => "0".to_string(),
                };
                println!(
                    "| {c} (round {}) | {side} | {:.1} | {p50:.0} | {p99:.0} | {failed} |",
                    round + 1,
                    load.tokens_per_second
                );
                figures.push((load.tokens_per_second, p99));
            }
            summary.push((c, figures[0].0 / figures[1].0, figures[0].1 / figures[1].1));
        }
    }
    println!();
    println!("| clients | throughput nuvec / mlx_lm | TTFT p99 nuvec / mlx_lm |");
    println!("|---|---|---|");
    for (c, throughput, ttft) in summary {
        println!("| {c} | {throughput:.2}× | {ttft:.2}× |");
    }
    Ok(())
}
