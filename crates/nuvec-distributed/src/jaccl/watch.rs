//! The side channel's watcher, once a JACCL group has formed (`side.rs` forms the star): one
//! thread per rank.
//!
//! - **Lost ranks.** Rank 0's watcher reads every rank's connection: one that closes (a
//!   process that ends closes it; TCP keepalive ends one to a host that went silent) is a lost
//!   rank, recorded and told to every other rank, whose watcher records it. A rank whose
//!   connection to rank 0 closes records rank 0's loss. `health()` reports the first loss.
//! - **Where every rank is.** A rank whose collective failed asks rank 0 (`W`); rank 0 asks
//!   every rank (`Q`); each rank's watcher answers with its flight recorder's last record
//!   (`P`), also while its main thread waits inside a collective; rank 0 relays what it heard
//!   within the listening time (`R`) and the failed collective's error ends with the report.
//!   A rank between calls when asked waits up to half the listening time before it answers,
//!   so a rank about to enter the failing call (a moment behind the others) is reported in
//!   it. A stalled process (its watcher stalled too) is silent; a killed one left. With
//!   rank 0 stalled or gone, only this rank's place is known.
//!
//! Every frame is a kind byte, a little-endian `u32` length and that many bytes.

use crate::platform::recv_now;
use crate::sync::lock;
use crate::whereabouts::{place_of, Heard, LOOK_EVERY};
use nuvec_core::distributed::{State, Trace};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where a watcher records the first rank it lost.
pub(crate) type Losses = Arc<Mutex<Option<String>>>;

/// Rank 0 to every rank: a rank left (payload: the rank, `u32`).
const LEFT: u8 = b'L';
/// A rank to rank 0: where is every rank?
const WHERE: u8 = b'W';
/// Rank 0 to every rank: where are you?
const QUERY: u8 = b'Q';
/// A rank to rank 0: where it is (empty: before its first call).
const PLACE: u8 = b'P';
/// Rank 0 to a rank that asked: what it heard of every rank.
const REPORT: u8 = b'R';
/// The longest frame a watcher accepts.
const MOST_BYTES: usize = 1 << 16;
/// How long a watcher waits between looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);
/// How often rank 0's watcher looks at its connections when no question is open.
const IDLE_LOOK: Duration = Duration::from_millis(10);

/// One rank's watcher: what it found, and what it shares with the rank's calls.
pub(crate) struct Watch {
    pub(crate) lost: Losses,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

/// What the watcher thread and the rank's failing calls share.
#[derive(Default)]
struct Shared {
    trace: OnceLock<Arc<Trace>>,
    /// How long rank 0 waits for answers.
    listen: Duration,
    /// The answer to this rank's last question, once it came.
    answer: Mutex<Option<Vec<Heard>>>,
    answered: Condvar,
    /// Rank 0: this rank's own question, for its watcher.
    asked: AtomicBool,
    /// Other ranks: the connection to rank 0 for writing, and the lock that keeps frames
    /// whole between the watcher's answers and the calls' questions.
    writer: OnceLock<Mutex<TcpStream>>,
    /// Other ranks: whether rank 0's connection closed (no answer will come).
    rank_zero_left: AtomicBool,
}

impl Drop for Watch {
    /// A side channel dropped without `close` still ends its watcher (which holds clones of
    /// the connections) within a tick.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(kind);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The first whole frame in `buffer`, taken out of it: `None` until one is whole, an error
/// for one too long to be a watcher's.
fn take_frame(buffer: &mut Vec<u8>) -> Option<Result<(u8, Vec<u8>), String>> {
    let header = buffer.get(..5)?;
    let len = u32::from_le_bytes(header[1..5].try_into().expect("4 bytes")) as usize;
    if len > MOST_BYTES {
        return Some(Err(format!("a side-channel frame of {len} bytes")));
    }
    if buffer.len() < 5 + len {
        return None;
    }
    let kind = buffer[0];
    let payload = buffer[5..5 + len].to_vec();
    buffer.drain(..5 + len);
    Some(Ok((kind, payload)))
}

/// What rank 0 heard of every rank, for a `REPORT` frame.
fn encode_report(heard: &[Heard]) -> Vec<u8> {
    let mut out = Vec::new();
    for what in heard {
        let (tag, text) = match what {
            Heard::Said(place) => (0u8, place.as_str()),
            Heard::Left => (1, ""),
            Heard::Silent => (2, ""),
            _ => (3, ""),
        };
        out.push(tag);
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out
}

fn decode_report(mut bytes: &[u8]) -> Option<Vec<Heard>> {
    let mut heard = Vec::new();
    while !bytes.is_empty() {
        let tag = *bytes.first()?;
        let len = u32::from_le_bytes(bytes.get(1..5)?.try_into().ok()?) as usize;
        let text = bytes.get(5..5 + len)?;
        heard.push(match tag {
            0 => Heard::Said(String::from_utf8_lossy(text).into_owned()),
            1 => Heard::Left,
            2 => Heard::Silent,
            _ => Heard::Unrelayed,
        });
        bytes = &bytes[5 + len..];
    }
    Some(heard)
}

/// Where a rank whose last record is `place` (empty: none) is.
fn place_heard(place: &str) -> Heard {
    if place.is_empty() {
        Heard::Said("before its first call in this group".into())
    } else {
        Heard::Said(place.to_string())
    }
}

impl Shared {
    /// This rank's place, as a `PLACE` frame's payload.
    fn place(&self) -> String {
        self.trace
            .get()
            .and_then(|trace| trace.current())
            .map(|record| place_of(&record))
            .unwrap_or_default()
    }

    /// Whether this rank is inside a call (or failed in one), rather than between calls.
    fn in_call(&self) -> bool {
        self.trace
            .get()
            .and_then(|trace| trace.current())
            .is_some_and(|record| record.state != State::Done)
    }

    /// Whether a rank asked at `asked` should answer now: it is in a call, or has waited
    /// half the listening time for one.
    fn ready_to_answer(&self, asked: Instant) -> bool {
        self.in_call() || asked.elapsed() >= self.listen / 2
    }

    fn deliver(&self, heard: Vec<Heard>) {
        *lock(&self.answer) = Some(heard);
        self.answered.notify_all();
    }
}

/// Records `reason` as the group's loss unless one was recorded or the group is closing.
fn record(lost: &Mutex<Option<String>>, stop: &AtomicBool, reason: String) {
    if !stop.load(Ordering::SeqCst) {
        lock(lost).get_or_insert(reason);
    }
}

impl Watch {
    /// A watcher whose rank 0 waits `listen` for answers to a question.
    pub(crate) fn new(listen: Duration) -> Watch {
        Watch {
            lost: Losses::default(),
            stop: Arc::default(),
            shared: Arc::new(Shared {
                listen,
                ..Shared::default()
            }),
        }
    }

    /// The group's flight recorder, whose last record says where this rank is.
    pub(crate) fn attach_trace(&self, trace: Arc<Trace>) {
        let _ = self.shared.trace.set(trace);
    }

    /// Starts the watcher thread of `rank` over its star connections (clones of them).
    pub(crate) fn start(
        &self,
        rank: usize,
        streams: Vec<Option<TcpStream>>,
    ) -> std::io::Result<()> {
        let (lost, stop, shared) = (self.lost.clone(), self.stop.clone(), self.shared.clone());
        let body: Box<dyn FnOnce() + Send> = if rank == 0 {
            Box::new(move || Hub::new(streams, shared).run(&lost, &stop))
        } else {
            let Some(Some(stream)) = streams.into_iter().next() else {
                return Ok(());
            };
            let _ = shared.writer.set(Mutex::new(stream.try_clone()?));
            stream.set_read_timeout(Some(TICK))?;
            Box::new(move || spoke(stream, &shared, &lost, &stop))
        };
        std::thread::Builder::new()
            .name(format!("nuvec-jaccl-watch-{rank}"))
            .spawn(body)
            .map(drop)
    }

    /// Ends the watcher within a tick.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Where every rank of the group (`size` ranks, this one `rank`) is, as rank 0 heard it,
    /// and how long it listened. Without an answer in time (rank 0 stalled or gone), only
    /// this rank's place is known.
    pub(crate) fn whereabouts(&self, rank: usize, size: usize) -> (Vec<Heard>, Duration) {
        let shared = &self.shared;
        let listen = shared.listen;
        *lock(&shared.answer) = None;
        let asked = if rank == 0 {
            shared.asked.store(true, Ordering::SeqCst);
            true
        } else {
            shared
                .writer
                .get()
                .is_some_and(|writer| lock(writer).write_all(&frame(WHERE, &[])).is_ok())
        };
        let deadline = Instant::now() + 2 * listen + TICK;
        let mut answer = lock(&shared.answer);
        while asked && answer.is_none() && !shared.rank_zero_left.load(Ordering::SeqCst) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            answer = shared
                .answered
                .wait_timeout(answer, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        let heard = answer.take().filter(|heard| heard.len() == size);
        drop(answer);
        let heard = heard.unwrap_or_else(|| {
            let mut heard = vec![Heard::Unrelayed; size];
            heard[rank] = place_heard(&shared.place());
            if rank != 0 {
                heard[0] = match shared.rank_zero_left.load(Ordering::SeqCst) {
                    true => Heard::Left,
                    false => Heard::Silent,
                };
            }
            heard
        });
        (heard, listen)
    }
}

/// A question rank 0 is gathering answers to.
struct Question {
    heard: Vec<Option<Heard>>,
    askers: Vec<usize>,
    asked: Instant,
    deadline: Instant,
}

/// Rank 0's watcher.
struct Hub {
    streams: Vec<Option<TcpStream>>,
    buffers: Vec<Vec<u8>>,
    gone: Vec<bool>,
    question: Option<Question>,
    shared: Arc<Shared>,
}

impl Hub {
    fn new(streams: Vec<Option<TcpStream>>, shared: Arc<Shared>) -> Hub {
        let n = streams.len();
        Hub {
            streams,
            buffers: vec![Vec::new(); n],
            gone: vec![false; n],
            question: None,
            shared,
        }
    }

    fn run(mut self, lost: &Mutex<Option<String>>, stop: &AtomicBool) {
        let mut chunk = [0u8; 4096];
        while !stop.load(Ordering::SeqCst) {
            if self.shared.asked.swap(false, Ordering::SeqCst) {
                self.ask(0);
            }
            for peer in 1..self.streams.len() {
                self.read(peer, &mut chunk, lost, stop);
            }
            if let Some(question) = &mut self.question {
                if question.heard[0].is_none() && self.shared.ready_to_answer(question.asked) {
                    question.heard[0] = Some(place_heard(&self.shared.place()));
                }
            }
            let due = self.question.as_ref().is_some_and(|q| {
                q.heard.iter().all(Option::is_some) || Instant::now() >= q.deadline
            });
            if due {
                self.answer();
            }
            std::thread::sleep(if self.question.is_some() {
                LOOK_EVERY
            } else {
                IDLE_LOOK
            });
        }
    }

    /// Takes what `peer` sent and acts on its whole frames.
    fn read(
        &mut self,
        peer: usize,
        chunk: &mut [u8],
        lost: &Mutex<Option<String>>,
        stop: &AtomicBool,
    ) {
        if self.gone[peer] {
            return;
        }
        let Some(stream) = &self.streams[peer] else {
            return;
        };
        loop {
            match recv_now(stream, chunk) {
                Ok(0) => {
                    let how = "its side-channel connection to rank 0 closed (its process ended or it closed the group)";
                    return self.lose(peer, how.into(), lost, stop);
                }
                Ok(n) => self.buffers[peer].extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let how = format!("its side-channel connection to rank 0 failed: {e}");
                    return self.lose(peer, how, lost, stop);
                }
            }
        }
        while let Some(taken) = take_frame(&mut self.buffers[peer]) {
            match taken {
                Ok((WHERE, _)) => self.ask(peer),
                Ok((PLACE, place)) => {
                    if let Some(question) = &mut self.question {
                        question.heard[peer] = Some(place_heard(&String::from_utf8_lossy(&place)));
                    }
                }
                Ok((kind, _)) => {
                    let how = format!("it sent a side-channel frame of unknown kind {kind}");
                    return self.lose(peer, how, lost, stop);
                }
                Err(what) => return self.lose(peer, format!("it sent {what}"), lost, stop),
            }
        }
    }

    /// Records `peer`'s loss and tells every other rank.
    fn lose(&mut self, peer: usize, how: String, lost: &Mutex<Option<String>>, stop: &AtomicBool) {
        self.gone[peer] = true;
        record(lost, stop, format!("rank {peer} is gone: {how}"));
        if let Some(question) = &mut self.question {
            question.heard[peer] = Some(Heard::Left);
        }
        let notice = frame(LEFT, &(peer as u32).to_le_bytes());
        self.send_all(&notice);
    }

    /// Sends `bytes` to every rank still there.
    fn send_all(&mut self, bytes: &[u8]) {
        for (peer, stream) in self.streams.iter_mut().enumerate().skip(1) {
            if let (false, Some(stream)) = (self.gone[peer], stream) {
                let _ = stream.write_all(bytes);
            }
        }
    }

    /// `asker`'s question: joins the open one, or asks every rank.
    fn ask(&mut self, asker: usize) {
        if self.question.is_none() {
            let mut heard: Vec<Option<Heard>> = self
                .gone
                .iter()
                .map(|&gone| gone.then_some(Heard::Left))
                .collect();
            heard[0] = None;
            self.question = Some(Question {
                heard,
                askers: Vec::new(),
                asked: Instant::now(),
                deadline: Instant::now() + self.shared.listen,
            });
            self.send_all(&frame(QUERY, &[]));
        }
        let question = self.question.as_mut().expect("opened above");
        if !question.askers.contains(&asker) {
            question.askers.push(asker);
        }
        // A rank asks from the call that failed: what it said before (if anything) is stale.
        if question.heard[asker].is_some() && !self.gone[asker] {
            question.heard[asker] = None;
            if asker == 0 {
                question.asked = Instant::now();
            } else if let Some(stream) = &mut self.streams[asker] {
                let _ = stream.write_all(&frame(QUERY, &[]));
            }
        }
    }

    /// Tells every rank that asked what was heard (silence from the rest).
    fn answer(&mut self) {
        let Some(mut question) = self.question.take() else {
            return;
        };
        if question.heard[0].is_none() {
            question.heard[0] = Some(place_heard(&self.shared.place()));
        }
        let heard: Vec<Heard> = question
            .heard
            .into_iter()
            .map(|h| h.unwrap_or(Heard::Silent))
            .collect();
        for &asker in &question.askers {
            self.tell(asker, heard.clone());
        }
    }

    /// Gives `asker` the answer `heard`.
    fn tell(&mut self, asker: usize, heard: Vec<Heard>) {
        if asker == 0 {
            self.shared.deliver(heard);
        } else if let (false, Some(stream)) = (self.gone[asker], &mut self.streams[asker]) {
            let _ = stream.write_all(&frame(REPORT, &encode_report(&heard)));
        }
    }
}

/// The watcher of a rank other than 0, reading rank 0's frames.
fn spoke(mut stream: TcpStream, shared: &Shared, lost: &Mutex<Option<String>>, stop: &AtomicBool) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    // A question received while this rank was between calls, and when.
    let mut pending: Option<Instant> = None;
    let answer = |shared: &Shared| {
        if let Some(writer) = shared.writer.get() {
            let _ = lock(writer).write_all(&frame(PLACE, shared.place().as_bytes()));
        }
    };
    while !stop.load(Ordering::SeqCst) {
        if pending.is_some_and(|asked| shared.ready_to_answer(asked)) {
            answer(shared);
            pending = None;
            let _ = stream.set_read_timeout(Some(TICK));
        }
        match stream.read(&mut chunk) {
            Ok(0) => {
                record(lost, stop, "rank 0 is gone: its side-channel connection closed (its process ended or it closed the group)".into());
                shared.rank_zero_left.store(true, Ordering::SeqCst);
                shared.answered.notify_all();
                return;
            }
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                let reason = format!("rank 0 is gone: its side-channel connection failed: {e}");
                record(lost, stop, reason);
                return;
            }
        }
        while let Some(taken) = take_frame(&mut buffer) {
            match taken {
                Ok((LEFT, payload)) if payload.len() == 4 => {
                    let peer = u32::from_le_bytes(payload.try_into().expect("4 bytes"));
                    record(lost, stop, format!("rank {peer} is gone: rank 0 saw its side-channel connection close (its process ended or it closed the group)"));
                }
                Ok((QUERY, _)) => {
                    let asked = Instant::now();
                    if shared.ready_to_answer(asked) {
                        answer(shared);
                    } else {
                        pending = Some(asked);
                        let _ = stream.set_read_timeout(Some(LOOK_EVERY));
                    }
                }
                Ok((REPORT, payload)) => match decode_report(&payload) {
                    Some(heard) => shared.deliver(heard),
                    None => {
                        record(
                            lost,
                            stop,
                            "rank 0 sent a malformed report on the side channel".into(),
                        );
                        return;
                    }
                },
                _ => {
                    record(
                        lost,
                        stop,
                        "rank 0 sent a malformed notice on the side channel".into(),
                    );
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_out_whole_and_reports_round_trip() {
        let mut buffer = frame(PLACE, b"in all_sum #3 (x)");
        buffer.extend_from_slice(&frame(QUERY, &[])[..3]);
        assert_eq!(
            take_frame(&mut buffer),
            Some(Ok((PLACE, b"in all_sum #3 (x)".to_vec())))
        );
        assert_eq!(take_frame(&mut buffer), None, "half a frame waits");
        let mut long = vec![PLACE];
        long.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(take_frame(&mut long), Some(Err(_))));
        let heard = vec![
            Heard::Said("in all_gather #2 (y)".into()),
            Heard::Left,
            Heard::Silent,
            Heard::Unrelayed,
        ];
        assert_eq!(decode_report(&encode_report(&heard)), Some(heard));
        assert_eq!(decode_report(&[0, 9, 0, 0, 0, b'a']), None);
    }
}
