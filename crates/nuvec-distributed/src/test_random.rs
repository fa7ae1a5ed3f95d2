//! The pseudo-random numbers the crate's tests draw (xorshift64): fast, seeded, the same on
//! every run.

/// A seeded xorshift64 generator.
pub(crate) struct Random(u64);

impl Random {
    /// A generator from `seed` (a zero seed is replaced: xorshift never leaves zero).
    pub(crate) fn new(seed: u64) -> Random {
        Random(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next number.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
