//! Large all-gathers, all-to-alls and broadcasts of a group on one machine in one copy: each
//! rank reads what it needs straight out of the other rank's memory into its output (Linux's
//! cross-memory attach, `platform::read_process`), where the mailboxes and the ring copy every
//! byte twice (into shared memory, then out of it). The ranks only exchange two small posts
//! through their mailboxes:
//!
//! 1. every rank posts to every other where its block for it lies (process, address, length);
//! 2. every rank reads each peer's block, then posts whether it could;
//! 3. every rank waits until every peer has read its block, so that the block stays alive
//!    and unchanged until then (it is the call's input, which the call holds).
//!
//! The kernel allows the read only where one process may trace the other (the same user, and
//! no Yama or container rule against it); nuvec does not loosen that, as Open MPI does with
//! `PR_SET_PTRACER_ANY`. A refused read is not an error: the pair falls back to posting that
//! block in pieces through the mailboxes, and both ranks remember it for later calls (the
//! reader says so in step 2), so each later call goes straight to the posts for that pair.

use super::mailboxes::{pieces, start, Call};
use super::Calls;
use crate::ring::channels::Nearby;
use crate::ring::cross_memory::{Location, LOCATION_BYTES};
use crate::ring::transport::Transport;
use crate::tcp::frame::Kind;
use nuvec_core::{DType, Error, Result};
use std::collections::BTreeSet;

/// The smallest block (bytes one rank contributes) gathered by reading peers' memory. A
/// reasoned choice, not yet a measured one: from here a block's second copy (a few
/// microseconds) outweighs the second exchange of posts (about one on two ranks), and the
/// 2-rank all-gathers of 64 KB and up measured even with or ahead of Open MPI's single copy
/// (`docs/performance.md`).
const SINGLE_COPY_FROM: usize = 32 << 10;

/// A rank's own block of at least this many bytes is copied into its output with streaming
/// stores, which skip reading the output's lines into the cache first: on 2 ranks the 64 MB
/// all-gather took 9.2–10.5 ms with plain stores, 7.9–8.3 streaming; at 16 MB (blocks of 8
/// MiB) streaming was no faster (`docs/performance.md`, "Tuning measurements").
const STREAM_OWN_FROM: usize = 16 << 20;

/// Where a post that says where a block lies claims to be (no piece of a block lies there).
pub(super) const WHERE_AT: usize = usize::MAX - 1;
/// Where a post that says a block was read claims to be.
pub(super) const READ_AT: usize = usize::MAX - 2;

/// What the ranks of a group learned about reading each other's memory.
#[derive(Debug, Default)]
pub(crate) struct CrossMemory {
    /// Peers whose memory this rank may not read.
    pub(super) cannot_read: BTreeSet<usize>,
    /// Peers that may not read this rank's memory.
    pub(super) not_read_by: BTreeSet<usize>,
}

/// Whether an all-gather of `block` bytes per rank goes by reading peers' memory (on a group
/// whose ranks share this machine).
pub(crate) fn gathers_in_one_copy(block: usize) -> bool {
    cfg!(target_os = "linux") && block >= SINGLE_COPY_FROM
}

/// Copies this rank's own block into its place in the output.
fn copy_own(block: &[u8], into: &mut [u8]) {
    if block.len() >= STREAM_OWN_FROM {
        nuvec_cpu::copy_streaming(block, into);
    } else {
        into.copy_from_slice(block);
    }
}

/// Reads `peer`'s block into `into`, as its "where" post says: whether this rank may
/// (`NUVEC_RING_CROSS_MEMORY`) and the kernel allowed it.
pub(super) fn read_block<T: Transport + ?Sized>(
    call: &Call<'_, T>,
    peer: usize,
    into: &mut [u8],
) -> Result<bool> {
    let location = take_location(call, peer, into.len())?;
    Ok(location.read_into(into, call.near.reads_memory))
}

/// Takes `peer`'s "where" post, which must offer a block of `bytes`, and says where it lies.
pub(super) fn take_location<T: Transport + ?Sized>(
    call: &Call<'_, T>,
    peer: usize,
    bytes: usize,
) -> Result<Location> {
    let post = call.take(peer, WHERE_AT, LOCATION_BYTES)?;
    let location = Location::decode(post).expect("a post of LOCATION_BYTES");
    call.release(peer)?;
    if location.bytes != bytes as u64 {
        return Err(Error::Distributed {
            op: call.ours.kind.name().into(),
            rank: Some(peer),
            reason: format!(
                "rank {peer} offered a block of {} bytes for {}, where rank {} expected {bytes}",
                location.bytes,
                call.ours.describe(),
                call.t.rank(),
            ),
        });
    }
    Ok(location)
}

/// All-gather of every rank's `input` into `output` (rank `r`'s at block `r`), each peer's
/// block read from its memory.
pub(crate) fn all_gather<T: Transport + ?Sized>(
    t: &T,
    near: &Nearby,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    dtype: DType,
) -> Result<()> {
    let call = start(t, near, calls, (Kind::AllGather, dtype, input.len()));
    let (rank, block) = (t.rank(), input.len());
    let mut blocks: Vec<(usize, &mut [u8])> = output.chunks_mut(block).enumerate().collect();
    let (_, own) = blocks.remove(rank);
    let offers = call.others().map(|peer| (peer, input)).collect();
    let local = || copy_own(input, own);
    let by_posts = (Vec::new(), Vec::new());
    exchange(
        &call,
        &mut calls.cross_memory,
        ((offers, blocks), by_posts),
        local,
    )
}

/// An exchange of one region per rank on a group on one machine: `sends[j]` (this rank's
/// memory) goes to rank `j`, and what rank `j` sends lands in `lands[j]` (this rank's own in
/// place, copied). A pair whose region holds `one_copy_from` bytes or more is read from the
/// sender's memory, the others go in pieces through the mailboxes (both ends of a pair see
/// the same size, so they agree). All-to-alls, fixed and variable.
pub(crate) fn exchange_regions<T: Transport + ?Sized>(
    (t, near): (&T, &Nearby),
    calls: &mut Calls,
    (kind, dtype, bytes): (Kind, DType, usize),
    (sends, lands): (Vec<&[u8]>, Vec<&mut [u8]>),
    one_copy_from: usize,
) -> Result<()> {
    let call = start(t, near, calls, (kind, dtype, bytes));
    let rank = t.rank();
    let mut sends: Vec<Region<'_>> = sends.into_iter().enumerate().collect();
    let (_, mine) = sends.remove(rank);
    let mut lands: Vec<Landing<'_>> = lands.into_iter().enumerate().collect();
    let (_, own) = lands.remove(rank);
    // Each rank starts with the rank after it, so that the ranks do not all read one peer's
    // memory first.
    sends.rotate_left(rank);
    lands.rotate_left(rank);
    let by_reading = |len: usize| cfg!(target_os = "linux") && len >= one_copy_from;
    // Small regions (every one, in a small call) all go through the mailboxes: the lists
    // serve as they are, without the two partitions' allocations on each call's path.
    let any_read = sends.iter().any(|(_, r)| by_reading(r.len()))
        || lands.iter().any(|(_, r)| by_reading(r.len()));
    let ((offers, posted), (reads, taken)) = if any_read {
        (
            sends.into_iter().partition(|(_, r)| by_reading(r.len())),
            lands.into_iter().partition(|(_, r)| by_reading(r.len())),
        )
    } else {
        ((Vec::new(), sends), (Vec::new(), lands))
    };
    let local = || copy_own(mine, own);
    let known = &mut calls.cross_memory;
    exchange(&call, known, ((offers, reads), (posted, taken)), local)
}

/// A peer and the region of this rank's memory offered to it.
type Region<'a> = (usize, &'a [u8]);
/// A peer and where what it offers this rank goes.
type Landing<'a> = (usize, &'a mut [u8]);

/// The regions of one exchange: offered to be read and read, or posted and taken.
type Regions<'a, 'b> = (Vec<Region<'a>>, Vec<Landing<'b>>);

/// One call's exchange through each other's memory: this rank offers each peer of `offers`
/// its region, and reads from each peer of `reads` the region that peer offers it; `local`
/// (this rank's own block) runs once its reads are done and told, while peers may still be
/// reading this rank's memory. The regions of `posted` and `taken`, and those of a pair
/// whose read the kernel refuses (now and later), go in pieces through the mailboxes.
fn exchange<T: Transport + ?Sized>(
    call: &Call<'_, T>,
    known: &mut CrossMemory,
    ((offers, reads), (mut posted, mut taken)): (Regions<'_, '_>, Regions<'_, '_>),
    local: impl FnOnce(),
) -> Result<()> {
    let (mut offered, refused): (Vec<_>, Vec<_>) = offers
        .into_iter()
        .partition(|(peer, _)| !known.not_read_by.contains(peer));
    posted.extend(refused);
    let (to_read, refused): (Vec<_>, Vec<_>) = reads
        .into_iter()
        .partition(|(peer, _)| !known.cannot_read.contains(peer));
    taken.extend(refused);
    for (peer, region) in &offered {
        call.post(*peer, WHERE_AT, &Location::of(region).encode())?;
    }
    for (peer, into) in to_read {
        let read = read_block(call, peer, into)?;
        call.post(peer, READ_AT, &[u8::from(read)])?;
        if !read {
            known.cannot_read.insert(peer);
            taken.push((peer, into));
        }
    }
    local();
    for (peer, region) in offered.drain(..) {
        let read = call.take(peer, READ_AT, 1)?[0] == 1;
        call.release(peer)?;
        if !read {
            known.not_read_by.insert(peer);
            posted.push((peer, region));
        }
    }
    // The regions no read could fetch go through the mailboxes, piece by piece: each rank
    // posts piece k to every such peer before it takes any peer's piece k.
    let most = posted
        .iter()
        .map(|(_, r)| r.len())
        .chain(taken.iter().map(|(_, r)| r.len()))
        .max();
    let Some(most) = most else {
        return Ok(());
    };
    for k in 0..pieces(most).count() {
        for (peer, region) in &posted {
            if let Some(piece) = pieces(region.len()).nth(k) {
                call.post(*peer, piece.start, &region[piece.clone()])?;
            }
        }
        for (peer, into) in &mut taken {
            if let Some(piece) = pieces(into.len()).nth(k) {
                let part = call.take(*peer, piece.start, piece.len())?;
                into[piece].copy_from_slice(part);
                call.release(*peer)?;
            }
        }
    }
    Ok(())
}
