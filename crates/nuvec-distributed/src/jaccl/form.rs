//! Forming a JACCL group's links: which queue pairs a rank opens, the addresses it publishes,
//! and connecting them to its peers'. `group.rs` forms a group over its side channel,
//! `split.rs` a sub-group over its parent's collectives.

use super::channel::Channel;
use super::fabric::{Fabric, QueuePair};
use super::jaccl_error;
use super::{Config, Options, Topology};
use nuvec_core::Result;
use std::sync::Arc;

/// Receive (and send) slots per queue pair.
pub(crate) const SLOTS: usize = 8;
/// Bytes of one slot: the largest message, header included.
pub(crate) const SLOT_BYTES: usize = 128 * 1024;

/// What a group was formed from: a group split from it forms with the same options, on the
/// same fabric, over the cables its members have between them.
#[derive(Debug)]
pub(super) struct Formed {
    pub(super) config: Config,
    pub(super) options: Options,
    /// `None` for a group of one.
    pub(super) topology: Option<Topology>,
    pub(super) fabric: Arc<dyn Fabric>,
}

/// One queue pair to open: the peer, the cable's index and its device.
pub(super) struct Planned {
    pub(super) peer: usize,
    pub(super) wire: usize,
    pub(super) device: String,
}

/// The queue pairs this rank opens: one per cable, to every peer on a mesh and to each
/// neighbour on a ring (the same neighbour on both sides for a ring of two); none for a
/// group of one (no topology).
pub(super) fn plan(config: &Config, topology: Option<Topology>) -> Vec<Planned> {
    let (rank, size) = (config.rank, config.size());
    let row = &config.devices[rank];
    let Some(topology) = topology else {
        return Vec::new();
    };
    match topology {
        Topology::Mesh => (0..size)
            .filter(|&p| p != rank)
            .flat_map(|peer| (0..row[peer].len()).map(move |wire| (peer, wire)))
            .map(|(peer, wire)| Planned {
                peer,
                wire,
                device: row[peer][wire].clone(),
            })
            .collect(),
        Topology::Ring { wires } => {
            let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
            let mut peers = vec![right];
            if left != right {
                peers.push(left);
            }
            peers
                .into_iter()
                .flat_map(|peer| (0..wires).map(move |wire| (peer, wire)))
                .map(|(peer, wire)| Planned {
                    peer,
                    wire,
                    device: row[peer][wire].clone(),
                })
                .collect()
        }
    }
}

/// Opens a queue pair for each planned cable.
pub(super) fn open(fabric: &dyn Fabric, plan: &[Planned]) -> Result<Vec<Box<dyn QueuePair>>> {
    plan.iter()
        .map(|p| fabric.open(&p.device, SLOTS, SLOT_BYTES))
        .collect()
}

/// This rank's record for the exchange of addresses: for each queue pair, the peer, the
/// cable and the address.
pub(super) fn publish(plan: &[Planned], queue_pairs: &[Box<dyn QueuePair>]) -> Vec<u8> {
    let mut record = Vec::new();
    for (planned, qp) in plan.iter().zip(queue_pairs) {
        let address = qp.address();
        record.extend_from_slice(&(planned.peer as u32).to_le_bytes());
        record.extend_from_slice(&(planned.wire as u32).to_le_bytes());
        record.extend_from_slice(&(address.len() as u32).to_le_bytes());
        record.extend_from_slice(&address);
    }
    record
}

/// Connects each queue pair to the address its peer published in `records` (one per rank of
/// the group) and posts its receives.
pub(super) fn join(
    queue_pairs: Vec<Box<dyn QueuePair>>,
    plan: &[Planned],
    rank: usize,
    records: &[Vec<u8>],
) -> Result<Vec<Channel>> {
    let mut channels = Vec::with_capacity(plan.len());
    for (planned, mut qp) in plan.iter().zip(queue_pairs) {
        let remote = records
            .get(planned.peer)
            .and_then(|record| find_address(record, rank, planned.wire))
            .ok_or_else(|| {
                jaccl_error(
                    "init",
                    rank,
                    format!(
                        "rank {} published no queue pair for rank {rank} on cable {}: the ranks disagree on the topology (check that every rank has the same device file)",
                        planned.peer, planned.wire
                    ),
                )
            })?;
        qp.connect(remote)?;
        channels.push(Channel::new(qp, planned.peer, SLOTS)?);
    }
    Ok(channels)
}

/// The address `owner`'s record gives for its queue pair to `rank` on cable `wire`.
fn find_address(mut record: &[u8], rank: usize, wire: usize) -> Option<&[u8]> {
    let word = |bytes: &[u8], at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    while !record.is_empty() {
        let (peer, cable, len) = (word(record, 0)?, word(record, 4)?, word(record, 8)?);
        let address = record.get(12..12 + len)?;
        if peer == rank && cable == wire {
            return Some(address);
        }
        record = &record[12 + len..];
    }
    None
}
