//! Point-to-point messages between ranks on one machine through the mailbox
//! (`shm/mailbox.rs`): `send` posts the message's header and shape, and its payload too when
//! they fit in a post; a larger one follows through the channel's slots (from
//! `SHARED_FROM` bytes, `channels.rs`) or on the connection. `recv` waits on the mailbox
//! alone, so a message posted whole or through the slots costs no system call on either
//! side, and reads what the post says follows. Through the slots the post alone announces the payload: a
//! header on the connection as well cost the sender a write and the receiver a read, which
//! on a crowded machine could sleep (the 4-rank ping-pong of 64 KB, `docs/performance.md`).
//!
//! A payload larger than the channel's slots hold goes in one copy instead (Linux), as does
//! one too large for a post to a receiver already waiting for it: the post says where it lies
//! in the sender's memory, the receiver reads it from there (`cross_memory.rs`) and answers
//! before it releases the post, and the sender waits for the answer. Such a send waited for
//! its receiver before too (the slots fill, or the receiver is there), so nothing new waits:
//! two ranks that both send a message the slots hold before either receives still pass.
//! Where the receiver may not read it (the kernel refuses, or `NUVEC_RING_CROSS_MEMORY=off`),
//! it answers so and the payload follows on the connection; the sender remembers, and later
//! messages to that rank go that way from the start.
//!
//! Every message to a rank on this machine is posted, whatever its size, so sender and
//! receiver never look in different places: a receiver expecting another size or type
//! learns it from the post and drains the message before it reports the mismatch.

use super::cross_memory::{Location, LOCATION_BYTES};
use super::network::Network;
use super::transport::Transport;
use crate::shm::{Answer, Channel, Mailbox, Reply, MESSAGE_POST_BYTES, SLOTS, SLOT_BYTES};
use crate::tcp::frame::{Header, Kind, HEADER_BYTES};
use nuvec_core::{DType, Error, Result};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The most dimensions a received message may claim (a larger count is a corrupt frame, not a
/// reason to allocate).
pub(crate) const MAX_NDIM: usize = 64;

/// Payloads larger than this (what a channel's slots hold) are read from the sender's memory.
const READ_FROM_MEMORY_ABOVE: usize = SLOTS * SLOT_BYTES;
/// Payloads too large for a post are read from the sender's memory too when the receiver
/// waits for them: through the slots every byte is copied twice (and a header goes on the
/// connection), read only once (a 1 MiB ping-pong took 79 µs through the slots, 42 read; 16
/// KiB, 7.3 and 6.0 µs; on the 2-core VM: `docs/performance.md`, "Tuning measurements"). To
/// a receiver not waiting they still go through the slots, so that such a send never waits
/// for its receiver.
///
/// This is how long, per KiB, a sender of such a payload gives its receiver to start waiting:
/// a fraction of what the slots would cost (26 µs for 1 MiB, against their 79). A receiver
/// finishing its last call comes within it; one busy elsewhere does not, and the payload goes
/// through the slots.
const AWAIT_RECEIVER_NS_PER_KIB: u64 = 25;
/// Payloads of at least this many bytes are copied by both ends at once: the receiver reads
/// the first half while the sender writes the second into the receiver's memory (measured
/// with the above).
const BOTH_COPY_FROM: usize = 2 * SLOT_BYTES;
/// The offset a post gives to say that its payload is to be read from the sender's memory
/// (offset 0: the payload is in the post, or follows on the connection).
const IN_MEMORY: u64 = 1;
/// The offset a post gives to say that its payload follows through the channel's slots,
/// with no header on the connection.
const IN_SLOTS: u64 = 2;

/// How long to give the receiver of `bytes` to start waiting for them.
fn patience(bytes: usize) -> Duration {
    Duration::from_nanos((bytes as u64 >> 10) * AWAIT_RECEIVER_NS_PER_KIB)
}

/// A `recv` that found another message than the one it expects from `peer`.
pub(crate) fn recv_mismatch(peer: usize, reason: String) -> Error {
    Error::Distributed {
        op: "recv".into(),
        rank: Some(peer),
        reason,
    }
}

/// What a post said of the message it announced.
pub(crate) enum Posted {
    /// The payload came in the post and is in the caller's buffer.
    Received,
    /// The payload follows on the connection (header, then payload), as without a mailbox.
    OnConnection,
}

/// A message that the post from `src` announced, refused: its description.
pub(crate) struct Refused(pub(crate) String);

impl Network {
    /// Posts the message `meta` (its header, then its dimension count and dimensions) with
    /// `data` to `dst` through `channel`, then, if the payload did not fit in the post, sends
    /// it on the connection as a message without a mailbox.
    pub(crate) fn post_message(
        &self,
        (dst, channel): (usize, &Channel),
        meta: &[u8],
        data: &[u8],
    ) -> Result<()> {
        let (raw, shape) = meta.split_at(HEADER_BYTES);
        let header = Header::decode(raw.try_into().expect("a header")).map_err(|reason| {
            Error::Distributed {
                op: "send".into(),
                rank: Some(dst),
                reason,
            }
        })?;
        let inline = shape.len() + data.len() <= MESSAGE_POST_BYTES;
        let mut alive = || self.still_going(Kind::Send, dst);
        if cfg!(target_os = "linux")
            && (data.len() > READ_FROM_MEMORY_ABOVE
                || (!inline && channel.receiver_waits(Mailbox::Messages, patience(data.len()))))
            && !self.unread_by[dst].load(Ordering::Relaxed)
        {
            let location = Location::of(data).encode();
            let parts: &[&[u8]] = &[shape, &location];
            let timing = (self.timeout, &mut alive as &mut dyn FnMut() -> Result<()>);
            channel.post(
                Mailbox::Messages,
                &header,
                IN_MEMORY as usize,
                parts,
                timing,
            )?;
            let splits = data.len() >= BOTH_COPY_FROM;
            let timing = (self.timeout, &mut alive as &mut dyn FnMut() -> Result<()>);
            let mut reply = channel.await_reply(Mailbox::Messages, "send", splits, timing)?;
            if let Reply::Write(place) = reply {
                // The receiver reads the first part meanwhile; this end writes the rest.
                let place = Location::decode(&place).filter(|p| p.bytes <= data.len() as u64);
                let written = place.is_some_and(|place| {
                    place.write_from(&data[data.len() - place.bytes as usize..])
                });
                channel.wrote(Mailbox::Messages, written);
                let timing = (self.timeout, &mut alive as &mut dyn FnMut() -> Result<()>);
                reply = channel.await_reply(Mailbox::Messages, "send", false, timing)?;
            }
            let Reply::Answered(answer) = reply else {
                let reason = format!("rank {dst} asked twice to write part of a message");
                return Err(Error::Distributed {
                    op: "send".into(),
                    rank: Some(dst),
                    reason,
                });
            };
            match answer {
                Answer::Read | Answer::Dropped => return Ok(()),
                Answer::Unread => {
                    self.unread_by[dst].store(true, Ordering::Relaxed);
                    return self.write_message(dst, meta, data);
                }
            }
        }
        let parts: &[&[u8]] = if inline { &[shape, data] } else { &[shape] };
        let slots = !inline && self.nearby.shared_to(dst, data.len()).is_some();
        let offset = if slots { IN_SLOTS } else { 0 };
        channel.post(
            Mailbox::Messages,
            &header,
            offset as usize,
            parts,
            (self.timeout, &mut alive),
        )?;
        if inline {
            return Ok(());
        }
        if slots {
            let mut alive = || self.connections.still_there("send", dst);
            return channel.write("send", data, self.timeout, &mut alive);
        }
        self.write_message(dst, meta, data)
    }

    /// Takes the post announcing message `#expected` from `src` through `channel` and, when
    /// it carries the payload and matches `dtype`, `shape` and `data`'s size, copies it into
    /// `data`. A post of another kind or number is an error (the group fails: the streams
    /// are at an unknown place); a message of another type or size posted whole is refused
    /// and dropped, the caller reporting it.
    pub(crate) fn take_message(
        &self,
        (src, channel): (usize, &Channel),
        expected: u64,
        (data, dtype, shape): (&mut [u8], DType, &[i32]),
    ) -> Result<std::result::Result<Posted, Refused>> {
        let mut alive = || self.still_going(Kind::Send, src);
        let post = channel.next_post(Mailbox::Messages, "recv", (self.timeout, &mut alive))?;
        let header = post.header;
        if header.kind != Kind::Send || header.sequence != expected {
            return Err(recv_mismatch(
                src,
                format!(
                    "expected message #{expected} from rank {src}, got {}",
                    header.describe()
                ),
            ));
        }
        let corrupt =
            |what: String| recv_mismatch(src, format!("the message posted by rank {src} {what}"));
        let ndim = post
            .piece
            .first_chunk::<4>()
            .map(|count| u32::from_le_bytes(*count) as usize)
            .ok_or_else(|| corrupt("is too short".into()))?;
        if ndim > MAX_NDIM {
            return Err(corrupt(format!("claims {ndim} dimensions")));
        }
        let meta = 4 + 4 * ndim;
        let in_memory = post.offset == IN_MEMORY;
        let in_slots = post.offset == IN_SLOTS;
        if !matches!(post.offset, 0 | IN_MEMORY | IN_SLOTS) {
            return Err(corrupt(format!("gives offset {}", post.offset)));
        }
        let inline = post.offset == 0
            && (meta as u64).checked_add(header.bytes) == Some(post.piece.len() as u64);
        let expected_length = match (in_memory, inline) {
            (true, _) => meta + LOCATION_BYTES,
            (false, true) => post.piece.len(),
            (false, false) => meta,
        };
        if post.piece.len() < meta || post.piece.len() != expected_length {
            return Err(corrupt(format!("holds {} bytes", post.piece.len())));
        }
        if !inline && !in_memory && !in_slots {
            channel.release(Mailbox::Messages);
            return Ok(Ok(Posted::OnConnection));
        }
        let their_shape: Vec<i32> = post.piece[4..meta]
            .chunks_exact(4)
            .map(|d| i32::from_le_bytes([d[0], d[1], d[2], d[3]]))
            .collect();
        if header.dtype != dtype || their_shape != shape || header.bytes as usize != data.len() {
            if in_memory {
                channel.answer(Mailbox::Messages, Answer::Dropped);
            }
            channel.release(Mailbox::Messages);
            if in_slots {
                // Skipped, so that the slots hold the next payload's bytes at their start.
                channel.skip("recv", header.bytes, self.timeout, &mut alive)?;
            }
            return Ok(Err(Refused(format!(
                "rank {src} sent {} {their_shape:?}, this rank (rank {}) expected {dtype} {shape:?}",
                header.dtype, self.rank
            ))));
        }
        if in_memory {
            let location = Location::decode(&post.piece[meta..])
                .filter(|l| l.bytes == header.bytes)
                .ok_or_else(|| corrupt("gives a place of another size".into()))?;
            let read = self.read_from_memory(channel, src, location, data)?;
            let answer = if read { Answer::Read } else { Answer::Unread };
            channel.answer(Mailbox::Messages, answer);
            channel.release(Mailbox::Messages);
            return Ok(Ok(if read {
                Posted::Received
            } else {
                Posted::OnConnection
            }));
        }
        if in_slots {
            channel.release(Mailbox::Messages);
            channel.read("recv", data, self.timeout, &mut alive)?;
            return Ok(Ok(Posted::Received));
        }
        data.copy_from_slice(&post.piece[meta..]);
        channel.release(Mailbox::Messages);
        Ok(Ok(Posted::Received))
    }

    /// Reads the payload at `location` (the sender's) into `data`: whole, or for a large one
    /// the first half while the sender writes the second (asked through the channel). Whether
    /// all of it arrived.
    fn read_from_memory(
        &self,
        channel: &Channel,
        src: usize,
        location: Location,
        data: &mut [u8],
    ) -> Result<bool> {
        let allowed = self.nearby.reads_memory;
        if !allowed || data.len() < BOTH_COPY_FROM {
            return Ok(location.read_into(data, allowed));
        }
        let half = data.len() / 2;
        let (first, second) = data.split_at_mut(half);
        channel.ask_to_write(Mailbox::Messages, &Location::of(second).encode());
        let read = location.part(0, half as u64).read_into(first, true);
        let mut alive = || self.still_going(Kind::Send, src);
        let written =
            channel.await_written(Mailbox::Messages, "recv", (self.timeout, &mut alive))?;
        let rest = location.part(half as u64, second.len() as u64);
        Ok(read && (written || rest.read_into(second, true)))
    }
}
