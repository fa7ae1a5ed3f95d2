//! Forwarding each rank's output a whole line at a time, prefixed with its rank, to the
//! launcher's stdout or stderr (kept apart), and its stdin to every rank.

use super::spawn::PGID_LINE;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::ChildStdin;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Which of the launcher's streams a rank's stream goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Copies `source` line by line, each line written at once (lines of different ranks never
/// mix). With `pgid`, a first line announcing the remote process group is consumed into it.
pub(crate) fn forward(
    source: impl Read + Send + 'static,
    stream: Stream,
    prefix: Option<String>,
    pgid: Option<Arc<Mutex<Option<u32>>>>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("nuvec-launch-output".into())
        .spawn(move || {
            let mut reader = BufReader::new(source);
            let mut line = Vec::new();
            let mut first = true;
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if std::mem::take(&mut first) {
                    if let Some(slot) = &pgid {
                        let text = String::from_utf8_lossy(&line);
                        if let Some(id) = text.trim().strip_prefix(PGID_LINE) {
                            *lock(slot) = id.parse().ok();
                            continue;
                        }
                    }
                }
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                let mut out = Vec::with_capacity(line.len() + 8);
                if let Some(prefix) = &prefix {
                    out.extend_from_slice(prefix.as_bytes());
                }
                out.extend_from_slice(&line);
                let _ = match stream {
                    Stream::Stdout => std::io::stdout().lock().write_all(&out),
                    Stream::Stderr => std::io::stderr().lock().write_all(&out),
                };
            }
        })
}

/// Every rank's stdin; a rank whose stdin failed (it exited) or was closed is `None`.
pub(crate) type Inputs = Arc<Mutex<Vec<Option<ChildStdin>>>>;

/// Copies the launcher's stdin to every rank until it ends, then closes the ranks' stdins.
/// Remote ranks first get their key line (see `spawn::remote_script`).
pub(crate) fn broadcast_stdin(inputs: Inputs) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("nuvec-launch-stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buffer = [0u8; 8192];
            loop {
                let n = match stdin.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                for slot in lock(&inputs).iter_mut() {
                    if let Some(input) = slot {
                        if input.write_all(&buffer[..n]).is_err() {
                            *slot = None;
                        }
                    }
                }
            }
            lock(&inputs).iter_mut().for_each(|slot| *slot = None);
        })
}
