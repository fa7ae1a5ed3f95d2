//! All-to-all, fixed and variable: region `j` of every rank's input goes to rank `j`, which
//! puts the region from rank `i` at region `i` of its output (for `all_to_all` every region
//! is one block; for `all_to_all_v` their sizes are the counts, checked to agree first).
//!
//! - On one machine: every rank posts its region for rank `j` to rank `j` through the
//!   mailboxes and takes its region from every peer; regions of [`ONE_COPY_FROM`] bytes or
//!   more are read straight from the peers' memory instead (`single_copy.rs`).
//! - Where every rank reaches every other: in `size − 1` steps, at step `s` each rank sends
//!   its region for rank `r + s` and receives the region of rank `r − s`, chunk by chunk, so
//!   every region crosses one connection once; regions of at most [`AT_ONCE_BYTES`] all go
//!   out first and are then all received, in one round trip (the same frames either way).
//! - Otherwise the caller falls back to the communicator's default (an all-gather).

use super::{single_copy, tuning, Calls, CHUNK_BYTES};
use crate::ring::transport::{same_call, Transport};
use crate::schedule::chunks;
use crate::tcp::frame::{Header, Kind};
use nuvec_core::{DType, Error, Result};

/// The smallest region read from a peer's memory (as for all-gathers' blocks).
const ONE_COPY_FROM: usize = 32 << 10;
/// Over TCP, regions up to this size all go out before any is received (one round trip, where
/// the latency of each step is most of the time); larger ones go step by step.
const AT_ONCE_BYTES: usize = 64 << 10;

/// Whether this transport has a path for all-to-all (else the default's all-gather).
pub(crate) fn has_path<T: Transport + ?Sized>(t: &T) -> bool {
    t.size() == 1 || t.mailboxes().is_some() || t.full_mesh()
}

/// `bytes` cut into consecutive regions of `lengths` (which add up to at most its length).
fn regions(bytes: &[u8], lengths: impl IntoIterator<Item = usize>) -> Vec<&[u8]> {
    let mut at = 0;
    lengths
        .into_iter()
        .map(|len| {
            at += len;
            &bytes[at - len..at]
        })
        .collect()
}

/// [`regions`] of a buffer written to.
fn regions_mut(mut bytes: &mut [u8], lengths: impl IntoIterator<Item = usize>) -> Vec<&mut [u8]> {
    lengths
        .into_iter()
        .map(|len| {
            let (head, tail) = std::mem::take(&mut bytes).split_at_mut(len);
            bytes = tail;
            head
        })
        .collect()
}

/// All-to-all of `input` into `output` (as long; both `size` blocks).
pub(crate) fn all_to_all<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    dtype: DType,
) -> Result<()> {
    let block = input.len() / t.size();
    let header = (Kind::AllToAll, dtype, input.len());
    // On one machine, reading the peers' blocks or taking their posts: the crossing point
    // is timed.
    let timed =
        t.mailboxes().is_some() && cfg!(target_os = "linux") && super::TUNED.contains(&block);
    let bucket = timed.then(|| tuning::bucket(Kind::AllToAll, t.size(), block));
    super::tuned(t, calls, bucket, |calls, path| {
        let reads = (path == tuning::Path::Thresholds) == (block >= ONE_COPY_FROM);
        let from = if reads { 0 } else { usize::MAX };
        // The blocks' lengths as an iterator: no vector of them on each call's path.
        let blocks = || std::iter::repeat_n(block, t.size());
        let parts = (regions(input, blocks()), regions_mut(output, blocks()));
        exchange(t, calls, header, parts, from)
    })
}

/// All-to-all of `send[j]` rows of `row_bytes` of `input` to each rank `j`, the `recv[j]`
/// rows from each rank `j` into `output`, in rank order (the counts checked to agree).
pub(crate) fn all_to_all_v<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    (send, recv, row_bytes): (&[usize], &[usize], usize),
    dtype: DType,
) -> Result<()> {
    // Every rank's header names the row size, which the ranks share.
    let header = (Kind::AllToAllV, dtype, row_bytes);
    let parts = (
        regions(input, send.iter().map(|c| c * row_bytes)),
        regions_mut(output, recv.iter().map(|c| c * row_bytes)),
    );
    exchange(t, calls, header, parts, ONE_COPY_FROM)
}

/// The exchange of `sends[j]` to rank `j` into `lands[j]` from rank `j`, on the path this
/// transport has: on one machine regions of `one_copy_from` bytes or more read from the
/// sender's memory; over TCP in chunks of [`CHUNK_BYTES`] (nothing is reduced on the way, so
/// the ring passes' smaller chunks for large buffers, kept in cache for the sums, would only
/// mean more frames).
fn exchange<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (kind, dtype, bytes): (Kind, DType, usize),
    (sends, mut lands): (Vec<&[u8]>, Vec<&mut [u8]>),
    one_copy_from: usize,
) -> Result<()> {
    let (rank, n) = (t.rank(), t.size());
    if n == 1 {
        lands[0].copy_from_slice(sends[0]);
        return Ok(());
    }
    if let Some(near) = t.mailboxes() {
        let header = (kind, dtype, bytes);
        return single_copy::exchange_regions(
            (t, near),
            calls,
            header,
            (sends, lands),
            one_copy_from,
        );
    }
    let ours = calls.header(t, kind, dtype, bytes);
    lands[rank].copy_from_slice(sends[rank]);
    let small = |r: &[u8]| r.len() <= AT_ONCE_BYTES.min(CHUNK_BYTES);
    if sends.iter().all(|r| small(r)) && lands.iter().all(|r| small(r)) {
        all_at_once(t, &ours, &sends, &mut lands)?;
    } else {
        for step in 1..n {
            let (to, from) = ((rank + step) % n, (rank + n - step) % n);
            pairwise_step(
                t,
                &ours,
                (to, sends[to]),
                (from, &mut *lands[from]),
                CHUNK_BYTES,
            )?;
        }
    }
    for peer in (0..n).filter(|&p| p != rank) {
        t.finish_exchange(peer, kind.name())?;
    }
    Ok(())
}

/// The frame of one chunk of `len` bytes of the call `ours`.
fn chunk_header(ours: &Header, len: usize) -> Header {
    Header {
        kind: Kind::Chunk,
        dtype: DType::U8,
        sequence: ours.sequence,
        bytes: len as u64,
    }
}

/// Regions riding in the call's header frame, one frame to each peer: every send first (the
/// transport queues what the socket does not take, so no rank waits on a peer's read), then
/// every receive, so the exchange costs one round trip instead of one per step. Both ends
/// know each region's size once the headers match (`all_to_all`'s from the header's size,
/// `all_to_all_v`'s from the counts checked before).
fn all_at_once<T: Transport + ?Sized>(
    t: &T,
    ours: &Header,
    sends: &[&[u8]],
    lands: &mut [&mut [u8]],
) -> Result<()> {
    let (rank, n, name) = (t.rank(), t.size(), ours.kind.name());
    for step in 1..n {
        let to = (rank + step) % n;
        t.send_frame(to, 0, ours, sends[to])?;
    }
    for step in 1..n {
        let from = (rank + n - step) % n;
        same_call(rank, from, &t.recv_header(from, 0, name)?, ours)?;
        let land = &mut *lands[from];
        if !land.is_empty() {
            t.recv_payload(from, 0, name, land)?;
        }
    }
    Ok(())
}

/// Reads the next frame's header from `from`, which must be a chunk of `len` bytes of `ours`.
fn expect_chunk<T: Transport + ?Sized>(
    t: &T,
    ours: &Header,
    from: usize,
    len: usize,
) -> Result<()> {
    let (rank, name) = (t.rank(), ours.kind.name());
    let theirs = t.recv_header(from, 0, name)?;
    if theirs == chunk_header(ours, len) {
        return Ok(());
    }
    Err(Error::Distributed {
        op: name.into(),
        rank: Some(from),
        reason: format!(
            "rank {from} sent {}, where rank {rank} expected a chunk of {len} bytes of call #{}",
            theirs.describe(),
            ours.sequence
        ),
    })
}

/// One step of the pairwise exchange: the header to `to`, then the region in chunks, each
/// sent before the same chunk is received from `from` (whose header is checked before its
/// first chunk is used): every rank sends to one and receives from another, and the sockets
/// keep moving. Chunks go as frames on the connections, never through a shared-memory
/// channel, whose writer waits for room: with regions of different sizes a rank may send
/// several chunks in a row, and a ring of ranks waiting for room would never read.
fn pairwise_step<T: Transport + ?Sized>(
    t: &T,
    ours: &Header,
    (to, send): (usize, &[u8]),
    (from, land): (usize, &mut [u8]),
    chunk: usize,
) -> Result<()> {
    let (rank, name) = (t.rank(), ours.kind.name());
    t.send_frame(to, 0, ours, &[])?;
    let mut outgoing = chunks(0..send.len(), chunk);
    let mut incoming = chunks(0..land.len(), chunk);
    let mut checked = false;
    loop {
        let out = outgoing.next();
        if let Some(piece) = out.clone() {
            t.send_frame(to, 0, &chunk_header(ours, piece.len()), &send[piece])?;
        }
        if !checked {
            same_call(rank, from, &t.recv_header(from, 0, name)?, ours)?;
            checked = true;
        }
        let Some(piece) = incoming.next() else {
            if out.is_none() {
                return Ok(());
            }
            continue;
        };
        expect_chunk(t, ours, from, piece.len())?;
        t.recv_payload(from, 0, name, &mut land[piece])?;
    }
}
