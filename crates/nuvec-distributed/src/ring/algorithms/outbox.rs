//! The chunks a rank owes its right neighbour, sent in schedule order but at most a window
//! ([`Window`]) ahead of what it has received: the ring then moves data in step, the socket takes
//! most chunks directly, and the writer thread's queue stays small instead of holding a whole
//! segment.
//!
//! A chunk is a byte range of the collective's buffer, or of its read-only input (a
//! reduce-scatter sends its first segment straight from the input, and so does an
//! all-gather, which copies its own block into place while the others arrive: see
//! [`OwnBlock`]).

use super::super::transport::{Link, Transport, Window};
use nuvec_core::Result;
use std::collections::VecDeque;
use std::ops::Range;

// The window is at least one chunk (or slot): a reduce-scatter relies on a chunk having been
// sent before the next chunk received overwrites it (a window of slots keeps that too: the
// chunks sent and those received line up, so at equal counts their slots differ by at most
// one, less than the window).

/// Which buffer a chunk is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The buffer the collective works in.
    Data,
    /// The caller's input, when it is not the working buffer.
    Input,
}

/// Byte ranges waiting to go right, in order.
#[derive(Debug)]
pub(crate) struct Outbox<'i> {
    queue: VecDeque<(Source, Range<usize>)>,
    /// How far sends may run ahead of what was received, and in what unit.
    window: Window,
    /// Chunks (or slots) sent and received.
    sent: Count,
    received: Count,
    /// The caller's input, where [`Source::Input`] ranges are, when it is not the working
    /// buffer.
    input: Option<&'i [u8]>,
}

impl<'i> Outbox<'i> {
    /// An outbox for a link whose sends keep within `window`, which can also send ranges of
    /// `input`, when there is one.
    pub(crate) fn new(window: Window, input: Option<&'i [u8]>) -> Outbox<'i> {
        Outbox {
            queue: VecDeque::new(),
            window,
            sent: Count::default(),
            received: Count::default(),
            input,
        }
    }

    /// The input it reads, if any.
    pub(crate) fn input(&self) -> Option<&'i [u8]> {
        self.input
    }

    /// Adds the next range of the working buffer (its bytes must be final by now).
    pub(crate) fn push(&mut self, bytes: Range<usize>) {
        self.queue.push_back((Source::Data, bytes));
    }

    /// Adds the next range of the caller's input: read from the input where the outbox has
    /// one, else from the working buffer, which then holds the input.
    pub(crate) fn push_input(&mut self, bytes: Range<usize>) {
        let source = match self.input {
            Some(_) => Source::Input,
            None => Source::Data,
        };
        self.queue.push_back((source, bytes));
    }

    /// Counts one chunk of `bytes` received from the left.
    pub(crate) fn received(&mut self, bytes: usize) {
        self.received.add(bytes, self.window);
    }

    /// Whether the window lets another chunk go.
    fn open(&self) -> bool {
        let ahead = match self.window {
            Window::Chunks(chunks) => chunks,
            Window::Slots { slots, .. } => slots,
        };
        self.sent.0 < self.received.0 + ahead
    }

    /// Sends what the window allows.
    pub(crate) fn pump<T: Transport + ?Sized>(
        &mut self,
        link: &Link<'_, T>,
        data: &[u8],
    ) -> Result<()> {
        while self.open() {
            if !self.send_next(link, data)? {
                break;
            }
        }
        Ok(())
    }

    /// Sends everything left.
    pub(crate) fn drain<T: Transport + ?Sized>(
        &mut self,
        link: &Link<'_, T>,
        data: &[u8],
    ) -> Result<()> {
        while self.send_next(link, data)? {}
        Ok(())
    }

    /// Sends the next chunk; false when none is waiting.
    fn send_next<T: Transport + ?Sized>(
        &mut self,
        link: &Link<'_, T>,
        data: &[u8],
    ) -> Result<bool> {
        let Some((source, bytes)) = self.queue.pop_front() else {
            return Ok(false);
        };
        // `push_input` records `Input` only when there is an input.
        let buffer = match (source, self.input) {
            (Source::Input, Some(input)) => input,
            _ => data,
        };
        link.send_chunk(&buffer[bytes.clone()])?;
        self.sent.add(bytes.len(), self.window);
        Ok(true)
    }
}

/// Chunks, or the slots they fill (each chunk starts a slot), as the window counts.
#[derive(Debug, Default)]
struct Count(usize);

impl Count {
    fn add(&mut self, bytes: usize, window: Window) {
        self.0 += match window {
            Window::Chunks(_) => 1,
            Window::Slots { slot_bytes, .. } => bytes.div_ceil(slot_bytes),
        };
    }
}

/// This rank's block of an all-gather, sent straight from the input and copied into the
/// output a piece at a time while the other blocks arrive, rather than all at once before
/// the first send: faster for large blocks, no slower for small ones (measured:
/// `docs/performance.md`, "Tuning measurements").
pub(crate) struct OwnBlock<'i> {
    input: &'i [u8],
    /// Where the block goes in the output.
    at: usize,
    /// How many of its bytes are in place.
    copied: usize,
}

impl<'i> OwnBlock<'i> {
    /// The block `input`, to go at byte `at` of the output.
    pub(crate) fn new(input: &'i [u8], at: usize) -> OwnBlock<'i> {
        OwnBlock {
            input,
            at,
            copied: 0,
        }
    }

    /// Copies up to `most` more bytes of the block into `output`.
    pub(crate) fn copy_next(&mut self, output: &mut [u8], most: usize) {
        let end = self.input.len().min(self.copied.saturating_add(most));
        let (from, to) = (self.copied, end);
        output[self.at + from..self.at + to].copy_from_slice(&self.input[from..to]);
        self.copied = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_own_block_lands_in_place_piece_by_piece_and_the_rest_at_the_end() {
        let input: Vec<u8> = (1..=10).collect();
        let mut output = vec![0u8; 30];
        let mut own = OwnBlock::new(&input, 10);
        own.copy_next(&mut output, 4);
        assert_eq!(&output[10..14], &[1, 2, 3, 4]);
        assert!(output[14..].iter().all(|&b| b == 0));
        own.copy_next(&mut output, 4);
        own.copy_next(&mut output, usize::MAX);
        own.copy_next(&mut output, 4);
        assert!(output[..10].iter().all(|&b| b == 0));
        assert_eq!(&output[10..20], &input[..]);
        assert!(output[20..].iter().all(|&b| b == 0));
    }
}
