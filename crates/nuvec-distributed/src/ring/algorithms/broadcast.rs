//! Broadcast: every rank gets the root's array.
//!
//! - On one machine, through the mailboxes: the root posts its array to every rank, and every
//!   other rank posts an empty "here" to every rank. Each rank takes one post from every
//!   peer, so ranks that name different roots (whose headers differ, `Header::broadcast_bytes`)
//!   see it at their first take and fail naming both calls, instead of all waiting for a root
//!   that never posts. From [`ONE_COPY_FROM`] bytes the root posts where its array lies and
//!   the others read it from its memory (`single_copy.rs`), then tell the root they did;
//!   from [`BOTH_COPY_FROM`] bytes the root writes the last part of each reader's copy meanwhile.
//!   The root only reads its array, so its output is its input, uncopied
//!   (`Communicator::broadcast_unchanged`).
//! - Otherwise, along the ring from the root, chunk by chunk: each rank forwards what it
//!   receives, so every connection carries the array once and the chunks pipeline; an array
//!   of one chunk rides in the root's header frame.

use super::mailboxes::{pieces, start, Call};
use super::single_copy::{take_location, READ_AT, WHERE_AT};
use super::{tuning, Calls, CHUNK_BYTES};
use crate::ring::cross_memory::{Location, LOCATION_BYTES};
use crate::ring::transport::{same_call, Transport};
use crate::schedule::chunks;
use crate::tcp::frame::{Header, Kind};
use nuvec_core::{DType, Result};

/// The smallest broadcast read from the root's memory (as for all-gathers' blocks).
const ONE_COPY_FROM: usize = 32 << 10;
/// Broadcasts of at least this many bytes are copied by the root too, not only by its
/// readers (`in_one_copy`), and take that path without timing the mailboxes against it
/// (`tuning.rs`): the trials, where a root that only posts finishes early, took the
/// mailboxes in about half the runs, which then ran at 12–17 µs against 3.7–4.7. Below it
/// the reader's output is fresh memory (outputs are recycled from 64 KiB), which the root's
/// write would first have to fault in: a 48 KB broadcast took 7.9–8.4 µs so, 4.3 without
/// (`docs/performance.md`, "Tuning measurements").
const BOTH_COPY_FROM: usize = 64 << 10;
/// Where ranks outnumber cores (`Nearby::crowded`), broadcasts are copied by the root too
/// only from this many bytes: the root's writes into each reader then wait their turn for a
/// core the readers need. 4 ranks on the 2-core VM, 64 KB: 30–35 µs with the root writing,
/// 18–21 without; 128 KB 40–60 against 27–33; 1 MB about even (`docs/performance.md`,
/// "Tuning measurements").
const BOTH_COPY_CROWDED_FROM: usize = 1 << 20;
/// Where a rank's "here" post claims to be.
const HERE_AT: usize = usize::MAX - 3;
/// Where the root's post that says whether it wrote a reader's last part claims to be.
const WROTE_AT: usize = usize::MAX - 4;

/// A rank's side of a broadcast: the root's array, only read, or where another rank
/// receives it.
pub(crate) enum Data<'a> {
    Sent(&'a [u8]),
    Received(&'a mut [u8]),
}

impl Data<'_> {
    fn len(&self) -> usize {
        self.bytes().len()
    }

    /// The array as it is: the root's to send.
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Sent(data) => data,
            Data::Received(data) => data,
        }
    }

    /// Where the root's array goes, on a rank other than the root.
    fn receiver(&mut self, rank: usize) -> Result<&mut [u8]> {
        match self {
            Data::Received(data) => Ok(data),
            Data::Sent(_) => Err(nuvec_core::Error::Distributed {
                op: "broadcast".into(),
                rank: Some(rank),
                reason: format!("rank {rank} is not the root but was given nowhere to receive"),
            }),
        }
    }
}

/// Broadcast of the root's `data` over `data` on every rank.
pub(crate) fn broadcast<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    mut data: Data<'_>,
    (dtype, root): (DType, usize),
) -> Result<()> {
    if t.size() == 1 {
        return Ok(());
    }
    let bytes = Header::broadcast_bytes(data.len(), root);
    if let Some(near) = t.mailboxes() {
        let linux = cfg!(target_os = "linux");
        let by_reading = linux && data.len() >= ONE_COPY_FROM;
        // Reading the root's array or taking its posts: the crossing point is timed.
        let both_copy = written_by_root(data.len(), t.size(), near.crowded) > 0;
        let timed = linux && super::TUNED.contains(&data.len()) && !both_copy;
        let bucket = timed.then(|| tuning::bucket(Kind::Broadcast, t.size(), data.len()));
        return super::tuned(t, calls, bucket, |calls, path| {
            let call = start(t, near, calls, (Kind::Broadcast, dtype, bytes));
            match (path == tuning::Path::Thresholds) == by_reading {
                true => in_one_copy(&call, calls, &mut data, root),
                false => through_mailboxes(&call, &mut data, root),
            }
        });
    }
    let ours = calls.header(t, Kind::Broadcast, dtype, bytes);
    along_the_ring(t, ours, &mut data, root)
}

/// The root's posts of its array, or every other rank's "here"; then one take from every
/// peer, the root's array copied in.
fn through_mailboxes<T: Transport + ?Sized>(
    call: &Call<'_, T>,
    data: &mut Data<'_>,
    root: usize,
) -> Result<()> {
    let rank = call.t.rank();
    if rank == root {
        let data = data.bytes();
        for piece in pieces(data.len()) {
            for peer in call.others() {
                call.post(peer, piece.start, &data[piece.clone()])?;
            }
        }
        return take_heres(call, root);
    }
    let data = data.receiver(rank)?;
    for peer in call.others() {
        call.post(peer, HERE_AT, &[])?;
    }
    take_heres(call, root)?;
    for piece in pieces(data.len()) {
        let part = call.take(root, piece.start, piece.len())?;
        data[piece].copy_from_slice(part);
        call.release(root)?;
    }
    Ok(())
}

/// Takes the "here" of every rank other than this one and the root.
fn take_heres<T: Transport + ?Sized>(call: &Call<'_, T>, root: usize) -> Result<()> {
    for peer in call.others().filter(|&peer| peer != root) {
        call.take(peer, HERE_AT, 0)?;
        call.release(peer)?;
    }
    Ok(())
}

/// The root posts where its array lies; every other rank says it is here, reads the array
/// from the root's memory and tells the root whether it could (if not, the root posts the
/// array to it through the mailboxes, now and in later calls). From [`BOTH_COPY_FROM`] bytes
/// each reader reads only the array's first part: its "here" to the root says where the last
/// [`written_by_root`] bytes go, and the root writes them there meanwhile, then says whether
/// it could (if not, the reader reads them too).
fn in_one_copy<T: Transport + ?Sized>(
    call: &Call<'_, T>,
    calls: &mut Calls,
    data: &mut Data<'_>,
    root: usize,
) -> Result<()> {
    let known = &mut calls.cross_memory;
    let (rank, size) = (call.t.rank(), call.t.size());
    let tail = written_by_root(data.len(), size, call.near.crowded);
    if rank == root {
        let data = data.bytes();
        let readers: Vec<usize> = call
            .others()
            .filter(|p| !known.not_read_by.contains(p))
            .collect();
        let here = Location::of(data).encode();
        for &peer in &readers {
            call.post(peer, WHERE_AT, &here)?;
        }
        for peer in call.others() {
            if tail == 0 || !readers.contains(&peer) {
                call.take(peer, HERE_AT, 0)?;
                call.release(peer)?;
                continue;
            }
            let post = call.take(peer, HERE_AT, LOCATION_BYTES)?;
            let place = Location::decode(post).expect("a post of LOCATION_BYTES");
            call.release(peer)?;
            let allowed = call.near.reads_memory;
            let written = allowed && place.write_from(&data[data.len() - tail..]);
            call.post(peer, WROTE_AT, &[u8::from(written)])?;
        }
        for &peer in &readers {
            let read = call.take(peer, READ_AT, 1)?[0] == 1;
            call.release(peer)?;
            if !read {
                known.not_read_by.insert(peer);
            }
        }
        for piece in pieces(data.len()) {
            for &peer in &known.not_read_by {
                call.post(peer, piece.start, &data[piece.clone()])?;
            }
        }
        return Ok(());
    }
    let data = data.receiver(rank)?;
    let reads = !known.cannot_read.contains(&root);
    let tail = if reads { tail } else { 0 };
    let split = data.len() - tail;
    for peer in call.others() {
        if peer == root && tail > 0 {
            call.post(peer, HERE_AT, &Location::of(&data[split..]).encode())?;
        } else {
            call.post(peer, HERE_AT, &[])?;
        }
    }
    take_heres(call, root)?;
    if reads {
        let at = take_location(call, root, data.len())?;
        let (head, rest) = data.split_at_mut(split);
        let allowed = call.near.reads_memory;
        let mut read = at.part(0, split as u64).read_into(head, allowed);
        if tail > 0 {
            let written = call.take(root, WROTE_AT, 1)?[0] == 1;
            call.release(root)?;
            let rest_at = at.part(split as u64, tail as u64);
            read = read && (written || rest_at.read_into(rest, allowed));
        }
        call.post(root, READ_AT, &[u8::from(read)])?;
        if read {
            return Ok(());
        }
        known.cannot_read.insert(root);
    }
    for piece in pieces(data.len()) {
        let part = call.take(root, piece.start, piece.len())?;
        data[piece].copy_from_slice(part);
        call.release(root)?;
    }
    Ok(())
}

/// The bytes at the end of a broadcast array of `bytes` that the root writes into each
/// reader's memory on a group of `size` on one machine (`crowded`: with more ranks than
/// cores): a share of the copying as large as each reader's.
fn written_by_root(bytes: usize, size: usize, crowded: bool) -> usize {
    let from = if crowded {
        BOTH_COPY_CROWDED_FROM
    } else {
        BOTH_COPY_FROM
    };
    if bytes < from {
        return 0;
    }
    bytes / size
}

/// Along the ring from the root: every rank sends its header right and checks its left
/// neighbour called the same broadcast; the root's header carries its array when that fits
/// one chunk (one write), else the root sends it right chunk by chunk; each other rank
/// receives what comes from its left and forwards it unless its right is the root.
fn along_the_ring<T: Transport + ?Sized>(
    t: &T,
    ours: Header,
    data: &mut Data<'_>,
    root: usize,
) -> Result<()> {
    let n = t.size();
    let (rank, right, left) = (t.rank(), (t.rank() + 1) % n, (t.rank() + n - 1) % n);
    let forwards = right != root;
    // Nothing is reduced on the way, so the large passes' smaller chunks (kept in cache for
    // the sums) would only mean more frames: measured 5.6 against 5.9 ms for 16 MB on 2 ranks.
    let chunk = CHUNK_BYTES;
    let whole = data.len() <= chunk;
    let name = ours.kind.name();
    let pass = (ours.kind, ours.sequence);
    if rank == root {
        let data = data.bytes();
        t.send_frame(right, 0, &ours, if whole { data } else { &[] })?;
        if !whole {
            for piece in chunks(0..data.len(), chunk) {
                t.send_chunk((right, 0), pass, &data[piece])?;
            }
        }
        // The chain's last rank checked its own left; this checks it called the same.
        same_call(rank, left, &t.recv_header(left, 0, name)?, &ours)?;
        return t.flush(right, 0, name);
    }
    let data = data.receiver(rank)?;
    // Sent first even to the root, which reads it last: a rank never waits for a header
    // its left sends only later, whatever roots the ranks name.
    t.send_frame(right, 0, &ours, &[])?;
    same_call(rank, left, &t.recv_header(left, 0, name)?, &ours)?;
    if whole && left == root {
        t.recv_payload(left, 0, name, data)?;
    }
    for piece in chunks(0..data.len(), chunk) {
        if !(whole && left == root) {
            t.recv_chunk((left, 0), pass, &mut data[piece.clone()])?;
        }
        if forwards {
            t.send_chunk((right, 0), pass, &data[piece])?;
        }
    }
    t.flush(right, 0, name)
}
