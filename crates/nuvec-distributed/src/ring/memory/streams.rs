//! The in-memory transport's one-way byte streams: writes delivered after a delay, in order,
//! and bounded ones (channels) whose writers wait for room.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// One direction's bytes: delivered ones (whole writes, the first partly read), and those
/// still in flight with their arrival time.
#[derive(Default)]
pub(super) struct Bytes {
    pub(super) delivered: VecDeque<Vec<u8>>,
    /// How much of the first delivered write was read.
    pub(super) read: usize,
    pub(super) in_flight: VecDeque<(Instant, Vec<u8>)>,
    /// The writer ended its writes (it failed, or was lost).
    pub(super) ended: bool,
    /// The reader is gone: writes fail.
    pub(super) reader_gone: bool,
}

impl Bytes {
    /// Moves what has arrived by now into `delivered`; returns when the next arrives.
    pub(super) fn deliver(&mut self) -> Option<Instant> {
        let now = Instant::now();
        while let Some((at, _)) = self.in_flight.front() {
            if *at > now {
                return Some(*at);
            }
            let (_, bytes) = self.in_flight.pop_front().expect("a write in flight");
            self.delivered.push_back(bytes);
        }
        None
    }

    /// Bytes delivered and not read.
    fn ready(&self) -> usize {
        self.delivered.iter().map(Vec::len).sum::<usize>() - self.read
    }

    /// Bytes written and not read.
    pub(super) fn held(&self) -> usize {
        self.ready() + self.in_flight.iter().map(|(_, b)| b.len()).sum::<usize>()
    }

    /// Copies delivered bytes into `into`; returns how many.
    pub(super) fn take(&mut self, into: &mut [u8]) -> usize {
        let mut taken = 0;
        while taken < into.len() {
            let Some(front) = self.delivered.front() else {
                break;
            };
            let n = (front.len() - self.read).min(into.len() - taken);
            into[taken..taken + n].copy_from_slice(&front[self.read..self.read + n]);
            taken += n;
            self.read += n;
            if self.read == front.len() {
                self.delivered.pop_front();
                self.read = 0;
            }
        }
        taken
    }

    /// The first `n` delivered bytes, without reading them (fewer when fewer are there).
    pub(super) fn peek(&self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        let mut skip = self.read;
        for write in &self.delivered {
            let part = &write[skip.min(write.len())..];
            skip = 0;
            out.extend_from_slice(&part[..part.len().min(n - out.len())]);
            if out.len() == n {
                break;
            }
        }
        out
    }
}

/// A one-way byte stream, bounded when `capacity` is set (a channel: writers wait for room).
pub(super) struct Stream {
    pub(super) bytes: Mutex<Bytes>,
    pub(super) changed: Condvar,
    pub(super) capacity: Option<usize>,
}

impl Stream {
    pub(super) fn new(capacity: Option<usize>) -> Stream {
        Stream {
            bytes: Mutex::new(Bytes::default()),
            changed: Condvar::new(),
            capacity,
        }
    }
}
