//! MPI counts are C `int`s: a transfer of more than 2^31 − 1 elements is made of several calls.
//! These helpers say which element ranges each call covers and pack the strided pieces that
//! gathers and scatters need, without touching MPI.

use std::ops::Range;

/// The largest element count one MPI call takes; `NUVEC_MPI_MAX_COUNT` lowers it (to test
/// the chunked paths with small arrays).
pub(crate) fn max_count() -> usize {
    let limit = i32::MAX as usize;
    std::env::var("NUVEC_MPI_MAX_COUNT")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&v| v > 0)
        .map_or(limit, |v| v.min(limit))
}

/// Consecutive ranges of at most `max` covering `0..count` (one empty range for `count` 0,
/// so that every rank still makes the call).
pub(crate) fn ranges(count: usize, max: usize) -> Vec<Range<usize>> {
    if count == 0 {
        return std::iter::once(0..0).collect();
    }
    (0..count)
        .step_by(max)
        .map(|start| start..(start + max).min(count))
        .collect()
}

/// Copies elements `range` of each of the `blocks` blocks of `block` elements in `from` into
/// consecutive places of `to` (rank by rank): the input of one chunk of a reduce-scatter.
pub(crate) fn pack(
    from: &[u8],
    block: usize,
    range: &Range<usize>,
    width: usize,
    to: &mut Vec<u8>,
) {
    let blocks = if block == 0 {
        0
    } else {
        from.len() / (block * width)
    };
    to.clear();
    for b in 0..blocks {
        let start = (b * block + range.start) * width;
        to.extend_from_slice(&from[start..start + range.len() * width]);
    }
}

/// The inverse of [`pack`]: spreads consecutive pieces of `from` into elements `range` of each
/// block of `block` elements in `to` (the output of one chunk of an all-gather).
pub(crate) fn unpack(from: &[u8], block: usize, range: &Range<usize>, width: usize, to: &mut [u8]) {
    let piece = range.len() * width;
    if piece == 0 {
        return;
    }
    for (b, part) in from.chunks_exact(piece).enumerate() {
        let start = (b * block + range.start) * width;
        to[start..start + piece].copy_from_slice(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_count_in_pieces_of_at_most_max() {
        assert_eq!(ranges(10, 4), vec![0..4, 4..8, 8..10]);
        assert_eq!(ranges(8, 4), vec![0..4, 4..8]);
        assert_eq!(ranges(3, 4), vec![0..3]);
        assert_eq!(ranges(0, 4), vec![0..0]);
    }

    #[test]
    fn pack_then_unpack_restores_every_block() {
        // Three blocks of five two-byte elements.
        let data: Vec<u8> = (0..30).collect();
        let mut rebuilt = vec![0u8; 30];
        let mut packed = Vec::new();
        for range in ranges(5, 2) {
            pack(&data, 5, &range, 2, &mut packed);
            assert_eq!(packed.len(), 3 * range.len() * 2);
            unpack(&packed, 5, &range, 2, &mut rebuilt);
        }
        assert_eq!(rebuilt, data);
    }

    #[test]
    fn pack_takes_the_same_range_of_each_block() {
        let data: Vec<u8> = (0..12).collect();
        let mut packed = Vec::new();
        pack(&data, 4, &(1..3), 1, &mut packed);
        assert_eq!(packed, [1, 2, 5, 6, 9, 10]);
    }
}
