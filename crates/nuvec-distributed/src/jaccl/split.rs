//! `Group::split` on JACCL (MLX's JACCL refuses it): the ranks that pass the same color form a
//! group of their own, ordered by key (then by rank in the parent), over the cables its members
//! have between them.
//!
//! The split runs on the parent's own collectives, so it needs no coordinator: one all-gather
//! tells every rank every other's color and key; every rank then checks every color's cables
//! (any part of a mesh is a mesh; a part of a ring must still be a ring, or a mesh), so a split
//! that cannot form fails on every rank alike, before anything waits. Each rank opens new queue
//! pairs to its sub-group's peers on the same devices and fabric, and the addresses travel in
//! one more all-gather over the parent (with each rank's failure, if it had one, so no rank
//! waits on another that gave up). A sub-group's queue pairs are its own: its messages never
//! meet the parent's or a sibling's, so they all run at the same time. A sub-group watches for
//! lost ranks through its parent's side channel.

use super::channel::Channel;
use super::config::Config;
use super::form::{self, Formed, Planned};
use super::jaccl_error;
use super::side::gather_records;
use crate::split::members;
use nuvec_core::distributed::Communicator;
use nuvec_core::{DType, Error, Result};

fn split_error(rank: usize, reason: String) -> Error {
    jaccl_error("split", rank, reason)
}

/// `parent`'s configuration narrowed to `members` (in the sub-group's order), for the member
/// at `rank` there.
fn narrow(parent: &Config, members: &[usize], rank: usize) -> Config {
    Config {
        rank,
        devices: members
            .iter()
            .map(|&i| {
                members
                    .iter()
                    .map(|&j| parent.devices[i][j].clone())
                    .collect()
            })
            .collect(),
        coordinator: None,
        prefer_ring: parent.prefer_ring,
    }
}

/// A record's first byte: the rank could take part, or could not (the reason follows).
const READY: u8 = 0;
const FAILED: u8 = 1;

fn record(outcome: &std::result::Result<Vec<u8>, Error>) -> Vec<u8> {
    match outcome {
        Ok(bytes) => [&[READY][..], bytes].concat(),
        Err(error) => [&[FAILED][..], error.to_string().as_bytes()].concat(),
    }
}

/// The first rank whose record says it failed, as an error of this rank's split.
fn first_failure(records: &[Vec<u8>], rank: usize, doing: &str) -> Result<()> {
    for (r, record) in records.iter().enumerate() {
        match record.first() {
            Some(&READY) => {}
            Some(&FAILED) => {
                return Err(split_error(
                    rank,
                    format!(
                        "rank {r} failed {doing}: {}",
                        String::from_utf8_lossy(&record[1..])
                    ),
                ))
            }
            _ => {
                return Err(split_error(
                    rank,
                    format!("rank {r} sent a malformed record {doing}"),
                ))
            }
        }
    }
    Ok(())
}

/// Splits `parent`, formed from `formed` (see the module's documentation): what the
/// sub-group of this rank is formed from, its plan and its connected channels. Every rank of
/// the parent must call it.
pub(super) fn split(
    parent: &dyn Communicator,
    formed: &Formed,
    color: i32,
    key: i32,
) -> Result<(Formed, Vec<Planned>, Vec<Channel>)> {
    let (rank, size) = (parent.rank(), parent.size());
    let (color, key) =
        crate::split::color_and_key(rank, (color, key)).map_err(|e| split_error(rank, e))?;
    let mut ours = [0u8; 8];
    ours[..4].copy_from_slice(&color.to_le_bytes());
    ours[4..].copy_from_slice(&key.to_le_bytes());
    let mut all = vec![0u8; 8 * size];
    parent.all_gather(&ours, &mut all, DType::U8)?;
    let word = |at: usize| i32::from_le_bytes(all[at..at + 4].try_into().expect("4 bytes"));
    let colors: Vec<(i32, i32)> = (0..size).map(|r| (word(8 * r), word(8 * r + 4))).collect();
    if let Some(r) = colors.iter().position(|&(c, _)| c < 0) {
        return Err(split_error(
            rank,
            format!(
                "rank {r} passed the color {}; colors must be 0 or more",
                colors[r].0
            ),
        ));
    }

    // Every color's topology, checked on every rank, so that all fail together or none does.
    let mut distinct: Vec<i32> = colors.iter().map(|&(c, _)| c).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let mut topology = None;
    for &c in &distinct {
        let members = members(&colors, c);
        if members.len() < 2 {
            continue;
        }
        let narrowed = narrow(&formed.config, &members, 0);
        let chosen = narrowed.choose(true).map_err(|e| {
            let reason = match e {
                Error::Distributed { reason, .. } => reason,
                other => other.to_string(),
            };
            split_error(
                rank,
                format!("the ranks of color {c} ({members:?} in the parent) are cabled as neither a mesh nor a ring: {reason}"),
            )
        })?;
        if c == color {
            topology = Some(chosen);
        }
    }

    let members = members(&colors, color);
    let child_rank = members
        .iter()
        .position(|&r| r == rank)
        .expect("this rank has its own color");
    let config = narrow(&formed.config, &members, child_rank);
    let plan = form::plan(&config, topology);
    let gather = |bytes: &[u8]| -> Result<Vec<u8>> {
        let mut out = vec![0u8; bytes.len() * size];
        parent.all_gather(bytes, &mut out, DType::U8)?;
        Ok(out)
    };

    // Open this rank's queue pairs and trade addresses over the parent.
    let opened = form::open(&*formed.fabric, &plan);
    let published = opened
        .as_ref()
        .map(|queue_pairs| form::publish(&plan, queue_pairs))
        .map_err(Clone::clone);
    let records = gather_records(rank, size, &record(&published), &gather)?;
    first_failure(&records, rank, "to open its queue pairs")?;
    let queue_pairs = opened.expect("this rank's record said it opened them");
    let ours: Vec<Vec<u8>> = members.iter().map(|&r| records[r][1..].to_vec()).collect();
    let joined = form::join(queue_pairs, &plan, child_rank, &ours);

    // Every receive is posted before anyone sends.
    let status = record(&joined.as_ref().map(|_| Vec::new()).map_err(Clone::clone));
    let statuses = gather_records(rank, size, &status, &gather)?;
    first_failure(&statuses, rank, "to connect its queue pairs")?;
    let channels = joined.expect("this rank's record said it connected them");
    let formed = Formed {
        config,
        options: formed.options.clone(),
        topology,
        fabric: formed.fabric.clone(),
    };
    Ok((formed, plan, channels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_narrow_to_the_members() {
        let cable = |i: usize, j: usize| {
            if i == j {
                vec![]
            } else {
                vec![format!("d{i}{j}")]
            }
        };
        let parent = Config {
            rank: 0,
            devices: (0..4)
                .map(|i| (0..4).map(|j| cable(i, j)).collect())
                .collect(),
            coordinator: None,
            prefer_ring: false,
        };
        let narrowed = narrow(&parent, &[3, 1], 1);
        assert_eq!(narrowed.rank, 1);
        assert_eq!(
            narrowed.devices,
            [
                [vec![], vec!["d31".to_string()]],
                [vec!["d13".to_string()], vec![]]
            ]
        );
    }

    #[test]
    fn a_failed_rank_in_the_records_is_named() {
        let ready = record(&Ok(vec![7]));
        let failed = record(&Err(split_error(2, "no device".into())));
        assert!(first_failure(&[ready.clone(), ready.clone()], 0, "x").is_ok());
        let error = first_failure(&[ready, failed], 0, "to open its queue pairs")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("rank 1 failed to open its queue pairs") && error.contains("no device"),
            "{error}"
        );
    }
}
