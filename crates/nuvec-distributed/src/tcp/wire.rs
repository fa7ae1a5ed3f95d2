//! Framed traffic on a connection: every chunk of a collective carries a header (so a lost or
//! stray chunk fails the operation instead of corrupting it), and a rank whose group failed
//! tells its peers why with an abort notice between chunks, so every rank's error names the
//! rank that was lost, not only the neighbour that stopped talking.

use super::connection::Connection;
use super::frame::{Header, Kind, HEADER_BYTES};
use nuvec_core::{DType, Error, Result};
use std::time::Duration;

/// How long reading the rest of an abort notice found waiting may take.
pub(crate) const ABORT_READ_WAIT: Duration = Duration::from_millis(200);
/// Longest abort reason sent or accepted.
pub(crate) const MAX_REASON: usize = 1024;
/// Marks an abort notice whose cause names no rank.
const NO_RANK: u64 = u64::MAX;
/// Separates an abort notice's reason from where its sender was (`in all_sum #41 (...)`).
const WHERE: u8 = 0x1E;
/// Longest "where" an abort notice carries.
const MAX_WHERE: usize = 256;

fn error(op: &str, rank: Option<usize>, reason: String) -> Error {
    Error::Distributed {
        op: op.to_string(),
        rank,
        reason,
    }
}

/// Queues one chunk of collective number `sequence`.
pub(crate) fn write_chunk(
    peer: &Connection,
    kind: Kind,
    sequence: u64,
    payload: &[u8],
) -> Result<()> {
    let header = Header {
        kind: Kind::Chunk,
        dtype: DType::U8,
        sequence,
        bytes: payload.len() as u64,
    };
    peer.write(kind.name(), &[&header.encode(), payload])
}

/// Reads the next frame's header from `peer`; an abort notice becomes the error it reports.
pub(crate) fn read_header(peer: &Connection, op: &str, timeout: Duration) -> Result<Header> {
    let mut raw = [0u8; HEADER_BYTES];
    peer.read_exact(op, &mut raw, timeout)?;
    finish_header(peer, op, timeout, &raw)
}

/// Reads the start of a point-to-point message from `peer`: its header and, behind a
/// [`Kind::Send`] header, the count of the dimensions that follow, in one system call when
/// they have arrived. The count is 0 behind a header of another kind (which the caller
/// refuses; the read may then have taken up to 4 bytes beyond it). An abort notice becomes the
/// error it reports.
pub(crate) fn read_message_start(
    peer: &Connection,
    op: &str,
    timeout: Duration,
) -> Result<(Header, u32)> {
    const COUNT: usize = 4;
    let mut frame = [0u8; HEADER_BYTES + COUNT];
    let frame_bytes = |raw: &[u8; HEADER_BYTES]| match Header::decode(raw) {
        Ok(header) if header.kind == Kind::Send => HEADER_BYTES + COUNT,
        // An abort notice or another frame: only the header is needed to report it.
        _ => HEADER_BYTES,
    };
    let filled = peer.read_message_frame(op, &mut frame, timeout, &frame_bytes)?;
    let (raw, after) = frame
        .split_first_chunk::<HEADER_BYTES>()
        .expect("the frame has room for a header");
    let header = finish_frame(peer, op, timeout, raw, &after[..filled - HEADER_BYTES])?;
    let count = match after.first_chunk::<COUNT>() {
        Some(count) if header.kind == Kind::Send => u32::from_le_bytes(*count),
        _ => 0,
    };
    Ok((header, count))
}

/// Decodes a header read from `peer`; an abort notice becomes the error it reports.
fn finish_header(
    peer: &Connection,
    op: &str,
    timeout: Duration,
    raw: &[u8; HEADER_BYTES],
) -> Result<Header> {
    finish_frame(peer, op, timeout, raw, &[])
}

/// Decodes a header read from `peer` along with `after`, the bytes read behind it; an abort
/// notice becomes the error it reports, its reason taken from `after` and then the connection.
fn finish_frame(
    peer: &Connection,
    op: &str,
    timeout: Duration,
    raw: &[u8; HEADER_BYTES],
    after: &[u8],
) -> Result<Header> {
    let header = Header::decode(raw).map_err(|reason| error(op, Some(peer.rank), reason))?;
    if header.kind != Kind::Abort {
        return Ok(header);
    }
    if header.bytes > MAX_REASON as u64 {
        return Err(error(
            op,
            Some(peer.rank),
            format!("rank {} sent a corrupt abort notice", peer.rank),
        ));
    }
    let length = header.bytes as usize;
    let mut reason = after[..after.len().min(length)].to_vec();
    let have = reason.len();
    reason.resize(length, 0);
    peer.read_exact(op, &mut reason[have..], timeout)?;
    if let Some(place) = notice_place(&reason) {
        peer.heard_place(place);
    }
    Err(abort_error(op, peer.rank, &header, &reason))
}

/// The error an abort notice from rank `from` reports: `header` is the notice's, `reason` the
/// text that followed it. It names the rank the notice names (the one that was lost), else
/// `from`.
pub(crate) fn abort_error(op: &str, from: usize, header: &Header, reason: &[u8]) -> Error {
    let culprit = (header.sequence != NO_RANK).then_some(header.sequence as usize);
    let reason = reason.split(|b| *b == WHERE).next().unwrap_or(reason);
    error(
        op,
        culprit.or(Some(from)),
        format!(
            "rank {from} stopped because the group failed: {}",
            String::from_utf8_lossy(reason)
        ),
    )
}

/// [`read_frame_of`] of a frame whose payload is the header's count of bytes.
#[cfg(test)]
pub(crate) fn read_frame(
    peer: &Connection,
    op: &str,
    frame: &mut [u8],
    timeout: Duration,
) -> Result<Header> {
    read_frame_of(peer, op, frame, timeout, |header| header.bytes)
}

/// Reads one frame, header and payload in one go (one system call when it has arrived), into
/// `frame` (room for the header and the payload this rank expects) and returns its header;
/// the payload, `payload(header)` bytes, is `frame[HEADER_BYTES..]` when the header's size
/// matches. A frame of another size comes back for the caller's check of the header to fail:
/// a shorter one ends the read without waiting for more, though the read may have taken bytes
/// beyond it, which is why the caller must fail the group then (collectives do). An abort
/// notice becomes the error it reports.
pub(crate) fn read_frame_of(
    peer: &Connection,
    op: &str,
    frame: &mut [u8],
    timeout: Duration,
    payload: impl Fn(&Header) -> u64,
) -> Result<Header> {
    let frame_bytes = |raw: &[u8; HEADER_BYTES]| match Header::decode(raw) {
        Ok(header) if header.kind != Kind::Abort => {
            HEADER_BYTES.saturating_add(usize::try_from(payload(&header)).unwrap_or(usize::MAX))
        }
        // An abort notice or a bad header: only the header is needed to report it.
        _ => HEADER_BYTES,
    };
    // Checked before reading, so a caller's mistake consumes nothing from the connection.
    let room = frame.len();
    let no_room = || {
        error(
            op,
            Some(peer.rank),
            format!("no room for a frame header in {room} bytes"),
        )
    };
    if room < HEADER_BYTES {
        return Err(no_room());
    }
    let filled = peer.read_frame(op, frame, timeout, &frame_bytes)?;
    let (raw, after) = frame
        .split_first_chunk::<HEADER_BYTES>()
        .ok_or_else(no_room)?;
    finish_frame(
        peer,
        op,
        timeout,
        raw,
        &after[..filled.saturating_sub(HEADER_BYTES)],
    )
}

/// Reads one chunk of collective number `sequence` into `buf` (which has its exact size).
pub(crate) fn read_chunk(
    peer: &Connection,
    kind: Kind,
    sequence: u64,
    buf: &mut [u8],
    timeout: Duration,
) -> Result<()> {
    let header = read_header(peer, kind.name(), timeout)?;
    if header.kind != Kind::Chunk || header.sequence != sequence || header.bytes != buf.len() as u64
    {
        return Err(error(
            kind.name(),
            Some(peer.rank),
            format!(
                "expected a chunk of {} bytes of call #{sequence} from rank {}, got {}: a frame was lost or the ranks are out of step",
                buf.len(),
                peer.rank,
                header.describe()
            ),
        ));
    }
    peer.read_exact(kind.name(), buf, timeout)
}

/// Tells `peer` that the group failed because of `cause` (queued after anything already sent,
/// so it arrives between chunks).
pub(crate) fn write_abort(peer: &Connection, cause: &Error, place: Option<&str>) {
    let _ = peer.write("abort", &[&abort_notice(cause, place)]);
}

/// `text` cut to at most `limit` bytes, on a character boundary.
fn cut(text: &str, limit: usize) -> &str {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The abort notice that tells a peer the group failed because of `cause`: a header naming
/// the rank at fault (if the cause names one), the cause's text and, when given, where this
/// rank is (`in all_sum #41 (...)`, after a [`WHERE`] byte), cut to [`MAX_REASON`] in all.
pub(crate) fn abort_notice(cause: &Error, place: Option<&str>) -> Vec<u8> {
    let (culprit, text) = match cause {
        Error::Distributed { rank, .. } => (rank.map_or(NO_RANK, |r| r as u64), cause.to_string()),
        other => (NO_RANK, other.to_string()),
    };
    let place = place.map(|p| cut(p, MAX_WHERE));
    let room = MAX_REASON - place.map_or(0, |p| p.len() + 1);
    let mut payload = cut(&text, room).as_bytes().to_vec();
    if let Some(place) = place {
        payload.push(WHERE);
        payload.extend_from_slice(place.as_bytes());
    }
    let header = Header {
        kind: Kind::Abort,
        dtype: DType::U8,
        sequence: culprit,
        bytes: payload.len() as u64,
    };
    let mut frame = header.encode().to_vec();
    frame.extend_from_slice(&payload);
    frame
}

/// Where the sender of an abort notice whose reason is `reason` said it was, made printable
/// (a peer's text never carries control characters into this rank's errors).
pub(crate) fn notice_place(reason: &[u8]) -> Option<String> {
    let at = reason.iter().position(|b| *b == WHERE)?;
    let place = String::from_utf8_lossy(&reason[at + 1..]);
    Some(place.chars().filter(|c| !c.is_control()).collect())
}

/// When `raw`, the header waiting on `peer`, is an abort notice: the error the notice reports,
/// read whole (it names the rank that was lost and why). Waits at most `wait` for its reason.
pub(crate) fn take_abort(
    peer: &Connection,
    op: &str,
    raw: &[u8; HEADER_BYTES],
    wait: Duration,
) -> Option<Error> {
    pending_abort(raw)?;
    // Reading an abort notice always fails, with the notice (or with why it could not be read).
    read_header(peer, op, wait).err()
}

/// Whether the bytes waiting on an idle connection begin an abort notice.
pub(crate) fn pending_abort(raw: &[u8; HEADER_BYTES]) -> Option<Option<usize>> {
    match Header::decode(raw) {
        Ok(header) if header.kind == Kind::Abort => {
            Some((header.sequence != NO_RANK).then_some(header.sequence as usize))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::connection_tests::pair;
    use super::*;
    use std::io::{Read, Write};

    const WAIT: Duration = Duration::from_secs(5);

    fn chunk(sequence: u64, payload: &[u8]) -> Vec<u8> {
        let header = Header {
            kind: Kind::Chunk,
            dtype: DType::U8,
            sequence,
            bytes: payload.len() as u64,
        };
        [&header.encode()[..], payload].concat()
    }

    #[test]
    fn a_frame_is_read_whole_and_the_next_one_stays_on_the_connection() {
        let (peer, mut far) = pair();
        far.write_all(&chunk(3, b"payload")).unwrap();
        far.write_all(&chunk(4, b"next")).unwrap();
        let mut frame = vec![0u8; HEADER_BYTES + 7];
        let header = read_frame(&peer, "all_sum", &mut frame, WAIT).unwrap();
        assert_eq!(
            (header.kind, header.sequence, header.bytes),
            (Kind::Chunk, 3, 7)
        );
        assert_eq!(&frame[HEADER_BYTES..], b"payload");
        let mut next = [0u8; 4];
        let header = read_header(&peer, "all_sum", WAIT).unwrap();
        assert_eq!(header.sequence, 4);
        peer.read_exact("all_sum", &mut next, WAIT).unwrap();
        assert_eq!(&next, b"next");
    }

    #[test]
    fn a_frame_of_another_size_comes_back_for_the_caller_to_reject() {
        let (peer, mut far) = pair();
        far.write_all(&chunk(1, b"abc")).unwrap();
        // Room for 8 payload bytes, and nothing more coming: the read ends with the frame
        // instead of waiting for bytes that were never sent.
        let mut frame = vec![0u8; HEADER_BYTES + 8];
        let header = read_frame(&peer, "all_sum", &mut frame, WAIT).unwrap();
        assert_eq!(header.bytes, 3);
        assert_eq!(&frame[HEADER_BYTES..HEADER_BYTES + 3], b"abc");
        // A longer one fills the room, and its header tells the caller.
        far.write_all(&chunk(2, b"0123456789")).unwrap();
        let header = read_frame(&peer, "all_sum", &mut frame, WAIT).unwrap();
        assert_eq!((header.sequence, header.bytes), (2, 10));
    }

    #[test]
    fn an_abort_notice_shorter_than_the_frame_reports_its_whole_reason() {
        for split in [false, true] {
            let (peer, far) = pair();
            let cause = Error::Distributed {
                op: "all_sum".into(),
                rank: Some(3),
                reason: "rank 3 timed out".into(),
            };
            // The far end's notice, as a rank that failed writes it.
            let (notifier, mut raw) = pair();
            write_abort(
                &notifier,
                &cause,
                Some("in all_sum #4 (float32 [8], a.rs:1)\n"),
            );
            notifier.flush("abort", WAIT).unwrap();
            let mut notice = vec![0u8; HEADER_BYTES];
            raw.read_exact(&mut notice).unwrap();
            let length = Header::decode(notice[..].try_into().unwrap())
                .unwrap()
                .bytes;
            notice.resize(HEADER_BYTES + length as usize, 0);
            raw.read_exact(&mut notice[HEADER_BYTES..]).unwrap();
            let writer = std::thread::spawn(move || {
                let mut far = far;
                if split {
                    // The header alone first, the reason a moment later.
                    far.write_all(&notice[..HEADER_BYTES]).unwrap();
                    far.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                    far.write_all(&notice[HEADER_BYTES..]).unwrap();
                } else {
                    far.write_all(&notice).unwrap();
                }
                far
            });
            let mut frame = vec![0u8; HEADER_BYTES + 4096];
            let error = read_frame(&peer, "all_sum", &mut frame, WAIT).unwrap_err();
            let _far = writer.join().unwrap();
            let text = error.to_string();
            assert!(text.contains("rank 3 timed out"), "{text}");
            assert!(!text.contains("a.rs"), "{text}");
            assert!(
                matches!(error, Error::Distributed { rank: Some(3), .. }),
                "{error:?}"
            );
            // Where the sender was comes apart, without its control characters.
            assert_eq!(
                peer.place().as_deref(),
                Some("in all_sum #4 (float32 [8], a.rs:1)")
            );
        }
    }

    #[test]
    fn a_message_start_is_its_header_and_dimension_count_and_leaves_the_rest() {
        let (peer, mut far) = pair();
        let header = Header {
            kind: Kind::Send,
            dtype: DType::F32,
            sequence: 0,
            bytes: 8,
        };
        let message = [
            &header.encode()[..],
            &1u32.to_le_bytes(),
            &2i32.to_le_bytes(),
        ]
        .concat();
        far.write_all(&message).unwrap();
        let (got, count) = read_message_start(&peer, "recv", WAIT).unwrap();
        assert_eq!((got.kind, got.bytes, count), (Kind::Send, 8, 1));
        let mut dims = [0u8; 4];
        peer.read_exact("recv", &mut dims, WAIT).unwrap();
        assert_eq!(i32::from_le_bytes(dims), 2);
    }

    #[test]
    fn an_abort_notice_with_a_reason_shorter_than_a_dimension_count_is_reported_at_once() {
        let (peer, mut far) = pair();
        let header = Header {
            kind: Kind::Abort,
            dtype: DType::U8,
            sequence: 1,
            bytes: 2,
        };
        // Nothing follows the two bytes of reason: a read waiting for a count would hang.
        far.write_all(&[&header.encode()[..], b"no"].concat())
            .unwrap();
        let started = std::time::Instant::now();
        let error = read_message_start(&peer, "recv", WAIT).unwrap_err();
        assert!(started.elapsed() < WAIT, "waited out the timeout: {error}");
        let text = error.to_string();
        assert!(text.contains("group failed: no"), "{text}");
        assert!(
            matches!(error, Error::Distributed { rank: Some(1), .. }),
            "{error:?}"
        );
    }
}
