//! What the collective algorithms need from the connections between ranks, and nothing more:
//! frames (a header and its payload) to and from one rank, and the chunks of a ring pass. A
//! ring group's [`super::network::Network`] moves them over TCP and shared memory; the tests'
//! in-memory transport (`memory/`) moves them between threads, with delays and lost ranks.
//!
//! Every wait a transport does is bounded by its timeout and ends early, with an error naming
//! the rank, when that rank is gone or sent word that the group failed; what to do about it
//! (record the first cause, tell every peer, refuse further work) is the failure authority's
//! (`failure.rs`), not the transport's.

use crate::tcp::frame::{Header, Kind};
use nuvec_core::{Error, Result};
use std::time::Duration;

/// How far a rank's sends to its right may run ahead of what it has received from its left
/// (`algorithms/outbox.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Window {
    /// At most this many chunks beyond those received: the connection queues what it cannot
    /// send at once, so the window only keeps the queue short.
    Chunks(usize),
    /// At most `slots` channel slots of `slot_bytes` beyond those received (each chunk starts
    /// a slot): the channel holds a fixed number of slots and a sender waits for room, so the
    /// window is what keeps a ring of waiting senders from deadlocking (the argument is in
    /// `network.rs`).
    Slots { slots: usize, slot_bytes: usize },
}

/// Another rank and one of the connections this rank shares with it.
pub(crate) type Route = (usize, usize);
/// A ring pass: its collective's kind and sequence number.
pub(crate) type Pass = (Kind, u64);
/// A chunk's size and the scratch buffer it may be received into.
pub(crate) type Incoming<'a> = (usize, &'a mut Vec<u8>);

/// Moves a collective's bytes between this rank and the others. `connection` picks one of the
/// connections a pair of ranks shares (0 but for the extra lanes of a large all-reduce).
pub(crate) trait Transport: Sync {
    /// This rank.
    fn rank(&self) -> usize;
    /// The group's size.
    fn size(&self) -> usize;
    /// How long a wait for a peer may last.
    fn timeout(&self) -> Duration;
    /// How many connections every pair of ring neighbours shares (the lanes' first factor).
    fn ring_connections(&self) -> usize;
    /// Whether every rank of the group can send frames to every other (else only ring
    /// neighbours are sure to be connected, and collectives go round the ring).
    fn full_mesh(&self) -> bool;

    /// Starts the collective `ours`: frames of this call that another rank sends announce its
    /// size or one given to [`Transport::accept`].
    fn begin(&self, ours: &Header);
    /// Lets the call in progress carry frames announcing `bytes` too (a lane's slice, say).
    fn accept(&self, bytes: u64);
    /// Ends the call in progress.
    fn end(&self);

    /// Queues a frame, `header` and `payload`, to rank `to`.
    fn send_frame(
        &self,
        to: usize,
        connection: usize,
        header: &Header,
        payload: &[u8],
    ) -> Result<()>;
    /// Reads the next frame's header from rank `from`; an abort notice is the error it reports.
    fn recv_header(&self, from: usize, connection: usize, op: &str) -> Result<Header>;
    /// Reads `buf.len()` bytes of the payload whose header [`Transport::recv_header`] read.
    fn recv_payload(&self, from: usize, connection: usize, op: &str, buf: &mut [u8]) -> Result<()>;
    /// Reads one frame from rank `from` into `frame` (room for the header and the payload this
    /// rank expects), waiting at most `wait`, and returns its header; the payload is the
    /// `payload(header)` bytes after it. A frame of another size comes back for the caller's
    /// check of the header to fail.
    fn recv_frame(
        &self,
        from: Route,
        op: &str,
        frame: &mut [u8],
        payload: &dyn Fn(&Header) -> u64,
        wait: Duration,
    ) -> Result<Header>;
    /// Waits until what was queued to rank `to` has left.
    fn flush(&self, to: usize, connection: usize, op: &str) -> Result<()>;
    /// Ends an exchange with `partner` (star, doubling): an abort notice it left is read and
    /// reported, and what was queued to it has left.
    fn finish_exchange(&self, partner: usize, op: &str) -> Result<()>;

    /// How far sends to rank `to` may run ahead of what was received.
    fn window(&self, to: usize, connection: usize) -> Window;
    /// Sends one chunk of the ring pass `sequence` of the collective `kind` to rank `to`.
    fn send_chunk(&self, to: Route, pass: Pass, payload: &[u8]) -> Result<()>;
    /// Receives one chunk from rank `from` into `into` (as long as the chunk).
    fn recv_chunk(&self, from: Route, pass: Pass, into: &mut [u8]) -> Result<()>;
    /// Receives one chunk of `bytes` from rank `from` and hands it to `take` piece by piece,
    /// with each piece's offset in the chunk (in place where the transport can, else whole
    /// from `scratch`).
    fn recv_chunk_with(
        &self,
        from: Route,
        pass: Pass,
        chunk: Incoming<'_>,
        take: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()>;

    /// The shared-memory channels to and from every other rank, when the whole group shares
    /// this machine (the small collectives' mailbox path, `algorithms/mailboxes.rs`).
    fn mailboxes(&self) -> Option<&super::channels::Nearby> {
        None
    }
    /// Fails when the collective `kind` cannot go on: rank `peer`, waited on outside the
    /// connections (through shared memory), left or sent word that the group failed, or some
    /// rank sent a frame of another call.
    fn still_going(&self, kind: Kind, peer: usize) -> Result<()> {
        let _ = (kind, peer);
        self.check_peers()
    }

    /// Tells every peer that the group failed because of `cause`, then ends this rank's
    /// writes.
    fn abort_all(&self, cause: &Error);
    /// The error to report for `error`, a failure of `op`: an abort notice another rank sent
    /// (naming the rank that was lost) when one is waiting, else `error`.
    fn root_cause(&self, op: &str, error: Error) -> Error;
    /// `error`, the failure of `op` after [`Transport::abort_all`], with where every rank is
    /// added where the transport can learn it (`whereabouts.rs`); the default adds nothing.
    fn whereabouts(&self, op: &str, error: Error) -> Error {
        let _ = op;
        error
    }
    /// Gives what was queued to every peer a bounded chance to leave.
    fn flush_all(&self, op: &str);
    /// Whether every peer is still there: an error naming one that left or sent word that
    /// the group failed.
    fn check_peers(&self) -> Result<()>;
    /// Closes every connection.
    fn close(&self);
}

/// This rank's neighbours for one ring pass (a collective, or one lane of it) and the pass's
/// header. `position` is this rank's place on the ring the link goes round: its rank
/// clockwise, reversed counter-clockwise.
pub(crate) struct Link<'a, T: ?Sized> {
    pub(crate) transport: &'a T,
    pub(crate) left: usize,
    pub(crate) right: usize,
    pub(crate) connection: usize,
    pub(crate) position: usize,
    pub(crate) ours: Header,
}

impl<'a, T: Transport + ?Sized> Link<'a, T> {
    /// The link of the pass `ours` on `connection`, going round the other way when `reversed`;
    /// sends `ours` to the right (its data may follow at once: the left neighbour's header is
    /// checked by [`Link::check_left`] before any of its data is used).
    pub(crate) fn open(
        transport: &'a T,
        connection: usize,
        reversed: bool,
        ours: Header,
    ) -> Result<Link<'a, T>> {
        let (n, rank) = (transport.size(), transport.rank());
        let (clockwise_right, clockwise_left) = ((rank + 1) % n, (rank + n - 1) % n);
        let (right, left, position) = if reversed {
            (clockwise_left, clockwise_right, (n - rank) % n)
        } else {
            (clockwise_right, clockwise_left, rank)
        };
        transport.send_frame(right, connection, &ours, &[])?;
        Ok(Link {
            transport,
            left,
            right,
            connection,
            position,
            ours,
        })
    }

    /// Reads the left neighbour's header and checks it called the same collective.
    pub(crate) fn check_left(&self) -> Result<()> {
        let kind = self.ours.kind;
        let theirs = self
            .transport
            .recv_header(self.left, self.connection, kind.name())?;
        same_call(self.transport.rank(), self.left, &theirs, &self.ours)
    }

    /// How far sends to the right may run ahead.
    pub(crate) fn window(&self) -> Window {
        self.transport.window(self.right, self.connection)
    }

    /// Sends one chunk to the right.
    pub(crate) fn send_chunk(&self, payload: &[u8]) -> Result<()> {
        let pass = (self.ours.kind, self.ours.sequence);
        self.transport
            .send_chunk((self.right, self.connection), pass, payload)
    }

    /// Receives one chunk from the left into `into`.
    pub(crate) fn recv_chunk(&self, into: &mut [u8]) -> Result<()> {
        let pass = (self.ours.kind, self.ours.sequence);
        self.transport
            .recv_chunk((self.left, self.connection), pass, into)
    }

    /// Receives one chunk of `bytes` from the left, handing it to `take` piece by piece.
    pub(crate) fn recv_chunk_with(
        &self,
        bytes: usize,
        scratch: &mut Vec<u8>,
        take: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        let pass = (self.ours.kind, self.ours.sequence);
        self.transport
            .recv_chunk_with((self.left, self.connection), pass, (bytes, scratch), take)
    }

    /// Waits until what was sent right has left.
    pub(crate) fn flush_right(&self) -> Result<()> {
        self.transport
            .flush(self.right, self.connection, self.ours.kind.name())
    }
}

/// Checks that rank `peer` called what rank `rank` called, naming both calls if not.
pub(crate) fn same_call(rank: usize, peer: usize, theirs: &Header, ours: &Header) -> Result<()> {
    if theirs == ours {
        return Ok(());
    }
    Err(ours.mismatch(rank, peer, theirs))
}
