//! How a collective's chunks travel between ring neighbours: as frames on the TCP connection,
//! or, where the two ranks of that direction share a channel (`channels.rs`), through it, bare.
//! Both ends of a direction know whether it has a channel, so they agree without asking.
//!
//! On a channel a chunk needs no frame: the call's header, already checked on the connection,
//! says what every byte that follows belongs to, and the channel keeps them in order. A wait
//! on a channel cannot be woken by a socket, so it looks now and then (every few
//! milliseconds) at the neighbour's connection and at every other incoming one, for an abort
//! notice, a closed connection, or a frame showing a rank called something else.
//!
//! A channel holds `SLOTS` slots, and a sender waits for room: if every rank of a ring waited
//! to write, none would read. So a link with a channel to its right counts the outbox's
//! window in slots, [`SLOT_WINDOW`] beyond the slots received, with chunks of at most
//! [`CHUNK_SLOTS`] slots. A rank stuck writing has filled the channel: `SLOTS` slots lie
//! unread between it and its right neighbour. Yet it has sent at most
//! `SLOT_WINDOW + CHUNK_SLOTS - 2` slots beyond those it has received, fewer than `SLOTS`, so
//! it has received more slots than its right neighbour has. That cannot hold all the way
//! round the ring: some rank is not stuck. (A rank that has received everything sends only
//! to a neighbour still receiving, which reads.)

use super::{RingCommunicator, CHUNK_BYTES};
use crate::shm::{Channel, SLOTS, SLOT_BYTES};
use crate::tcp::frame::{Header, Kind};
use crate::tcp::wire::{read_chunk, write_chunk};
use crate::tcp::Connection;
use nuvec_core::Result;

/// The most slots one chunk fills.
pub(crate) const CHUNK_SLOTS: usize = CHUNK_BYTES.div_ceil(SLOT_BYTES);
/// How many slots a link with a channel to its right may send beyond those it has received.
pub(crate) const SLOT_WINDOW: usize = SLOTS / 2;
const _: () = assert!(
    SLOT_WINDOW >= 1 && SLOT_WINDOW + CHUNK_SLOTS - 2 < SLOTS,
    "the outbox's window must leave a full channel's writer ahead of its reader"
);

/// The slots a chunk of `bytes` fills.
pub(crate) fn slots(bytes: usize) -> usize {
    bytes.div_ceil(SLOT_BYTES)
}

/// This rank's neighbours for one collective (or one lane of it), and the collective's
/// sequence number. `position` is this rank's place on the ring the link goes round: its rank
/// clockwise, reversed counter-clockwise.
///
/// Where the two ranks of a direction share a channel (`channels.rs`), that direction's chunks
/// go through it; headers and abort notices stay on the connections.
#[derive(Clone, Copy)]
pub(crate) struct Link<'a> {
    pub(crate) ring: &'a RingCommunicator,
    pub(crate) left: &'a Connection,
    pub(crate) right: &'a Connection,
    pub(crate) from_left: Option<&'a Channel>,
    pub(crate) to_right: Option<&'a Channel>,
    pub(crate) position: usize,
    pub(crate) sequence: u64,
    pub(crate) ours: Header,
}

impl Link<'_> {
    /// Whether chunks to the right go through a channel.
    pub(crate) fn shares_right(&self) -> bool {
        self.to_right.is_some()
    }

    /// Sends one chunk of the collective `kind` to the right.
    pub(crate) fn send_chunk(&self, kind: Kind, payload: &[u8]) -> Result<()> {
        match self.to_right {
            Some(channel) => {
                let mut alive = || self.still_there(kind, self.right.rank);
                channel.write(kind.name(), payload, self.ring.timeout, &mut alive)
            }
            None => write_chunk(self.right, kind, self.sequence, payload),
        }
    }

    /// Receives one chunk of the collective `kind` from the left into `into` (as long as the
    /// chunk).
    pub(crate) fn recv_chunk(&self, kind: Kind, into: &mut [u8]) -> Result<()> {
        match self.from_left {
            Some(channel) => {
                let mut alive = || self.still_there(kind, self.left.rank);
                channel.read(kind.name(), into, self.ring.timeout, &mut alive)
            }
            None => read_chunk(self.left, kind, self.sequence, into, self.ring.timeout),
        }
    }

    /// Receives one chunk of `bytes` from the left and hands it to `take` piece by piece,
    /// with each piece's offset in the chunk: in place from a channel's slots, else whole
    /// from `scratch`.
    pub(crate) fn recv_chunk_with(
        &self,
        kind: Kind,
        bytes: usize,
        scratch: &mut Vec<u8>,
        take: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        if let Some(channel) = self.from_left {
            let mut alive = || self.still_there(kind, self.left.rank);
            return channel.read_with(kind.name(), bytes, (self.ring.timeout, &mut alive), take);
        }
        if scratch.len() < bytes {
            scratch.resize(bytes, 0);
        }
        let incoming = &mut scratch[..bytes];
        read_chunk(self.left, kind, self.sequence, incoming, self.ring.timeout)?;
        take(0, incoming);
        Ok(())
    }

    /// Fails when the collective cannot go on: rank `peer`, waited on through a channel, left
    /// or sent word that the group failed, or some rank sent a frame of another call.
    fn still_there(&self, kind: Kind, peer: usize) -> Result<()> {
        self.ring.still_there(kind.name(), peer)?;
        self.ring.watch.sweep(kind.name())
    }
}
