//! The payloads of point-to-point messages. Large ones between ranks on one machine go through
//! shared memory instead (`channels.rs`); what follows is for those on TCP. One of at least [`SPLIT_BYTES`] travels in two
//! halves at once, each written and read by its own thread: the first half on the connection
//! the sender writes to the receiver on, after the message's header; the second on the other
//! direction of the connection the receiver writes back on, which nothing else uses. Both
//! ends decide from the size in the header. One of [`PIPELINED_WRITES`] is written in two
//! halves on its one connection, which only the sender sees.
//!
//! On one machine, loopback's sending side does most of the kernel's work (it copies the
//! bytes in and runs the receiving side's protocol too), so one stream keeps one core busier
//! than the other; two streams, each with a thread at both ends, share that work over the
//! cores. The halves are read without polling: two threads spinning on reads would take the
//! cores from the two that send (measured: `docs/performance.md`, "Tuning measurements").

use super::algorithms::CHUNK_BYTES;
use super::connections::Way;
use super::network::Network;
use super::send_pieces::Sends;
use crate::tcp::Connection;
use nuvec_core::{Error, Result};
use std::time::Instant;

/// Payloads at least this large travel in two halves at once. Below it the halves do not
/// pay for their threads (measured: `docs/performance.md`, "Tuning measurements").
pub(crate) const SPLIT_BYTES: usize = 32 << 20;

/// Payloads of these sizes are written in two halves, one after the other, on their one
/// connection: the receiver then copies the first half out while the sender copies the
/// second in. Larger payloads span several of loopback's 64 KiB segments already, which
/// overlap the same way; smaller ones gain less than the second write costs (measured:
/// `docs/performance.md`, "Tuning measurements").
pub(crate) const PIPELINED_WRITES: std::ops::RangeInclusive<usize> = (48 << 10)..=(96 << 10);

/// Payloads at least this large may be sent in pieces of [`SEND_PIECE`], as collectives'
/// chunks are, where that is faster on this machine (`send_pieces.rs` decides, per receiving rank).
/// Smaller ones go whole: pieces gained nothing there, and the extra sends cost (measured on
/// the Intel Xeon VM: `docs/performance.md`, "Tuning measurements").
///
/// [`SEND_PIECE`]: crate::tcp::SEND_PIECE
pub(crate) const PIECES_FROM: usize = 16 << 20;

/// How many of a payload's `bytes` go first, on the message's own connection: all of a small
/// one, half of a large one.
fn first_half(bytes: usize) -> usize {
    if bytes < SPLIT_BYTES {
        bytes
    } else {
        bytes / 2
    }
}

impl Network {
    /// Sends `meta` (the message's header and shape) and its payload `data` to `dst`.
    pub(crate) fn write_message(&self, dst: usize, meta: &[u8], data: &[u8]) -> Result<()> {
        let peer = self.connections.writer("send", dst)?;
        if let Some(channel) = self.nearby.shared_to(dst, data.len()) {
            peer.write_through("send", &[meta], meta.len(), self.timeout)?;
            let mut alive = || self.connections.still_there("send", dst);
            return channel.write("send", data, self.timeout, &mut alive);
        }
        let large = data.len() >= PIECES_FROM;
        let sends = if large {
            self.pieces[dst].next()
        } else {
            Sends::Whole
        };
        let piece = sends.piece();
        let clock = Instant::now();
        let (first, second) = data.split_at(first_half(data.len()));
        if second.is_empty() {
            if PIPELINED_WRITES.contains(&first.len()) {
                let (early, late) = first.split_at(first.len() / 2);
                peer.write_through("send", &[meta, early], piece, self.timeout)?;
                return peer.write_through("send", &[late], piece, self.timeout);
            }
            peer.write_through("send", &[meta, first], piece, self.timeout)?;
        } else {
            let other = self.connections.connection("send", dst, 0, Way::From)?;
            both(
                ("send", dst),
                || peer.write_through("send", &[meta, first], piece, self.timeout),
                || other.write_through("send", &[second], piece, self.timeout),
            )?;
        }
        if large {
            self.pieces[dst].record(sends, data.len(), clock.elapsed());
        }
        Ok(())
    }

    /// Reads the payload of a message from `src` whose header and shape came on `peer`,
    /// into `data` (as long as the header says).
    pub(crate) fn read_payload(
        &self,
        src: usize,
        peer: &Connection,
        data: &mut [u8],
    ) -> Result<()> {
        if let Some(channel) = self.nearby.shared_from(src, data.len() as u64) {
            let mut alive = || self.connections.still_there("recv", src);
            return channel.read("recv", data, self.timeout, &mut alive);
        }
        let (first, second) = data.split_at_mut(first_half(data.len()));
        if second.is_empty() {
            return peer.read_message("recv", first, self.timeout);
        }
        let other = self.connections.connection("recv", src, 0, Way::To)?;
        both(
            ("recv", src),
            || peer.read_sleeping("recv", first, self.timeout),
            || other.read_sleeping("recv", second, self.timeout),
        )
    }

    /// Reads and drops the payload of `bytes` (as the header says) of a message from `src`
    /// that this rank did not expect, in bounded pieces (the size comes from the peer), so
    /// the connections stay usable for the next one.
    pub(crate) fn drain_payload(&self, src: usize, peer: &Connection, bytes: u64) -> Result<()> {
        if let Some(channel) = self.nearby.shared_from(src, bytes) {
            let mut alive = || self.connections.still_there("recv", src);
            return channel.skip("recv", bytes, self.timeout, &mut alive);
        }
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        let first = first_half(bytes);
        let mut scratch = vec![0u8; CHUNK_BYTES.min(bytes)];
        let mut drain = |from: &Connection, mut left: usize| {
            while left > 0 {
                let piece = left.min(scratch.len());
                from.read_message("recv", &mut scratch[..piece], self.timeout)?;
                left -= piece;
            }
            Ok::<(), Error>(())
        };
        drain(peer, first)?;
        if bytes > first {
            drain(
                self.connections.connection("recv", src, 0, Way::To)?,
                bytes - first,
            )?;
        }
        Ok(())
    }
}

/// Runs `main` on this thread and `helper` on another at once, for `op` with rank `peer`; the
/// first error, `main`'s before `helper`'s.
fn both(
    (op, peer): (&str, usize),
    main: impl FnOnce() -> Result<()>,
    helper: impl FnOnce() -> Result<()> + Send,
) -> Result<()> {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("nuvec-ring-half".into())
            .spawn_scoped(scope, helper)
            .map_err(|e| Error::Distributed {
                op: op.into(),
                rank: Some(peer),
                reason: format!("cannot start a thread for half of a large message: {e}"),
            })?;
        let main = main();
        let helper = handle.join().unwrap_or_else(|_| {
            Err(Error::Distributed {
                op: op.into(),
                rank: Some(peer),
                reason: "the thread moving half of a large message panicked".into(),
            })
        });
        main.and(helper)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_large_payloads_are_split_and_the_halves_cover_them() {
        assert_eq!(first_half(0), 0);
        assert_eq!(first_half(SPLIT_BYTES - 1), SPLIT_BYTES - 1);
        assert_eq!(first_half(SPLIT_BYTES), SPLIT_BYTES / 2);
        assert_eq!(first_half(SPLIT_BYTES + 3), (SPLIT_BYTES + 3) / 2);
    }
}
