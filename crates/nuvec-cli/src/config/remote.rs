//! Running a shell command on a host: through ssh (never asking for a password, giving up
//! connecting after 5 s, as `mlx.distributed_config` does), or directly for this machine's own
//! names, always within a time limit.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// ssh's options for every command: no prompts, a bounded connection attempt.
const SSH_OPTIONS: [&str; 4] = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5"];

/// ssh's exit status when ssh itself failed (not the remote command).
const SSH_FAILED: i32 = 255;

/// What a finished command gave.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) status: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Finished {
    pub(crate) fn success(&self) -> bool {
        self.status == Some(0)
    }

    /// The last line of stderr, for messages.
    pub(crate) fn reason(&self) -> String {
        let line = self.stderr.lines().rev().find(|l| !l.trim().is_empty());
        match (line, self.status) {
            (Some(line), _) => line.trim().to_string(),
            (None, Some(code)) => format!("exit status {code}"),
            (None, None) => "killed by a signal".into(),
        }
    }
}

/// How commands reach the hosts.
#[derive(Clone, Debug)]
pub(crate) struct Remote {
    /// The ssh command and its own options (`ssh`, or `ssh -F config`).
    pub(crate) ssh: Vec<String>,
    pub(crate) verbose: bool,
}

/// Whether `host` is this machine (run without ssh).
pub(crate) fn is_local(host: &str) -> bool {
    matches!(host, "127.0.0.1" | "localhost" | "::1")
}

impl Remote {
    fn command(&self, host: &str, script: &str) -> Command {
        let mut command;
        if is_local(host) {
            command = Command::new("sh");
            command.args(["-c", script]);
        } else {
            command = Command::new(&self.ssh[0]);
            command
                .args(&self.ssh[1..])
                .args(SSH_OPTIONS)
                .arg(host)
                .arg(script);
        }
        if self.verbose {
            eprintln!("[nuvec config] {host}: {script}");
        }
        command
    }

    /// Runs `script` on `host`, killed after `limit`. `step` names what it was for in errors.
    pub(crate) fn run(
        &self,
        host: &str,
        script: &str,
        limit: Duration,
        step: &str,
    ) -> Result<Finished, String> {
        let mut child = self
            .command(host, script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{host} ({step}): cannot start {}: {e}", self.ssh[0]))?;
        let readers = [
            read_in_background(child.stdout.take()),
            read_in_background(child.stderr.take()),
        ];
        let deadline = Instant::now() + limit;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{host} ({step}): no answer within {} s",
                        limit.as_secs_f64()
                    ));
                }
                Err(e) => return Err(format!("{host} ({step}): {e}")),
            }
        };
        let [stdout, stderr] = readers.map(|r| r.join().unwrap_or_default());
        let finished = Finished {
            status: status.code(),
            stdout,
            stderr,
        };
        if !is_local(host) && finished.status == Some(SSH_FAILED) {
            let reason = finished.reason();
            let hint = if reason.contains("Permission denied") {
                " (is password-less ssh set up for this host?)"
            } else {
                ""
            };
            return Err(format!("{host} ({step}): ssh failed: {reason}{hint}"));
        }
        Ok(finished)
    }

    /// Starts `script` on `host` with its stdin and stdout piped (closing stdin ends it).
    pub(crate) fn spawn(&self, host: &str, script: &str, step: &str) -> Result<Child, String> {
        self.command(host, script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{host} ({step}): cannot start {}: {e}", self.ssh[0]))
    }
}

fn read_in_background<R: Read + Send + 'static>(
    pipe: Option<R>,
) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).into_owned()
    })
}

/// `text` quoted for a POSIX shell.
pub(crate) fn quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:=,@+".contains(&b))
    {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_commands_run_and_time_out_with_the_host_and_step_named() {
        let remote = Remote {
            ssh: vec!["ssh".into()],
            verbose: false,
        };
        let done = remote
            .run(
                "127.0.0.1",
                "echo out; echo err >&2; exit 3",
                Duration::from_secs(5),
                "test",
            )
            .unwrap();
        assert_eq!((done.status, done.stdout.as_str()), (Some(3), "out\n"));
        assert_eq!(done.reason(), "err");
        let error = remote
            .run(
                "localhost",
                "sleep 5",
                Duration::from_millis(200),
                "waiting",
            )
            .unwrap_err();
        assert_eq!(error, "localhost (waiting): no answer within 0.2 s");
    }

    #[test]
    fn quoting_survives_the_shell() {
        assert_eq!(quote("/usr/bin/nuvec"), "/usr/bin/nuvec");
        assert_eq!(quote("it's"), "'it'\\''s'");
        let remote = Remote {
            ssh: vec!["ssh".into()],
            verbose: false,
        };
        let done = remote
            .run(
                "::1",
                &format!("printf %s {}", quote("a b'c")),
                Duration::from_secs(5),
                "q",
            )
            .unwrap();
        assert_eq!(done.stdout, "a b'c");
    }
}
