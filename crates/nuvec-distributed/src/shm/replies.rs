//! Replies to a post (`mailbox.rs`) for a message whose payload the receiver reads straight
//! from the sender's memory (`ring/posted_messages.rs`): the receiver's answer, stamped with
//! the post's number, before it releases the post; and, for a large payload, the receiver's
//! request that the sender write part of it into the receiver's memory meanwhile, and the
//! sender's word that it did. Both ends then copy at once, on two cores.

use super::channel::Channel;
use super::layout::SENDER_GAVE_UP_AT;
use super::mailbox::Mailbox;
use nuvec_core::Result;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What a receiver answered to a post that asked it to read the payload straight from the
/// sender's memory (`ring/posted_messages.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// It read the payload.
    Read = 1,
    /// It may not read it (the kernel refused, or it reads no peer's memory): the payload
    /// must come another way.
    Unread = 2,
    /// It refused the message (another type or size): nothing more follows.
    Dropped = 3,
}

/// What a sender waiting on a post that asked for an answer hears first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The receiver answered and released the post.
    Answered(Answer),
    /// The receiver asks the sender to write part of the payload itself, at this place (a
    /// posted location), while it reads the rest.
    Write([u8; 20]),
}

impl Channel {
    /// The receiving end: answers the post [`Channel::next_post`] returned, before releasing
    /// it (the answer is stamped with the post's number).
    pub(crate) fn answer(&self, mailbox: Mailbox, answer: Answer) {
        let layout = mailbox.layout();
        let taken = self.word(layout.taken_at).load(Ordering::Relaxed);
        let stamp = (taken.wrapping_add(1) << 2) | answer as u32;
        self.word(layout.answer_at).store(stamp, Ordering::SeqCst);
    }

    /// The sending end: waits until the receiver has released every post of `mailbox`, the
    /// last of which asked for an answer, or (if `splits`) asked this end to write part of its
    /// payload, and returns which.
    pub(crate) fn await_reply(
        &self,
        mailbox: Mailbox,
        op: &str,
        splits: bool,
        (timeout, alive): (Duration, &mut dyn FnMut() -> Result<()>),
    ) -> Result<Reply> {
        let layout = mailbox.layout();
        let posted = self.word(layout.posted_at).load(Ordering::Relaxed);
        let (taken, split) = (self.word(layout.taken_at), self.word(layout.split_at));
        let ours = posted & (u32::MAX >> 2);
        let asked = || split.load(Ordering::Acquire) == (ours << 2 | 1);
        let done = || taken.load(Ordering::Acquire) == posted || (splits && asked());
        let what = "to receive the message this rank posted";
        self.wait_for(
            op,
            (layout.taken_at, layout.sender_sleeps_at),
            &done,
            what,
            (timeout, alive),
        )?;
        if taken.load(Ordering::Acquire) != posted {
            let mut place = [0u8; 20];
            for (i, bytes) in place.chunks_exact_mut(4).enumerate() {
                let word = self
                    .word(layout.split_at + 4 + 4 * i)
                    .load(Ordering::Relaxed);
                bytes.copy_from_slice(&word.to_le_bytes());
            }
            return Ok(Reply::Write(place));
        }
        let stamp = self.word(layout.answer_at).load(Ordering::Acquire);
        match (stamp >> 2 == ours, stamp & 3) {
            (true, 1) => Ok(Reply::Answered(Answer::Read)),
            (true, 2) => Ok(Reply::Answered(Answer::Unread)),
            (true, 3) => Ok(Reply::Answered(Answer::Dropped)),
            _ => Err(self.corrupt(op, "its receiver's answer does not match the post")),
        }
    }

    /// The receiving end: asks the sender of the post [`Channel::next_post`] returned to write
    /// part of its payload at `place` (a posted location) while this end reads the rest.
    pub(crate) fn ask_to_write(&self, mailbox: Mailbox, place: &[u8; 20]) {
        let layout = mailbox.layout();
        for (i, bytes) in place.chunks_exact(4).enumerate() {
            let word = u32::from_le_bytes(bytes.try_into().expect("4 bytes"));
            self.word(layout.split_at + 4 + 4 * i)
                .store(word, Ordering::Relaxed);
        }
        let taken = self.word(layout.taken_at).load(Ordering::Relaxed);
        let stamp = (taken.wrapping_add(1) << 2) | 1;
        self.word(layout.split_at).store(stamp, Ordering::SeqCst);
        if self.word(layout.sender_sleeps_at).load(Ordering::SeqCst) != 0 {
            // The sender sleeps on the `taken` word; a wake-up needs no change of it.
            crate::platform::wake_word(self.word(layout.taken_at));
        }
    }

    /// The sending end: says whether it wrote the part [`Channel::ask_to_write`] asked for.
    pub(crate) fn wrote(&self, mailbox: Mailbox, written: bool) {
        let layout = mailbox.layout();
        let posted = self.word(layout.posted_at).load(Ordering::Relaxed);
        let stamp = (posted << 2) | if written { 1 } else { 2 };
        self.word(layout.written_at).store(stamp, Ordering::SeqCst);
        if self.word(layout.receiver_sleeps_at).load(Ordering::SeqCst) != 0 {
            crate::platform::wake_word(self.word(layout.written_at));
        }
    }

    /// The receiving end: waits until the sender says whether it wrote the part asked of it
    /// for the post [`Channel::next_post`] returned, and returns whether it did.
    pub(crate) fn await_written(
        &self,
        mailbox: Mailbox,
        op: &str,
        (timeout, alive): (Duration, &mut dyn FnMut() -> Result<()>),
    ) -> Result<bool> {
        let layout = mailbox.layout();
        let taken = self.word(layout.taken_at).load(Ordering::Relaxed);
        let ours = taken.wrapping_add(1) & (u32::MAX >> 2);
        let (written, gave_up) = (self.word(layout.written_at), self.word(SENDER_GAVE_UP_AT));
        let ready =
            || written.load(Ordering::Acquire) >> 2 == ours || gave_up.load(Ordering::Acquire) != 0;
        let what = "to write its part of the message";
        self.wait_for(
            op,
            (layout.written_at, layout.receiver_sleeps_at),
            &ready,
            what,
            (timeout, alive),
        )?;
        self.gave_up(op)?;
        Ok(written.load(Ordering::Acquire) & 3 == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::layout::TOKEN_BYTES;
    use crate::tcp::frame::{Header, Kind};
    use nuvec_core::DType;

    fn fine() -> Result<()> {
        Ok(())
    }

    /// A posted place: process id, address, length (as `ring/cross_memory.rs` lays it out).
    fn place(address: u64, bytes: u64) -> [u8; 20] {
        let mut place = [0u8; 20];
        place[..4].copy_from_slice(&std::process::id().to_le_bytes());
        place[4..12].copy_from_slice(&address.to_le_bytes());
        place[12..].copy_from_slice(&bytes.to_le_bytes());
        place
    }

    #[test]
    fn a_sender_asked_to_write_part_says_whether_it_could_then_hears_the_answer() {
        let token = [31; TOKEN_BYTES];
        let name = format!("nuvec-ring-test-{}-replies", std::process::id());
        let path = crate::platform::shared_memory_dir().join(name);
        let sender = Channel::create(path.clone(), &token, 1).unwrap();
        let receiver = Channel::open(&path, &token, 0).unwrap();
        let timeout = Duration::from_secs(10);
        let payload: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        // A place the receiver owns, then one the kernel refuses (address 8).
        for writable in [true, false] {
            let mut target = vec![0u8; payload.len()];
            let address = if writable {
                target.as_mut_ptr() as u64
            } else {
                8
            };
            let header = Header {
                kind: Kind::Send,
                dtype: DType::U8,
                sequence: u64::from(writable),
                bytes: payload.len() as u64,
            };
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    sender
                        .post(Mailbox::Messages, &header, 1, &[b"x"], (timeout, &mut fine))
                        .unwrap();
                    let reply = sender
                        .await_reply(Mailbox::Messages, "send", true, (timeout, &mut fine))
                        .unwrap();
                    let Reply::Write(place) = reply else {
                        panic!("expected a request to write, got {reply:?}");
                    };
                    let word =
                        |at: usize| u64::from_le_bytes(place[at..at + 8].try_into().unwrap());
                    let pid = u32::from_le_bytes(place[..4].try_into().unwrap());
                    let written = word(12) == payload.len() as u64
                        && crate::platform::write_process(pid, word(4), &payload).is_ok();
                    sender.wrote(Mailbox::Messages, written);
                    let answer = sender
                        .await_reply(Mailbox::Messages, "send", false, (timeout, &mut fine))
                        .unwrap();
                    assert_eq!(answer, Reply::Answered(Answer::Read));
                });
                let post = receiver
                    .next_post(Mailbox::Messages, "recv", (timeout, &mut fine))
                    .unwrap();
                assert_eq!((post.header, post.offset), (header, 1));
                receiver.ask_to_write(Mailbox::Messages, &place(address, payload.len() as u64));
                let written = receiver
                    .await_written(Mailbox::Messages, "recv", (timeout, &mut fine))
                    .unwrap();
                assert_eq!(written, writable && cfg!(target_os = "linux"));
                receiver.answer(Mailbox::Messages, Answer::Read);
                receiver.release(Mailbox::Messages);
            });
            if writable && cfg!(target_os = "linux") {
                assert_eq!(target, payload);
            }
        }
    }
}
