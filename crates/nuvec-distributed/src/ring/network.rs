//! A ring rank's network: its TCP connections to every other rank (`connections.rs` finds
//! them by direction), its shared-memory channels to the ranks on its machine
//! (`channels.rs`), and the [`Transport`] the collective algorithms run on.
//!
//! A collective's chunks travel between ring neighbours as frames on the TCP connection, or,
//! where the two ranks of that direction share a channel, through it, bare (only for the
//! first connection: the extra lanes of a pair that shares several keep to theirs). Both ends
//! of a direction know whether it has a channel, so they agree without asking. On a channel a
//! chunk needs no frame: the call's header, already checked on the connection, says what every
//! byte that follows belongs to, and the channel keeps them in order. Every wait, on a socket
//! or a channel, waits in slices and asks the group's watch between them (`tcp/watch.rs`) for
//! an abort notice or a frame showing a rank called something else; a channel wait also asks
//! whether the neighbour's connection closed, which a socket read sees for itself.
//!
//! A channel holds `SLOTS` slots, and a sender waits for room: if every rank of a ring waited
//! to write, none would read. So a link with a channel to its right counts the outbox's
//! window in slots, [`SLOT_WINDOW`] beyond the slots received, with chunks of at most
//! [`CHUNK_SLOTS`] slots. A rank stuck writing has filled the channel: `SLOTS` slots lie
//! unread between it and its right neighbour. Yet it has sent at most
//! `SLOT_WINDOW + CHUNK_SLOTS - 2` slots beyond those it has received, fewer than `SLOTS`, so
//! it has received more slots than its right neighbour has. That cannot hold all the way
//! round the ring: some rank is not stuck. (A rank that has received everything sends only
//! to a neighbour still receiving, which reads.) The simulation tests check this with
//! channels of the same size (`simulation_tests.rs`).

use super::algorithms::CHUNK_BYTES;
use super::channels::Nearby;
use super::connections::{Connections, Way};
use super::relay::{Relay, RelayStreams};
use super::send_pieces::PieceChoice;
use super::transport::{Incoming, Pass, Route, Transport, Window};
use super::whereabouts::Listener;
use crate::hostfile::Address;
use crate::options::{CrossMemory, SharedMemory, StreamingStores};
use crate::shm::{Policy, SLOTS, SLOT_BYTES};
use crate::tcp::frame::{Header, Kind};
use crate::tcp::watch::Watch;
use crate::tcp::wire::{self, pending_abort, read_chunk, read_frame_of, read_header, write_chunk};
use crate::whereabouts::place_of;
use crate::Options;
use nuvec_core::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// The most slots one chunk fills.
const CHUNK_SLOTS: usize = CHUNK_BYTES.div_ceil(SLOT_BYTES);
/// How many slots a link with a channel to its right may send beyond those it has received.
pub(crate) const SLOT_WINDOW: usize = SLOTS / 2;
const _: () = assert!(
    SLOT_WINDOW >= 1 && SLOT_WINDOW + CHUNK_SLOTS - 2 < SLOTS,
    "the outbox's window must leave a full channel's writer ahead of its reader"
);
/// How many chunks may be sent beyond the number received on a TCP connection, which queues
/// what the socket does not take at once: the ring then moves data in step, the socket takes
/// most chunks directly, and the writer thread's queue stays small instead of holding a whole
/// segment.
const AHEAD: usize = 4;
/// How long a failing operation waits for its queued bytes to leave, best effort.
const FLUSH_ON_ERROR: Duration = Duration::from_millis(500);

/// The connections and channels of one rank of a ring group.
#[derive(Debug)]
pub(crate) struct Network {
    pub(crate) rank: usize,
    pub(crate) size: usize,
    /// The connections to each rank.
    pub(crate) connections: Connections,
    pub(crate) timeout: Duration,
    /// How many connections every pair of ring neighbours shares.
    ring_connections: usize,
    /// Whether every rank is connected to every other, as every rank agreed when forming.
    full_mesh: bool,
    /// Where not, what carries messages between ranks with no connection round the ring.
    pub(crate) relay: Option<Relay>,
    /// The collective in progress, for reads that wait long to check the other connections.
    pub(crate) watch: Arc<Watch>,
    /// How large point-to-point payloads go to each rank: in pieces or whole.
    pub(crate) pieces: Vec<PieceChoice>,
    /// Shared-memory channels with ranks on this machine.
    pub(crate) nearby: Nearby,
    /// The ranks that may not read this rank's memory, as they answered a large message.
    pub(crate) unread_by: Vec<std::sync::atomic::AtomicBool>,
    /// The group's flight recorder, once registered: where this rank is, for its abort
    /// notices (`whereabouts.rs`).
    pub(crate) trace: std::sync::OnceLock<Arc<nuvec_core::distributed::Trace>>,
}

impl Network {
    /// Connects rank `rank` of the group whose listening addresses are `nodes` and opens the
    /// channels it can (a group of one has neither).
    pub(crate) fn connect(
        nodes: &[Vec<Address>],
        rank: usize,
        options: &Options,
    ) -> Result<Network> {
        let size = nodes.len();
        let ring_connections = (0..size)
            .map(|r| crate::tcp::connections_between(nodes, r, (r + 1) % size))
            .min()
            .unwrap_or(1);
        // Read once, before connecting: a wrong setting fails without waiting on anyone.
        let settings = options
            .ring_settings()
            .map_err(|reason| Error::Distributed {
                op: "init".into(),
                rank: None,
                reason,
            })?;
        let (peers, full_mesh, relay) = match size {
            1 => (vec![Vec::new()], true, None),
            _ => {
                let mesh = crate::tcp::form_mesh(nodes, rank, options, settings.polling)?;
                let relay = match mesh.relay {
                    Some([to_right, from_right, from_left, to_left]) => {
                        let streams = RelayStreams {
                            to_right,
                            from_right,
                            from_left,
                            to_left,
                        };
                        Some(Relay::start(rank, size, streams)?)
                    }
                    None => None,
                };
                (mesh.connections, mesh.complete, relay)
            }
        };
        let connections = Connections {
            size,
            peers: peers
                .into_iter()
                .map(|connections| connections.into_iter().map(Arc::new).collect())
                .collect(),
        };
        let wanted = settings.shared_memory == SharedMemory::Auto;
        let stores = match settings.streaming_stores {
            StreamingStores::Auto => Policy::Auto,
            StreamingStores::On => Policy::Streaming,
            StreamingStores::Off => Policy::Plain,
        };
        let mut nearby = match size {
            1 => Nearby::default(),
            _ => Nearby::open(&connections, rank, options.timeout, (wanted, stores))?,
        };
        nearby.reads_memory = settings.cross_memory == CrossMemory::Auto;
        let network = Network {
            rank,
            size,
            connections,
            watch: Arc::new(Watch::new(rank)),
            pieces: (0..size).map(|_| PieceChoice::default()).collect(),
            timeout: options.timeout,
            ring_connections,
            full_mesh,
            relay,
            nearby,
            unread_by: (0..size).map(|_| Default::default()).collect(),
            trace: std::sync::OnceLock::new(),
        };
        for peer in network.connections.all() {
            peer.join_watch(network.watch.clone());
        }
        network
            .watch
            .set_readers(network.connections.readers().map(Arc::downgrade).collect());
        Ok(network)
    }
}

impl Transport for Network {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn ring_connections(&self) -> usize {
        self.ring_connections
    }

    fn full_mesh(&self) -> bool {
        self.full_mesh
    }

    fn begin(&self, ours: &Header) {
        self.watch.begin(*ours);
    }

    fn accept(&self, bytes: u64) {
        self.watch.accept(bytes);
    }

    fn end(&self) {
        self.watch.end();
    }

    fn send_frame(
        &self,
        to: usize,
        connection: usize,
        header: &Header,
        payload: &[u8],
    ) -> Result<()> {
        let op = header.kind.name();
        let peer = self.connections.connection(op, to, connection, Way::To)?;
        if payload.is_empty() {
            peer.write(op, &[&header.encode()])
        } else {
            peer.write(op, &[&header.encode(), payload])
        }
    }

    fn recv_header(&self, from: usize, connection: usize, op: &str) -> Result<Header> {
        let peer = self
            .connections
            .connection(op, from, connection, Way::From)?;
        read_header(peer, op, self.timeout)
    }

    fn recv_payload(&self, from: usize, connection: usize, op: &str, buf: &mut [u8]) -> Result<()> {
        self.connections
            .connection(op, from, connection, Way::From)?
            .read_exact(op, buf, self.timeout)
    }

    fn recv_frame(
        &self,
        (from, connection): Route,
        op: &str,
        frame: &mut [u8],
        payload: &dyn Fn(&Header) -> u64,
        wait: Duration,
    ) -> Result<Header> {
        let peer = self
            .connections
            .connection(op, from, connection, Way::From)?;
        read_frame_of(peer, op, frame, wait, payload)
    }

    fn flush(&self, to: usize, connection: usize, op: &str) -> Result<()> {
        self.connections
            .connection(op, to, connection, Way::To)?
            .flush(op, self.timeout)
    }

    /// A partner that gave up on the exchange (it timed out waiting for this rank, say) may
    /// have sent its part first, and its abort notice, already waiting, fails the call here
    /// too, so no rank takes a result that another rank reported as failed.
    fn finish_exchange(&self, partner: usize, op: &str) -> Result<()> {
        let peer = self.connections.reader(op, partner)?;
        if peer
            .waiting_header()
            .as_ref()
            .and_then(pending_abort)
            .is_some()
        {
            read_header(peer, op, self.timeout)?;
        }
        self.connections
            .writer(op, partner)?
            .flush(op, self.timeout)
    }

    fn window(&self, to: usize, connection: usize) -> Window {
        match connection == 0 && self.nearby.channel_to(to).is_some() {
            true => Window::Slots {
                slots: SLOT_WINDOW,
                slot_bytes: SLOT_BYTES,
            },
            false => Window::Chunks(AHEAD),
        }
    }

    fn send_chunk(
        &self,
        (to, connection): Route,
        (kind, sequence): Pass,
        payload: &[u8],
    ) -> Result<()> {
        if let Some(channel) = self.nearby.channel_to(to).filter(|_| connection == 0) {
            let mut alive = || self.still_going(kind, to);
            return channel.write(kind.name(), payload, self.timeout, &mut alive);
        }
        let peer = self
            .connections
            .connection(kind.name(), to, connection, Way::To)?;
        write_chunk(peer, kind, sequence, payload)
    }

    fn recv_chunk(
        &self,
        (from, connection): Route,
        (kind, sequence): Pass,
        into: &mut [u8],
    ) -> Result<()> {
        if let Some(channel) = self.nearby.channel_from(from).filter(|_| connection == 0) {
            let mut alive = || self.still_going(kind, from);
            return channel.read(kind.name(), into, self.timeout, &mut alive);
        }
        let peer = self
            .connections
            .connection(kind.name(), from, connection, Way::From)?;
        read_chunk(peer, kind, sequence, into, self.timeout)
    }

    fn recv_chunk_with(
        &self,
        (from, connection): Route,
        (kind, sequence): Pass,
        (bytes, scratch): Incoming<'_>,
        take: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        if let Some(channel) = self.nearby.channel_from(from).filter(|_| connection == 0) {
            let mut alive = || self.still_going(kind, from);
            return channel.read_with(kind.name(), bytes, (self.timeout, &mut alive), take);
        }
        if scratch.len() < bytes {
            scratch.resize(bytes, 0);
        }
        let incoming = &mut scratch[..bytes];
        let peer = self
            .connections
            .connection(kind.name(), from, connection, Way::From)?;
        read_chunk(peer, kind, sequence, incoming, self.timeout)?;
        take(0, incoming);
        Ok(())
    }

    fn mailboxes(&self) -> Option<&Nearby> {
        self.nearby.everyone().then_some(&self.nearby)
    }

    fn still_going(&self, kind: Kind, peer: usize) -> Result<()> {
        // A connection's own check names itself `health`; this wait is the collective's.
        let as_ours = |error: Error| match error {
            Error::Distributed { op, rank, reason } if op == "health" => Error::Distributed {
                op: kind.name().into(),
                rank,
                reason,
            },
            other => other,
        };
        self.connections
            .still_there(kind.name(), peer)
            .map_err(as_ours)?;
        self.watch.sweep(kind.name())
    }

    fn abort_all(&self, cause: &Error) {
        self.nearby.give_up();
        let place = self.trace.get().and_then(|t| t.current());
        let place = place.map(|record| place_of(&record));
        for peer in self.connections.writers() {
            wire::write_abort(peer, cause, place.as_deref());
            peer.end_writes();
        }
    }

    fn root_cause(&self, op: &str, error: Error) -> Error {
        for peer in self.connections.all() {
            let waiting = peer.check().ok().flatten();
            let notice =
                waiting.and_then(|raw| wire::take_abort(peer, op, &raw, wire::ABORT_READ_WAIT));
            if let Some(notice) = notice {
                return notice;
            }
        }
        error
    }

    fn whereabouts(&self, op: &str, error: Error) -> Error {
        let listener = Listener {
            rank: self.rank,
            connections: &self.connections,
            watch: &self.watch,
            trace: self.trace.get().map(|t| &**t),
            timeout: self.timeout,
        };
        listener.with_whereabouts(op, error)
    }

    fn flush_all(&self, op: &str) {
        for peer in self.connections.writers() {
            let _ = peer.flush(op, FLUSH_ON_ERROR);
        }
    }

    fn check_peers(&self) -> Result<()> {
        for peer in self.connections.all() {
            if let Some(culprit) = peer.check()?.as_ref().and_then(pending_abort) {
                return Err(Error::Distributed {
                    op: "health".into(),
                    rank: culprit.or(Some(peer.rank)),
                    reason: format!("rank {} reported that the group failed", peer.rank),
                });
            }
        }
        Ok(())
    }

    fn close(&self) {
        for peer in self.connections.all() {
            peer.close();
        }
        if let Some(relay) = &self.relay {
            relay.close();
        }
    }
}
