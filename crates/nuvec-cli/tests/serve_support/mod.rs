//! Starting `nuvec serve` (alone or under `nuvec launch`) and talking HTTP/1.1 to it with
//! nothing but a socket, so the tests see exactly what the server sends.

#![allow(dead_code, unreachable_pub)]

use nuvec_test_support::ranks::free_ports;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../nuvec-lm/tests/fixtures")
        .join(name)
}

/// A running server; stopped (with its ranks) when dropped.
pub struct Server {
    pub child: Child,
    pub address: String,
    pub log: Arc<Mutex<String>>,
}

impl Server {
    /// `nuvec serve --model <fixture> --port 0 EXTRA`, on `ranks` ranks (under `nuvec launch`
    /// when more than one), waiting until it listens.
    pub fn start(model: &str, ranks: usize, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let nuvec = env!("CARGO_BIN_EXE_nuvec");
        let model = fixture(model);
        let mut command = Command::new(nuvec);
        if ranks > 1 {
            let port = free_ports(ranks)[0];
            command
                .args(["launch", "-n", &ranks.to_string(), "-p", &port.to_string()])
                .args(["--no-prefix", "--keep-going", "--", nuvec]);
        }
        command
            .args(["serve", "--model"])
            .arg(&model)
            .args(["--port", "0"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: setpgid in the child between fork and exec touches no shared state.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::setpgid(0, 0);
                Ok(())
            });
        }
        let mut child = command.spawn().expect("starting nuvec serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (found, address) = mpsc::channel();
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let address = rest.split_whitespace().next().unwrap_or("").to_string();
                    found.send(address).ok();
                }
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        match address.recv_timeout(Duration::from_secs(60)) {
            Ok(address) => Server {
                child,
                address,
                log,
            },
            Err(_) => {
                child.kill().ok();
                panic!("nuvec serve did not start: {}", log.lock().unwrap());
            }
        }
    }

    /// The pid of rank `rank` of a launched server: the launcher's child whose environment
    /// says `MLX_RANK=<rank>`.
    pub fn rank_pid(&self, rank: usize) -> Option<i32> {
        let wanted = format!("MLX_RANK={rank}");
        let launcher = self.child.id().to_string();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The parent's pid is the second field after the parenthesized name.
            let parent = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1));
            if parent != Some(launcher.as_str()) {
                continue;
            }
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if environ.split(|&b| b == 0).any(|v| v == wanted.as_bytes()) {
                return Some(pid);
            }
        }
        None
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// One request; the status and the body (chunked bodies joined).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[&str],
        body: &[u8],
    ) -> (u16, String) {
        http(&self.address, method, path, headers, body)
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, text) = self.request("POST", path, &[], body.to_string().as_bytes());
        let json = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{path} answered {status} with non-JSON {text:?}: {e}"));
        (status, json)
    }

    /// A streamed request's `data:` payloads, `[DONE]` included.
    pub fn stream(&self, path: &str, body: &Value) -> (u16, Vec<String>) {
        let (status, text) = self.request("POST", path, &[], body.to_string().as_bytes());
        let events = (text.lines())
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect();
        (status, events)
    }

    pub fn health(&self) -> (u16, Value) {
        let (status, text) = self.request("GET", "/health", &[], b"");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first: a launcher ends its ranks (each in a process group of its own);
        // then SIGKILL to this test's process group, for whatever is left.
        let group = -(self.child.id() as i32);
        // SAFETY: kill signals processes this test started; no memory is touched.
        unsafe { libc::kill(group, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(group, libc::SIGKILL) };
        self.child.wait().ok();
    }
}

/// An HTTP/1.1 exchange on a fresh connection.
pub fn http(
    address: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("connecting to the server");
    stream.set_read_timeout(Some(Duration::from_secs(120))).ok();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // A body the server refuses early may not all be read: a failed write is not the test's.
    stream.write_all(body).ok();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok();
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = (head.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {head:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    if !chunked {
        return (status, body.to_string());
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    (status, out)
}

/// A chat request of one user message, with `extra` fields.
pub fn chat(prompt: &str, extra: Value) -> Value {
    let mut body = serde_json::json!({"messages": [{"role": "user", "content": prompt}]});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body
}

/// `nuvec generate`'s text (without its trailing newline) for `args`.
pub fn generate(model: &str, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_nuvec"))
        .args(["generate", "--model"])
        .arg(fixture(model))
        .args(["--verbose", "false"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "nuvec generate: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

/// The text of a streamed answer's chunks (chat's `delta.content` or completions' `text`).
pub fn streamed_text(events: &[String]) -> String {
    let mut text = String::new();
    for event in events.iter().filter(|e| *e != "[DONE]") {
        let chunk: Value = serde_json::from_str(event).unwrap();
        if let Some(choice) = chunk["choices"].get(0) {
            let piece = choice["delta"]["content"]
                .as_str()
                .or_else(|| choice["text"].as_str());
            text.push_str(piece.unwrap_or(""));
        }
    }
    text
}
