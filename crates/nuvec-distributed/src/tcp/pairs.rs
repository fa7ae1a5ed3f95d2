//! Which pairs of ranks a ring group connects, and which rank of each pair opens the
//! connections. MLX's ring hostfiles (those `mlx.distributed_config` writes for a Thunderbolt
//! ring, say) promise only that each rank can reach its right neighbour's addresses: on a
//! cabled ring every link is its own small subnet, so a rank cannot reach its left
//! neighbour's address (it lies on the link beyond it), nor any rank it is not cabled to.
//!
//! So each pair of ring neighbours is connected by the left rank of the pair, which opens the
//! connections for both directions, and this pair is required. Every other pair is connected
//! by its lower rank where it can reach the higher one's address, and is optional: a group
//! whose other pairs cannot connect forms as a ring, and messages between ranks without a
//! connection go round it (`ring/relay.rs`).

use crate::hostfile::Address;

/// Whether ranks `a` and `b` are neighbours on the ring of `size` ranks.
pub(crate) fn neighbours(size: usize, a: usize, b: usize) -> bool {
    a != b && ((a + 1) % size == b || (b + 1) % size == a)
}

/// The rank of the pair `a`, `b` that opens its connections (both directions): the left rank
/// of ring neighbours (rank 0 of a group of two), else the lower rank.
pub(crate) fn opener(size: usize, a: usize, b: usize) -> usize {
    match size {
        2 => a.min(b),
        _ if (a + 1) % size == b => a,
        _ if (b + 1) % size == a => b,
        _ => a.min(b),
    }
}

/// The pairs a group may leave unconnected exist from four ranks on (in a group of three,
/// every pair is a pair of neighbours).
pub(crate) fn has_optional_pairs(size: usize) -> bool {
    size >= 4
}

/// How many connections ranks `a` and `b` share: one per address both list (MLX's hostfile
/// gives each rank one or more addresses to spread large transfers over) between ring
/// neighbours; one between other ranks, whose connections carry only point-to-point messages
/// and the latency paths of small collectives.
pub(crate) fn connections_between(nodes: &[Vec<Address>], a: usize, b: usize) -> usize {
    if nodes.len() > 2 && !neighbours(nodes.len(), a, b) {
        return 1;
    }
    nodes[a].len().min(nodes[b].len()).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rank_opens_to_its_right_neighbour_and_to_higher_non_neighbours() {
        assert_eq!(opener(2, 1, 0), 0);
        assert_eq!(opener(3, 0, 2), 2, "rank 2's right neighbour is rank 0");
        assert_eq!(opener(4, 3, 0), 3);
        assert_eq!(opener(4, 1, 2), 1);
        assert_eq!(opener(4, 0, 2), 0);
        assert_eq!(opener(5, 3, 1), 1);
        assert!(neighbours(4, 3, 0) && neighbours(4, 0, 1) && !neighbours(4, 0, 2));
        assert!((0..3).all(|a| (0..3).all(|b| a == b || neighbours(3, a, b))));
        assert!(!has_optional_pairs(3) && has_optional_pairs(4));
    }
}
