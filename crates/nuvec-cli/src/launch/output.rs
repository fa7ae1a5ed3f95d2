//! Forwarding each rank's output a whole line at a time, prefixed with its rank, to the
//! launcher's stdout or stderr (kept apart), and its stdin to every rank.

use super::lock;
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

/// How each forwarded line is labelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Label {
    /// As it is (`--no-prefix`).
    Plain,
    /// With this prefix (`[3] `).
    Prefix(String),
    /// mpirun's tagged output (`[1,3]<stdout>:text`, Open MPI 5 with a space after the
    /// colon): the tag becomes `[3] `.
    MpiTags { space: bool },
}

/// Splits Open MPI's tag off `line`: the rank and the text after the tag.
fn mpi_tag(line: &[u8], space: bool) -> Option<(&[u8], &[u8])> {
    let rest = line.strip_prefix(b"[")?;
    let close = rest.iter().position(|&b| b == b']')?;
    let (job_and_rank, rest) = (&rest[..close], &rest[close + 1..]);
    let comma = job_and_rank.iter().position(|&b| b == b',')?;
    let rank = &job_and_rank[comma + 1..];
    if rank.is_empty() || !rank.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let text = rest
        .strip_prefix(b"<stdout>:")
        .or_else(|| rest.strip_prefix(b"<stderr>:"))?;
    let text = if space {
        text.strip_prefix(b" ").unwrap_or(text)
    } else {
        text
    };
    Some((rank, text))
}

/// `line` with its label.
fn labelled(label: &Label, line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len() + 8);
    match label {
        Label::Plain => out.extend_from_slice(line),
        Label::Prefix(prefix) => {
            out.extend_from_slice(prefix.as_bytes());
            out.extend_from_slice(line);
        }
        Label::MpiTags { space } => match mpi_tag(line, *space) {
            Some((rank, text)) => {
                out.push(b'[');
                out.extend_from_slice(rank);
                out.extend_from_slice(b"] ");
                out.extend_from_slice(text);
            }
            // mpirun's own messages.
            None => out.extend_from_slice(line),
        },
    }
    out
}

/// Copies `source` line by line, each line written at once (lines of different ranks never
/// mix). With `pgid`, a first line announcing the remote process group is consumed into it.
pub(crate) fn forward(
    source: impl Read + Send + 'static,
    stream: Stream,
    label: Label,
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
                let out = labelled(&label, &line);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_mpi_tags_become_rank_prefixes_and_other_lines_pass() {
        let four = Label::MpiTags { space: false };
        assert_eq!(
            labelled(&four, b"[1,3]<stdout>:hi there\n"),
            b"[3] hi there\n"
        );
        assert_eq!(labelled(&four, b"[1,0]<stderr>: x\n"), b"[0]  x\n");
        let five = Label::MpiTags { space: true };
        assert_eq!(labelled(&five, b"[1,12]<stdout>: hi\n"), b"[12] hi\n");
        for untagged in [&b"mpirun noticed\n"[..], b"[1,x]<stdout>:a\n", b"[a]b\n"] {
            assert_eq!(labelled(&five, untagged), untagged);
        }
        assert_eq!(labelled(&Label::Prefix("[2] ".into()), b"a\n"), b"[2] a\n");
        assert_eq!(labelled(&Label::Plain, b"a\n"), b"a\n");
    }
}
