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
use nuvec_core::distributed::{Record, State, Trace};
use nuvec_core::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a failing rank listens for its peers' notices.
const LISTEN: Duration = Duration::from_millis(500);
/// How often it looks while it listens.
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// What this rank heard of a peer after the group failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Heard {
    /// Its notice said where it is: `in all_sum #41 (...)`.
    Said(String),
    /// A frame of its waits on the connection ahead of any notice.
    Sent(Header),
    /// Data of its collective `kind`, not this rank's last, waits ahead of any notice.
    SentOther(&'static str),
    /// Its connection closed.
    Left,
    /// Nothing within the time this rank listened.
    Silent,
    /// No connection joins it to this rank (the group is not a full mesh).
    Unlinked,
}

/// Where a rank whose last record is `record` is: `in all_sum #41 (...)` while the call runs
/// (or where it failed), `past ...` once it finished.
pub(crate) fn place_of(record: &Record) -> String {
    match record.state {
        State::Done => format!("past {record}"),
        State::Running | State::Failed(_) => format!("in {record}"),
    }
}

/// `0`, `0 and 1`, `0, 1 and 3`.
fn listed(ranks: &[usize]) -> String {
    let names: Vec<String> = ranks.iter().map(usize::to_string).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The report: ranks that are alike in one phrase, the smallest sets (the odd ones out)
/// first. `heard[r]` is what this rank knows of rank `r` (its own place included).
pub(crate) fn report(heard: &[Heard], listened: Duration) -> String {
    let mut groups: Vec<(Heard, Vec<usize>)> = Vec::new();
    for (rank, what) in heard.iter().enumerate() {
        match groups.iter_mut().find(|(h, _)| h == what) {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((what.clone(), vec![rank])),
        }
    }
    groups.sort_by_key(|(_, ranks)| (ranks.len(), ranks[0]));
    let phrases: Vec<String> = groups
        .iter()
        .map(|(what, ranks)| {
            let (who, is) = match ranks.len() {
                1 => (format!("rank {}", ranks[0]), "is"),
                _ => (format!("ranks {}", listed(ranks)), "are"),
            };
            match what {
                Heard::Said(place) => format!("{who} {is} {place}"),
                Heard::Sent(header) => format!("{who} sent {} data", header.kind.name()),
                Heard::SentOther(kind) => format!("{who} {is} in {kind} (its data waits here)"),
                Heard::Left => format!("{who} left (the connection closed)"),
                Heard::Silent => format!(
                    "{who} did not answer within {:.1} s (stalled, or busy outside nuvec's calls)",
                    listened.as_secs_f64()
                ),
                Heard::Unlinked => format!("{who} {is} not connected to this rank"),
            }
        })
        .collect();
    phrases.join("; ")
}

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
    /// `error`, the failure of `op`, with where every rank is added, after listening (at
    /// most [`LISTEN`], a quarter of the timeout if shorter) for the peers' abort notices.
    pub(crate) fn with_whereabouts(&self, op: &str, error: Error) -> Error {
        let Error::Distributed {
            op: name,
            rank,
            reason,
        } = error
        else {
            return error;
        };
        let listen = LISTEN.min(self.timeout / 4);
        let heard = self.listen(op, listen);
        Error::Distributed {
            op: name,
            rank,
            reason: format!("{reason}; where the ranks are: {}", report(&heard, listen)),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_the_odd_ranks_first_and_groups_the_rest() {
        let at = |s: &str| Heard::Said(s.to_string());
        let gather = "in all_gather #42 (float32 [1024], src/train.rs:88)";
        let heard = [at(gather), at(gather), Heard::Silent, at(gather)];
        assert_eq!(
            report(&heard, Duration::from_millis(500)),
            "rank 2 did not answer within 0.5 s (stalled, or busy outside nuvec's calls); \
             ranks 0, 1 and 3 are in all_gather #42 (float32 [1024], src/train.rs:88)"
        );
        let heard = [
            at("in all_sum #3 (a)"),
            Heard::Left,
            at("in all_max #3 (b)"),
        ];
        assert_eq!(
            report(&heard, LISTEN),
            "rank 0 is in all_sum #3 (a); rank 1 left (the connection closed); \
             rank 2 is in all_max #3 (b)"
        );
        let heard = [
            at("in x"),
            Heard::SentOther("all_sum"),
            Heard::Unlinked,
            Heard::Unlinked,
        ];
        assert_eq!(
            report(&heard, LISTEN),
            "rank 0 is in x; rank 1 is in all_sum (its data waits here); \
             ranks 2 and 3 are not connected to this rank"
        );
    }
}
