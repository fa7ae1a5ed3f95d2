//! The ring's collective algorithms and its failure authority, run over the in-memory
//! transport (`memory/`): 1 to 16 ranks as threads of this process, with delays that reorder
//! bytes across connections, bounded channels, a slow rank and a lost rank. Results are
//! checked exactly (integer sums) against a direct computation.

use super::algorithms::{self, Calls};
use super::failure::Authority;
use super::memory::{Fabric, Faults, MemoryTransport};
use super::network::SLOT_WINDOW;
use super::transport::Transport;
use crate::shm::SLOTS;
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Error, Result};
use std::time::{Duration, Instant};

/// Rank `rank`'s input of `len` elements: small integers, different on every rank.
fn input(rank: usize, len: usize) -> Vec<i32> {
    (0..len)
        .map(|i| ((rank * 7919 + i * 31) % 1000) as i32 - 500)
        .collect()
}

fn bytes(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn values(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Runs `body` on every rank of a group of `size` over a fabric with `faults`, each rank on
/// its own thread with its own failure authority; returns each rank's result and how long it
/// took.
fn run_group<R: Send>(
    size: usize,
    faults: Faults,
    timeout: Duration,
    body: impl Fn(&MemoryTransport, &Authority<Calls>) -> R + Sync,
) -> Vec<(R, Duration)> {
    let fabric = Fabric::new(size, faults);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..size)
            .map(|rank| {
                let (fabric, body) = (&fabric, &body);
                scope.spawn(move || {
                    let transport = fabric.rank(rank, timeout);
                    let authority = Authority::new(Calls::default());
                    let started = Instant::now();
                    let result = body(&transport, &authority);
                    (result, started.elapsed())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a rank's thread panicked"))
            .collect()
    })
}

/// Every collective of `len` elements per rank on `size` ranks, checked on every rank.
fn check_collectives(size: usize, len: usize, faults: Faults) {
    let results = run_group(size, faults, Duration::from_secs(20), |t, authority| {
        let rank = t.rank();
        let mine = bytes(&input(rank, len));
        let mut sum = mine.clone();
        let mut max = vec![0u8; mine.len()];
        let mut gathered = vec![0u8; mine.len() * size];
        let mut block = vec![0u8; mine.len()];
        let scattered_input = bytes(&input(rank + 100, len * size));
        let run = |op: &str, f: &mut dyn FnMut(&mut Calls) -> Result<()>| {
            authority.run(t, op, true, |turn| f(turn.state()))
        };
        run("all_sum", &mut |calls| {
            algorithms::all_reduce(t, calls, (None, &mut sum), (DType::I32, ReduceOp::Sum))
        })?;
        run("all_max", &mut |calls| {
            let pair = (Some(&mine[..]), &mut max[..]);
            algorithms::all_reduce(t, calls, pair, (DType::I32, ReduceOp::Max))
        })?;
        run("all_gather", &mut |calls| {
            algorithms::all_gather(t, calls, (&mine, &mut gathered), DType::I32)
        })?;
        run("sum_scatter", &mut |calls| {
            let pair = (&scattered_input[..], &mut block[..]);
            algorithms::reduce_scatter(t, calls, pair, (DType::I32, ReduceOp::Sum))
        })?;
        Ok::<_, Error>((
            values(&sum),
            values(&max),
            values(&gathered),
            values(&block),
        ))
    });
    let inputs: Vec<Vec<i32>> = (0..size).map(|r| input(r, len)).collect();
    let expected_sum: Vec<i32> = (0..len)
        .map(|i| inputs.iter().map(|v| v[i]).sum())
        .collect();
    let expected_max: Vec<i32> = (0..len)
        .map(|i| inputs.iter().map(|v| v[i]).max().unwrap())
        .collect();
    let expected_gather: Vec<i32> = inputs.concat();
    let scatter_inputs: Vec<Vec<i32>> = (0..size).map(|r| input(r + 100, len * size)).collect();
    for (rank, (result, _)) in results.into_iter().enumerate() {
        let what = format!("{size} ranks, {len} elements, rank {rank}");
        let (sum, max, gathered, block) = result.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(sum == expected_sum, "{what}: all_sum differs");
        assert!(max == expected_max, "{what}: all_max differs");
        assert!(gathered == expected_gather, "{what}: all_gather differs");
        let expected_block: Vec<i32> = (rank * len..(rank + 1) * len)
            .map(|i| scatter_inputs.iter().map(|v| v[i]).sum())
            .collect();
        assert!(block == expected_block, "{what}: sum_scatter differs");
    }
}

#[test]
fn every_collective_is_exact_on_1_to_16_ranks_on_every_path() {
    // 3 and 1,000 elements take the paths through rank 0 or by doubling where they apply;
    // 40,000 (160 KB) the ring.
    for size in 1..=16 {
        for len in [3, 1_000, 40_000] {
            check_collectives(size, len, Faults::default());
        }
    }
}

#[test]
fn with_only_ring_neighbours_connected_every_collective_is_exact_on_1_to_16_ranks() {
    // A cabled ring (`tcp/pairs.rs`): the small sizes go round the ring too.
    let faults = Faults {
        ring_only: true,
        ..Faults::default()
    };
    for size in 1..=16 {
        for len in [1, 3, 1_000, 40_000] {
            check_collectives(size, len, faults.clone());
        }
    }
}

#[test]
fn large_all_reduces_split_over_lanes_and_connections_are_exact() {
    // 2.4 MB: two lanes on three ranks or more; two connections per pair double them.
    for size in [2, 3, 5, 8] {
        for connections in [1, 2] {
            let faults = Faults {
                connections,
                ..Faults::default()
            };
            check_collectives(size, 600_000, faults);
        }
    }
}

#[test]
fn delays_that_reorder_bytes_across_connections_change_no_result() {
    for (seed, size) in [(1, 2), (2, 3), (3, 4), (4, 5), (5, 8), (6, 13)] {
        let faults = Faults {
            seed,
            max_delay: Duration::from_micros(300),
            connections: 2,
            ..Faults::default()
        };
        for len in [5, 40_000, 300_000] {
            check_collectives(size, len, faults.clone());
        }
    }
}

#[test]
fn a_slow_rank_delays_the_group_but_changes_no_result() {
    for size in [3, 4, 6] {
        let faults = Faults {
            slow: Some((1, Duration::from_millis(1))),
            max_delay: Duration::from_micros(100),
            ..Faults::default()
        };
        for len in [7, 40_000] {
            check_collectives(size, len, faults.clone());
        }
    }
}

/// The outbox's window on channels (`network.rs` argues it cannot deadlock): ring passes
/// whose segments are several times a channel's size complete on 2 to 16 ranks, with delays.
#[test]
fn the_outbox_window_keeps_bounded_channels_from_deadlocking() {
    for (seed, size) in [(1, 2), (2, 3), (3, 4), (4, 7), (5, 16)] {
        let faults = Faults {
            seed,
            channel_window: Some(SLOT_WINDOW),
            max_delay: Duration::from_micros(50),
            ..Faults::default()
        };
        // 4 MB per rank: every segment fills the channel several times over.
        check_collectives(size, 1 << 20, faults);
    }
}

/// Without the window's bound every rank writes its first segment before reading, fills its
/// channel, and waits for room that never comes: the argument's condition is needed, and the
/// timeout ends the wait with an error instead of a hang.
#[test]
fn a_window_wider_than_a_channel_deadlocks_and_the_timeout_ends_it() {
    let faults = Faults {
        channel_window: Some(3 * SLOTS),
        ..Faults::default()
    };
    let timeout = Duration::from_millis(500);
    let len = 1 << 21; // 8 MB: a 4 MB segment per rank, four channels' worth
    let results = run_group(2, faults, timeout, |t, authority| {
        let mut data = bytes(&input(t.rank(), len));
        authority.run(t, "all_sum", true, |turn| {
            let calls = turn.state();
            algorithms::all_reduce(t, calls, (None, &mut data), (DType::I32, ReduceOp::Sum))
        })
    });
    for (rank, (result, took)) in results.into_iter().enumerate() {
        let error = result
            .expect_err("a deadlocked ring cannot finish")
            .to_string();
        assert!(error.contains("timed out"), "rank {rank}: {error}");
        assert!(took < 10 * timeout, "rank {rank} took {took:?}");
    }
}

/// A rank lost before a collective: every other rank's call ends early with an error naming
/// it (directly, or by the abort notice of a rank that saw it go), the group then reports the
/// failure from `health` and refuses further work.
#[test]
fn a_lost_rank_ends_every_call_with_its_name_on_every_path() {
    check_a_lost_rank_is_named(false);
}

/// The same where only ring neighbours are connected: ranks that were not connected to the
/// lost one learn its name from the notices that go round the ring.
#[test]
fn with_only_ring_neighbours_connected_a_lost_rank_is_named_by_every_other() {
    check_a_lost_rank_is_named(true);
}

fn check_a_lost_rank_is_named(ring_only: bool) {
    let timeout = Duration::from_secs(3);
    for size in [2, 3, 4, 5, 8] {
        for len in [3, 1_000, 300_000] {
            for lost in [0, size - 1, size / 2] {
                let faults = Faults {
                    max_delay: Duration::from_micros(50),
                    ring_only,
                    ..Faults::default()
                };
                let results = run_group(size, faults, timeout, |t, authority| {
                    if t.rank() == lost {
                        t.lose();
                        return None;
                    }
                    let mut data = bytes(&input(t.rank(), len));
                    let result = authority.run(t, "all_sum", true, |turn| {
                        let calls = turn.state();
                        let op = (DType::I32, ReduceOp::Sum);
                        algorithms::all_reduce(t, calls, (None, &mut data), op)
                    });
                    let health = authority.health(t);
                    let again = authority.run(t, "all_sum", true, |_| Ok(()));
                    Some((result, health, again))
                });
                for (rank, (outcome, took)) in results.into_iter().enumerate() {
                    let Some((result, health, again)) = outcome else {
                        continue;
                    };
                    let what =
                        format!("{size} ranks, {len} elements, rank {lost} lost, rank {rank}");
                    let error = result.expect_err(&what);
                    let named =
                        matches!(error, Error::Distributed { rank: Some(r), .. } if r == lost);
                    assert!(named, "{what}: {error}");
                    assert!(took < timeout, "{what}: waited {took:?} ({error})");
                    assert!(health.is_err(), "{what}: healthy after the failure");
                    let again = again.expect_err(&what).to_string();
                    assert!(again.contains("failed earlier"), "{what}: {again}");
                }
            }
        }
    }
}
