//! An in-memory [`Transport`] for the simulation tests: the ranks of a group are threads of
//! one process, and each direction between two ranks is a byte stream carrying the same
//! frames as TCP (a header, then its payload; abort notices as the ring writes them), plus,
//! where asked, a bounded channel of the shared-memory transport's size for a ring pass's
//! chunks. What is deterministic is the data and the faults' seed; the threads' interleaving
//! is the scheduler's.
//!
//! Faults: every write is delivered after a random delay (so bytes on different streams
//! arrive out of the order they were written in, while each stream keeps its own order), a
//! slow rank sleeps before each of its writes, and a rank can be lost: its writes end and
//! writes to it fail, as when its process dies.

mod streams;

use super::transport::{Incoming, Pass, Route, Transport, Window};
use crate::shm::{SLOTS, SLOT_BYTES};
use crate::sync::lock;
use crate::tcp::frame::{Header, Kind, HEADER_BYTES};
use crate::tcp::wire::{abort_error, abort_notice, MAX_REASON};
use crate::test_random::Random;
use nuvec_core::{DType, Error, Result};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use streams::Stream;

/// What can go wrong, and how the ranks are connected.
#[derive(Clone, Debug)]
pub(crate) struct Faults {
    /// The seed of every rank's delays.
    pub(crate) seed: u64,
    /// The longest delay before a write is delivered.
    pub(crate) max_delay: Duration,
    /// A rank that sleeps this long before each of its writes.
    pub(crate) slow: Option<(usize, Duration)>,
    /// Whether ring neighbours' chunks go through bounded channels (with this window in
    /// slots) instead of the unbounded frame streams.
    pub(crate) channel_window: Option<usize>,
    /// Connections every pair of ranks shares.
    pub(crate) connections: usize,
    /// Only ring neighbours are connected (a cabled ring): a frame to or from another rank
    /// is a bug in the algorithm that sent it, and panics.
    pub(crate) ring_only: bool,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            seed: 1,
            max_delay: Duration::ZERO,
            slow: None,
            channel_window: None,
            connections: 1,
            ring_only: false,
        }
    }
}

/// The streams of a group: frames and, where set, channels, for every ordered pair of ranks
/// and connection.
pub(crate) struct Fabric {
    size: usize,
    faults: Faults,
    frames: Vec<Stream>,
    channels: Vec<Stream>,
}

impl Fabric {
    /// A group of `size` ranks with `faults`.
    pub(crate) fn new(size: usize, faults: Faults) -> Arc<Fabric> {
        let streams = size * size * faults.connections;
        let capacity = Some(SLOTS * SLOT_BYTES);
        Arc::new(Fabric {
            size,
            frames: (0..streams).map(|_| Stream::new(None)).collect(),
            channels: (0..streams).map(|_| Stream::new(capacity)).collect(),
            faults,
        })
    }

    fn index(&self, from: usize, to: usize, connection: usize) -> usize {
        (from * self.size + to) * self.faults.connections + connection
    }

    /// Rank `rank`'s end of the group, waiting at most `timeout`.
    pub(crate) fn rank(self: &Arc<Fabric>, rank: usize, timeout: Duration) -> MemoryTransport {
        MemoryTransport {
            fabric: self.clone(),
            rank,
            timeout,
            random: Mutex::new(Random::new(
                self.faults.seed ^ (rank as u64 + 1).wrapping_mul(0x9E37_79B9),
            )),
        }
    }
}

/// One rank of a [`Fabric`].
pub(crate) struct MemoryTransport {
    fabric: Arc<Fabric>,
    rank: usize,
    timeout: Duration,
    random: Mutex<Random>,
}

fn error(op: &str, rank: usize, reason: String) -> Error {
    Error::Distributed {
        op: op.into(),
        rank: Some(rank),
        reason,
    }
}

impl MemoryTransport {
    /// Loses this rank: its writes end and writes to it fail, as when its process dies.
    pub(crate) fn lose(&self) {
        for peer in 0..self.fabric.size {
            for connection in 0..self.fabric.faults.connections {
                for (from, to) in [(self.rank, peer), (peer, self.rank)] {
                    let index = self.fabric.index(from, to, connection);
                    for stream in [&self.fabric.frames[index], &self.fabric.channels[index]] {
                        let mut bytes = lock(&stream.bytes);
                        if from == self.rank {
                            bytes.ended = true;
                        } else {
                            bytes.reader_gone = true;
                        }
                        stream.changed.notify_all();
                    }
                }
            }
        }
    }

    fn delay(&self) -> Duration {
        let faults = &self.fabric.faults;
        if let Some((rank, pause)) = faults.slow {
            if rank == self.rank {
                std::thread::sleep(pause);
            }
        }
        if faults.max_delay.is_zero() {
            return Duration::ZERO;
        }
        let draw = lock(&self.random).below(1024);
        faults.max_delay.mul_f64(draw as f64 / 1024.0)
    }

    fn frames(&self, from: usize, to: usize, connection: usize) -> &Stream {
        assert!(
            self.linked(if from == self.rank { to } else { from }),
            "ranks {from} and {to} are not connected on a ring-only fabric"
        );
        &self.fabric.frames[self.fabric.index(from, to, connection)]
    }

    /// Whether this rank is connected to `peer`.
    fn linked(&self, peer: usize) -> bool {
        let size = self.fabric.size;
        !self.fabric.faults.ring_only || crate::tcp::pairs::neighbours(size, self.rank, peer)
    }

    /// The ranks this rank is connected to.
    fn peers(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.fabric.size).filter(move |&p| p != self.rank && self.linked(p))
    }

    fn channel(&self, from: usize, to: usize) -> &Stream {
        &self.fabric.channels[self.fabric.index(from, to, 0)]
    }

    /// Appends `bytes` to `stream` towards rank `to`, waiting for room in a channel.
    fn write(&self, stream: &Stream, (op, to): (&str, usize), bytes: &[u8]) -> Result<()> {
        let delay = self.delay();
        let deadline = Instant::now() + self.timeout;
        let mut state = lock(&stream.bytes);
        loop {
            if state.reader_gone {
                return Err(error(op, to, format!("sending failed: rank {to} is gone")));
            }
            if state.ended {
                return Err(error(op, to, "this rank's writes ended".into()));
            }
            let room = stream
                .capacity
                .is_none_or(|capacity| state.held() + bytes.len() <= capacity);
            if room {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(error(
                    op,
                    to,
                    format!("timed out sending: rank {to} stopped reading"),
                ));
            }
            state = stream
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let last = state.in_flight.back().map(|(at, _)| *at);
        let at = (Instant::now() + delay).max(last.unwrap_or_else(Instant::now));
        state.in_flight.push_back((at, bytes.to_vec()));
        stream.changed.notify_all();
        Ok(())
    }

    /// Takes exactly `into.len()` bytes from `stream` (from rank `from`) into `into`, waiting
    /// at most `wait`; `alive` is asked now and then whether to go on.
    fn read(
        &self,
        stream: &Stream,
        (op, from): (&str, usize),
        into: &mut [u8],
        (wait, alive): (Duration, &dyn Fn() -> Result<()>),
    ) -> Result<()> {
        let deadline = Instant::now() + wait;
        let mut state = lock(&stream.bytes);
        let mut filled = 0;
        while filled < into.len() {
            let next = state.deliver();
            let take = state.take(&mut into[filled..]);
            filled += take;
            if take > 0 {
                stream.changed.notify_all();
            }
            if filled == into.len() {
                break;
            }
            if state.ended && state.in_flight.is_empty() {
                return Err(error(
                    op,
                    from,
                    "the peer closed its connection (its process ended or the group was closed)"
                        .into(),
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(error(
                    op,
                    from,
                    format!(
                        "timed out after {:.1} s waiting for data",
                        wait.as_secs_f64()
                    ),
                ));
            }
            let until = next.unwrap_or(deadline).min(deadline);
            let nap = until
                .saturating_duration_since(now)
                .min(Duration::from_millis(5));
            state = stream
                .changed
                .wait_timeout(state, nap.max(Duration::from_micros(50)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
            drop(state);
            alive()?;
            state = lock(&stream.bytes);
        }
        Ok(())
    }

    /// The abort notice waiting at the front of rank `from`'s frames, read whole.
    fn waiting_abort(&self, from: usize, op: &str) -> Option<Error> {
        let stream = self.frames(from, self.rank, 0);
        let header = {
            let mut state = lock(&stream.bytes);
            state.deliver();
            let raw = state.peek(HEADER_BYTES);
            if raw.len() < HEADER_BYTES {
                return None;
            }
            let header = Header::decode(raw.as_slice().try_into().ok()?).ok()?;
            (header.kind == Kind::Abort).then_some(header)?
        };
        Some(self.recv_header(from, 0, op).err().unwrap_or_else(|| {
            error(
                op,
                from,
                format!("rank {from} sent a bad notice {header:?}"),
            )
        }))
    }

    /// Whether rank `from` can still send: an error when its frames ended or hold an abort.
    fn still_there(&self, from: usize, op: &str) -> Result<()> {
        if let Some(notice) = self.waiting_abort(from, op) {
            return Err(notice);
        }
        let stream = self.frames(from, self.rank, 0);
        let state = lock(&stream.bytes);
        if state.ended && state.in_flight.is_empty() && state.delivered.is_empty() {
            return Err(error(op, from, "the peer closed its connection".into()));
        }
        Ok(())
    }

    /// A chunk of ring pass `sequence` framed as on TCP.
    fn chunk_frame(sequence: u64, payload: &[u8]) -> Vec<u8> {
        let header = Header {
            kind: Kind::Chunk,
            dtype: DType::U8,
            sequence,
            bytes: payload.len() as u64,
        };
        [&header.encode()[..], payload].concat()
    }
}

impl Transport for MemoryTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.fabric.size
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn ring_connections(&self) -> usize {
        self.fabric.faults.connections
    }

    fn full_mesh(&self) -> bool {
        !self.fabric.faults.ring_only || self.fabric.size <= 3
    }

    fn begin(&self, _ours: &Header) {}

    fn accept(&self, _bytes: u64) {}

    fn end(&self) {}

    fn send_frame(
        &self,
        to: usize,
        connection: usize,
        header: &Header,
        payload: &[u8],
    ) -> Result<()> {
        let frame = [&header.encode()[..], payload].concat();
        let stream = self.frames(self.rank, to, connection);
        self.write(stream, (header.kind.name(), to), &frame)
    }

    fn recv_header(&self, from: usize, connection: usize, op: &str) -> Result<Header> {
        let stream = self.frames(from, self.rank, connection);
        let mut raw = [0u8; HEADER_BYTES];
        self.read(stream, (op, from), &mut raw, (self.timeout, &|| Ok(())))?;
        let header = Header::decode(&raw).map_err(|reason| error(op, from, reason))?;
        if header.kind != Kind::Abort {
            return Ok(header);
        }
        if header.bytes > MAX_REASON as u64 {
            return Err(error(op, from, "a corrupt abort notice".into()));
        }
        let mut reason = vec![0u8; header.bytes as usize];
        self.read(stream, (op, from), &mut reason, (self.timeout, &|| Ok(())))?;
        Err(abort_error(op, from, &header, &reason))
    }

    fn recv_payload(&self, from: usize, connection: usize, op: &str, buf: &mut [u8]) -> Result<()> {
        let stream = self.frames(from, self.rank, connection);
        self.read(stream, (op, from), buf, (self.timeout, &|| Ok(())))
    }

    fn recv_frame(
        &self,
        (from, connection): Route,
        op: &str,
        frame: &mut [u8],
        payload: &dyn Fn(&Header) -> u64,
        wait: Duration,
    ) -> Result<Header> {
        let stream = self.frames(from, self.rank, connection);
        let mut raw = [0u8; HEADER_BYTES];
        self.read(stream, (op, from), &mut raw, (wait, &|| Ok(())))?;
        let header = Header::decode(&raw).map_err(|reason| error(op, from, reason))?;
        if header.kind == Kind::Abort {
            let mut reason = vec![0u8; header.bytes.min(MAX_REASON as u64) as usize];
            self.read(stream, (op, from), &mut reason, (wait, &|| Ok(())))?;
            return Err(abort_error(op, from, &header, &reason));
        }
        let bytes = usize::try_from(payload(&header)).unwrap_or(usize::MAX);
        if HEADER_BYTES + bytes > frame.len() {
            return Err(error(
                op,
                from,
                format!("a frame of {bytes} bytes does not fit"),
            ));
        }
        frame[..HEADER_BYTES].copy_from_slice(&raw);
        let body = &mut frame[HEADER_BYTES..HEADER_BYTES + bytes];
        self.read(stream, (op, from), body, (wait, &|| Ok(())))?;
        Ok(header)
    }

    fn flush(&self, _to: usize, _connection: usize, _op: &str) -> Result<()> {
        Ok(())
    }

    fn finish_exchange(&self, partner: usize, op: &str) -> Result<()> {
        match self.waiting_abort(partner, op) {
            Some(notice) => Err(notice),
            None => Ok(()),
        }
    }

    fn window(&self, _to: usize, connection: usize) -> Window {
        match self.fabric.faults.channel_window {
            Some(slots) if connection == 0 => Window::Slots {
                slots,
                slot_bytes: SLOT_BYTES,
            },
            _ => Window::Chunks(4),
        }
    }

    fn send_chunk(
        &self,
        (to, connection): Route,
        (kind, sequence): Pass,
        payload: &[u8],
    ) -> Result<()> {
        if self.fabric.faults.channel_window.is_some() && connection == 0 {
            // A chunk starts a slot and fills whole slots, each written when there is room
            // for it, as the shared-memory channel writes them.
            let channel = self.channel(self.rank, to);
            for piece in payload.chunks(SLOT_BYTES) {
                let mut slot = piece.to_vec();
                slot.resize(SLOT_BYTES, 0);
                self.write(channel, (kind.name(), to), &slot)?;
            }
            return Ok(());
        }
        let frame = Self::chunk_frame(sequence, payload);
        self.write(
            self.frames(self.rank, to, connection),
            (kind.name(), to),
            &frame,
        )
    }

    fn recv_chunk(
        &self,
        (from, connection): Route,
        (kind, sequence): Pass,
        into: &mut [u8],
    ) -> Result<()> {
        let op = kind.name();
        if self.fabric.faults.channel_window.is_some() && connection == 0 {
            let mut padded = vec![0u8; into.len().div_ceil(SLOT_BYTES) * SLOT_BYTES];
            let alive = || self.still_there(from, op);
            self.read(
                self.channel(from, self.rank),
                (op, from),
                &mut padded,
                (self.timeout, &alive),
            )?;
            into.copy_from_slice(&padded[..into.len()]);
            return Ok(());
        }
        let header = self.recv_header(from, connection, op)?;
        if header.kind != Kind::Chunk
            || header.sequence != sequence
            || header.bytes != into.len() as u64
        {
            return Err(error(
                op,
                from,
                format!(
                    "expected a chunk of {} bytes of call #{sequence}, got {}",
                    into.len(),
                    header.describe()
                ),
            ));
        }
        self.recv_payload(from, connection, op, into)
    }

    fn recv_chunk_with(
        &self,
        route: Route,
        pass: Pass,
        (bytes, scratch): Incoming<'_>,
        take: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        scratch.resize(scratch.len().max(bytes), 0);
        self.recv_chunk(route, pass, &mut scratch[..bytes])?;
        take(0, &scratch[..bytes]);
        Ok(())
    }

    fn abort_all(&self, cause: &Error) {
        let notice = abort_notice(cause, None);
        for peer in self.peers() {
            let stream = self.frames(self.rank, peer, 0);
            let _ = self.write(stream, ("abort", peer), &notice);
            for connection in 0..self.fabric.faults.connections {
                for stream in [
                    self.frames(self.rank, peer, connection),
                    self.channel(self.rank, peer),
                ] {
                    lock(&stream.bytes).ended = true;
                    stream.changed.notify_all();
                }
            }
        }
    }

    fn root_cause(&self, op: &str, error: Error) -> Error {
        self.peers()
            .find_map(|peer| self.waiting_abort(peer, op))
            .unwrap_or(error)
    }

    fn flush_all(&self, _op: &str) {}

    fn check_peers(&self) -> Result<()> {
        for peer in self.peers() {
            self.still_there(peer, "health")?;
        }
        Ok(())
    }

    fn close(&self) {
        self.lose();
    }
}
