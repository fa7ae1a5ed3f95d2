//! MLX's results for a batch of programs: `scripts/golden/mlx_diff.py` under the `.venv-mlx`
//! Python (or `NUVEC_MLX_PYTHON`), one process per batch. A program that crashes MLX's
//! process, or runs in it for 5 s, is recorded as an MLX error, and the rest of the batch
//! runs in a new process.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// How long one program may take in MLX before its process counts as hung (MLX loops forever
/// on some).
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// The Python that has MLX 0.32.4, and the script.
pub(crate) struct Mlx {
    python: PathBuf,
    script: PathBuf,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Mlx {
    /// MLX's Python, when there is one: `NUVEC_MLX_PYTHON`, else `.venv-mlx/bin/python`.
    pub(crate) fn find() -> Option<Mlx> {
        let python = std::env::var_os("NUVEC_MLX_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join(".venv-mlx/bin/python"));
        if !python.exists() {
            return None;
        }
        let has_mlx = Command::new(&python)
            .args(["-c", "import mlx.core"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        has_mlx.then(|| Mlx {
            python,
            script: root().join("scripts/golden/mlx_diff.py"),
        })
    }

    /// MLX's result for each program, in order.
    pub(crate) fn run(&self, programs: &[Value]) -> Vec<Value> {
        let mut results = Vec::with_capacity(programs.len());
        while results.len() < programs.len() {
            let rest = &programs[results.len()..];
            let got = self.run_once(rest);
            let crashed = got.len() < rest.len();
            results.extend(got);
            if crashed {
                results.push(
                    json!({"ok": false, "error": "MLX's process crashed or hung on this program"}),
                );
            }
        }
        results
    }

    /// Results until the batch ends or the process dies.
    fn run_once(&self, programs: &[Value]) -> Vec<Value> {
        let mut child = Command::new(&self.python)
            .arg(&self.script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting MLX's Python");
        let mut stdin = child.stdin.take().expect("a piped stdin");
        let lines: Vec<String> = programs.iter().map(|p| p.to_string()).collect();
        let writer = std::thread::spawn(move || {
            for line in lines {
                if writeln!(stdin, "{line}").is_err() {
                    break;
                }
            }
        });
        let stdout = child.stdout.take().expect("a piped stdout");
        let (lines, arriving) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut results = Vec::new();
        while results.len() < programs.len() {
            match arriving.recv_timeout(PATIENCE) {
                Ok(line) => {
                    results.push(serde_json::from_str(&line).expect("MLX's result is JSON"))
                }
                // The process ended, or hangs on this program: the caller records it.
                Err(_) => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = writer.join();
        results
    }
}
