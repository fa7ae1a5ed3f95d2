//! The chunks a rank owes its right neighbour, sent in schedule order but at most `AHEAD`
//! chunks ahead of what it has received: the ring then moves data in step, the socket takes
//! most chunks directly, and the writer thread's queue stays small instead of holding a whole
//! segment.

use super::frame::Kind;
use super::wire::write_chunk;
use super::Link;
use nuvec_core::Result;
use std::collections::VecDeque;
use std::ops::Range;

/// How many chunks may be sent beyond the number received.
const AHEAD: usize = 4;

/// Byte ranges of the collective's buffer waiting to go right, in order.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    queue: VecDeque<Range<usize>>,
    sent: usize,
    received: usize,
}

impl Outbox {
    /// Adds the next range of the schedule (its bytes must be final by now).
    pub(super) fn push(&mut self, bytes: Range<usize>) {
        self.queue.push_back(bytes);
    }

    /// Counts one chunk received from the left.
    pub(super) fn received(&mut self) {
        self.received += 1;
    }

    /// Sends what the window allows.
    pub(super) fn pump(&mut self, link: &Link<'_>, kind: Kind, data: &[u8]) -> Result<()> {
        while self.sent < self.received + AHEAD {
            let Some(bytes) = self.queue.pop_front() else {
                break;
            };
            write_chunk(link.right, kind, link.sequence, &data[bytes])?;
            self.sent += 1;
        }
        Ok(())
    }

    /// Sends everything left.
    pub(super) fn drain(&mut self, link: &Link<'_>, kind: Kind, data: &[u8]) -> Result<()> {
        while let Some(bytes) = self.queue.pop_front() {
            write_chunk(link.right, kind, link.sequence, &data[bytes])?;
            self.sent += 1;
        }
        Ok(())
    }
}
