//! Sets and maps keyed by a node's address: the walks over a graph (evaluation, the
//! transforms) look nodes up several times each, and a node's address is already unique, so
//! it needs mixing, not the DoS-resistant hashing `std`'s default spends ~20 ns on.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes one address (or other word) by a multiply that spreads its bits upwards, where
/// `hashbrown` reads the top seven for its control bytes and the low ones for the bucket.
#[derive(Default)]
pub(crate) struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, word: u64) {
        // The golden ratio's fraction, odd: a bijection on u64 (Knuth's multiplicative hash);
        // the rotation brings the well-mixed high bits down to the bucket index too.
        self.0 = (self.0 ^ word)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(26);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }
}

/// A set of node addresses (or keys).
pub(crate) type NodeSet<K> = HashSet<K, BuildHasherDefault<AddressHasher>>;
/// A map from node addresses (or keys).
pub(crate) type NodeMap<K, V> = HashMap<K, V, BuildHasherDefault<AddressHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_addresses_spread_over_the_buckets() {
        // Nodes lie 8- or 16-byte aligned, often a fixed stride apart: the low bits of the
        // hash (the bucket) must still differ.
        let buckets = 1024u64;
        let mut used = NodeSet::default();
        for i in 0..buckets {
            let mut hasher = AddressHasher::default();
            hasher.write_usize(0x7f00_0000_0000 + (i as usize) * 128);
            used.insert(hasher.finish() % buckets);
        }
        assert!(used.len() > 600, "{} of {buckets} buckets used", used.len());
    }

    #[test]
    fn a_map_finds_what_it_holds() {
        let mut map: NodeMap<usize, usize> = NodeMap::default();
        for i in 0..10_000 {
            map.insert(i * 64, i);
        }
        assert!((0..10_000).all(|i| map.get(&(i * 64)) == Some(&i)));
        assert_eq!(map.get(&1), None);
    }
}
