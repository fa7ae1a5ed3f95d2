//! MLX's TCP ring backend, rebuilt: framed messages with sequence numbers, timeouts, errors
//! that name the peer, send/recv between any two ranks, and `sum_scatter`.
//!
//! A [`RingCommunicator`] is a rank's network (`network.rs`: its connections and channels, the
//! transport), its collective algorithms (`algorithms/`, written against the `Transport` trait
//! of `transport.rs` and run in the simulation tests over an in-memory one) and
//! its failure authority (`failure.rs`), which runs every operation and alone decides that
//! the group failed. `README.md` maps the files and names the pieces of a buffer.

mod algorithms;
mod channels;
mod connections;
mod cross_memory;
mod failure;
#[cfg(test)]
mod hostile_peer_tests;
#[cfg(test)]
mod memory;
mod messages;
mod network;
mod posted_messages;
mod relay;
mod send_pieces;
#[cfg(test)]
mod simulation_tests;
mod split;
mod transport;
mod whereabouts;

use crate::hostfile::Address;
use crate::tcp::frame::{Header, Kind, HEADER_BYTES};
use crate::tcp::wire::read_message_start;
use crate::Options;
use algorithms::{kind_of, Calls};
use failure::Authority;
use network::Network;
use nuvec_core::distributed::{Communicator, ReduceOp};
use nuvec_core::{DType, Error, Result};
use posted_messages::{recv_mismatch, Posted, Refused, MAX_NDIM};
use relay::Relay;
use transport::Transport;

/// What a ring group keeps between operations.
#[derive(Debug)]
struct State {
    calls: Calls,
    messages: Counts,
}

/// Point-to-point messages sent to and received from each rank (each message's sequence
/// number).
#[derive(Debug)]
struct Counts {
    sent: Vec<u64>,
    received: Vec<u64>,
}

/// A connected ring group.
#[derive(Debug)]
pub struct RingCommunicator {
    network: Network,
    authority: Authority<State>,
    /// The group's addresses and options, from which a split forms its sub-groups.
    nodes: Vec<Vec<Address>>,
    options: Options,
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
        let network = Network::connect(nodes, rank, options)?;
        let mut calls = Calls::default();
        // Read (and checked) by `Network::connect` already.
        calls.tuning.enabled = options
            .ring_settings()
            .is_ok_and(|settings| settings.tuning == crate::options::Tuning::Auto);
        let state = State {
            calls,
            messages: Counts {
                sent: vec![0; size],
                received: vec![0; size],
            },
        };
        Ok(RingCommunicator {
            network,
            authority: Authority::new(state),
            nodes: nodes.to_vec(),
            options: options.clone(),
        })
    }

    /// A `recv` from a rank this one shares no connection with: the message came round the
    /// ring whole (`relay.rs`), in the same form as on a connection.
    fn recv_relayed(
        &self,
        relay: &Relay,
        (data, dtype, shape): (&mut [u8], DType, &[i32]),
        src: usize,
    ) -> Result<()> {
        let network = &self.network;
        self.authority.run(network, "recv", false, |turn| {
            let mut alive = || Transport::check_peers(network);
            let message = turn.breaks(relay.recv(src, network.timeout, &mut alive))?;
            let expected = turn.state().messages.received[src];
            let corrupt = |what: &str| recv_mismatch(src, format!("the message relayed from rank {src} {what}"));
            let start = message.get(..HEADER_BYTES + 4).ok_or_else(|| corrupt("is too short"))?;
            let header = Header::decode(start[..HEADER_BYTES].try_into().expect("a header's bytes"))
                .map_err(|reason| corrupt(&reason))?;
            if header.kind != Kind::Send || header.sequence != expected {
                return turn.breaks(Err(recv_mismatch(
                    src,
                    format!("expected message #{expected} from rank {src}, got {}", header.describe()),
                )));
            }
            turn.state().messages.received[src] += 1;
            let ndim = u32::from_le_bytes(start[HEADER_BYTES..].try_into().expect("4 bytes")) as usize;
            let dims_end = HEADER_BYTES + 4 + 4 * ndim.min(MAX_NDIM + 1);
            if ndim > MAX_NDIM || message.len() < dims_end {
                return Err(corrupt(&format!("claims {ndim} dimensions")));
            }
            let their_shape: Vec<i32> = message[HEADER_BYTES + 4..dims_end]
                .chunks_exact(4)
                .map(|d| i32::from_le_bytes([d[0], d[1], d[2], d[3]]))
                .collect();
            let payload = &message[dims_end..];
            if header.dtype != dtype || their_shape != shape || payload.len() != data.len() {
                return Err(recv_mismatch(
                    src,
                    format!(
                        "rank {src} sent {} {their_shape:?}, this rank (rank {}) expected {dtype} {shape:?}",
                        header.dtype, network.rank
                    ),
                ));
            }
            data.copy_from_slice(payload);
            Ok(())
        })
    }

    /// The all-reduce into `data`, of `input` when given (else of `data` itself).
    fn all_reduce_from(
        &self,
        input: Option<&[u8]>,
        data: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let network = &self.network;
        self.authority
            .run(network, kind_of(op).name(), true, |turn| {
                let calls = &mut turn.state().calls;
                algorithms::all_reduce(network, calls, (input, data), (dtype, op))
            })
    }

    /// The broadcast from `root` of this rank's side of it, `data`.
    fn broadcast_data(
        &self,
        data: algorithms::broadcast::Data<'_>,
        dtype: DType,
        root: usize,
    ) -> Result<()> {
        let network = &self.network;
        self.authority
            .run(network, Kind::Broadcast.name(), true, |turn| {
                let calls = &mut turn.state().calls;
                algorithms::broadcast::broadcast(network, calls, data, (dtype, root))
            })
    }
}

impl Communicator for RingCommunicator {
    fn rank(&self) -> usize {
        self.network.rank
    }

    fn size(&self) -> usize {
        self.network.size
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
        let network = &self.network;
        self.authority
            .run(network, Kind::AllGather.name(), true, |turn| {
                let calls = &mut turn.state().calls;
                algorithms::all_gather(network, calls, (input, output), dtype)
            })
    }

    fn reduce_scatter(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let network = &self.network;
        self.authority
            .run(network, Kind::SumScatter.name(), true, |turn| {
                let calls = &mut turn.state().calls;
                algorithms::reduce_scatter(network, calls, (input, output), (dtype, op))
            })
    }

    fn broadcast(&self, data: &mut [u8], dtype: DType, root: usize) -> Result<()> {
        let network = &self.network;
        if root >= network.size {
            return Err(Error::Distributed {
                op: "broadcast".into(),
                rank: None,
                reason: format!("root rank {root} is not in a group of {}", network.size),
            });
        }
        self.broadcast_data(algorithms::broadcast::Data::Received(data), dtype, root)
    }

    fn broadcast_unchanged(&self, data: &[u8], dtype: DType) -> Result<bool> {
        let root = self.network.rank;
        self.broadcast_data(algorithms::broadcast::Data::Sent(data), dtype, root)?;
        Ok(true)
    }

    fn all_to_all(&self, input: &[u8], output: &mut [u8], dtype: DType) -> Result<()> {
        let network = &self.network;
        if !algorithms::all_to_all::has_path(network) {
            return nuvec_core::distributed::all_to_all_by_gathering(self, input, output, dtype);
        }
        self.authority
            .run(network, Kind::AllToAll.name(), true, |turn| {
                let calls = &mut turn.state().calls;
                algorithms::all_to_all::all_to_all(network, calls, (input, output), dtype)
            })
    }

    fn all_to_all_v(
        &self,
        input: &[u8],
        output: &mut [u8],
        (send, recv, row_bytes): (&[usize], &[usize], usize),
        dtype: DType,
    ) -> Result<()> {
        let network = &self.network;
        if !algorithms::all_to_all::has_path(network) {
            let counts = (send, recv, row_bytes);
            return nuvec_core::distributed::all_to_all_v_by_gathering(
                self,
                (input, output),
                counts,
                dtype,
            );
        }
        // The counts first, so that no rank starts an exchange its peers disagree with.
        nuvec_core::distributed::check_all_to_all_counts(self, (send, recv))?;
        self.authority
            .run(network, Kind::AllToAllV.name(), true, |turn| {
                let calls = &mut turn.state().calls;
                let counts = (send, recv, row_bytes);
                algorithms::all_to_all::all_to_all_v(network, calls, (input, output), counts, dtype)
            })
    }

    fn send(&self, data: &[u8], dtype: DType, shape: &[i32], dst: usize) -> Result<()> {
        self.authority.run(&self.network, "send", true, |turn| {
            let state = turn.state();
            let header = Header {
                kind: Kind::Send,
                dtype,
                sequence: state.messages.sent[dst],
                bytes: data.len() as u64,
            };
            state.messages.sent[dst] += 1;
            let mut meta = header.encode().to_vec();
            meta.extend_from_slice(&(shape.len() as u32).to_le_bytes());
            for dim in shape {
                meta.extend_from_slice(&dim.to_le_bytes());
            }
            let network = &self.network;
            match (&network.relay, network.nearby.channel_to(dst)) {
                (Some(relay), _) if !network.connections.linked(dst) => {
                    relay.send(dst, &[&meta, data])
                }
                (_, Some(channel)) => network.post_message((dst, channel), &meta, data),
                _ => network.write_message(dst, &meta, data),
            }
        })
    }

    fn recv(&self, data: &mut [u8], dtype: DType, shape: &[i32], src: usize) -> Result<()> {
        if let Some(relay) = self
            .network
            .relay
            .as_ref()
            .filter(|_| !self.network.connections.linked(src))
        {
            return self.recv_relayed(relay, (data, dtype, shape), src);
        }
        self.authority.run(&self.network, "recv", false, |turn| {
            let network = &self.network;
            if let Some(channel) = network.nearby.channel_from(src) {
                let expected = turn.state().messages.received[src];
                let taken = network.take_message((src, channel), expected, (data, dtype, shape));
                match turn.breaks(taken)? {
                    Ok(Posted::Received) => {
                        turn.state().messages.received[src] += 1;
                        return Ok(());
                    }
                    Err(Refused(reason)) => {
                        turn.state().messages.received[src] += 1;
                        return Err(recv_mismatch(src, reason));
                    }
                    // The header and the payload follow on the connection: read below.
                    Ok(Posted::OnConnection) => {}
                }
            }
            let peer = network.connections.reader("recv", src)?;
            let (header, ndim) = turn.breaks(read_message_start(peer, "recv", network.timeout))?;
            if header.kind != Kind::Send || header.sequence != turn.state().messages.received[src] {
                let expected = turn.state().messages.received[src];
                return turn.breaks(Err(recv_mismatch(
                    src,
                    format!("expected message #{expected} from rank {src}, got {}", header.describe()),
                )));
            }
            turn.state().messages.received[src] += 1;
            let ndim = ndim as usize;
            if ndim > MAX_NDIM {
                return turn.breaks(Err(recv_mismatch(src, format!("message from rank {src} claims {ndim} dimensions (at most {MAX_NDIM})"))));
            }
            let mut dims = vec![0u8; 4 * ndim];
            turn.breaks(peer.read_message("recv", &mut dims, network.timeout))?;
            let their_shape: Vec<i32> = dims.chunks_exact(4).map(|d| i32::from_le_bytes([d[0], d[1], d[2], d[3]])).collect();
            if header.dtype != dtype || their_shape != shape || header.bytes as usize != data.len() {
                // Drain the message so the connections stay usable for the next one.
                turn.breaks(network.drain_payload(src, peer, header.bytes))?;
                return Err(recv_mismatch(
                    src,
                    format!(
                        "rank {src} sent {} {their_shape:?}, this rank (rank {}) expected {dtype} {shape:?}",
                        header.dtype, network.rank
                    ),
                ));
            }
            turn.breaks(network.read_payload(src, peer, data))
        })
    }

    fn split(&self, color: i32, key: i32) -> Result<std::sync::Arc<dyn Communicator>> {
        let (nodes, rank) = split::plan(self, &self.nodes, (color, key))?;
        // Forming the sub-group is this split's work: its errors name the split.
        let formed =
            RingCommunicator::connect(&nodes, rank, &self.options).map_err(|e| match e {
                Error::Distributed { rank, reason, .. } => Error::Distributed {
                    op: "split".into(),
                    rank,
                    reason: format!("forming the group of color {color}: {reason}"),
                },
                other => other,
            })?;
        Ok(std::sync::Arc::new(formed))
    }

    fn attach_trace(&self, trace: std::sync::Arc<nuvec_core::distributed::Trace>) {
        let _ = self.network.trace.set(trace);
    }

    fn health(&self) -> Result<()> {
        self.authority.health(&self.network)
    }

    fn close(&self) {
        self.authority.close(&self.network);
    }
}
