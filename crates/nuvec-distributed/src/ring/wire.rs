//! Framed traffic on a connection: every chunk of a collective carries a header (so a lost or
//! stray chunk fails the operation instead of corrupting it), and a rank whose group failed
//! tells its peers why with an abort notice between chunks, so every rank's error names the
//! rank that was lost, not only the neighbour that stopped talking.

use super::frame::{Header, Kind, HEADER_BYTES};
use super::peer::Peer;
use nuvec_core::{DType, Error, Result};
use std::time::Duration;

/// Longest abort reason sent or accepted.
const MAX_REASON: usize = 1024;
/// Marks an abort notice whose cause names no rank.
const NO_RANK: u64 = u64::MAX;

fn error(op: &str, rank: Option<usize>, reason: String) -> Error {
    Error::Distributed {
        op: op.to_string(),
        rank,
        reason,
    }
}

/// Queues one chunk of collective number `sequence`.
pub(crate) fn write_chunk(peer: &Peer, kind: Kind, sequence: u64, payload: &[u8]) -> Result<()> {
    let header = Header {
        kind: Kind::Chunk,
        dtype: DType::U8,
        sequence,
        bytes: payload.len() as u64,
    };
    peer.write(kind.name(), &[&header.encode(), payload])
}

/// Reads the next frame's header from `peer`; an abort notice becomes the error it reports.
pub(crate) fn read_header(peer: &Peer, op: &str, timeout: Duration) -> Result<Header> {
    let mut raw = [0u8; HEADER_BYTES];
    peer.read_exact(op, &mut raw, timeout)?;
    finish_header(peer, op, timeout, &raw)
}

/// [`read_header`] of a point-to-point message (polling as [`Peer::read_message`] does).
pub(crate) fn read_message_header(peer: &Peer, op: &str, timeout: Duration) -> Result<Header> {
    let mut raw = [0u8; HEADER_BYTES];
    peer.read_message(op, &mut raw, timeout)?;
    finish_header(peer, op, timeout, &raw)
}

/// Decodes a header read from `peer`; an abort notice becomes the error it reports.
fn finish_header(
    peer: &Peer,
    op: &str,
    timeout: Duration,
    raw: &[u8; HEADER_BYTES],
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
    let mut reason = vec![0u8; header.bytes as usize];
    peer.read_exact(op, &mut reason, timeout)?;
    let culprit = (header.sequence != NO_RANK).then_some(header.sequence as usize);
    Err(error(
        op,
        culprit.or(Some(peer.rank)),
        format!(
            "rank {} stopped because the group failed: {}",
            peer.rank,
            String::from_utf8_lossy(&reason)
        ),
    ))
}

/// Reads one chunk of collective number `sequence` into `buf` (which has its exact size).
pub(crate) fn read_chunk(
    peer: &Peer,
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
pub(crate) fn write_abort(peer: &Peer, cause: &Error) {
    let (culprit, text) = match cause {
        Error::Distributed { rank, .. } => (rank.map_or(NO_RANK, |r| r as u64), cause.to_string()),
        other => (NO_RANK, other.to_string()),
    };
    let mut end = text.len().min(MAX_REASON);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let header = Header {
        kind: Kind::Abort,
        dtype: DType::U8,
        sequence: culprit,
        bytes: end as u64,
    };
    let mut frame = header.encode().to_vec();
    frame.extend_from_slice(&text.as_bytes()[..end]);
    let _ = peer.write("abort", &[&frame]);
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
