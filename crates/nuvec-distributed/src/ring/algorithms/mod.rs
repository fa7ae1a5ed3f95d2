//! The ring backend's collective algorithms, written against [`Transport`] alone: the ring's
//! two phases chunk by chunk (`ring_phases.rs`, `reduce_scatter.rs`), the outbox that paces
//! their sends (`outbox.rs`), large all-reduces split over lanes (`lanes.rs`), and the latency
//! paths for small collectives, through every rank's mailbox where the group shares one
//! machine (`mailboxes.rs`; large all-gathers there read each other's memory,
//! `single_copy.rs`), through rank 0 (`star.rs`) or by recursive doubling
//! (`doubling.rs`). This file picks the path for each call. `../README.md` has the glossary of
//! the words for pieces of a buffer.

pub(crate) mod all_to_all;
pub(crate) mod broadcast;
pub(crate) mod doubling;
pub(crate) mod lanes;
mod mailboxes;
pub(crate) mod outbox;
mod reduce_scatter;
mod ring_phases;
mod single_copy;
pub(crate) mod star;
pub(crate) mod tuning;

use super::transport::{Link, Transport};
use crate::schedule::chunks;
use crate::tcp::frame::{Header, Kind};
use nuvec_core::distributed::ReduceOp;
use nuvec_core::{DType, Result};
use outbox::{Outbox, OwnBlock};

/// Bytes per pipelined chunk: large enough for efficient syscalls, small enough that
/// reducing one chunk overlaps receiving the next. The largest chunk; see [`chunk_bytes`].
pub(crate) const CHUNK_BYTES: usize = 512 * 1024;
/// Passes over at least this many bytes use [`LARGE_PASS_CHUNK_BYTES`].
const SMALLER_CHUNKS_FROM: usize = 4 << 20;
/// Bytes per chunk of a pass over [`SMALLER_CHUNKS_FROM`] bytes or more.
const LARGE_PASS_CHUNK_BYTES: usize = 128 * 1024;

/// Bytes per chunk of a ring pass over `bytes` (an all-reduce's buffer or lane, an
/// all-gather's output, a reduce-scatter's input); both ends of every connection compute it
/// from the same size. Large passes use smaller chunks: fewer bytes in flight on each
/// connection keep the chunks being received and reduced in the cores' caches. Smaller chunks
/// start at [`SMALLER_CHUNKS_FROM`]: passes of 2 MB lost with them (measured with sends in
/// pieces of `tcp::SEND_PIECE`: `docs/performance.md`, "Tuning measurements").
pub(crate) fn chunk_bytes(bytes: usize) -> usize {
    if bytes >= SMALLER_CHUNKS_FROM {
        LARGE_PASS_CHUNK_BYTES
    } else {
        CHUNK_BYTES
    }
}

/// The frame kind of a reduction.
pub(crate) fn kind_of(op: ReduceOp) -> Kind {
    match op {
        ReduceOp::Sum => Kind::AllSum,
        ReduceOp::Max => Kind::AllMax,
        ReduceOp::Min => Kind::AllMin,
    }
}

/// What the collectives of one group keep between calls: how many ran (each call's sequence
/// number), the scratch buffers chunks are received into, and which ranks may read each
/// other's memory.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    collectives: u64,
    scratch: Vec<u8>,
    lane_scratch: Vec<Vec<u8>>,
    cross_memory: single_copy::CrossMemory,
    /// The paths chosen by timing (`tuning.rs`).
    pub(crate) tuning: tuning::Tuning,
}

/// The sizes (bytes a rank contributes) at which a collective on one machine times its two
/// paths; past them one path is far ahead and trials would only cost time.
pub(super) const TUNED: std::ops::RangeInclusive<usize> = (8 << 10)..=(4 << 20);

/// Runs a call of `bucket` (or, without one, on the thresholds' path) on the path `run` is
/// given, timing it; when the bucket's trials end, agrees with the other ranks on its path
/// (`tuning.rs`).
pub(super) fn tuned<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    bucket: Option<tuning::Bucket>,
    run: impl FnOnce(&mut Calls, tuning::Path) -> Result<()>,
) -> Result<()> {
    let Some(bucket) = bucket else {
        return run(calls, tuning::Path::Thresholds);
    };
    let path = calls.tuning.next(bucket);
    let start = std::time::Instant::now();
    run(calls, path)?;
    if let Some(mine) = calls.tuning.record(bucket, path, start.elapsed()) {
        let mut agreed: Vec<u8> = mine.iter().flat_map(|m| m.to_le_bytes()).collect();
        all_reduce(t, calls, (None, &mut agreed), (DType::F64, ReduceOp::Max))?;
        let at = |i: usize| f64::from_le_bytes(agreed[8 * i..8 * i + 8].try_into().expect("8"));
        calls.tuning.decide(bucket, [at(0), at(1)]);
    }
    Ok(())
}

impl Calls {
    /// The header of the collective starting now, which counts it and which the transport
    /// then checks other ranks' frames against.
    pub(crate) fn header<T: Transport + ?Sized>(
        &mut self,
        transport: &T,
        kind: Kind,
        dtype: DType,
        bytes: usize,
    ) -> Header {
        let header = Header {
            kind,
            dtype,
            sequence: self.collectives,
            bytes: bytes as u64,
        };
        self.collectives += 1;
        transport.begin(&header);
        header
    }

    /// The scratch buffer, at least `bytes` long.
    pub(crate) fn scratch(&mut self, bytes: usize) -> &mut [u8] {
        self.scratch.resize(self.scratch.len().max(bytes), 0);
        &mut self.scratch[..bytes]
    }
}

/// The all-reduce into `data` of `input` when given (else of `data` itself): through rank 0
/// or by recursive doubling when small and every rank reaches every other, else around the
/// ring, over several lanes when large.
pub(crate) fn all_reduce<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (input, data): (Option<&[u8]>, &mut [u8]),
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    if t.size() == 1 {
        if let Some(input) = input {
            data.copy_from_slice(input);
        }
        return Ok(());
    }
    let (n, bytes) = (t.size(), data.len());
    let near = t.mailboxes();
    let by_mailboxes = mailboxes::uses_mailboxes(n, bytes, true);
    if let Some(near) = near {
        // On two ranks the mailboxes and the ring give the same bits (a + b is b + a): the
        // crossing point between them is timed.
        if n == 2 && TUNED.contains(&bytes) && bytes <= TWO_RANK_TUNED_TO {
            let bucket = tuning::bucket(kind_of(op), n, bytes);
            return tuned(t, calls, Some(bucket), |calls, path| {
                match (path == tuning::Path::Thresholds) == by_mailboxes {
                    true => mailboxes::all_reduce(t, near, calls, (input, data), (dtype, op)),
                    false => over_connections(t, calls, (input, data), (dtype, op)),
                }
            });
        }
        if by_mailboxes {
            if mailboxes::reduces_in_blocks(n, bytes) {
                return mailboxes::all_reduce_in_blocks(t, near, calls, (input, data), (dtype, op));
            }
            return mailboxes::all_reduce(t, near, calls, (input, data), (dtype, op));
        }
    }
    over_connections(t, calls, (input, data), (dtype, op))
}

/// The largest two-rank all-reduce whose path is timed.
const TWO_RANK_TUNED_TO: usize = 1 << 20;

/// The all-reduce over the connections (and channels): through rank 0, by recursive
/// doubling, or round the ring.
fn over_connections<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (input, data): (Option<&[u8]>, &mut [u8]),
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    let star = t.full_mesh() && star::uses_star(t.size(), data.len());
    if star || (t.full_mesh() && doubling::uses_doubling(t.size(), data.len())) {
        if let Some(input) = input {
            data.copy_from_slice(input);
        }
        return if star {
            star::all_reduce(t, calls, data, (dtype, op))
        } else {
            doubling::all_reduce(t, calls, data, (dtype, op))
        };
    }
    let lanes = lanes::plan(t.size(), t.ring_connections(), data.len());
    let sequence = calls.header(t, kind_of(op), dtype, data.len()).sequence;
    if let [lane] = lanes[..] {
        let scratch = &mut calls.scratch;
        return lanes::all_reduce_lane(t, (lane, sequence), (input, data), (dtype, op), scratch);
    }
    let scratches = &mut calls.lane_scratch;
    lanes::all_reduce_lanes(t, (&lanes, sequence), (input, data), (dtype, op), scratches)
}

/// The all-gather of every rank's `input` into `output` (rank `r`'s at block `r`).
pub(crate) fn all_gather<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    dtype: DType,
) -> Result<()> {
    if t.size() == 1 {
        output.copy_from_slice(input);
        return Ok(());
    }
    let near = t.mailboxes();
    let by_reading = single_copy::gathers_in_one_copy(input.len());
    let fits = mailboxes::uses_mailboxes(t.size(), output.len(), false);
    if let Some(near) = near {
        // Reading the peers' blocks or posting them: the crossing point is timed.
        let both = fits && cfg!(target_os = "linux") && TUNED.contains(&input.len());
        let bucket = both.then(|| tuning::bucket(Kind::AllGather, t.size(), input.len()));
        if by_reading || fits {
            return tuned(t, calls, bucket, |calls, path| {
                match (path == tuning::Path::Thresholds) == by_reading {
                    true => single_copy::all_gather(t, near, calls, (input, output), dtype),
                    false => mailboxes::all_gather(t, near, calls, (input, output), dtype),
                }
            });
        }
    }
    let block = input.len();
    let own = t.rank() * block..(t.rank() + 1) * block;
    if t.full_mesh() && star::uses_star(t.size(), output.len()) {
        output[own].copy_from_slice(input);
        return star::all_gather(t, calls, output, (block, dtype));
    }
    if t.full_mesh() && doubling::uses_doubling(t.size(), output.len()) {
        output[own].copy_from_slice(input);
        return doubling::all_gather(t, calls, output, (block, dtype));
    }
    let kind = Kind::AllGather;
    let ours = calls.header(t, kind, dtype, input.len());
    let link = Link::open(t, 0, false, ours)?;
    // Blocks are the segments of the gathered array. This rank's own goes right straight
    // from the input and is copied into place while the others arrive.
    let width = dtype.size();
    let elements = block / width;
    let mut outbox = Outbox::new(link.window(), Some(input));
    for piece in chunks(0..elements, (chunk_bytes(output.len()) / width).max(1)) {
        outbox.push_input(piece.start * width..piece.end * width);
    }
    outbox.pump(&link, output)?;
    link.check_left()?;
    let mut own_block = OwnBlock::new(input, own.start);
    ring_phases::all_gather_phase(&link, output, width, &mut outbox, Some(&mut own_block))?;
    link.flush_right()
}

/// This rank's block of the reduction of every rank's `input` into `output`.
pub(crate) fn reduce_scatter<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    (dtype, op): (DType, ReduceOp),
) -> Result<()> {
    if t.size() == 1 {
        output.copy_from_slice(input);
        return Ok(());
    }
    let near = t.mailboxes();
    if let Some(near) = near.filter(|_| mailboxes::uses_mailboxes(t.size(), input.len(), false)) {
        return mailboxes::reduce_scatter(t, near, calls, (input, output), (dtype, op));
    }
    if t.full_mesh() && star::uses_star(t.size(), input.len()) {
        return star::reduce_scatter(t, calls, (input, output), (dtype, op));
    }
    if t.size() == 2 && doubling::uses_doubling(t.size(), input.len()) {
        return doubling::reduce_scatter_pair(t, calls, (input, output), (dtype, op));
    }
    let ours = calls.header(t, Kind::SumScatter, dtype, input.len());
    let link = Link::open(t, 0, false, ours)?;
    reduce_scatter::reduce_scatter_into(&link, (input, output), (dtype, op), &mut calls.scratch)?;
    link.flush_right()
}
