//! Threefry-2x32 counter-based random bits, bit-compatible with MLX's CPU
//! backend.
//!
//! MLX's PRNG is stateless: every draw is a pure function of a key (two
//! `u32` words) and the requested byte count, so reproducing MLX's random
//! streams only requires the hash, the counter layout used to fill a buffer,
//! and the seed/split conventions implemented here. The array-level
//! distributions (uniform, normal, ...) are described in
//! [`docs/mlx-random-numbers.md`](https://github.com/nuvec/nuvec/blob/main/docs/mlx-random-numbers.md).
//!
//! This module has no dependencies and no `unsafe`.

/// Rotation amounts of Threefry-2x32, two groups of four used alternately,
/// as in the Random123 reference (and JAX / MLX).
const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];

/// Threefish key-schedule parity constant; the third schedule word is
/// `k0 ^ k1 ^ KS_PARITY`.
const KS_PARITY: u32 = 0x1BD1_1BDA;

/// Hashes the two-word counter `count` under `key` with Threefry-2x32.
///
/// MLX uses 20 rounds: five groups of four mix rounds, each group followed by
/// a key injection, which is what this computes (all arithmetic mod 2^32).
#[must_use]
pub fn threefry2x32(key: [u32; 2], count: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], key[0] ^ key[1] ^ KS_PARITY];
    let mut x0 = count[0].wrapping_add(ks[0]);
    let mut x1 = count[1].wrapping_add(ks[1]);
    for (i, injection) in (1u32..=5).enumerate() {
        for &r in &ROTATIONS[i % 2] {
            x0 = x0.wrapping_add(x1);
            x1 = x1.rotate_left(r);
            x1 ^= x0;
        }
        x0 = x0.wrapping_add(ks[(i + 1) % 3]);
        x1 = x1.wrapping_add(ks[(i + 2) % 3]).wrapping_add(injection);
    }
    [x0, x1]
}

/// Fills `out` with the bytes MLX's `bits` produces for one key when the
/// per-key output is `out.len()` bytes long.
///
/// The result depends only on the byte count, not on the element width: MLX
/// fills `W = ceil(len / 4)` 32-bit words, pairing word `j` with word
/// `j + ceil(W / 2)` through one hash of the counter `(j, j + ceil(W / 2))`,
/// and, when `W` is odd, filling the middle word `W / 2` from the first half
/// of the hash of `(W / 2, 0)`. Words are stored little-endian and the last
/// word is cut to the bytes that remain. Counters wrap modulo 2^32, as the
/// C++ implicit narrowing in MLX does.
pub fn fill_random_bytes(key: [u32; 2], out: &mut [u8]) {
    let n_words = out.len().div_ceil(4);
    let half = n_words / 2;
    let offset = n_words - half; // ceil(n_words / 2)
    let mut put = |word_index: usize, value: u32| {
        let start = 4 * word_index;
        let end = (start + 4).min(out.len());
        if let Some(dst) = out.get_mut(start..end) {
            let bytes = value.to_le_bytes();
            dst.copy_from_slice(&bytes[..dst.len()]);
        }
    };
    for j in 0..half {
        let [a, b] = threefry2x32(key, [j as u32, (j + offset) as u32]);
        put(j, a);
        put(j + offset, b);
    }
    if n_words % 2 == 1 {
        let [a, _] = threefry2x32(key, [half as u32, 0]);
        put(half, a);
    }
}

/// Returns the little-endian element bytes of MLX's
/// `random::bits({n_elements}, width_bytes, key)` (also valid for any shape
/// with `n_elements` elements, since only the total byte count matters).
///
/// MLX accepts widths 1, 2 and 4 (uint8 / uint16 / uint32 output); callers
/// validate that. Returns an empty vector if the byte count would overflow
/// `usize`, which no real allocation could hold anyway.
#[must_use]
pub fn random_bits(key: [u32; 2], n_elements: usize, width_bytes: usize) -> Vec<u8> {
    let Some(len) = n_elements.checked_mul(width_bytes) else {
        return Vec::new();
    };
    let mut out = vec![0u8; len];
    fill_random_bytes(key, &mut out);
    out
}

/// Returns the `n` 32-bit words MLX's `bits` produces for `key` at width 4,
/// a convenience for uniform/normal sampling, which always draw `u32` bits.
#[must_use]
pub fn random_u32(key: [u32; 2], n: usize) -> Vec<u32> {
    random_bits(key, n, 4)
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Builds the key MLX's `random::key(seed)` returns: the high 32 bits of the
/// seed first, then the low 32 bits (so `key(7) == [0, 7]`).
#[must_use]
pub fn key_from_seed(seed: u64) -> [u32; 2] {
    [(seed >> 32) as u32, seed as u32]
}

/// Splits `key` into `num` subkeys exactly as MLX's `random::split(key, num)`,
/// which is `bits` of shape `[num, 2]` and width 4 read row by row.
#[must_use]
pub fn split_key(key: [u32; 2], num: usize) -> Vec<[u32; 2]> {
    let words = random_u32(key, num.saturating_mul(2));
    words.chunks_exact(2).map(|w| [w[0], w[1]]).collect()
}

/// Advances a global key the way MLX's default key sequence does and returns
/// the key to draw with: the state is split in two, the first half becomes
/// the new state and the second half is handed to the sampler.
#[must_use]
pub fn next_key(state: &mut [u32; 2]) -> [u32; 2] {
    let [a0, a1, b0, b1] = split4(*state);
    *state = [a0, a1];
    [b0, b1]
}

/// Two-way split as four words, avoiding a heap allocation on the hot path of
/// every global draw.
fn split4(key: [u32; 2]) -> [u32; 4] {
    // W = 4 words, offset 2: word j and j + 2 come from counter (j, j + 2).
    let [w0, w2] = threefry2x32(key, [0, 2]);
    let [w1, w3] = threefry2x32(key, [1, 3]);
    [w0, w1, w2, w3]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unpacks little-endian bytes of width `w` into integers for comparison.
    fn words(bytes: &[u8], w: usize) -> Vec<u64> {
        bytes
            .chunks_exact(w)
            .map(|c| {
                c.iter()
                    .rev()
                    .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
            })
            .collect()
    }

    #[test]
    fn key_from_seed_matches_mlx() {
        // mx.random.key(0) -> [0, 0]; mx.random.key(7) -> [0, 7]
        assert_eq!(key_from_seed(0), [0, 0]);
        assert_eq!(key_from_seed(7), [0, 7]);
        // mx.random.key(2**40 + 5) -> [256, 5]
        assert_eq!(key_from_seed((1 << 40) + 5), [256, 5]);
    }

    #[test]
    fn split_matches_mlx() {
        // mx.random.split(mx.random.key(7)).tolist()
        assert_eq!(
            split_key([0, 7], 2),
            vec![[966301609, 989289821], [1948237315, 1058547403]]
        );
        // mx.random.split(mx.random.key(7), 3).tolist()
        assert_eq!(
            split_key([0, 7], 3),
            vec![
                [276534068, 861967409],
                [1905761346, 1641862660],
                [2900896126, 1402713516]
            ]
        );
        // mx.random.split(mx.random.key(7), 1).tolist()
        assert_eq!(split_key([0, 7], 1), vec![[195045567, 4062205631]]);
        assert!(split_key([0, 7], 0).is_empty());
    }

    #[test]
    fn next_key_matches_split() {
        let mut state = [0u32, 7];
        let draw = next_key(&mut state);
        assert_eq!(state, [966301609, 989289821]);
        assert_eq!(draw, [1948237315, 1058547403]);
    }

    /// Expected element values of `bits`. Python MLX 0.32.4 does not expose
    /// `bits`, so these come from its C++ API (the wheel's libmlx.so) on the
    /// CPU device; `mx.random.key(3)` is `[0, 3]`.
    #[allow(clippy::type_complexity)]
    const BITS_CASES: &[(([u32; 2], usize, usize), &[u64])] = &[
        // C++: mx::random::bits({1}, 4, mx::array({0u, 3u}))
        (([0, 3], 1, 4), &[3716834203]),
        // C++: mx::random::bits({2}, 4, mx::array({0u, 3u}))
        (([0, 3], 2, 4), &[1946498123, 2217676430]),
        // C++: mx::random::bits({3}, 4, mx::array({0u, 3u}))
        (([0, 3], 3, 4), &[1024511538, 90224275, 2603795180]),
        // C++: mx::random::bits({4}, 4, mx::array({0u, 3u}))
        (
            ([0, 3], 4, 4),
            &[1024511538, 47757680, 2603795180, 1437962712],
        ),
        // C++: mx::random::bits({5}, 4, mx::array({0u, 3u}))
        (
            ([0, 3], 5, 4),
            &[877192987, 1614509672, 4140764773, 3448417067, 2823528474],
        ),
        // C++: mx::random::bits({7}, 4, mx::array({0u, 3u}))
        (
            ([0, 3], 7, 4),
            &[
                1363109171, 3672965406, 3506557718, 4075572324, 377266333, 202389534, 3684862355,
            ],
        ),
        // C++: mx::random::bits({1}, 2, mx::array({0u, 3u}))
        (([0, 3], 1, 2), &[25499]),
        // C++: mx::random::bits({2}, 2, mx::array({0u, 3u}))
        (([0, 3], 2, 2), &[25499, 56714]),
        // C++: mx::random::bits({3}, 2, mx::array({0u, 3u}))
        (([0, 3], 3, 2), &[13387, 29701, 3726]),
        // C++: mx::random::bits({4}, 2, mx::array({0u, 3u}))
        (([0, 3], 4, 2), &[13387, 29701, 3726, 33839]),
        // C++: mx::random::bits({5}, 2, mx::array({0u, 3u}))
        (([0, 3], 5, 2), &[52786, 15632, 46739, 1376, 49900]),
        // C++: mx::random::bits({7}, 2, mx::array({0u, 3u}))
        (
            ([0, 3], 7, 2),
            &[52786, 15632, 47472, 728, 49900, 39730, 37336],
        ),
        // C++: mx::random::bits({1}, 1, mx::array({0u, 3u}))
        (([0, 3], 1, 1), &[155]),
        // C++: mx::random::bits({2}, 1, mx::array({0u, 3u}))
        (([0, 3], 2, 1), &[155, 99]),
        // C++: mx::random::bits({3}, 1, mx::array({0u, 3u}))
        (([0, 3], 3, 1), &[155, 99, 138]),
        // C++: mx::random::bits({4}, 1, mx::array({0u, 3u}))
        (([0, 3], 4, 1), &[155, 99, 138, 221]),
        // C++: mx::random::bits({5}, 1, mx::array({0u, 3u}))
        (([0, 3], 5, 1), &[75, 52, 5, 116, 142]),
        // C++: mx::random::bits({7}, 1, mx::array({0u, 3u}))
        (([0, 3], 7, 1), &[75, 52, 5, 116, 142, 14, 47]),
        // C++: mx::random::bits({3}, 4, mx::array({123456789u, 987654321u}))
        (
            ([123456789, 987654321], 3, 4),
            &[2458506199, 3263463447, 2452681485],
        ),
        // C++: mx::random::bits({6}, 4, mx::array({123456789u, 987654321u}))
        (
            ([123456789, 987654321], 6, 4),
            &[
                2282810065, 1989616437, 3771920784, 1487223820, 2101427821, 643018354,
            ],
        ),
        // C++: mx::random::bits({9}, 4, mx::array({123456789u, 987654321u}))
        (
            ([123456789, 987654321], 9, 4),
            &[
                2452379771, 1165282147, 1567617754, 276311691, 1841905734, 4187257492, 3567078955,
                992233119, 1550432976,
            ],
        ),
        // C++: mx::random::bits({3}, 2, mx::array({123456789u, 987654321u}))
        (([123456789, 987654321], 3, 2), &[14395, 44698, 8142]),
        // C++: mx::random::bits({6}, 2, mx::array({123456789u, 987654321u}))
        (
            ([123456789, 987654321], 6, 2),
            &[54231, 37513, 32791, 49796, 62221, 37424],
        ),
        // C++: mx::random::bits({9}, 2, mx::array({123456789u, 987654321u}))
        (
            ([123456789, 987654321], 9, 2),
            &[60113, 34832, 9013, 30359, 50143, 49542, 15372, 22693, 15981],
        ),
        // C++: mx::random::bits({3}, 1, mx::array({123456789u, 987654321u}))
        (([123456789, 987654321], 3, 1), &[241, 249, 9]),
        // C++: mx::random::bits({6}, 1, mx::array({123456789u, 987654321u}))
        (([123456789, 987654321], 6, 1), &[59, 56, 154, 174, 206, 31]),
        // C++: mx::random::bits({9}, 1, mx::array({123456789u, 987654321u}))
        (
            ([123456789, 987654321], 9, 1),
            &[215, 211, 137, 146, 23, 128, 132, 194, 13],
        ),
    ];

    #[test]
    fn bits_match_mlx() {
        for &((key, n, w), expected) in BITS_CASES {
            let bytes = random_bits(key, n, w);
            assert_eq!(bytes.len(), n * w);
            assert_eq!(words(&bytes, w), expected, "key {key:?} n {n} width {w}");
        }
    }

    #[test]
    fn bits_via_split_match_mlx() {
        // bits([4], key=k) equals split(k, 2).flatten(), the Python-visible path:
        // mx.random.split(mx.random.key(3)).flatten().tolist()
        let words4 = random_u32([0, 3], 4);
        let split: Vec<u32> = split_key([0, 3], 2).concat();
        assert_eq!(words4, split);
    }

    #[test]
    fn empty_and_overflow() {
        assert!(random_bits([0, 3], 0, 4).is_empty());
        assert!(random_bits([0, 3], usize::MAX, 2).is_empty());
    }

    #[test]
    fn threefry_raw_counter() {
        // MLX bits({1}, 4, key(3)) is the first word of threefry(key(3), (0, 0)).
        assert_eq!(threefry2x32([0, 3], [0, 0])[0], 3716834203);
    }
}
