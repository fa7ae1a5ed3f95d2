//! `Group::split` on the ring (MLX's ring refuses it): the ranks that pass the same color
//! form a ring of their own, ordered by key (then by rank in the parent).
//!
//! Each rank picks a free port on each host it listens on in the parent, and one all-gather
//! over the parent tells every rank every other's color, key and ports; the hosts are the
//! parent's. The ranks of each color then form their group as `init` does, with the parent's
//! options (key, timeout, transports). A sub-group has connections of its own: its frames
//! never share a stream with the parent's or another sub-group's, so sub-groups run at the same
//! time as each other and as the parent without any of them reading another's bytes.

use crate::hostfile::Address;
use nuvec_core::distributed::Communicator;
use nuvec_core::{DType, Error, Result};

/// The most addresses (connections to each peer) a rank of a split group listens on.
const MOST_ADDRESSES: usize = 8;
/// One rank's part of the exchange: color, key, how many ports, the ports.
const ENTRY_BYTES: usize = 4 + 4 + 1 + 2 * MOST_ADDRESSES;

/// What a rank told the others when splitting.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    color: i32,
    key: i32,
    ports: Vec<u16>,
}

impl Entry {
    fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut out = [0u8; ENTRY_BYTES];
        out[..4].copy_from_slice(&self.color.to_le_bytes());
        out[4..8].copy_from_slice(&self.key.to_le_bytes());
        out[8] = self.ports.len() as u8;
        for (i, port) in self.ports.iter().enumerate() {
            out[9 + 2 * i..11 + 2 * i].copy_from_slice(&port.to_le_bytes());
        }
        out
    }

    fn decode(raw: &[u8]) -> Option<Entry> {
        let word = |at: usize| i32::from_le_bytes(raw[at..at + 4].try_into().expect("4 bytes"));
        let count = *raw.get(8)? as usize;
        if raw.len() != ENTRY_BYTES || count > MOST_ADDRESSES {
            return None;
        }
        let ports = (0..count)
            .map(|i| u16::from_le_bytes([raw[9 + 2 * i], raw[10 + 2 * i]]))
            .collect();
        Some(Entry {
            color: word(0),
            key: word(4),
            ports,
        })
    }
}

fn split_error(rank: Option<usize>, reason: String) -> Error {
    Error::Distributed {
        op: "split".into(),
        rank,
        reason,
    }
}

/// This rank's sub-group's addresses and its rank there: the parent `nodes`' hosts with the
/// ports each member picked. `parent` runs the exchange.
pub(crate) fn plan(
    parent: &dyn Communicator,
    nodes: &[Vec<Address>],
    (color, key): (i32, i32),
) -> Result<(Vec<Vec<Address>>, usize)> {
    let rank = parent.rank();
    let (color, key) =
        crate::split::color_and_key(rank, (color, key)).map_err(|e| split_error(None, e))?;
    let mine = &nodes[rank];
    if mine.len() > MOST_ADDRESSES {
        return Err(split_error(
            None,
            format!(
                "rank {rank} listens on {} addresses; a split group takes at most {MOST_ADDRESSES}",
                mine.len()
            ),
        ));
    }
    let ports = mine
        .iter()
        .map(|address| crate::tcp::free_port(address, rank))
        .collect::<Result<Vec<u16>>>()?;
    let ours = Entry { color, key, ports };
    let mut all = vec![0u8; ENTRY_BYTES * parent.size()];
    parent.all_gather(&ours.encode(), &mut all, DType::U8)?;
    let entries = all
        .chunks(ENTRY_BYTES)
        .enumerate()
        .map(|(r, raw)| {
            Entry::decode(raw)
                .ok_or_else(|| split_error(Some(r), format!("rank {r} sent a corrupt split entry")))
        })
        .collect::<Result<Vec<Entry>>>()?;
    let colors: Vec<(i32, i32)> = entries.iter().map(|e| (e.color, e.key)).collect();
    let members = crate::split::members(&colors, color);
    let child_rank = members
        .iter()
        .position(|&r| r == rank)
        .expect("this rank has its own color");
    let child_nodes = members
        .iter()
        .map(|&r| {
            let hosts = &nodes[r];
            if entries[r].ports.len() != hosts.len() {
                return Err(split_error(
                    Some(r),
                    format!(
                        "rank {r} offered {} ports for its {} addresses",
                        entries[r].ports.len(),
                        hosts.len()
                    ),
                ));
            }
            Ok(hosts
                .iter()
                .zip(&entries[r].ports)
                .map(|(host, &port)| Address {
                    host: host.host.clone(),
                    port,
                })
                .collect())
        })
        .collect::<Result<Vec<Vec<Address>>>>()?;
    Ok((child_nodes, child_rank))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let entry = Entry {
            color: 3,
            key: -1,
            ports: vec![4000, 65535],
        };
        assert_eq!(Entry::decode(&entry.encode()), Some(entry));
        let mut corrupt = [0u8; ENTRY_BYTES];
        corrupt[8] = 200;
        assert_eq!(Entry::decode(&corrupt), None);
    }
}
