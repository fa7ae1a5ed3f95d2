//! The flight recorder: every group keeps the last records of its communication on this rank
//! (`NUVEC_DISTRIBUTED_TRACE_SIZE`, default 256; 0 keeps none), each a collective or message
//! with its number, type, shape, the line of the program that called it and how it ended.
//! [`Group::trace`](super::Group::trace) returns them; when a collective fails and
//! `NUVEC_DISTRIBUTED_TRACE` names a folder, the rank writes them there as
//! `rank-N.json`, so that the ranks' last steps can be read side by side.

use crate::{DType, Result};
use std::fmt;
use std::panic::Location;
use std::sync::Mutex;

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
    /// The other rank of a `send` or `recv`, or a broadcast's root.
    pub peer: Option<usize>,
    /// Where the program called it.
    pub location: &'static Location<'static>,
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
#[derive(Debug)]
enum Dims {
    Inline([usize; 6], u8),
    Heap(Vec<usize>),
}

impl Dims {
    fn of(shape: &[usize]) -> Dims {
        match shape.len() {
            n if n <= 6 => {
                let mut dims = [0; 6];
                dims[..n].copy_from_slice(shape);
                Dims::Inline(dims, n as u8)
            }
            _ => Dims::Heap(shape.to_vec()),
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
    sequence: u64,
    op: &'static str,
    dtype: DType,
    dims: Dims,
    peer: Option<usize>,
    location: &'static Location<'static>,
    state: State,
}

/// A group's flight recorder on this rank: a ring of its last records, slot `n % capacity`
/// holding this rank's `n`th. A backend's communicator is handed it
/// ([`Communicator::attach_trace`](super::Communicator::attach_trace)) to say, when the group
/// fails, where this rank is.
#[derive(Debug)]
pub struct Trace {
    capacity: usize,
    state: Mutex<Ring>,
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
    /// The last record begun (kept when `capacity` is 0, for [`Trace::current`]).
    last: Option<Slot>,
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
    fn record(&self) -> Record {
        Record {
            sequence: self.sequence,
            op: self.op,
            dtype: self.dtype,
            shape: self.dims.to_vec(),
            peer: self.peer,
            location: self.location,
            state: self.state.clone(),
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

    fn with_capacity(capacity: usize) -> Trace {
        let slots = (0..capacity.min(1 << 20)).map(|_| None).collect();
        Trace {
            capacity: capacity.min(1 << 20),
            state: Mutex::new(Ring {
                slots,
                ..Ring::default()
            }),
        }
    }

    /// Records the start of `op` (a `send` or `recv` to or from `peer`, else a collective);
    /// returns its place among this rank's records, for [`Trace::end`].
    pub(crate) fn begin(
        &self,
        op: &'static str,
        (dtype, shape): (DType, &[usize]),
        peer: Option<usize>,
        location: &'static Location<'static>,
    ) -> u64 {
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
        let slot = Slot {
            index,
            sequence,
            op,
            dtype,
            dims: Dims::of(shape),
            peer,
            location,
            state: State::Running,
        };
        if self.capacity > 0 {
            let at = (index % self.capacity as u64) as usize;
            ring.slots[at] = Some(slot);
        } else {
            ring.last = Some(slot);
        }
        index
    }

    /// Records how the record at `index` ended.
    pub(crate) fn end(&self, index: u64, outcome: &Result<()>) {
        let state = match outcome {
            Ok(()) => State::Done,
            Err(error) => State::Failed(error.to_string()),
        };
        let mut ring = crate::array::lock(&self.state);
        let slot = match self.capacity {
            0 => ring.last.as_mut(),
            capacity => ring.slots[(index % capacity as u64) as usize].as_mut(),
        };
        if let Some(slot) = slot.filter(|s| s.index == index) {
            slot.state = state;
        }
    }

    /// The records kept, oldest first.
    pub(crate) fn records(&self) -> Vec<Record> {
        let ring = crate::array::lock(&self.state);
        if self.capacity == 0 {
            return Vec::new();
        }
        let first = ring.next.saturating_sub(self.capacity as u64);
        (first..ring.next)
            .filter_map(|n| ring.slots[(n % self.capacity as u64) as usize].as_ref())
            .map(Slot::record)
            .collect()
    }

    /// The last record begun on this rank (running, or how it ended), if any: where this
    /// rank is, for a report of where every rank is when the group fails.
    pub fn current(&self) -> Option<Record> {
        let ring = crate::array::lock(&self.state);
        let index = ring.next.checked_sub(1)?;
        match self.capacity {
            0 => ring.last.as_ref(),
            capacity => ring.slots[(index % capacity as u64) as usize].as_ref(),
        }
        .map(Slot::record)
    }
}

/// The records as JSON: `{"rank": R, "size": S, "records": [{...}, ...]}`.
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
                "{{\"sequence\": {}, \"op\": {}, \"dtype\": {}, \"shape\": {:?}, \"peer\": {}, \"file\": {}, \"line\": {}, \"state\": {}, \"error\": {}}}",
                r.sequence,
                text(r.op),
                text(&r.dtype.to_string()),
                r.shape,
                r.peer.map_or_else(|| "null".to_string(), |p| p.to_string()),
                text(r.location.file()),
                r.location.line(),
                text(state),
                error.map_or_else(|| "null".to_string(), text),
            )
        })
        .collect();
    format!(
        "{{\"rank\": {rank}, \"size\": {size}, \"records\": [\n  {}\n]}}\n",
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
        for _ in 0..3 {
            let n = trace.begin("all_sum", (DType::F32, &[4]), None, here);
            assert!(trace
                .records()
                .last()
                .is_some_and(|r| r.state == State::Running));
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
