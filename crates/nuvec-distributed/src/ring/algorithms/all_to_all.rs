//! All-to-all: block `j` of every rank's input goes to rank `j`, which puts the block from
//! rank `i` at block `i` of its output.
//!
//! - On one machine, through the mailboxes: every rank posts block `j` to rank `j` and takes
//!   its block from every peer; blocks of [`ONE_COPY_FROM`] bytes or more are read straight
//!   from the peers' memory instead (`single_copy.rs`).
//! - Where every rank reaches every other: in `size − 1` steps, at step `s` each rank sends
//!   its block for rank `r + s` and receives the block of rank `r − s`, chunk by chunk, so
//!   every block crosses one connection once.
//! - Otherwise the caller falls back to the communicator's default (an all-gather).

use super::mailboxes::{pieces, start};
use super::{chunk_bytes, single_copy, Calls};
use crate::ring::transport::{same_call, Transport};
use crate::schedule::chunks;
use crate::tcp::frame::Kind;
use nuvec_core::{DType, Result};

/// The smallest block read from a peer's memory (as for all-gathers).
const ONE_COPY_FROM: usize = 32 << 10;

/// Whether this transport has a path for all-to-all (else the default's all-gather).
pub(crate) fn has_path<T: Transport + ?Sized>(t: &T) -> bool {
    t.size() == 1 || t.mailboxes().is_some() || t.full_mesh()
}

/// All-to-all of `input` into `output` (as long; both `size` blocks).
pub(crate) fn all_to_all<T: Transport + ?Sized>(
    t: &T,
    calls: &mut Calls,
    (input, output): (&[u8], &mut [u8]),
    dtype: DType,
) -> Result<()> {
    let (rank, n) = (t.rank(), t.size());
    let block = input.len() / n;
    if n == 1 {
        output.copy_from_slice(input);
        return Ok(());
    }
    let of = |j: usize| j * block..(j + 1) * block;
    if let Some(near) = t.mailboxes() {
        if cfg!(target_os = "linux") && block >= ONE_COPY_FROM {
            return single_copy::all_to_all(t, near, calls, (input, output), dtype);
        }
        let call = start(t, near, calls, (Kind::AllToAll, dtype, input.len()));
        output[of(rank)].copy_from_slice(&input[of(rank)]);
        for piece in pieces(block) {
            for peer in call.after_me() {
                let at = of(peer).start + piece.start;
                call.post(peer, piece.start, &input[at..at + piece.len()])?;
            }
            for peer in call.after_me() {
                let at = of(peer).start + piece.start;
                let part = call.take(peer, piece.start, piece.len())?;
                output[at..at + piece.len()].copy_from_slice(part);
                call.release(peer)?;
            }
        }
        return Ok(());
    }
    let ours = calls.header(t, Kind::AllToAll, dtype, input.len());
    let kind = Kind::AllToAll;
    let pass = (kind, ours.sequence);
    output[of(rank)].copy_from_slice(&input[of(rank)]);
    for step in 1..n {
        let (to, from) = ((rank + step) % n, (rank + n - step) % n);
        // The header, then the block in chunks, each sent before the same chunk is received:
        // every rank sends to one and receives from another, and the sockets keep moving.
        t.send_frame(to, 0, &ours, &[])?;
        let mut checked = false;
        for piece in chunks(0..block, chunk_bytes(input.len())) {
            let (send, recv) = (of(to).start + piece.start, of(from).start + piece.start);
            t.send_chunk((to, 0), pass, &input[send..send + piece.len()])?;
            if !checked {
                same_call(rank, from, &t.recv_header(from, 0, kind.name())?, &ours)?;
                checked = true;
            }
            t.recv_chunk((from, 0), pass, &mut output[recv..recv + piece.len()])?;
        }
        if !checked {
            same_call(rank, from, &t.recv_header(from, 0, kind.name())?, &ours)?;
        }
    }
    for peer in (0..n).filter(|&p| p != rank) {
        t.finish_exchange(peer, kind.name())?;
    }
    Ok(())
}
