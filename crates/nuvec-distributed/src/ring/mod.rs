//! MLX's TCP ring backend, rebuilt: framed messages with sequence numbers, timeouts, errors
//! that name the peer, send/recv between any two ranks, and `sum_scatter`.
//!
//! The algorithm (reduce-scatter then all-gather around the ring) is the pure schedule in
//! `schedule.rs`; this module moves bytes. Chunks are pipelined: a chunk is forwarded to the
//! right neighbour as soon as it has been reduced, while the next one arrives from the left.

mod algorithms;
mod channels;
mod connections;
#[cfg(test)]
mod hostile_peer_tests;
mod link;
mod messages;
mod send_pieces;

use crate::hostfile::Address;
use crate::schedule::chunks;
use crate::sync::lock;
use crate::tcp::frame::{Header, Kind};
use crate::tcp::watch::Watch;
use crate::tcp::wire::{self, read_header, read_message_start};
use crate::tcp::Connection;
use crate::Options;
use algorithms::lanes;
use algorithms::outbox::{Outbox, OwnBlock};
use link::Link;
use nuvec_core::distributed::{Communicator, ReduceOp};
use nuvec_core::{DType, Error, Result};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes per pipelined chunk: large enough for efficient syscalls, small enough that
/// reducing one chunk overlaps receiving the next. The largest chunk; see [`chunk_bytes`].
const CHUNK_BYTES: usize = 512 * 1024;
/// Passes over at least this many bytes use [`LARGE_PASS_CHUNK_BYTES`].
const SMALLER_CHUNKS_FROM: usize = 4 << 20;
/// Bytes per chunk of a pass over [`SMALLER_CHUNKS_FROM`] bytes or more.
const LARGE_PASS_CHUNK_BYTES: usize = 128 * 1024;

/// Bytes per chunk of a ring pass over `bytes` (an all-reduce's buffer or lane, an
/// all-gather's output, a reduce-scatter's input); both ends of every connection compute it
/// from the same size. Large passes use smaller chunks: fewer bytes in flight on each
/// connection keep the chunks being received and reduced in the cores' caches. Smaller chunks
/// start at [`SMALLER_CHUNKS_FROM`]: passes of 2 MB lost with them (measured with sends in
/// pieces of [`peer::SEND_PIECE`]: `docs/performance.md`, "Tuning measurements").
fn chunk_bytes(bytes: usize) -> usize {
    if bytes >= SMALLER_CHUNKS_FROM {
        LARGE_PASS_CHUNK_BYTES
    } else {
        CHUNK_BYTES
    }
}

/// The most dimensions a received message may claim (a larger count is a corrupt frame, not a
/// reason to allocate).
const MAX_NDIM: usize = 64;
/// How long a failing operation waits for its queued bytes to leave, best effort.
const FLUSH_ON_ERROR: Duration = Duration::from_millis(500);

/// Mutable state of a ring, guarded by one lock so collectives run one at a time, in order.
#[derive(Debug)]
pub(crate) struct State {
    collectives: u64,
    sent: Vec<u64>,
    received: Vec<u64>,
    /// The first failure; the group refuses further work with it.
    failure: Option<Error>,
    closed: bool,
    /// Where chunks from the left are received before being reduced (kept between calls).
    scratch: Vec<u8>,
    /// The same for each lane of a collective spread over several.
    lane_scratch: Vec<Vec<u8>>,
}

impl State {
    /// `result`, its error kept as the group's failure: a read that failed, or a message
    /// that was refused without being drained, leaves a stream at an unknown place, and the
    /// group refuses further work.
    fn breaks<T>(&mut self, result: Result<T>) -> Result<T> {
        result.inspect_err(|error| {
            self.failure.get_or_insert_with(|| error.clone());
        })
    }
}

/// A connected ring group.
#[derive(Debug)]
pub struct RingCommunicator {
    rank: usize,
    size: usize,
    /// The connections to each rank (none to this rank itself): one per address both list
    /// and direction, those this rank writes on first ([`crate::tcp::form_mesh`]).
    peers: Vec<Vec<Arc<Connection>>>,
    timeout: Duration,
    /// How many connections every pair of ring neighbours shares (the lanes' first factor).
    ring_connections: usize,
    state: Mutex<State>,
    /// The collective in progress, for reads that wait long to check the other connections.
    watch: Arc<Watch>,
    /// How large point-to-point payloads go to each rank: in pieces or whole.
    pieces: Vec<send_pieces::PieceChoice>,
    /// Shared-memory channels with ranks on this machine, for large point-to-point payloads.
    nearby: channels::Nearby,
}

fn kind_of(op: ReduceOp) -> Kind {
    match op {
        ReduceOp::Sum => Kind::AllSum,
        ReduceOp::Max => Kind::AllMax,
        ReduceOp::Min => Kind::AllMin,
    }
}

impl RingCommunicator {
    /// Connects rank `rank` of the group whose listening addresses are `nodes`.
    pub fn connect(
        nodes: &[Vec<Address>],
        rank: usize,
        options: &Options,
    ) -> Result<RingCommunicator> {
        let size = nodes.len();
        if rank >= size {
            return Err(Error::Distributed {
                op: "init".into(),
                rank: None,
                reason: format!("rank {rank} is out of range for a hostfile of {size} ranks"),
            });
        }
        let ring_connections = (0..size)
            .map(|r| crate::tcp::connections_between(nodes, r, (r + 1) % size))
            .min()
            .unwrap_or(1);
        let peers = if size == 1 {
            vec![Vec::new()]
        } else {
            crate::tcp::form_mesh(nodes, rank, options)?
        };
        let mut ring = RingCommunicator {
            rank,
            size,
            peers: peers
                .into_iter()
                .map(|connections| connections.into_iter().map(Arc::new).collect())
                .collect(),
            watch: Arc::new(Watch::new(rank)),
            pieces: (0..size)
                .map(|_| send_pieces::PieceChoice::default())
                .collect(),
            timeout: options.timeout,
            ring_connections,
            state: Mutex::new(State {
                collectives: 0,
                sent: vec![0; size],
                received: vec![0; size],
                failure: None,
                closed: false,
                scratch: Vec::new(),
                lane_scratch: Vec::new(),
            }),
            nearby: channels::Nearby::default(),
        };
        if size > 1 {
            ring.open_nearby()?;
        }
        for peer in ring.connections() {
            peer.join_watch(ring.watch.clone());
        }
        ring.watch
            .set_readers(ring.readers().map(Arc::downgrade).collect());
        Ok(ring)
    }

    /// Runs `body` as the group's next operation unless the group failed or closed; a
    /// failure inside a collective becomes the group's sticky failure.
    fn run<T>(
        &self,
        op: &str,
        sticky: bool,
        body: impl FnOnce(&mut State) -> Result<T>,
    ) -> Result<T> {
        let mut state = lock(&self.state);
        if state.closed {
            return Err(Error::Distributed {
                op: op.into(),
                rank: None,
                reason: "the group was closed".into(),
            });
        }
        if let Some(failure) = &state.failure {
            return Err(Error::Distributed {
                op: op.into(),
                rank: None,
                reason: format!("the group failed earlier and refuses further work: {failure}"),
            });
        }
        let result = body(&mut state).map_err(|error| self.root_cause(op, error));
        self.watch.end();
        if let Err(error) = &result {
            // Hand what was queued (our header, say) to the kernel, so peers learn what this
            // rank called even if the process exits right after the error.
            for peer in self.writers() {
                let _ = peer.flush(op, FLUSH_ON_ERROR);
            }
            if sticky {
                state.failure = Some(error.clone());
                // Tell every peer at once why (an abort notice, then the end of this rank's
                // writes) instead of letting them wait out their timeouts for data that will
                // never come.
                // The rank at fault is told too: a stalled rank that wakes up learns that the
                // group gave up on it.
                self.abort_all(error);
            }
        }
        result
    }

    /// Tells every peer, on every connection this rank writes on, that the group failed and
    /// why, then ends this rank's writes.
    fn abort_all(&self, error: &Error) {
        for peer in self.writers() {
            wire::write_abort(peer, error);
            peer.end_writes();
        }
    }

    /// The error to report for a failed operation: when a peer has already sent word of the
    /// group's failure (an abort notice naming the rank that was lost), that notice, rather
    /// than this rank's own symptom (a peer that stopped reading, say).
    fn root_cause(&self, op: &str, error: Error) -> Error {
        for peer in self.connections() {
            let waiting = peer.check().ok().flatten();
            let notice =
                waiting.and_then(|raw| wire::take_abort(peer, op, &raw, wire::ABORT_READ_WAIT));
            if let Some(notice) = notice {
                return notice;
            }
        }
        error
    }

    /// Sends this collective's header right; the data may follow at once (the left
    /// neighbour's header is checked by [`RingCommunicator::check_left`] before any of its data
    /// is used).
    fn begin(&self, state: &mut State, kind: Kind, dtype: DType, bytes: usize) -> Result<Link<'_>> {
        let ours = self.header(state, kind, dtype, bytes);
        self.lane_link(lanes::Lane::default(), ours)
    }

    /// Reads the left neighbour's header and checks it called the same collective.
    fn check_left(&self, link: &Link<'_>) -> Result<()> {
        let (kind, left) = (link.ours.kind, link.left);
        let theirs = read_header(left, kind.name(), self.timeout)?;
        self.same_call(left.rank, &theirs, &link.ours)
    }

    /// Checks that rank `peer` called what this rank called, naming both calls if not.
    fn same_call(&self, peer: usize, theirs: &Header, ours: &Header) -> Result<()> {
        if theirs == ours {
            return Ok(());
        }
        Err(ours.mismatch(self.rank, peer, theirs))
    }

    /// The all-reduce into `data`, of `input` when given (else of `data` itself).
    fn all_reduce_from(
        &self,
        input: Option<&[u8]>,
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let kind = kind_of(op);
        self.run(kind.name(), true, |state| {
            let star = self.uses_star(data.len());
            if star || self.uses_doubling(data.len()) {
                if let Some(input) = input {
                    data.copy_from_slice(input);
                }
                return if star {
                    self.all_reduce_star(state, data, dtype, op)
                } else {
                    self.all_reduce_doubling(state, data, dtype, op)
                };
            }
            let lanes = lanes::plan(self.size, self.ring_connections, data.len());
            let sequence = self.header(state, kind, dtype, data.len()).sequence;
            let buffers = (input, data);
            if let [lane] = lanes[..] {
                let scratch = &mut state.scratch;
                return self.all_reduce_lane(lane, sequence, buffers, (dtype, op), scratch);
            }
            let scratches = &mut state.lane_scratch;
            self.all_reduce_lanes(&lanes, sequence, buffers, (dtype, op), scratches)
        })
    }

    /// A `recv` that found another message than the one it expects from `peer`.
    fn recv_mismatch(&self, peer: usize, reason: String) -> Error {
        Error::Distributed {
            op: "recv".into(),
            rank: Some(peer),
            reason,
        }
    }
}

impl Communicator for RingCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn backend(&self) -> &'static str {
        "ring"
    }

    fn all_reduce(&self, data: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()> {
        self.all_reduce_from(None, data, dtype, op)
    }

    fn all_reduce_into(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        self.all_reduce_from(Some(input), output, dtype, op)
    }

    fn all_gather(&self, input: &[u8], output: &mut [u8], dtype: DType) -> Result<()> {
        let kind = Kind::AllGather;
        self.run(kind.name(), true, |state| {
            let block = input.len();
            let own = self.rank * block..(self.rank + 1) * block;
            if self.uses_star(output.len()) {
                output[own].copy_from_slice(input);
                return self.all_gather_star(state, output, block, dtype);
            }
            if self.uses_doubling(output.len()) {
                output[own].copy_from_slice(input);
                return self.all_gather_doubling(state, output, block, dtype);
            }
            let link = self.begin(state, kind, dtype, input.len())?;
            // Blocks are the segments of the gathered array. This rank's own goes right
            // straight from the input and is copied into place while the others arrive.
            let width = dtype.size();
            let elements = block / width;
            let mut outbox = Outbox::reading(Some(input));
            for piece in chunks(0..elements, (chunk_bytes(output.len()) / width).max(1)) {
                outbox.push_input(piece.start * width..piece.end * width);
            }
            outbox.pump(&link, kind, output)?;
            self.check_left(&link)?;
            let mut own_block = OwnBlock::new(input, own.start);
            let own_block = Some(&mut own_block);
            self.all_gather_phase(kind, &link, output, width, &mut outbox, own_block)?;
            link.right.flush(kind.name(), self.timeout)
        })
    }

    fn reduce_scatter(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let kind = Kind::SumScatter;
        self.run(kind.name(), true, |state| {
            if self.uses_star(input.len()) {
                return self.reduce_scatter_star(state, input, output, dtype, op);
            }
            if self.size == 2 && self.uses_doubling(input.len()) {
                return self.reduce_scatter_pair(state, input, output, dtype, op);
            }
            let link = self.begin(state, kind, dtype, input.len())?;
            self.reduce_scatter_into(&link, (input, output), (dtype, op), &mut state.scratch)?;
            link.right.flush(kind.name(), self.timeout)
        })
    }

    fn send(&self, data: &[u8], dtype: DType, shape: &[i32], dst: usize) -> Result<()> {
        self.run("send", true, |state| {
            let header = Header {
                kind: Kind::Send,
                dtype,
                sequence: state.sent[dst],
                bytes: data.len() as u64,
            };
            state.sent[dst] += 1;
            let mut meta = header.encode().to_vec();
            meta.extend_from_slice(&(shape.len() as u32).to_le_bytes());
            for dim in shape {
                meta.extend_from_slice(&dim.to_le_bytes());
            }
            self.write_message(dst, &meta, data)
        })
    }

    fn recv(&self, data: &mut [u8], dtype: DType, shape: &[i32], src: usize) -> Result<()> {
        self.run("recv", false, |state| {
            let peer = self.reader("recv", src)?;
            let (header, ndim) = state.breaks(read_message_start(peer, "recv", self.timeout))?;
            if header.kind != Kind::Send || header.sequence != state.received[src] {
                let expected = state.received[src];
                return state.breaks(Err(self.recv_mismatch(
                    src,
                    format!("expected message #{expected} from rank {src}, got {}", header.describe()),
                )));
            }
            state.received[src] += 1;
            let ndim = ndim as usize;
            if ndim > MAX_NDIM {
                return state.breaks(Err(self.recv_mismatch(src, format!("message from rank {src} claims {ndim} dimensions (at most {MAX_NDIM})"))));
            }
            let mut dims = vec![0u8; 4 * ndim];
            state.breaks(peer.read_message("recv", &mut dims, self.timeout))?;
            let their_shape: Vec<i32> = dims.chunks_exact(4).map(|d| i32::from_le_bytes([d[0], d[1], d[2], d[3]])).collect();
            if header.dtype != dtype || their_shape != shape || header.bytes as usize != data.len() {
                // Drain the message so the connections stay usable for the next one.
                state.breaks(self.drain_payload(src, peer, header.bytes))?;
                return Err(self.recv_mismatch(
                    src,
                    format!(
                        "rank {src} sent {} {their_shape:?}, this rank (rank {}) expected {dtype} {shape:?}",
                        header.dtype, self.rank
                    ),
                ));
            }
            state.breaks(self.read_payload(src, peer, data))
        })
    }

    fn health(&self) -> Result<()> {
        // Waits for a collective in progress (it holds the state lock) rather than interleaving.
        let state = lock(&self.state);
        if state.closed {
            return Err(Error::Distributed {
                op: "health".into(),
                rank: None,
                reason: "the group was closed".into(),
            });
        }
        if let Some(failure) = &state.failure {
            return Err(failure.clone());
        }
        for peer in self.connections() {
            if let Some(culprit) = peer.check()?.as_ref().and_then(wire::pending_abort) {
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
        let mut state = lock(&self.state);
        state.closed = true;
        for peer in self.connections() {
            peer.close();
        }
    }
}
