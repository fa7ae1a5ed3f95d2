//! Point-to-point messages between ranks on one machine through the mailbox
//! (`shm/mailbox.rs`): `send` posts the message's header and shape, and its payload too when
//! they fit in a post; a larger payload follows as before, on the connection with the
//! payload through the channel's slots. `recv` waits on the mailbox alone, so a small
//! message costs no system call on either side, and reads what the post says follows.
//!
//! Every message to a rank on this machine is posted, whatever its size, so sender and
//! receiver never look in different places: a receiver expecting another size or type
//! learns it from the post and drains the message before it reports the mismatch.

use super::network::Network;
use super::transport::Transport;
use crate::shm::{Channel, Mailbox, MESSAGE_POST_BYTES};
use crate::tcp::frame::{Header, Kind, HEADER_BYTES};
use nuvec_core::{DType, Error, Result};

/// The most dimensions a received message may claim (a larger count is a corrupt frame, not a
/// reason to allocate).
pub(crate) const MAX_NDIM: usize = 64;

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
        let parts: &[&[u8]] = if inline { &[shape, data] } else { &[shape] };
        let mut alive = || self.still_going(Kind::Send, dst);
        channel.post(
            Mailbox::Messages,
            &header,
            0,
            parts,
            (self.timeout, &mut alive),
        )?;
        if inline {
            return Ok(());
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
        let inline = (meta as u64).checked_add(header.bytes) == Some(post.piece.len() as u64);
        if post.piece.len() < meta || (!inline && post.piece.len() != meta) {
            return Err(corrupt(format!("holds {} bytes", post.piece.len())));
        }
        if !inline {
            channel.release(Mailbox::Messages);
            return Ok(Ok(Posted::OnConnection));
        }
        let their_shape: Vec<i32> = post.piece[4..meta]
            .chunks_exact(4)
            .map(|d| i32::from_le_bytes([d[0], d[1], d[2], d[3]]))
            .collect();
        if header.dtype != dtype || their_shape != shape || header.bytes as usize != data.len() {
            channel.release(Mailbox::Messages);
            return Ok(Err(Refused(format!(
                "rank {src} sent {} {their_shape:?}, this rank (rank {}) expected {dtype} {shape:?}",
                header.dtype, self.rank
            ))));
        }
        data.copy_from_slice(&post.piece[meta..]);
        channel.release(Mailbox::Messages);
        Ok(Ok(Posted::Received))
    }
}
