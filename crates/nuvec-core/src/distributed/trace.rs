//! The flight recorder: every group keeps the last records of its communication on this rank
//! (`NUVEC_DISTRIBUTED_TRACE_SIZE`, default 256; 0 keeps none), each a collective or message
//! with its number, type, shape and bytes, the line of the program that called it, when it
//! started and ended, and how it ended.
//! [`Group::trace`](super::Group::trace) returns them; when a collective fails and
//! `NUVEC_DISTRIBUTED_TRACE` names a folder, the rank writes them there as
//! `rank-N.json`, so that the ranks' last steps can be read side by side.

use super::trace_clock::Clock;
use crate::{DType, Result};
use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// How a recorded operation ended, if it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Still running (or the rank stopped inside it).
    Running,
    /// Finished.
    Done,
    /// Failed, with the error's text.
    Failed(String),
}

/// One communication of a group on this rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its number, from 0, among the group's collectives (for a collective) or among the
    /// messages sent to, or received from, its peer (for a `send` or `recv`): every rank running
    /// the same program numbers its calls alike, so `all_sum #41` is the same call everywhere.
    pub sequence: u64,
    /// The operation (`all_sum`, `send`, …).
    pub op: &'static str,
    /// The element type.
    pub dtype: DType,
    /// The array's shape (the input's; a `recv`'s expected shape).
    pub shape: Vec<i32>,
    /// The array's bytes (of that shape and type).
    pub bytes: u64,
    /// The other rank of a `send` or `recv`, or a broadcast's root.
    pub peer: Option<usize>,
    /// Where the program called it.
    pub location: &'static Location<'static>,
    /// When it started.
    pub started: SystemTime,
    /// When it ended (done or failed); `None` while running.
    pub ended: Option<SystemTime>,
    /// How it ended.
    pub state: State,
}

impl fmt::Display for Record {
    /// `all_sum #41 (float32 [1024], src/train.rs:88)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} #{} ({} {:?}",
            self.op, self.sequence, self.dtype, self.shape
        )?;
        if let Some(peer) = self.peer {
            write!(f, ", rank {peer}")?;
        }
        write!(f, ", {}:{})", self.location.file(), self.location.line())
    }
}

/// A record's dims as kept: inline for up to six (no allocation on the path of every call).
/// Small, so that writing a record costs little (a shape's dims fit `i32`).
#[derive(Debug)]
enum Dims {
    Inline([u32; 6], u8),
    Heap(Box<[u32]>),
}

impl Dims {
    fn of(shape: &[usize]) -> Dims {
        match shape.len() {
            n if n <= 6 => {
                let mut dims = [0; 6];
                for (kept, &d) in dims.iter_mut().zip(shape) {
                    *kept = d as u32;
                }
                Dims::Inline(dims, n as u8)
            }
            _ => Dims::Heap(shape.iter().map(|&d| d as u32).collect()),
        }
    }

    fn to_vec(&self) -> Vec<i32> {
        let dims = match self {
            Dims::Inline(dims, n) => &dims[..*n as usize],
            Dims::Heap(dims) => &dims[..],
        };
        dims.iter().map(|&d| d as i32).collect()
    }
}

/// One kept record.
#[derive(Debug)]
struct Slot {
    /// Its place among every record of this rank.
    index: u64,
    /// When it started, as the trace's clock stamps.
    started: u64,
    sequence: u64,
    op: &'static str,
    dtype: DType,
    dims: Dims,
    /// The peer, `u32::MAX` for none.
    peer: u32,
    location: &'static Location<'static>,
    /// The error's text, once the call failed.
    failed: Option<Box<str>>,
}

/// A group's flight recorder on this rank: a ring of its last records, slot `n % slots`
/// holding this rank's `n`th (a power of two slots, at least the records kept). A backend's
/// communicator is handed it
/// ([`Communicator::attach_trace`](super::Communicator::attach_trace)) to say, when the group
/// fails, where this rank is.
#[derive(Debug)]
pub struct Trace {
    /// Records kept for [`Trace::records`] (0: none, though the last is still known).
    capacity: usize,
    /// The slots less one: a record's slot is its index masked by this.
    mask: u64,
    clock: Clock,
    state: Mutex<Ring>,
    /// For each slot, how its last record ended, marked by [`Trace::end`] without the lock
    /// (it is on the path of every call).
    ends: Vec<End>,
}

/// How a slot's last record ended.
#[derive(Debug, Default)]
struct End {
    /// One more than the index of the last record there that ended (well or not).
    index: AtomicU64,
    /// When it ended, as the trace's clock stamps (written before `index`).
    at: AtomicU64,
}

#[derive(Debug, Default)]
struct Ring {
    /// How many records were begun.
    next: u64,
    /// How many collectives were begun.
    collectives: u64,
    /// How many messages were begun to and from each peer (`send`, `recv`).
    sent: Vec<u64>,
    received: Vec<u64>,
    /// `max(capacity, 1)` slots or more: with no records kept, the last one still is.
    slots: Vec<Option<Slot>>,
}

/// Takes the next number from `counts[peer]`, growing the list as needed.
fn take_number(counts: &mut Vec<u64>, peer: usize) -> u64 {
    if counts.len() <= peer {
        counts.resize(peer + 1, 0);
    }
    counts[peer] += 1;
    counts[peer] - 1
}

impl Slot {
    /// The record, ended if `end` (its slot's mark) says so, its stamps read by `wall`.
    fn record(&self, end: &End, wall: &dyn Fn(u64) -> SystemTime) -> Record {
        let ended = end.index.load(Ordering::Acquire) == self.index + 1;
        let shape = self.dims.to_vec();
        let elements: u64 = shape.iter().map(|&d| d as u64).product();
        Record {
            sequence: self.sequence,
            op: self.op,
            dtype: self.dtype,
            bytes: elements * self.dtype.size() as u64,
            shape,
            peer: (self.peer != u32::MAX).then_some(self.peer as usize),
            location: self.location,
            started: wall(self.started),
            ended: ended.then(|| wall(end.at.load(Ordering::Relaxed))),
            state: match &self.failed {
                Some(error) => State::Failed(error.to_string()),
                None if ended => State::Done,
                None => State::Running,
            },
        }
    }
}

impl Trace {
    /// A trace keeping `NUVEC_DISTRIBUTED_TRACE_SIZE` records (default 256).
    pub(crate) fn from_env() -> Trace {
        let capacity = std::env::var("NUVEC_DISTRIBUTED_TRACE_SIZE")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(256);
        Trace::with_capacity(capacity)
    }

    /// A trace keeping the last `capacity` records (at most 2^20): what every group starts
    /// with (`NUVEC_DISTRIBUTED_TRACE_SIZE`), public for backends' and benchmarks' use.
    pub fn with_capacity(capacity: usize) -> Trace {
        let capacity = capacity.min(1 << 20);
        let slots = capacity.max(1).next_power_of_two();
        Trace {
            capacity,
            mask: slots as u64 - 1,
            clock: Clock::new(),
            state: Mutex::new(Ring {
                slots: (0..slots).map(|_| None).collect(),
                ..Ring::default()
            }),
            ends: (0..slots).map(|_| End::default()).collect(),
        }
    }

    /// The slot of record `index` (a mask, not a division: this is on every call's path).
    fn slot(&self, index: u64) -> usize {
        (index & self.mask) as usize
    }

    /// Records the start of `op` (a `send` or `recv` to or from `peer`, else a collective);
    /// returns its place among this rank's records, for [`Trace::end`]. Every collective of
    /// a group goes through it (`Group::communicate`): its cost, with [`Trace::end`]'s, is
    /// the recorder's cost per call (`bench_distributed` prints it).
    pub fn begin(
        &self,
        op: &'static str,
        (dtype, shape): (DType, &[usize]),
        peer: Option<usize>,
        location: &'static Location<'static>,
    ) -> u64 {
        let started = self.clock.stamp();
        let mut ring = crate::array::lock(&self.state);
        let index = ring.next;
        ring.next += 1;
        let sequence = match (op, peer) {
            ("send", Some(peer)) => take_number(&mut ring.sent, peer),
            ("recv", Some(peer)) => take_number(&mut ring.received, peer),
            _ => {
                ring.collectives += 1;
                ring.collectives - 1
            }
        };
        let at = self.slot(index);
        ring.slots[at] = Some(Slot {
            index,
            started,
            sequence,
            op,
            dtype,
            dims: Dims::of(shape),
            peer: peer.map_or(u32::MAX, |p| p as u32),
            location,
            failed: None,
        });
        index
    }

    /// Records how the record at `index` ended: a mark without the lock when it finished
    /// well, with the error's text under the lock when not.
    pub fn end(&self, index: u64, outcome: &Result<()>) {
        let (at, ended) = (self.slot(index), self.clock.stamp());
        if let Err(error) = outcome {
            let mut ring = crate::array::lock(&self.state);
            if let Some(slot) = ring.slots[at].as_mut().filter(|s| s.index == index) {
                slot.failed = Some(error.to_string().into());
            }
        }
        let end = &self.ends[at];
        end.at.store(ended, Ordering::Relaxed);
        end.index.store(index + 1, Ordering::Release);
    }

    /// The records kept, oldest first.
    pub(crate) fn records(&self) -> Vec<Record> {
        if self.capacity == 0 {
            return Vec::new();
        }
        // Before the lock: in the clock's first 10 ms the reader waits, and calls would too.
        let wall = self.clock.reader();
        let ring = crate::array::lock(&self.state);
        let first = ring.next.saturating_sub(self.capacity as u64);
        (first..ring.next)
            .filter_map(|n| {
                let at = self.slot(n);
                Some(ring.slots[at].as_ref()?.record(&self.ends[at], &wall))
            })
            .collect()
    }

    /// The last record begun on this rank (running, or how it ended), if any: where this
    /// rank is, for a report of where every rank is when the group fails.
    pub fn current(&self) -> Option<Record> {
        let wall = self.clock.reader();
        let ring = crate::array::lock(&self.state);
        let at = self.slot(ring.next.checked_sub(1)?);
        Some(ring.slots[at].as_ref()?.record(&self.ends[at], &wall))
    }
}

/// Nanoseconds since the Unix epoch (0 before it).
fn unix_ns(at: SystemTime) -> u128 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// The records as JSON: `{"rank": R, "size": S, "written_ns": T, "records": [{...}, ...]}`,
/// times in nanoseconds since the Unix epoch (`end_ns` null while running).
pub fn records_json(rank: usize, size: usize, records: &[Record]) -> String {
    let text = |s: &str| {
        let mut out = String::with_capacity(s.len() + 2);
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    };
    let rows: Vec<String> = records
        .iter()
        .map(|r| {
            let (state, error) = match &r.state {
                State::Running => ("running", None),
                State::Done => ("done", None),
                State::Failed(reason) => ("failed", Some(reason.as_str())),
            };
            format!(
                "{{\"sequence\": {}, \"op\": {}, \"dtype\": {}, \"shape\": {:?}, \"bytes\": {}, \"peer\": {}, \"file\": {}, \"line\": {}, \"start_ns\": {}, \"end_ns\": {}, \"state\": {}, \"error\": {}}}",
                r.sequence,
                text(r.op),
                text(&r.dtype.to_string()),
                r.shape,
                r.bytes,
                r.peer.map_or_else(|| "null".to_string(), |p| p.to_string()),
                text(r.location.file()),
                r.location.line(),
                unix_ns(r.started),
                r.ended.map_or_else(|| "null".to_string(), |t| unix_ns(t).to_string()),
                text(state),
                error.map_or_else(|| "null".to_string(), text),
            )
        })
        .collect();
    format!(
        "{{\"rank\": {rank}, \"size\": {size}, \"written_ns\": {}, \"records\": [\n  {}\n]}}\n",
        unix_ns(SystemTime::now()),
        rows.join(",\n  ")
    )
}

/// Writes the records to `NUVEC_DISTRIBUTED_TRACE`/`rank-N.json` when that variable names a
/// folder (created if missing); errors writing are reported on stderr, never in place of the
/// failure that called for the dump.
pub(crate) fn dump_if_asked(rank: usize, size: usize, records: &[Record]) {
    let Some(dir) = std::env::var_os("NUVEC_DISTRIBUTED_TRACE").filter(|d| !d.is_empty()) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let path = dir.join(format!("rank-{rank}.json"));
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, records_json(rank, size, records)));
    if let Err(error) = written {
        eprintln!(
            "nuvec: writing the communication trace to {} failed: {error}",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_keeps_the_last_records_with_how_each_ended() {
        let trace = Trace::with_capacity(2);
        let here = Location::caller();
        let before = SystemTime::now();
        for _ in 0..3 {
            let n = trace.begin("all_sum", (DType::F32, &[4]), None, here);
            assert!(trace
                .records()
                .last()
                .is_some_and(|r| r.state == State::Running && r.ended.is_none()));
            trace.end(n, &Ok(()));
        }
        let last = trace.begin("recv", (DType::BF16, &[2, 3]), Some(1), here);
        let failed = Err(crate::Error::Distributed {
            op: "recv".into(),
            rank: Some(1),
            reason: "the peer \"left\"".into(),
        });
        trace.end(last, &failed);
        let records = trace.records();
        assert_eq!(records.len(), 2);
        // Collectives and the messages from each peer are numbered apart.
        assert_eq!((records[0].sequence, records[1].sequence), (2, 0));
        assert_eq!(trace.current().as_ref(), records.last());
        assert_eq!(records[0].state, State::Done);
        assert!(matches!(&records[1].state, State::Failed(e) if e.contains("left")));
        assert_eq!((records[0].bytes, records[1].bytes), (16, 12));
        // Stamped in order, each within the wall clock's steps of the test's own times.
        let slack = std::time::Duration::from_millis(20);
        let after = SystemTime::now();
        for r in &records {
            let ended = r.ended.expect("an ended record's end");
            assert!(r.started + slack >= before && r.started <= ended, "{r:?}");
            assert!(ended <= after + slack, "{r:?}");
        }
        assert!(
            records[0].ended.unwrap() <= records[1].started,
            "{records:?}"
        );
        let shown = records[1].to_string();
        assert!(
            shown.starts_with("recv #0 (bfloat16 [2, 3], rank 1, ") && shown.contains("trace.rs:"),
            "{shown}"
        );
        let next = trace.begin("all_max", (DType::F32, &[1]), None, here);
        assert_eq!(
            trace.current().map(|r| (r.sequence, r.state)),
            Some((3, State::Running))
        );
        trace.end(next, &Ok(()));
        let json = records_json(0, 2, &records);
        assert!(
            json.contains("\"state\": \"failed\"") && json.contains("\\\"left\\\""),
            "{json}"
        );
        let start = unix_ns(records[0].started);
        assert!(
            json.contains("\"bytes\": 16,") && json.contains(&format!("\"start_ns\": {start},")),
            "{json}"
        );
    }

    #[test]
    fn a_trace_that_keeps_no_records_still_knows_where_this_rank_is() {
        let trace = Trace::with_capacity(0);
        assert!(trace.current().is_none());
        let n = trace.begin("send", (DType::F32, &[2]), Some(3), Location::caller());
        trace.end(n, &Ok(()));
        assert!(trace.records().is_empty());
        let current = trace.current().unwrap();
        assert_eq!(
            (current.op, current.sequence, current.state),
            ("send", 0, State::Done)
        );
    }
}
