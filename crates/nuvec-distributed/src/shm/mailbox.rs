//! A channel's mailbox: the latency path of small collectives between ranks on one machine
//! (`ring/algorithms/mailboxes.rs`) and of messages (`ring/posted_messages.rs`). Beside its
//! slots, a channel holds two mailboxes (`layout.rs`: 2 posts of 128 KiB for collectives, 32
//! of 16 KiB for messages), each post with a header: the call's header (as on TCP) and where the post's
//! piece lies in the call's payload. The sender fills the next buffer (a payload of at most
//! 20 bytes goes in the post's header line instead), stamps the header line with the post's
//! number, then advances `posted`; the receiver waits on the stamp, so the header (and a
//! small payload) crosses between the cores in the one cache line that says the post is
//! there, reads the post in place and frees it by advancing `taken`. No
//! frame goes on TCP: the header travels with the payload, so the receiver checks that both
//! ranks called the same collective, and no system call is made while both ends keep up.
//!
//! A wait spins for a few microseconds (a post from a rank running on another core lands in
//! well under one), then yields its core for a while, then sleeps on the word it waits for
//! (a futex on Linux), bounded by the group's timeout, asking every [`CHECK_EVERY`] whether
//! the peer is still there. A side about to sleep says so in a word of its own, and the
//! other side wakes it only then: the fast path stays free of system calls.
//!
//! A rank that gives the group up says so in every channel it sends on (beside the abort
//! notice on TCP, which carries the reason): a peer taking a post made before that learns it
//! at once, without a system call, and the failure authority then finds the notice.

use super::channel::{Channel, CHECK_EVERY};
use super::layout::{
    MailboxLayout, INLINE_AT, INLINE_BYTES, MAILBOXES, POST_HEADER_STRIDE, SENDER_GAVE_UP_AT,
    STAMP_AT,
};
use crate::tcp::frame::{Header, HEADER_BYTES};
use nuvec_core::{Error, Result};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a wait yields its core before it sleeps.
const YIELD_FOR: Duration = Duration::from_micros(300);

/// A channel's two mailboxes: a message not yet received never stands in a collective's way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mailbox {
    Collectives = 0,
    Messages = 1,
}

impl Mailbox {
    pub(super) fn layout(self) -> &'static MailboxLayout {
        &MAILBOXES[self as usize]
    }
}

/// A post as its receiver sees it: the call's header, the piece's offset in the call's
/// payload, and the piece, in place in the channel until [`Channel::release`].
pub(crate) struct Post<'a> {
    pub(crate) header: Header,
    pub(crate) offset: u64,
    pub(crate) piece: &'a [u8],
}

/// Where post number `count`'s header line lies in the mapping.
fn header_at(mailbox: &MailboxLayout, count: u32) -> usize {
    mailbox.headers_at + (count as usize % mailbox.posts) * POST_HEADER_STRIDE
}

impl Channel {
    pub(super) fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is 4-aligned inside the mapping's first page, which lives as long as
        // `self`; both processes touch the word only atomically.
        #[allow(unsafe_code)]
        unsafe {
            &*(self.base.add(at) as *const AtomicU32)
        }
    }

    /// The header line of post number `count` of `mailbox`, and where its payload of
    /// `length` bytes lies: in that line if it fits ([`INLINE_BYTES`]), else in its buffer.
    fn post_at(&self, mailbox: &MailboxLayout, count: u32, length: usize) -> (*mut u8, *mut u8) {
        // SAFETY: both lie inside the mapping: the header lines in its first page (checked in
        // `layout.rs`, with the inline payload before the stamp), the buffers after the slots,
        // POST_BYTES each, up to CHANNEL_BYTES.
        #[allow(unsafe_code)]
        unsafe {
            let head = self.base.add(header_at(mailbox, count));
            let payload = match length <= INLINE_BYTES {
                true => head.add(INLINE_AT),
                false => self.base.add(
                    mailbox.buffers_at + (count as usize % mailbox.posts) * mailbox.post_bytes,
                ),
            };
            (head, payload)
        }
    }

    /// The stamp word in the header line of post number `count` of `mailbox`.
    fn stamp(&self, mailbox: &MailboxLayout, count: u32) -> &AtomicU32 {
        self.word(header_at(mailbox, count) + STAMP_AT)
    }

    /// The sending end: posts `parts`, one after the other (at most the mailbox's post size in all),
    /// the piece at `offset` of the payload of the call `header`, once a buffer is free.
    pub(crate) fn post(
        &self,
        mailbox: Mailbox,
        header: &Header,
        offset: usize,
        parts: &[&[u8]],
        (timeout, alive): (Duration, &mut dyn FnMut() -> Result<()>),
    ) -> Result<()> {
        let op = header.kind.name();
        let length: usize = parts.iter().map(|part| part.len()).sum();
        let layout = mailbox.layout();
        assert!(length <= layout.post_bytes, "a post of {length} bytes");
        let (posted, taken) = (self.word(layout.posted_at), self.word(layout.taken_at));
        let count = posted.load(Ordering::Relaxed);
        let posts = layout.posts as u32;
        let free = || count.wrapping_sub(taken.load(Ordering::Acquire)) < posts;
        let what = "to take what this rank posted (is it busy elsewhere, or in another call?)";
        self.wait_for(
            op,
            (layout.taken_at, layout.sender_sleeps_at),
            &free,
            what,
            (timeout, alive),
        )?;
        if count.wrapping_sub(taken.load(Ordering::Acquire)) > posts {
            return Err(self.corrupt(op, "its mailbox's counters ran past each other"));
        }
        let (head, buffer) = self.post_at(layout, count, length);
        let mut record = [0u8; HEADER_BYTES + 16];
        record[..HEADER_BYTES].copy_from_slice(&header.encode());
        record[HEADER_BYTES..HEADER_BYTES + 8].copy_from_slice(&(offset as u64).to_le_bytes());
        record[HEADER_BYTES + 8..].copy_from_slice(&(length as u64).to_le_bytes());
        // SAFETY: header and payload lie inside the mapping (at most POST_BYTES, or INLINE_BYTES
        // in the header line); the receiver freed this post (the acquire load above) and reads
        // it again only once its stamp, below, says the post is complete.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(record.as_ptr(), head, record.len());
            let mut at = 0;
            for part in parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), buffer.add(at), part.len());
                at += part.len();
            }
        }
        self.stamp(layout, count)
            .store(count.wrapping_add(1), Ordering::Release);
        posted.store(count.wrapping_add(1), Ordering::SeqCst);
        if self.word(layout.receiver_sleeps_at).load(Ordering::SeqCst) != 0 {
            crate::platform::wake_word(posted);
        }
        Ok(())
    }

    /// The sending end: tells the receiver that this rank gave the group up, waking it.
    pub(crate) fn give_up(&self) {
        self.word(SENDER_GAVE_UP_AT).store(1, Ordering::SeqCst);
        for layout in &MAILBOXES {
            crate::platform::wake_word(self.word(layout.posted_at));
        }
    }

    /// The receiving end: the error for a sender that gave the group up.
    pub(super) fn gave_up(&self, op: &str) -> Result<()> {
        if self.word(SENDER_GAVE_UP_AT).load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        Err(Error::Distributed {
            op: op.into(),
            rank: Some(self.peer),
            reason: format!("rank {} reported that the group failed", self.peer),
        })
    }

    /// The sending end: the first `bytes` of its latest post, still in place (the sender
    /// alone writes it, and only `POSTS` posts later).
    pub(crate) fn latest_post(&self, mailbox: Mailbox, bytes: usize) -> &[u8] {
        let layout = mailbox.layout();
        let count = self.word(layout.posted_at).load(Ordering::Relaxed);
        let (_, buffer) = self.post_at(layout, count.wrapping_sub(1), bytes);
        // SAFETY: the buffer lies inside the mapping and holds `post_bytes`; only this end
        // writes it, and not while the returned borrow of `self` lives (posting needs the
        // caller to let go of it first).
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(buffer, bytes.min(layout.post_bytes))
        }
    }

    /// The sending end: whether the receiver waits, in [`Channel::next_post`], for the post
    /// this end makes next (so that it takes that post before anything else it does), or
    /// starts to within `patience`. Looks while yielding the core: with more ranks than
    /// cores, the receiver may need it to get there.
    pub(crate) fn receiver_waits(&self, mailbox: Mailbox, patience: Duration) -> bool {
        let layout = mailbox.layout();
        let next = self
            .word(layout.posted_at)
            .load(Ordering::Relaxed)
            .wrapping_add(1);
        // 0 is also the word's value before any wait: never taken as one.
        let waits = || next != 0 && self.word(layout.waits_for_at).load(Ordering::SeqCst) == next;
        if waits() {
            return true;
        }
        let start = Instant::now();
        while start.elapsed() < patience {
            std::thread::yield_now();
            if waits() {
                return true;
            }
        }
        false
    }

    /// The receiving end: waits for the next post of the call `op` and returns it, in place
    /// until [`Channel::release`].
    pub(crate) fn next_post(
        &self,
        mailbox: Mailbox,
        op: &str,
        (timeout, alive): (Duration, &mut dyn FnMut() -> Result<()>),
    ) -> Result<Post<'_>> {
        let layout = mailbox.layout();
        let (posted, taken) = (self.word(layout.posted_at), self.word(layout.taken_at));
        let count = taken.load(Ordering::Relaxed);
        let (stamp, gave_up) = (self.stamp(layout, count), self.word(SENDER_GAVE_UP_AT));
        let complete = || stamp.load(Ordering::Acquire) == count.wrapping_add(1);
        // The sender stamps a post before it counts it, so its count may still lag this end's
        // by one (this end took the last post by its stamp); one further off in either
        // direction is corrupt, and ends the wait to say so below.
        let posts = layout.posts as u32;
        let ran_past = || {
            let ahead = posted.load(Ordering::Acquire).wrapping_sub(count);
            ahead > posts && ahead != u32::MAX
        };
        let ready = || complete() || gave_up.load(Ordering::Acquire) != 0 || ran_past();
        if !ready() {
            // The sender may hand this post's payload over in one copy (`receiver_waits`).
            self.word(layout.waits_for_at)
                .store(count.wrapping_add(1), Ordering::SeqCst);
        }
        let what = "to post its part";
        self.wait_for(
            op,
            (layout.posted_at, layout.receiver_sleeps_at),
            &ready,
            what,
            (timeout, alive),
        )?;
        self.gave_up(op)?;
        if !complete() {
            return Err(self.corrupt(op, "its mailbox's counters ran past each other"));
        }
        let head = self.post_at(layout, count, 0).0;
        let mut record = [0u8; HEADER_BYTES + 16];
        // SAFETY: the header lies inside the mapping; the sender published it (the acquire
        // load in the wait) and does not write it again until it is released.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(head, record.as_mut_ptr(), record.len())
        };
        let header = Header::decode(record[..HEADER_BYTES].try_into().expect("a header"))
            .map_err(|reason| self.corrupt(op, &format!("a post's header: {reason}")))?;
        let word = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().expect("8 bytes"));
        let (offset, length) = (word(HEADER_BYTES), word(HEADER_BYTES + 8));
        if length > layout.post_bytes as u64 {
            return Err(self.corrupt(op, &format!("a post claims {length} bytes")));
        }
        let buffer = self.post_at(layout, count, length as usize).1;
        // SAFETY: as for the header: the payload's place (the header line's inline bytes, or
        // the buffer of `post_bytes` ≥ `length`) was published and is left alone by the
        // sender until released.
        #[allow(unsafe_code)]
        let piece = unsafe { std::slice::from_raw_parts(buffer, length as usize) };
        Ok(Post {
            header,
            offset,
            piece,
        })
    }

    /// The receiving end: frees the post [`Channel::next_post`] returned.
    pub(crate) fn release(&self, mailbox: Mailbox) {
        let layout = mailbox.layout();
        let taken = self.word(layout.taken_at);
        taken.store(
            taken.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::SeqCst,
        );
        if self.word(layout.sender_sleeps_at).load(Ordering::SeqCst) != 0 {
            crate::platform::wake_word(taken);
        }
    }

    /// Waits until `ready`, which turns true when the word at `word_at` changes: spinning,
    /// yielding, then sleeping on the word with this end's `sleeps_at` word set, at most
    /// `timeout`, asking `alive` every [`CHECK_EVERY`] once sleeping.
    pub(super) fn wait_for(
        &self,
        op: &str,
        (word_at, sleeps_at): (usize, usize),
        ready: &dyn Fn() -> bool,
        what: &str,
        (timeout, alive): (Duration, &mut dyn FnMut() -> Result<()>),
    ) -> Result<()> {
        if ready() {
            return Ok(());
        }
        let start = Instant::now();
        while start.elapsed() < self.spin {
            // A pause can take a hundred cycles: look after each one.
            for _ in 0..32 {
                std::hint::spin_loop();
                if ready() {
                    return Ok(());
                }
            }
        }
        while start.elapsed() < YIELD_FOR {
            std::thread::yield_now();
            if ready() {
                return Ok(());
            }
        }
        let (word, sleeps) = (self.word(word_at), self.word(sleeps_at));
        let mut checked = Instant::now();
        loop {
            sleeps.store(1, Ordering::SeqCst);
            let seen = word.load(Ordering::SeqCst);
            if ready() {
                sleeps.store(0, Ordering::Relaxed);
                return Ok(());
            }
            let left = timeout.saturating_sub(start.elapsed());
            crate::platform::wait_on_word(word, seen, left.min(CHECK_EVERY));
            sleeps.store(0, Ordering::Relaxed);
            if ready() {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                return Err(self.timed_out(op, timeout, what));
            }
            if checked.elapsed() >= CHECK_EVERY {
                // A peer that posted what this wait needs and then left has not failed it.
                if let Err(error) = alive() {
                    return if ready() { Ok(()) } else { Err(error) };
                }
                checked = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::layout::TOKEN_BYTES;
    use crate::tcp::frame::Kind;
    use nuvec_core::DType;

    fn pair(tag: u8) -> (Channel, Channel) {
        let token = [tag; TOKEN_BYTES];
        let name = format!("nuvec-ring-test-{}-mailbox-{tag}", std::process::id());
        let path = crate::platform::shared_memory_dir().join(name);
        let sender = Channel::create(path.clone(), &token, 1).unwrap();
        let receiver = Channel::open(&path, &token, 0).unwrap();
        (sender, receiver)
    }

    fn fine() -> Result<()> {
        Ok(())
    }

    fn header(sequence: u64) -> Header {
        Header {
            kind: Kind::AllSum,
            dtype: DType::F32,
            sequence,
            bytes: 1 << 20,
        }
    }

    #[test]
    fn posts_arrive_in_order_with_their_headers_across_many_rounds() {
        let (sender, receiver) = pair(21);
        let timeout = Duration::from_secs(10);
        let rounds = 1000u64;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for round in 0..rounds {
                    let piece: Vec<u8> = (0..(round as usize % 5000))
                        .map(|i| (i as u64 ^ round) as u8)
                        .collect();
                    sender
                        .post(
                            Mailbox::Collectives,
                            &header(round),
                            round as usize * 7,
                            &[&piece],
                            (timeout, &mut fine),
                        )
                        .unwrap();
                    assert_eq!(
                        sender.latest_post(Mailbox::Collectives, piece.len()),
                        &piece[..]
                    );
                }
            });
            for round in 0..rounds {
                let post = receiver
                    .next_post(Mailbox::Collectives, "all_sum", (timeout, &mut fine))
                    .unwrap();
                assert_eq!(post.header, header(round));
                assert_eq!(post.offset, round * 7);
                let expected: Vec<u8> = (0..(round as usize % 5000))
                    .map(|i| (i as u64 ^ round) as u8)
                    .collect();
                assert!(
                    post.piece == &expected[..],
                    "round {round} came back changed"
                );
                receiver.release(Mailbox::Collectives);
            }
        });
    }

    #[test]
    fn a_sender_waits_for_a_free_buffer_and_a_reader_that_never_reads_is_named() {
        let (sender, _receiver) = pair(22);
        let short = Duration::from_millis(200);
        for round in 0..MAILBOXES[0].posts as u64 {
            sender
                .post(
                    Mailbox::Collectives,
                    &header(round),
                    0,
                    &[&[1, 2], &[3]],
                    (short, &mut fine),
                )
                .unwrap();
        }
        let start = Instant::now();
        let error = sender
            .post(
                Mailbox::Collectives,
                &header(9),
                0,
                &[&[1]],
                (short, &mut fine),
            )
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("rank 1") && error.contains("timed out"),
            "{error}"
        );
        assert!(start.elapsed() >= short);
    }

    #[test]
    fn a_peer_gone_ends_the_wait_before_the_timeout_and_a_late_post_is_still_read() {
        let (sender, receiver) = pair(23);
        let start = Instant::now();
        let mut gone = || {
            Err(Error::Distributed {
                op: "all_sum".into(),
                rank: Some(0),
                reason: "rank 0 closed its connection".into(),
            })
        };
        let error = receiver
            .next_post(
                Mailbox::Collectives,
                "all_sum",
                (Duration::from_secs(30), &mut gone),
            )
            .err()
            .expect("no post came");
        assert!(
            error.to_string().contains("closed its connection"),
            "{error}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
        // A post made just before the peer left is read.
        let mut posted_then_gone = || {
            sender
                .post(
                    Mailbox::Collectives,
                    &header(0),
                    0,
                    &[&[5; 16]],
                    (Duration::from_secs(1), &mut fine),
                )
                .unwrap();
            Err(Error::Distributed {
                op: "all_sum".into(),
                rank: Some(0),
                reason: "rank 0 closed its connection".into(),
            })
        };
        let post = receiver
            .next_post(
                Mailbox::Collectives,
                "all_sum",
                (Duration::from_secs(30), &mut posted_then_gone),
            )
            .expect("the post arrives");
        assert_eq!(post.piece, &[5; 16]);
    }

    #[test]
    fn a_post_taken_by_its_stamp_before_its_count_lands_is_no_corruption() {
        const LONG: Duration = Duration::from_secs(5);
        const SHORT: Duration = Duration::from_millis(30);
        let (sender, receiver) = pair(25);
        // Post 0 written and stamped, its count not stored yet: the sender between the two.
        let (head, _) = sender.post_at(&MAILBOXES[0], 0, 0);
        // SAFETY: the header of post 0 lies inside the mapping; nothing else touches it now.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(header(0).encode().as_ptr(), head, HEADER_BYTES);
        }
        sender.stamp(&MAILBOXES[0], 0).store(1, Ordering::SeqCst);
        let post = receiver
            .next_post(Mailbox::Collectives, "all_sum", (LONG, &mut fine))
            .expect("taken by its stamp");
        assert_eq!((post.header, post.piece), (header(0), &[][..]));
        receiver.release(Mailbox::Collectives);
        // This end is now one past the sender's count: the next wait waits, as it must.
        let error = receiver
            .next_post(Mailbox::Collectives, "all_sum", (SHORT, &mut fine))
            .err()
            .expect("no post yet");
        assert!(!error.to_string().contains("corrupt"), "{error}");
        // The count lands; the next post arrives as usual.
        sender
            .word(MAILBOXES[0].posted_at)
            .store(1, Ordering::SeqCst);
        sender
            .post(
                Mailbox::Collectives,
                &header(1),
                0,
                &[&[7; 3]],
                (LONG, &mut fine),
            )
            .unwrap();
        let post = receiver
            .next_post(Mailbox::Collectives, "all_sum", (LONG, &mut fine))
            .unwrap();
        assert_eq!((post.header, post.piece), (header(1), &[7u8; 3][..]));
    }

    #[test]
    fn counters_or_lengths_out_of_range_are_refused_as_corrupt() {
        let (sender, receiver) = pair(24);
        sender
            .word(MAILBOXES[0].posted_at)
            .store(MAILBOXES[0].posts as u32 + 3, Ordering::SeqCst);
        let error = receiver
            .next_post(
                Mailbox::Collectives,
                "all_sum",
                (Duration::from_secs(5), &mut fine),
            )
            .err()
            .expect("refused");
        assert!(error.to_string().contains("corrupt"), "{error}");
        sender
            .word(MAILBOXES[0].posted_at)
            .store(1, Ordering::SeqCst);
        sender.stamp(&MAILBOXES[0], 0).store(1, Ordering::SeqCst);
        let (head, _) = sender.post_at(&MAILBOXES[0], 0, 0);
        // SAFETY: the header of post 0 lies inside the mapping; nothing else touches it now.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(header(0).encode().as_ptr(), head, HEADER_BYTES);
            std::ptr::copy_nonoverlapping(
                u64::MAX.to_le_bytes().as_ptr(),
                head.add(HEADER_BYTES + 8),
                8,
            );
        }
        let error = receiver
            .next_post(
                Mailbox::Collectives,
                "all_sum",
                (Duration::from_secs(5), &mut fine),
            )
            .err()
            .expect("refused");
        assert!(error.to_string().contains("claims"), "{error}");
    }
}
