//! Accepting the connections of a forming group: one thread per listener takes the expected
//! ranks' connections while this rank connects to others, and hands each accepted connection
//! to its own short-lived handshake thread, so a stray client (a port scanner, one that sends
//! garbage or nothing) is dropped without delaying the ranks that connect beside it.

use super::handshake::{accept_side, write_message, Accepted, Local, Message, Verdict};
use super::progress::{init_error, Progress};
use nuvec_core::Result;
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an accepted connection may take to complete its handshake before it is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// The most connections handshaking at once; more are dropped unread.
const MAX_PENDING: usize = 64;
/// How long a rank waits for rank `i` to prove the key after a connection claiming rank `i`
/// said this rank's proof did not verify; then it fails, naming the different keys.
const DISOWNED_GRACE: Duration = Duration::from_secs(2);

/// Another rank's connection, handshaken and accepted.
pub(crate) type Connected = (usize, TcpStream);

/// What an acceptor's thread ends with: the connections it took, and its listener back.
type Accepting = JoinHandle<Result<(Vec<Connected>, TcpListener)>>;

/// The thread that accepts the expected ranks' connections on one listener while this rank
/// connects to others. Dropping it before [`Acceptor::finish`] stops it.
pub(crate) struct Acceptor {
    stop: Arc<AtomicBool>,
    thread: Option<Accepting>,
}

impl Acceptor {
    pub(crate) fn start(
        listener: TcpListener,
        local: Local,
        expected: Vec<usize>,
        deadline: Instant,
        progress: &Arc<Progress>,
    ) -> Result<Acceptor> {
        listener
            .set_nonblocking(true)
            .map_err(|e| init_error(None, e.to_string()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let progress = progress.clone();
        let thread = std::thread::Builder::new()
            .name("nuvec-ring-accept".into())
            .spawn(move || {
                accept_loop(&listener, &local, expected, (deadline, &progress), &flag)
                    .map(|accepted| (accepted, listener))
            })
            .map_err(|e| init_error(None, format!("starting the acceptor: {e}")))?;
        Ok(Acceptor {
            stop,
            thread: Some(thread),
        })
    }

    /// Waits until every expected rank is connected (or the formation failed); gives the
    /// listener back for the next phase.
    pub(crate) fn finish(mut self) -> Result<(Vec<Connected>, TcpListener)> {
        let thread = self.thread.take().expect("an acceptor is finished once");
        thread
            .join()
            .unwrap_or_else(|_| Err(init_error(None, "the acceptor thread panicked".into())))
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the acceptor saw besides the ranks it took, for the timeout's error message.
#[derive(Default)]
struct Refusals {
    refused: Vec<String>,
    strays: usize,
}

impl Refusals {
    fn describe(&self) -> String {
        let mut out = String::new();
        if !self.refused.is_empty() {
            out += &format!("; refused {}", self.refused.join("; "));
        }
        if self.strays > 0 {
            out += &format!(
                "; dropped {} connection(s) that were not nuvec ranks",
                self.strays
            );
        }
        out
    }
}

fn accept_loop(
    listener: &TcpListener,
    local: &Local,
    mut missing: Vec<usize>,
    (deadline, progress): (Instant, &Progress),
    stop: &AtomicBool,
) -> Result<Vec<Connected>> {
    let (results, outcomes) = channel::<(TcpStream, Accepted, Instant)>();
    let pending = Arc::new(AtomicUsize::new(0));
    let mut accepted = Vec::new();
    let mut seen = Refusals::default();
    // Ranks a connection said hold a different key, and when it said so.
    let mut disowned: Vec<(usize, Instant)> = Vec::new();
    let here = listener
        .local_addr()
        .map_or_else(|_| "this rank's address".to_string(), |a| a.to_string());
    while !missing.is_empty() {
        if stop.load(Ordering::Relaxed) {
            return Err(init_error(None, "formation abandoned".into()));
        }
        let mut busy = false;
        match listener.accept() {
            Ok((stream, _)) => {
                busy = true;
                if pending.load(Ordering::Relaxed) >= MAX_PENDING {
                    seen.strays += 1;
                } else {
                    spawn_handshake(stream, local, deadline, &pending, &results, &mut seen);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(e) => return Err(init_error(None, format!("accepting connections: {e}"))),
        }
        while let Ok((mut stream, outcome, began)) = outcomes.try_recv() {
            busy = true;
            match outcome {
                Accepted::Connection(hello) => {
                    let peer = judge(&mut stream, &hello, local, &missing)?;
                    progress.log(|| {
                        let from = stream
                            .peer_addr()
                            .map_or_else(|_| "?".into(), |a| a.to_string());
                        format!(
                            "accepted rank {peer} from {from} on {here} (handshake {})",
                            progress.since(began)
                        )
                    });
                    missing.retain(|&m| m != peer);
                    accepted.push((peer, stream));
                }
                Accepted::Refused { claimed, reason } => {
                    progress
                        .log(|| format!("refused a connection claiming rank {claimed}: {reason}"));
                    seen.refused
                        .push(format!("a connection claiming rank {claimed}: {reason}"))
                }
                Accepted::Disowned { claimed } => {
                    progress.log(|| {
                        format!("a connection claiming rank {claimed} says this rank's proof of the key did not verify")
                    });
                    disowned.push((claimed as usize, Instant::now()));
                }
                Accepted::Stray => seen.strays += 1,
                Accepted::Fatal(reason) => return Err(init_error(None, reason)),
            }
        }
        if let Some(&(peer, _)) = disowned
            .iter()
            .find(|(peer, at)| missing.contains(peer) && at.elapsed() >= DISOWNED_GRACE)
        {
            return Err(init_error(
                Some(peer),
                format!(
                    "rank {peer} refused this rank's proof of the pre-shared key: the ranks \
                     hold different keys; set the same NUVEC_DISTRIBUTED_KEY (or Options::key) \
                     on every rank"
                ),
            ));
        }
        if !missing.is_empty() && Instant::now() >= deadline {
            return Err(init_error(
                missing.first().copied(),
                format!(
                    "timed out after {} waiting for ranks {missing:?} to connect to {here}{}",
                    progress.gave_up(),
                    seen.describe()
                ),
            ));
        }
        if !missing.is_empty() {
            progress.waiting(|| format!("ranks {missing:?} to connect to {here}"));
        }
        if !busy {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    Ok(accepted)
}

fn spawn_handshake(
    mut stream: TcpStream,
    local: &Local,
    deadline: Instant,
    pending: &Arc<AtomicUsize>,
    results: &std::sync::mpsc::Sender<(TcpStream, Accepted, Instant)>,
    seen: &mut Refusals,
) {
    let (local, pending, results) = (local.clone(), pending.clone(), results.clone());
    let began = Instant::now();
    let handshake_deadline = deadline.min(began + HANDSHAKE_TIMEOUT);
    pending.fetch_add(1, Ordering::Relaxed);
    let counter = pending.clone();
    let spawned = std::thread::Builder::new()
        .name("nuvec-ring-handshake".into())
        .spawn(move || {
            let outcome = match stream.set_nonblocking(false) {
                Ok(()) => accept_side(&mut stream, &local, handshake_deadline),
                Err(_) => Accepted::Stray,
            };
            pending.fetch_sub(1, Ordering::Relaxed);
            let _ = results.send((stream, outcome, began));
        });
    if spawned.is_err() {
        counter.fetch_sub(1, Ordering::Relaxed);
        seen.strays += 1;
    }
}

/// Checks a rank that completed its handshake against the group; answers with the verdict.
fn judge(
    stream: &mut TcpStream,
    hello: &Message,
    local: &Local,
    missing: &[usize],
) -> Result<usize> {
    let (peer, peer_size) = (hello.rank as usize, hello.size as usize);
    let refuse = |stream: &mut TcpStream, verdict: Verdict, reason: String| {
        let _ = write_message(stream, &Message::verdict(verdict));
        Err(init_error(Some(peer), reason))
    };
    if peer_size != local.size {
        return refuse(
            stream,
            Verdict::WrongSize,
            format!(
                "rank {peer} believes the group has {peer_size} ranks, this rank (rank {}) has {}",
                local.rank, local.size
            ),
        );
    }
    if !missing.contains(&peer) {
        return refuse(
            stream,
            Verdict::DuplicateRank,
            format!("a second process claims rank {peer} (or a rank connected out of order): check MLX_RANK on every process"),
        );
    }
    write_message(stream, &Message::verdict(Verdict::Accepted))
        .map_err(|reason| init_error(Some(peer), reason))?;
    Ok(peer)
}
