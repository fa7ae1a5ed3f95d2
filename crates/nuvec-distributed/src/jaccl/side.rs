//! JACCL's side channel: the TCP star through the coordinator (rank 0) that carries the
//! queue pairs' addresses while the group forms, and afterwards tells every rank when any
//! rank leaves. Its connections open with the ring's handshake, so a pre-shared key
//! authenticates them; MLX's side channel has no authentication. A caller's own all-gather
//! can replace it ([`super::Options::side_channel`]).
//!
//! Once the group has formed, a watcher thread per rank keeps the star (`watch.rs`): it finds
//! lost ranks, and answers where every rank is when a collective fails.

use super::options::AllGather;
use super::watch::{Losses, Watch};
use crate::hostfile::Address;
use crate::platform::peek_now;
use crate::whereabouts::Heard;
use nuvec_core::{Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

/// The most bytes one rank may put on the side channel at once (addresses are far smaller).
const MAX_RECORD: u64 = 1 << 20;

fn side_error(rank: usize, reason: String) -> Error {
    Error::Distributed {
        op: "jaccl side channel".into(),
        rank: Some(rank),
        reason,
    }
}

/// The side channel of one rank.
pub(crate) enum SideChannel {
    /// The star: rank 0 holds a connection to every rank, the others one to rank 0.
    Star {
        rank: usize,
        streams: Vec<Option<TcpStream>>,
        watch: Watch,
    },
    /// The caller's all-gather.
    Custom {
        rank: usize,
        size: usize,
        all_gather: AllGather,
    },
    /// A group split from another: it formed over its parent's collectives and watches
    /// through the parent's side channel (its losses, when the parent has a star).
    Inherited { rank: usize, losses: Option<Losses> },
}

impl std::fmt::Debug for SideChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SideChannel::Star { rank, .. } => write!(f, "SideChannel::Star(rank {rank})"),
            SideChannel::Custom { rank, .. } => write!(f, "SideChannel::Custom(rank {rank})"),
            SideChannel::Inherited { .. } => write!(f, "SideChannel::Inherited"),
        }
    }
}

fn write_record(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(&(bytes.len() as u64).to_le_bytes())?;
    stream.write_all(bytes)
}

fn read_record(stream: &mut TcpStream) -> std::result::Result<Vec<u8>, String> {
    let mut length = [0u8; 8];
    stream.read_exact(&mut length).map_err(describe)?;
    let length = u64::from_le_bytes(length);
    if length > MAX_RECORD {
        return Err(format!(
            "a record of {length} bytes is too long for the side channel"
        ));
    }
    let mut bytes = vec![0; length as usize];
    stream.read_exact(&mut bytes).map_err(describe)?;
    Ok(bytes)
}

fn describe(error: std::io::Error) -> String {
    match error.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            "no answer within the timeout (NUVEC_DISTRIBUTED_TIMEOUT)".into()
        }
        ErrorKind::UnexpectedEof => "the connection closed (the process ended?)".into(),
        _ => error.to_string(),
    }
}

impl SideChannel {
    /// The star through `coordinator`, formed within `options`' timeout.
    pub(crate) fn star(
        coordinator: &Address,
        rank: usize,
        size: usize,
        options: &crate::Options,
    ) -> Result<SideChannel> {
        let streams = crate::tcp::form_star(coordinator, rank, size, options)?;
        for stream in streams.iter().flatten() {
            stream
                .set_read_timeout(Some(options.timeout))
                .and_then(|()| stream.set_write_timeout(Some(options.timeout)))
                .and_then(|()| stream.set_nodelay(true))
                .and_then(|()| crate::platform::enable_keepalive(stream))
                .map_err(|e| side_error(rank, e.to_string()))?;
        }
        Ok(SideChannel::Star {
            rank,
            streams,
            watch: Watch::new(crate::whereabouts::listen_for(options.timeout)),
        })
    }

    /// Every rank's `bytes`, in rank order (lengths may differ between ranks).
    pub(crate) fn all_gather(&mut self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        match self {
            SideChannel::Star { rank, streams, .. } => {
                let rank = *rank;
                if rank == 0 {
                    let mut all = vec![bytes.to_vec()];
                    for (peer, stream) in streams.iter_mut().enumerate().skip(1) {
                        let stream = stream.as_mut().expect("rank 0 holds every connection");
                        all.push(read_record(stream).map_err(|reason| {
                            side_error(rank, format!("reading rank {peer}'s record: {reason}"))
                        })?);
                    }
                    let mut answer = Vec::new();
                    for record in &all {
                        answer.extend_from_slice(&(record.len() as u64).to_le_bytes());
                        answer.extend_from_slice(record);
                    }
                    for (peer, stream) in streams.iter_mut().enumerate().skip(1) {
                        let stream = stream.as_mut().expect("rank 0 holds every connection");
                        write_record(stream, &answer).map_err(|e| {
                            side_error(rank, format!("answering rank {peer}: {}", describe(e)))
                        })?;
                    }
                    Ok(all)
                } else {
                    let stream = streams[0].as_mut().expect("a connection to rank 0");
                    write_record(stream, bytes).map_err(|e| {
                        side_error(rank, format!("writing to rank 0: {}", describe(e)))
                    })?;
                    let answer = read_record(stream)
                        .map_err(|reason| side_error(rank, format!("rank 0: {reason}")))?;
                    split_records(&answer)
                        .ok_or_else(|| side_error(rank, "rank 0 sent a malformed answer".into()))
                }
            }
            SideChannel::Custom {
                rank,
                size,
                all_gather,
            } => gather_records(*rank, *size, bytes, &**all_gather),
            SideChannel::Inherited { rank, .. } => Err(side_error(
                *rank,
                "a split group has no side channel of its own".into(),
            )),
        }
    }

    /// The star's record of lost ranks (`None` for any other side channel).
    pub(crate) fn losses(&self) -> Option<Losses> {
        match self {
            SideChannel::Star { watch, .. } => Some(watch.lost.clone()),
            SideChannel::Inherited { losses, .. } => losses.clone(),
            SideChannel::Custom { .. } => None,
        }
    }

    /// Starts the star's watcher (nothing for a caller's side channel): from now on the
    /// star carries only notices of ranks that left.
    pub(crate) fn start_watching(&mut self) -> Result<()> {
        let SideChannel::Star {
            rank,
            streams,
            watch,
        } = self
        else {
            return Ok(());
        };
        let rank = *rank;
        let clones = streams
            .iter()
            .map(|s| s.as_ref().map(TcpStream::try_clone).transpose())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| side_error(rank, format!("cannot watch the side channel: {e}")))?;
        watch.start(rank, clones).map_err(|e| {
            side_error(
                rank,
                format!("cannot start the side channel's watcher: {e}"),
            )
        })?;
        Ok(())
    }

    /// Checks that every side-channel connection is still open and that no rank was reported
    /// gone, naming the first rank that left.
    pub(crate) fn health(&self) -> std::result::Result<(), String> {
        if let SideChannel::Inherited {
            losses: Some(losses),
            ..
        } = self
        {
            return match crate::sync::lock(losses).clone() {
                Some(lost) => Err(format!(
                    "the group it was split from lost a rank (numbered as there): {lost}"
                )),
                None => Ok(()),
            };
        }
        let SideChannel::Star {
            rank,
            streams,
            watch,
        } = self
        else {
            return Ok(());
        };
        if let Some(lost) = crate::sync::lock(&watch.lost).clone() {
            return Err(lost);
        }
        let mut probe = [0u8; 1];
        for (peer, stream) in streams.iter().enumerate() {
            let Some(stream) = stream else { continue };
            match peek_now(stream, &mut probe) {
                Ok(0) => {
                    return Err(format!(
                        "rank {peer} closed its side-channel connection to rank {rank} (its process ended or closed the group)"
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("the side-channel connection to rank {peer} failed: {e}")),
            }
        }
        Ok(())
    }

    /// Hands the star's watcher the group's flight recorder (nothing for other side channels).
    pub(crate) fn attach_trace(&self, trace: Arc<nuvec_core::distributed::Trace>) {
        if let SideChannel::Star { watch, .. } = self {
            watch.attach_trace(trace);
        }
    }

    /// Where every rank of the group of `size` is, as the star's watchers tell it, and how
    /// long rank 0 listened; `None` without a star (a caller's side channel, a split group).
    pub(crate) fn whereabouts(&self, size: usize) -> Option<(Vec<Heard>, Duration)> {
        match self {
            SideChannel::Star { rank, watch, .. } => Some(watch.whereabouts(*rank, size)),
            _ => None,
        }
    }

    /// Closes the connections (and so ends the watcher).
    pub(crate) fn close(&mut self) {
        if let SideChannel::Star { streams, watch, .. } = self {
            watch.stop();
            for stream in streams.iter_mut().filter_map(Option::take) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// Every rank's `bytes` (lengths may differ) through `all_gather`, which takes the same
/// length from every rank: the lengths first, then every record padded to the longest.
pub(crate) fn gather_records(
    rank: usize,
    size: usize,
    bytes: &[u8],
    all_gather: &dyn Fn(&[u8]) -> Result<Vec<u8>>,
) -> Result<Vec<Vec<u8>>> {
    let lengths = all_gather(&(bytes.len() as u64).to_le_bytes())?;
    if lengths.len() != 8 * size {
        return Err(side_error(
            rank,
            format!(
                "the side channel returned {} bytes for {size} ranks of 8 bytes",
                lengths.len()
            ),
        ));
    }
    let lengths: Vec<usize> = lengths
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()) as usize)
        .collect();
    let longest = lengths.iter().copied().max().unwrap_or(0);
    if longest as u64 > MAX_RECORD {
        return Err(side_error(
            rank,
            format!("a record of {longest} bytes is too long for the side channel"),
        ));
    }
    let mut padded = bytes.to_vec();
    padded.resize(longest, 0);
    let all = all_gather(&padded)?;
    if all.len() != longest * size {
        return Err(side_error(
            rank,
            format!(
                "the side channel returned {} bytes for {size} ranks of {longest}",
                all.len()
            ),
        ));
    }
    Ok(lengths
        .iter()
        .enumerate()
        .map(|(r, &len)| all[r * longest..r * longest + len].to_vec())
        .collect())
}

fn split_records(mut bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut records = Vec::new();
    while !bytes.is_empty() {
        let length = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
        let record = bytes.get(8..8usize.checked_add(length)?)?;
        records.push(record.to_vec());
        bytes = &bytes[8 + length..];
    }
    Some(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_records_refuses_truncated_answers() {
        let mut answer = Vec::new();
        for record in [&b"ab"[..], b"", b"xyz"] {
            answer.extend_from_slice(&(record.len() as u64).to_le_bytes());
            answer.extend_from_slice(record);
        }
        let records = split_records(&answer).unwrap();
        assert_eq!(records, vec![b"ab".to_vec(), vec![], b"xyz".to_vec()]);
        assert!(split_records(&answer[..answer.len() - 1]).is_none());
        assert!(split_records(&[255; 8]).is_none());
    }
}
