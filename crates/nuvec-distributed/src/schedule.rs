//! The ring's schedule, free of sockets: which segment each rank sends and receives at each
//! step. Reduce-scatter leaves rank `r` owning the fully reduced segment `r`; all-gather then
//! passes the owned segments around. Tested by simulating every rank in memory.

use std::ops::Range;

/// One step of a ring phase: send segment `send` to the right neighbour while receiving
/// segment `recv` from the left one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) send: usize,
    pub(crate) recv: usize,
}

/// Elements of segment `index` when `len` elements are split into `parts` near-equal
/// segments (the first `len % parts` are one longer).
pub(crate) fn segment(len: usize, parts: usize, index: usize) -> Range<usize> {
    let base = len / parts;
    let extra = len % parts;
    let start = index * base + index.min(extra);
    let size = base + usize::from(index < extra);
    start..start + size
}

fn wrap(value: isize, n: usize) -> usize {
    value.rem_euclid(n as isize) as usize
}

/// The `n - 1` steps of reduce-scatter for `rank`: at step `s` it sends segment
/// `r - s - 1` and receives (and reduces into) segment `r - s - 2`, so that after the last
/// step segment `r` holds the sum over every rank.
pub(crate) fn reduce_scatter_steps(n: usize, rank: usize) -> Vec<Step> {
    let r = rank as isize;
    (0..n.saturating_sub(1) as isize)
        .map(|s| Step {
            send: wrap(r - s - 1, n),
            recv: wrap(r - s - 2, n),
        })
        .collect()
}

/// The `n - 1` steps of all-gather for `rank`, which starts owning segment `r`: at step `s`
/// it sends segment `r - s` and receives segment `r - s - 1`.
pub(crate) fn all_gather_steps(n: usize, rank: usize) -> Vec<Step> {
    let r = rank as isize;
    (0..n.saturating_sub(1) as isize)
        .map(|s| Step {
            send: wrap(r - s, n),
            recv: wrap(r - s - 1, n),
        })
        .collect()
}

/// Splits `range` into pieces of at most `chunk` elements, so transfers pipeline.
pub(crate) fn chunks(range: Range<usize>, chunk: usize) -> impl Iterator<Item = Range<usize>> {
    let chunk = chunk.max(1);
    range
        .clone()
        .step_by(chunk)
        .map(move |start| start..(start + chunk).min(range.end))
}

#[cfg(test)]
#[allow(clippy::needless_range_loop)] // Rank-indexed loops read like the algorithm.
mod tests {
    use super::*;

    /// Runs a ring all-reduce (sum) of every rank's vector in memory, step by step.
    fn simulate_all_sum(inputs: &[Vec<i64>]) -> Vec<Vec<i64>> {
        let n = inputs.len();
        let len = inputs[0].len();
        let mut data = inputs.to_vec();
        for step in 0..n - 1 {
            let sent: Vec<Vec<i64>> = (0..n)
                .map(|r| data[r][segment(len, n, reduce_scatter_steps(n, r)[step].send)].to_vec())
                .collect();
            for r in 0..n {
                let left = (r + n - 1) % n;
                let range = segment(len, n, reduce_scatter_steps(n, r)[step].recv);
                assert_eq!(
                    range.len(),
                    sent[left].len(),
                    "left sends the segment this rank expects"
                );
                for (slot, value) in data[r][range].iter_mut().zip(&sent[left]) {
                    *slot += value;
                }
            }
        }
        for step in 0..n - 1 {
            let sent: Vec<Vec<i64>> = (0..n)
                .map(|r| data[r][segment(len, n, all_gather_steps(n, r)[step].send)].to_vec())
                .collect();
            for r in 0..n {
                let left = (r + n - 1) % n;
                let range = segment(len, n, all_gather_steps(n, r)[step].recv);
                data[r][range].copy_from_slice(&sent[left]);
            }
        }
        data
    }

    #[test]
    fn ring_all_sum_gives_every_rank_the_total_for_1_to_16_ranks_and_odd_lengths() {
        for n in 1..=16 {
            for len in [0, 1, 2, 3, 7, 16, 33, 101] {
                let inputs: Vec<Vec<i64>> = (0..n)
                    .map(|r| (0..len).map(|i| (r * 1000 + i) as i64).collect())
                    .collect();
                let expected: Vec<i64> = (0..len)
                    .map(|i| (0..n).map(|r| (r * 1000 + i) as i64).sum())
                    .collect();
                for (rank, result) in simulate_all_sum(&inputs).iter().enumerate() {
                    assert_eq!(result, &expected, "n={n} len={len} rank={rank}");
                }
            }
        }
    }

    #[test]
    fn reduce_scatter_leaves_each_rank_its_own_segment() {
        for n in 2..=16 {
            let steps: Vec<Vec<Step>> = (0..n).map(|r| reduce_scatter_steps(n, r)).collect();
            for r in 0..n {
                assert_eq!(steps[r].last().map(|s| s.recv), Some(r), "n={n} rank={r}");
                for s in 1..n - 1 {
                    assert_eq!(
                        steps[r][s].send,
                        steps[r][s - 1].recv,
                        "sends what it just reduced"
                    );
                }
            }
        }
    }

    #[test]
    fn segments_tile_the_range_and_chunks_tile_segments() {
        for parts in 1..=16 {
            for len in 0..50 {
                let mut next = 0;
                for index in 0..parts {
                    let seg = segment(len, parts, index);
                    assert_eq!(seg.start, next);
                    next = seg.end;
                    let pieces: Vec<_> = chunks(seg.clone(), 3).collect();
                    assert_eq!(pieces.iter().map(|p| p.len()).sum::<usize>(), seg.len());
                }
                assert_eq!(next, len);
            }
        }
    }
}
