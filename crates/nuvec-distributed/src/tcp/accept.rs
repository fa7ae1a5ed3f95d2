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
use std::sync::mpsc::{channel, Receiver, Sender};
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

/// What an acceptor's thread ends with: its listener back.
type Accepting = JoinHandle<Result<TcpListener>>;

/// What an acceptor hands over: each connection as it is accepted, then word that every
/// expected one is in.
enum Handed {
    Connection(Connected),
    Complete,
}

/// The ranks an acceptor waits for, each listed once per connection it opens here.
#[derive(Clone, Debug, Default)]
pub(crate) struct Expected {
    /// Ranks whose connections must arrive.
    pub(crate) required: Vec<usize>,
    /// Ranks whose connections may arrive (they may not reach this rank's address): accepted
    /// when they come, and waited for only once [`Acceptor::settle`] says they were opened.
    pub(crate) optional: Vec<usize>,
}

/// The thread that accepts the expected ranks' connections on one listener while this rank
/// connects to others, handing each over as soon as it is accepted. Dropping it stops it.
pub(crate) struct Acceptor {
    stop: Arc<AtomicBool>,
    /// Set when the thread ends with an error: the formation cannot succeed.
    failed: Arc<AtomicBool>,
    settle: Sender<Vec<usize>>,
    accepted: Receiver<Handed>,
    thread: Option<Accepting>,
}

impl Acceptor {
    pub(crate) fn start(
        listener: TcpListener,
        local: Local,
        expected: Expected,
        deadline: Instant,
        progress: &Arc<Progress>,
    ) -> Result<Acceptor> {
        listener
            .set_nonblocking(true)
            .map_err(|e| init_error(None, e.to_string()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (settle, settled) = channel();
        let (handing, accepted) = channel();
        let flag = stop.clone();
        let failed = Arc::new(AtomicBool::new(false));
        let failing = failed.clone();
        let progress = progress.clone();
        let thread = std::thread::Builder::new()
            .name("nuvec-ring-accept".into())
            .spawn(move || {
                let ends = Ends {
                    settled,
                    handing,
                    stop: flag,
                };
                let ended = accept_loop(&listener, &local, expected, (deadline, &progress), &ends);
                failing.store(ended.is_err(), Ordering::Relaxed);
                ended.map(|()| listener)
            })
            .map_err(|e| init_error(None, format!("starting the acceptor: {e}")))?;
        Ok(Acceptor {
            stop,
            failed,
            settle,
            accepted,
            thread: Some(thread),
        })
    }

    /// Says which optional ranks did open connections here (each once per connection): the
    /// acceptor then waits for them as for the required ones, and ends when all are in.
    pub(crate) fn settle(&self, opened: Vec<usize>) {
        let _ = self.settle.send(opened);
    }

    /// A flag set once the acceptor has failed (for connecting loops to give up early).
    pub(crate) fn failed(&self) -> Arc<AtomicBool> {
        self.failed.clone()
    }

    /// The next accepted connection; `None` once the acceptor has taken every connection it
    /// waits for. A failed formation (the acceptor ends by the formation's deadline) is the
    /// error.
    pub(crate) fn next(&mut self) -> Result<Option<Connected>> {
        match self.accepted.recv() {
            Ok(Handed::Connection(connected)) => Ok(Some(connected)),
            Ok(Handed::Complete) => Ok(None),
            Err(_) => match self.error() {
                Some(error) => Err(error),
                None => Ok(None),
            },
        }
    }

    /// The acceptor's error once it has failed (it then ends at once).
    pub(crate) fn error(&mut self) -> Option<nuvec_core::Error> {
        if !self.failed.load(Ordering::Relaxed) {
            return None;
        }
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => Some(e),
            Some(Err(_)) => Some(init_error(None, "the acceptor thread panicked".into())),
            Some(Ok(Ok(_))) | None => None,
        }
    }

    /// Waits until every expected rank is connected (or the formation failed) and returns
    /// their connections.
    pub(crate) fn finish(mut self) -> Result<Vec<Connected>> {
        let mut all = Vec::new();
        while let Some(connected) = self.next()? {
            all.push(connected);
        }
        Ok(all)
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

/// The acceptor thread's ends of its channels, and the flag that stops it.
struct Ends {
    settled: Receiver<Vec<usize>>,
    handing: Sender<Handed>,
    stop: Arc<AtomicBool>,
}

/// Takes one `peer` out of the multiset `ranks`; whether it was there.
fn take(ranks: &mut Vec<usize>, peer: usize) -> bool {
    match ranks.iter().position(|&r| r == peer) {
        Some(at) => {
            ranks.swap_remove(at);
            true
        }
        None => false,
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
    expected: Expected,
    (deadline, progress): (Instant, &Progress),
    ends: &Ends,
) -> Result<()> {
    let (results, outcomes) = channel::<(TcpStream, Accepted, Instant)>();
    let pending = Arc::new(AtomicUsize::new(0));
    let Expected {
        required: mut missing,
        optional: mut allowed,
    } = expected;
    let mut settled = allowed.is_empty();
    // Optional ranks' connections taken before the settlement.
    let mut taken_early: Vec<usize> = Vec::new();
    // The incarnation each rank's first connection came from.
    let mut incarnations: Vec<Option<u32>> = vec![None; local.size];
    let mut seen = Refusals::default();
    // Ranks a connection said hold a different key, and when it said so.
    let mut disowned: Vec<(usize, Instant)> = Vec::new();
    let here = listener
        .local_addr()
        .map_or_else(|_| "this rank's address".to_string(), |a| a.to_string());
    // Once every expected connection is in, the acceptor says so and goes on until the
    // formation ends, refusing any other connection claiming a rank (a second process
    // started as a rank that already joined), which fails the formation.
    let mut complete = false;
    loop {
        let done = missing.is_empty() && settled;
        if ends.stop.load(Ordering::Relaxed) {
            return match done {
                true => Ok(()),
                false => Err(init_error(None, "formation abandoned".into())),
            };
        }
        if done && !complete {
            complete = true;
            let _ = ends.handing.send(Handed::Complete);
        }
        if let Ok(opened) = ends.settled.try_recv() {
            for peer in opened {
                if !take(&mut taken_early, peer) {
                    missing.push(peer);
                }
            }
            if let Some(&peer) = taken_early.first() {
                return Err(init_error(
                    Some(peer),
                    format!("rank {peer} connected to {here} but its formation says it did not"),
                ));
            }
            allowed.clear();
            settled = true;
            continue;
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
                    let peer = hello.rank as usize;
                    let early = !missing.contains(&peer) && allowed.contains(&peer);
                    let wanted = match early {
                        true => &allowed[..],
                        false => &missing[..],
                    };
                    let first = incarnations.get(peer).copied().flatten();
                    let another = first.is_some_and(|seen| seen != hello.incarnation);
                    let peer = judge(&mut stream, &hello, local, (wanted, another))?;
                    incarnations[peer] = Some(hello.incarnation);
                    progress.log(|| {
                        let from = stream
                            .peer_addr()
                            .map_or_else(|_| "?".into(), |a| a.to_string());
                        format!(
                            "accepted rank {peer} from {from} on {here} (handshake {})",
                            progress.since(began)
                        )
                    });
                    if early {
                        take(&mut allowed, peer);
                        taken_early.push(peer);
                    } else {
                        take(&mut missing, peer);
                    }
                    if ends
                        .handing
                        .send(Handed::Connection((peer, stream)))
                        .is_err()
                    {
                        return Err(init_error(None, "formation abandoned".into()));
                    }
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
        if !(missing.is_empty() && settled) && Instant::now() >= deadline {
            let mut late = missing.clone();
            late.sort_unstable();
            late.dedup();
            return Err(init_error(
                late.first().copied(),
                format!(
                    "timed out after {} waiting for ranks {late:?} to connect to {here}{}",
                    progress.gave_up(),
                    seen.describe()
                ),
            ));
        }
        if !missing.is_empty() {
            progress.waiting(|| {
                let mut late = missing.clone();
                late.sort_unstable();
                late.dedup();
                format!("ranks {late:?} to connect to {here}")
            });
        }
        if !busy {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn spawn_handshake(
    mut stream: TcpStream,
    local: &Local,
    deadline: Instant,
    pending: &Arc<AtomicUsize>,
    results: &Sender<(TcpStream, Accepted, Instant)>,
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
/// `another`: the rank's earlier connections came from another process.
fn judge(
    stream: &mut TcpStream,
    hello: &Message,
    local: &Local,
    (missing, another): (&[usize], bool),
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
    if !missing.contains(&peer) || another {
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
