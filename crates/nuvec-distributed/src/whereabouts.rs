//! Where every rank is when a group fails: what a failing rank heard of each peer, and the
//! report that ends the failed collective's error, `rank 2 did not answer within 0.5 s (...);
//! ranks 0, 1 and 3 are in all_gather #42 (float32 [1024], src/train.rs:88)`. The ring hears
//! its peers on its connections (`ring/whereabouts.rs`), JACCL through its side channel
//! (`jaccl/watch.rs`).

use crate::tcp::frame::Header;
use nuvec_core::distributed::{Record, State};
use nuvec_core::Error;
use std::time::Duration;

/// The longest a failing rank listens for its peers' notices.
pub(crate) const LISTEN: Duration = Duration::from_millis(500);
/// How often it looks while it listens.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(5);

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
    /// Rank 0, which gathers the answers on JACCL, did not relay them.
    #[cfg_attr(not(feature = "jaccl"), allow(dead_code))]
    Unrelayed,
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
                Heard::Unrelayed => format!("{who} {is} unknown here (rank 0 did not relay where)"),
            }
        })
        .collect();
    phrases.join("; ")
}

/// How long a failing rank listens for its peers in a group of timeout `timeout`: at most
/// [`LISTEN`], a quarter of the timeout if shorter.
pub(crate) fn listen_for(timeout: Duration) -> Duration {
    LISTEN.min(timeout / 4)
}

/// `error` with the report of `heard` (after listening for `listened`) added to its reason.
pub(crate) fn with_report(error: Error, heard: &[Heard], listened: Duration) -> Error {
    match error {
        Error::Distributed { op, rank, reason } => Error::Distributed {
            op,
            rank,
            reason: format!("{reason}; where the ranks are: {}", report(heard, listened)),
        },
        other => other,
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
