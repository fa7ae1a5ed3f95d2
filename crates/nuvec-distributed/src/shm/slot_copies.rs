//! How a channel's sender copies into a slot: plain stores, or streaming stores that bypass
//! the cache, whichever the machine makes faster at the time.
//!
//! With plain stores, the receiver then reads the slot out of the sender's cache. That is
//! fast when the two cores share a cache, and slow when they do not: the sender must first
//! take every line of the slot back from the receiver's core, which read it last time
//! round. The project's 2-core VM moves between the two. A streaming copy costs the sender
//! the same in both states; in a C model of the channel, streaming round trips were far
//! faster than plain ones without a shared cache and far slower with one (measured:
//! `docs/performance.md`, "Tuning measurements").
//!
//! So the sender times its plain copies of at least [`TIMED_FROM`] bytes. After
//! [`SLOW_IN_A_ROW`] slow ones in a row (slower than [`SLOW_SLOT`] per slot: one slow copy
//! can be a preemption), it streams; every [`RETRY_EVERY`] while streaming it copies one
//! piece plainly again, and goes back to plain stores if that copy was fast.
//! `NUVEC_RING_STREAMING_STORES` (`auto`, `on`, `off`) fixes the choice instead. Away from
//! x86-64, streaming copies are plain ones.

use super::layout::SLOT_BYTES;
use crate::sync::lock;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A plain copy of a whole slot that takes longer than this is slow (4 GB/s): slower than a
/// copy from memory, let alone from the cache (`docs/performance.md`, "Tuning measurements").
const SLOW_SLOT: Duration = Duration::from_micros(32);
/// Copies at least this large are timed (smaller ones are too quick to time well).
const TIMED_FROM: usize = 32 << 10;
/// How many slow plain copies in a row turn streaming on.
const SLOW_IN_A_ROW: u32 = 2;
/// How often a streaming sender tries a plain copy.
const RETRY_EVERY: Duration = Duration::from_millis(20);

/// Which stores a sender uses: `NUVEC_RING_STREAMING_STORES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Timed, as the module says (`auto`, the default).
    Auto,
    /// Always streaming (`on`).
    Streaming,
    /// Always plain (`off`).
    Plain,
}

/// What an `Auto` sender has learnt so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Choice {
    streaming: bool,
    slow_in_a_row: u32,
    /// When, since the sender's start, a streaming sender next tries a plain copy.
    retry_at: Duration,
}

impl Choice {
    /// Whether the next copy of `bytes` is plain, at time `now`.
    fn plain(&self, bytes: usize, now: Duration) -> bool {
        !self.streaming || (bytes >= TIMED_FROM && now >= self.retry_at)
    }

    /// What follows a plain copy of `bytes` (at least [`TIMED_FROM`]) that took `took`, at
    /// time `now`.
    fn after(self, (took, bytes): (Duration, usize), now: Duration) -> Choice {
        let later = now + RETRY_EVERY;
        let slow = took.as_nanos() * SLOT_BYTES as u128 > SLOW_SLOT.as_nanos() * bytes as u128;
        match (slow, self.streaming) {
            (false, _) => Choice::default(),
            (true, true) => Choice {
                retry_at: later,
                ..self
            },
            (true, false) if self.slow_in_a_row + 1 >= SLOW_IN_A_ROW => Choice {
                streaming: true,
                slow_in_a_row: 0,
                retry_at: later,
            },
            (true, false) => Choice {
                slow_in_a_row: self.slow_in_a_row + 1,
                ..self
            },
        }
    }
}

/// A sender's stores: its policy, and under `Auto` what it has learnt.
#[derive(Debug)]
pub(crate) struct Stores {
    policy: Policy,
    choice: Mutex<Choice>,
    start: Instant,
}

impl Stores {
    pub(crate) fn new(policy: Policy) -> Stores {
        Stores {
            policy,
            choice: Mutex::new(Choice::default()),
            start: Instant::now(),
        }
    }

    /// Copies `src` into `dst` (a slot, or its start), with the stores the policy picks.
    pub(crate) fn copy(&self, src: &[u8], dst: &mut [u8]) {
        let plain = match self.policy {
            Policy::Plain => true,
            Policy::Streaming => false,
            Policy::Auto => lock(&self.choice).plain(src.len(), self.start.elapsed()),
        };
        if !plain {
            return nuvec_cpu::copy_streaming(src, dst);
        }
        let clock = Instant::now();
        dst.copy_from_slice(src);
        if self.policy == Policy::Auto && src.len() >= TIMED_FROM {
            let took = clock.elapsed();
            let mut choice = lock(&self.choice);
            *choice = choice.after((took, src.len()), self.start.elapsed());
        }
    }

    /// Whether the next whole slot would be streamed: for tests.
    #[cfg(test)]
    fn streams_next(&self) -> bool {
        let now = self.start.elapsed();
        match self.policy {
            Policy::Plain => false,
            Policy::Streaming => true,
            Policy::Auto => !lock(&self.choice).plain(SLOT_BYTES, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: (Duration, usize) = (Duration::from_micros(4), SLOT_BYTES);
    const SLOW: (Duration, usize) = (Duration::from_micros(50), SLOT_BYTES);

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn two_slow_plain_copies_in_a_row_turn_streaming_on_and_one_does_not() {
        let once = Choice::default().after(SLOW, at(1));
        assert!(
            once.plain(SLOT_BYTES, at(1)),
            "one slow copy may be a preemption"
        );
        assert_eq!(once.after(FAST, at(1)), Choice::default());
        let twice = once.after(SLOW, at(1));
        assert!(!twice.plain(SLOT_BYTES, at(1)));
        assert!(!twice.plain(1000, at(1)));
    }

    #[test]
    fn copies_of_part_of_a_slot_are_judged_by_their_speed_and_tiny_ones_not_at_all() {
        let quarter = SLOT_BYTES / 4;
        let slow = (Duration::from_micros(13), quarter);
        let fast = (Duration::from_micros(2), quarter);
        let streaming = Choice::default().after(slow, at(0)).after(slow, at(0));
        assert!(!streaming.plain(quarter, at(1)));
        assert_eq!(
            Choice::default().after(fast, at(0)).after(slow, at(0)),
            Choice {
                slow_in_a_row: 1,
                ..Choice::default()
            }
        );
        assert!(
            !streaming.plain(TIMED_FROM - 1, at(20)),
            "too small to retry with"
        );
        assert!(streaming.plain(TIMED_FROM, at(20)));
    }

    #[test]
    fn a_streaming_sender_retries_plain_stores_and_keeps_them_when_fast() {
        let streaming = Choice::default().after(SLOW, at(0)).after(SLOW, at(0));
        assert!(!streaming.plain(SLOT_BYTES, at(19)));
        assert!(
            streaming.plain(SLOT_BYTES, at(20)),
            "a retry after RETRY_EVERY"
        );
        assert!(
            !streaming.plain(1000, at(20)),
            "retries are copies large enough to time"
        );
        assert!(streaming.after(FAST, at(20)).plain(SLOT_BYTES, at(21)));
        let still = streaming.after(SLOW, at(20));
        assert!(
            !still.plain(SLOT_BYTES, at(39)),
            "a slow retry waits another period"
        );
        assert!(still.plain(SLOT_BYTES, at(40)));
    }

    #[test]
    fn every_policy_copies_every_byte() {
        let src: Vec<u8> = (0..SLOT_BYTES + 7).map(|i| (i * 31 % 251) as u8).collect();
        for policy in [Policy::Auto, Policy::Streaming, Policy::Plain] {
            let stores = Stores::new(policy);
            for bytes in [SLOT_BYTES, 1, 17, 4096 + 3] {
                // An unaligned destination start too: streaming stores need 16-byte lines.
                let mut dst = vec![0u8; bytes + 1];
                stores.copy(&src[..bytes], &mut dst[1..]);
                assert_eq!(&dst[1..], &src[..bytes], "{policy:?}, {bytes} bytes");
            }
        }
        assert!(Stores::new(Policy::Streaming).streams_next());
        assert!(!Stores::new(Policy::Plain).streams_next());
        assert!(!Stores::new(Policy::Auto).streams_next());
    }
}
