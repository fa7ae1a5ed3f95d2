//! Running the ranks: start them, forward their output, wait. The first rank that fails, or a
//! Ctrl-C/SIGTERM to the launcher, ends every other rank's whole process group (SIGTERM, then
//! SIGKILL after a grace period), unless `--keep-going` lets them run on after a failure;
//! the launcher exits with the failing rank's status. Nothing
//! polls: threads block on pipes, on `wait` and on signals.

use super::lock;
use super::output::{broadcast_stdin, forward, Inputs, Label, Stream};
use super::plan::RankPlan;
use super::spawn::{start, Context, SSH_OPTIONS};
use crate::os::{signal_group, signal_name, signal_process, Signal};
use std::io::Write;
use std::process::ExitStatus;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

enum Event {
    Exited(usize, std::io::Result<ExitStatus>),
    Signal(i32),
}

/// A started rank.
struct Running {
    pid: u32,
    /// For remote ranks: the ssh host and the process group reported from there.
    remote: Option<(String, Arc<Mutex<Option<u32>>>)>,
    done: bool,
}

/// The shell's convention for a status: the exit code, or 128 + the signal.
fn code_of(status: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// ssh's own status when it fails (it cannot connect, authenticate or run the command).
const SSH_FAILED: i32 = 255;

/// Why a rank ended, in words: its status or signal, and for a remote rank whether ssh
/// itself failed (`started`: the rank's wrapper had reported its process group).
fn why_it_ended(
    rank: usize,
    outcome: &std::io::Result<ExitStatus>,
    remote: Option<(&str, bool)>,
) -> String {
    use std::os::unix::process::ExitStatusExt;
    let status = match outcome {
        Err(e) => return format!("rank {rank} could not be waited for ({e})"),
        Ok(status) => status,
    };
    if let Some(signal) = status.signal() {
        let core = if status.core_dumped() {
            ", core dumped"
        } else {
            ""
        };
        return format!("rank {rank} was killed by {}{core}", signal_name(signal));
    }
    let code = status.code().unwrap_or(1);
    match remote {
        Some((host, false)) if code == SSH_FAILED => format!(
            "rank {rank}: ssh to {host} failed (status 255; its message is above): check that \
             `ssh {host}` works without a password prompt"
        ),
        // A remote shell reports a rank killed by a signal as 128 + the signal.
        Some((host, _)) if code > 128 && code < 128 + 32 => format!(
            "rank {rank} on {host} exited with status {code} (killed by {})",
            signal_name(code - 128)
        ),
        Some((host, _)) => format!("rank {rank} on {host} exited with status {code}"),
        None => format!("rank {rank} exited with status {code}"),
    }
}

fn say(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "[nuvec launch] {message}");
}

fn watch_signals(events: Sender<Event>) -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| format!("installing signal handlers: {e}"))?;
    std::thread::Builder::new()
        .name("nuvec-launch-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if events.send(Event::Signal(signal)).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn end(ranks: &[Running], context: &Context, signal: Signal) {
    for rank in ranks.iter().filter(|r| !r.done) {
        match &rank.remote {
            None => {
                signal_group(rank.pid, signal);
            }
            Some((host, pgid)) => {
                let pgid = *lock(pgid);
                if let Some(pgid) = pgid {
                    let name = if signal == Signal::Kill {
                        "KILL"
                    } else {
                        "TERM"
                    };
                    let _ = std::process::Command::new(&context.ssh[0])
                        .args(&context.ssh[1..])
                        .args(SSH_OPTIONS)
                        .arg(host)
                        .arg(format!("kill -{name} -- -{pgid} 2>/dev/null"))
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null())
                        .status();
                }
                if signal == Signal::Kill {
                    signal_process(rank.pid, Signal::Kill);
                }
            }
        }
    }
}

/// Runs every rank to completion; returns the launcher's exit status.
pub(crate) fn run(
    plans: &[RankPlan],
    context: &Context,
    label: &Label,
    grace: Duration,
    keep_going: bool,
) -> Result<i32, String> {
    let (events, incoming) = channel();
    watch_signals(events.clone())?;
    let inputs: Inputs = Arc::new(Mutex::new(Vec::new()));
    let mut ranks = Vec::new();
    let mut printers = Vec::new();
    for plan in plans {
        let mut child = match start(plan, context) {
            Ok(child) => child,
            Err(error) => {
                end(&ranks, context, Signal::Kill);
                return Err(error);
            }
        };
        let remote =
            (!plan.host.is_local()).then(|| (plan.host.ssh.clone(), Arc::new(Mutex::new(None))));
        let mut stdin = child.stdin.take();
        if remote.is_some() {
            if let Some(input) = stdin.as_mut() {
                let _ = writeln!(input, "{}", context.key);
            }
        }
        inputs.lock().unwrap_or_else(|p| p.into_inner()).push(stdin);
        let label = match label {
            Label::Prefix(_) => Label::Prefix(format!("[{}] ", plan.rank)),
            other => other.clone(),
        };
        let pgid = remote.as_ref().map(|(_, pgid)| pgid.clone());
        if let Some(out) = child.stdout.take() {
            printers.push(
                forward(out, Stream::Stdout, label.clone(), pgid).map_err(|e| e.to_string())?,
            );
        }
        if let Some(err) = child.stderr.take() {
            printers.push(forward(err, Stream::Stderr, label, None).map_err(|e| e.to_string())?);
        }
        ranks.push(Running {
            pid: child.id(),
            remote,
            done: false,
        });
        let events = events.clone();
        let rank = plan.rank;
        std::thread::Builder::new()
            .name("nuvec-launch-wait".into())
            .spawn(move || {
                let _ = events.send(Event::Exited(rank, child.wait()));
            })
            .map_err(|e| e.to_string())?;
    }
    broadcast_stdin(inputs).map_err(|e| e.to_string())?;

    let mut status = 0;
    let mut ending: Option<Instant> = None;
    while ranks.iter().any(|r| !r.done) {
        let event = match ending {
            None => incoming.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(deadline) => {
                incoming.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            }
        };
        match event {
            Ok(Event::Exited(rank, outcome)) => {
                ranks[rank].done = true;
                let code = match &outcome {
                    Ok(exit) => code_of(exit),
                    Err(_) => 1,
                };
                if code != 0 && ending.is_none() {
                    let remote = ranks[rank].remote.as_ref().map(|(host, pgid)| {
                        let started = lock(pgid).is_some();
                        (host.as_str(), started)
                    });
                    let why = why_it_ended(rank, &outcome, remote);
                    if keep_going {
                        say(&format!("{why}; the other ranks go on (--keep-going)"));
                        if status == 0 {
                            status = code;
                        }
                        continue;
                    }
                    say(&format!("{why}; ending the other ranks"));
                    status = code;
                    end(&ranks, context, Signal::Term);
                    ending = Some(Instant::now() + grace);
                }
            }
            Ok(Event::Signal(signal)) => {
                if ending.is_none() {
                    say(&format!(
                        "received {}; ending every rank",
                        signal_name(signal)
                    ));
                    status = 128 + signal;
                    end(&ranks, context, Signal::Term);
                    ending = Some(Instant::now() + grace);
                } else {
                    end(&ranks, context, Signal::Kill);
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                say("ranks still running after the grace period: killing them");
                end(&ranks, context, Signal::Kill);
                ending = Some(Instant::now() + Duration::from_secs(3600));
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    // Grandchildren a finished rank left behind go with it.
    for rank in ranks.iter().filter(|r| r.remote.is_none()) {
        signal_group(rank.pid, Signal::Kill);
    }
    for printer in printers {
        let _ = printer.join();
    }
    Ok(status)
}
