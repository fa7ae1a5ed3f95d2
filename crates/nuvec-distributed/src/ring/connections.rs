//! A rank's connections to the others, by direction: one opened by each end of a pair, each
//! carrying data one way ([`crate::tcp::form_mesh`] gives their order), but for the second
//! halves of large point-to-point messages (`messages.rs`), which take the other direction of
//! the receiver's connection.

use crate::tcp::wire::{take_abort, ABORT_READ_WAIT};
use crate::tcp::Connection;
use nuvec_core::{Error, Result};
use std::sync::Arc;

/// Which way a connection carries data: each direction between two ranks has its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// From this rank to the other.
    To,
    /// From the other rank to this one.
    From,
}

/// A rank's connections to every other rank (none to itself): one per address both list
/// and direction, those this rank writes on first ([`crate::tcp::form_mesh`]).
#[derive(Debug)]
pub(crate) struct Connections {
    pub(crate) size: usize,
    pub(crate) peers: Vec<Vec<Arc<Connection>>>,
}

impl Connections {
    /// Connection `index` of those that carry data to rank `rank` ([`Way::To`]) or from it
    /// ([`Way::From`]); [`crate::tcp::form_mesh`] gives their order.
    pub(crate) fn connection(
        &self,
        op: &str,
        rank: usize,
        index: usize,
        way: Way,
    ) -> Result<&Arc<Connection>> {
        let connections = self.peers.get(rank).map_or(&[][..], |c| &c[..]);
        let each_way = connections.len() / 2;
        let at = match way {
            Way::To => index,
            Way::From => each_way + index,
        };
        connections
            .get(at)
            .filter(|_| index < each_way)
            .ok_or_else(|| Error::Distributed {
                op: op.to_string(),
                rank: Some(rank),
                reason: format!(
                    "no connection #{index} to rank {rank} (group of {} ranks)",
                    self.size
                ),
            })
    }

    /// The connection this rank writes to `rank` on (the first: extra ones carry the extra
    /// lanes of large collectives).
    pub(crate) fn writer(&self, op: &str, rank: usize) -> Result<&Arc<Connection>> {
        self.connection(op, rank, 0, Way::To)
    }

    /// The connection this rank reads from `rank` on.
    pub(crate) fn reader(&self, op: &str, rank: usize) -> Result<&Arc<Connection>> {
        self.connection(op, rank, 0, Way::From)
    }

    /// Whether this rank has connections to `peer` (ranks that are not ring neighbours may
    /// have none: `crate::tcp::pairs`).
    pub(crate) fn linked(&self, peer: usize) -> bool {
        self.peers.get(peer).is_some_and(|c| !c.is_empty())
    }

    /// Every connection to every peer.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<Connection>> {
        self.peers.iter().flatten()
    }

    /// Every connection this rank writes frames on. (Only the second halves of large messages
    /// go the other way on the others, and only into a `recv` that reads them: a peer that
    /// closes a socket with unread bytes resets it.)
    pub(crate) fn writers(&self) -> impl Iterator<Item = &Arc<Connection>> {
        self.peers
            .iter()
            .flat_map(|connections| &connections[..connections.len() / 2])
    }

    /// Every connection that carries frames from another rank to this one.
    pub(crate) fn readers(&self) -> impl Iterator<Item = &Arc<Connection>> {
        self.peers
            .iter()
            .flat_map(|connections| &connections[connections.len() / 2..])
    }

    /// Fails when rank `peer` can no longer take part: its connection to this rank closed,
    /// or it sent word that the group failed (the notice, read whole, is the error).
    pub(crate) fn still_there(&self, op: &str, peer: usize) -> Result<()> {
        let connection = self.reader(op, peer)?;
        let waiting = connection.check()?;
        match waiting.and_then(|raw| take_abort(connection, op, &raw, ABORT_READ_WAIT)) {
            Some(notice) => Err(notice),
            None => Ok(()),
        }
    }
}
