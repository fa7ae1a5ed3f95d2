//! Where every rank is when a group fails: the report that ends a failed collective's error,
//! `rank 2 did not answer within 0.5 s (...); ranks 0, 1 and 3 are in all_gather #42 (float32
//! [1024], src/train.rs:88)`.
//!
//! Each rank's abort notice carries where it is (its flight recorder's last record, handed to
//! the communicator when the group was registered). A rank whose collective failed sends its
//! notice to every peer, then listens a short while on its connections for theirs: peers still
//! inside a call fail within a watch sweep of reading the first notice, and answer with their
//! own. A peer whose connection closed left; one that sends nothing is outside nuvec's calls
//! (stalled, or busy computing) or stuck where this rank cannot hear it.

use super::connections::Connections;
use crate::tcp::frame::{Header, Kind};
use crate::tcp::watch::Watch;
use crate::tcp::wire::{pending_abort, take_abort, ABORT_READ_WAIT};
use crate::tcp::Connection;
use crate::whereabouts::{listen_for, place_of, with_report, Heard, LOOK_EVERY};
use nuvec_core::distributed::Trace;
use nuvec_core::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a rank listens with after its group failed: its connections, the watch that knows
/// its last call, and its flight recorder.
pub(crate) struct Listener<'a> {
    pub(crate) rank: usize,
    pub(crate) connections: &'a Connections,
    pub(crate) watch: &'a Watch,
    pub(crate) trace: Option<&'a Trace>,
    /// The group's timeout.
    pub(crate) timeout: Duration,
}

impl Listener<'_> {
    /// `error`, the failure of `op`, with where every rank is added, after listening (see
    /// [`listen_for`]) for the peers' abort notices.
    pub(crate) fn with_whereabouts(&self, op: &str, error: Error) -> Error {
        if !matches!(error, Error::Distributed { .. }) {
            return error;
        }
        let listen = listen_for(self.timeout);
        let heard = self.listen(op, listen);
        with_report(error, &heard, listen)
    }

    /// What this rank hears of every rank within `listen`.
    fn listen(&self, op: &str, listen: Duration) -> Vec<Heard> {
        let mine = self.trace.and_then(Trace::current);
        let mut heard: Vec<Option<Heard>> = (0..self.connections.size)
            .map(|r| (!self.connections.linked(r)).then_some(Heard::Unlinked))
            .collect();
        let heard_mine = mine.map_or(Heard::Silent, |r| Heard::Said(place_of(&r)));
        heard[self.rank] = Some(heard_mine.clone());
        let deadline = Instant::now() + listen;
        loop {
            for (rank, connections) in self.connections.peers.iter().enumerate() {
                if heard[rank].is_none() {
                    heard[rank] = hear(connections, op).map(|h| match h {
                        // A frame of this rank's own call: the peer is where this rank is.
                        Heard::Sent(header) if self.watch.is_of_last_call(&header) => {
                            heard_mine.clone()
                        }
                        Heard::Sent(header) => Heard::SentOther(header.kind.name()),
                        other => other,
                    });
                }
            }
            if heard.iter().all(Option::is_some) || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(LOOK_EVERY);
        }
        heard
            .into_iter()
            .map(|h| h.unwrap_or(Heard::Silent))
            .collect()
    }
}

/// What the connections to one rank say of it now, if anything yet: a notice on any of them
/// first (one direction may show the peer gone while the other still holds its notice).
fn hear(connections: &[Arc<Connection>], op: &str) -> Option<Heard> {
    let (mut seen, mut quiet) = (None, false);
    for peer in connections {
        if let Some(place) = peer.place() {
            return Some(Heard::Said(place));
        }
        let now = match peer.check() {
            Err(_) => Some(Heard::Left),
            Ok(None) => None,
            Ok(Some(raw)) if pending_abort(&raw).is_some() => {
                // Reading the notice keeps where it says the peer is.
                let _ = take_abort(peer, op, &raw, ABORT_READ_WAIT);
                match peer.place() {
                    Some(place) => return Some(Heard::Said(place)),
                    None => Some(Heard::Silent),
                }
            }
            Ok(Some(raw)) => match Header::decode(&raw) {
                Ok(header) if !matches!(header.kind, Kind::Chunk | Kind::Abort) => {
                    Some(Heard::Sent(header))
                }
                // A chunk, or the middle of one this rank stopped reading: its notice, if
                // it sent one, is behind data that will not be read.
                _ => None,
            },
        };
        // What a connection shows beats "left": data or a notice came before the end.
        match (&seen, now) {
            (_, None) => quiet = true,
            (None | Some(Heard::Left), now) => seen = now,
            (Some(_), Some(_)) => {}
        }
    }
    // A rank left when all its connections closed; one still open may yet bring its notice.
    match seen {
        Some(Heard::Left) if quiet => None,
        seen => seen,
    }
}
