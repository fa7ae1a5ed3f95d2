//! The connections of a rank while its group forms ([`Formed`]), by peer and way, and the
//! round in which the ranks tell each other which optional pairs connected ([`agree`]).

use super::connection::{Connection, Poll};
use super::pairs::connections_between;
use super::progress::{init_error, Progress};
use crate::hostfile::Address;
use nuvec_core::Result;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Tells every rank which optional pairs connected: each rank's row of the table (a byte per
/// rank: 1 where it opened connections to that rank) goes round the ring on the neighbours'
/// connections, before they are handed to the transport. Returns the whole table, row by row.
pub(super) fn agree(formed: &mut Formed, reachable: &[bool], deadline: Instant) -> Result<Vec<u8>> {
    let (rank, size) = (formed.rank, formed.size);
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let mut table = vec![0u8; size * size];
    for (peer, &reached) in reachable.iter().enumerate() {
        table[rank * size + peer] = u8::from(reached);
    }
    let failed = |peer: usize, e: std::io::Error| {
        init_error(
            Some(peer),
            format!("telling the ranks which connections formed failed: {e}"),
        )
    };
    for step in 0..size - 1 {
        let send = (rank + size - step) % size;
        let recv = (rank + size - step - 1) % size;
        let row = table[send * size..(send + 1) * size].to_vec();
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(10));
        let to = formed.stream(right, 0)?;
        to.set_write_timeout(Some(wait))
            .and_then(|()| to.write_all(&row))
            .map_err(|e| failed(right, e))?;
        let from = formed.stream(left, formed.between(left))?;
        from.set_read_timeout(Some(wait))
            .and_then(|()| from.read_exact(&mut table[recv * size..(recv + 1) * size]))
            .map_err(|e| failed(left, e))?;
    }
    Ok(table)
}

/// The streams of a forming rank, by peer: for each, the `m` it writes on, then the `m` it
/// reads from ([`super::form::form_mesh`]).
pub(super) struct Formed {
    rank: usize,
    size: usize,
    streams: Vec<Vec<Option<TcpStream>>>,
    /// How many connections each rank opened here on each of this rank's addresses.
    arrivals: Vec<Vec<usize>>,
    /// The relay's connections this rank opened (to its right neighbour, then from it) and
    /// those its left neighbour opened (from it, then to it).
    pub(super) relay_opened: Vec<TcpStream>,
    relay_accepted: Vec<TcpStream>,
}

impl Formed {
    pub(super) fn new(nodes: &[Vec<Address>], rank: usize) -> Formed {
        let size = nodes.len();
        let streams = (0..size)
            .map(|peer| match peer == rank {
                true => Vec::new(),
                false => (0..2 * connections_between(nodes, rank, peer))
                    .map(|_| None)
                    .collect(),
            })
            .collect();
        Formed {
            rank,
            size,
            streams,
            arrivals: vec![vec![0; nodes[rank].len()]; size],
            relay_opened: Vec::new(),
            relay_accepted: Vec::new(),
        }
    }

    pub(super) fn between(&self, peer: usize) -> usize {
        self.streams[peer].len() / 2
    }

    /// This rank opened `stream` to `peer`'s address `index`: the first of the two (`way` 0)
    /// carries this rank's data, the second the peer's.
    pub(super) fn opened(&mut self, peer: usize, index: usize, way: usize, stream: TcpStream) {
        let at = index + way * self.between(peer);
        self.streams[peer][at] = Some(stream);
    }

    /// `peer` opened `stream` to this rank's address `index`: its first carries the peer's
    /// data, its second this rank's.
    pub(super) fn accepted(&mut self, peer: usize, index: usize, stream: TcpStream) -> Result<()> {
        let arrived = self.arrivals[peer][index];
        self.arrivals[peer][index] += 1;
        let m = self.between(peer);
        let left = (self.rank + self.size - 1) % self.size;
        let at = match arrived {
            0 => m + index,
            1 => index,
            2 | 3 if peer == left && index == 0 => {
                self.relay_accepted.push(stream);
                return Ok(());
            }
            _ => {
                return Err(init_error(
                    Some(peer),
                    format!("rank {peer} opened more connections than the hostfile gives"),
                ))
            }
        };
        self.streams[peer][at] = Some(stream);
        Ok(())
    }

    pub(super) fn stream(&mut self, peer: usize, at: usize) -> Result<&mut TcpStream> {
        self.streams[peer][at].as_mut().ok_or_else(|| {
            init_error(
                Some(peer),
                "a ring neighbour's connection was not formed".into(),
            )
        })
    }

    /// The relay's connections ([`super::form::Mesh::relay`]).
    pub(super) fn relay(&mut self) -> Result<[TcpStream; 4]> {
        let opened = std::mem::take(&mut self.relay_opened);
        let accepted = std::mem::take(&mut self.relay_accepted);
        match (
            <[TcpStream; 2]>::try_from(opened),
            <[TcpStream; 2]>::try_from(accepted),
        ) {
            (Ok([to_right, from_right]), Ok([from_left, to_left])) => {
                Ok([to_right, from_right, from_left, to_left])
            }
            _ => Err(init_error(
                None,
                "the relay's connections to the ring neighbours did not form".into(),
            )),
        }
    }

    /// The connections: every pair's, or none for a pair that did not connect.
    pub(super) fn finish(self, poll: Poll, progress: &Progress) -> Result<Vec<Vec<Connection>>> {
        let size = self.size;
        let count: usize = self
            .streams
            .iter()
            .flatten()
            .filter(|s| s.is_some())
            .count();
        let relayed = (0..size)
            .filter(|&peer| peer != self.rank && self.streams[peer].iter().all(Option::is_none))
            .collect::<Vec<_>>();
        progress.log(|| match relayed.is_empty() {
            true => format!("group of {size} formed with {count} connection(s)"),
            false => format!(
                "group of {size} formed with {count} connection(s); messages to ranks \
                 {relayed:?} go round the ring"
            ),
        });
        self.streams
            .into_iter()
            .enumerate()
            .map(|(peer, streams)| {
                if streams.iter().all(Option::is_none) {
                    return Ok(Vec::new());
                }
                streams
                    .into_iter()
                    .map(|stream| {
                        let stream = stream.ok_or_else(|| {
                            init_error(Some(peer), "a connection was not formed".into())
                        })?;
                        Connection::new(peer, stream, poll)
                            .map_err(|e| init_error(Some(peer), e.to_string()))
                    })
                    .collect()
            })
            .collect()
    }
}
